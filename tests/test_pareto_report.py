"""`milp-planner report --pareto`: NSGA-II's set against the certified front, end to end."""

import json
from pathlib import Path

import pytest

from milp_planner.cli import main
from milp_planner.report.pareto_section import compare, parse_pareto_spec
from milp_planner.errors import PlannerError
from milp_planner.instance import load_instance

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "instances/examples/tiny-fc-2dev.yaml"


@pytest.mark.slow
def test_report_pareto_section_end_to_end(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", str(TINY), "--planners", "offload", "--repeats", "1", "--time-limit", "120",
                 "--workers", "1", "--quiet", "--out", str(out), "--pareto", "latency,energy",
                 "--pareto", "tiny-fc-2dev=period,memory,energy"]) == 0
    assert "pareto.json" in capsys.readouterr().out
    data = json.loads((out / "pareto.json").read_text())
    assert [d["objectives"] for d in data] == [["latency", "energy"], ["period", "memory", "energy"]]
    for d in data:
        assert d["certified"] and d["front"] and d["nsga"]
        # a certified front is the true front: NSGA-II's plans are feasible plans, so each lies
        # above some front point, and its hypervolume cannot exceed the front's (one reference)
        for v in d["nsga"]:
            assert any(all(a <= b * (1 + 1e-9) for a, b in zip(f, v)) for f in d["front"]), v
        assert 0 < d["ratio"] <= 1 + 1e-9 and d["ratio_lower"] == d["ratio"]
        assert len(d["reference_point"]) == len(d["objectives"])
    md = (out / "report.md").read_text()
    assert "## Pareto fronts against NSGA-II" in md and md.index("Pareto fronts") < md.index("Runs that failed")
    assert "figure not drawn" not in md
    figs = sorted(p.name for p in (out / "figures").glob("pareto-*.png"))
    assert len(figs) == 2 and all((out / "figures" / f).stat().st_size > 5000 for f in figs)
    html = (out / "report.html").read_text()
    assert 'id="pareto"' in html and html.count("data:image/png;base64") >= 4


def test_compare_certified_front_bounds_nsga():
    c = compare(load_instance(TINY), ["latency", "period"], time_limit=30)
    assert c.front.certified and c.nsga
    assert 0 < c.ratio <= 1 + 1e-9 and c.ratio_lower == c.ratio
    for v in c.nsga:
        assert any(all(a <= b * (1 + 1e-9) for a, b in zip(f, v)) for f in c.front.vectors())


def test_bounded_front_ratios_bracket(tmp_path):
    """Stopped at 1 ms, the front is not certified: the proven ratio (to the bound set) is at most
    the ratio to the points found."""
    inst = load_instance(TINY)
    c = compare(inst, ["latency", "energy"], time_limit=1e-3, nsga_time_limit=10)
    assert not c.front.certified
    if c.front.points:
        assert c.ratio_lower <= c.ratio
    assert c.to_dict()["certified"] is False


def test_bad_pareto_items_are_one_line_errors(tmp_path, capsys):
    for item, word in (("latency,speed", "speed"), ("nope=latency,energy", "no such instance"),
                       ("latency", "2 or 3")):
        assert main(["report", str(TINY), "--planners", "offload", "--out", str(tmp_path / "r"), "--quiet",
                     "--pareto", item]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and word in err and "--pareto" in err, err
    with pytest.raises(PlannerError, match="period"):
        parse_pareto_spec("x=period")

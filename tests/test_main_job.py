"""The main job: the packaged edge-3dev example, and what `solve` prints about it.

The example must show what the product is for: a certified plan that splits layers across
devices and fuses layers into stages. `solve` must print the plan, the certificate and the
baselines' distance to it; `--json` must carry the baselines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from milp_planner.cli import main
from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance import load_instance
from milp_planner.planners import get_planner
from milp_planner.planners.base import Planner
from milp_planner.report import baselines as bl

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def edge():
    return load_instance("example:edge-3dev")


@pytest.fixture(scope="module")
def edge_result(edge):
    return get_planner("milp").solve(edge, objective="latency", time_limit=120, threads=2)


def test_packaged_edge_example_is_the_instances_twin(edge):
    twin = load_instance(ROOT / "instances" / "examples" / "edge-3dev.yaml")
    assert [d.compute for d in edge.devices] == [d.compute for d in twin.devices]
    assert edge.network == twin.network and edge.search == twin.search and edge.dtype_bytes == twin.dtype_bytes
    assert [d.profile for d in edge.devices] == ["rpi4", "jetson-nano", "gemmini-500mhz"]


def test_edge_example_certifies_a_plan_that_splits_and_fuses(edge, edge_result):
    r = edge_result
    assert r.status == "optimal" and r.gap is not None and r.gap <= 1e-6
    m = evaluate(r.plan, edge)
    assert m.feasible and m.in_space
    assert m.latency_s == pytest.approx(r.value, rel=1e-9)
    stages = r.plan.stages
    split = [s for s in stages if len(s.parts) > 1 and s.axis in ("rows", "channels")]
    fused = [s for s in stages if s.last > s.first]
    assert split and fused
    # at least one stage does both: several layers, their rows split over several devices
    assert any(s.last > s.first and len(s.parts) > 1 and s.axis == "rows" for s in stages)
    # and more than one device computes: the split is real work, not an empty part
    assert len({p.device for s in split for p in s.parts}) >= 2


def test_solve_prints_plan_certificate_and_baselines(capsys):
    assert main(["solve", "example:edge-3dev", "--quiet", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    assert "plan: " in out and "split across devices" in out
    assert re.search(r"^\s*0\s+0-2 .*rows\s+\S+\s+rows 0:\d+", out, re.M)  # the first stage, split by rows
    assert "certificate (milp)" in out
    for key in ("status      optimal", "latency", "bound", "gap", "bound from", "space", "time"):
        assert key in out, key
    assert "vs the certified optimum" in out
    for name in bl.DEFAULT_BASELINES:
        assert re.search(rf"^\s+{name}\s+[\d.]+ ms\s+\+[\d.]+ %", out, re.M), name


def test_solve_json_has_baselines_measured_against_the_result(capsys):
    assert main(["solve", "example:tiny-2dev", "--json", "--compare", "neurosurgeon,coopai,modnn"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal" and out["bound_source"]
    names = [b["planner"] for b in out["baselines"]]
    assert names == ["neurosurgeon", "coopai", "modnn"]
    for b in out["baselines"]:
        assert b["status"] == "feasible" and b["objective"] >= out["objective"] * (1 - 1e-9)
        assert b["vs_result"] == pytest.approx((b["objective"] - out["objective"]) / out["objective"])
        assert b["source"] and isinstance(b["in_space"], bool)


def test_exact_planners_compare_by_default_heuristics_do_not(capsys):
    assert main(["solve", "example:tiny-2dev", "--json", "--planner", "dp"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [b["planner"] for b in out["baselines"]] == list(bl.DEFAULT_BASELINES)
    assert main(["solve", "example:tiny-2dev", "--json", "--planner", "coopai"]) == 0
    assert "baselines" not in json.loads(capsys.readouterr().out)
    assert main(["solve", "example:tiny-2dev", "--json", "--compare", "none"]) == 0
    assert "baselines" not in json.loads(capsys.readouterr().out)


def test_heuristic_result_is_not_called_a_certificate(capsys):
    assert main(["solve", "example:tiny-2dev", "-q", "--planner", "coopai", "--compare", "modnn"]) == 0
    out = capsys.readouterr().out
    assert "certificate" not in out and "no proof" in out
    assert "vs coopai's plan" in out and re.search(r"^\s+modnn\s", out, re.M)


def test_compare_with_an_unknown_planner_is_a_one_line_error(capsys):
    assert main(["solve", "example:tiny-2dev", "--compare", "modnn,nosuch"]) == 2
    err = capsys.readouterr().err
    assert "--compare" in err and "nosuch" in err and "Traceback" not in err


def test_a_baseline_past_its_time_limit_is_stopped(edge):
    rows = bl.run_baselines(edge, ["neurosurgeon"], reference=0.1, objective="latency", time_limit=0.0)
    assert rows[0].status == "timeout" and rows[0].value is None and rows[0].vs_reference is None


def test_a_failing_baseline_is_reported_not_raised(edge, monkeypatch):
    class Broken(Planner):
        name = "broken"
        source = "nowhere"

        def search(self, instance, ctx):
            raise PlannerError("cannot handle this model")

    monkeypatch.setattr(bl, "planner_class", lambda name: Broken)
    rows = bl.run_baselines(edge, ["broken"], reference=0.1, objective="latency")
    assert rows[0].status == "error" and "cannot handle" in rows[0].message


def test_parse_baselines():
    assert bl.parse_baselines(None, "milp") == list(bl.DEFAULT_BASELINES)
    assert bl.parse_baselines(None, "offload") == []
    assert bl.parse_baselines("none", "milp") == []
    assert bl.parse_baselines("modnn, coopai,modnn", "coopai") == ["modnn"]
    with pytest.raises(PlannerError, match="--compare"):
        bl.parse_baselines("modnn,nosuch", "milp")

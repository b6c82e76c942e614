"""The certification benchmark (benchmarks/bench_certify.py) and its fleet instance files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_certify.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_certify as bc  # noqa: E402


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--cache", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "c.md"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]


def test_one_tiny_instance_end_to_end(tmp_path):
    """A run records the exact planner and the baselines, renders the table, and resumes from the cache."""
    proc = run(tmp_path, "--only", "examples/tiny-2dev.yaml", "--objectives", "latency", "--time-limit", "20",
               "--baselines", "offload,modnn", "--baseline-time-limit", "20")
    assert "[2/2] examples/tiny-2dev.yaml latency exact dp: optimal" in proc.stdout
    recs = {r["kind"]: r for r in records(tmp_path)}
    assert set(recs) == {"exact", "baselines"}
    exact = recs["exact"]
    assert exact["status"] == "optimal" and exact["gap"] == 0 and exact["bound_source"]
    assert exact["value"] == pytest.approx(1.5365546666666666e-3)
    assert [b["planner"] for b in recs["baselines"]["baselines"]] == ["offload", "modnn"]
    md = (tmp_path / "c.md").read_text()
    assert "| examples | 1 | 1 | 1 | 1 |" in md  # summary: one run, certified, within 1 %, target met
    row = next(line for line in md.splitlines() if line.startswith("| tiny-2dev.yaml | latency |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:7] == ["dp 20 s", "optimal", "1.537 ms", "1.537 ms", "0"]
    assert cells[9] == "offload 1.537 ms" and cells[10].startswith("every file: met; tiny instances:")
    assert "Machine:" in md and "cores" in md and "| tiny instances | certified in <= 1 s per solve | 1 |" in md
    again = run(tmp_path, "--only", "examples/tiny-2dev.yaml", "--objectives", "latency", "--time-limit", "20",
                "--baselines", "offload,modnn", "--baseline-time-limit", "20")
    assert "0 to run" in again.stdout and len(records(tmp_path)) == 2
    md = (tmp_path / "c.md").read_text()  # the rerun's page: the same rows, its own date
    (tmp_path / "c.md").unlink()
    run(tmp_path, "--render-only")
    assert (tmp_path / "c.md").read_text() == md


def test_a_child_past_its_limit_is_killed_and_recorded(tmp_path):
    run(tmp_path, "--only", "examples/tiny-2dev.yaml", "--objectives", "latency", "--time-limit", "0.05",
        "--kill-grace", "0", "--baselines", "none")
    (rec,) = records(tmp_path)
    assert rec["status"] == "killed" and rec["value"] is None and "killed at 0.05 s" in rec["message"]
    assert "| tiny-2dev.yaml | latency | dp 0.05 s | killed |" in (tmp_path / "c.md").read_text()


def test_a_child_over_its_memory_limit_is_recorded(tmp_path):
    run(tmp_path, "--only", "examples/tiny-2dev.yaml", "--objectives", "latency", "--memory-limit-gb", "0.05",
        "--baselines", "none")
    (rec,) = records(tmp_path)
    assert rec["status"] == "memory" and "0.05 GB" in rec["message"]
    md = (tmp_path / "c.md").read_text()
    assert "| tiny-2dev.yaml | latency | dp 60 s | memory |" in md and "tiny instances: **missed** (memory, no plan)" in md


def record(**kw) -> bc.Record:
    base = dict(kind="exact", instance="coopai/x.yaml", group="coopai", objective="latency", planner="dp",
                time_limit=60.0, options=[], status="timeout", value=1.0, bound=0.995, gap=0.005, feasible=True,
                solve_time_s=60.0)
    return bc.Record(**{**base, **kw})


def test_target_rules():
    every = bc.TARGETS[0]
    worse = record(kind="baselines", baselines=[{"planner": "coopai", "objective": 0.99, "feasible": True}])
    better = record(kind="baselines", baselines=[{"planner": "coopai", "objective": 1.01, "feasible": True},
                                                 {"planner": "modnn", "objective": 0.5, "feasible": False}])
    assert bc.meets(every, record(), better) == (True, "")
    assert bc.meets(every, record(), worse) == (False, "worse than coopai")
    assert bc.meets(every, record(gap=0.02, bound=0.98), better) == (False, "gap 2.00 %")
    assert bc.meets(every, record(gap=0.0, bound=1.0, status="optimal"), worse) == (True, "")
    assert bc.meets(every, record(value=None, status="killed"), better) == (False, "killed, no plan")
    assert bc.meets(every, record(), None) == (None, "baselines not run")
    tiny = next(t for t in bc.TARGETS if t.name == "tiny instances")
    assert bc.meets(tiny, record(gap=0.0, solve_time_s=0.4), None) == (True, "")
    assert bc.meets(tiny, record(gap=0.0, solve_time_s=1.4), None) == (False, "1.4 s")
    names = {f: [t.name for t in bc.targets_of(f)] for f in
             ("fleet/vgg16-16dev-4types.yaml", "fleet/vgg16-8distinct.yaml", "fleet/googlenet-4dev.yaml",
              "fleet/vgg16-4dev-uncapped.yaml", "examples/tiny-fc-2dev.yaml", "examples/edge-3dev.yaml")}
    assert names == {
        "fleet/vgg16-16dev-4types.yaml": ["every file", "typed fleets, binding caps"],
        "fleet/vgg16-8distinct.yaml": ["every file", "8 all-distinct devices"],
        "fleet/googlenet-4dev.yaml": ["every file", "Inception, DenseNet-121 on 4 devices"],
        "fleet/vgg16-4dev-uncapped.yaml": ["every file", "4-device VGG16 without caps"],
        "examples/tiny-fc-2dev.yaml": ["every file", "tiny instances"],
        "examples/edge-3dev.yaml": ["every file"],
    }


def test_limits_section_counts_overruns_and_memory_over_the_budget():
    ok = record(solve_time_s=61.0, max_rss_mb=900.0)
    late = record(instance="fleet/late.yaml", solve_time_s=65.5, max_rss_mb=bc.BUDGET_MIB + 10)
    text = "\n".join(bc.limits_section([ok, late]))
    assert "1 of 2 runs within the rule" in text
    assert "+5.50 s (fleet/late.yaml latency, limit 60 s): over the rule: fleet/late.yaml latency 65.5 s" in text
    assert "1 of 2 runs above" in text
    assert "within the rule; the largest overrun +1.00 s" in "\n".join(bc.limits_section([ok]))


def test_open_rows_give_the_interval_what_bounds_it_and_why_the_search_stopped():
    better = record(kind="baselines", baselines=[{"planner": "coopai", "objective": 1.2, "feasible": True}])
    closed = record(instance="coopai/a.yaml", status="optimal", bound=1.0, gap=0.0, bound_source="certified")
    near = record(instance="coopai/b.yaml", bound_source="rounds")  # gap 0.5 %, no worse than the baseline
    wide = record(instance="coopai/c.yaml", bound=0.8, gap=0.2, bound_source="coarse",
                  message="the full layout relaxation stopped (its share of the time ran out)")
    lost = record(instance="coopai/d.yaml", value=None, bound=None, gap=None, status="killed", message="killed at 90 s")
    exact = {(r.instance, "latency"): r for r in (closed, near, wide, lost)}
    bases = {(r.instance, "latency"): better for r in (closed, near, wide, lost)}
    text = "\n".join(bc.open_rows_section(exact, bases))
    assert "The 2 runs" in text and "coopai/a.yaml" not in text and "coopai/b.yaml" not in text
    assert ("| coopai/c.yaml | latency | 800 ms to 1000 ms | 20 % | coarse: coarse layout relaxation: the newest "
            "tensor's layout only") in text
    assert "| the full layout relaxation stopped (its share of the time ran out) |" in text
    assert "| coopai/d.yaml | latency | killed | - | -: no bound | killed at 90 s |" in text
    assert bc.open_rows_section({(closed.instance, "latency"): closed}, bases) == []


def test_caps_verdict_is_proven_from_the_bounds():
    caps = {"a": 100}
    capped = record(value=1.2, bound=1.1, gap=1 / 12)
    assert bc.caps_verdict(capped, record(kind="uncapped", value=1.0, bound=0.9)).startswith("yes (proven)")
    assert bc.caps_verdict(capped, record(kind="uncapped", value=1.3, bound=1.2)).startswith("no (proven)")
    open_ = bc.caps_verdict(capped, record(kind="uncapped", value=1.15, bound=1.0, memory_bytes={"a": 150},
                                           caps_bytes=caps))
    assert open_.startswith("unknown") and open_.endswith("breaks the caps")
    assert bc.caps_verdict(capped, None).startswith("not checked")


def test_fleet_vgg16_4dev_is_the_bench_exact_instance():
    import bench_exact
    from milp_planner.instance import load_instance

    ours = load_instance(ROOT / "instances" / "fleet" / "vgg16-4dev-uncapped.yaml")
    theirs = bench_exact.make_instance("vgg16", 4, 4, ["equal", "capacity"])
    for name in ("name", "devices", "network", "search", "objective", "constraints", "dtype_bytes", "model"):
        assert getattr(ours, name) == getattr(theirs, name), name


def test_uncapped_copy_lifts_the_caps_only(tmp_path):
    from milp_planner.instance import load_instance

    rel = "fleet/googlenet-4dev.yaml"  # an .onnx model path relative to the file
    copy = bc.uncapped_copy(rel, tmp_path)
    a, b = load_instance(bc.INSTANCES / rel), load_instance(copy)
    assert b.constraints.memory is False and a.constraints.memory is True
    assert a.devices == b.devices and a.search == b.search and len(a.graph.layers) == len(b.graph.layers)


def test_every_fleet_file_loads_with_the_fleet_it_states():
    """Typed fleets: 8 devices of 2 kinds or 16 of 4, every device capped; the others as their names say."""
    from milp_planner.instance import load_instance

    files = sorted((ROOT / "instances" / "fleet").glob("*.yaml"))
    assert len(files) >= 10
    for f in files:
        inst = load_instance(f)
        kinds = {repr((d.compute, d.memory_bytes, d.power)) for d in inst.devices}
        if "dev-" in f.stem and "types" in f.stem:  # e.g. vgg16-16dev-4types
            n_dev, n_types = int(f.stem.split("-")[1][:-3]), int(f.stem.split("-")[2][0])
            assert (len(inst.devices), len(kinds)) == (n_dev, n_types), f.name
            assert all(d.memory_bytes is not None for d in inst.devices), f.name
        elif f.stem.endswith("8distinct"):
            assert len(inst.devices) == len(kinds) == 8
        elif f.stem.endswith("-4dev") or f.stem.endswith("-4dev-uncapped"):
            assert len(inst.devices) == len(kinds) == 4, f.name

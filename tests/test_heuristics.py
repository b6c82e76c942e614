"""The heuristic and search baselines (milp_planner/planners/{offload,modnn,...}.py).

Every baseline must return a structurally valid plan whose objective the evaluator
reproduces, be deterministic for a seed, be listed and runnable from the CLI, and never beat a
certified optimum inside the search space.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from milp_planner.cli import main
from milp_planner.cost.evaluator import evaluate
from milp_planner.instance.reader import instance_from_dict, parse_text
from milp_planner.model.loading import load_graph
from milp_planner.space.plan import Plan, check_plan
from milp_planner.planners import get_planner, planner_class, planner_names
from milp_planner.planners.common import Sim, evaluate_tuples, proportional_counts, stage_dp
from milp_planner.planners.distredge_lcpss import lcpss_volumes
from milp_planner.planners.random_search import random_stages

HEURISTICS = ["offload", "modnn", "coedge", "deepthings", "deeperthings", "aofl", "neurosurgeon", "coopai",
              "hidp", "distredge-lcpss", "autodice", "random"]
SEEDED = ["distredge-lcpss", "autodice", "random"]
# small budgets so that the whole file stays fast; the defaults are exercised by the CLI test
LIGHT = {"autodice": {"pop_size": 8, "generations": 4}, "random": {"samples": 30},
         "distredge-lcpss": {"n_random": 20, "evals": 30}}

DEVICES_3 = """
devices:
  - {name: cpu, compute: {model: linear, macs_per_s: 2.0e9, overhead_s: 1e-4}, memory_mb: 64,
     power_w: {compute: 4, tx: 1.2, rx: 1.0}}
  - {name: gpu, compute: {model: roofline, macs_per_s: 2.0e10, mem_gbps: 4, overhead_s: 5e-5},
     power_w: {compute: 10, tx: 1.5, rx: 1.2}}
  - {name: npu, compute: {model: linear, macs_per_s: 6.0e9, overhead_s: 2e-4},
     power_w: {compute: 3, tx: 1.5, rx: 1.2}}
"""

TINY = {
    "chain": """
name: h-chain-3
model: zoo:tiny_chain
dtype_bytes: 1
""" + DEVICES_3 + """
network:
  bandwidth_mbps: [[0, 100, 20], [80, 0, 50], [20, 40, 0]]
  latency_ms: 0.3
  source: {device: cpu}
  sink: {device: npu}
search: {fusion_limit: 3, max_parts: 3, splits: [equal, capacity, "grid:4"], axes: [rows]}
""",
    # two processing units of one machine (node) and an external camera as the source
    "residual": """
name: h-residual-3
model: zoo:tiny_residual
dtype_bytes: 2
devices:
  - {name: jet-cpu, node: jetson, compute: {model: linear, macs_per_s: 3.0e9, overhead_s: 1e-4},
     power_w: {compute: 5, tx: 1.5, rx: 1.2}}
  - {name: jet-gpu, node: jetson, compute: {model: linear, macs_per_s: 1.5e10, overhead_s: 3e-4},
     power_w: {compute: 9, tx: 1.5, rx: 1.2}}
  - {name: pi, compute: {model: linear, macs_per_s: 2.0e9, overhead_s: 1e-4}, memory_mb: 32,
     power_w: {compute: 4, tx: 1.2, rx: 1.0}}
network:
  bandwidth_mbps: [[0, 1000, 40], [1000, 0, 40], [30, 30, 0]]
  latency_ms: [[0, 0.05, 1], [0.05, 0, 1], [1, 1, 0]]
  source: {bandwidth_mbps: [20, 20, 10], latency_ms: 1}
  sink: {device: pi}
search: {fusion_limit: 2, max_parts: 2, splits: [equal, capacity], axes: [rows, channels]}
objective: energy
""",
    "fc": """
name: h-fc-2
model: zoo:tiny_fc
devices:
  - {name: left, compute: {model: linear, macs_per_s: 1.0e9, overhead_s: 1e-4}, memory_mb: 1,
     power_w: {compute: 3, tx: 1, rx: 1}}
  - {name: right, compute: {model: linear, macs_per_s: 4.0e9, overhead_s: 2e-4}, memory_mb: 2,
     power_w: {compute: 6, tx: 1, rx: 1}}
network: {bandwidth_mbps: [[0, 50], [25, 0]], medium: shared, source: {device: left}, sink: {device: right}}
search: {fusion_limit: 2, splits: [equal, "grid:4"], axes: [rows, channels]}
constraints: {memory: true, latency_ms: 1000}
""",
}

VGG = """
name: h-vgg16-3
model: zoo:vgg16:64
dtype_bytes: 1
""" + DEVICES_3.replace("memory_mb: 64", "memory_mb: 512") + """
network:
  bandwidth_mbps: [[0, 100, 50], [100, 0, 200], [50, 200, 0]]
  latency_ms: 0.2
  source: {device: cpu}
  sink: {device: cpu}
search: {fusion_limit: 3, max_parts: 3, splits: [equal, capacity], axes: [rows, channels]}
"""


def build(text: str, source: str = "test"):
    data = parse_text(text, source, "yaml")
    return instance_from_dict(data, source, graph=load_graph(data["model"]))


@pytest.fixture(scope="module")
def tiny():
    return {k: build(v, k) for k, v in TINY.items()}


@pytest.fixture(scope="module")
def vgg():
    return build(VGG, "vgg")


def solve(name, inst, objective=None, seed=0, **extra):
    opts = dict(LIGHT.get(name, {}))
    opts.update(extra)
    return get_planner(name, **opts).solve(inst, objective=objective, seed=seed)


def assert_valid(res, inst):
    assert res.plan is not None, res.message
    assert res.status in ("feasible", "infeasible", "timeout")
    check_plan(res.plan, inst)
    again = Plan.from_json(res.plan.to_json())  # the JSON round-trips
    m = evaluate(again, inst)
    assert math.isfinite(res.value) and res.value >= 0
    assert m.value(res.objective) == pytest.approx(res.value, rel=1e-12)


# ---------------------------------------------------------------------------------------
# validity


@pytest.mark.parametrize("name", HEURISTICS)
def test_valid_plans_on_tiny_models(name, tiny):
    for key, inst in tiny.items():
        for objective in ("latency", "energy", "period", "memory"):
            if objective in ("period", "memory") and key != "chain":
                continue
            res = solve(name, inst, objective)
            assert_valid(res, inst)
            assert res.planner == name and res.objective == objective


@pytest.mark.parametrize("name", HEURISTICS)
def test_valid_plan_on_vgg16(name, vgg):
    opts = {"autodice": {"pop_size": 12, "generations": 5}, "random": {"samples": 15},
            "distredge-lcpss": {"n_random": 10, "evals": 20}}.get(name, {})
    res = solve(name, vgg, "latency", **opts)
    assert_valid(res, vgg)
    assert res.value >= res.metrics.lower_bound_s * (1 - 1e-9)


def test_planners_use_the_devices_they_should(tiny, vgg):
    # offload: one device; neurosurgeon: whole layers; modnn: every layer split over all devices
    inst = tiny["chain"]
    assert len({p.device for s in solve("offload", inst).plan.stages for p in s.parts}) == 1
    assert all(len(s.parts) == 1 for s in solve("neurosurgeon", vgg).plan.stages)
    plan = solve("modnn", inst).plan
    assert all(s.first == s.last for s in plan.stages)
    assert all(len(s.parts) == 3 for s in plan.stages if inst.graph.layers[s.last].rows >= 3)
    # deepthings: one fused, equally split block, then single-device stages
    plan = solve("deepthings", vgg).plan
    assert len(plan.stages[0].parts) == 3 and all(len(s.parts) == 1 for s in plan.stages[1:])
    sizes = [p.range[1] - p.range[0] for p in plan.stages[0].parts]
    assert max(sizes) - min(sizes) <= 1


def test_hidp_splits_inside_a_node(tiny):
    res = solve("hidp", tiny["residual"], "latency")
    assert res.info["nodes"] == [["jet-cpu", "jet-gpu"], ["pi"]]
    assert res.info["global_mode"] == "model" or res.info["global_mode"].startswith("data:")
    # on this instance the local level pays off: some stage is split between the two units
    assert any({p.device for p in s.parts} == {"jet-cpu", "jet-gpu"} for s in res.plan.stages)


# ---------------------------------------------------------------------------------------
# determinism


@pytest.mark.parametrize("name", HEURISTICS)
def test_same_seed_same_plan(name, tiny):
    inst = tiny["residual"]
    extra = {"autodice": {"pop_size": 6, "generations": 3}}.get(name, {})  # GA path (space > budget)
    a = solve(name, inst, "latency", seed=7, **extra).plan.to_json()
    b = solve(name, inst, "latency", seed=7, **extra).plan.to_json()
    assert a == b
    assert planner_class(name).seeded == (name in SEEDED)


def test_random_seeds_differ_and_stay_in_space(tiny):
    inst = tiny["chain"]
    plans = {get_planner("random", samples=3).solve(inst, seed=s).plan.to_json() for s in range(4)}
    assert len(plans) > 1
    rng = np.random.default_rng(0)
    for _ in range(50):
        _, m = evaluate_tuples(inst, random_stages(inst, rng))
        assert m.in_space, m.space_reasons


def test_time_limit_stops_random_search(tiny):
    res = get_planner("random", samples=10_000).solve(tiny["chain"], time_limit=0.0)
    assert res.status == "timeout" and res.plan is not None and res.info["samples"] == 1


# ---------------------------------------------------------------------------------------
# CLI


def test_cli_lists_every_baseline(capsys):
    assert main(["planners", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    for name in HEURISTICS:
        assert name in rows, name
        assert rows[name]["description"] and rows[name]["source"]
        assert rows[name]["seeded"] == (name in SEEDED)


@pytest.mark.parametrize("name", HEURISTICS)
def test_cli_solve_json(name, tmp_path, capsys):
    path = tmp_path / "inst.yaml"
    path.write_text(TINY["chain"])
    argv = ["solve", str(path), "--planner", name, "--json"]
    for k, v in LIGHT.get(name, {}).items():
        argv += ["-O", f"{k}={v}"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("status", "objective", "bound", "gap", "planner", "solve_time_s", "metrics", "plan"):
        assert key in out, key
    assert out["planner"] == name and out["bound"] is None and out["gap"] is None
    assert out["status"] == "feasible"
    assert out["objective"] == pytest.approx(out["metrics"]["latency_s"])


# ---------------------------------------------------------------------------------------
# against the certified optimum

BF_SPACE = """
name: h-bf
model: zoo:tiny_residual
dtype_bytes: 1
devices:
  - {name: slow, compute: {model: linear, macs_per_s: 2.0e8, overhead_s: 1e-5}, power_w: {compute: 2, tx: 1, rx: 1}}
  - {name: fast, compute: {model: linear, macs_per_s: 3.0e8, overhead_s: 3e-5}, power_w: {compute: 2.5, tx: 1.5, rx: 1}}
network:
  bandwidth_mbps: [[0, 400], [200, 0]]
  latency_ms: 0.1
  source: {device: slow}
  sink: {device: slow}
search: {fusion_limit: 2, max_parts: 2, splits: [equal], axes: [rows]}
"""


def _bruteforce_or_skip():
    if "bruteforce" not in planner_names():
        pytest.skip("the exhaustive 'bruteforce' planner is not registered yet")
    return get_planner("bruteforce")


@pytest.mark.parametrize("objective", ["latency", "energy"])
def test_heuristics_never_beat_the_optimum(objective):
    bf = _bruteforce_or_skip()
    inst = build(BF_SPACE, "bf")
    opt = bf.solve(inst, objective=objective)
    assert opt.status == "optimal"
    compared = 0
    for name in HEURISTICS:
        res = solve(name, inst, objective)
        assert_valid(res, inst)
        if res.metrics.in_space and res.metrics.feasible:
            compared += 1
            assert res.value >= opt.value - 1e-9 * max(1.0, abs(opt.value)), name
    assert compared >= 3


@pytest.mark.parametrize("objective", ["latency", "energy"])
def test_neurosurgeon_is_exact_over_single_device_stages(objective):
    bf = _bruteforce_or_skip()
    text = BF_SPACE.replace("max_parts: 2", "max_parts: 1").replace(
        "  - {name: fast", "  - {name: mid, compute: {model: linear, macs_per_s: 2.5e9, overhead_s: 1e-4}, "
        "power_w: {compute: 3, tx: 1, rx: 1}}\n  - {name: fast").replace(
        "[[0, 400], [200, 0]]", "[[0, 400, 100], [200, 0, 60], [30, 50, 0]]")
    inst = build(text, "bf1")  # a residual network: skip tensors make the DP state non-trivial
    opt = bf.solve(inst, objective=objective)
    res = solve("neurosurgeon", inst, objective)
    assert res.value == pytest.approx(opt.value, rel=1e-9)


# ---------------------------------------------------------------------------------------
# building blocks


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300), st.lists(st.floats(0.0, 1e3, allow_nan=False), min_size=1, max_size=8))
def test_proportional_counts(n, weights):
    counts = proportional_counts(n, weights)
    pos = [i for i, w in enumerate(weights) if w > 0]
    assert len(counts) == len(weights) and all(c >= 0 for c in counts)
    assert sum(counts) == (n if pos else 0)
    assert all(counts[i] == 0 for i in range(len(weights)) if weights[i] <= 0)
    if n >= len(pos):
        assert all(counts[i] >= 1 for i in pos)
    if pos and n >= len(pos):  # within one unit of the exact quota (after the guaranteed unit each)
        total = sum(weights[i] for i in pos)
        for i in pos:
            assert abs(counts[i] - 1 - (n - len(pos)) * weights[i] / total) < 1 + 1e-9


def test_sim_reproduces_the_evaluator(tiny):
    for inst in tiny.values():
        sim = Sim(inst)
        rng = np.random.default_rng(3)
        for _ in range(40):
            stages = random_stages(inst, rng)
            _, m = evaluate_tuples(inst, stages)
            lat, en = sim.run(stages)
            assert lat == pytest.approx(m.latency_s, rel=1e-12)
            assert en == pytest.approx(m.energy_j, rel=1e-12)


def test_stage_dp_on_a_window_matches_whole_model(tiny):
    inst = tiny["chain"]
    sim = Sim(inst)
    n = len(inst.graph.layers)

    def cands(i):
        return [(i, i, "none", ((d, None),)) for d in range(3)]

    whole, _ = stage_dp(inst, cands, sim=sim)
    head, _ = stage_dp(inst, cands, sim=sim, stop=2)
    assert len(head) == 2 and [s[0] for s in head] == [0, 1]
    assert len(whole) == n


def test_lcpss_volumes(vgg):
    g = vgg.graph
    a = lcpss_volumes(vgg, np.random.default_rng(1), n_random=10)
    b = lcpss_volumes(vgg, np.random.default_rng(1), n_random=10)
    assert a == b
    assert a[0][0] == 0 and a[-1][1] == len(g) - 1
    assert all(x[1] + 1 == y[0] for x, y in zip(a, a[1:]))
    for first, last in a:  # layers that cannot be row-split stand alone
        assert first == last or all(g.layers[i].row_splittable for i in range(first, last + 1))
    ops_only = lcpss_volumes(vgg, np.random.default_rng(1), alpha=0.0, n_random=10)
    data_only = lcpss_volumes(vgg, np.random.default_rng(1), alpha=1.0, n_random=10)
    assert len(ops_only) >= len(a) >= len(data_only)  # DistrEdge Sec. V-C: smaller alpha, more volumes


def test_autodice_pareto_set(tiny):
    inst = tiny["residual"]
    res = solve("autodice", inst, "period", pop_size=6, generations=3)
    pareto = res.info["pareto"]
    assert pareto
    pts = [(p["period_s"], p["max_memory_bytes"], p["max_energy_j"]) for p in pareto]
    for i, p in enumerate(pts):
        for j, q in enumerate(pts):
            if i != j:
                assert not (all(a <= b for a, b in zip(q, p)) and q != p), "a Pareto point is dominated"
    assert res.value == pytest.approx(min(p[0] for p in pts))
    for p in pareto:
        m = evaluate(Plan.from_dict(p["plan"]), inst)
        assert m.period_s == pytest.approx(p["period_s"])
        assert m.max_memory_bytes == p["max_memory_bytes"]

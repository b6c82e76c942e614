"""The ``pipeedge`` planner: PipeEdge's pipeline DP (milp_planner/planners/pipeedge.py)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from builders import chain_graph, conv, device, make_instance, residual_graph
from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance import Constraints, SearchSpace
from milp_planner.instance.network import Endpoint
from milp_planner.instance.reader import load_instance
from milp_planner.model.graph import LayerGraph
from milp_planner.planners import get_planner
from milp_planner.planners.anytime_start import START_BASELINES
from milp_planner.planners.common import per_layer, to_plan
from milp_planner.planners.pipeedge import range_tables

ROOT = Path(__file__).resolve().parents[1]
OBJECTIVES = ("latency", "energy", "period", "memory")


def external(n_dev: int, bw: float = 150.0, lat: float = 0.02) -> Endpoint:
    return Endpoint(device=None, bandwidth_Bps=(bw,) * n_dev, latency_s=(lat,) * n_dev)


def chain_instance(speeds, n_layers=5, memory=None, bw=120.0, params=10):
    """A chain on devices of the given speeds, a uniform network, external source and sink;
    ``params`` weights per layer."""
    n = len(speeds)
    g = chain_graph(n_layers)
    g = LayerGraph(g.name, [replace(layer, params=params) for layer in g.layers], g.inputs, g.outputs)
    devs = [device(f"d{i}", macs_per_s=s, memory=memory, power=(2 + i % 2, 1, 1)) for i, s in enumerate(speeds)]
    links = [[0.0 if a == b else bw for b in range(n)] for a in range(n)]
    return make_instance(g, devs, bw=links, lat=0.05, source=external(n), sink=external(n),
                         search=SearchSpace(2, n, ("equal",), ("rows",)),
                         constraints=Constraints(memory=memory is not None))


def pipelines(n_layers: int, n_dev: int):
    """Every pipeline: a cut of the layers into contiguous ranges, each on a different device."""
    for k in range(1, min(n_layers, n_dev) + 1):
        for cuts in itertools.combinations(range(1, n_layers), k - 1):
            bounds = (0,) + cuts + (n_layers,)
            for devs in itertools.permutations(range(n_dev), k):
                yield [(bounds[r], bounds[r + 1] - 1, devs[r]) for r in range(k)]


def brute_force(inst, objective):
    best = None
    for pipe in pipelines(len(inst.graph.layers), len(inst.devices)):
        m = evaluate(to_plan(inst, [s for a, b, d in pipe for s in per_layer(a, b, d)]), inst)
        if m.feasible and (best is None or m.value(objective) < best):
            best = m.value(objective)
    return best


@pytest.mark.parametrize("speeds", [(1000, 1000), (1000, 1000, 1000), (1000, 1000, 3000)])
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_equals_the_brute_force_minimum_over_pipelines(speeds, objective):
    inst = chain_instance(speeds)
    want = brute_force(inst, objective)
    for types in (True, False):
        res = get_planner("pipeedge", types=types).solve(inst, objective=objective)
        assert res.status == "feasible" and res.metrics.in_space and res.metrics.feasible
        assert res.value == pytest.approx(want, rel=1e-9), (types, res.plan.meta["ranges"])
        # the DP prices a chain exactly as the evaluator does
        assert res.info["dp_value"] == pytest.approx(res.value, rel=1e-9)


def test_a_pipeline_uses_several_devices_for_the_period():
    inst = chain_instance((1000, 1000, 1000), n_layers=6, bw=10**6)
    res = get_planner("pipeedge").solve(inst, objective="period")
    assert res.info["devices_used"] >= 2
    single = get_planner("offload").solve(inst, objective="period")
    assert res.value < single.value


def wide_input_graph():
    """x (1,8,8,8) -> c0 -> t0 (1,1,8,8) -> c1 -> t1 -> c2 -> t2: the input outweighs every
    later working set (a source device holds it before its own range)."""
    layers = [conv(0, "c0", "x", "t0", (1, 1, 8, 8)), conv(1, "c1", "t0", "t1", (1, 1, 8, 8)),
              conv(2, "c2", "t1", "t2", (1, 1, 8, 8))]
    return LayerGraph("wide-input", layers, {"x": (1, 8, 8, 8)}, ["t2"])


@pytest.mark.parametrize("graph", [residual_graph, wide_input_graph])
def test_memory_of_every_range_is_the_evaluators(graph):
    """The DP's memory of a range (weights + working sets) is what the evaluator counts, for
    skip tensors too and on the source device."""
    n_dev = 3
    devs = [device(f"d{i}") for i in range(n_dev)]
    for source in (external(n_dev), 0):
        inst = make_instance(graph(), devs, source=source, sink=external(n_dev),
                             search=SearchSpace(2, n_dev, ("equal",), ("rows",)))
        t = range_tables(inst, list(range(n_dev)))
        for pipe in pipelines(3, n_dev):
            m = evaluate(to_plan(inst, [s for a, b, d in pipe for s in per_layer(a, b, d)]), inst)
            for a, b, d in pipe:
                table = t.mem_src if d == source else t.mem
                assert m.memory_bytes[inst.device_names[d]] == table[a, b], (pipe, d)


def test_residual_plans_are_evaluator_consistent_and_in_the_space():
    n_dev = 3
    devs = [device(f"d{i}", macs_per_s=1000 * (i + 1)) for i in range(n_dev)]
    inst = make_instance(residual_graph(), devs, search=SearchSpace(2, n_dev, ("equal",), ("rows",)))
    for objective in OBJECTIVES:
        res = get_planner("pipeedge").solve(inst, objective=objective)
        m = evaluate(res.plan, inst)
        assert m.in_space and m.feasible and res.value == m.value(objective)
        assert res.value <= brute_force(inst, objective) * 1.5  # an approximation off a chain, not a wild one


def test_caps_that_no_single_device_meets_get_a_feasible_pipeline():
    # 5 layers of 100 weight bytes each, working sets of 256 bytes: a device holds at most 2
    inst = chain_instance((1000, 1000, 2000), n_layers=5, memory=460, params=100)
    assert not get_planner("offload").solve(inst).metrics.feasible
    for objective in OBJECTIVES:
        res = get_planner("pipeedge").solve(inst, objective=objective)
        assert res.status == "feasible" and res.metrics.feasible and res.metrics.in_space, res.message
        assert res.info["caps_met_by_dp"] and res.value == pytest.approx(brute_force(inst, objective), rel=1e-9)
    # caps no pipeline meets: the best pipeline without them, reported infeasible
    tight = chain_instance((1000, 1000), n_layers=5, memory=460, params=100)
    res = get_planner("pipeedge").solve(tight, objective="period")
    assert res.status == "infeasible" and not res.info["caps_met_by_dp"] and res.plan is not None


def test_typed_fleet_with_binding_caps_gets_a_feasible_plan_fast():
    inst = load_instance(ROOT / "instances/fleet/resnet50-16dev-4types.yaml")
    assert not any(get_planner(name).solve(inst, time_limit=5).metrics.feasible for name in ("offload", "coedge"))
    for objective in ("period", "latency"):
        res = get_planner("pipeedge").solve(inst, objective=objective, time_limit=30)
        assert res.metrics.feasible and res.metrics.in_space and res.info["dp_complete"]
        assert res.solve_time_s < 10  # generous: about 0.3 s alone


def test_the_time_limit_stops_the_dp_with_a_plan():
    inst = chain_instance((1000, 1100, 1200, 1300, 1400, 1500), n_layers=8)
    res = get_planner("pipeedge", types=False).solve(inst, objective="period", time_limit=0)
    assert res.plan is not None and res.status == "timeout" and not res.info["dp_complete"]
    assert res.metrics.in_space and res.info["devices_used"] == 1
    full = get_planner("pipeedge", types=False).solve(inst, objective="period")
    assert full.info["dp_complete"] and full.value <= res.value


def test_max_devices():
    inst = chain_instance((1000, 1000, 1000), n_layers=6, bw=10**6)
    res = get_planner("pipeedge", max_devices=2).solve(inst, objective="period")
    assert res.info["devices_used"] <= 2


def test_options_are_checked():
    with pytest.raises(PlannerError, match="unknown option 'type'"):
        get_planner("pipeedge", type=False)
    with pytest.raises(PlannerError, match="skips"):
        get_planner("pipeedge", skips="fastest")
    with pytest.raises(PlannerError, match="max_devices"):
        get_planner("pipeedge", max_devices=0)


def test_it_is_an_anytime_start_baseline():
    assert "pipeedge" in START_BASELINES


def test_the_exact_planners_start_from_it_under_caps():
    """Caps that only pipelines meet: dp returns a plan within the caps and a bound."""
    inst = chain_instance((1000, 1000, 2000), n_layers=5, memory=460, params=100)
    res = get_planner("dp").solve(inst, objective="period", time_limit=20)
    assert res.plan is not None and res.metrics.feasible and res.bound is not None and res.bound <= res.value
    assert res.value <= get_planner("pipeedge").solve(inst, objective="period").value * (1 + 1e-9)


def test_cli(capsys):
    from milp_planner.cli import main

    assert main(["solve", "example:tiny-2dev", "--planner", "pipeedge", "--objective", "period", "--json",
                 "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["planner"] == "pipeedge" and out["status"] == "feasible" and out["metrics"]["in_space"]
    assert main(["solve", "example:tiny-2dev", "--planner", "pipeedge", "-O", "skips=nearest"]) == 2
    assert "skips" in capsys.readouterr().err

"""The ``hybrid`` planner: pipelines of device groups, layers split within a group
(milp_planner/planners/hybrid.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from builders import conv, device, make_instance, residual_graph
from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance import SearchSpace
from milp_planner.instance.network import Endpoint
from milp_planner.instance.reader import load_instance
from milp_planner.model.graph import LayerGraph
from milp_planner.planners import get_planner
from milp_planner.planners.anytime_start import START_BASELINES
from milp_planner.planners.hybrid import device_orders

ROOT = Path(__file__).resolve().parents[1]
OBJECTIVES = ("latency", "energy", "period", "memory")
EXAMPLES = ("tiny-2dev.yaml", "tiny-fc-2dev.yaml", "tiny-residual-3dev.yaml", "edge-3dev.yaml")


def check(res, inst, objective):
    """The plan is in the space and the reported value is the evaluator's."""
    assert res.plan is not None
    m = evaluate(res.plan, inst)
    assert m.in_space, m.space_reasons
    assert res.value == m.value(objective)
    if res.info.get("dp_value") is not None and res.plan.meta.get("groups"):
        # the DP prices its plan with the evaluator's price_stage: the same value
        assert res.info["dp_value"] == pytest.approx(res.value, rel=1e-9)
    return m


def external(n_dev: int, bw: float = 1e6) -> Endpoint:
    return Endpoint(device=None, bandwidth_Bps=(bw,) * n_dev, latency_s=(0.0,) * n_dev)


def heavy_middle_instance(n_dev=3):
    """c0 -> c1 (30x the work) -> c2 on identical devices with fast links: one device per
    range (a pipeline) leaves c1 alone as the bottleneck; splitting it over a group does not."""
    layers = [conv(0, "c0", "x", "t0", (1, 2, 8, 8)), conv(1, "c1", "t0", "t1", (1, 2, 8, 8), macs=30000),
              conv(2, "c2", "t1", "t2", (1, 2, 8, 8))]
    g = LayerGraph("heavy", layers, {"x": (1, 1, 8, 8)}, ["t2"])
    devs = [device(f"d{i}", macs_per_s=1000) for i in range(n_dev)]
    links = [[0.0 if a == b else 1e6 for b in range(n_dev)] for a in range(n_dev)]
    return make_instance(g, devs, bw=links, lat=0.0, source=external(n_dev), sink=external(n_dev),
                         search=SearchSpace(1, n_dev, ("equal",), ("rows",)))


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_examples_in_space_and_evaluator_consistent(name, objective):
    inst = load_instance(ROOT / "instances/examples" / name)
    res = get_planner("hybrid").solve(inst, objective=objective)
    m = check(res, inst, objective)
    assert res.status == ("feasible" if m.feasible else "infeasible")


def residual_instance(n_dev=3, fusion=2):
    devs = [device(f"d{i}", macs_per_s=1000 * (i + 1)) for i in range(n_dev)]
    return make_instance(residual_graph(), devs, search=SearchSpace(fusion, n_dev, ("equal", "capacity"), ("rows",)))


def small_residual_instance():
    return residual_instance(2, 1)


@pytest.mark.parametrize("build", [heavy_middle_instance, small_residual_instance])
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_never_beats_the_brute_force_optimum(build, objective):
    inst = build()
    opt = get_planner("bruteforce").solve(inst, objective=objective)
    assert opt.status == "optimal"
    res = get_planner("hybrid").solve(inst, objective=objective)
    check(res, inst, objective)
    assert res.value >= opt.value * (1 - 1e-9)
    if objective == "period" and build is heavy_middle_instance:
        assert res.value <= opt.value * 1.5  # and it is not far off


def test_splitting_a_heavy_layer_in_a_group_beats_the_pipeline():
    inst = heavy_middle_instance()
    pipe = get_planner("pipeedge").solve(inst, objective="period")
    res = get_planner("hybrid").solve(inst, objective="period")
    check(res, inst, "period")
    assert res.value < 0.6 * pipe.value, (res.plan.meta["groups"], pipe.plan.meta["ranges"])
    assert any(len(devs) >= 2 for _, _, devs in res.plan.meta["groups"])


def test_residual_network_all_objectives():
    inst = residual_instance()
    for objective in OBJECTIVES:
        check(get_planner("hybrid").solve(inst, objective=objective), inst, objective)


@pytest.mark.parametrize("objective", ["period", "memory"])
def test_branches_and_a_shared_medium_are_priced_as_the_evaluator_does(objective):
    """GoogLeNet's inception branches: a range boundary cuts several live tensors."""
    inst = load_instance(ROOT / "instances/fleet/googlenet-4dev.yaml")
    for medium in ("switched", "shared"):
        inst = replace(inst, network=replace(inst.network, medium=medium))
        res = get_planner("hybrid").solve(inst, objective=objective)
        check(res, inst, objective)
        assert res.info["dp_value"] is not None  # a DP plan, not the one-device start


def test_autodice_four_boards_beats_pipeedge_on_the_period():
    inst = load_instance(ROOT / "instances/autodice/vgg19-xaviernx-4.yaml")
    res = get_planner("hybrid").solve(inst, objective="period")
    m = check(res, inst, "period")
    assert m.feasible and res.status == "feasible"
    pipe = get_planner("pipeedge").solve(inst, objective="period")
    assert res.value < pipe.value
    # a board's CPU and GPU (80 Gbit/s apart) may share a group: capacity cuts weight them by speed
    names = {d.name: d.node for d in inst.devices}
    assert all(len(devs) <= inst.search.max_parts for _, _, devs in res.plan.meta["groups"])
    assert all(d in names for _, _, devs in res.plan.meta["groups"] for d in devs)


@pytest.mark.slow
def test_autodice_eight_boards_uses_groups():
    inst = load_instance(ROOT / "instances/autodice/vgg19-xaviernx-8.yaml")
    res = get_planner("hybrid").solve(inst, objective="period", time_limit=60)
    check(res, inst, "period")
    assert res.metrics.feasible and res.value < 0.9 * get_planner("pipeedge").solve(inst, objective="period").value


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vgg16-8dev-2types.yaml", "resnet50-8dev-2types.yaml"])
@pytest.mark.parametrize("objective", ["period", "latency"])
def test_typed_fleets_meet_the_caps(name, objective):
    inst = load_instance(ROOT / "instances/fleet" / name)
    res = get_planner("hybrid").solve(inst, objective=objective, time_limit=60)
    m = check(res, inst, objective)
    pipe = get_planner("pipeedge").solve(inst, objective=objective, time_limit=60)
    if pipe.metrics.feasible:  # a pipeline meets the caps: so does the hybrid plan
        assert m.feasible, m.violations
    if objective == "period":
        assert res.value <= pipe.value * (1 + 1e-9) or not pipe.metrics.feasible


@pytest.mark.parametrize("splits", [("any",), ("grid:3",), ("equal",), ("capacity",), ("equal", "capacity")])
@pytest.mark.parametrize("axes", [("rows",), ("channels",), ("rows", "channels")])
def test_every_split_family_and_axis_gives_plans_in_the_space(splits, axes):
    base = load_instance(ROOT / "instances/examples/edge-3dev.yaml")
    for space in (SearchSpace(2, 3, splits, axes), SearchSpace(1, 1, splits, axes)):
        inst = replace(base, search=space)
        for objective in ("period", "latency"):
            check(get_planner("hybrid").solve(inst, objective=objective), inst, objective)


def test_caps_no_plan_meets_give_an_infeasible_plan():
    inst = heavy_middle_instance(2)
    inst = replace(inst, devices=tuple(replace(d, memory_bytes=10) for d in inst.devices),
                   constraints=replace(inst.constraints, memory=True))
    res = get_planner("hybrid").solve(inst, objective="period")
    assert res.plan is not None and res.status == "infeasible" and not res.metrics.feasible


def test_the_deadline_is_honoured_with_a_plan():
    inst = load_instance(ROOT / "instances/autodice/vgg19-xaviernx-8.yaml")
    res = get_planner("hybrid").solve(inst, objective="period", time_limit=0)
    assert res.plan is not None and res.status == "timeout"
    check(res, inst, "period")
    assert res.solve_time_s < 30  # generous: the first pass (one device) is milliseconds


def test_device_orders():
    inst = load_instance(ROOT / "instances/autodice/vgg19-xaviernx-4.yaml")
    orders = {o.name: o for o in device_orders(inst)}
    assert set(orders) == {"speed", "source-first", "node"}
    names = inst.device_names
    assert [names[d] for d in orders["node"].devices[:2]] == ["xnx1-gpu", "xnx1-cpu"]  # the source's board first
    assert names[orders["source-first"].devices[0]] == "xnx1-cpu"
    assert all(sorted(o.devices) == list(range(len(names))) for o in orders.values())
    assert [o.name for o in device_orders(inst, "speed")] == ["speed"]


def test_options_are_checked():
    with pytest.raises(PlannerError, match="unknown option 'fusion'"):
        get_planner("hybrid", fusion="both")
    with pytest.raises(PlannerError, match="fusions"):
        get_planner("hybrid", fusions="all")
    with pytest.raises(PlannerError, match="max_group"):
        get_planner("hybrid", max_group=0)
    inst = heavy_middle_instance()
    res = get_planner("hybrid", max_group=1, orders="speed", fusions="single").solve(inst, objective="period")
    assert all(len(devs) == 1 for _, _, devs in res.plan.meta["groups"])


def test_it_is_an_anytime_start_baseline():
    assert "hybrid" in START_BASELINES


def test_cli(capsys):
    from milp_planner.cli import main

    assert main(["solve", "example:tiny-2dev", "--planner", "hybrid", "--objective", "period", "--json",
                 "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["planner"] == "hybrid" and out["status"] == "feasible" and out["metrics"]["in_space"]
    assert main(["solve", "example:tiny-2dev", "--planner", "hybrid", "-O", "orders=random"]) == 2
    assert "orders" in capsys.readouterr().err

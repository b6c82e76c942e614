"""The DP warm start's fall-back when the label search is off: memory priced into the arc costs."""

from __future__ import annotations

import pytest

from builders import chain_graph, device, make_instance
from formulations import build_stage_graph
from formulations.warmstart import dp_warm_start
from milp_planner.cost.evaluator import evaluate
from milp_planner.instance import Constraints, SearchSpace


def capped_chain(cap: int):
    """4 convs; "fast" is 100x faster but holds ``cap`` bytes (all four layers take 296)."""
    devs = [device("fast", macs_per_s=100000, memory=cap), device("slow", macs_per_s=1000)]
    return make_instance(chain_graph(4), devs, bw=[[0, 1e6], [1e6, 0]], lat=0.0,
                         search=SearchSpace(1, 2, ("equal",), ("rows",)), constraints=Constraints(memory=True))


@pytest.mark.parametrize("cap", [280, 290])
def test_without_price_rounds_the_dp_plan_is_returned_as_infeasible(cap):
    inst = capped_chain(cap)
    sg = build_stage_graph(inst)
    ws = dp_warm_start(sg, "latency", capped_search=False, lagrange_rounds=0)
    assert not ws.feasible and len(ws.arcs) == 4  # every layer on "fast": over its cap
    assert ws.value == pytest.approx(0.08) and ws.bound == pytest.approx(0.08)  # the DP's value bounds
    assert not evaluate(sg.plan_from_arcs(ws.arcs), inst).feasible


@pytest.mark.parametrize("cap", [280, 290])
def test_price_rounds_find_a_plan_within_the_caps(cap):
    inst = capped_chain(cap)
    sg = build_stage_graph(inst)
    assert not dp_warm_start(sg, "latency", capped_search=False, lagrange_rounds=1).feasible
    ws = dp_warm_start(sg, "latency", capped_search=False, lagrange_rounds=12)
    metrics = evaluate(sg.plan_from_arcs(ws.arcs), inst)
    assert ws.feasible and metrics.feasible and metrics.memory_bytes["fast"] <= cap
    assert ws.value == pytest.approx(metrics.latency_s) and ws.bound == pytest.approx(0.08)


def test_a_dp_plan_within_the_caps_needs_no_rounds():
    inst = capped_chain(250)
    ws = dp_warm_start(build_stage_graph(inst), "latency", capped_search=False, lagrange_rounds=0)
    assert ws.feasible and ws.value == pytest.approx(1.550176)

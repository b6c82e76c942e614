"""The flow floor (milp_planner/cost/flow.py) against brute force: never above the optimum of
energy or period, above the compute-only floor where a slow source link decides, and wrong
(above the optimum) when its read ratios are overstated."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction as F
from pathlib import Path

import pytest

from builders import CONV3, IDENT, chain_graph, conv, device, fc_graph, make_instance, residual_graph

from milp_planner.deadline import Deadline
import milp_planner.cost.flow as flow
from milp_planner.cost.floors import lower_floor
from milp_planner.errors import PlannerError
from milp_planner.instance import SearchSpace
from milp_planner.instance.network import Endpoint
from milp_planner.instance.reader import load_instance
from milp_planner.model.graph import Layer, LayerGraph, RowDep, input_rows
from milp_planner.planners import get_planner

EXAMPLES = Path(__file__).resolve().parents[1] / "instances" / "examples"
DOWN = RowDep("window", kernel=1, stride=2, pad_top=0)


def down_graph():
    """c0: x (1,1,8,8) -> t0 (1,2,8,8); d1 (1x1, stride 2): t0 -> t1 (1,2,4,4); c2: t1 -> y.
    A row part of d1 reads half the input rows its share suggests (ratio 1/2)."""
    layers = [
        conv(0, "c0", "x", "t0", (1, 2, 8, 8), macs=400),
        Layer(1, "d1", "Conv", ("t0",), "t1", (1, 2, 4, 4), macs=3000, params=6, rowdep=DOWN,
              row_splittable=True, channel_splittable=True),
        conv(2, "c2", "t1", "y", (1, 2, 4, 4), macs=200),
    ]
    return LayerGraph("down", layers, {"x": (1, 1, 8, 8)}, ["y"])


def _net(n, scale=1.0):
    return [[0.0 if i == j else scale * (60.0 + 40 * i + 25 * j) for j in range(n)] for i in range(n)]


def _external(n, bws):
    return Endpoint(None, tuple(bws), tuple(0.01 for _ in range(n)))


CASES = {
    "chain-2": lambda: make_instance(chain_graph(3), [device("a", 1000, power=(3, 1, 1)), device("b", 2500, power=(2, 1, 2))],
                                     bw=_net(2), lat=0.02, search=SearchSpace(2, 2, ("equal", "grid:4"), ("rows", "channels"))),
    "chain-external-slow": lambda: make_instance(
        chain_graph(2), [device("slowlink", 3000, power=(1, 1, 3)), device("fastlink", 1000, power=(4, 1, 1))],
        bw=_net(2, 0.5), lat=0.01, source=_external(2, (20.0, 400.0)), sink=_external(2, (50.0, 50.0)),
        search=SearchSpace(2, 2, ("equal", "grid:4"), ("rows", "channels"))),
    "residual-3": lambda: make_instance(
        residual_graph(), [device("a", 1000), device("b", 2000, power=(1, 2, 1)), device("c", 1500, power=(3, 1, 1))],
        bw=_net(3), lat=0.03, sink=2, search=SearchSpace(2, 2, ("equal",), ("rows",))),
    "residual-shared": lambda: make_instance(
        residual_graph(), [device("a", 1000), device("b", 2000, power=(1, 1, 1))], bw=_net(2), lat=0.02,
        medium="shared", search=SearchSpace(2, 2, ("equal", "grid:4"), ("rows", "channels"))),
    "down-2": lambda: make_instance(down_graph(), [device("a", 4000, "0.001"), device("b", 1000, "0.001", power=(1, 1, 1))],
                                    bw=_net(2, 2.0), lat=0.0, search=SearchSpace(2, 2, ("equal", "any"), ("rows",))),
    "fc": lambda: make_instance(fc_graph(), [device("a", 1000, "0.001"), device("b", 3000, "0.002")], bw=_net(2),
                                lat=0.01),
    "tiny-2dev": lambda: load_instance(EXAMPLES / "tiny-2dev.yaml"),
    "tiny-fc-2dev": lambda: load_instance(EXAMPLES / "tiny-fc-2dev.yaml"),
}


def _optimum(inst, objective):
    """Brute force over every plan (memory caps off); ``dp``'s certified optimum where there
    are too many plans (the exact planners agree with brute force: tests/test_exact.py)."""
    free = replace(inst, constraints=replace(inst.constraints, memory=False))
    try:
        return get_planner("bruteforce").solve(free, objective=objective).value
    except PlannerError:
        res = get_planner("dp").solve(free, objective=objective)
        assert res.status == "optimal"
        return res.value


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("objective", ["energy", "period"])
def test_flow_floor_below_every_plan(case, objective):
    inst = CASES[case]()
    ff = flow.flow_floor(inst, objective)
    assert ff is not None and ff.value >= 0
    best = _optimum(inst, objective)
    assert ff.value <= best * (1 + 1e-9), (case, objective, ff, best)
    assert ff.value <= ff.lp_value * (1 + 1e-6) + 1e-12  # the recomputed bound is the LP's, or below
    fl = lower_floor(inst, objective)
    assert fl.value >= ff.value * (1 - 1e-12) and fl.value <= best * (1 + 1e-9)
    rnd = get_planner("random", samples=30).solve(inst, objective=objective, seed=5)
    assert ff.value <= rnd.value * (1 + 1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["energy", "period"])
def test_flow_floor_below_the_residual_example(objective):
    inst = load_instance(EXAMPLES / "tiny-residual-3dev.yaml")
    assert flow.flow_floor(inst, objective).value <= _optimum(inst, objective) * (1 + 1e-9)


def test_flow_floor_counts_the_slow_source_link():
    """The device that computes the model cheapest sits behind a slow source link: every plan
    pays to bring the input to it or computes on the other; compute-only sees neither."""
    inst = CASES["chain-external-slow"]()
    ff = flow.flow_floor(inst, "energy")
    fl = lower_floor(inst, "energy")
    assert fl.source == "flow" and fl.value == ff.value
    best = _optimum(inst, "energy")
    compute_only = sum(min(float(d.power.compute_w) * (float(d.compute.overhead_s) + l.macs / float(d.compute.macs_per_s))
                           for d in inst.devices) for l in inst.graph.layers)
    assert compute_only < ff.value <= best * (1 + 1e-9)
    assert ff.value >= compute_only + 0.5 * (best - compute_only)


def test_an_overstated_read_ratio_breaks_the_bound(monkeypatch):
    """d1 (1x1, stride 2) reads every other row: charging its parts a full share of t0 would
    put the floor above the optimum, so the test above can fail."""
    inst = CASES["down-2"]()
    best = _optimum(inst, "energy")
    assert flow.flow_floor(inst, "energy").value <= best * (1 + 1e-9)
    flow.row_ratio.cache_clear()
    monkeypatch.setattr(flow, "row_ratio", lambda dep, h_out, h_in: 1.0)
    assert flow.flow_floor(inst, "energy").value > best * (1 + 1e-6)


@pytest.mark.parametrize("dep,h_out,h_in", [
    (CONV3, 8, 8), (DOWN, 4, 8), (IDENT, 6, 6), (RowDep("window", kernel=3, stride=2, pad_top=1), 5, 9),
    (RowDep("window", kernel=2, stride=2), 4, 8), (RowDep("resize", factor_num=2, factor_den=1), 8, 4),
    (RowDep("resize", factor_num=2, factor_den=1, linear=True), 8, 4),
    (RowDep("transpose", kernel=2, stride=2), 8, 4), (RowDep("none"), 3, 7),
])
def test_row_ratio_is_the_least_over_every_row_range(dep, h_out, h_in):
    best = min((max(0, input_rows(dep, (a, a + r), h_in)[1] - input_rows(dep, (a, a + r), h_in)[0]) / h_in) / (r / h_out)
               for r in range(1, h_out + 1) for a in range(h_out - r + 1))
    assert flow.row_ratio(dep, h_out, h_in) == pytest.approx(min(best, 1.0), abs=1e-12)


def test_objectives_checked():
    with pytest.raises(ValueError, match="energy and period"):
        flow.flow_floor(CASES["fc"](), "latency")


def test_dp_stops_when_the_floor_proves_its_start():
    """One device computes everything cheapest and every transfer it makes is forced (the input
    from the external source, the output to the sink, no message latency): the flow floor
    equals that plan's energy, so dp returns the anytime start's plan, proven by the floor,
    without enumerating the space."""
    src = Endpoint(None, (400.0, 100.0), (0.0, 0.0))
    inst = make_instance(chain_graph(2), [device("thrifty", 3000, power=(1, 1, 1)), device("hungry", 1000, power=(5, 1, 1))],
                         bw=_net(2), lat=0.0, source=src, sink=src,
                         search=SearchSpace(2, 2, ("equal", "grid:4"), ("rows", "channels")))
    res = get_planner("dp").solve(inst, objective="energy", time_limit=30)
    assert res.status == "optimal" and res.bound_source == "flow", res.message
    assert res.info["stage_arcs"] == 0 and "proves the anytime start" in res.message
    assert res.value == pytest.approx(_optimum(inst, "energy"), rel=1e-9)
    assert res.bound <= res.value
    slow = get_planner("dp", anytime=False).solve(inst, objective="energy")  # the rounds agree
    assert slow.status == "optimal" and slow.value == pytest.approx(res.value, rel=1e-9)


def test_a_deadline_leaves_the_flow_floor_out_and_unremembered():
    import time

    inst = CASES["chain-external-slow"]()
    past = lower_floor(inst, "energy", deadline=Deadline(time.perf_counter() - 1.0))
    assert past.source == "compute-only"
    assert flow.flow_floor(inst, "energy", deadline=Deadline(time.perf_counter() - 1.0)) is None
    full = lower_floor(inst, "energy")  # not the remembered compute-only floor
    assert full.source == "flow" and full.value > past.value
    assert lower_floor(inst, "energy", deadline=Deadline(time.perf_counter() - 1.0)) == full  # remembered now

"""Interchangeable devices are one type (formulations.symmetry).

Types are detected from the instance (identical devices, a link that differs, the source
device, whole boards); with the reduction the exact planners find the same optimum as
without it, for every objective, with and without binding memory caps; and the reduction
does shrink the relaxation's tables and the stage graph.
"""

from dataclasses import replace

import pytest
from builders import chain_graph, device, make_instance, residual_graph

from formulations.relaxation import layout_bounds
from formulations.stagegraph import build_stage_graph
from formulations.symmetry import Expander, device_types, order_count, reduction_for, type_orders
from milp_planner.cost.evaluator import evaluate
from milp_planner.instance import SearchSpace
from milp_planner.instance.network import Endpoint
from milp_planner.planners import get_planner

OBJECTIVES = ["latency", "energy", "period", "memory"]


def typed_bw(kinds, fast=None):
    """Bandwidth by the kinds of sender and receiver (and ``fast`` within a board)."""
    rate = {("x", "x"): 120.0, ("x", "y"): 80.0, ("y", "x"): 90.0, ("y", "y"): 150.0}
    n = len(kinds)
    bw = [[0.0 if i == j else rate[(kinds[i][0], kinds[j][0])] for j in range(n)] for i in range(n)]
    for i, j in fast or ():
        bw[i][j] = bw[j][i] = 1000.0
    return bw


def two_types(graph=None, search=None):
    """Two devices of kind x and two of kind y, an external source and sink."""
    kinds = ["x1", "x2", "y1", "y2"]
    devs = [device(k, 1000 if k[0] == "x" else 2500, "0.01" if k[0] == "x" else "0.02",
                   power=(2, 1, 1) if k[0] == "x" else (4, 1, 2)) for k in kinds]
    src = Endpoint(None, (150.0, 150.0, 90.0, 90.0), (0.02, 0.02, 0.03, 0.03))
    snk = Endpoint(None, (120.0, 120.0, 60.0, 60.0), (0.01, 0.01, 0.01, 0.01))
    return make_instance(graph or chain_graph(3), devs, bw=typed_bw(kinds), lat=0.05, source=src, sink=snk,
                         search=search or SearchSpace(2, 3, ("equal",), ("rows", "channels")))


def host_and_twins(graph=None):
    """A host (source and sink) and two identical workers."""
    devs = [device("host", 1500, "0.01", power=(3, 1, 1)), device("w1", 2500, "0.02", power=(4, 1, 2)),
            device("w2", 2500, "0.02", power=(4, 1, 2))]
    bw = [[0, 100.0, 100.0], [250.0, 0, 180.0], [250.0, 180.0, 0]]
    return make_instance(graph or residual_graph(), devs, bw=bw, lat=0.05, source=0, sink=0,
                         search=SearchSpace(2, 3, ("equal", "capacity"), ("rows", "channels")))


def boards():
    """Two identical boards, each a CPU and a GPU joined by a fast link (AutoDiCE)."""
    kinds = ["x-cpu1", "y-gpu1", "x-cpu2", "y-gpu2"]
    devs = [replace(device(k, 1000 if k[0] == "x" else 2500, "0.01", power=(2, 1, 1) if k[0] == "x" else (4, 1, 2)),
                    node=f"board{k[-1]}") for k in kinds]
    src = Endpoint(None, (150.0, 90.0, 150.0, 90.0), (0.02, 0.03, 0.02, 0.03))
    return make_instance(chain_graph(3), devs, bw=typed_bw(kinds, fast=[(0, 1), (2, 3)]), lat=0.05,
                         source=src, sink=src, search=SearchSpace(2, 3, ("equal",), ("rows", "channels")))


CASES = {"two-types": two_types, "host-twins": host_and_twins, "boards": boards}


def small(case):
    """The case on a smaller space: every objective solves in about a second."""
    if case == "two-types":
        return two_types(chain_graph(2), SearchSpace(1, 2, ("equal",), ("rows", "channels")))
    if case == "host-twins":
        return replace(host_and_twins(), search=SearchSpace(1, 2, ("equal",), ("rows",)))
    inst = boards()
    return replace(inst, graph=chain_graph(2), search=SearchSpace(1, 2, ("equal",), ("rows", "channels")))


# --- types -------------------------------------------------------------------------------------

def test_identical_devices_are_one_type():
    t = device_types(two_types())
    assert t.orbits == ((0, 1), (2, 3))
    assert t.units == (((0,), (1,)), ((2,), (3,)))
    assert not t.trivial


def test_a_link_that_differs_separates_devices():
    inst = two_types()
    bw = [list(r) for r in inst.network.bandwidth_Bps]
    bw[0][2] = 77.0  # x1 -> y1 differs from x2 -> y1 and from x1 -> y2
    inst = replace(inst, network=replace(inst.network, bandwidth_Bps=tuple(tuple(r) for r in bw)))
    assert device_types(inst).trivial
    lat = [list(r) for r in two_types().network.latency_s]
    lat[1][0] = 0.5  # x2 -> x1 slower than x1 -> x2: the swap changes the matrix
    inst = replace(two_types(), network=replace(two_types().network, latency_s=tuple(tuple(r) for r in lat)))
    assert device_types(inst).orbits == ((0,), (1,), (2, 3))


def test_external_links_and_device_attributes_count():
    inst = two_types()
    src = replace(inst.network.source, bandwidth_Bps=(150.0, 151.0, 90.0, 90.0))
    inst = replace(inst, network=replace(inst.network, source=src))
    assert device_types(inst).orbits == ((0,), (1,), (2, 3))
    inst = two_types()
    inst.devices = (inst.devices[0], replace(inst.devices[1], memory_bytes=1000)) + inst.devices[2:]
    assert device_types(inst).orbits == ((0,), (1,), (2, 3))


def test_the_source_or_sink_device_is_its_own_type():
    t = device_types(host_and_twins())
    assert t.orbits == ((0,), (1, 2))
    inst = host_and_twins()
    inst = replace(inst, network=replace(inst.network, sink=Endpoint(device=1)))
    assert device_types(inst).trivial


def test_whole_boards_are_interchangeable():
    t = device_types(boards())
    assert t.units == (((0, 1), (2, 3)),)  # one type of two units: (cpu, gpu) by role
    assert t.orbits == ((0, 2), (1, 3))


def test_switched_off_every_device_is_its_own_type():
    t = device_types(two_types(), enabled=False)
    assert t.trivial and t.orbits == ((0,), (1,), (2,), (3,))


def test_type_orders_are_counted_and_listed():
    t = device_types(two_types())
    for k in range(1, 5):
        orders = list(type_orders(t, k))
        assert len(orders) == order_count(t, k) == len(set(orders))
    assert order_count(t, 4) == 6  # x x y y in any order: 4! / (2! 2!)
    triv = device_types(two_types(), enabled=False)
    assert list(type_orders(triv, 2)) == [(a, b) for a in range(4) for b in range(4) if a != b]


def test_expander_first_use_and_free():
    t = device_types(two_types())
    first = Expander(t, "first-use")
    used = first.start()
    assert first.expand((0, 1), first.context(used, {})).tolist() == [[0, 1]]  # x x: one order
    used = first.advance(used, (0, 2))  # x1 and y1 used
    assert used == (1, 1)
    got = {tuple(r) for r in first.expand((0, 1), first.context(used, {})).tolist()}
    assert got == {(0, 1), (1, 0)}  # x1 (used) and the next new x, in either order
    got = {tuple(r) for r in first.expand((0, 2), first.context(used, {})).tolist()}
    assert got == {(0, 2), (0, 3), (1, 2), (1, 3)}
    assert first.expand((0,), first.context(first.start(), {})).tolist() == [[0]]  # never x2 first
    none = Expander(t, "none")
    assert len(none.expand((0, 1), none.context((), {}))) == 2


def test_reduction_for_each_objective_and_cap():
    inst = two_types()
    assert reduction_for(inst, "latency") == "canonical"
    assert reduction_for(inst, "energy") == "canonical"
    assert reduction_for(inst, "period") == "first-use"
    assert reduction_for(inst, "memory") == "first-use"
    assert reduction_for(inst, "latency", enabled=False) == "none"
    inst.devices = tuple(replace(d, memory_bytes=10**6) for d in inst.devices)
    assert reduction_for(inst, "latency") == "first-use"


# --- the reduction shrinks the space and keeps the optimum ------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_relaxation_tables_shrink_and_the_bound_is_unchanged(case):
    inst = CASES[case]()
    for objective in ("latency", "energy"):
        on, off = layout_bounds(inst, objective), layout_bounds(inst, objective, symmetry=False)
        assert sum(len(t.group) for t in on.tables.values()) < sum(len(t.group) for t in off.tables.values())
        assert float(on.to_go[0].min()) == pytest.approx(float(off.to_go[0].min()), rel=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_stage_graph_shrinks_and_keeps_the_optimum(case):
    from formulations.dp import shortest_path

    inst = small(case)
    full = build_stage_graph(inst, reduction="none")
    first = build_stage_graph(inst, reduction="first-use")
    free = build_stage_graph(inst, reduction="free")
    canon = build_stage_graph(inst, reduction="canonical")
    assert len(canon.arcs) <= len(free.arcs) <= len(first.arcs) < len(full.arcs)
    assert canon.n_nodes < full.n_nodes
    for objective in ("latency", "energy"):
        ref = shortest_path(full, objective)[1]
        for sg in (first, free, canon):
            arcs, value = shortest_path(sg, objective)
            assert value == pytest.approx(ref, rel=1e-12)
            # arcs carry real devices: the plan is a plan of the instance
            plan = sg.plan_from_arcs(arcs)
            assert evaluate(plan, inst).value(objective) == pytest.approx(value, rel=1e-9)


def _caps(inst, objective):
    """Every device capped at 90 % of the largest memory of the uncapped optimum."""
    free = get_planner("cpsat").solve(inst, objective=objective)
    cap = int(0.9 * max(free.metrics.memory_bytes.values()))
    inst.devices = tuple(replace(d, memory_bytes=cap) for d in inst.devices)
    return inst


def _agree(inst, objective, planners):
    for planner in planners:
        on = get_planner(planner).solve(inst, objective=objective)
        off = get_planner(planner, symmetry=False).solve(inst, objective=objective)
        assert on.status == off.status, (planner, on.message, off.message)
        if on.status == "optimal":
            tol = 1e-6 * off.value + on.info.get("tolerance", 0.0) + off.info.get("tolerance", 0.0)
            assert on.value == pytest.approx(off.value, abs=tol), planner
            assert on.metrics.feasible
            assert on.info["stage_arcs"] <= off.info["stage_arcs"] or objective in ("latency", "energy")


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_additive_optimum_with_the_reduction_equals_without(case, objective):
    _agree(small(case), objective, ("dp", "milp", "cpsat"))


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_additive_optimum_on_larger_spaces(case, objective):
    """Fusion of two layers, up to three parts, capacity splits (host-twins)."""
    _agree(CASES[case](), objective, ("dp", "milp", "cpsat"))


@pytest.mark.parametrize("planner", ["cpsat", pytest.param("milp", marks=pytest.mark.slow)])
@pytest.mark.parametrize("objective", ["period", "memory"])
@pytest.mark.parametrize("case", list(CASES))
def test_min_max_optimum_with_the_reduction_equals_without(case, objective, planner):
    _agree(small(case), objective, (planner,))


@pytest.mark.parametrize("planner", ["dp", "cpsat", pytest.param("milp", marks=pytest.mark.slow)])
@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("case", list(CASES))
def test_binding_memory_caps_optimum_with_the_reduction_equals_without(case, objective, planner):
    if planner == "dp" and objective in ("period", "memory"):
        pytest.skip("dp certifies latency and energy only")
    _agree(_caps(small(case), objective), objective, (planner,))


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_brute_force_agrees_on_a_typed_fleet(objective):
    inst = small("two-types")
    ref = get_planner("bruteforce").solve(inst, objective=objective)
    assert ref.status == "optimal"
    for planner in ("milp", "cpsat") if objective in ("period", "memory") else ("dp", "milp", "cpsat"):
        res = get_planner(planner).solve(inst, objective=objective)
        assert res.status == "optimal", (planner, res.message)
        assert res.value == pytest.approx(ref.value, abs=1e-6 * ref.value + res.info.get("tolerance", 0.0))


@pytest.mark.parametrize("reduction", ["canonical", "free", "first-use"])
@pytest.mark.parametrize("case", list(CASES))
def test_bounded_enumeration_with_types_loses_no_arc_within_the_bound(case, reduction):
    """The type-level filter (each part on the cheapest device of its orbit) and the lazy
    expansion keep every arc of every plan within the bound, as the whole reduced graph has."""
    import math

    from formulations.dp import arc_cost, prefix_suffix, shortest_path, terminal_cost

    inst = small(case)
    for objective in ("latency", "energy"):
        bounds = layout_bounds(inst, objective)
        full = build_stage_graph(inst, objective=objective, bounds=bounds, reduction=reduction)
        cost, term = arc_cost(full, objective), terminal_cost(full, objective)
        _, opt = shortest_path(full, objective)
        pre, suf = prefix_suffix(full, cost, term)
        keys = lambda sg, keep=None: {(sg.nodes[a.tail], a.option, sg.nodes[a.head])  # noqa: E731
                                      for i, a in enumerate(sg.arcs) if keep is None or i in keep}
        for factor in (1.0, 1.05, 1.5):
            upper = opt * factor
            sg = build_stage_graph(inst, objective=objective, upper=upper, bounds=bounds, reduction=reduction)
            within = {i for i, a in enumerate(full.arcs) if pre[a.tail] + cost[i] + suf[a.head] <= upper * (1 + 1e-9)}
            assert keys(full, within) <= keys(sg)
            assert shortest_path(sg, objective)[1] == pytest.approx(opt, rel=1e-9)
            left_out = [pre[a.tail] + cost[i] + suf[a.head] for i, a in enumerate(full.arcs) if i not in within]
            if left_out and math.isfinite(sg.outside):
                assert min(left_out) >= sg.outside * (1 - 1e-9)

"""The layout relaxation and the bounded enumeration never lose a plan within the bound.

A wrong bound would make the exact planners certify a plan that is not optimal, so the
bounded graph is compared arc by arc with the whole space on tiny instances, including a
three-device one where device assignments, capacity cuts and residual skips all matter.
"""

import math

import pytest
from builders import chain_graph, device, make_instance, residual_graph
from test_exact import CASES

from formulations.dp import arc_cost, prefix_suffix, shortest_path, terminal_cost
from formulations.relaxation import layout_bounds
from formulations.stagegraph import build_stage_graph
from milp_planner.instance import SearchSpace


def three_devices(graph, medium="switched", fusion=2):
    devs = [device("a", 1000, "0.01", power=(2, 1, 1)), device("b", 2500, "0.02", power=(4, 1, 2)),
            device("c", 1700, "0.005", power=(3, 2, 1))]
    bw = [[0, 100.0, 40.0], [250.0, 0, 80.0], [60.0, 120.0, 0]]
    return make_instance(graph, devs, bw=bw, lat=0.05, medium=medium, source=0, sink=2,
                         search=SearchSpace(fusion, 3, ("equal", "capacity"), ("rows", "channels")))


def four_devices_one_fast_link(graph):
    """Two pairs of devices with a fast link inside a pair and slow links between the pairs
    (AutoDiCE's boards in small): the third region of a 4-part layout a device reads comes
    over a slow link (``_received_ranked``)."""
    devs = [device("a", 1000, "0.01"), device("b", 1500, "0.005", power=(3, 1, 1)),
            device("c", 1200, "0.01", power=(2, 2, 1)), device("d", 900, "0.02")]
    fast, slow = 400.0, 30.0
    bw = [[0, fast, slow, slow + 5], [fast, 0, slow, slow], [slow, slow + 10, 0, fast], [slow, slow, fast, 0]]
    return make_instance(graph, devs, bw=bw, lat=0.02, source=0, sink=0,
                         search=SearchSpace(1, 4, ("equal",), ("rows",)))


ALL = dict(CASES)
ALL["chain-3dev"] = lambda: three_devices(chain_graph(4))
ALL["chain-4dev-ranked"] = lambda: four_devices_one_fast_link(chain_graph(3))
ALL["residual-3dev-shared"] = lambda: three_devices(residual_graph(), medium="shared", fusion=1)


SLOW = {"residual-3dev-shared"}  # ~30 s each: in the slow selection (CI runs it)
CASE_PARAMS = [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in sorted(ALL)]


def arc_keys(sg, keep=None):
    return {(sg.nodes[a.tail], a.option, sg.nodes[a.head]) for i, a in enumerate(sg.arcs)
            if keep is None or i in keep}


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_bounded_graph_holds_every_arc_of_every_plan_within_the_bound(case, objective):
    inst = ALL[case]()
    full = build_stage_graph(inst)
    cost, term = arc_cost(full, objective), terminal_cost(full, objective)
    _, opt = shortest_path(full, objective)
    pre, suf = prefix_suffix(full, cost, term)
    bounds = layout_bounds(inst, objective)
    assert float(bounds.to_go[0].min()) <= opt * (1 + 1e-9)
    for factor in (1.0, 1.02, 1.2, 2.0):
        upper = opt * factor
        sg = build_stage_graph(inst, objective=objective, upper=upper, bounds=bounds)
        within = {i for i, a in enumerate(full.arcs) if pre[a.tail] + cost[i] + suf[a.head] <= upper * (1 + 1e-9)}
        assert arc_keys(full, within) <= arc_keys(sg)
        _, value = shortest_path(sg, objective)
        assert value == pytest.approx(opt, rel=1e-9)
        # every plan left out costs at least `outside`, which is beyond the bound
        assert sg.outside >= upper * (1 - 1e-9)
        left_out = [pre[a.tail] + cost[i] + suf[a.head] for i, a in enumerate(full.arcs) if i not in within]
        if left_out and math.isfinite(sg.outside):
            assert min(left_out) >= sg.outside * (1 - 1e-9)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_bound_after_each_stage_never_exceeds_the_best_rest_of_the_plan(case):
    """After every arc of the whole space, the relaxation's bound on what is left is at most
    the exact best completion (the DP suffix)."""
    inst = ALL[case]()
    for objective in ("latency", "energy"):
        bounds = layout_bounds(inst, objective)
        full = build_stage_graph(inst, objective=objective, bounds=bounds)
        # the arc's head class is fixed by its option; its bound on what is left must hold
        cost = arc_cost(full, objective)
        _, suf = prefix_suffix(full, cost, terminal_cost(full, objective))
        index = {}
        for key, tab in bounds.tables.items():
            for oi in range(len(tab.group)):
                index[tab.groups[tab.group[oi]].option(tab.perm[oi])] = (tab, oi)
        for a in full.arcs:
            tab, oi = index[a.option]
            after = float(bounds.after(a.option.first, a.option.last, dict(full.nodes[a.tail][1]))[oi])
            assert after <= suf[a.head] * (1 + 1e-9) + 1e-12
        assert bounds.misses == 0


@pytest.mark.parametrize("case", ["chain", "residual-external", "chain-3dev"])
def test_rounds_sharing_a_memo_build_the_same_graphs(case):
    """The exact planners' rounds reuse priced arcs and the options sorted near the bound
    (``memo``); each round's graph must be the one a fresh enumeration builds."""
    inst = ALL[case]()
    _, opt = shortest_path(build_stage_graph(inst), "latency")
    bounds = layout_bounds(inst, "latency")
    memo: dict = {}
    for factor in (1.0, 1.004, 1.02, 1.01, 1.2, 2.0, 1.0):
        upper = opt * factor
        fresh = build_stage_graph(inst, objective="latency", upper=upper, bounds=bounds)
        again = build_stage_graph(inst, objective="latency", upper=upper, bounds=bounds, memo=memo)
        assert arc_keys(again) == arc_keys(fresh)
        assert again.outside == pytest.approx(fresh.outside, rel=1e-12)
    assert memo


@pytest.mark.parametrize("objective", ["latency", "energy", "period"])
@pytest.mark.parametrize("case", ["residual-external", "residual-3dev-shared", "residual-shared", "chain-3dev", "chain-4dev-ranked"])
def test_floors_priced_a_row_at_a_time_are_the_same(case, objective, monkeypatch):
    """``_FloorCost.CHUNK_BYTES`` bounds the temporaries between two memory checks; one read
    layout per chunk (and per slice of a residual pair's rows) gives the same floors."""
    import numpy as np

    from formulations.relaxation import _FloorCost

    whole = layout_bounds(ALL[case](), objective)
    pairs = []
    orig = _FloorCost._chunk_rows
    monkeypatch.setattr(_FloorCost, "_chunk_rows", lambda self, *a: pairs.append(orig(self, *a)) or 1)
    monkeypatch.setattr("formulations.relaxation.BACKWARD_CHUNK_BYTES", 1)  # the backward pass too
    by_row = layout_bounds(ALL[case](), objective)  # (a new instance: not the memo's)
    assert pairs and all(r > 1 for r in pairs)  # the default chunks hold several rows here
    assert by_row.lower == whole.lower
    assert len(by_row.to_go) == len(whole.to_go)
    for a, b in zip(by_row.to_go, whole.to_go):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rows", [None, 1])
@pytest.mark.parametrize("objective", ["latency", "energy", "period"])
@pytest.mark.parametrize("case", ["residual-external", "residual-3dev-shared", "chain-3dev", "chain-4dev-ranked"])
def test_received_terms_gathered_on_demand_give_the_same_floors(case, objective, rows, monkeypatch):
    """A tensor's received seconds over every read layout and option are held gathered only up
    to ``TERM_BYTES``; past it (here: always) each chunk gathers its own rows, with the same
    floors, also one row per chunk (a residual pair's slices included)."""
    import numpy as np

    import formulations.relaxation as rel

    whole = layout_bounds(ALL[case](), objective)
    lazy = []
    orig_rows = rel._Term.rows
    monkeypatch.setattr(rel._Term, "rows", lambda self, *a, **k: lazy.append(self.full is None) or orig_rows(self, *a, **k))
    monkeypatch.setattr(rel, "TERM_BYTES", 0)
    if rows is not None:
        monkeypatch.setattr(rel._FloorCost, "_chunk_rows", lambda self, *a: rows)
    again = layout_bounds(ALL[case](), objective)
    assert any(lazy)  # the on-demand path ran
    assert again.lower == whole.lower
    for a, b in zip(again.to_go, whole.to_go, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_chunk_of_floors_stays_within_chunk_bytes():
    from formulations.relaxation import _FloorCost

    cost = _FloorCost.__new__(_FloorCost)
    assert cost._chunk_rows(3, 10) == _FloorCost.CHUNK
    assert cost._chunk_rows(16, 10_000) == _FloorCost.CHUNK_BYTES // (4 * 16 * 10_000)
    assert cost._chunk_rows(16, 10**9) == 1

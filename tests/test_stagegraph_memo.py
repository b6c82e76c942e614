"""The stage graph's memo across rounds (interned states, shared heads, arcs priced per state).

A round built with the memo of earlier rounds must be the graph a fresh build gives: the same
nodes and the same arcs with the same costs, for every objective the rounds use, on a chain and
on DAGs whose tensors outlive a stage (where heads are not shared by every tail)."""

from __future__ import annotations

import pytest
from test_exact import CASES

from formulations.relaxation import layout_bounds
from formulations.stagegraph import build_stage_graph
from formulations.symmetry import reduction_for
from milp_planner.planners import get_planner


def _arcs(sg):
    """The graph as a set: (tail state, head state, option, tau, energy, loads)."""
    return {(sg.nodes[a.tail], sg.nodes[a.head], a.option, round(a.tau, 12), round(a.energy, 12),
             tuple(round(x, 12) for x in a.load)) for a in sg.arcs}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("objective", ["latency", "energy", "period"])
def test_a_round_with_the_memo_is_the_fresh_graph(case, objective):
    inst = CASES[case]()
    best = get_planner("bruteforce").solve(inst, objective=objective).value
    reduction = reduction_for(inst, objective)
    bounds = layout_bounds(inst, objective, symmetry=reduction != "none", drop_overflow=True)
    memo: dict = {}
    for upper in (best * 0.999, best, best * 1.2, best * 2):  # rounds growing their bound
        kw = dict(objective=objective, upper=upper, bounds=bounds, reduction=reduction, drop_overflow=True)
        with_memo = build_stage_graph(inst, memo=memo, **kw)
        fresh = build_stage_graph(inst, **kw)
        assert _arcs(with_memo) == _arcs(fresh)
        assert with_memo.forward_arcs == fresh.forward_arcs
        assert sorted(map(repr, with_memo.nodes)) == sorted(map(repr, fresh.nodes))

"""The stage graph's memo across rounds (interned states, shared heads, arcs priced per state).

A round built with the memo of earlier rounds must be the graph a fresh build gives: the same
nodes and the same arcs with the same costs, for every objective the rounds use, on a chain and
on DAGs whose tensors outlive a stage (where heads are not shared by every tail); and every arc
must lead where ``price_stage`` says its option leads from its tail, at the cost it says. (An
option's head keyed without its first layer once sent arcs of one table to the heads of
another's options with the same index; it showed only in fronts under memory caps, which the
specs tests/differential_corpus/random-{111,243,265-3}.json catch, not these plain builds.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_exact import CASES

from formulations.relaxation import layout_bounds
from formulations.stagegraph import _state_key, build_stage_graph
from formulations.symmetry import reduction_for
from milp_planner.cost.evaluator import price_stage, pricer
from milp_planner.planners import get_planner


def _arcs(sg):
    """The graph as a set: (tail state, head state, option, tau, energy, loads)."""
    return {(sg.nodes[a.tail], sg.nodes[a.head], a.option, round(a.tau, 12), round(a.energy, 12),
             tuple(round(x, 12) for x in a.load)) for a in sg.arcs}


CORPUS = Path(__file__).parent / "differential_corpus"


def _instance(case):
    if case in CASES:
        return CASES[case]()
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import differential as bed

    from milp_planner.instance.generate import load_spec

    return bed.make_case(0, spec=load_spec(CORPUS / f"{case}.json")).inst


@pytest.mark.parametrize("case", sorted(CASES) + ["random-243", "random-111"])
@pytest.mark.parametrize("objective", ["latency", "energy", "period"])
def test_a_round_with_the_memo_is_the_fresh_graph(case, objective):
    inst = _instance(case)
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
        check_heads_and_costs(with_memo)


def check_heads_and_costs(sg):
    """Each arc, priced again by ``price_stage`` from its tail's state, costs what it says and
    leads to the state ``price_stage`` gives (no memo involved: the geometry from the option)."""
    inst = sg.instance
    pr = pricer(inst)
    for a in sg.arcs:
        if a.relabel is not None:  # the canonical reduction's frames: compared by the path tests
            continue
        opt = a.option
        ranges = list(opt.ranges)
        geos = pr.geometry.parts(opt.first, opt.last, opt.axis, ranges)
        sp = price_stage(pr, dict(sg.nodes[a.tail][1]), opt.last, list(opt.devices), geos)
        assert sg.nodes[a.head][1] == _state_key(sp.owners), opt
        assert sg.nodes[a.head][0] == opt.last + 1
        assert a.tau == pytest.approx(sp.tau, rel=1e-12, abs=1e-15)
        assert a.energy == pytest.approx(sp.energy, rel=1e-12, abs=1e-15)
        assert list(a.weights) == list(sp.weights) and list(a.working) == list(sp.working)


def test_shared_values_keep_their_kinds_apart():
    # (0, 532) == (0.0, 532.0): a weight tuple (CP-SAT's integer coefficients) must not become
    # an equal float load tuple (the differential bed's random-15-5 failed so)
    from formulations.stagegraph import _Interned

    interned = _Interned()
    load = interned.same("load", (0.0, 532.0))
    weights = interned.same("weights", (0, 532))
    assert load == weights and all(type(x) is int for x in weights)
    assert interned.same("weights", (0, 532)) is weights and interned.same("load", (0.0, 532.0)) is load


@pytest.mark.parametrize("case", sorted(CASES))
def test_equal_options_of_a_graph_are_one_object(case):
    sg = build_stage_graph(CASES[case]())
    by_value = {}
    for a in sg.arcs:
        assert by_value.setdefault((a.option.first, a.option.last, a.option.axis, a.option.ranges,
                                    a.option.devices), a.option) is a.option
    if len(sg.instance.graph.layers) > 1:  # (one layer: every option leaves the source alone)
        assert len(by_value) < len(sg.arcs)  # options priced from several tail states

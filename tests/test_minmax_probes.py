"""The threshold probes, floors and Lagrangian bounds of the min-max search
(formulations/minmax.py), checked path by path on tiny stage graphs: a probe that says
"nothing within T" is checked against every path of the graph, every floor against every
completion of the partial plan it bounds."""

import math

import numpy as np
import pytest
from test_minmax import CASES, _brute

from milp_planner.deadline import NEVER, Deadline
from formulations import minmax as mm
from formulations.caps import PathArrays, undominated
from formulations.stagegraph import build_stage_graph

MAX_PATHS = 4000  # the first paths in depth-first order (every path of the smaller graphs)


def _paths(sg, limit=MAX_PATHS):
    """(arcs, terminal node) of up to ``limit`` source-terminal paths, depth first."""
    out, stack = [], [(sg.source, [])]
    while stack and len(out) < limit:
        v, arcs = stack.pop()
        if v in sg.terminals:
            out.append((arcs, v))
        for a in reversed(sg.out_arcs[v]):
            stack.append((sg.arcs[a].head, arcs + [a]))
    return out


def _setup(case, objective):
    sg = build_stage_graph(CASES[case]())
    pa = PathArrays(sg)
    prob = mm._Problem(sg, objective, pa)
    lag = mm._lagrange(sg, prob)
    prob.set_weights(lag.weights)
    return sg, prob, lag


@pytest.mark.parametrize("objective", ["period", "memory"])
@pytest.mark.parametrize("case", ["tiny-fc-2dev", "chain-4dev", "residual-3dev-shared"])
def test_probes_agree_with_every_path(case, objective):
    sg, prob, lag = _setup(case, objective)
    ref = _brute(case, objective, CASES[case])
    assert ref.status == "optimal"
    opt = ref.value
    assert float(lag.bounds.max()) <= opt * (1 + 1e-9)  # the Lagrangian bounds are bounds
    assert lag.best is not None and lag.best[1] >= opt * (1 - 1e-9)
    values = sorted({round(sg.path_value(arcs, objective), 15) for arcs, _ in _paths(sg)})
    assert values[0] == pytest.approx(opt, rel=1e-9)
    # thresholds just below and at distinct path values, and between them
    check_probes(sg, prob, objective, opt, [opt * (1 - 1e-6), opt, *values[1:6], (values[0] + values[-1]) / 2,
                                           0.5 * opt])
    for width in (1, 2, 4):  # a beam is a heuristic: a plan, never better than the optimum
        found, _, _ = mm._probe(sg, prob, math.inf, 10_000_000, NEVER, beam=width)
        assert found is not None and found[1] >= opt * (1 - 1e-9)
        assert sg.path_value(found[0], objective) == pytest.approx(found[1], rel=1e-9)


def check_probes(sg, prob, objective, opt, thresholds, **kw):
    """Each probe finds nothing below the optimum and the optimum at or above it, its plan
    priced as the graph prices it and within the support (``kw``: ``_probe``'s options)."""
    for T in thresholds:
        found, kept, support = mm._probe(sg, prob, T, 10_000_000, NEVER, **kw)
        if T < opt * (1 - 1e-9):
            assert found is None, (T, opt)
        else:
            assert found is not None, (T, opt)
            arcs, value = found
            assert value == pytest.approx(opt, rel=1e-9)
            assert sg.path_value(arcs, objective) == pytest.approx(value, rel=1e-9)
            assert support[arcs].all()


@pytest.mark.parametrize("objective", ["period", "memory"])
@pytest.mark.parametrize("case", ["chain-4dev", "residual-3dev-shared"])
def test_floors_never_exceed_a_completion(case, objective):
    """Every floor of every prefix of every path (per-device suffixes, the mean, the
    Lagrangian weightings) is at most that path's value, and the per-arc floors of an
    extension (``floor_grid``) are the floors of the extended labels."""
    sg, prob, _ = _setup(case, objective)
    nA, nM = prob.add.shape[1], prob.mx.shape[1]
    checked = 0
    for arcs, end in _paths(sg, 1500):
        value, ok = prob.path_floor(arcs, end)
        assert value == pytest.approx(sg.path_value(arcs, objective), rel=1e-9)
        S, M = np.zeros((1, nA)), np.zeros((1, nM))
        for a in arcs:
            v = sg.arcs[a].tail
            fl, _ = prob.floor(S, M, np.array([v]))
            assert fl[0] <= value * (1 + 1e-9) + 1e-15
            A = np.array([x for x in sg.out_arcs[v] if prob.usable[x]], dtype=np.int64)
            grid, gok = prob.floor_grid(S, M, A, prob.pa.head[A])
            S2 = S + prob.add[A]
            M2 = np.maximum(M, prob.mx[A])
            ref, rok = prob.floor(S2, M2, prob.pa.head[A])
            assert np.allclose(grid[0], ref, rtol=1e-12, atol=1e-18)
            assert (gok[0] == rok).all()
            S, M = S + prob.add[a], np.maximum(M, prob.mx[a]) if nM else M
            checked += 1
    assert checked > 100


def test_screened_dominance_equals_the_plain_test():
    rng = np.random.default_rng(7)
    for n, d in ((300, 3), (2000, 4), (5000, 2)):
        X = rng.integers(0, 12, size=(n, d)).astype(float)  # many ties and duplicates
        got = mm._undominated(X)
        kept = X[got]
        # nothing kept is dominated by another row; everything dropped is dominated or a duplicate
        for i, x in enumerate(kept):
            le = (kept <= x).all(axis=1)
            le[i] = False
            assert not le.any()
        assert len({tuple(r) for r in kept}) == len(kept)
        plain = undominated(X[:, 0], X[:, 1:])  # the same set of distinct rows as the plain test
        assert {tuple(r) for r in kept} == {tuple(r) for r in X[plain]}
        assert {tuple(r) for r in X[mm._pareto(X, NEVER)]} == {tuple(r) for r in kept}
        dropped = np.setdiff1d(np.arange(n), got)
        for j in dropped[:300]:
            assert (kept <= X[j]).all(axis=1).any()


@pytest.mark.parametrize("case", ["chain-4dev", "residual-3dev-shared", "tiny-fc-2dev"])
def test_a_ceiling_reached_is_tried_again(case, monkeypatch):
    """A probe that outgrows its label cap sets a ceiling the next thresholds bisect below; once
    they reach it, it is tried again. On edge-3dev a cap of 1,000 labels (set from a probe of 27)
    stopped a probe below the optimum, and the thresholds crept up to it until the deadline.
    Here the first exact probe fails the same way: the search still certifies the optimum
    (before: stopped at the deadline below it); with every probe failing it stops with a
    proven interval instead of looping."""
    sg = build_stage_graph(CASES[case]())
    opt = _brute(case, "period", CASES[case]).value
    real = mm._probe
    failed: list = []

    def flaky(sg_, prob, T, cap, deadline, beam=None, **kw):
        if beam is None and (always or not failed):
            failed.append(T)
            raise mm.LabelBudget()
        return real(sg_, prob, T, cap, deadline, beam=beam, **kw)

    monkeypatch.setattr(mm, "_probe", flaky)
    always = False
    res = mm.minmax_search(sg, "period", lower=0.0, deadline=Deadline.after(10))
    assert failed and failed[0] < opt  # (the case holds what it is meant to)
    assert res.optimal and res.value == pytest.approx(opt, rel=1e-9)
    always, failed = True, []
    res = mm.minmax_search(sg, "period", lower=0.0, deadline=NEVER)
    assert res.stopped and not res.optimal and res.lower <= opt * (1 + 1e-9)

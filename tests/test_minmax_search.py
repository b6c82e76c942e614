"""The min-max search's probe schedule and column-wise dominance (formulations/minmax.py),
checked on tiny stage graphs against brute force and the plain dominance test: the
thresholds chosen from the label counts of earlier probes never change the optimum found."""

import math

import numpy as np
import pytest
from test_minmax import CASES, _brute
from test_minmax_probes import _paths, _setup, check_probes

from formulations import minmax as mm
from formulations.caps import undominated


@pytest.mark.parametrize("objective", ["period", "memory"])
@pytest.mark.parametrize("case", ["chain-4dev", "residual-3dev-shared"])
def test_search_with_any_schedule_finds_the_optimum(case, objective, monkeypatch):
    """Whatever thresholds the schedule picks (fixed fractions only, steep or timid growth),
    the search returns the brute-force optimum, and its bound when stopped is a bound."""
    ref = _brute(case, objective, CASES[case])
    sg, _, _ = _setup(case, objective)
    for probes, growth in (((1.0,), 3.0), ((1 / 64, 1 / 32), 1.05), (mm._PROBES, 50.0)):
        monkeypatch.setattr(mm, "_PROBES", probes)
        monkeypatch.setattr(mm, "GROWTH", growth)
        res = mm.minmax_search(sg, objective)
        assert res.optimal and res.value == pytest.approx(ref.value, rel=1e-9)
        assert sg.path_value(res.arcs, objective) == pytest.approx(ref.value, rel=1e-9)
        assert res.support[res.arcs].all()
        stopped = mm.minmax_search(sg, objective, max_labels=3)
        assert stopped.lower <= ref.value * (1 + 1e-9)


def test_next_threshold_steps_between_the_bound_and_the_incumbent():
    first, top = 10.0, 20.0
    # no probe yet: the first fixed fraction; past them, the incumbent
    assert mm._next_threshold(first, first, top, []) == pytest.approx(first + 10 * mm._PROBES[0])
    assert mm._next_threshold(first, 19.9, top, []) == top
    # labels x10 per unit: three times as many labels one log(3)/log(10) unit further
    refuted = [(12.0, 100), (13.0, 1000)]
    T = mm._next_threshold(first, 13.0, top, refuted)
    assert T == pytest.approx(13.0 + math.log(3) / math.log(10))
    # the growth accelerated (x10 then x100 per unit): the step shrinks as the rate grew
    refuted = [(11.0, 10), (12.0, 100), (13.0, 10_000)]
    T = mm._next_threshold(first, 13.0, top, refuted)
    assert T == pytest.approx(13.0 + math.log(3) / (math.log(100) * 2))
    # less time, a smaller step; never past halfway to the incumbent, never below the bound
    assert mm._next_threshold(first, 13.0, top, refuted, growth=1.25) < T
    assert mm._next_threshold(first, 13.0, 13.2, [(12.9, 10), (13.0, 11)]) == pytest.approx(13.1)
    # a flat count: a step at most twice the last one
    assert mm._next_threshold(first, 13.0, 30.0, [(12.0, 100), (13.0, 101)]) == pytest.approx(15.0)
    for lo in np.linspace(first, top, 7):
        for cnt in ([], [(lo - 1, 50), (lo, 60)], [(lo - 2, 1), (lo - 1, 5), (lo, 5000)]):
            T = mm._next_threshold(first, lo, top, cnt)
            assert lo <= T <= top and (T > lo or lo >= top)


@pytest.mark.parametrize("n,d", [(300, 1), (400, 2), (2000, 3), (3000, 5), (600, 7)])
def test_column_wise_dominance_equals_the_plain_test(n, d):
    """``_pareto`` compares only the columns after the first (sorted by it) and only with the
    kept rows nowhere above the block's largest values: the same rows as the plain test,
    with ties, duplicates and continuous values."""
    rng = np.random.default_rng(n + d)
    for X in (rng.integers(0, 6, size=(n, d)).astype(float), rng.random((n, d)),
              np.round(rng.random((n, d)) * 4) / 4):
        got = mm._undominated(X)
        kept = X[got]
        assert len({tuple(r) for r in kept}) == len(kept)
        plain = undominated(X[:, 0], X[:, 1:])
        assert {tuple(r) for r in kept} == {tuple(r) for r in X[plain]}
        for j in np.setdiff1d(np.arange(n), got)[:200]:
            assert (kept <= X[j]).all(axis=1).any()


@pytest.mark.parametrize("objective", ["period", "memory"])
@pytest.mark.parametrize("case", ["tiny-fc-2dev", "chain-4dev", "residual-3dev-shared"])
def test_meeting_probes_agree_with_every_path(case, objective):
    """Labels grown from both ends (``_probe_meet``): nothing below the optimum, the optimum
    itself at or above it, its plan priced as the graph prices it and within the support."""
    sg, prob, _ = _setup(case, objective)
    opt = _brute(case, objective, CASES[case]).value
    values = sorted({round(sg.path_value(arcs, objective), 15) for arcs, _ in _paths(sg)})
    check_probes(sg, prob, objective, opt,
                 [opt * (1 - 1e-6), opt, *values[1:6], (values[0] + values[-1]) / 2, 0.5 * opt, math.inf], meet=True)


@pytest.mark.parametrize("objective", ["period", "memory"])
@pytest.mark.parametrize("case", ["chain-4dev", "residual-3dev-shared"])
def test_backward_floors_never_exceed_the_plan(case, objective):
    """A backward label holds a plan's suffix (the terminal's gather included): its floor with
    the prefix floors (``side(backward=True)``), and the extension floors of ``floor_grid``,
    never exceed the value of any plan through it."""
    sg, prob, _ = _setup(case, objective)
    back = prob.side(backward=True)
    nA, nM = prob.add.shape[1], prob.mx.shape[1]
    checked = 0
    for arcs, end in _paths(sg, 1500):
        value, _ = prob.path_floor(arcs, end)
        S, M = prob.term_add[end][None, :].copy(), np.zeros((1, nM))
        for a in reversed(arcs):
            v = sg.arcs[a].head
            fl, _ = prob.floor(S, M, np.array([v]), back)
            assert fl[0] <= value * (1 + 1e-9) + 1e-15
            tails = np.array([sg.arcs[a].tail])
            grid, _ = prob.floor_grid(S, M, np.array([a]), tails, back)
            S, M = S + prob.add[a], np.maximum(M, prob.mx[a]) if nM else M
            ref, _ = prob.floor(S, M, tails, back)
            assert grid[0, 0] == pytest.approx(ref[0], rel=1e-12, abs=1e-18)
            checked += 1
        whole, _ = prob.value(S, M)
        assert whole[0] == pytest.approx(value, rel=1e-12)
    assert checked > 100

"""The min-max search's probe schedule and column-wise dominance (formulations/minmax.py),
checked on tiny stage graphs against brute force and the plain dominance test: the
thresholds chosen from the label counts of earlier probes never change the optimum found."""

import math

import numpy as np
import pytest
from test_minmax import CASES, _brute
from test_minmax_probes import _paths, _setup

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

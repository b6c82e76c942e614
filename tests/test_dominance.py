"""``formulations.dominance.undominated`` against the definition, on random label sets.

The enumeration's cap labels and the capped label search prune with it, so a label it drops
wrongly would drop plans from a certified graph."""

from __future__ import annotations

import doctest

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import formulations.dominance as dominance
from formulations.dominance import BLOCK, undominated


def by_definition(cost: np.ndarray, res: np.ndarray) -> set[tuple]:
    """The distinct vectors no other vector is nowhere worse than (and somewhere better)."""
    v = [tuple(r) for r in np.column_stack([cost, res]).tolist()]
    return {a for a in v if not any(b != a and all(x <= y for x, y in zip(b, a)) for b in v)}


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 3 * BLOCK + 5), dims=st.integers(1, 4), span=st.integers(1, 6), seed=st.integers(0, 2 ** 32 - 1))
def test_undominated_is_the_pareto_set_once_each_in_increasing_cost(n, dims, span, seed):
    rng = np.random.default_rng(seed)
    cost = rng.integers(0, span, n).astype(float)
    res = rng.integers(0, span, (n, dims)).astype(float)
    kept = undominated(cost, res)
    vectors = [tuple(r) for r in np.column_stack([cost, res])[kept].tolist()]
    assert len(vectors) == len(set(vectors))  # ties kept once
    assert set(vectors) == by_definition(cost, res)
    assert np.all(np.diff(cost[kept]) >= 0)


def test_the_module_examples_run():
    assert doctest.testmod(dominance).failed == 0

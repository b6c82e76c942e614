"""Pareto dominance among labels: which (cost, resources) vectors no other vector dominates.

Shared by the capped label search (``formulations.caps``) and the enumeration's cap labels
(``formulations.stagegraph``, ``_CapFloors``)."""

from __future__ import annotations

import numpy as np


def undominated(cost: np.ndarray, res: np.ndarray) -> np.ndarray:
    """Indices of the labels no other label dominates (no larger cost and no larger resource,
    ties kept once), in increasing cost."""
    order = np.lexsort(tuple(res.T[::-1]) + (cost,))
    v = np.column_stack([cost[order], res[order]])
    kept: list[int] = []
    kv = np.empty((0, v.shape[1]))
    block = 256
    for lo in range(0, len(v), block):
        x = v[lo:lo + block]
        out = (kv[None, :, :] <= x[:, None, :]).all(axis=2).any(axis=1) if len(kv) else np.zeros(len(x), bool)
        inner = (x[None, :, :] <= x[:, None, :]).all(axis=2)  # inner[i, j]: j nowhere worse than i
        inner &= np.tri(len(x), k=-1, dtype=bool)  # only earlier labels (sorted) can dominate
        out |= inner.any(axis=1)
        # an earlier label of this block that is itself dominated still dominates transitively
        # through the label that dominates it, so dropping it keeps the result exact
        sel = np.flatnonzero(~out)
        kept.extend(order[lo + sel])
        kv = np.vstack([kv, x[sel]])
    return np.array(kept, dtype=np.int64)

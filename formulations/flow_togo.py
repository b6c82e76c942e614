"""Energy still to come after a stage boundary, from the flow LP's duals and the exact state.

The layout relaxation (``formulations.relaxation``) forgets which device owns a region, so for
energy it lets every stage run on its cheapest device and read its input "as if owned": on
MobileNetV2 over 4 Pis and 4 Jetson Nanos its bound is 171.8 mJ, barely above the
compute-only floor (168.8 mJ), against the flow LP's 195.4 mJ (``milp_planner.cost.flow``),
and the bounded enumeration, pruning with it, found more than 60,000 arcs within the flow
bound itself. This module turns the flow LP into a floor on what is left of a plan from an
**exact** state (who owns what), which the enumeration takes with the relaxation's (the
larger of the two; ``formulations.stagegraph``). With it that instance is certified in about
12 s (docs/exact.md, "Energy: the flow floor after each arc").

The LP (``_FlowLP``) is ``min cost . x``, ``A x >= b``, ``0 <= x <= 1`` over the shares
``c[l, d]`` (d computes of layer l), ``R[t, d]`` (d receives of tensor t) and ``S[t, d]``
(d sends of graph output t to the sink), with these rows (``_FlowLP.row_tags``):

- ``cover`` l: ``sum_d c[l, d] >= m_l``;
- ``receive`` (t, d, l'): ``R[t, d] - alpha c[l', d] + c[p, d] >= 0`` (p produces t, l' reads
  it; no ``c[p, d]`` for a graph input);
- ``gather`` t: ``sum_(d != sink) S[t, d] + c[p, sink] >= 1``; ``gather-cap`` (t, d):
  ``c[p, d] - S[t, d] >= 0``.

**The suffix problem at boundary k.** Take a plan and the state at boundary k (before layer
k). Its stages after k compute shares ``c[l, d]`` of the layers ``l >= k``, receive in those
stages ``R_k[t, d]`` (the share of t that d receives after k, capped at 1) and gather
``S[t, d]``. Each costs at least its LP cost (the LP's own argument, stage by stage), so the
energy after k is at least ``cost . x_k`` over those columns. They satisfy the **active rows**
(those with a column after k: ``cover`` l and ``receive`` (t, d, l') with ``l, l' >= k``, every
``gather`` row) with every column of a layer ``p < k`` replaced by what the state says: a
device holds of an earlier tensor t exactly what it **owns** of it at the boundary,
``own(t, d)`` (its share of t's cells; ``docs/model.md`` section 3: received and halo rows are
discarded after each stage, and a gather sends exactly the owned regions). In the rows above,
an earlier layer's column is always ``c[p, d]`` with coefficient +1, so an active row reads
``A_r x_k >= b_r - sum_(p < k) A_(r, c[p, d]) own(out(p), d)``.

**The floor.** For any ``y >= 0`` (weak duality with the box ``0 <= x <= 1``):

    cost . x_k >= sum_(active r) y_r (b_r - sum_(p<k) A_(r, c[p,d]) own) + sum_(j after k) min(0, red_k[j])

with ``red_k[j] = cost_j - sum_(active r) y_r A_(r, j)``: a constant per boundary less a
weight per (live tensor, device) times the share it owns (``FlowToGo.at``). The ``y`` are the
LP's optimal duals, averaged over each orbit of interchangeable devices (``formulations.
symmetry``; the LP is invariant under exchanging them, so the average is still optimal, and
states that differ by such an exchange get the same floor). Any ``y >= 0`` gives a valid
floor; the LP's make the floor at the source's state the LP's own bound, and follow the
plans near the LP's optimum closely. Each value is lowered by a relative 1e-9 of the sum of
the magnitudes it adds (float rounding).

What it cannot see: the memory caps (a tensor may stay where it is for the rest of the plan,
whatever the device already stores), the parts' overheads (the chord ``(o + a) c``), halo
rows and message latencies.

``tests/test_flow_togo.py`` checks, on tiny instances, that the floor at every node of the
whole stage graph is at most the best completion from it (and at the source at most the
brute-force optimum), that the enumeration's vectorised floors are the same numbers, and that
not crediting the owned shares, or keeping the rows of earlier layers, breaks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from milp_planner.cost.evaluator import EXTERNAL
from milp_planner.cost.flow import _FlowLP, _LPFailed
from milp_planner.instance import Instance
from milp_planner.space.geometry import full_region

_MARGIN = 1e-9  # relative, on the sum of the magnitudes each floor adds


@dataclass
class FlowToGo:
    """Per boundary k (0 .. layers): ``constant[k]`` and, per tensor live across k that the
    floor prices, ``weights[k][t]`` (per device): the energy after k from a state is at least
    ``constant[k] - sum_(t, d) weights[k][t][d] x own(t, d)``."""

    constant: np.ndarray
    weights: list[dict[str, np.ndarray]]
    cells: dict[str, int]  # cells of each weighted tensor (its shares' denominator)
    lp_value: float  # the LP's optimum (the floor at the source's state, up to rounding)
    _share_memo: dict = field(default_factory=dict, repr=False)

    def held(self, k: int, owners) -> float:
        """``sum_(t, d) weights[k][t][d] x own(t, d)`` over the tensors of ``owners``."""
        out = 0.0
        for t, w in self.weights[k].items():
            lst = owners.get(t)
            if not lst:
                continue
            held = 0.0
            for d, region in lst:
                if d != EXTERNAL:
                    held += float(w[d]) * region.cells
            out += held / self.cells[t]
        return out

    def at(self, k: int, owners) -> float:
        """The floor on the energy of every completion of a plan from the state ``owners``
        (tensor -> ((device, region), ...), as ``formulations.stagegraph`` keeps it) at
        boundary ``k``."""
        return float(self.constant[k]) - self.held(k, owners)

    def after_options(self, tab, owners, devices: np.ndarray, group: np.ndarray,
                      orbit: np.ndarray | None = None) -> np.ndarray:
        """The floor after each option of the stage table ``tab`` taken from the state
        ``owners`` (``formulations.relaxation.StageTable``; ``devices`` (options, parts) and
        ``group`` (options,) as its ``flat``): what the tail's tensors still live after the
        stage and the parts' exit tensors leave. With ``orbit`` (device -> its orbit's devices
        as a (devices, orbit size) index array) each part is priced at the most any device
        of its orbit holds, a floor for every device order of the option's orbits."""
        last = tab.groups[0].last
        k = last + 1
        wk = self.weights[k]
        base = float(self.constant[k]) - self.held(k, {t: v for t, v in owners.items() if t in wk})
        share, tensors = self._shares(tab, k)
        if not tensors:
            return np.full(len(group), base)
        W = np.stack([wk[t] for t in tensors])  # (tensors, devices)
        if orbit is not None:
            W = W[:, orbit].max(axis=2)
        kmax = devices.shape[1]
        sh = share[group][:, :kmax]  # (options, parts, tensors)
        held = np.einsum("opt,top->o", sh, W[:, devices])
        return base - held

    def _shares(self, tab, k: int):
        """(share (groups, parts, tensors): each part's owned share of each exit tensor that
        the floor at ``k`` weighs; those tensors), remembered per table."""
        hit = self._share_memo.get(id(tab))
        if hit is not None and hit[0] is tab:
            return hit[1], hit[2]
        wk = self.weights[k]
        tensors = sorted({t for grp in tab.groups for geo in grp.geos for t in geo.owns if t in wk})
        kmax = max(len(grp.geos) for grp in tab.groups)
        share = np.zeros((len(tab.groups), kmax, len(tensors)))
        for gi, grp in enumerate(tab.groups):
            for j, geo in enumerate(grp.geos):
                for ti, t in enumerate(tensors):
                    region = geo.owns.get(t)
                    if region is not None:
                        share[gi, j, ti] = region.cells / self.cells[t]
        self._share_memo[id(tab)] = (tab, share, tensors)
        return share, tensors


def flow_to_go(instance: Instance, deadline: Deadline = NEVER, symmetric: bool = True) -> FlowToGo | None:
    """The energy floors of the module docstring, or None when the flow LP fails or is not
    solved by ``deadline``."""
    try:
        lp = _FlowLP(instance)
        lp.deadline = deadline
        value, y = lp._solve(lp.joules)
    except _LPFailed:
        return None
    if deadline.passed():
        return None
    y = np.clip(np.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
    if symmetric:
        y = _orbit_average(instance, lp, y)
    return _floors(instance, lp, y, value)


def _orbit_average(instance: Instance, lp: _FlowLP, y: np.ndarray) -> np.ndarray:
    """``y`` averaged, row by row, over the rows that differ only by a device of one orbit."""
    from formulations.symmetry import device_types

    orbit = device_types(instance).orbit
    groups: dict[tuple, list[int]] = {}
    for r, tag in enumerate(lp.row_tags):
        if tag[0] in ("receive", "gather-cap"):
            key = (tag[0], tag[1], orbit[tag[2]]) + tuple(tag[3:])
        else:
            key = tag
        groups.setdefault(key, []).append(r)
    out = y.copy()
    for rows in groups.values():
        if len(rows) > 1:
            out[rows] = y[rows].mean()
    return out


def _row_layer(tag: tuple, n: int) -> int:
    """The last boundary at which a row of ``_FlowLP.row_tags`` is active: its covered layer,
    its reader, or ``n`` (the gather)."""
    if tag[0] == "cover":
        return tag[1]
    if tag[0] == "receive":
        return tag[3]
    return n


def _negative_part(reduced: np.ndarray) -> np.ndarray:
    """``min(0, reduced)``: the least a column in ``[0, 1]`` adds to the Lagrangian."""
    return np.minimum(reduced, 0.0)


def _floors(instance: Instance, lp: _FlowLP, y: np.ndarray, value: float) -> FlowToGo:
    g = instance.graph
    n = len(g.layers)
    n_dev = len(instance.devices)
    A = lp.A
    cost = lp.joules
    col_layer = np.full(A.n, -1, dtype=np.int64)  # the layer of a c column (-1: R or S)
    col_dev = np.zeros(A.n, dtype=np.int64)
    for (lid, d), j in lp.c.items():
        col_layer[j] = lid
        col_dev[j] = d
    # the row's layer: it is active at boundary k when this is >= k (gather rows: always)
    row_layer = np.array([_row_layer(tag, n) for tag in lp.row_tags], dtype=np.int64)
    entry_col_layer = col_layer[A.cols]
    yb = y * lp.b
    abs_cost = float(np.abs(cost).sum())
    constant = np.zeros(n + 1)
    weights: list[dict[str, np.ndarray]] = []
    cells: dict[str, int] = {}
    for k in range(n + 1):
        active = row_layer >= k
        on = active[A.rows]
        yA = y[A.rows] * A.vals * on
        red = cost - np.bincount(A.cols, weights=yA, minlength=A.n)
        after = col_layer < 0
        after |= col_layer >= k
        before_entries = on & (entry_col_layer >= 0) & (entry_col_layer < k)
        # the weight of each earlier c[p, d]: what the active rows pay per unit of it
        w_col = np.bincount(A.cols[before_entries], weights=yA[before_entries], minlength=A.n)
        neg = _negative_part(red[after])
        scale = float(np.abs(yb[active]).sum() + np.abs(yA).sum() + abs_cost)
        constant[k] = float(yb[active].sum() + neg.sum()) - _MARGIN * scale
        wk: dict[str, np.ndarray] = {}
        for j in np.flatnonzero(w_col > 0):
            t = g.layers[int(col_layer[j])].output
            w = wk.setdefault(t, np.zeros(n_dev))
            w[col_dev[j]] += float(w_col[j])
        for t in wk:
            if t not in cells:
                cells[t] = full_region(g, t).cells
        weights.append(wk)
    return FlowToGo(constant, weights, cells, float(value))

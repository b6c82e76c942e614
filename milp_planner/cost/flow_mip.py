"""The flow MIP: the period's flow floor with the parts made discrete.

The flow LP (``milp_planner.cost.flow``) lets every device compute any share of every layer
at the chord ``(o + a) x c`` of its affine time floor ``o + a c``, so splitting every layer
over every device looks free: a device computing 1 % of a layer pays 1 % of its overhead, and
a part that reads its whole input (a fully connected or channel-split layer) reads only its
share. This MIP adds, per layer l and device d, a binary ``y[l, d]`` (d computes some of l) with

- ``c[l, d] <= y[l, d]``;
- compute seconds ``o x y[l, d] + a x c[l, d]`` instead of the chord: a part computing a
  fraction ``f > 0`` of l takes at least ``g(f) = o + a f`` (``milp_planner.cost.floors``), and
  a device computes a layer in one part at most (one stage computes the layer);
- **part count**: ``sum_d y[l, d] <= max_parts`` (at most ``min(max_parts, devices)`` parts
  in l's stage, each on one device), and ``<= 1`` when no plan splits l (no allowed axis
  splits it: ``floors._splittable``);
- **whole reads**: when every part of l reads the whole of an input t (l is not row-split
  by any plan, because ``rows`` is not an allowed axis or l is not row-splittable, and a
  channel part reads every input channel: ``groups`` 1; ``space.geometry``, ``_channel_part``
  and the row parts of a layer that is not row-splittable), a device computing any of l
  receives all of t but what it computed of t's producer: ``R[t, d] >= y[l, d] - c[p, d]``
  (a graph input: ``>= y[l, d]`` off the source device).

- **link groups** (``link_groups``): devices joined by the fastest links that still split the
  fleet (AutoDiCE's boards: CPU and GPU at 10 GB/s, Gigabit between boards). A device
  receives only from owners, and an owner owns only what it computed
  (``cost.evaluator.price_stage``), so what d receives of t from inside its group is at most
  what its group siblings computed of t's producer p: ``R[t, d] - Rx[t, d] <= sum_sib c[p, sib]``,
  ``Rx[t, d]`` (from outside the group) priced at the cheapest link from outside.

**Halo rows** (``halo=True``). Let a layer l (every row of it needed, ``m_l = 1``; a ``window``
or ``identity`` row dependency; every part reads every channel of the rows it needs) read a
tensor t of ``h_t`` rows; ``W(o) = [s o - p, s o - p + K)`` the input rows of output row o
(``K = (kernel - 1) dilation + 1 >= s``), clipped to ``[0, h_t)``. Fix ``q`` in ``[0, K - s]``
and split ``W(o)`` into ``head(o) = [s o - p, s o - p + q)``, ``own(o) = [s o - p + q, s o - p + q + s)``
and ``tail(o)``, the rest. The own rows of distinct o are disjoint, so for any set F of output
rows ``|W(F)| >= sum_{o in F} |own(o)| + |head(min F)| + |tail(max F)|`` (heads below every
own row of F, tails above), plus, when F has a gap after its row e,
``|tail(e) & own(e + 1)|`` (rows of an own row not in F); and ``W(all rows)`` is exactly
``head(0)``, every own row and ``tail(h_l - 1)``. For the row sets ``F_X`` a plan computes on
the ``b`` groups X that compute any of l (covering every row; ``M = sum_X |F_X|``), with
``sigma`` the least own row, ``eta`` / ``tau`` the least head / tail not at the border and
``gamma`` the least gap term:

- ``sum_X |W(F_X)| - |W(all)| >= sigma (M - h_l) + (b - 1) mu - mu (M - h_l) / h_l``,
  ``mu = min(eta, gamma)``: a group that does not compute every row has a head, a tail or a gap
  term beyond the border ones, except the groups that compute every row, whose rows beyond
  the first such group count ``h_l`` each in ``M - h_l``;
- ``sum_X |W(F_X)| - |W(all)| >= (sigma - max(eta, tau)) (M - h_l) + (eta + tau) (b - 1)``:
  the ``a0`` groups holding row 0 and the ``a1`` holding the last row miss a head or a tail,
  and ``(a0 - 1) + (a1 - 1) <= M - h_l`` (those rows are computed more than once).

Each group needs every channel of ``W(F_X)``, and holds only what its devices computed of p or
received from outside: per group, ``n[l, t, X] <= u[p, X] + sum_{d in X} Rx[t, d]`` and
``<= sum_{d in X} (c[p, d] + Rx[t, d])``, ``n <= z[l, X]``, where ``u[l, X] = |F_X| / h_l``
(``>= c[l, d]`` for d in X, ``<= z``) and ``z[l, X]`` says X computes some of l (``>= y[l, d]``).
With ``h_t x sum_X n`` in the left-hand sides above and ``h_l x sum_X u`` for ``M``, a row split
over b groups pays ``(b - 1)`` boundaries' halo rows received across groups or computed twice,
and rows computed twice make the producer's own input needed more than once: the redundant
rows of a fused stage propagate. ``halo_terms`` picks ``q`` per bound (exactly, over the
rows); a whole-read layer needs all of t per group (``z[l, X] <= u[p, X] + Rx``).

Everything else is the flow LP's (coverage, read ratios, the gather, cheapest links); the
MIP's optimum ``min T, T >= load_d`` (compute plus receive seconds of each device, with a
shared medium one more row carrying every transfer) is a lower bound on every plan's period,
and so is HiGHS's dual bound when the time limit stops it. What it does not see: the split
families (any share is allowed), the fusion limit, message latencies.

Safety against solver tolerances: a MIP's dual bound cannot be recomputed from duals (the
branching tree holds it). Times are in milliseconds inside the MIP, and the reported value is
HiGHS's dual bound lowered by a relative ``MIP_MARGIN`` (1e-6) and by ten times HiGHS's MIP
feasibility tolerance (1e-6) times the largest load coefficient (the most a row violated
within the tolerances can lower ``T``); it is only reported when it beats the flow LP's own
bound (recomputed from duals).

Identical devices make HiGHS's tree symmetric; HiGHS detects and uses such symmetry itself
(``mip_detect_symmetry``, on by default), which this module relies on. ``mip_floor``
solves the MIP without the halo rows first (smaller), then with them, and keeps the better.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from milp_planner.cost.flow import FlowFloor, _FlowLP, _LPFailed
from milp_planner.highs import PRESOLVE_RULES_OFF
from milp_planner.instance import Instance

MIP_MARGIN = 1e-6  # relative, on HiGHS's dual bound (see the module docstring)
MIN_MIP_S = 0.2  # less time left than this: no MIP
MIP_TIME_LIMIT = 5.0  # seconds without a deadline (both MIPs together)
PLAIN_SHARE = 0.4  # of the time left: the MIP without halo rows, before the one with them
_SCALE = 1e3  # seconds -> milliseconds inside the MIP


def flow_mip_floor(instance: Instance, deadline: Deadline = NEVER,
                   lp: _FlowLP | None = None, halo: bool = True, objective: str = "period") -> FlowFloor | None:
    """The flow MIP's proven period bound (``value``) and the MIP's best plan value found
    (``lp_value``, inf when none), or None when there is no time (``deadline``) or HiGHS fails."""
    try:
        if lp is None:
            lp = _FlowLP(instance)
        return _FlowMIP(instance, lp, halo, objective).solve(deadline)
    except _LPFailed:
        return None
    except (ValueError, KeyError, IndexError, ZeroDivisionError, MemoryError):  # a failed MIP only loses the floor
        return None


def mip_floor(instance: Instance, objective: str = "period", deadline: Deadline = NEVER) -> FlowFloor | None:
    """The best of two flow MIPs of ``objective`` (``period``, or ``energy``: with the memory
    caps) within ``deadline``: without the halo rows first (smaller, often
    solved to optimality in a second), within ``PLAIN_SHARE`` of the time left when the halo
    MIP follows, then with them in the rest. None when neither proves anything."""
    try:
        lp = _FlowLP(instance)
    except _LPFailed:
        return None
    first_by = Deadline.after(PLAIN_SHARE * MIP_TIME_LIMIT) if deadline.never else deadline.share(PLAIN_SHARE)
    first = flow_mip_floor(instance, first_by, lp, halo=False, objective=objective)
    second_by = Deadline.after((1 - PLAIN_SHARE) * MIP_TIME_LIMIT) if deadline.never else deadline  # from now
    second = flow_mip_floor(instance, second_by, lp, halo=True, objective=objective)
    found = [f for f in (first, second) if f is not None]
    return max(found, key=lambda f: f.value) if found else None


def stored_weights(instance: Instance, layer) -> tuple[float, float]:
    """``(per_c, per_y)``: a device computing a share ``c`` of ``layer`` stores at least
    ``per_c x c + per_y`` bytes of its weights (``per_y`` when it computes any): the whole
    weights, or, when some plan splits the layer by channels, its share rounded half up
    (``cost.evaluator``, ``weight_bytes``), so at least the share less half an element."""
    s = instance.search
    dt = float(instance.dtype_bytes)
    if "channels" in s.axes and layer.channel_splittable and min(s.max_parts, len(instance.devices)) >= 2:
        return layer.params * dt, -0.5 * dt
    return 0.0, layer.params * dt


def reads_all_channels(instance: Instance, layer) -> bool:
    """Whether every part of ``layer`` reads every channel of the input rows it needs (a row
    part always does; a channel part unless its groups let it read only theirs)."""
    if not ("channels" in instance.search.axes and layer.channel_splittable and layer.groups > 1):
        return True
    g = instance.graph
    return all(not (g.tensor_channels(t) % layer.groups == 0 and layer.channels % layer.groups == 0)
               for t in layer.inputs)


class HaloTerms(NamedTuple):
    """The halo rows of one (layer, input): ``h_t x sum_X n[X] >= w_all + a x h_l x (sum_X u[X]
    - 1) + beta x (sum_X z[X] - 1)`` for each ``(a, beta)`` of ``bounds`` (module docstring)."""

    w_all: float
    bounds: tuple[tuple[float, float], ...]


def halo_terms(dep, h_out: int, h_in: int) -> HaloTerms | None:
    """The halo rows of a ``window`` or ``identity`` row dependency from ``h_in`` input rows to
    ``h_out`` output rows, or None (other kinds: no halo bound)."""
    if dep.kind == "identity":
        s, k, p = 1, 1, 0
    elif dep.kind == "window":
        s, k, p = dep.stride, (dep.kernel - 1) * dep.dilation + 1, dep.pad_top
    else:
        return None
    if h_out <= 0 or h_in <= 0 or s <= 0:
        return None
    return _halo_terms(s, k, p, h_out, h_in)


@lru_cache(maxsize=4096)
def _halo_terms(s: int, k: int, p: int, h_out: int, h_in: int) -> HaloTerms | None:
    def size(a: int, b: int) -> int:
        return max(0, min(b, h_in) - max(a, 0))

    w_all = float(size(-p, (h_out - 1) * s - p + k))
    if k < s:  # the windows are disjoint: own(o) = W(o), no head or tail
        sigma = min(size(s * o - p, s * o - p + k) for o in range(h_out))
        return HaloTerms(w_all, ((float(sigma), 0.0),))
    chain = boundary = None
    for q in range(0, k - s + 1):
        own = [(s * o - p + q, s * o - p + q + s) for o in range(h_out)]
        sigma = min(size(a, b) for a, b in own)
        head0 = size(-p, -p + q)
        tail_last = size(s * (h_out - 1) - p + q + s, s * (h_out - 1) - p + k)
        if sum(size(a, b) for a, b in own) + head0 + tail_last != w_all:
            continue  # not the exact split of W(all) the proof needs
        if h_out < 2:
            cand = (float(sigma), 0.0)
            chain = cand if chain is None or cand > chain else chain
            continue
        eta = min(size(s * j - p, s * j - p + q) for j in range(1, h_out))
        tau = min(size(s * j - p + q + s, s * j - p + k) for j in range(h_out - 1))
        gamma = min(size(max(s * e - p + q + s, own[e + 1][0]), min(s * e - p + k, own[e + 1][1]))
                    for e in range(h_out - 1))
        mu = min(eta, gamma)
        c1 = (sigma - mu / h_out, float(mu))
        c2 = (float(sigma - max(eta, tau)), float(eta + tau))
        if chain is None or (c1[1], c1[0]) > (chain[1], chain[0]):
            chain = c1
        if boundary is None or (c2[1], c2[0]) > (boundary[1], boundary[0]):
            boundary = c2
    bounds = tuple(b for b in (chain, boundary) if b is not None)
    return HaloTerms(w_all, bounds) if bounds else None


def part_cap(instance: Instance, layer) -> int:
    """The most devices that compute some of ``layer`` in any plan: ``min(max_parts, devices)``,
    1 when no plan splits it."""
    from milp_planner.cost.floors import _splittable

    if not _splittable(instance, layer):
        return 1
    return max(1, min(instance.search.max_parts, len(instance.devices)))


def whole_reads(instance: Instance, layer) -> bool:
    """Whether every part of ``layer`` in every plan reads each of its inputs whole.

    A layer no plan row-splits is computed by channel parts (each reads every input row) or by
    one part, which reads the input rows its computed rows need: every row only when the
    needed rows of the layer read them all (a strided convolution without padding may leave the
    last rows unread; until issue #29 such a read counted whole, and a period floor stood 3 %
    above the optimum of a random instance)."""
    from milp_planner.cost.floors import rows_read

    if "rows" in instance.search.axes and layer.row_splittable:
        return False
    g = instance.graph
    if layer.groups > 1:
        c_out = layer.channels
        for t in layer.inputs:
            c_in = g.tensor_channels(t)
            if c_in % layer.groups == 0 and c_out % layer.groups == 0:
                return False  # a channel part reads its groups' input channels only
    return all(rows_read(g, layer, t) >= g.tensor_rows(t) for t in layer.inputs)


def link_groups(instance: Instance) -> list[frozenset[int]]:
    """Per device, its group: the devices joined to it by links (both ways) of at least the
    largest bandwidth threshold that splits the fleet into at least two groups, one of them of
    several devices (AutoDiCE's boards: a CPU and a GPU at 10 GB/s, Gigabit between boards);
    every device alone when no threshold does (equal links). Any grouping gives a valid bound;
    this one makes the receives from outside a group as dear as the links allow."""
    n = len(instance.devices)
    bw = np.array(instance.network.bandwidth_Bps, dtype=float)
    alone = [frozenset([d]) for d in range(n)]
    if n < 3:
        return alone
    both = np.minimum(bw, bw.T)
    for theta in sorted({float(v) for v in both[~np.eye(n, dtype=bool)] if v > 0}, reverse=True):
        comp = list(range(n))

        def find(a: int) -> int:
            while comp[a] != a:
                comp[a] = comp[comp[a]]
                a = comp[a]
            return a

        for i in range(n):
            for j in range(i + 1, n):
                if both[i, j] >= theta:
                    comp[find(i)] = find(j)
        members: dict[int, set[int]] = {}
        for d in range(n):
            members.setdefault(find(d), set()).add(d)
        if len(members) >= 2 and any(len(m) > 1 for m in members.values()):
            return [frozenset(members[find(d)]) for d in range(n)]
        if len(members) < 2:
            break
    return alone


def sibling_terms(lp: _FlowLP, producer: int, sibs: list[int]) -> dict[int, float]:
    """``-c[producer, e]`` for each sibling e: a device receives from its group at most what
    the group's other devices computed of the tensor (a sender owns only what it computed)."""
    return {lp.c[producer, e]: -1.0 for e in sibs if (producer, e) in lp.c}


def _lp_rows(A) -> list[dict[int, float]]:
    """The rows of the flow LP's matrix ``A`` as dicts (column -> coefficient)."""
    base = [dict() for _ in range(A.m)]
    for r, col, v in zip(A.rows, A.cols, A.vals):
        base[int(r)][int(col)] = base[int(r)].get(int(col), 0.0) + float(v)
    return base


def _link_arrays(instance: Instance) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(inv, tx, rx)``: seconds per byte of each link (``[sender][receiver]``, inf when
    none) and each device's transmit and receive watts."""
    bw = np.array(instance.network.bandwidth_Bps, dtype=float)
    inv = np.where(bw > 0, 1.0 / np.where(bw > 0, bw, 1.0), np.inf)
    tx = np.array([float(dev.power.tx_w) for dev in instance.devices])
    rx = np.array([float(dev.power.rx_w) for dev in instance.devices])
    return inv, tx, rx


class _FlowMIP:
    """The columns of the flow LP, then the MIP's own (``new``), ``T`` last."""

    def __init__(self, instance: Instance, lp: _FlowLP, halo: bool = True, objective: str = "period"):
        self.lp = lp
        self.objective = objective
        self.integer: list[int] = []
        self.n = len(lp.cols)
        rows: list[dict[int, float]] = []
        lower: list[float] = []
        upper: list[float] = []

        def add(row: dict[int, float], lo: float, hi: float = np.inf) -> None:
            rows.append(row)
            lower.append(lo)
            upper.append(hi)

        def new(integer: bool = False) -> int:
            self.n += 1
            if integer:
                self.integer.append(self.n - 1)
            return self.n - 1

        for row, lo in zip(_lp_rows(lp.A), lp.b):
            add(row, float(lo))
        self.y = {key: new(True) for key in sorted(lp.c)}
        for key, yj in self.y.items():  # c <= y
            add({yj: 1.0, lp.c[key]: -1.0}, 0.0)
        self._part_rows(instance, add)
        groups = link_groups(instance)
        cross, extra_cols, extra_joules = self._cross_group_rows(instance, groups, add, new)
        if halo:
            self._halo(instance, groups, cross, add, new)
        if objective == "energy":
            self._energy(instance, extra_joules, add)
            self.max_coef = float(np.max(np.abs(self.cost))) if self.cost.size else 1.0
        else:
            self.T = new()
            period_rows = self._period_rows(instance, extra_cols, add)
            self.max_coef = max((abs(v) for row in reversed(period_rows) for v in row.values()), default=1.0)
        self.rows, self.lower, self.upper = rows, np.array(lower), np.array(upper)

    def _part_rows(self, instance: Instance, add) -> None:
        """Per layer, the part count ``sum_d y[l, d] <= part_cap`` and, when every part reads
        its inputs whole, the whole reads (``_whole_read_rows``)."""
        n_dev = len(instance.devices)
        for layer in instance.graph.layers:
            ys = [self.y[layer.id, d] for d in range(n_dev) if (layer.id, d) in self.y]
            if not ys:
                continue
            cap = part_cap(instance, layer)
            if cap < len(ys):
                add({j: 1.0 for j in ys}, -np.inf, float(cap))
            if whole_reads(instance, layer):
                self._whole_read_rows(instance, layer, add)

    def _whole_read_rows(self, instance: Instance, layer, add) -> None:
        """``R[t, d] >= y[l, d] - c[p, d]`` for each input t of ``layer`` and device d computing
        some of it (off the source device for a graph input)."""
        lp = self.lp
        g = instance.graph
        src = None if instance.network.source.external else instance.network.source.device
        for t in dict.fromkeys(layer.inputs):
            producer = g.producer(t)
            for d in range(len(instance.devices)):
                if (layer.id, d) not in self.y:
                    continue
                if producer is None and src == d:
                    continue  # the source device holds the graph input
                col = lp.receive.get((t, d))
                if col is None:
                    continue  # d cannot receive t: nothing to add (sound)
                row = {col: 1.0, self.y[layer.id, d]: -1.0}
                if producer is not None and (producer, d) in lp.c:
                    row[lp.c[producer, d]] = 1.0
                add(row, 0.0)

    def _cross_group_rows(self, instance: Instance, groups, add, new):
        """The columns ``Rx[t, d]`` of what d receives of t from outside its group and their
        rows: ``(cross, extra_cols, extra_joules)``."""
        # receives from outside d's group: Rx[t, d], at the extra cost of the cheapest link from
        # outside over the cheapest link; R - Rx <= what d's group siblings computed of t
        lp = self.lp
        g = instance.graph
        n_dev = len(instance.devices)
        extra_cols: list[tuple[int, int, float]] = []  # (column, device, extra seconds at share 1)
        cross: dict[tuple[str, int], int] = {}  # (t, d) -> the column of what d receives of t from outside its group
        inv, tx, rx = _link_arrays(instance)
        extra_joules: dict[int, float] = {}  # Rx column -> extra joules at share 1
        for (t, d), col in sorted(lp.receive.items()):
            producer = g.producer(t)
            sibs = [e for e in groups[d] if e != d]
            if producer is None or not sibs:
                cross[t, d] = col  # a graph input comes from its source (priced at that link)
                continue
            outside = [e for e in range(n_dev) if e not in groups[d]]
            s_out = min((float(inv[e][d]) for e in outside), default=np.inf)
            s_any = float(min(inv[e][d] for e in range(n_dev) if e != d))
            x = new()
            cross[t, d] = x
            if not np.isfinite(s_out):
                add({x: -1.0}, 0.0)  # nothing reaches d from outside its group: Rx = 0
            elif s_out > s_any:
                extra_cols.append((x, d, g.elements(t) * instance.dtype_bytes * (s_out - s_any)))
            j_out = min((float((tx[e] + rx[d]) * inv[e][d]) for e in outside), default=np.inf)
            j_any = float(min((tx[e] + rx[d]) * inv[e][d] for e in range(n_dev) if e != d))
            if np.isfinite(j_out) and j_out > j_any:
                extra_joules[x] = g.elements(t) * instance.dtype_bytes * (j_out - j_any)
            row = {col: 1.0, x: -1.0, **sibling_terms(lp, producer, sibs)}
            add(row, -np.inf, 0.0)  # R - Rx - sum_sib c[p, sib] <= 0
            add({x: -1.0, col: 1.0}, 0.0)  # Rx <= R
        return cross, extra_cols, extra_joules

    def _period_rows(self, instance: Instance, extra_cols: list[tuple[int, int, float]],
                     add) -> list[dict[int, float]]:
        """The rows ``T >= load_r`` (milliseconds), returned as added: compute at ``a x c + o x y``,
        transfers as in the LP, plus the cross-group receives' extra seconds."""
        lp = self.lp
        n_dev = len(instance.devices)
        loads = lp.loads()
        for j, (o, a) in lp.affine.items():
            d = lp.cols[j].device
            loads[d, j] = a
        out: list[dict[int, float]] = []
        for r in range(loads.shape[0]):
            row = {int(j): -float(v) * _SCALE for j in np.nonzero(loads[r])[0] for v in [loads[r, j]]}
            if r < n_dev:
                for (lid, d), yj in self.y.items():
                    o = lp.affine[lp.c[lid, d]][0]
                    if d == r and o > 0:
                        row[yj] = -o * _SCALE
            for x, d, secs in extra_cols:
                if d == r or r == n_dev:  # its device, and the shared medium's row
                    row[x] = -secs * _SCALE
            row[self.T] = 1.0
            add(row, 0.0)
            out.append(row)
        return out

    def _energy(self, instance: Instance, extra_joules: dict[int, float], add) -> None:
        """The energy objective (joules in millijoules): the LP's, with compute at
        ``power x (a c + o y)`` and the cross-group receives' extra; and the memory caps: a
        device stores at least each computed layer's weights, its share ``c`` of them (less
        half an element, the rounding) when some plan splits the layer by channels."""
        lp = self.lp
        g = instance.graph
        self.T = None
        cost = np.zeros(self.n)
        cost[: len(lp.cols)] = [col.joules for col in lp.cols]
        power = [float(dev.power.compute_w) for dev in instance.devices]
        for (lid, d), j in lp.c.items():
            o, a = lp.affine[j]
            cost[j] = power[d] * a
            cost[self.y[lid, d]] = power[d] * o
        for x, jl in extra_joules.items():
            cost[x] = jl
        self.cost = cost * _SCALE
        if not instance.constraints.memory:
            return
        for d, dev in enumerate(instance.devices):
            cap = dev.memory_bytes
            if cap is None:
                continue
            row: dict[int, float] = {}
            for layer in g.layers:
                if (layer.id, d) not in lp.c or layer.params <= 0:
                    continue
                per_c, per_y = stored_weights(instance, layer)
                if per_c:
                    row[lp.c[layer.id, d]] = per_c
                row[self.y[layer.id, d]] = per_y
            if row:
                scale = 1.0 / float(cap) if cap > 0 else 1.0  # rows in units of the cap
                add({j: v * scale for j, v in row.items()}, -np.inf, 1.0 if cap > 0 else 0.0)

    def _halo(self, instance: Instance, groups, cross, add, new) -> None:
        """The group rows, group needs and halo rows of the module docstring."""
        lp = self.lp
        g = instance.graph
        src = None if instance.network.source.external else instance.network.source.device
        glist = sorted(set(groups), key=min)
        z: dict[tuple[int, int], int] = {}
        u: dict[tuple[int, int], int] = {}
        for layer in g.layers:
            for x, members in enumerate(glist):
                ds = [d for d in sorted(members) if (layer.id, d) in self.y]
                if not ds:
                    continue
                if len(members) == 1:
                    z[layer.id, x] = self.y[layer.id, ds[0]]
                else:
                    z[layer.id, x] = new(True)
                    for d in ds:
                        add({z[layer.id, x]: 1.0, self.y[layer.id, d]: -1.0}, 0.0)  # z >= y
                u[layer.id, x] = new()
                for d in ds:
                    add({u[layer.id, x]: 1.0, lp.c[layer.id, d]: -1.0}, 0.0)  # u >= c
                add({z[layer.id, x]: 1.0, u[layer.id, x]: -1.0}, 0.0)  # u <= z
        for layer in g.layers:
            whole = whole_reads(instance, layer)
            halo_ok = (not whole and reads_all_channels(instance, layer)
                       and lp.cover.get(layer.id, 0.0) >= 1.0)
            for t in dict.fromkeys(layer.inputs):
                producer = g.producer(t)
                if producer is None and t not in g.inputs:
                    continue
                terms = None
                if not whole:
                    terms = halo_terms(layer.rowdep, layer.rows, g.tensor_rows(t)) if halo_ok else None
                    if terms is None:
                        continue
                h_in = g.tensor_rows(t)
                need_sum: dict[int, float] = {}
                for x, members in enumerate(glist):
                    if (layer.id, x) not in z:
                        continue
                    if producer is None and src in members:
                        if whole:
                            continue
                        n = new()
                        add({z[layer.id, x]: 1.0, n: -1.0}, 0.0)  # n <= z
                        need_sum[n] = 1.0
                        continue
                    recv = {cross[t, d]: 1.0 for d in sorted(members) if (t, d) in cross}
                    if whole:
                        n = z[layer.id, x]  # the group needs all of t
                    else:
                        n = new()
                        add({z[layer.id, x]: 1.0, n: -1.0}, 0.0)  # n <= z
                        need_sum[n] = 1.0
                    if producer is None:
                        add({**recv, n: -1.0}, 0.0)
                        continue
                    if (producer, x) in u:
                        add({**recv, u[producer, x]: 1.0, n: -1.0}, 0.0)  # n <= u[p, X] + Rx
                    row = dict(recv)
                    for d in members:
                        if (producer, d) in lp.c:
                            row[lp.c[producer, d]] = row.get(lp.c[producer, d], 0.0) + 1.0
                    add({**row, n: -1.0}, 0.0)  # n <= sum_X c[p, d] + Rx
                if whole or not need_sum:
                    continue
                h_l = layer.rows
                for a, beta in terms.bounds:
                    row = {n: float(h_in) for n in need_sum}
                    for x in range(len(glist)):
                        if (layer.id, x) in z:
                            row[u[layer.id, x]] = row.get(u[layer.id, x], 0.0) - a * h_l
                            row[z[layer.id, x]] = row.get(z[layer.id, x], 0.0) - beta
                    add(row, terms.w_all - a * h_l - beta)

    def solve(self, deadline: Deadline) -> FlowFloor | None:
        import highspy

        left = min(MIP_TIME_LIMIT, deadline.left())
        if left < MIN_MIP_S:
            return None
        n, m = self.n, len(self.rows)
        ri, ci, vi = [], [], []
        for i, row in enumerate(self.rows):
            for j, v in row.items():
                ri.append(i)
                ci.append(j)
                vi.append(v)
        ri, ci, vi = np.array(ri, dtype=np.int64), np.array(ci, dtype=np.int64), np.array(vi, dtype=float)
        order = np.lexsort((ri, ci))
        inf = highspy.kHighsInf
        mdl = highspy.HighsLp()
        mdl.num_col_, mdl.num_row_ = n, m
        if self.T is None:
            cost = self.cost
            upper = np.ones(n)
        else:
            cost = np.zeros(n)
            cost[self.T] = 1.0
            upper = np.ones(n)
            upper[self.T] = inf
        mdl.col_cost_ = cost
        mdl.col_lower_, mdl.col_upper_ = np.zeros(n), upper
        mdl.row_lower_ = np.where(np.isfinite(self.lower), self.lower, -inf)
        mdl.row_upper_ = np.where(np.isfinite(self.upper), self.upper, inf)
        mdl.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        mdl.a_matrix_.start_ = np.searchsorted(ci[order], np.arange(n + 1))
        mdl.a_matrix_.index_, mdl.a_matrix_.value_ = ri[order], vi[order]
        kinds = [highspy.HighsVarType.kContinuous] * n
        for j in self.integer:
            kinds[j] = highspy.HighsVarType.kInteger
        mdl.integrality_ = kinds
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(left))
        h.setOptionValue("threads", 1)
        h.setOptionValue("presolve_rule_off", PRESOLVE_RULES_OFF)  # (milp_planner.highs)
        try:
            h.passModel(mdl)
            h.run()
            status = h.getModelStatus()
            if status not in (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kTimeLimit,
                              highspy.HighsModelStatus.kInterrupt):
                return None
            info = h.getInfo()
            dual = float(info.mip_dual_bound)
            primal = float(info.objective_function_value)
            if not np.isfinite(primal) or primal < dual:
                primal = float("inf")  # no plan of the MIP found
            if not np.isfinite(dual) or dual <= 0:
                return None
            slack = 10 * 1e-6 * self.max_coef  # ten times the MIP feasibility tolerance, per unit of T
            return FlowFloor(max(0.0, dual * (1 - MIP_MARGIN) - slack) / _SCALE, primal / _SCALE)
        except Exception:  # noqa: BLE001 - a failed MIP only loses the floor
            return None
        finally:
            h.resetGlobalScheduler(True)

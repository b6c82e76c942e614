"""Memory caps on the stage graph: Lagrangian bounds, arc fixing and the exact label search.

A device's memory along a plan is the weights of all its stages plus its largest working set
(docs/model.md section 4). For multipliers ``lam >= 0`` (seconds or joules per byte, one per capped
device), every plan that meets the caps costs at least

    cost(P) + sum_d lam_d * (weights_d(P) + working_d(P) - cap_d),

and the first two terms are a shortest path once ``lam_d * weights_d`` is added to every arc.
So one shortest path gives a lower bound on every capped plan of the graph, and a prefix and a
suffix per node give one for every plan through a given arc: the arc's own working set is a
lower bound of the plan's largest. An arc whose bound exceeds a known value is dropped
(Lagrangian reduced-cost fixing). The multipliers are the duals of the path-flow LP (HiGHS),
with per-layer prices ``nu`` on the working-set rows, so the graph's bound is the LP's bound.
The same prices bound every partial plan of the label search ``capped_shortest_path``, the
exact best plan within the caps: a resource-constrained shortest path.

>>> from formulations.caps import lagrangian_fixing, capped_shortest_path   # doctest: +SKIP
>>> fix = lagrangian_fixing(sg, "latency", caps)                           # doctest: +SKIP
>>> fix.bound, int(fix.keep(upper=0.149).sum())                            # doctest: +SKIP
>>> arcs, value = capped_shortest_path(sg, "latency", caps, 0.149, fixing=fix)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from formulations.budget import check_memory
from formulations.dominance import undominated
from formulations.dp import arc_cost, terminal_cost
from formulations.stagegraph import StageGraph
from formulations.tolerance import loose
from milp_planner.cost.evaluator import cap_limit


class PathArrays:
    """The stage graph as arrays, for shortest paths under many cost vectors.

    Arcs always go from a smaller boundary to a larger one, so processing the tails boundary
    by boundary relaxes every arc after its tail is final; within a boundary, the arcs are
    sorted by head (forward) or by tail (backward) and reduced with ``minimum.reduceat``.
    """

    def __init__(self, sg: StageGraph):
        self.n = sg.n_nodes
        self.source = sg.source
        self.tail = np.fromiter((a.tail for a in sg.arcs), dtype=np.int64, count=len(sg.arcs))
        self.head = np.fromiter((a.head for a in sg.arcs), dtype=np.int64, count=len(sg.arcs))
        bnd = np.fromiter((b for b, _ in sg.nodes), dtype=np.int64, count=self.n)
        self.term_nodes = np.array(sorted(sg.terminals), dtype=np.int64)
        tb = bnd[self.tail]
        self.forward, self.backward = [], []
        for b in np.unique(tb):
            idx = np.flatnonzero(tb == b)
            f = idx[np.argsort(self.head[idx], kind="stable")]
            heads, starts = np.unique(self.head[f], return_index=True)
            self.forward.append((f, heads, starts))
            r = idx[np.argsort(self.tail[idx], kind="stable")]
            tails, starts = np.unique(self.tail[r], return_index=True)
            self.backward.append((r, tails, starts))
        self.backward.reverse()
        self.in_arcs = [np.array(a, dtype=np.int64) for a in sg.in_arcs]

    def prefix(self, cost: np.ndarray) -> np.ndarray:
        dist = np.full(self.n, np.inf)
        dist[self.source] = 0.0
        for f, heads, starts in self.forward:
            vals = dist[self.tail[f]] + cost[f]
            dist[heads] = np.minimum(dist[heads], np.minimum.reduceat(vals, starts))
        return dist

    def suffix(self, cost: np.ndarray, term: np.ndarray) -> np.ndarray:
        dist = np.full(self.n, np.inf)
        dist[self.term_nodes] = term
        for r, tails, starts in self.backward:
            vals = cost[r] + dist[self.head[r]]
            dist[tails] = np.minimum(dist[tails], np.minimum.reduceat(vals, starts))
        return dist

    def path_to(self, dist: np.ndarray, cost: np.ndarray, end: int) -> list[int]:
        """The arcs of a shortest path from the source to ``end`` (``dist`` from ``prefix``)."""
        path, v = [], end
        while v != self.source:
            ins = self.in_arcs[v]
            a = int(ins[np.argmin(dist[self.tail[ins]] + cost[ins])])
            path.append(a)
            v = int(self.tail[a])
        return path[::-1]


def cap_arrays(sg: StageGraph, caps: list[int | None], deadline: Deadline = NEVER):
    """(capped devices, their caps, weights and working sets per arc x capped device, arcs
    that overflow no cap alone), in bytes as int64 so that a cap compares exactly.
    ``TimeoutError`` past ``deadline`` (checked every ``ARC_CHUNK`` arcs)."""
    devs = [d for d, c in enumerate(caps) if c is not None]
    n_arcs = len(sg.arcs)
    cap = np.array([caps[d] for d in devs], dtype=np.int64)
    n_dev = len(caps)
    W = arc_matrix(sg.arcs, "weights", n_dev, deadline)[:, devs].reshape(n_arcs, len(devs))
    K = arc_matrix(sg.arcs, "working", n_dev, deadline)[:, devs].reshape(n_arcs, len(devs))
    fits = ~((W + K) > cap).any(axis=1) if devs else np.ones(n_arcs, dtype=bool)
    return devs, cap, W, K, fits


ARC_CHUNK = 100_000  # arcs laid out between two deadline checks


def arc_matrix(arcs, field: str, width: int, deadline: Deadline = NEVER, dtype=np.int64) -> np.ndarray:
    """(arcs, devices): each arc's per-device tuple ``field`` (e.g. ``weights``), built
    ``ARC_CHUNK`` arcs at a time: a round's graph can hold millions of arcs, and laying them
    out took 6 s past the deadline. ``TimeoutError`` past ``deadline``."""
    parts = []
    for lo in range(0, len(arcs), ARC_CHUNK):
        deadline.check("the time limit ran out while laying out the stage arcs")
        parts.append(np.array([getattr(a, field) for a in arcs[lo:lo + ARC_CHUNK]], dtype=dtype))
    return np.concatenate(parts).reshape(len(arcs), width) if parts else np.zeros((0, width), dtype=dtype)


@dataclass
class Fixing:
    """What the Lagrangian proves about one stage graph, for a cutoff value."""

    lam: np.ndarray  # per capped device: cost per byte of memory
    nu: np.ndarray  # layers x capped devices: cost per byte of working set (column sums <= lam)
    devices: list[int]  # the capped devices, in the order of ``lam``
    caps: np.ndarray  # their caps, bytes
    bound: float  # every plan of the graph that meets the caps costs at least this
    through: np.ndarray  # per arc: a lower bound on every plan through it that meets the caps
    incumbent: tuple[list[int], float] | None  # a plan that meets the caps, when one was met
    suf: np.ndarray  # per node: the best priced suffix
    nu_after: np.ndarray  # boundaries x capped devices: the sum of ``nu`` over layers >= boundary
    within: float = math.inf  # the bounds hold for the plans no worse than this

    def keep(self, upper: float = math.inf) -> np.ndarray:
        """Bool per arc: it may lie on a plan that meets the caps and costs at most ``upper``."""
        if upper > self.within * (1 + 1e-12):
            raise ValueError(f"these bounds hold only up to {self.within!r}, not {upper!r}")
        return np.isfinite(self.through) & (self.through <= loose(upper))


_KB = 1e-3  # memory rows in kilobytes keep the coefficients well scaled


def lp_multipliers(sg: StageGraph, objective: str, devs: list[int], cap: np.ndarray, usable: np.ndarray,
                   W: np.ndarray, K: np.ndarray, base: np.ndarray, term: np.ndarray, pa: PathArrays,
                   deadline: Deadline = NEVER):
    """Prices for the memory rows (``lam``) and working-set rows (``nu``) of the path-flow LP,
    by HiGHS: ``([(lam, nu)], False)`` with its optimal duals (their Lagrangian bound is the LP
    bound), or whatever duals it has (zeros if none) when it stops otherwise. When HiGHS finds
    the LP infeasible: ``(candidates, True)``, prices from its Farkas ray, for the caller to
    check. Any nonnegative prices give a valid bound, since the bound is computed from
    shortest paths, never taken from the LP."""
    k = len(devs)
    r0, r1 = sg.n_nodes, sg.n_nodes + k
    matrix, work_rows = _lp_matrix(sg, k, W, K, pa)
    n_rows = r1 + len(work_rows)
    cheapest = float(np.min(pa.prefix(np.where(usable, base, np.inf))[pa.term_nodes] + term))
    scale = 1.0 / cheapest if math.isfinite(cheapest) and cheapest > 0 else 1.0  # objective near 1
    lp = _highs_lp(matrix, n_rows, r0, r1, cap, usable, base, term, scale, pa)
    dual, infeasible = _lp_duals(lp, n_rows, deadline)
    rows = (r0, r1, work_rows, len(sg.instance.graph.layers), k, scale)
    if infeasible:  # the ray's sign convention is HiGHS's: offer both, the caller checks them
        return [_prices(dual, *rows), _prices(-dual, *rows)], True
    return [_prices(dual, *rows)], False


def _lp_matrix(sg: StageGraph, k: int, W: np.ndarray, K: np.ndarray, pa: PathArrays):
    """The path-flow LP's constraint matrix column-wise, ``(start, row index, value)``, and the
    (layer, device index) of each working-set row."""
    n_arcs, n_term = len(sg.arcs), len(pa.term_nodes)
    m_col = n_arcs + n_term  # the first of the capped devices' M columns
    work, work_rows = _working_set_entries(sg, K, k, sg.n_nodes + k, m_col)
    parts = [_flow_entries(pa, n_arcs), _memory_entries(W, k, sg.n_nodes, m_col), work]
    n_cols = m_col + k
    rows = np.concatenate([np.asarray(r, dtype=np.int64) for part in parts for r in part[0]])
    cols = np.concatenate([np.asarray(c, dtype=np.int64) for part in parts for c in part[1]])
    vals = np.concatenate([np.asarray(v, dtype=float) for part in parts for v in part[2]])
    order = np.lexsort((rows, cols))
    rows, cols, vals = rows[order], cols[order], vals[order]
    start = np.searchsorted(cols, np.arange(n_cols + 1))
    return (start, rows, vals), work_rows


def _flow_entries(pa: PathArrays, n_arcs: int) -> tuple[list, list, list]:
    """The flow rows' entries (rows, columns, values)."""
    n_term = len(pa.term_nodes)
    arc_ids = np.arange(n_arcs)
    # flow: out - in (+ end at terminals) = 1 at the source, 0 elsewhere
    rows = [pa.tail, pa.head, pa.term_nodes]
    cols = [arc_ids, arc_ids, n_arcs + np.arange(n_term)]
    vals = [np.ones(n_arcs), -np.ones(n_arcs), np.ones(n_term)]
    return rows, cols, vals


def _memory_entries(W: np.ndarray, k: int, r0: int, m_col: int) -> tuple[list, list, list]:
    """The memory rows' entries (rows ``r0`` on, one per capped device)."""
    rows, cols, vals = [], [], []
    for j in range(k):  # memory: weights + M <= cap
        nz = np.flatnonzero(W[:, j])
        rows += [np.full(len(nz), r0 + j), [r0 + j]]
        cols += [nz, [m_col + j]]
        vals += [W[nz, j] * _KB, [_KB]]
    return rows, cols, vals


def _working_set_entries(sg: StageGraph, K: np.ndarray, k: int, r1: int, m_col: int):
    """The working-set rows' entries (rows ``r1`` on, one per layer and capped device that some
    arc's working set covers) and each row's (layer, device index)."""
    n_layers = len(sg.instance.graph.layers)
    n_arcs = len(sg.arcs)
    first = np.fromiter((a.option.first for a in sg.arcs), dtype=np.int64, count=n_arcs)
    last = np.fromiter((a.option.last for a in sg.arcs), dtype=np.int64, count=n_arcs)
    rows, cols, vals = [], [], []
    work_rows = []  # (layer, device index) per working-set row
    span = last - first + 1
    arc_rep = np.repeat(np.arange(n_arcs), span)
    layer_rep = np.concatenate([np.arange(f, e + 1) for f, e in zip(first, last)]) if n_arcs else np.zeros(0, int)
    for j in range(k):  # working set: sum of the covering arcs' working sets - M <= 0
        wk = K[arc_rep, j]
        nz = wk > 0
        layers = np.unique(layer_rep[nz])
        row_of = np.full(n_layers, -1)
        row_of[layers] = r1 + len(work_rows) + np.arange(len(layers))
        work_rows += [(int(l), j) for l in layers]
        rows += [row_of[layer_rep[nz]], row_of[layers]]
        cols += [arc_rep[nz], np.full(len(layers), m_col + j)]
        vals += [wk[nz] * _KB, -_KB * np.ones(len(layers))]
    return (rows, cols, vals), work_rows


def _highs_lp(matrix, n_rows: int, r0: int, r1: int, cap: np.ndarray, usable: np.ndarray, base: np.ndarray,
              term: np.ndarray, scale: float, pa: PathArrays):
    """The path-flow LP as a HiGHS model: the costs times ``scale``, one unit of flow out of the
    source, the memory rows at most their caps (kilobytes), the working-set rows at most 0."""
    import highspy

    start, rows, vals = matrix
    n_cols, k = len(start) - 1, r1 - r0
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_cols, n_rows
    cc = np.concatenate([np.where(usable, base, 0.0), term, np.zeros(k)]) * scale
    lp.col_cost_ = cc
    lp.col_lower_ = np.zeros(n_cols)
    lp.col_upper_ = np.concatenate([np.where(usable, 1.0, 0.0), np.ones(len(pa.term_nodes)), np.full(k, inf)])
    rhs = np.zeros(n_rows)
    rhs[pa.source] = 1.0
    lo, hi = rhs.copy(), rhs.copy()
    lo[r0:] = -inf
    hi[r0:r1] = cap * _KB
    lp.row_lower_, lp.row_upper_ = lo, hi
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = start, rows, vals
    return lp


def _lp_duals(lp, n_rows: int, deadline: Deadline) -> tuple[np.ndarray, bool]:
    """HiGHS's row duals of ``lp`` (zeros if none), or its Farkas ray when it finds the LP
    infeasible (then True)."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if not deadline.never:  # stopped early, its duals are still multipliers: the bounds they prove hold
        h.setOptionValue("time_limit", max(0.1, deadline.left()))
    h.passModel(lp)
    try:
        h.run()
        status = h.getModelStatus()
        infeasible = status == highspy.HighsModelStatus.kInfeasible
        if infeasible:  # a Farkas ray of the rows: its prices make every path pay more than 0
            _, has_ray, ray = h.getDualRay()
            dual = np.asarray(ray) if has_ray else np.zeros(n_rows)
        else:
            sol = h.getSolution()
            dual = np.asarray(sol.row_dual) if sol.dual_valid else np.zeros(n_rows)
    finally:
        # HiGHS keeps one thread scheduler per process, sized by its first run: free it, or a
        # later solve with another thread count (the MILP's) fails
        h.resetGlobalScheduler(True)
    if len(dual) != n_rows:
        dual = np.zeros(n_rows)
    return dual, infeasible


def _prices(y: np.ndarray, r0: int, r1: int, work_rows: list[tuple[int, int]], n_layers: int, k: int,
            scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The multipliers ``(lam, nu)`` of the LP's row prices ``y``: nonnegative, unscaled, and
    ``nu`` shrunk so that its sum per device is at most ``lam``."""
    lam = np.maximum(0.0, -y[r0:r1] * _KB / scale)
    nu = np.zeros((n_layers, k))
    for (l, j), v in zip(work_rows, y[r1:]):
        nu[l, j] = max(0.0, -v * _KB / scale)
    over = nu.sum(axis=0)
    shrink = np.where(over > lam, lam / np.maximum(over, 1e-300), 1.0)  # keep sum(nu) <= lam exactly
    return lam, nu * shrink


def lagrangian_fixing(sg: StageGraph, objective: str, caps: list[int | None],
                      arrays: PathArrays | None = None, prior: Fixing | None = None,
                      upper: float = math.inf, deadline: Deadline = NEVER) -> Fixing:
    """The LP's multipliers, the bound they prove on the graph and on every arc.

    ``caps`` per device (None: uncapped). Arcs that alone overflow a cap get an infinite
    bound; with no plan at all (or no fractional one within the caps), everything does.
    ``prior`` (the fixing of an earlier graph of the same instance) with a finite ``upper``:
    its multipliers first drop the arcs no plan within ``upper`` can use, and the LP runs on
    the rest; the bounds then hold for plans no worse than ``upper`` (``Fixing.within``).
    ``deadline`` stops the LP: any nonnegative multipliers
    prove valid (weaker) bounds.
    """
    pa = arrays or PathArrays(sg)
    devs, cap, W, K, usable = cap_arrays(sg, caps)
    cap, W, K = cap.astype(float), W.astype(float), K.astype(float)
    n_arcs, k = len(sg.arcs), len(devs)
    n_layers = len(sg.instance.graph.layers)
    base = np.array(arc_cost(sg, objective), dtype=float)
    tdict = terminal_cost(sg, objective)
    term = np.array([tdict[int(t)] for t in pa.term_nodes], dtype=float)
    first = np.fromiter((a.option.first for a in sg.arcs), dtype=np.int64, count=n_arcs)
    last = np.fromiter((a.option.last for a in sg.arcs), dtype=np.int64, count=n_arcs)
    data = (pa, devs, cap, W, K, base, usable, term, first, last)
    if not len(term) or not n_arcs:
        return _priced(data, np.zeros(k), np.zeros((n_layers, k)), nothing=True)
    within, earlier = math.inf, None
    if prior is not None and k and math.isfinite(upper) and list(prior.devices) == devs:
        earlier = _priced(data, prior.lam, prior.nu)
        usable = usable & earlier.keep(upper)
        within = upper
    lam, nu = np.zeros(k), np.zeros((n_layers, k))
    if k:
        candidates, infeasible = lp_multipliers(sg, objective, devs, cap, usable, W, K, base, term, pa,
                                                deadline=deadline)
        if infeasible:
            # proven only if the ray's prices make every path within reach pay more than
            # nothing for the caps alone (costs left out): then no path meets them
            free = (pa, devs, cap, W, K, np.zeros_like(base), usable, term * 0, first, last)
            if any(_priced(free, *c).bound > 1e-9 * max(float(c[0] @ cap), 1e-300) for c in candidates):
                return _priced(data, lam, nu, nothing=True, within=within)
        else:
            lam, nu = candidates[0]
    fix = _priced(data[:6] + (usable,) + data[7:], lam, nu, within=within)
    if earlier is not None:  # the arcs the prior multipliers dropped keep their bounds
        fix.through = np.where(usable, fix.through, earlier.through)
    return fix


def _priced(data, lam: np.ndarray, nu: np.ndarray, nothing: bool = False, within: float = math.inf) -> Fixing:
    """The bounds that multipliers ``lam`` and ``nu`` prove on a graph (``data`` from
    ``lagrangian_fixing``)."""
    pa, devs, cap, W, K, base, usable, term, first, last = data
    k = len(devs)
    cum = np.vstack([np.zeros((1, k)), np.cumsum(nu, axis=0)])  # cum[l] = sum of nu over layers < l
    nu_after = cum[-1] - cum  # boundaries x devices
    if nothing:
        return Fixing(lam, nu, devs, cap, math.inf, np.full(len(base), np.inf), None, np.full(pa.n, np.inf),
                      nu_after, within)
    nu_arc = cum[last + 1] - cum[first]  # arcs x devices
    cost = base + W @ lam + (K * nu_arc).sum(axis=1)
    cost[~usable] = np.inf
    pre = pa.prefix(cost)
    suf = pa.suffix(cost, term)
    slack = lam @ cap
    bound = min(float(suf[pa.source] - slack), within)
    spare = lam - cum[-1]  # what the working sets' rows leave of lam: priced on each arc's own
    through = pre[pa.tail] + cost + suf[pa.head] + K @ spare - slack
    through[~usable] = np.inf
    incumbent = None
    ends = pre[pa.term_nodes] + term
    t = int(np.argmin(ends))
    if math.isfinite(ends[t]):
        path = pa.path_to(pre, cost, int(pa.term_nodes[t]))
        if ((W[path].sum(axis=0) + K[path].max(axis=0)) <= cap).all():
            incumbent = (path, float(base[path].sum() + term[t]))
    return Fixing(lam, nu, devs, cap, bound, through, incumbent, suf, nu_after, within)


class CappedPath(NamedTuple):
    """The outcome of ``capped_shortest_path``."""

    arcs: list[int]  # the best plan within the caps and the bound (empty: there is none)
    value: float  # its value (inf: none)
    support: np.ndarray  # bool per arc: every plan within the caps and the bound uses only these


class LabelLimit(RuntimeError):
    """The label search kept more labels than allowed (or ran out of time)."""


_undominated = undominated  # the former private name (tests/test_caps.py)


def _extend(C, Wl, Ml, Rl, gid, A, heads, cost, suf, W, K, capv, slack, support, pending, priced, res):
    """Cross labels (cost ``C``, weights ``Wl``, largest working sets ``Ml``, additive resources
    ``Rl``) with the arcs ``A`` of their node; append the survivors to ``pending`` at each head,
    mark their arcs and return how many there are. ``res``: (per arc, suffix floor per node,
    caps) of the additive resources."""
    c2 = C[:, None] + cost[A][None, :]  # (labels, arcs)
    ok = c2 + suf[heads][None, :] <= slack
    w2 = Wl[:, None, :] + W[A][None, :, :]
    m2 = np.maximum(Ml[:, None, :], K[A][None, :, :])
    ok &= ((w2 + m2) <= capv).all(axis=2)
    R, rsuf, rcap = res
    r2 = Rl[:, None, :] + R[A][None, :, :]
    if r2.shape[2]:
        ok &= ((r2 + rsuf[heads][None, :, :]) <= rcap).all(axis=2)
    if priced is not None:
        lam, spare, lsuf = priced
        ok &= c2 + (w2 * lam).sum(axis=2) + (m2 * spare[None, :, :]).sum(axis=2) + lsuf[None, :] <= slack
    li, ai = np.nonzero(ok)
    if not len(li):
        return 0
    support[A[ai]] = True
    order = np.argsort(heads[ai], kind="stable")
    li, ai = li[order], ai[order]
    hs = heads[ai]
    cuts = np.flatnonzero(np.diff(hs)) + 1
    for sl in np.split(np.arange(len(li)), cuts):
        l_, a_ = li[sl], ai[sl]
        pending[int(hs[sl[0]])].append((c2[l_, a_], w2[l_, a_], m2[l_, a_], r2[l_, a_], gid[l_], A[a_]))
    return len(li)


class AdditiveCap(NamedTuple):
    """A cap on summed costs for ``capped_shortest_path``: latency or energy, or the period (every
    device's compute + receive seconds summed over the stages, the gather counted at the sink,
    and on a shared medium the sum of every transfer: the sums the evaluator's period takes the
    largest of, each capped)."""

    objective: str  # "latency", "energy" or "period"
    cap: float  # seconds or joules; a path passes it as the evaluator does (1e-9 relative)


def additive_caps(instance) -> list[AdditiveCap]:
    """The instance's latency, energy and period caps (``constraints.latency_s`` / ``energy_j`` /
    ``period_s``)."""
    c = instance.constraints
    return [AdditiveCap(obj, float(cap)) for obj, cap in (("latency", c.latency_s), ("energy", c.energy_j),
                                                          ("period", c.period_s)) if cap is not None]


def _summed_columns(sg: StageGraph, cap: AdditiveCap) -> list[tuple[np.ndarray, dict[int, float]]]:
    """The summed resources a cap limits, each as (value per arc, value per terminal node)."""
    if cap.objective != "period":
        return [(np.array(arc_cost(sg, cap.objective), dtype=float), terminal_cost(sg, cap.objective))]
    n_dev = len(sg.instance.devices)
    loads = np.array([a.load for a in sg.arcs], dtype=float).reshape(len(sg.arcs), n_dev)
    cols = [(loads[:, d], {t: term.load[d] for t, term in sg.terminals.items()}) for d in range(n_dev)]
    if sg.instance.network.medium == "shared":
        cols.append((np.array([a.transfer_s for a in sg.arcs], dtype=float),
                     {t: term.gather_s for t, term in sg.terminals.items()}))
    return cols


def capped_shortest_path(sg: StageGraph, objective: str, caps: list[int | None], upper: float = math.inf,
                         max_labels: int = 200_000, deadline: Deadline = NEVER, fixing: Fixing | None = None,
                         arrays: PathArrays | None = None, additive: list[AdditiveCap] = ()):
    """The best path whose memory fits ``caps`` (per device: the weights of all its stages plus
    its largest working set, as the evaluator counts it) among those no worse than ``upper``,
    as a ``CappedPath`` (empty when there is none).

    Exact: a resource-constrained shortest path over the graph in boundary order, whose labels
    carry the cost, each capped device's weights and its largest working set; a label is
    dropped when another at its node is no worse in all of them, when its best completion
    without caps exceeds ``upper``, and (with ``fixing``, a ``Fixing`` of the same caps) when
    its Lagrangian floor does. Devices no path can overflow (and unpriced) stay out of the labels.
    ``additive``: latency, energy and period caps (``AdditiveCap``; ``additive_caps(instance)``;
    a period cap is one summed resource per device, and one for a shared medium), carried
    as summed resources: a label is also dropped when its sum plus the least still to come
    exceeds a cap, and a label is dominated only by one no worse in these sums too. (The
    ``fixing``'s multipliers price the memory caps only: they stay valid bounds, since leaving
    the additive caps out of the LP only lowers it.)
    Vectorised: all labels of a node cross all its arcs at once. ``support`` marks the arcs
    some kept label crossed: a plan within the caps and ``upper`` that uses another arc would
    have a prefix no kept label dominates, so the exact solvers may drop every other arc.

    Raises ``LabelLimit`` past ``max_labels`` labels or at ``deadline``.
    """
    search = _search_arrays(sg, objective, caps, upper, fixing, arrays or PathArrays(sg), additive)
    best, parents, via, support = _label_search(sg, search, max_labels, deadline)
    if best is None:
        return CappedPath([], math.inf, np.zeros(len(sg.arcs), dtype=bool))
    return CappedPath(_path_back(np.concatenate(parents), np.concatenate(via), best[1]), best[0], support)


class _Search(NamedTuple):
    """What one label search (``capped_shortest_path``) reads, fixed before it starts."""

    pa: PathArrays
    bnd: np.ndarray  # per node: its boundary
    term: np.ndarray  # per node: its terminal cost (inf: not a terminal)
    cost: np.ndarray  # per arc: its cost (inf: no plan within the caps and the bound uses it)
    suf: np.ndarray  # per node: the least cost still to come, without caps
    W: np.ndarray  # arcs x tracked devices: weights
    K: np.ndarray  # arcs x tracked devices: working sets
    capv: np.ndarray  # per tracked device: its cap
    R: np.ndarray  # arcs x additive columns: summed resources
    rterm: np.ndarray  # nodes x additive columns: at the terminals
    rcap: np.ndarray  # per additive column: its limit
    rsuf: np.ndarray  # nodes x additive columns: the least still to come
    priced: tuple | None  # the fixing's (lam, spare per boundary, priced suffix per node) of the tracked devices
    out_arcs: list[np.ndarray]  # per node: its usable out-arcs
    slack: float  # ``upper`` with the evaluator's slack


def _search_arrays(sg: StageGraph, objective: str, caps: list[int | None], upper: float, fixing: Fixing | None,
                   pa: PathArrays, additive) -> _Search:
    """The label search's costs, tracked devices, additive resources and Lagrangian prices."""
    base = np.array(arc_cost(sg, objective), dtype=float)
    tdict = terminal_cost(sg, objective)
    term = np.full(sg.n_nodes, np.inf)
    for t, c in tdict.items():
        term[t] = c
    capped, capv, Wall, Kall, usable = cap_arrays(sg, caps)
    if fixing is not None:
        assert list(fixing.devices) == capped, "the fixing was computed for other caps"
        usable &= fixing.keep(upper)
    R, rterm, rcap, rsuf = _additive_columns(sg, pa, additive, usable)  # (drops arcs from ``usable``)
    cost = np.where(usable, base, np.inf)
    suf = pa.suffix(cost, term[pa.term_nodes])
    track = _tracked(pa, usable, Wall, Kall, capv, fixing)
    W, K, capv = Wall[:, track], Kall[:, track], capv[track]
    priced = None
    if fixing is not None:
        lam_t = fixing.lam[track]
        spare = (fixing.lam - fixing.nu_after)[:, track]  # per boundary: what lam leaves for the working set
        lsuf = fixing.suf - float(lam_t @ capv)
        priced = (lam_t, spare, lsuf)
    bnd = np.fromiter((b for b, _ in sg.nodes), dtype=np.int64, count=sg.n_nodes)
    slack = loose(upper) if math.isfinite(upper) else math.inf
    out_arcs = [np.array([a for a in arcs if usable[a]], dtype=np.int64) for arcs in sg.out_arcs]
    return _Search(pa, bnd, term, cost, suf, W, K, capv, R, rterm, rcap, rsuf, priced, out_arcs, slack)


def _label_search(sg: StageGraph, s: _Search, max_labels: int, deadline: Deadline):
    """The labels through the nodes in boundary order: the best (value, label) at a terminal
    (None: none), each node's kept labels' parents and arcs, and the arcs some kept label crossed."""
    pending: list[list] = [[] for _ in range(sg.n_nodes)]
    k, nr = s.W.shape[1], s.R.shape[1]
    pending[sg.source].append((np.zeros(1), np.zeros((1, k), np.int64), np.zeros((1, k), np.int64),
                               np.zeros((1, nr)), np.full(1, -1, np.int64), np.full(1, -1, np.int64)))
    parents: list[np.ndarray] = []
    via: list[np.ndarray] = []
    n_kept, best, waiting = 0, None, 1
    support = np.zeros(len(sg.arcs), dtype=bool)
    for v in np.argsort(s.bnd, kind="stable"):
        chunks = pending[v]
        pending[v] = []
        if not chunks:
            continue
        waiting -= sum(len(c[0]) for c in chunks)
        C, Wl, Ml, Rl, par, arc = _undominated_labels(chunks)
        gid = n_kept + np.arange(len(C))
        parents.append(par)
        via.append(arc)
        n_kept += len(C)
        _check_limits(n_kept, max_labels, deadline)
        best = _best_end(s, v, C, Rl, gid, best)
        waiting = _extend_node(s, v, (C, Wl, Ml, Rl), gid, support, pending, waiting, max_labels)
    return best, parents, via, support


def _check_limits(n_kept: int, max_labels: int, deadline: Deadline) -> None:
    """``LabelLimit`` past ``max_labels`` kept labels or at ``deadline``; the memory budget's check."""
    if n_kept > max_labels:
        raise LabelLimit(f"more than {max_labels} labels")
    if deadline.passed():
        raise LabelLimit("the time limit ran out")
    check_memory()


def _best_end(s: _Search, v: int, C: np.ndarray, Rl: np.ndarray, gid: np.ndarray, best):
    """The best (value, label) so far, with the labels at ``v`` completed when it is a terminal."""
    if math.isfinite(s.term[v]):
        vals = C + s.term[v]
        if s.R.shape[1]:  # the gather's latency and energy count against the caps too
            vals = np.where(((Rl + s.rterm[v]) <= s.rcap).all(axis=1), vals, np.inf)
        i = int(np.argmin(vals))
        if vals[i] <= s.slack and (best is None or vals[i] < best[0]):
            best = (float(vals[i]), int(gid[i]))
    return best


def _extend_node(s: _Search, v: int, labels: tuple, gid: np.ndarray, support: np.ndarray, pending: list[list],
                 waiting: int, max_labels: int) -> int:
    """Extend the labels at ``v`` along its usable arcs, a block of labels at a time; the number
    of labels waiting after it (``LabelLimit`` past ``4 * max_labels``)."""
    A = s.out_arcs[v]
    if not len(A):
        return waiting
    C, Wl, Ml, Rl = labels
    heads = s.pa.head[A]
    priced = None if s.priced is None else (s.priced[0], s.priced[1][s.bnd[heads]], s.priced[2][heads])
    step = max(1, 1_000_000 // len(A))  # labels per block: bounded temporaries
    for lo in range(0, len(C), step):
        block = slice(lo, lo + step)
        waiting += _extend(C[block], Wl[block], Ml[block], Rl[block], gid[block], A, heads, s.cost, s.suf, s.W, s.K,
                           s.capv, s.slack, support, pending, priced, (s.R, s.rsuf, s.rcap))
        if waiting > 4 * max_labels:
            raise LabelLimit(f"more than {4 * max_labels} labels waiting")
    return waiting


def _path_back(parent: np.ndarray, arc_of: np.ndarray, g: int) -> list[int]:
    """The arcs from the source to label ``g``, following the labels' parents."""
    path = []
    while arc_of[g] >= 0:  # the source's label has no arc
        path.append(int(arc_of[g]))
        g = int(parent[g])
    return path[::-1]


def _undominated_labels(chunks: list[tuple]) -> tuple:
    """The labels waiting at a node (chunks of cost, weights, largest working sets, summed
    resources, parent, arc) less those another label is no worse than in every column."""
    C, Wl, Ml, Rl, par, arc = (np.concatenate([c[i] for c in chunks]) for i in range(6))
    if len(C) > 1:
        keep = undominated(C, np.hstack([Wl.astype(float), Ml.astype(float), Rl]))
        C, Wl, Ml, Rl, par, arc = C[keep], Wl[keep], Ml[keep], Rl[keep], par[keep], arc[keep]
    return C, Wl, Ml, Rl, par, arc


def _additive_columns(sg: StageGraph, pa: PathArrays, additive, usable: np.ndarray):
    """The additive caps' summed resources: per arc (``R``, arcs x columns), per terminal
    (``rterm``), their limits (``rcap``, with the evaluator's slack) and the least still to come
    from each node (``rsuf``). The arcs on no path within them are cleared from ``usable``."""
    cols = [(col, tcol, a.cap) for a in additive for col, tcol in _summed_columns(sg, a)]
    R = np.column_stack([c for c, _, _ in cols]) if cols else np.zeros((len(sg.arcs), 0))
    rterm = np.full((sg.n_nodes, len(cols)), np.inf)
    for j, (_, tcol, _) in enumerate(cols):
        for t, c in tcol.items():
            rterm[t, j] = c
    rcap = np.array([cap_limit(cap) for _, _, cap in cols], dtype=float)
    rsuf = np.zeros((sg.n_nodes, len(cols)))
    for j in range(len(cols)):
        col = np.where(usable, R[:, j], np.inf)
        rpre = pa.prefix(col)
        rsuf[:, j] = pa.suffix(col, rterm[pa.term_nodes, j])
        usable &= rpre[pa.tail] + col + rsuf[pa.head, j] <= rcap[j]
    return R, rterm, rcap, rsuf


def _tracked(pa: PathArrays, usable: np.ndarray, Wall: np.ndarray, Kall: np.ndarray, capv: np.ndarray,
             fixing: Fixing | None) -> list[int]:
    """The capped devices the labels carry: those some path can overflow (its heaviest weights
    plus its largest working set above the cap) and those the Lagrangian prices; the others add
    nothing."""
    track = []
    for j in range(Wall.shape[1]):
        heavy = pa.prefix(np.where(usable, -Wall[:, j].astype(float), np.inf))
        most = -float(np.min(heavy[np.isfinite(heavy)], initial=0.0)) + float(Kall[usable, j].max(initial=0))
        if most > capv[j] or (fixing is not None and fixing.lam[j] > 0):
            track.append(j)
    return track

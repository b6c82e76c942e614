"""Exact min-max search over the stage graph: period and memory.

Period (the largest device load, or with a shared medium also the summed transfers) and memory
(the largest weights plus working set of a device) are not sums along a path, so the DP's
shortest path does not give them. They are resource-constrained paths instead:

- a **label** at a node is what a partial plan has accumulated: each device's load (period),
  the medium's transfer time (shared medium), each device's summed weights and largest working
  set (memory, or the memory caps), the latency and energy when those are capped;
- a label is dropped when another label at its node is nowhere worse (Pareto dominance, in numpy:
  ``formulations.caps.undominated``), or when its **floor** exceeds the threshold ``T`` or breaks
  a cap: per device, what it holds plus the least that device must still take on after the node
  (a backward pass per device: the cheapest suffix load, the lightest suffix weights, the smallest
  largest working set), and the mean over the devices (the loads or weights held plus the
  cheapest suffix of their sum; for memory plus the larger of the working sets held and the
  smallest largest summed working set of a stage still to come), and a few **Lagrangian**
  weightings ``w`` of the devices: the value is at least ``w . (per-device values)``, and what
  is still to come at least the cheapest suffix of the ``w``-weighted costs (``_lagrange``,
  ``_Problem.set_weights``);
- labels are processed in boundary order, so the label search with threshold ``T`` (a **probe**)
  returns the best plan whose value is at most ``T`` (exact: every such plan's prefixes have
  floors at most ``T``, and dominance keeps one no worse), or proves there is none. A probe
  can also grow **backward** labels (a plan's suffix, floored by the prefix floors) from the
  terminals and join them with the forward ones where the two sides meet (``_probe_meet``).

The **threshold search** (``minmax_search``) finds an incumbent and a bound with shortest
paths under those weightings (the Lagrangian dual: at least the fluid bound), improves the
incumbent with beam searches (the probe keeping the 1, 4, then 16 labels of least floor per
node: heuristics, they prove nothing), then probes increasing thresholds between the proven
lower bound and the incumbent (a small threshold keeps far fewer labels; ``_next_threshold``
aims each at a few times the labels of the last): an empty probe proves its threshold a lower
bound, the first probe with a plan gives the optimum. The first probe with many labels is run
from both ends and from the source, and the direction that keeps fewer labels runs the rest.
A deadline stops it with the proven interval ``[lower, incumbent]``; a probe past the label
budget is retried at a smaller threshold while time is left; once the thresholds below it
reach it, it is tried again with the cap the latest probe's rate allows (at most
``CEILING_RETRIES`` times).

>>> from formulations.minmax import minmax_search                  # doctest: +SKIP
>>> res = minmax_search(sg, "period")                              # doctest: +SKIP
>>> res.optimal, res.value, res.lower, sg.plan_from_arcs(res.arcs)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from formulations.caps import PathArrays, arc_matrix, cap_arrays
from formulations.stagegraph import StageGraph
from formulations.tolerance import STRICTLY_BETTER
from milp_planner.cost.evaluator import cap_limit

MINMAX = ("period", "memory")
# thresholds tried, as fractions of the way from the bound to the incumbent (the labels a
# probe keeps grow steeply near the optimum: the steps narrow there, each proving more)
_PROBES = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 7 / 8, 1.0)
_BEAMS = (1, 4, 16)  # label beams per node of the searches for an incumbent
BEAM_SHARE = 0.1  # a beam after the first two runs while the last improved and they took less of the time left
#: weighted shortest paths of the Lagrangian step (``_lagrange``), within ``LAGRANGE_SHARE`` of the
#: time left. Its weightings also prune the probes' labels, and better ones prune far more: on
#: ``examples/edge-3dev.yaml`` period (257,534 arcs) 24 steps left the exact search 54 s, 96 steps
#: 13 s; within the polished plan's 93.27 ms (243,364 arcs) 24 steps did not finish in 90 s, 96 in 6 s
LAGRANGE_ITERATIONS = 96
LAGRANGE_SHARE = 0.15


class LabelBudget(RuntimeError):
    """A probe kept more labels than allowed, or ran past the deadline."""


@dataclass
class MinMaxResult:
    """What ``minmax_search`` proved over one stage graph.

    ``arcs``/``value``: the best plan found that meets the caps (empty / inf: none), as the
    graph's arc data price it; ``lower``: every plan of the graph that meets the caps and is
    worth at most ``upper`` (the search's cutoff) is worth at least this; ``optimal``: the plan is
    the best of the graph within the cutoff; ``none_within``: proven that no plan meeting the caps
    is worth at most the cutoff (``arcs`` may still hold one above it); ``support``: bool per arc,
    the arcs some kept label of the last complete probe crossed (every plan within that probe's
    threshold is matched by one no worse that uses only these), with that threshold ``support_T``.
    """

    arcs: list[int]
    value: float
    lower: float
    optimal: bool
    none_within: bool = False
    stopped: bool = False
    support: np.ndarray | None = None
    support_T: float = math.inf
    labels: int = 0
    probes: int = 0


@dataclass
class _Side:
    """Floors, per node, of the part of a plan a label does not hold: per summed column
    (``add``) and maxed column (``mx``), the devices' summed loads or weights (``sum``), for
    memory the largest summed working set of one stage (``ksum``), and the weighted costs of
    each Lagrangian weighting (``lag``)."""

    add: np.ndarray
    mx: np.ndarray
    sum: np.ndarray
    ksum: np.ndarray | None
    lag: np.ndarray


def _period_columns(sg: StageGraph, terms: list, n_dev: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(arc values, terminal values) of what a plan's period is the max of: each device's load
    (compute and receive; a terminal's, the gather), and over a shared medium the summed
    transfers (a terminal's, the gather)."""
    loads = np.array([a.load for a in sg.arcs], dtype=float).reshape(len(sg.arcs), n_dev)
    t_loads = np.array([t.load for t in terms], dtype=float).reshape(len(terms), n_dev)
    cols = [(loads[:, d], t_loads[:, d]) for d in range(n_dev)]
    if sg.instance.network.medium == "shared":
        cols.append((np.array([a.transfer_s for a in sg.arcs], dtype=float),
                     np.array([t.gather_s for t in terms], dtype=float)))
    return cols


class _Problem:
    """The graph's arcs as label columns: summed columns ``add`` and maxed columns ``mx``, their
    terminal values and the suffix floors, and how a label's floor and caps are read."""

    def __init__(self, sg: StageGraph, objective: str, pa: PathArrays, deadline: Deadline = NEVER):
        def check():  # a graph of millions of arcs takes seconds to lay out (LabelBudget past the deadline)
            if deadline.passed():
                raise LabelBudget("the time limit ran out")

        check()
        inst = sg.instance
        n_arcs, n_dev = len(sg.arcs), len(inst.devices)
        self.objective, self.n_dev, self.pa = objective, n_dev, pa
        caps = [dev.memory_bytes if inst.constraints.memory else None for dev in inst.devices]
        try:
            capped, capv, Wc, Kc, self.usable = cap_arrays(sg, caps, deadline)
        except TimeoutError:
            raise LabelBudget("the time limit ran out") from None
        check()
        term_nodes = pa.term_nodes
        terms = [sg.terminals[int(t)] for t in term_nodes]
        add, tadd, mx = [], [], []
        try:
            W = arc_matrix(sg.arcs, "weights", n_dev, deadline, float)
            K = arc_matrix(sg.arcs, "working", n_dev, deadline, float)
        except TimeoutError:
            raise LabelBudget("the time limit ran out") from None
        check()
        self.shared = objective == "period" and inst.network.medium == "shared"
        period_cap = inst.constraints.period_s
        if objective == "period" or period_cap is not None:  # the loads (and transfers), per column
            load_cols = _period_columns(sg, terms, n_dev)
        if objective == "period":
            self.obj_add = list(range(n_dev))
            for a_col, t_col in load_cols[:n_dev]:
                add.append(a_col)
                tadd.append(t_col)
            if self.shared:
                self.x_col = len(add)
                add.append(load_cols[n_dev][0])
                tadd.append(load_cols[n_dev][1])
            # memory caps: only the devices some path can overflow need columns
            self.cap_dev = [d for d, c in zip(capped, capv) if self._can_overflow(W[:, d], K[:, d], c)]
        else:
            self.obj_add = list(range(n_dev))
            add += list(W.T)
            tadd += [np.zeros(len(terms))] * n_dev
            mx += list(K.T)
            self.cap_dev = list(capped)
        self.cap = np.array([caps[d] for d in self.cap_dev], dtype=float)
        if objective == "period":  # the capped devices' weights and working sets
            self.cap_w = list(range(len(add), len(add) + len(self.cap_dev)))
            self.cap_m = list(range(len(mx), len(mx) + len(self.cap_dev)))
            add += [W[:, d] for d in self.cap_dev]
            tadd += [np.zeros(len(terms))] * len(self.cap_dev)
            mx += [K[:, d] for d in self.cap_dev]
        else:
            self.cap_w, self.cap_m = list(self.cap_dev), list(self.cap_dev)
        self.limits = []  # (column, cap) of the capped latency and energy (and period, for memory)
        for name, limit, vals, tvals in (
                ("latency", inst.constraints.latency_s, [a.tau for a in sg.arcs], [t.gather_s for t in terms]),
                ("energy", inst.constraints.energy_j, [a.energy for a in sg.arcs], [t.energy for t in terms])):
            if limit is not None:
                self.limits.append((len(add), cap_limit(limit)))
                add.append(np.array(vals, dtype=float))
                tadd.append(np.array(tvals, dtype=float))
        if objective == "memory" and period_cap is not None:
            # the period cap: every device's load (compute and receive, the gather included) and,
            # over a shared medium, the summed transfers; without these columns the search's
            # optimum broke the cap and the plan within it was never looked for (differential
            # bed, random-23692-1: 156 bytes over the cap, 172 within it)
            for a_col, t_col in load_cols:
                self.limits.append((len(add), cap_limit(period_cap)))
                add.append(a_col)
                tadd.append(t_col)
        self.add = np.column_stack(add) if add else np.zeros((n_arcs, 0))
        self.mx = np.column_stack(mx) if mx else np.zeros((n_arcs, 0))
        self.term_add = np.full((sg.n_nodes, self.add.shape[1]), np.inf)
        if len(term_nodes):
            self.term_add[term_nodes] = np.column_stack(tadd) if tadd else np.zeros((len(term_nodes), 0))
        self.is_term = np.zeros(sg.n_nodes, dtype=bool)
        self.is_term[term_nodes] = True
        # suffix floors: per column, the least still to come after each node
        use = self.usable
        self.suf_add = np.column_stack(
            [pa.suffix(np.where(use, self.add[:, j], np.inf), self.term_add[term_nodes, j])
             for j in range(self.add.shape[1])]) if self.add.shape[1] else np.zeros((sg.n_nodes, 0))
        self.suf_mx = np.column_stack([self._bottleneck(np.where(use, self.mx[:, j], np.inf))
                                       for j in range(self.mx.shape[1])]) if self.mx.shape[1] else \
            np.zeros((sg.n_nodes, 0))
        # the mean over the devices: their summed loads (weights) still to come, and for
        # memory the largest summed working set of a stage still to come
        total = self.add[:, self.obj_add].sum(axis=1)
        self.suf_sum = pa.suffix(np.where(use, total, np.inf), self.term_add[term_nodes][:, self.obj_add].sum(axis=1))
        if objective == "memory":
            self.suf_ksum = self._bottleneck(np.where(use, self.mx[:, self.obj_add].sum(axis=1), np.inf))
        # the Lagrangian floors (``set_weights``): none until the weights are chosen
        self.lag_cols = self.obj_add + ([self.x_col] if self.shared else [])
        self.lag_w = np.zeros((len(self.lag_cols), 0))
        self.suf_lag = np.zeros((sg.n_nodes, 0))
        self._before: _Side | None = None  # the prefix floors, for backward labels (``side``)

    def lag_costs(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Arc and terminal costs of the weighting(s) ``w`` (columns over ``lag_cols``): for the
        period the weighted loads (and transfers), for memory the weighted weights."""
        pa = self.pa
        c = self.add[:, self.lag_cols] @ w
        tc = self.term_add[pa.term_nodes][:, self.lag_cols] @ w
        if c.ndim == 1:
            return np.where(self.usable, c, np.inf), tc
        return np.where(self.usable[:, None], c, np.inf), tc

    def suffix_many(self, c: np.ndarray, tc: np.ndarray) -> np.ndarray:
        """Per node and column of ``c``: the cheapest cost to a terminal."""
        pa = self.pa
        dist = np.full((pa.n, c.shape[1]), np.inf)
        dist[pa.term_nodes] = tc
        for r, tails, starts in pa.backward:
            vals = c[r] + dist[pa.head[r]]
            dist[tails] = np.minimum(dist[tails], np.minimum.reduceat(vals, starts, axis=0))
        return dist

    def set_weights(self, W: np.ndarray) -> None:
        """Use the weightings ``W`` (one column each, over ``lag_cols``, each summing to at most
        1) as floors: for weights ``w`` the objective is at least ``w . value``, and what a
        label still takes on is at least the cheapest suffix of the weighted costs."""
        self.lag_w = W
        self.suf_lag = self.suffix_many(*self.lag_costs(W)) if W.shape[1] else np.zeros((self.pa.n, 0))
        self._before = None

    @staticmethod
    def _can_overflow(w, k, cap) -> bool:
        return float(w.sum()) + float(k.max(initial=0.0)) > cap

    def _bottleneck(self, cost: np.ndarray, before: bool = False) -> np.ndarray:
        """Per node: the smallest largest arc value over the paths to a terminal, or with
        ``before`` over the paths from the source."""
        pa = self.pa
        dist = np.full(pa.n, np.inf)
        if before:
            dist[pa.source] = 0.0
            passes, came_from = pa.forward, pa.tail
        else:
            dist[pa.term_nodes] = 0.0
            passes, came_from = pa.backward, pa.head
        for r, ends, starts in passes:
            vals = np.maximum(cost[r], dist[came_from[r]])
            dist[ends] = np.minimum(dist[ends], np.minimum.reduceat(vals, starts))
        return dist

    def side(self, backward: bool = False) -> "_Side":
        """The floors of what is still to come after a node (forward labels) or of what comes
        before it (``backward``: labels that hold a suffix of the plan)."""
        if not backward:
            return _Side(self.suf_add, self.suf_mx, self.suf_sum, getattr(self, "suf_ksum", None), self.suf_lag)
        if self._before is None or self._before.lag.shape[1] != self.lag_w.shape[1]:
            self._before = self._prefix_side()
        return self._before

    def _prefix_side(self) -> "_Side":
        """Per node: the least each summed column, the sum over the devices and the weighted
        costs take on from the source to it, and the smallest largest maxed column."""
        use = self.usable
        n = self.pa.n
        add = self.prefix_many(np.where(use[:, None], self.add, np.inf)) if self.add.shape[1] else \
            np.zeros((n, 0))
        mx = np.column_stack([self._bottleneck(np.where(use, self.mx[:, j], np.inf), before=True)
                              for j in range(self.mx.shape[1])]) if self.mx.shape[1] else np.zeros((n, 0))
        total = self.prefix_many(np.where(use, self.add[:, self.obj_add].sum(axis=1), np.inf)[:, None])[:, 0]
        ksum = None
        if self.objective == "memory":
            ksum = self._bottleneck(np.where(use, self.mx[:, self.obj_add].sum(axis=1), np.inf), before=True)
        lag = self.prefix_many(self.lag_costs(self.lag_w)[0]) if self.lag_w.shape[1] else np.zeros((n, 0))
        return _Side(add, mx, total, ksum, lag)

    def prefix_many(self, c: np.ndarray) -> np.ndarray:
        """Per node and column of ``c``: the cheapest cost from the source."""
        pa = self.pa
        dist = np.full((pa.n, c.shape[1]), np.inf)
        dist[pa.source] = 0.0
        for f, heads, starts in pa.forward:
            vals = dist[pa.tail[f]] + c[f]
            dist[heads] = np.minimum(dist[heads], np.minimum.reduceat(vals, starts, axis=0))
        return dist

    def floor(self, S: np.ndarray, M: np.ndarray, at: np.ndarray,
              side: "_Side | None" = None) -> tuple[np.ndarray, np.ndarray]:
        """(floor of the objective, meets the caps) for labels ``S``/``M`` at nodes ``at``; at a
        terminal the floor is the plan's value. ``side``: the floors of the rest of the plan
        (the suffix floors by default; ``side(backward=True)`` for labels holding suffixes)."""
        sd = side or self.side()
        E = S + sd.add[at]
        Mm = np.maximum(M, sd.mx[at]) if M.shape[1] else M
        if self.objective == "period":
            v = E[:, self.obj_add].max(axis=1)
            v = np.maximum(v, (S[:, self.obj_add].sum(axis=1) + sd.sum[at]) / self.n_dev)
            if self.shared:
                v = np.maximum(v, E[:, self.x_col])
            if self.lag_w.shape[1]:
                lag = S[:, self.lag_cols] @ self.lag_w + sd.lag[at]
                v = np.maximum(v, lag.max(axis=1))
        else:
            v = (E[:, self.obj_add] + Mm[:, self.obj_add]).max(axis=1)
            held = S[:, self.obj_add].sum(axis=1) + sd.sum[at]
            v = np.maximum(v, (held + np.maximum(M[:, self.obj_add].sum(axis=1), sd.ksum[at])) / self.n_dev)
            if self.lag_w.shape[1]:
                lag = (S[:, self.lag_cols] + Mm[:, self.obj_add]) @ self.lag_w + sd.lag[at]
                v = np.maximum(v, lag.max(axis=1))
        ok = np.ones(len(S), dtype=bool)
        if len(self.cap_dev):
            ok &= ((E[:, self.cap_w] + Mm[:, self.cap_m]) <= self.cap).all(axis=1)
        for col, limit in self.limits:
            ok &= E[:, col] <= limit
        return v, ok

    def value(self, S: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(value, meets the caps) of whole plans with summed columns ``S`` (terminal included)
        and maxed columns ``M``; ``S``/``M`` may carry leading axes (pairs of labels)."""
        if self.objective == "period":
            v = S[..., self.obj_add].max(axis=-1)
            if self.shared:
                v = np.maximum(v, S[..., self.x_col])
        else:
            v = (S[..., self.obj_add] + M[..., self.obj_add]).max(axis=-1)
        ok = np.ones(v.shape, dtype=bool)
        if len(self.cap_dev):
            ok &= ((S[..., self.cap_w] + M[..., self.cap_m]) <= self.cap).all(axis=-1)
        for col, limit in self.limits:
            ok &= S[..., col] <= limit
        return v, ok

    def floor_grid(self, S: np.ndarray, M: np.ndarray, A: np.ndarray, heads: np.ndarray,
                   side: "_Side | None" = None) -> tuple[np.ndarray, np.ndarray]:
        """Whether each label of ``S``/``M`` (one node's) crossed with each arc of ``A`` (to
        ``heads``: the nodes the extended labels reach, tails for backward labels) has a floor
        within the threshold and meets the caps: ``floor`` of the extended labels, with the arcs' parts summed once per arc instead of per label, column
        by column (numpy is slow at reducing a short last axis).
        Returns (floor, meets the caps), each of shape (labels, arcs)."""
        sd = side or self.side()
        addA = self.add[A]
        G = addA + sd.add[heads]  # per arc: its part plus the least after its head
        H = np.maximum(self.mx[A], sd.mx[heads]) if M.shape[1] else None
        mm: dict[int, np.ndarray] = {}

        def Mm(j):  # the maxed column j of the extended labels with the floor after the head
            if j not in mm:
                mm[j] = np.maximum(M[:, j, None], H[None, :, j])
            return mm[j]

        obj = self.obj_add
        held = S[:, obj].sum(axis=1)[:, None] + (addA[:, obj].sum(axis=1) + sd.sum[heads])[None, :]
        memory = self.objective == "memory"
        v = None
        for d in obj:
            e = S[:, d, None] + G[None, :, d]
            if memory:
                e = e + Mm(d)
            v = e if v is None else np.maximum(v, e, out=v)
        if memory:
            M2sum = None
            for d in obj:
                m2 = np.maximum(M[:, d, None], self.mx[A][None, :, d])
                M2sum = m2 if M2sum is None else M2sum + m2
            held = held + np.maximum(M2sum, sd.ksum[heads][None, :])
        np.maximum(v, held / self.n_dev, out=v)
        if self.shared:
            np.maximum(v, S[:, self.x_col, None] + G[None, :, self.x_col], out=v)
        if self.lag_w.shape[1]:
            SW = S[:, self.lag_cols] @ self.lag_w
            AW = addA[:, self.lag_cols] @ self.lag_w + sd.lag[heads]
            for k in range(self.lag_w.shape[1]):
                lag = SW[:, k, None] + AW[None, :, k]
                if memory:
                    for i, d in enumerate(obj):
                        if self.lag_w[i, k]:
                            lag += self.lag_w[i, k] * Mm(d)
                np.maximum(v, lag, out=v)
        ok = np.ones(v.shape, dtype=bool)
        for cw, cm, cap in zip(self.cap_w, self.cap_m, self.cap):
            ok &= (S[:, cw, None] + G[None, :, cw]) + Mm(cm) <= cap
        for col, limit in self.limits:
            ok &= S[:, col, None] + G[None, :, col] <= limit
        return v, ok

    def path_floor(self, arcs: list[int], end: int) -> tuple[float, bool]:
        """A path's value and whether it meets the caps, from the same columns."""
        S = self.add[arcs].sum(axis=0, keepdims=True)
        M = self.mx[arcs].max(axis=0, keepdims=True) if self.mx.shape[1] else np.zeros((1, 0))
        v, ok = self.floor(S, M, np.array([end]))
        return float(v[0]), bool(ok[0])


@dataclass
class _Lagrange:
    """What the weighted shortest paths gave: the best plan that meets the caps (arcs, value;
    None: none met), and the weightings (columns over ``_Problem.lag_cols``) with the lower
    bound each proves."""

    best: tuple[list[int], float] | None
    weights: np.ndarray
    bounds: np.ndarray


def _lagrange(sg: StageGraph, prob: _Problem, iterations: int = LAGRANGE_ITERATIONS, keep: int = 6,
              deadline: Deadline = NEVER) -> _Lagrange:
    """Shortest paths under weightings of the devices (multiplicative weights towards the
    busiest one): good plans, and lower bounds. For weights ``w`` (summing to 1) every plan is
    worth at least ``w . (its per-device values)``, so the cheapest path under the weighted
    costs bounds the optimum (the Lagrangian dual of the min-max; at the speeds' proportions it
    is at least the fluid bound). ``keep``: how many of the best weightings to return."""
    pa = prob.pa
    n_w = len(prob.lag_cols)
    tau = np.where(prob.usable, np.array([a.tau for a in sg.arcs], dtype=float), np.inf)
    ttau = np.array([sg.terminals[int(t)].gather_s for t in pa.term_nodes], dtype=float)
    memory = prob.objective == "memory"
    # the working sets are maxima along the path: a floor for them (per device) from the source
    k_floor = prob.suf_mx[pa.source, prob.obj_add] if memory else None
    w = np.full(n_w, 1.0 / n_w)
    best, ws, bounds = None, [], []

    def path(c, tc):
        dist = pa.prefix(c)
        ends = dist[pa.term_nodes] + tc
        t = int(np.argmin(ends))
        if not math.isfinite(ends[t]):
            return None, math.inf
        end = int(pa.term_nodes[t])
        return (pa.path_to(dist, c, end), end), float(ends[t])

    def per_device(arcs, end):
        per = prob.add[arcs][:, prob.lag_cols].sum(axis=0) + prob.term_add[end, prob.lag_cols]
        if memory:
            per = per + prob.mx[arcs].max(axis=0)[prob.obj_add] if len(arcs) else per
        return per

    def consider(found):
        nonlocal best
        arcs, end = found
        value, ok = prob.path_floor(arcs, end)
        if ok and (best is None or value < best[1]):
            best = (arcs, value)

    found, _ = path(tau, ttau)  # the fastest plan first
    if found is None:
        return _Lagrange(None, np.zeros((n_w, 0)), np.zeros(0))
    consider(found)
    for it in range(iterations):
        if deadline.passed():
            break
        c, tc = prob.lag_costs(w)
        found, bound = path(c, tc)
        if found is None:
            break
        if memory:
            bound += float(w @ k_floor)
            consider(found)
            inc, _ = path(c + np.where(prob.usable, prob.mx[:, prob.obj_add] @ w, np.inf), tc)
            if inc is not None:
                consider(inc)
        else:
            consider(found)
        ws.append(w.copy())
        bounds.append(bound)
        per = per_device(*found)
        top = float(per.max())
        if top <= 0:
            break
        w = w * np.exp(2.0 / math.sqrt(1 + it / 4) * per / top)
        w = w / w.sum()
    order = np.argsort(bounds)[::-1][:keep]
    W = np.column_stack([ws[i] for i in order]) if len(order) else np.zeros((n_w, 0))
    return _Lagrange(best, W, np.asarray(bounds, dtype=float)[order])


_SCREEN = 64  # labels of the least sum that screen the others before the exact dominance test


def _pareto(X: np.ndarray, deadline: Deadline) -> np.ndarray:
    """``formulations.caps.undominated`` (sorted, each block of 256 rows against the rows kept),
    checking ``deadline`` per block: one node can receive hundreds of thousands of labels.

    Sorted by the first column, a row can only be dominated by an earlier one, whose first
    column is then no larger: only the other columns are compared, one at a time (numpy is
    slow at reducing a short last axis), and only with the kept rows nowhere above the block's
    largest values."""
    order = np.lexsort(tuple(X[:, 1:].T[::-1]) + (X[:, 0],))
    n, d = X.shape
    if d <= 1 or n <= 1:
        return order[:1] if n else np.zeros(0, dtype=np.int64)
    cols = [np.ascontiguousarray(X[order, j]) for j in range(1, d)]
    kept = np.empty(n, dtype=np.int64)
    kcols = [np.empty(n) for _ in cols]
    nk = 0
    block = 256
    for lo in range(0, n, block):
        if lo and deadline.passed():
            raise LabelBudget("the time limit ran out")
        hi = min(n, lo + block)
        xs = [c[lo:hi] for c in cols]
        out = np.zeros(hi - lo, dtype=bool)
        if nk:
            m = kcols[0][:nk] <= xs[0].max()
            for k, x in zip(kcols[1:], xs[1:]):
                m &= k[:nk] <= x.max()
            cand = np.flatnonzero(m)
            if len(cand):
                le = kcols[0][cand][None, :] <= xs[0][:, None]
                for k, x in zip(kcols[1:], xs[1:]):
                    le &= k[cand][None, :] <= x[:, None]
                out = le.any(axis=1)
        inner = np.tri(hi - lo, k=-1, dtype=bool)  # only earlier rows (sorted) can dominate
        for x in xs:
            inner &= x[None, :] <= x[:, None]
        out |= inner.any(axis=1)
        sel = np.flatnonzero(~out)
        kept[nk:nk + len(sel)] = order[lo + sel]
        for k, x in zip(kcols, xs):
            k[nk:nk + len(sel)] = x[sel]
        nk += len(sel)
    return kept[:nk]


def _undominated(X: np.ndarray, deadline: Deadline = NEVER) -> np.ndarray:
    """Indices of the rows of ``X`` no other row dominates (nowhere larger; of equal rows the
    first), as ``formulations.caps.undominated`` (which sorts and then compares every row with
    every row kept). Many labels arrive at a node and most are dominated by one of a few good
    ones: a screen of the ``_SCREEN`` rows of the least sum drops those first."""
    n = len(X)
    if n > 4 * _SCREEN:
        screen = np.argsort(X.sum(axis=1), kind="stable")[:_SCREEN]
        P = X[screen]
        dom = np.zeros(n, dtype=bool)
        step = max(1, 2_000_000 // (_SCREEN * X.shape[1]))
        for lo in range(0, n, step):
            x = X[lo:lo + step]
            le = np.ones((len(x), _SCREEN), dtype=bool)
            # equal rows: only the one of the smaller index dominates (never a row itself)
            strict = screen[None, :] < np.arange(lo, lo + len(x))[:, None]
            for j in range(X.shape[1]):
                le &= P[None, :, j] <= x[:, j, None]
                strict |= P[None, :, j] < x[:, j, None]
            dom[lo:lo + len(x)] = (le & strict).any(axis=1)
        rest = np.flatnonzero(~dom)
        return rest[_pareto(X[rest], deadline)]
    return _pareto(X, deadline)


def _probe(sg: StageGraph, prob: _Problem, T: float, max_labels: int, deadline: Deadline,
           beam: int | None = None, stats: dict | None = None, meet: bool = False):
    """The best plan worth at most ``T`` that meets the caps: (arcs, value) or None, the labels
    kept and the support (bool per arc). Raises ``LabelBudget``.

    ``meet`` (without ``beam``): labels grow from both ends and meet (``_probe_meet``); else
    from the source (``_probe_forward``).
    """
    if meet and beam is None:
        return _probe_meet(sg, prob, T, max_labels, deadline, stats)
    return _probe_forward(sg, prob, T, max_labels, deadline, beam, stats)


def _probe_forward(sg: StageGraph, prob: _Problem, T: float, max_labels: int, deadline: Deadline,
                   beam: int | None = None, stats: dict | None = None):
    """``_probe`` with labels extended from the source only.

    ``beam``: keep at most that many labels per node, those of the least floor (a heuristic:
    the plan is then only a good one, and None proves nothing).

    The labels wait per boundary (one chunk per extended block, with their heads) and a
    boundary's nodes take theirs in one sort: no per-head bookkeeping on the hot path.
    ``stats``: filled per boundary with the labels that arrived, were kept, and their nodes.
    """
    pa = prob.pa
    slack = T * (1 + 1e-9) + 1e-15 if math.isfinite(T) else math.inf
    nA, nM = prob.add.shape[1], prob.mx.shape[1]
    bnd = np.fromiter((b for b, _ in sg.nodes), dtype=np.int64, count=sg.n_nodes)
    out_arcs = [np.array([a for a in arcs if prob.usable[a]], dtype=np.int64) for arcs in sg.out_arcs]
    support = np.zeros(len(sg.arcs), dtype=bool)

    def out_of_time():
        if deadline.passed():
            raise LabelBudget("the time limit ran out")
    n_bnd = int(bnd.max()) + 1
    waiting: list[list] = [[] for _ in range(n_bnd)]  # per boundary: (S, M, parent, arc, head) chunks
    waiting[int(bnd[sg.source])].append((np.zeros((1, nA)), np.zeros((1, nM)), np.full(1, -1, np.int64),
                                         np.full(1, -1, np.int64), np.full(1, sg.source, np.int64)))
    parents, via = [], []
    n_kept, best = 0, None
    for b in range(n_bnd):
        chunks = waiting[b]
        waiting[b] = []
        if not chunks:
            continue
        S_all = np.concatenate([c[0] for c in chunks])
        M_all = np.concatenate([c[1] for c in chunks])
        par_all = np.concatenate([c[2] for c in chunks])
        arc_all = np.concatenate([c[3] for c in chunks])
        head_all = np.concatenate([c[4] for c in chunks])
        del chunks
        order = np.argsort(head_all, kind="stable")
        S_all, M_all, par_all, arc_all, head_all = (S_all[order], M_all[order], par_all[order], arc_all[order],
                                                    head_all[order])
        starts = np.flatnonzero(np.r_[True, head_all[1:] != head_all[:-1]])
        ends = np.r_[starts[1:], len(head_all)]
        for lo_, hi_ in zip(starts.tolist(), ends.tolist()):
            v = int(head_all[lo_])
            S, M, par, arc = S_all[lo_:hi_], M_all[lo_:hi_], par_all[lo_:hi_], arc_all[lo_:hi_]
            if beam is not None and len(S) > 8 * beam:  # a heuristic: the best floors first
                fl, _ = prob.floor(S, M, np.full(len(S), v))
                keep = np.argsort(fl, kind="stable")[:8 * beam]
                S, M, par, arc = S[keep], M[keep], par[keep], arc[keep]
            if len(S) > 1:
                keep = _undominated(np.hstack([S, M]), deadline)
                S, M, par, arc = S[keep], M[keep], par[keep], arc[keep]
            if beam is not None and len(S) > beam:
                fl, _ = prob.floor(S, M, np.full(len(S), v))
                keep = np.argsort(fl, kind="stable")[:beam]
                S, M, par, arc = S[keep], M[keep], par[keep], arc[keep]
            gid = n_kept + np.arange(len(S))
            if stats is not None:
                row = stats.setdefault(b, {"side": "forward", "arrived": 0, "kept": 0, "nodes": 0})
                row["arrived"] += hi_ - lo_
                row["kept"] += len(S)
                row["nodes"] += 1
            parents.append(par)
            via.append(arc)
            n_kept += len(S)
            if n_kept > max_labels:
                raise LabelBudget(f"more than {max_labels:,} labels")
            if deadline.passed():
                raise LabelBudget("the time limit ran out")
            if prob.is_term[v]:
                val, ok = prob.floor(S, M, np.full(len(S), v))
                val = np.where(ok, val, np.inf)
                i = int(np.argmin(val))
                if val[i] <= slack and (best is None or val[i] < best[0]):
                    best = (float(val[i]), int(gid[i]))
            A = out_arcs[v]
            if not len(A):
                continue
            heads = pa.head[A]
            hb = bnd[heads]
            step = max(1, 400_000 // (len(A) * max(1, nA + nM)))  # labels per block: bounded temporaries
            for S2, M2, g2, ai in _extensions(prob, S, M, gid, A, step, slack, support, out_of_time,
                                              lambda Sb, Mb: prob.floor_grid(Sb, Mb, A, heads)):
                hsel, hbs = heads[ai], hb[ai]
                for hbv in np.unique(hbs).tolist():
                    m = hbs == hbv
                    waiting[hbv].append((S2[m], M2[m], g2[m], A[ai[m]], hsel[m]))
    if best is None:
        return None, n_kept, support
    parent, arc_of = np.concatenate(parents), np.concatenate(via)
    path, g = [], best[1]
    while arc_of[g] >= 0:
        path.append(int(arc_of[g]))
        g = int(parent[g])
    return (path[::-1], best[0]), n_kept, support


@dataclass
class _Chunks:
    """Labels waiting at one boundary: per chunk (summed columns, maxed columns, the label they
    extend, the arc, the node reached)."""

    parts: list

    def rows(self) -> int:
        return sum(len(c[0]) for c in self.parts)

    def by_node(self):
        """The waiting labels grouped by node: (node, S, M, link, arc) per node."""
        if not self.parts:
            return []
        S, M, link, arc, node = (np.concatenate([c[i] for c in self.parts]) for i in range(5))
        order = np.argsort(node, kind="stable")
        S, M, link, arc, node = S[order], M[order], link[order], arc[order], node[order]
        starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
        ends = np.r_[starts[1:], len(node)]
        return [(int(node[lo]), S[lo:hi], M[lo:hi], link[lo:hi], arc[lo:hi])
                for lo, hi in zip(starts.tolist(), ends.tolist())]


def _extensions(prob: _Problem, S, M, gid, A, step: int, slack: float, support: np.ndarray,
                check: Callable[[], None], floor: Callable):
    """The labels (S, M, gid) extended along the arcs ``A``, block by block of ``step`` labels
    (bounded temporaries; ``check()`` between blocks): per block, the extensions whose
    ``floor(Sb, Mb)`` (a grid over the block's labels and ``A``, with its validity) is within
    ``slack``, as (sums, maxima, parent ids, indices into ``A``). Their arcs are marked in
    ``support``."""
    for lo in range(0, len(S), step):
        if lo:
            check()
        Sb, Mb, gb = S[lo:lo + step], M[lo:lo + step], gid[lo:lo + step]
        fl, ok = floor(Sb, Mb)
        li, ai = np.nonzero(ok & (fl <= slack))
        if not len(li):
            continue
        support[A[ai]] = True
        yield Sb[li] + prob.add[A[ai]], np.maximum(Mb[li], prob.mx[A[ai]]), gb[li], ai


def _probe_meet(sg: StageGraph, prob: _Problem, T: float, max_labels: int, deadline: Deadline,
                stats: dict | None = None):
    """``_probe`` with labels grown from both ends: **forward** labels (what a plan holds from
    the source to a node, floored by the suffix floors) and **backward** labels (what it holds
    from a node to the end, the terminal's gather included, floored by the prefix floors).

    Boundaries are settled one at a time from either end, the end with fewer labels waiting
    first, until the two meet; each node is settled by one side. Every plan crosses the cut
    by one arc, extended by the side that settled its end first, and the labels it brings
    wait at the other end until that node is settled: then each waiting label is joined with
    each settled one there (a whole plan: summed columns added, maxed ones maxed). A label is
    kept unless another at its node (of its side) is nowhere worse or its floor exceeds ``T``,
    so for every plan worth at most ``T`` some join is nowhere worse (the floors and the value
    are monotone in the labels): the best join within ``T`` is the best plan within ``T``.
    Labels near the middle of the graph are the most numerous, and neither side reaches far
    past it.
    """
    return _Meet(sg, prob, T, max_labels, deadline, stats).run()


class _Meet:
    """The state of one ``_probe_meet``: the labels waiting at each boundary on either side,
    the links that rebuild a label's path, and the best join so far."""

    def __init__(self, sg: StageGraph, prob: _Problem, T: float, max_labels: int, deadline: Deadline,
                 stats: dict | None):
        self.sg, self.prob, self.max_labels, self.deadline, self.stats = sg, prob, max_labels, deadline, stats
        pa = prob.pa
        self.slack = T * (1 + 1e-9) + 1e-15 if math.isfinite(T) else math.inf
        self.nA, self.nM = nA, nM = prob.add.shape[1], prob.mx.shape[1]
        self.fwd, self.bwd = prob.side(), prob.side(backward=True)
        self.bnd = bnd = np.fromiter((b for b, _ in sg.nodes), dtype=np.int64, count=sg.n_nodes)
        use = prob.usable
        self.out_arcs = [np.array([a for a in arcs if use[a]], dtype=np.int64) for arcs in sg.out_arcs]
        self.in_arcs = [np.array([a for a in arcs if use[a]], dtype=np.int64) for arcs in sg.in_arcs]
        self.support = np.zeros(len(sg.arcs), dtype=bool)
        self.n_bnd = n_bnd = int(bnd.max()) + 1
        self.wait_f = [_Chunks([]) for _ in range(n_bnd)]  # forward labels waiting per boundary
        self.wait_b = [_Chunks([]) for _ in range(n_bnd)]
        self.wait_f[int(bnd[sg.source])].parts.append(
            (np.zeros((1, nA)), np.zeros((1, nM)), np.full(1, -1, np.int64), np.full(1, -1, np.int64),
             np.full(1, sg.source, np.int64)))
        tn = pa.term_nodes
        for b in np.unique(bnd[tn]).tolist():
            t = tn[bnd[tn] == b]
            self.wait_b[b].parts.append((prob.term_add[t], np.zeros((len(t), nM)), np.full(len(t), -1, np.int64),
                                         np.full(len(t), -1, np.int64), t))
        self.links = {True: ([], []), False: ([], [])}  # per side (forward?): the label each extends, the arc
        self.count = {True: 0, False: 0}
        self.best = None  # (value, forward label, backward label)

    def run(self):
        """(the best plan within ``T``: (arcs, value), or None; labels kept; the arcs extended)."""
        lo_b, hi_b = 0, self.n_bnd - 1
        while lo_b <= hi_b:
            if self.wait_f[lo_b].rows() <= self.wait_b[hi_b].rows():
                self.settle(lo_b, True, lo_b, hi_b)
                lo_b += 1
            else:
                self.settle(hi_b, False, lo_b, hi_b)
                hi_b -= 1
        kept = self.count[True] + self.count[False]
        if self.best is None:
            return None, kept, self.support
        return (self.path(), self.best[0]), kept, self.support

    def path(self) -> list[int]:
        """The arcs of the best join: the forward label's path, then the backward one's."""
        halves = []
        for forward, g in ((True, self.best[1]), (False, self.best[2])):
            link, arc = (np.concatenate(x) for x in self.links[forward])
            arcs = []
            while arc[g] >= 0:
                arcs.append(int(arc[g]))
                g = int(link[g])
            halves.append(arcs[::-1] if forward else arcs)
        return halves[0] + halves[1]

    def record(self, forward: bool, link, arc) -> np.ndarray:
        """Number the labels kept on one side (their links rebuild their paths)."""
        count = self.count
        gid = count[forward] + np.arange(len(link))
        self.links[forward][0].append(link)
        self.links[forward][1].append(arc)
        count[forward] += len(link)
        if count[True] + count[False] > self.max_labels:
            raise LabelBudget(f"more than {self.max_labels:,} labels")
        return gid

    def tick(self):
        if self.deadline.passed():
            raise LabelBudget("the time limit ran out")

    def pareto(self, S, M, link, arc):
        if len(S) > 1:
            keep = _undominated(np.hstack([S, M]), self.deadline)
            return S[keep], M[keep], link[keep], arc[keep]
        return S, M, link, arc

    def join(self, fS, fM, fg, bS, bM, bg):
        """Every forward label with every backward one at a node: keep the best whole plan."""
        nA, nM = self.nA, self.nM
        step = max(1, 400_000 // (len(bS) * max(1, nA + nM)))
        for lo in range(0, len(fS), step):
            if lo:
                self.tick()
            S = fS[lo:lo + step, None, :] + bS[None, :, :]
            M = np.maximum(fM[lo:lo + step, None, :], bM[None, :, :])
            v, ok = self.prob.value(S, M)
            v = np.where(ok, v, np.inf)
            i = int(np.argmin(v))
            fi, bi = divmod(i, len(bS))
            val = float(v.flat[i])
            if val <= self.slack and (self.best is None or val < self.best[0]):
                self.best = (val, int(fg[lo + fi]), int(bg[bi]))

    def settle(self, b: int, forward: bool, lo_b: int, hi_b: int):
        """Settle boundary ``b`` from one side: its labels pruned, joined with the other side's
        that crossed into it, and extended over the arcs to boundaries not yet settled."""
        own, other = (self.wait_f[b], self.wait_b[b]) if forward else (self.wait_b[b], self.wait_f[b])
        groups, others = own.by_node(), {g[0]: g[1:] for g in other.by_node()}
        own.parts, other.parts = [], []
        row = None
        if self.stats is not None:
            row = self.stats.setdefault(b, {"side": "forward" if forward else "backward", "arrived": 0, "kept": 0,
                                            "nodes": 0, "joined": 0})
        for v, S, M, link, arc in groups:
            self.tick()
            arrived = len(S)
            S, M, link, arc = self.pareto(S, M, link, arc)
            gid = self.record(forward, link, arc)
            if row is not None:
                row["arrived"] += arrived
                row["kept"] += len(S)
                row["nodes"] += 1
            if v in others:  # the other side's labels that crossed into v: whole plans
                oS, oM, olink, oarc = self.pareto(*others.pop(v))
                ogid = self.record(not forward, olink, oarc)
                if row is not None:
                    row["joined"] += len(oS)
                if forward:
                    self.join(S, M, gid, oS, oM, ogid)
                else:
                    self.join(oS, oM, ogid, S, M, gid)
            self.extend(v, S, M, gid, forward, lo_b, hi_b)

    def extend(self, v: int, S, M, gid, forward: bool, lo_b: int, hi_b: int):
        """The labels of node ``v`` over its arcs to boundaries the other side has not settled,
        left waiting there."""
        prob, bnd = self.prob, self.bnd
        A = (self.out_arcs if forward else self.in_arcs)[v]
        if not len(A):
            return
        nxt = (prob.pa.head if forward else prob.pa.tail)[A]
        open_ = (bnd[nxt] <= hi_b) if forward else (bnd[nxt] >= lo_b)  # not settled by the other side
        A, nxt = A[open_], nxt[open_]
        if not len(A):
            return
        nb = bnd[nxt]
        side = self.fwd if forward else self.bwd
        waits = self.wait_f if forward else self.wait_b
        step = max(1, 400_000 // (len(A) * max(1, self.nA + self.nM + prob.lag_w.shape[1])))
        for S2, M2, g2, ai in _extensions(prob, S, M, gid, A, step, self.slack, self.support, self.tick,
                                          lambda Sb, Mb: prob.floor_grid(Sb, Mb, A, nxt, side)):
            to, tob = nxt[ai], nb[ai]
            for t in np.unique(tob).tolist():
                m = tob == t
                waits[t].parts.append((S2[m], M2[m], g2[m], A[ai[m]], to[m]))


GROWTH = 3.0  # a probe aims at this many times the labels of the last that found nothing
RACE_LABELS = 1000  # the first probe that keeps this many labels is run from the other end too
CEILING_REACHED = 1e-3  # relative: the probes below a ceiling this close to it try it again
CEILING_RETRIES = 3  # most times a ceiling is tried again
RETRY_STEP = 1e-6  # relative: a threshold this close to the bound is not retried smaller; a plan this far
#                   below its probe's threshold gets a probe of its own (a smaller support)


def _next_threshold(first: float, lo: float, top: float, refuted: list[tuple[float, int]],
                    growth: float = GROWTH) -> float:
    """The next probe's threshold between the proven bound ``lo`` and the incumbent ``top``.

    A probe keeps far fewer labels at a small threshold, and the labels grow about
    exponentially with it near the optimum: the first probes take the fixed fractions
    ``_PROBES`` of the way from ``first`` (the bound the search started from); once two probes
    kept labels, the next aims at ``GROWTH`` times the last one's labels on the log-linear fit
    of the last two, its slope raised as much as it rose from the two before (``growth``: fewer
    when the time left would not hold that many), a step at most twice the last one and at
    most halfway to the incumbent. Any
    threshold is sound: an empty probe proves it, one with a plan gives the optimum."""
    if not math.isfinite(top):
        return top
    fixed = [first + (top - first) * f for f in _PROBES]
    nxt = next((t for t in fixed if t > lo * (1 + 1e-12)), top)
    if len(refuted) >= 2:
        (t1, n1), (t2, n2) = refuted[-2], refuted[-1]
        if n2 > n1 >= 10 and t2 > t1:
            rate = math.log(n2 / n1) / (t2 - t1)  # log labels per unit of threshold
            if len(refuted) >= 3:  # the rate grows towards the optimum: as it grew last
                t0, n0 = refuted[-3]
                if n1 > n0 >= 10 and t1 > t0:
                    rate *= max(1.0, rate / (math.log(n1 / n0) / (t1 - t0)))
            aim = min(t2 + math.log(growth) / rate, t2 + 2 * (t2 - t1))  # (a flat count says little)
            nxt = min(aim, lo + (top - lo) / 2) if aim > lo else nxt
    if top - nxt <= top * 1e-6:
        nxt = top
    return max(nxt, lo)


def graph_floor(prob: _Problem, source: int) -> float:
    """A lower bound on every plan of the graph: the source's floor."""
    v, _ = prob.floor(np.zeros((1, prob.add.shape[1])), np.zeros((1, prob.mx.shape[1])), np.array([source]))
    return float(v[0])


def minmax_search(sg: StageGraph, objective: str, upper: float = math.inf, lower: float = 0.0,
                  max_labels: int = 2_000_000, deadline: Deadline = NEVER,
                  arrays: PathArrays | None = None) -> MinMaxResult:
    """The best plan of ``sg`` for ``objective`` (period or memory) that meets the instance's caps
    (memory, latency, energy) among those worth at most ``upper`` (see the module).

    ``lower``: a bound already proven for those plans. Exact unless stopped: at ``deadline``
    (a ``Deadline``), or when probes ever closer to the proven bound all keep more
    than ``max_labels`` labels, the result holds the best plan found and the proven bound
    (``stopped``).
    """
    if objective not in MINMAX:
        raise ValueError(f"minmax_search is for {' and '.join(MINMAX)}, not {objective!r}")
    pa = arrays or PathArrays(sg)
    if not len(sg.arcs) or not len(pa.term_nodes):
        return MinMaxResult([], math.inf, upper, False, none_within=True)
    try:
        prob = _Problem(sg, objective, pa, deadline)
    except LabelBudget:  # the deadline passed while the arcs were laid out: nothing new proven
        return MinMaxResult([], math.inf, lower, False, stopped=True)
    lo = max(lower, graph_floor(prob, sg.source))
    if not math.isfinite(lo):  # no path avoids the arcs that alone overflow a cap
        return MinMaxResult([], math.inf, upper, False, none_within=True)
    lag = _lagrange(sg, prob, deadline=deadline.share(LAGRANGE_SHARE))
    if len(lag.bounds):
        lo = max(lo, float(lag.bounds[0]))
        prob.set_weights(lag.weights)
    inc_arcs, inc_value = lag.best if lag.best is not None else ([], math.inf)
    inc_arcs, inc_value, labels = _beam_incumbent(sg, prob, lo, upper, inc_arcs, inc_value, max_labels, deadline)
    return _Probes(sg, prob, upper, max_labels, deadline, inc_arcs, inc_value, lo, labels).run()


def _beam_incumbent(sg: StageGraph, prob: "_Problem", lo: float, upper: float, inc_arcs: list, inc_value: float,
                    max_labels: int, deadline: Deadline) -> tuple[list, float, int]:
    """Beam searches of growing width for a better incumbent (heuristics: they prove nothing);
    the wider beams only while the narrower ones improved and took little of the time left.
    Returns the incumbent and the labels kept."""
    labels = 0
    beams_from, improved = time.perf_counter(), False
    for width in _BEAMS:
        T = min(inc_value, upper)
        if lo >= T * (1 - STRICTLY_BETTER):  # no plan better than the incumbent by more than rounding
            break
        if width > _BEAMS[1] and (not improved or time.perf_counter() - beams_from > BEAM_SHARE * deadline.left()):
            break
        try:
            found, kept, _ = _probe(sg, prob, T, max_labels, deadline, beam=width)
        except LabelBudget:
            break
        labels += kept
        improved = found is not None and found[1] < inc_value
        if improved:
            inc_arcs, inc_value = found
    return inc_arcs, inc_value, labels


class _Probes:
    """The threshold probes of ``minmax_search`` between the proven bound ``lo`` and the
    incumbent: each proves no plan within the caps worth at most ``T`` or returns the best
    one; a probe that keeps too many labels is retried at a smaller threshold (below a
    ``ceiling``), and the first large one is raced in the other direction."""

    def __init__(self, sg: StageGraph, prob: "_Problem", upper: float, max_labels: int, deadline: Deadline,
                 inc_arcs: list, inc_value: float, lo: float, labels: int):
        self.sg, self.prob, self.upper, self.max_labels, self.deadline = sg, prob, upper, max_labels, deadline
        self.inc_arcs, self.inc_value = inc_arcs, inc_value
        self.top = min(inc_value, upper)
        self.lo = self.first = min(lo, self.top)
        self.refuted: list[tuple[float, int]] = []  # (threshold, labels) of the probes that found nothing
        self.per_label = 0.0  # seconds per label of the last probe that found nothing
        self.labels, self.probes = labels, 0
        # forward labels first (from both ends at once, a Pareto front's capped memory step on a tiny
        # chain kept growing past the 4 GB budget); the race switches when the other way keeps fewer
        self.meet, self.raced = False, False
        self.ceiling = math.inf  # a threshold whose probe outgrew its share of the time left
        self.ceiling_retries = 0

    def stopped(self) -> MinMaxResult:
        return MinMaxResult(self.inc_arcs, self.inc_value, min(self.lo, self.top), False, stopped=True,
                            labels=self.labels, probes=self.probes)

    def _aim(self) -> tuple[float, int] | None:
        """The next threshold and its label cap (None: stop, the ceiling retried enough)."""
        deadline = self.deadline
        growth, cap = GROWTH, self.max_labels
        if not deadline.never and self.refuted and self.per_label > 0:
            # a probe stopped by the deadline proves nothing: aim at what the time left holds,
            # and give up a probe past half of it for a smaller threshold
            fits = deadline.left() / self.per_label / 2
            growth = min(GROWTH, max(1.25, fits / max(1, self.refuted[-1][1])))
            cap = min(self.max_labels, max(1000, int(fits)))
        T = _next_threshold(self.first, self.lo, self.top, self.refuted, growth)
        if math.isfinite(self.ceiling) and self.ceiling - self.lo <= CEILING_REACHED * self.ceiling:
            # the bisection below a probe that outgrew its cap has reached it; that cap came from
            # the probes before it (a probe of 27 labels, its time all overhead, gave 1,000 on
            # edge-3dev): try the ceiling again with what the latest probe's rate allows, a few
            # times (before, the thresholds crept up to it until the deadline)
            if self.ceiling_retries >= CEILING_RETRIES:
                return None
            self.ceiling, self.ceiling_retries = math.inf, self.ceiling_retries + 1
        if math.isfinite(self.ceiling):
            T = min(T, self.lo + (self.ceiling - self.lo) / 2)
        return T, cap

    def run(self) -> MinMaxResult:
        sg, prob, deadline = self.sg, self.prob, self.deadline
        while True:
            aimed = self._aim()
            if aimed is None:
                return self.stopped()
            T, cap = aimed
            self.probes += 1
            started = time.perf_counter()
            try:
                found, kept, support = _probe(sg, prob, T, cap, deadline, meet=self.meet)
            except LabelBudget:  # too many labels (or the deadline): a smaller threshold, while time is left
                if not deadline.passed() and T > self.lo * (1 + RETRY_STEP) and self.lo < self.top:
                    self.ceiling = T
                    continue
                return self.stopped()
            self.labels += kept
            if found is not None:
                return self._met(found, support, T, started)
            self.lo = max(self.lo, T)  # no plan within the caps is worth at most T
            self.refuted.append((T, kept))
            self.per_label = (time.perf_counter() - started) / max(1, kept)
            if not self.raced and kept >= RACE_LABELS and T < self.top:
                self._race(T, kept)
            if T >= self.top:
                break
        # nothing within the caps and ``upper``; the incumbent, if any, lies above it
        return MinMaxResult(self.inc_arcs, self.inc_value, self.upper, False, none_within=True,
                            support=np.zeros(len(sg.arcs), dtype=bool), support_T=self.upper, labels=self.labels,
                            probes=self.probes)

    def _met(self, found, support, T: float, started: float) -> MinMaxResult:
        """A probe at ``T`` met a plan: the optimum (the incumbent when that is no worse), with
        the support of a probe at the optimum itself when one fits in the time the probe took
        (smaller, for the MILP and CP-SAT models)."""
        arcs, value = found
        if value > self.inc_value:  # the incumbent itself lies within T: never worse than it
            arcs, value = self.inc_arcs, self.inc_value
        if value < T * (1 - RETRY_STEP):
            until = self.deadline.within(time.perf_counter() - started)
            try:
                again, kept, tight = _probe(self.sg, self.prob, value, self.max_labels, until, meet=self.meet)
                self.labels += kept
                if again is not None:
                    support, T = tight, value
            except LabelBudget:
                pass
        return MinMaxResult(arcs, value, value, True, support=support, support_T=T, labels=self.labels,
                            probes=self.probes)

    def _race(self, T: float, kept: int) -> None:
        """The other direction at the same threshold, with as many labels: the one that keeps
        fewer labels runs the rest (from the end, memory's large last layers are few labels;
        the period's backward labels can die unused)."""
        self.raced = True
        try:
            _, other, _ = _probe(self.sg, self.prob, T, kept, self.deadline, meet=not self.meet)
            self.labels += other
            if other < kept:
                self.meet = not self.meet
        except LabelBudget:
            pass

"""Restricted plan spaces: small stage graphs of chosen stage options, and beam searches over them.

The whole space (``formulations.stagegraph``) is too large to enumerate on big fleets, but a
space of a few stage options per layer window is not. ``restricted_graph`` builds the stage
graph of the plans whose stages are each one of given options: nodes are (boundary, ownership
state) as in the whole graph, every arc is priced by the evaluator's ``price_stage`` from its
tail's state and every terminal by ``price_gather``, so a path's value is the evaluator's value
of its plan. ``beam_search`` then finds a good path for any objective: it extends labels
boundary by boundary and keeps the ``width`` best per node. For latency and energy without
memory caps a width of 1 is exact (the best prefix at a node is the best one to extend); for the
period, memory or under memory caps it is a heuristic.

Users: ``milp_planner.engine.memory_search`` (one-layer stages in a few balanced layouts, memory) and
``milp_planner.engine.polish`` (the layouts of the plans at hand, every objective). Neither proves
anything about the whole space; the exact planners only take their plans as incumbents.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from formulations.minmax import MINMAX, minmax_search
from formulations.options import StageOption
from formulations.stagegraph import Arc, StageGraph, Terminal, _state_key
from milp_planner.cost.evaluator import evaluate, initial_owners, price_gather, price_stage, pricer
from milp_planner.instance import Instance
from milp_planner.space.plan import Plan

MAX_ARCS = 200_000  # a restricted graph larger than this is not built
OBJECTIVES = ("latency", "energy", "period", "memory")
BETTER = 1e-12  # relative: a plan must beat the best known by this much


@dataclass
class Space:
    """One restricted space to search: its stage options (``options_of(b)``, see
    ``restricted_graph``), the label its plans are credited to and what ``Best.tried`` says of it."""

    options_of: Callable[[int], Iterable[StageOption]]
    label: str
    row: dict = field(default_factory=dict)


@dataclass
class Best:
    """The best plan the restricted searches found (``plan`` None: nothing better than their
    ``upper`` within the caps), its evaluator's objective, the space that gave it and what each
    space tried (arcs, seconds, value, outcome)."""

    plan: Plan | None = None
    value: float = math.inf
    source: str = ""
    tried: list[dict] = field(default_factory=list)
    seconds: float = 0.0


class GraphTooLarge(RuntimeError):
    """A restricted graph would exceed its arc limit."""


def restricted_graph(instance: Instance, options_of: Callable[[int], Iterable[StageOption]],
                     deadline: Deadline = NEVER, max_arcs: int = MAX_ARCS) -> StageGraph:
    """The stage graph of the plans whose stages are each one of ``options_of(b)``, the options
    starting at layer ``b`` (each ``first == b``; ``last`` may be any later layer).

    Raises ``TimeoutError`` past ``deadline`` and
    ``GraphTooLarge`` beyond ``max_arcs`` arcs."""
    pr = pricer(instance)
    n = len(instance.graph.layers)
    init = _state_key(initial_owners(pr))
    node_id: dict[tuple, int] = {(0, init): 0}
    nodes: list[tuple[int, tuple]] = [(0, init)]
    at: dict[int, list[int]] = {0: [0]}  # the nodes of each boundary not yet expanded
    arcs: list[Arc] = []

    def late() -> bool:
        return deadline.passed()

    for b in range(n):
        frontier = at.pop(b, [])
        if not frontier:
            continue
        if late():
            raise TimeoutError("the time limit ran out while building a restricted stage graph")
        opts = list(options_of(b))
        if any(o.first != b or not b <= o.last < n for o in opts):
            raise ValueError(f"options_of({b}) gave an option that does not start at layer {b}")
        geos = [pr.geometry.parts(o.first, o.last, o.axis, list(o.ranges)) for o in opts]
        for nid in frontier:
            owners = dict(nodes[nid][1])
            for i, (opt, geo) in enumerate(zip(opts, geos)):
                if i % 256 == 255 and late():
                    raise TimeoutError("the time limit ran out while building a restricted stage graph")
                sp = price_stage(pr, owners, opt.last, opt.devices, geo)
                key = (opt.last + 1, _state_key(sp.owners))
                head = node_id.get(key)
                if head is None:
                    head = node_id[key] = len(nodes)
                    nodes.append(key)
                    at.setdefault(opt.last + 1, []).append(head)
                arcs.append(Arc(nid, head, opt, sp.tau, sp.energy, tuple(sp.load), sp.transfer_s,
                                tuple(sp.weights), tuple(sp.working)))
                if len(arcs) > max_arcs:
                    raise GraphTooLarge(f"more than {max_arcs:,} arcs")
    terminals = {}
    for nid in at.get(n, []):
        gp = price_gather(pr, dict(nodes[nid][1]))
        terminals[nid] = Terminal(gp.seconds, gp.energy, tuple(gp.load))
    return StageGraph(instance, nodes, arcs, 0, terminals).index_arcs()


def _scores(objective: str, shared: bool, W, K, L, C, T, togo=None) -> tuple[np.ndarray, np.ndarray]:
    """Each label's rank (its objective so far; for the period, at least its loads spread with
    the least load still to come, ``togo``, over every device) and a tie-break (less is better
    for both)."""
    if objective == "memory":
        M = W + K
        return M.max(axis=1), M.sum(axis=1)
    if objective == "period":
        p = L.max(axis=1)
        if togo is not None:
            p = np.maximum(p, (L.sum(axis=1) + togo) / L.shape[1])
        return (np.maximum(p, T) if shared else p), L.sum(axis=1)
    return C, L.sum(axis=1)


def _load_to_go(sg: StageGraph, tail: np.ndarray, head: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Per node: the least summed load (compute and receive seconds over every device) of any
    path from it to a terminal, gather included (a backward pass over the boundaries)."""
    togo = np.full(sg.n_nodes, np.inf)
    for v, t in sg.terminals.items():
        togo[v] = sum(t.load)
    w = L.sum(axis=1)
    bnd = np.array([b for b, _ in sg.nodes])
    order = np.argsort(-bnd[tail], kind="stable")  # arcs by tail boundary, latest first
    tb = bnd[tail][order]
    for b in np.unique(tb)[::-1]:
        sel = order[tb == b]
        np.minimum.at(togo, tail[sel], w[sel] + togo[head[sel]])
    return togo


def beam_search(sg: StageGraph, width: int, deadline: Deadline = NEVER,
                objective: str = "memory") -> tuple[list[int], float] | None:
    """A good path of ``sg`` for ``objective`` (its arcs and value, the evaluator's value of its
    plan), or None when no path meets the memory caps.

    A label holds what a partial plan has accumulated: every device's weight bytes and largest
    working set (memory, caps), every device's load (period), its additive cost (latency or
    energy) and its summed transfer seconds (a shared medium's period). Labels are extended
    boundary by boundary; at each node the ``width`` distinct labels of least objective so far
    are kept (ties: least summed memory or load) and labels over a memory cap are dropped. For
    latency and energy without caps ``width=1`` is exact; otherwise a heuristic. Vectorised per
    boundary (numpy)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}")
    inst = sg.instance
    n_dev = len(inst.devices)
    n_arcs = len(sg.arcs)
    shared = inst.network.medium == "shared"
    W = np.array([a.weights for a in sg.arcs], dtype=float).reshape(n_arcs, n_dev)
    K = np.array([a.working for a in sg.arcs], dtype=float).reshape(n_arcs, n_dev)
    L = np.array([a.load for a in sg.arcs], dtype=float).reshape(n_arcs, n_dev)
    cost = (lambda a: a.energy) if objective == "energy" else (lambda a: a.tau)
    C = np.fromiter((cost(a) for a in sg.arcs), dtype=float, count=n_arcs)
    T = np.fromiter((a.transfer_s for a in sg.arcs), dtype=float, count=n_arcs)
    caps = np.array([d.memory_bytes if (inst.constraints.memory and d.memory_bytes is not None) else math.inf
                     for d in inst.devices], dtype=float)
    tail = np.fromiter((a.tail for a in sg.arcs), dtype=np.int64, count=n_arcs)
    head = np.fromiter((a.head for a in sg.arcs), dtype=np.int64, count=n_arcs)
    bnd = np.fromiter((b for b, _ in sg.nodes), dtype=np.int64, count=sg.n_nodes)
    by_tail = np.argsort(tail, kind="stable")  # out arcs of node v: by_tail[start[v]:start[v + 1]]
    start = np.searchsorted(tail[by_tail], np.arange(sg.n_nodes + 1))
    is_term = np.zeros(sg.n_nodes, dtype=bool)
    is_term[list(sg.terminals)] = True
    togo = _load_to_go(sg, tail, head, L) if objective == "period" else None
    parent: list[np.ndarray] = []  # per label: the label it extends and its arc (-1: the source's label)
    via: list[np.ndarray] = []
    n_labels = 0
    zeros = np.zeros((1, n_dev))
    # candidates waiting per boundary: (node, W, K, L, C, T, parent label, arc)
    pool: dict[int, list] = {int(bnd[sg.source]): [(np.array([sg.source]), zeros, zeros, zeros, np.zeros(1),
                                                     np.zeros(1), np.full(1, -1), np.full(1, -1))]}
    best = (math.inf, -1)
    while pool:
        b = min(pool)
        deadline.check("the time limit ran out in the beam search")
        node, Wl, Kl, Ll, Cl, Tl, src, arc = (np.concatenate(x) for x in zip(*pool.pop(b)))
        score, tie = _scores(objective, shared, Wl, Kl, Ll, Cl, Tl, None if togo is None else togo[node])
        order = np.lexsort((tie, score, node))
        node, Wl, Kl, Ll, Cl, Tl, src, arc = (x[order] for x in (node, Wl, Kl, Ll, Cl, Tl, src, arc))
        # drop a label equal to the one before it at its node, then keep the first ``width`` per node
        same = np.zeros(len(node), dtype=bool)
        same[1:] = ((node[1:] == node[:-1]) & (Wl[1:] == Wl[:-1]).all(axis=1) & (Kl[1:] == Kl[:-1]).all(axis=1)
                    & (Ll[1:] == Ll[:-1]).all(axis=1) & (Cl[1:] == Cl[:-1]) & (Tl[1:] == Tl[:-1]))
        node, Wl, Kl, Ll, Cl, Tl, src, arc = (x[~same] for x in (node, Wl, Kl, Ll, Cl, Tl, src, arc))
        first = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
        rank = np.arange(len(node)) - np.repeat(first, np.diff(np.r_[first, len(node)]))
        keep = rank < width
        node, Wl, Kl, Ll, Cl, Tl, src, arc = (x[keep] for x in (node, Wl, Kl, Ll, Cl, Tl, src, arc))
        ids = np.arange(n_labels, n_labels + len(node))
        parent.append(src)
        via.append(arc)
        n_labels += len(node)
        term = np.flatnonzero(is_term[node])
        if len(term):
            tl = [sg.terminals[int(v)] for v in node[term]]
            gather_s = np.array([t.gather_s for t in tl])
            add = gather_s if objective != "energy" else np.array([t.energy for t in tl])
            final, _ = _scores(objective, shared, Wl[term], Kl[term], Ll[term] + np.array([t.load for t in tl]),
                               Cl[term] + add, Tl[term] + gather_s)
            i = int(np.argmin(final))
            if final[i] < best[0]:
                best = (float(final[i]), int(ids[term[i]]))
        deg = start[node + 1] - start[node]
        if not deg.sum():
            continue
        rep = np.repeat(np.arange(len(node)), deg)
        offs = np.arange(len(rep)) - np.repeat(np.cumsum(deg) - deg, deg)
        A = by_tail[start[node][rep] + offs]
        W2 = Wl[rep] + W[A]
        K2 = np.maximum(Kl[rep], K[A])
        ok = ((W2 + K2) <= caps).all(axis=1)
        A, W2, K2, lab = A[ok], W2[ok], K2[ok], ids[rep[ok]]
        L2, C2, T2 = Ll[rep[ok]] + L[A], Cl[rep[ok]] + C[A], Tl[rep[ok]] + T[A]
        hb = bnd[head[A]]
        for t in np.unique(hb).tolist():
            m = hb == t
            pool.setdefault(t, []).append((head[A[m]], W2[m], K2[m], L2[m], C2[m], T2[m], lab[m], A[m]))
    if best[1] < 0:
        return None
    parent_a, via_a = np.concatenate(parent), np.concatenate(via)
    path, g = [], best[1]
    while g >= 0:
        if via_a[g] >= 0:
            path.append(int(via_a[g]))
        g = int(parent_a[g])
    return path[::-1], best[0]


def search_spaces(instance: Instance, objective: str, spaces: Iterable[Space], *, widths: Sequence[int],
                  upper: float = math.inf, deadline: Deadline = NEVER, exact: bool = False,
                  who: str = "restricted search") -> Best:
    """Each space in turn, until ``deadline``: its graph (``restricted_graph``; a space too large
    or past the deadline ends the loop), the best path of beam searches of each width and, with
    ``exact`` for the period or memory, of the exact label search (``minmax_search``) below the
    best known. A path's plan is scored by the evaluator and kept only when it is in the space,
    within the caps and better than ``upper`` and every plan before it; a value the evaluator does
    not reproduce is a pricing bug and raises. A heuristic unless one space holds the optimum."""
    started = time.perf_counter()
    best = Best()
    for space in spaces:
        if deadline.passed():
            break
        t0 = time.perf_counter()
        row = space.row
        best.tried.append(row)
        try:
            sg = restricted_graph(instance, space.options_of, deadline)
        except (TimeoutError, GraphTooLarge) as err:
            row.update(outcome=f"not built: {err}", seconds=round(time.perf_counter() - t0, 3))
            break
        row["arcs"] = len(sg.arcs)
        found = None
        for width in widths:
            try:
                got = beam_search(sg, width, deadline, objective)
            except TimeoutError:
                break
            if got is not None and (found is None or got[1] < found[1]):
                found = got
        if exact and objective in MINMAX and not deadline.passed():
            labelled = minmax_search(sg, objective, deadline=deadline,
                                     upper=min(upper, best.value, found[1] if found is not None else math.inf))
            row["exact"] = "optimal" if labelled.optimal or labelled.none_within else "stopped"
            if labelled.arcs and (found is None or labelled.value < found[1]):
                found = (labelled.arcs, labelled.value)
        row["seconds"] = round(time.perf_counter() - t0, 3)
        if found is None:
            row["outcome"] = "no plan within the caps"
            continue
        plan = sg.plan_from_arcs(found[0])
        m = evaluate(plan, instance)
        value = m.value(objective)
        if abs(value - found[1]) > 1e-9 * max(1.0, abs(value)):
            raise RuntimeError(f"{who}: the graph's {objective} {found[1]!r} disagrees with the evaluator's "
                               f"{value!r} (a pricing bug; please report it)")
        row["value"] = value
        if m.in_space and m.feasible and value < min(upper, best.value) * (1 - BETTER):
            best.plan, best.value, best.source = plan, value, space.label
            row["outcome"] = "better"
        else:
            row["outcome"] = "nothing better"
    best.seconds = time.perf_counter() - started
    return best

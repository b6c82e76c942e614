"""Good plans for the memory objective, fast: beam searches over small restricted stage graphs.

The memory of a plan is the largest, over the devices, of the weights of every layer a device
computes any part of plus its largest working set (docs/model.md section 4). Two things make
the general search (``formulations.rounds`` + ``formulations.minmax``) slow on it: the rounds
enumerate with the mean weights per device as their floor, which prunes almost nothing, and
the optimum is massively degenerate (only a few large layers and the largest working sets
decide it), so the label search keeps a dense front of weight sums.

Memory does not depend on the devices' speeds, power or links, so plans that balance the
weights and keep the working sets small do not need the many device orders and cut vectors of
the space. This module searches restricted plan spaces, each a **stage graph of its own**
(``restricted_graph``: every stage one layer, a few layouts per layer, every arc priced by the
evaluator's ``price_stage`` from its tail's ownership state), with **beam searches**
(``beam_search``: per node the few labels of least memory so far; a label holds each device's
weights and largest working set):

- ``uniform``: each layer whole on any one device, or split along each allowed axis over the
  most parts the space allows, at the most balanced cut vector of the space, devices in
  index order;
- ``rotations``: the same with every rotation of the device order, and every cyclic window of
  2 .. ``max_parts`` - 1 consecutive devices at the most balanced cut vector of that many parts
  (so a layer's parts can go to the devices that hold the least).

Every layout comes from the instance's own split families (``formulations.options``), so every
plan found is a plan of the space; ``memory_plans`` still scores it with the evaluator and keeps
it only when it is in the space, within the caps, and the evaluator's memory equals the graph's.
The searches prove nothing about the whole space: they give the exact planners a better
incumbent (``planners.exact``, ``ExactPlanner.memory_start``); the bound stays the ``weights``
floor (``milp_planner.cost.floors``) or what the rounds prove.

>>> from formulations.memory_search import memory_plans   # doctest: +SKIP
>>> found = memory_plans(instance, deadline=time.perf_counter() + 2)   # doctest: +SKIP
>>> found.plan, found.value, found.source   # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from formulations.options import StageOption
from formulations.stagegraph import Arc, StageGraph, Terminal, _state_key
from milp_planner.cost.evaluator import evaluate, initial_owners, price_gather, price_stage, pricer
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.space.cuts import _valid, cut_vectors, equal_cuts, ranges_from_cuts, stage_extent
from milp_planner.space.plan import Plan

#: the restricted spaces tried, in order (each larger than the one before)
FAMILIES = ("uniform", "rotations")
MAX_ARCS = 200_000  # a restricted graph larger than this is not built
BEAMS = (1, 4, 16, 64)  # labels kept per node by the beam searches (a wider beam is not always better)


@dataclass
class MemoryPlan:
    """The best plan the restricted searches found (``plan`` None: none within the caps),
    its evaluator's memory (``value``, bytes), the family that gave it and what each tried."""

    plan: Plan | None = None
    value: float = math.inf
    source: str = ""
    tried: list[dict] = field(default_factory=list)
    seconds: float = 0.0


class GraphTooLarge(RuntimeError):
    """A restricted graph would exceed ``MAX_ARCS`` arcs."""


def _balanced_cuts(instance: Instance, n: int, k: int, deadline: float | None) -> tuple | None:
    """The cut vector of least largest part among those of the space for ``k`` parts of ``n``
    (equal cuts when the space has them), or None when the space has none (or too many to list)."""
    if "equal" in instance.search.splits:
        cuts = equal_cuts(n, k)
        return cuts if k <= n and _valid(cuts, n) else None
    try:
        vectors = cut_vectors(instance, n, k, deadline)
    except PlannerError:  # too many vectors to list: not this part count
        return None
    if not vectors:
        return None
    return min(vectors, key=lambda c: (max(b - a for a, b in ranges_from_cuts(c, n)), c))


def family_options(instance: Instance, family: str, deadline: float | None = None) -> Callable[[int], list[StageOption]]:
    """The stage options of ``family`` for the one-layer stage of layer l (a function of l).

    Every option's layout is one of the space (split families, ``max_parts``, ``axes``:
    docs/model.md section 5). Raises ``TimeoutError`` past ``deadline``."""
    if family not in FAMILIES:
        raise ValueError(f"unknown memory search family {family!r}")
    n_dev = len(instance.devices)
    sp = instance.search
    kmax = min(sp.max_parts, n_dev)

    def options(lid: int) -> list[StageOption]:
        layer = instance.graph.layers[lid]
        out = [StageOption(lid, lid, "none", (None,), (d,)) for d in range(n_dev)]
        axes = [ax for ax, ok in (("rows", layer.row_splittable), ("channels", layer.channel_splittable))
                if ok and ax in sp.axes]
        for axis in axes:
            n = stage_extent(instance, lid, axis)
            layouts = {}
            for k in range(2, kmax + 1):
                cuts = _balanced_cuts(instance, n, k, deadline)
                if cuts is not None:
                    layouts[k] = tuple(ranges_from_cuts(cuts, n))
            if not layouts:
                continue
            most = max(layouts)
            for k, ranges in sorted(layouts.items()):
                if family == "uniform" and k != most:
                    continue
                shifts = range(n_dev) if family == "rotations" else (0,)
                orders = {tuple((s + i) % n_dev for i in range(k)) for s in shifts}
                out.extend(StageOption(lid, lid, axis, ranges, order) for order in sorted(orders))
        return out

    return options


def restricted_graph(instance: Instance, options_of: Callable[[int], Iterable[StageOption]],
                     deadline: float | None = None, max_arcs: int = MAX_ARCS) -> StageGraph:
    """The stage graph of the plans whose stages are each one layer and one of ``options_of(l)``.

    Nodes are (boundary, ownership state) as in ``formulations.stagegraph``; every arc is priced
    by the evaluator's ``price_stage`` from its tail's state, every terminal by ``price_gather``,
    so a path's memory is the evaluator's memory of its plan. Raises ``TimeoutError`` past
    ``deadline`` and ``GraphTooLarge`` beyond ``max_arcs`` arcs."""
    pr = pricer(instance)
    g = instance.graph
    n = len(g.layers)
    init = _state_key(initial_owners(pr))
    node_id: dict[tuple, int] = {(0, init): 0}
    nodes: list[tuple[int, tuple]] = [(0, init)]
    arcs: list[Arc] = []
    frontier = [0]
    for b in range(n):
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeoutError("the time limit ran out while building a restricted memory graph")
        opts = list(options_of(b))
        geos = [pr.geometry.parts(o.first, o.last, o.axis, list(o.ranges)) for o in opts]
        nxt: list[int] = []
        for nid in frontier:
            if deadline is not None and time.perf_counter() > deadline:
                raise TimeoutError("the time limit ran out while building a restricted memory graph")
            owners = dict(nodes[nid][1])
            for i, (opt, geo) in enumerate(zip(opts, geos)):
                if i % 256 == 255 and deadline is not None and time.perf_counter() > deadline:
                    raise TimeoutError("the time limit ran out while building a restricted memory graph")
                sp = price_stage(pr, owners, opt.last, opt.devices, geo)
                key = (b + 1, _state_key(sp.owners))
                head = node_id.get(key)
                if head is None:
                    head = node_id[key] = len(nodes)
                    nodes.append(key)
                    nxt.append(head)
                arcs.append(Arc(nid, head, opt, sp.tau, sp.energy, tuple(sp.load), sp.transfer_s,
                                tuple(sp.weights), tuple(sp.working)))
                if len(arcs) > max_arcs:
                    raise GraphTooLarge(f"more than {max_arcs:,} arcs")
        frontier = nxt
    terminals = {}
    for nid in frontier:
        gp = price_gather(pr, dict(nodes[nid][1]))
        terminals[nid] = Terminal(gp.seconds, gp.energy, tuple(gp.load))
    sg = StageGraph(instance, nodes, arcs, 0, terminals)
    sg.objective = "memory"
    sg.out_arcs = [[] for _ in nodes]
    sg.in_arcs = [[] for _ in nodes]
    for i, a in enumerate(arcs):
        sg.out_arcs[a.tail].append(i)
        sg.in_arcs[a.head].append(i)
    return sg


def beam_search(sg: StageGraph, width: int, deadline: float | None = None) -> tuple[list[int], float] | None:
    """A memory plan of ``sg`` (its arcs and value), or None when no path meets the caps:
    labels (each device's weights and largest working set so far) extended boundary by
    boundary, keeping at each node the ``width`` distinct labels of least memory so far (ties:
    least summed memory), labels over a memory cap dropped. A heuristic: it proves nothing.
    Vectorised per boundary (numpy)."""
    inst = sg.instance
    n_dev = len(inst.devices)
    n_arcs = len(sg.arcs)
    W = np.array([a.weights for a in sg.arcs], dtype=float).reshape(n_arcs, n_dev)
    K = np.array([a.working for a in sg.arcs], dtype=float).reshape(n_arcs, n_dev)
    caps = np.array([d.memory_bytes if (inst.constraints.memory and d.memory_bytes is not None) else math.inf
                     for d in inst.devices], dtype=float)
    tail = np.fromiter((a.tail for a in sg.arcs), dtype=np.int64, count=n_arcs)
    head = np.fromiter((a.head for a in sg.arcs), dtype=np.int64, count=n_arcs)
    bnd = np.fromiter((b for b, _ in sg.nodes), dtype=np.int64, count=sg.n_nodes)
    by_tail = np.argsort(tail, kind="stable")  # out arcs of node v: by_tail[start[v]:start[v + 1]]
    start = np.searchsorted(tail[by_tail], np.arange(sg.n_nodes + 1))
    is_term = np.zeros(sg.n_nodes, dtype=bool)
    is_term[list(sg.terminals)] = True
    parent: list[np.ndarray] = []  # per label: the label it extends and its arc (-1: the source's label)
    via: list[np.ndarray] = []
    n_labels = 0
    # candidates waiting per boundary: (node, W, K, parent label, arc)
    pool: dict[int, list] = {int(bnd[sg.source]): [(np.array([sg.source]), np.zeros((1, n_dev)),
                                                     np.zeros((1, n_dev)), np.full(1, -1), np.full(1, -1))]}
    best = (math.inf, -1)
    while pool:
        b = min(pool)
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeoutError("the time limit ran out in the memory beam search")
        node, Wl, Kl, src, arc = (np.concatenate(x) for x in zip(*pool.pop(b)))
        mem = (Wl + Kl).max(axis=1)
        total = (Wl + Kl).sum(axis=1)
        order = np.lexsort((total, mem, node))
        node, Wl, Kl, src, arc, mem = node[order], Wl[order], Kl[order], src[order], arc[order], mem[order]
        # drop a label equal to the one before it at its node, then keep the first ``width`` per node
        same = np.zeros(len(node), dtype=bool)
        same[1:] = (node[1:] == node[:-1]) & (Wl[1:] == Wl[:-1]).all(axis=1) & (Kl[1:] == Kl[:-1]).all(axis=1)
        keep = ~same
        node, Wl, Kl, src, arc, mem = node[keep], Wl[keep], Kl[keep], src[keep], arc[keep], mem[keep]
        first = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
        rank = np.arange(len(node)) - np.repeat(first, np.diff(np.r_[first, len(node)]))
        keep = rank < width
        node, Wl, Kl, src, arc, mem = node[keep], Wl[keep], Kl[keep], src[keep], arc[keep], mem[keep]
        ids = np.arange(n_labels, n_labels + len(node))
        parent.append(src)
        via.append(arc)
        n_labels += len(node)
        term = is_term[node]
        if term.any():
            i = int(np.argmin(np.where(term, mem, np.inf)))
            if mem[i] < best[0]:
                best = (float(mem[i]), int(ids[i]))
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
        hb = bnd[head[A]]
        for t in np.unique(hb).tolist():
            m = hb == t
            pool.setdefault(t, []).append((head[A[m]], W2[m], K2[m], lab[m], A[m]))
    if best[1] < 0:
        return None
    parent_a, via_a = np.concatenate(parent), np.concatenate(via)
    path, g = [], best[1]
    while g >= 0:
        if via_a[g] >= 0:
            path.append(int(via_a[g]))
        g = int(parent_a[g])
    return path[::-1], best[0]


def memory_plans(instance: Instance, deadline: float | None = None, upper: float = math.inf,
                 families: Iterable[str] = FAMILIES, widths: Iterable[int] = BEAMS) -> MemoryPlan:
    """The best plan for the memory objective that beam searches (``beam_search``, each width
    of ``widths``) over the restricted graphs of ``families`` find within ``deadline`` (see the
    module). A heuristic: it proves nothing.

    ``upper``: the memory of a plan already known; only better plans are returned. A plan is
    kept only when the evaluator finds it in the space, within the caps and below ``upper``,
    with the memory the graph gave it (a disagreement is a pricing bug and raises)."""
    started = time.perf_counter()
    best = MemoryPlan()
    for family in families:
        if deadline is not None and time.perf_counter() >= deadline:
            break
        t0 = time.perf_counter()
        row: dict = {"family": family}
        best.tried.append(row)
        try:
            sg = restricted_graph(instance, family_options(instance, family, deadline), deadline)
        except (TimeoutError, GraphTooLarge) as err:
            row.update(outcome=f"not built: {err}", seconds=round(time.perf_counter() - t0, 3))
            break
        row["arcs"] = len(sg.arcs)
        found = None
        for width in widths:
            try:
                got = beam_search(sg, width, deadline)
            except TimeoutError:
                break
            if got is not None and (found is None or got[1] < found[1]):
                found = got
        row["seconds"] = round(time.perf_counter() - t0, 3)
        if found is None:
            row["outcome"] = "no plan within the caps"
            continue
        plan = sg.plan_from_arcs(found[0])
        m = evaluate(plan, instance)
        value = m.value("memory")
        if abs(value - found[1]) > 1e-9 * max(1.0, value):
            raise RuntimeError(f"memory search: the graph's value {found[1]!r} disagrees with the evaluator's "
                               f"{value!r} (a pricing bug; please report it)")
        row["value"] = value
        if m.in_space and m.feasible and value < min(upper, best.value) * (1 - 1e-12):
            best.plan, best.value, best.source = plan, value, family
            row["outcome"] = "better"
        else:
            row["outcome"] = "nothing better"
    best.seconds = time.perf_counter() - started
    return best

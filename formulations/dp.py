"""Dynamic program over the stage graph: shortest paths for additive objectives.

``shortest_path(sg, "latency")`` returns the optimal arc list and its value. It is exact for
latency and energy when no memory, latency or energy cap binds; with caps its value is still a
valid lower bound (the caps only remove paths). ``prefix_suffix`` gives, for every arc, the
best cost of a full path through it, which the MILP and CP-SAT builders use to drop arcs that
cannot beat a known plan. ``capped_shortest_path`` is the exact search with memory caps
(a resource-constrained shortest path), within a label budget.

>>> from formulations import build_stage_graph, shortest_path    # doctest: +SKIP
>>> sg = build_stage_graph(instance)                            # doctest: +SKIP
>>> arcs, value = shortest_path(sg, "latency")                  # doctest: +SKIP
>>> plan = sg.plan_from_arcs(arcs)                               # doctest: +SKIP
"""

from __future__ import annotations

import math

from .stagegraph import StageGraph

ADDITIVE = ("latency", "energy")


def arc_cost(sg: StageGraph, objective: str) -> list[float]:
    if objective == "latency":
        return [a.tau for a in sg.arcs]
    if objective == "energy":
        return [a.energy for a in sg.arcs]
    raise ValueError(f"objective {objective!r} is not additive over stages")


def terminal_cost(sg: StageGraph, objective: str) -> dict[int, float]:
    if objective == "latency":
        return {n: t.gather_s for n, t in sg.terminals.items()}
    return {n: t.energy for n, t in sg.terminals.items()}


def _order(sg: StageGraph) -> list[int]:
    return sorted(range(sg.n_nodes), key=lambda i: sg.nodes[i][0])


def prefix_suffix(sg: StageGraph, cost: list[float], term: dict[int, float]):
    """(best cost source -> node, best cost node -> end incl. gather) for every node."""
    order = _order(sg)
    pre = [math.inf] * sg.n_nodes
    pre[sg.source] = 0.0
    for v in order:
        pv = pre[v]
        if pv == math.inf:
            continue
        for a in sg.out_arcs[v]:
            h = sg.arcs[a].head
            c = pv + cost[a]
            if c < pre[h]:
                pre[h] = c
    suf = [math.inf] * sg.n_nodes
    for n, c in term.items():
        suf[n] = c
    for v in reversed(order):
        best = suf[v]
        for a in sg.out_arcs[v]:
            c = cost[a] + suf[sg.arcs[a].head]
            if c < best:
                best = c
        suf[v] = best
    return pre, suf


def shortest_path(sg: StageGraph, objective: str, cost: list[float] | None = None,
                  term: dict[int, float] | None = None) -> tuple[list[int], float]:
    """Optimal arcs (in stage order) for an additive ``objective``, and the path's value."""
    cost = cost if cost is not None else arc_cost(sg, objective)
    term = term if term is not None else terminal_cost(sg, objective)
    order = _order(sg)
    best = [math.inf] * sg.n_nodes
    back = [-1] * sg.n_nodes
    best[sg.source] = 0.0
    for v in order:
        bv = best[v]
        if bv == math.inf:
            continue
        for a in sg.out_arcs[v]:
            h = sg.arcs[a].head
            c = bv + cost[a]
            if c < best[h]:
                best[h], back[h] = c, a
    end = min(term, key=lambda n: best[n] + term[n])
    value = best[end] + term[end]
    if not math.isfinite(value):
        raise ValueError("no plan of the space avoids the excluded stage options")
    path = []
    v = end
    while v != sg.source:
        a = back[v]
        path.append(a)
        v = sg.arcs[a].tail
    return path[::-1], value


class LabelLimit(RuntimeError):
    """The constrained search kept more labels than allowed (or ran out of time)."""


def capped_shortest_path(sg: StageGraph, objective: str, caps: list[int | None], upper: float = math.inf,
                         max_labels: int = 200_000, deadline: float | None = None):
    """The best path whose memory fits ``caps`` (per device: the weights of all its stages plus
    its largest working set, as the evaluator counts it) among those no worse than ``upper``:
    (arcs, value), or None when there is none. Exact: a resource-constrained shortest path
    whose labels carry each capped device's weights and largest working set, pruned by the
    uncapped best completion and by dominance (no worse in cost, weights and working sets).

    Raises ``LabelLimit`` past ``max_labels`` labels or ``deadline`` (``time.perf_counter()``).
    """
    import time

    cost = arc_cost(sg, objective)
    term = terminal_cost(sg, objective)
    _, suf = prefix_suffix(sg, cost, term)
    devs = [d for d, c in enumerate(caps) if c is not None]
    cap = [caps[d] for d in devs]
    k = len(devs)
    slack = upper * (1 + 1e-9) + 1e-12 if math.isfinite(upper) else math.inf
    # a label: (cost, weights per capped device, largest working set per capped device, parent, arc)
    labels: list[list | None] = [[] for _ in range(sg.n_nodes)]
    labels[sg.source].append((0.0, (0,) * k, (0,) * k, None, -1))
    kept, best = 1, None
    for v in _order(sg):
        here = labels[v]
        labels[v] = None
        if not here:
            continue
        if v in sg.terminals:
            for lab in here:
                val = lab[0] + term[v]
                if val <= slack and (best is None or val < best[0]):
                    best = (val, lab)
        for a in sg.out_arcs[v]:
            arc = sg.arcs[a]
            h = arc.head
            reach = cost[a] + suf[h]
            if not math.isfinite(reach):
                continue
            aw = [arc.weights[d] for d in devs]
            ak = [arc.working[d] for d in devs]
            out = labels[h]
            for lab in here:
                c = lab[0] + cost[a]
                if lab[0] + reach > slack:
                    continue
                w = tuple(x + y for x, y in zip(lab[1], aw))
                m = tuple(x if x >= y else y for x, y in zip(lab[2], ak))
                if any(wi + mi > ci for wi, mi, ci in zip(w, m, cap)):
                    continue
                if any(o[0] <= c and all(p <= q for p, q in zip(o[1], w)) and all(p <= q for p, q in zip(o[2], m))
                       for o in out):
                    continue
                out[:] = [o for o in out if not (c <= o[0] and all(p <= q for p, q in zip(w, o[1]))
                                                 and all(p <= q for p, q in zip(m, o[2])))]
                out.append((c, w, m, lab, a))
                kept += 1
                if kept > max_labels:
                    raise LabelLimit(f"more than {max_labels} labels")
            if deadline is not None and time.perf_counter() > deadline:
                raise LabelLimit("the time limit ran out")
    if best is None:
        return None
    path, lab = [], best[1]
    while lab[3] is not None:
        path.append(lab[4])
        lab = lab[3]
    return path[::-1], best[0]

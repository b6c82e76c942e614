"""Dynamic program over the stage graph: shortest paths for additive objectives.

``shortest_path(sg, "latency")`` returns the optimal arc list and its value. It is exact for
latency and energy when no memory, latency or energy cap binds; with caps its value is still a
valid lower bound (the caps only remove paths). ``prefix_suffix`` gives, for every arc, the
best cost of a full path through it, which the MILP and CP-SAT builders use to drop arcs that
cannot beat a known plan. The exact search with memory caps is ``formulations.caps``.

>>> from formulations import build_stage_graph, shortest_path    # doctest: +SKIP
>>> sg = build_stage_graph(instance)                            # doctest: +SKIP
>>> arcs, value = shortest_path(sg, "latency")                  # doctest: +SKIP
>>> plan = sg.plan_from_arcs(arcs)                               # doctest: +SKIP
"""

from __future__ import annotations

import math

from formulations.stagegraph import StageGraph

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

"""Arcs the latency and energy caps rule out, for the MILP and CP-SAT models.

With a cap on an additive objective (``constraints.latency_s`` / ``energy_j``), an arc whose
cheapest path through it (DP prefix + arc + suffix with the gather, over the model's arcs)
already exceeds the cap lies on no plan that meets it. Fixing such arcs to 0 is exact (the
evaluator's slack, 1e-9 relative, is kept). It matters most for the lexicographic steps of a
Pareto front (``formulations.pareto``: minimise f2 subject to f1 <= f1*), where the cap is the
optimum of f1 and few arcs survive.
"""

from __future__ import annotations

import math

from formulations.dp import arc_cost, prefix_suffix, terminal_cost
from formulations.stagegraph import StageGraph
from milp_planner.cost.evaluator import cap_limit


def arcs_over_caps(sg: StageGraph, arc_ids: list[int]) -> set[int]:
    """The arcs of ``arc_ids`` on no path that meets the instance's latency and energy caps.

    Empty when the arcs left would not start a path or cover every layer (no plan meets the
    caps): the model is then left whole, to prove that itself."""
    c = sg.instance.constraints
    caps = [(obj, float(cap)) for obj, cap in (("latency", c.latency_s), ("energy", c.energy_j)) if cap is not None]
    out: set[int] = set()
    if not caps:
        return out
    keep = set(arc_ids)
    for obj, cap in caps:
        cost = [v if a in keep else math.inf for a, v in enumerate(arc_cost(sg, obj))]
        pre, suf = prefix_suffix(sg, cost, terminal_cost(sg, obj))
        slack = cap_limit(cap)
        for a in arc_ids:
            arc = sg.arcs[a]
            if pre[arc.tail] + cost[a] + suf[arc.head] > slack:
                out.add(a)
    covered = [False] * len(sg.instance.graph.layers)
    for a in arc_ids:
        if a not in out:
            o = sg.arcs[a].option
            covered[o.first:o.last + 1] = [True] * (o.last + 1 - o.first)
    if not all(covered) or not any(a not in out for a in sg.out_arcs[sg.source] if a in keep):
        return set()  # the caps leave nothing (or, together, a layer uncovered): let the model prove it
    return out

"""The DP warm start of the exact solvers, and the arc fixing it allows.

``dp_warm_start`` gives a plan to start the solvers from, with the DP's lower bound; with
binding memory caps it runs the Lagrangian bounds and the capped label search of
``formulations.caps``; for period and memory it is the exact min-max search of
``formulations.minmax``. ``pruned_arcs`` keeps the arcs that can still be part of a plan no worse
than a cutoff (exact reduced-cost fixing); ``cutoff`` says which value a round's solver needs
to look below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from formulations.caps import Fixing, LabelLimit, PathArrays, additive_caps, capped_shortest_path, lagrangian_fixing
from formulations.tolerance import loose
from formulations.dp import ADDITIVE, arc_cost, prefix_suffix, shortest_path, terminal_cost
from formulations.minmax import MINMAX, minmax_search
from formulations.stagegraph import StageGraph

from milp_planner.cost.evaluator import cap_limit, evaluate_stages


@dataclass(frozen=True)
class CapsSupport:
    """The arcs every plan within the memory caps and no worse than ``bound`` uses (a mask
    over ``sg.arcs``), from the capped label search."""

    bound: float
    arcs: np.ndarray


@dataclass(frozen=True)
class WarmStart:
    """The DP's plan for one stage graph and what it proves.

    ``value``: the plan's objective; ``bound``: the DP's lower bound (None: not a bound, for
    period and memory); ``feasible``: the plan meets the caps. ``capped_exact``: the plan is
    the best within the memory caps no worse than the round's bound, or there is none
    (``arcs`` empty, or a plan within the caps above the bound). ``fixing``: the Lagrangian
    bounds of the memory caps on every arc, when the caps bind; ``support``: the arcs the
    capped plans within a bound use.
    """

    arcs: list[int]
    value: float
    bound: float | None
    feasible: bool
    capped_exact: bool = False
    fixing: Fixing | None = None
    support: CapsSupport | None = None

    @property
    def empty(self) -> bool:
        """No plan at all within the round's bound, caps aside."""
        return self.bound is None and not self.arcs

    @property
    def incumbent(self) -> float | None:
        """The plan's value when it meets the caps (a solver's starting incumbent), else None."""
        return self.value if self.feasible else None


def memory_caps(sg: StageGraph) -> list[int | None]:
    """Each device's memory cap in bytes, None where there is none (or caps are off)."""
    inst = sg.instance
    return [dev.memory_bytes if inst.constraints.memory else None for dev in inst.devices]


def dp_warm_start(sg: StageGraph, objective: str, deadline: Deadline = NEVER, prior: Fixing | None = None,
                  *, capped_search: bool = True, max_labels: int = 2_000_000,
                  lagrange_rounds: int = 12) -> WarmStart:
    """A plan to start the solvers from, and the DP's bound.

    The DP runs without the caps, except that arcs which alone overflow a device's memory
    are dropped (no feasible plan contains them), so its value bounds additive objectives.
    When its plan still breaks a memory cap, the duals of the path-flow LP bound every arc
    and every partial plan within the caps (``formulations.caps``), and a
    resource-constrained shortest path pruned by them finds the best plan within the caps
    among those no worse than the round's bound (``capped_exact``: that plan, or none, is
    exact). The same search carries the latency, energy and period caps
    (``constraints.latency_s`` / ``energy_j`` / ``period_s``, as in a Pareto front's ε-steps) as
    summed resources, with or without memory caps. Past its label budget (``max_labels``)
    or the deadline, ``lagrange_rounds`` Lagrangian rounds price the overflowing devices'
    memory into the arc costs instead.
    ``prior``: an earlier round's ``fixing``, whose multipliers shrink this round's LP.
    Period and memory: ``minmax_warm_start``.
    """
    if objective in MINMAX:
        return minmax_warm_start(sg, objective, deadline, max_labels=max_labels)
    inst = sg.instance
    dp_obj = objective if objective in ADDITIVE else "latency"
    base = arc_cost(sg, dp_obj)
    caps = memory_caps(sg)
    cost = [math.inf if overflows(arc, caps) else c for arc, c in zip(sg.arcs, base)]
    term = terminal_cost(sg, dp_obj)
    try:
        arcs, dp_value = shortest_path(sg, dp_obj, cost=cost, term=term)
    except (KeyError, ValueError):
        return WarmStart([], math.inf, None, False)
    if not math.isfinite(dp_value):
        return WarmStart([], math.inf, None, False)
    bound = dp_value if objective in ADDITIVE else None
    metrics = evaluate_stages(plan_stages(sg, arcs), inst)
    best = (arcs, metrics) if metrics.feasible else None
    # the label search carries memory caps and latency / energy / period caps
    additive = additive_caps(inst)
    fixing = None
    if best is None and objective in ADDITIVE and capped_search:
        partial = sg.upper is not None and math.isfinite(sg.outside)
        upper = sg.upper if partial else math.inf
        arrays = PathArrays(sg)  # shared by the LP's bounds and every search below
        lo = bound
        # the LP's multipliers only speed up the search; they pay when the DP's plan breaks a
        # memory cap (under a period or energy cap alone they took 20 s a round on VGG-19)
        if any(c is not None and metrics.memory_bytes[dev.name] > c for dev, c in zip(inst.devices, caps)):
            fixing = lagrangian_fixing(sg, objective, caps, arrays=arrays, prior=prior, upper=upper,
                                       deadline=deadline)
            bound = lo = max(bound, fixing.bound)
        # the Lagrangian's plan meets the memory caps; the latency and energy caps are not its
        lagrangian = None if fixing is None or additive else fixing.incumbent
        if lagrangian is not None:
            upper = min(upper, lagrangian[1])
        # at most a third of the time left: the solvers need the rest if it gives up
        until = deadline.share(1 / 3)
        found = None
        if lo <= loose(upper):
            # deepening: a search within a smaller bound keeps far fewer labels, and finds
            # the optimum whenever it lies there; each empty search proves its bound
            steps = [lo + (upper - lo) / 4, upper] if math.isfinite(upper) else [upper]
            for step in steps:
                try:
                    found = capped_shortest_path(sg, objective, caps, upper=step, deadline=until, fixing=fixing,
                                                 arrays=arrays, max_labels=max_labels, additive=additive)
                except LabelLimit:
                    found = False
                    break
                if found.arcs:
                    upper = step  # the support holds for this bound
                    break
                bound = max(bound, step)  # no plan of the graph within the caps up to here
        if found is None or (found and not found.arcs):  # nothing within the caps and the bound
            if lagrangian is None:
                return WarmStart([], math.inf, bound, False, capped_exact=True, fixing=fixing)
            # the Lagrangian's plan meets the caps above the bound: the next round's
            return WarmStart(lagrangian[0], lagrangian[1], bound, True, capped_exact=True, fixing=fixing)
        if found:
            if evaluate_stages(plan_stages(sg, found.arcs), inst).feasible:
                return WarmStart(found.arcs, found.value, bound, True, capped_exact=True, fixing=fixing,
                                 support=CapsSupport(upper, found.support))
            # (a sum within a cap's 1e-9 slack that the evaluator, summing in another order,
            # finds just over it: not exact, the solvers decide)
        if lagrangian is not None:
            best = (lagrangian[0], evaluate_stages(plan_stages(sg, lagrangian[0]), inst))
    if best is None:  # (the DP's plan breaks a memory cap)
        arcs, metrics = _memory_priced(sg, dp_obj, cost, term, caps, arcs, metrics, max(dp_value, 1e-12),
                                       lagrange_rounds)
        if not metrics.feasible:
            return WarmStart(arcs, metrics.value(objective), bound, False, fixing=fixing)
        best = (arcs, metrics)
    return WarmStart(best[0], best[1].value(objective), bound, True, fixing=fixing)


def _memory_priced(sg: StageGraph, dp_obj: str, cost: list, term, caps: list, arcs: list, metrics, scale: float,
                   rounds: int):
    """Up to ``rounds`` shortest paths with the overflowing devices' memory priced into the arc
    costs (each round doubles the price of every device still over its cap, from ``scale`` per
    cap), from the path ``arcs`` and its ``metrics``, until one meets the caps. Returns the
    last path's arcs and metrics."""
    inst = sg.instance
    lam = [0.0] * len(inst.devices)
    for _ in range(rounds):
        for d, dev in enumerate(inst.devices):
            cap = caps[d]
            if cap and metrics.memory_bytes[dev.name] > cap:
                lam[d] = lam[d] * 2 if lam[d] else scale / cap
        priced = [c + sum(lam[d] * (arc.weights[d] + arc.working[d]) for d in range(len(lam)) if lam[d])
                  if math.isfinite(c) else c for arc, c in zip(sg.arcs, cost)]
        arcs, _ = shortest_path(sg, dp_obj, cost=priced, term=term)
        metrics = evaluate_stages(plan_stages(sg, arcs), inst)
        if metrics.feasible:
            break
    return arcs, metrics


def minmax_warm_start(sg: StageGraph, objective: str, deadline: Deadline = NEVER, *,
                      max_labels: int = 2_000_000) -> WarmStart:
    """The exact min-max search (``formulations.minmax``) over one round's graph, as a warm start.

    Within the round's bound (the whole graph when it left nothing out): the best plan that
    meets the caps (``capped_exact``, its ``bound`` its value, ``support`` the arcs a plan no
    worse than it needs), or the proof that there is none (``capped_exact``, a plan above the
    bound when the search met one). Stopped by ``max_labels`` or the deadline: the best plan
    found and the proven bound, for the solvers to go on from.
    """
    partial = sg.upper is not None and math.isfinite(sg.outside)
    upper = sg.upper if partial else math.inf
    res = minmax_search(sg, objective, upper=upper, max_labels=max_labels, deadline=deadline)
    value = sg.path_value(res.arcs, objective) if res.arcs else math.inf
    period_cap = sg.instance.constraints.period_s
    # (memory: the search carries the period cap, ``minmax._Problem.limits``.) Minimising the
    # period under a period cap: the cap only removes plans above the optimum sought, so a plan
    # over it shows that none of the graph (within the bound) meets it
    over = objective == "period" and period_cap is not None and bool(res.arcs) and value > cap_limit(period_cap)
    if res.stopped:
        return WarmStart(res.arcs, value, res.lower, bool(res.arcs) and not over)
    if over:
        return WarmStart([], math.inf, value if res.optimal else upper, False, capped_exact=True)
    if res.optimal:
        return WarmStart(res.arcs, value, value, True, capped_exact=True,
                         support=CapsSupport(res.support_T, res.support))
    return WarmStart(res.arcs, value, upper, bool(res.arcs), capped_exact=True,
                     support=CapsSupport(upper, np.zeros(len(sg.arcs), dtype=bool)))


def plan_stages(sg: StageGraph, arcs) -> list[tuple]:
    """The arcs of a path as the evaluator's stage tuples, in layer order."""
    out = []
    for o in sg.path_options(arcs):
        parts = [(d, r) for d, r in zip(o.devices, o.ranges)]
        if o.axis != "none":
            parts.sort(key=lambda x: x[1])
        out.append((o.first, o.last, o.axis, parts))
    return out


def overflows(arc, caps) -> bool:
    """The arc alone holds more than some device's memory cap."""
    return any(cap is not None and arc.weights[d] + arc.working[d] > cap for d, cap in enumerate(caps))


def cutoff(sg: StageGraph, objective: str, ws: WarmStart) -> float | None:
    """The value a solver of one round's graph needs to look below: the warm start's when it
    meets the caps, else the round's bound (a plan above it is looked for in the next round,
    which holds every plan up to a larger bound). None: look at every plan."""
    partial = sg.upper is not None and math.isfinite(sg.outside)  # the round left plans out
    cut = min(ws.value if ws.feasible else math.inf, sg.upper if partial else math.inf)
    return cut if math.isfinite(cut) else None


def pruned_arcs(sg: StageGraph, objective: str, upper: float | None, fixing: Fixing | None = None,
                support: CapsSupport | None = None) -> list[int]:
    """Arcs that can be part of a feasible plan no worse than ``upper``.

    An arc that alone overflows a device's memory is never feasible, nor one outside the
    ``support`` of a label search (capped or min-max) whose bound covers ``upper``: a plan no
    worse than any plan that uses it uses only the support. With an ``upper`` bound on an
    additive objective, an arc whose best path (DP prefix + arc + suffix) exceeds it
    cannot be optimal either (exact reduced-cost fixing), nor can one whose Lagrangian bound
    under the memory caps (``fixing``) exceeds it.
    """
    caps = memory_caps(sg)
    ok = [not overflows(arc, caps) for arc in sg.arcs]
    if support is not None and (math.inf if upper is None else upper) <= support.bound:
        ok = [o and bool(f) for o, f in zip(ok, support.arcs)]
    if upper is None or objective not in ADDITIVE:
        return [a for a in range(len(sg.arcs)) if ok[a]]
    if fixing is not None:
        ok = [o and bool(f) for o, f in zip(ok, fixing.keep(upper))]
    cost = [c if ok[a] else math.inf for a, c in enumerate(arc_cost(sg, objective))]
    pre, suf = prefix_suffix(sg, cost, terminal_cost(sg, objective))
    slack = loose(upper)
    return [a for a, arc in enumerate(sg.arcs) if ok[a] and pre[arc.tail] + cost[a] + suf[arc.head] <= slack]

"""The rounds of an exact solve: enumerate the plans within an upper bound, solve that graph,
and grow the bound until an optimum is certified.

Latency and energy: each round enumerates the plans within an upper bound (starting just above
the layout relaxation's bound, ``formulations.relaxation``) and solves that graph. A plan no
worse than every plan left outside the graph (``sg.outside``) is optimal over the whole space.
Otherwise the bound grows in small steps (the number of plans within a bound grows very fast
near the optimum) and never beyond the best plan found, so the round after a feasible plan is
found holds every better plan. Each round proves ``min(graph bound, sg.outside)`` a lower
bound. Period and memory are not additive: their floors (the mean device load, the mean
weights) are weak, so once a round's min-max search (``formulations.minmax``) has met a plan,
the next round enumerates every plan within it and certifies.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from formulations.caps import Fixing
from formulations.certificate import Exploration, GraphSolve, SpaceTimeout
from formulations.relaxation import layout_bounds
from formulations.stagegraph import SpaceTooLarge, StageGraph, build_stage_graph
from formulations.warmstart import WarmStart

from milp_planner.errors import PlannerError
from milp_planner.instance import Instance


@dataclass(frozen=True)
class RoundSettings:
    """How the rounds enumerate: ``bounded`` (rounds by upper bound; else one round over the
    whole space), ``max_arcs`` (largest graph), ``max_options`` (largest stage for the layout
    bounds), ``delta`` (first bound above the relaxation's, relative), ``round_budget`` (arcs
    one round may enumerate) and ``growth`` (first relative step of the bound)."""

    bounded: bool = True
    max_arcs: int = 3_000_000
    max_options: int = 250_000
    delta: float = 0.0025
    round_budget: int = 60_000
    growth: float = 0.002


class RoundContext(Protocol):
    """What the rounds need of ``milp_planner.planners.base.SolveContext``."""

    objective: str
    time_limit: float | None
    started: float

    def report(self, **info) -> None: ...


SolveGraph = Callable[[StageGraph, RoundContext, WarmStart], GraphSolve]
WarmStarter = Callable[[StageGraph, str, "float | None", "Fixing | None"], WarmStart]


@dataclass
class _Best:
    graph: StageGraph
    found: GraphSolve


def explore(instance: Instance, ctx: RoundContext, solve_graph: SolveGraph, warm_start: WarmStarter,
            settings: RoundSettings) -> Exploration:
    """Enumerate and solve the space in rounds until an optimum is certified (see the module).

    ``warm_start(sg, objective, deadline, prior)`` gives each round's DP warm start and
    ``solve_graph(sg, ctx, ws)`` solves its graph. Raises ``SpaceTimeout`` when the time limit
    runs out before any plan is found, ``SpaceTooLarge`` / ``PlannerError`` when the space
    cannot be enumerated and no plan was found.
    """
    obj = ctx.objective
    deadline = None if ctx.time_limit is None else ctx.started + ctx.time_limit
    bounded = settings.bounded
    minmax = obj in ("period", "memory")  # weak additive floors: the incumbent sets the bound
    try:
        bounds = layout_bounds(instance, obj, deadline=deadline, max_options=settings.max_options) if bounded else None
    except TimeoutError:
        raise SpaceTimeout(None) from None
    lower = float(bounds.to_go[0].min()) if bounded else None
    upper = lower * (1 + settings.delta) if bounded else math.inf
    budget, max_arcs = settings.round_budget, settings.max_arcs
    growth, prev_arcs = settings.growth, 0
    best: _Best | None = None
    rounds, build_s = 0, 0.0
    memo: dict = {}  # arcs priced by earlier rounds
    prior = None  # the memory caps' multipliers of the last round that had them
    done_upper = lower  # the bound of the last round that finished

    def stop(timed_out: bool = False) -> Exploration:
        return Exploration(best.graph, best.found, lower, False, rounds, build_s, timed_out=timed_out)

    while True:
        rounds += 1
        ctx.report(phase=f"round {rounds}", within=upper if math.isfinite(upper) else None,
                   incumbent=best.found.value if best else None, bound=lower, force=True)
        cap = max_arcs if not math.isfinite(upper) else min(max_arcs, max(budget, 4 * prev_arcs))
        try:
            sg = build_stage_graph(instance, max_arcs=cap, progress=lambda **k: ctx.report(**k),
                                   deadline=deadline, objective=obj if bounded else "latency",
                                   upper=upper if math.isfinite(upper) else None, drop_overflow=True,
                                   bounds=bounds, memo=memo)
        except TimeoutError:
            if best is None:
                raise SpaceTimeout(lower) from None
            return stop(timed_out=True)
        except SpaceTooLarge:
            if math.isfinite(upper) and cap < max_arcs and upper > done_upper * (1 + 1e-7):
                # too many plans within this bound for one round: try halfway back
                upper = done_upper + (upper - done_upper) / 2
                growth = max(growth / 4, 1e-4)
                continue
            if best is None:
                raise
            return stop()
        except PlannerError:
            if best is None:
                raise
            return stop()
        done_upper = upper
        build_s += sg.build_time_s
        whole = not math.isfinite(sg.outside)  # nothing left out but plans that break a cap
        ws = warm_start(sg, obj, deadline, prior)
        prior = ws.fixing or prior
        if ws.empty:  # no plan within `upper`, caps aside
            if whole:
                return Exploration(sg, None, lower, False, rounds, build_s, infeasible=True)
            lower = max(lower, sg.outside)
        else:
            found = solve_graph(sg, ctx, ws)
            if found.arcs and (best is None or found.value < best.found.value):
                best = _Best(sg, found)
            in_graph = found.proven_in_graph()  # nothing in the graph (infeasible), or the solver's bound
            if bounded:
                lower = max(lower, min(sg.outside, in_graph if in_graph is not None else -math.inf))
            elif in_graph is not None and math.isfinite(in_graph):
                lower = in_graph
            # the plan's own value (a solver's may be rounded: CP-SAT's integer units)
            if found.optimal and found.arcs and sg.path_value(found.arcs, obj) <= sg.outside * (1 + 1e-9):
                return Exploration(sg, found, lower if bounded else found.bound, True, rounds, build_s)
            if found.infeasible and whole and found.cutoff is None:
                return Exploration(sg, None, lower, False, rounds, build_s, infeasible=True)
            if found.stopped or (whole and found.cutoff is None) or not (found.optimal or found.infeasible):
                # out of time, the whole space solved, or a solver that cannot prove more
                return Exploration(best.graph if best else sg, best.found if best else None, lower, False,
                                   rounds, build_s, timed_out=found.stopped)
        if deadline is not None and time.perf_counter() > deadline:
            if best is None:
                raise SpaceTimeout(lower)
            return stop(timed_out=True)
        # the next bound: past every pruned partial plan's floor; the step doubles while
        # the graphs grow slowly and halves when they grow fast (near the optimum the
        # number of plans within a bound grows very fast)
        growth = growth * 2 if sg.forward_arcs <= 2 * prev_arcs + 1000 else max(growth / 2, 1e-4)
        prev_arcs = sg.forward_arcs
        upper = max(sg.outside, upper * (1 + growth))
        if minmax:
            # period and memory: while the graphs stay tiny (under 200 arcs) the bound doubles
            # until a plan is met; the round within that incumbent certifies (a round too large
            # for the budget falls back halfway: a bisection between the bound and the incumbent)
            if best is not None:
                if best.found.value <= done_upper * (1 + 1e-12):  # this round held it: nothing more to gain
                    return stop()
                upper = best.found.value
            elif sg.forward_arcs < 200:
                upper = max(upper, 2 * done_upper)
        elif best is not None:
            upper = min(upper, best.found.value)
        if upper > 2 * max(lower, 1e-12) and not minmax:
            upper = math.inf

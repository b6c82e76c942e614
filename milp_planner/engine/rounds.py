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

An incumbent (the anytime start's plan, in the space and within the caps) caps the bound the
same way from the first round, and the rounds end as soon as their proven bound reaches it.
The memory budget (``formulations.budget``) stops the rounds like the time limit does.

``RoundSettings.relaxation``: ``auto`` gives the full relaxation half the time left (plus half
of ``relaxation_credit``, the seconds the sub-fleet ladder took before the rounds); when it
runs out or refuses, the coarse relaxation (``formulations.coarse``) proves a bound and the
rounds stop there (no enumeration: its classes cannot prune exact states); ``full`` keeps the
refusal, ``coarse`` goes straight to the coarse bound.

Where the next round goes (its bound, its arc cap, its share of the time) is decided by
``milp_planner.engine.course.Course``, a small state machine; this module builds and solves
the rounds' graphs and keeps what they proved (``_State``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol

from formulations.budget import MemoryBudgetExceeded, release_memory
from formulations.caps import Fixing
from formulations.certificate import Exploration, GraphSolve, MemoryStop, SearchStopped, SpaceTimeout
from formulations.relaxation import layout_bounds
from formulations.stagegraph import SpaceTooLarge, StageGraph, build_stage_graph
from formulations.symmetry import reduction_for
from formulations.tolerance import loose
from formulations.warmstart import WarmStart
from milp_planner.cost.floors import lower_floor
from milp_planner.deadline import Deadline
from milp_planner.engine.course import Course, Mode, RoundSettings, Step
from milp_planner.engine.drivers import solve_dp
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance


INCUMBENT_PROVEN = 1e-7  # relative: a proven bound this close to the incumbent ends the rounds
OUTSIDE_TOL = 1e-9  # relative: a plan this close to what a round left out is no worse than it
THRESHOLD_TIME = 0.15  # period: the threshold probes' most share of the time left
FLOOR_TIME = 0.1  # the floors' LP (milp_planner.cost.flow), when not remembered: its most share of the time left
#: the objectives whose coarse bound is refined with finer grids (``coarse.refined_coarse_bounds``),
#: within ``REFINE_SHARE`` of the time left (the rest goes to the improvement loop's plans)
REFINED_OBJECTIVES = ("latency", "energy")
REFINE_SHARE = 0.75
#: latency on link groups whose full relaxation has no blocks (too many classes): the coarse
#: relaxation with blocks runs within ``BLOCKS_SHARE`` of the time left (``_blocked_lower``).
#: A large share: it matters where the full bound is far below it, and then the rounds, which
#: crawl up from the full bound, cannot reach the optimum anyway (AutoDiCE's ResNet-101 boards:
#: 46.7 ms against 52.9 ms, the pass 20-22 s of the 35 s left of a 60 s solve)
BLOCKED_OBJECTIVES = ("latency",)
BLOCKS_SHARE = 0.8
#: the rounds that aim past what the rounds before them enumerated: a memory budget hit there
#: sends the rounds back to the crawl instead of ending them
SPECULATIVE = (Mode.FIRST, Mode.JUMP)


class RoundContext(Protocol):
    """What the rounds need of ``milp_planner.planners.base.SolveContext``."""

    objective: str
    deadline: Deadline

    def report(self, **info) -> None: ...


SolveGraph = Callable[[StageGraph, RoundContext, WarmStart], GraphSolve]
WarmStarter = Callable[[StageGraph, str, "float | None", "Fixing | None"], WarmStart]


@dataclass
class _Best:
    graph: StageGraph
    found: GraphSolve


@dataclass
class _State:
    """What the rounds have proven so far (kept outside the loop so that a stop keeps it)."""

    lower: float | None = None
    best: _Best | None = None
    rounds: int = 0
    build_s: float = 0.0
    lower_source: str = ""  # "coarse": ``lower`` is the coarse relaxation's (formulations.coarse)
    threshold: dict | None = None  # period: the threshold probes (``ThresholdSearch.info``)
    coarse: dict | None = None  # the coarse relaxation's passes (``RefinedCoarse.info``)
    coarse_lower: float = -math.inf  # the coarse relaxation's bound beside the full one's (``_blocked_lower``)

    def source(self) -> str:
        """What proved ``lower``: "coarse" when the coarse relaxation's bound is still the best."""
        return "coarse" if self.lower_source == "coarse" or (
            self.lower is not None and self.lower <= self.coarse_lower) else ""

    def stop(self, timed_out: bool = False, memory_out: str = "") -> Exploration:
        return Exploration(self.best.graph if self.best else None, self.best.found if self.best else None,
                           self.lower, False, self.rounds, self.build_s, timed_out=timed_out, memory_out=memory_out,
                           lower_source=self.source(), coarse=self.coarse)


def explore(instance: Instance, ctx: RoundContext, solve_graph: SolveGraph, warm_start: WarmStarter,
            settings: RoundSettings, incumbent: float | None = None,
            build_graph: Callable[..., StageGraph] = build_stage_graph) -> Exploration:
    """Enumerate and solve the space in rounds until an optimum is certified (see the module).

    ``warm_start(sg, objective, deadline, prior)`` gives each round's DP warm start and
    ``solve_graph(sg, ctx, ws)`` solves its graph; ``build_graph`` builds each round's graph
    (``build_stage_graph``'s arguments; the tests inject their own). ``incumbent`` is the objective of a plan of
    the space known to meet the caps (the anytime start): no round enumerates plans worse than
    it, and the rounds stop once their proven bound reaches it (then ``found`` may be None or
    worse: the caller keeps its incumbent, proven optimal by ``lower``).

    Raises ``SpaceTimeout`` when the time limit runs out before any plan is found,
    ``MemoryStop`` when the memory budget (``formulations.budget``) is hit before any plan,
    ``SpaceTooLarge`` / ``PlannerError`` when the space cannot be enumerated and no plan was
    found. After a plan, or with an incumbent, the budget stops the rounds with ``memory_out``
    set, and a space too large to enumerate with ``refused`` set.
    """
    st = _State()
    try:
        out = _rounds(instance, ctx, solve_graph, warm_start, settings, incumbent, st, build_graph)
    except MemoryBudgetExceeded as err:
        if st.best is None and incumbent is None:
            raise MemoryStop(str(err), st.lower) from None
        out = st.stop(memory_out=str(err))
    except PlannerError as err:  # a space too large to enumerate (further)
        if incumbent is None:
            raise
        out = st.stop()
        out.refused = str(err)
    except SearchStopped as err:  # keeps the threshold probes and what proved the bound for the caller's ``info``
        err.threshold, err.coarse, err.lower_source = st.threshold, st.coarse, st.source()
        raise
    out.threshold = st.threshold
    return out


def _threshold(st: _State, lb, instance: Instance, incumbent: float | None, deadline: Deadline,
               ctx: RoundContext) -> None:
    """Period: raise ``st.lower`` by the threshold probes (``formulations.threshold``) between
    it and the incumbent, within ``THRESHOLD_TIME`` of the time left; ``st.threshold`` records
    them. Nothing without an incumbent or a finite bound."""
    from formulations.threshold import threshold_search

    if incumbent is None or not math.isfinite(incumbent) or st.lower is None or not math.isfinite(st.lower):
        return
    if st.lower >= incumbent * (1 - INCUMBENT_PROVEN):
        return
    ctx.report(phase="threshold probes", incumbent=incumbent, bound=st.lower, force=True)
    found = threshold_search(lb, instance, st.lower, incumbent, deadline=deadline.share(THRESHOLD_TIME))
    info = found.info()
    info["raised"] = found.lower > st.lower * (1 + 1e-6)  # (not by the float32 margins alone)
    info["from"] = st.lower
    st.threshold = info
    st.lower = max(st.lower, found.lower)


def _rounds(instance, ctx, solve_graph, warm_start, settings, incumbent, st: _State,
            build_graph=build_stage_graph) -> Exploration:
    obj, deadline, bounded = ctx.objective, ctx.deadline, settings.bounded
    cap_at = math.inf if incumbent is None or not math.isfinite(incumbent) else loose(incumbent)
    minmax = obj in ("period", "memory")  # weak additive floors: the incumbent sets the bound
    try:
        bounds = _full_bounds(instance, obj, deadline, settings) if bounded else None
    except (TimeoutError, PlannerError, MemoryBudgetExceeded) as err:
        if settings.relaxation == "full":  # (the memory budget: explore's handler)
            if isinstance(err, TimeoutError):
                raise SpaceTimeout(None) from None
            raise
        return _coarse_only(instance, obj, deadline, settings, incumbent, st, err, ctx)
    crawl_from = None
    if bounded:  # a floor valid for every plan (the flow floor counts transfers) may be higher
        st.lower = max(float(bounds.lower), _floor(instance, obj, deadline))
        crawl_from = st.lower  # where the rounds start without ``known_lower``
        st.lower = max(st.lower, settings.known_lower, _blocked_lower(instance, obj, deadline, settings, bounds, st))
        if obj == "period":
            _threshold(st, bounds, instance, incumbent, deadline, ctx)
    course = Course.start(minmax, bounded, st.lower, crawl_from, cap_at, settings)
    memo: dict = {}  # arcs priced by earlier rounds
    # energy: the flow LP's floor after each arc from its exact head state (formulations.flow_togo)
    to_go = _flow_to_go(instance, obj, deadline) if bounded else None
    prior = None  # the memory caps' multipliers of the last round that had them

    while True:
        if incumbent is not None and st.lower is not None and st.lower >= incumbent * (1 - INCUMBENT_PROVEN):
            return st.stop()  # the incumbent is proven optimal: nothing better to enumerate
        plan = course.plan()
        if plan is None:  # every bound left would overflow again
            if st.best is None and incumbent is None:
                raise SpaceTooLarge(f"the plans within {course.upper:.6g} are too many to enumerate "
                                    f"within {course.crawl_cap():,.0f} arcs")
            return st.stop()
        st.rounds += 1
        known = [v for v in (st.best.found.value if st.best else None, incumbent) if v is not None]
        ctx.report(phase=f"round {st.rounds}", within=plan.upper if math.isfinite(plan.upper) else None,
                   incumbent=min(known) if known else None, bound=st.lower, force=True)
        try:
            sg = build_graph(instance, max_arcs=plan.max_arcs, progress=lambda **k: ctx.report(**k),
                             deadline=plan.deadline(deadline), objective=obj if bounded else "latency",
                             upper=plan.upper if math.isfinite(plan.upper) else None, drop_overflow=True,
                             bounds=bounds, memo=memo, to_go=to_go,
                             reduction=reduction_for(instance, obj, settings.symmetry))
        except TimeoutError:
            if course.timed_out(deadline) is Step.AGAIN:
                continue
            if st.best is None:
                raise SpaceTimeout(st.lower) from None
            return st.stop(timed_out=True)
        except SpaceTooLarge:
            if course.too_large(plan.max_arcs) is Step.AGAIN:
                continue
            if st.best is None:
                raise
            return st.stop()
        except MemoryBudgetExceeded as err:
            if course.mode not in SPECULATIVE:
                raise  # the crawl's graphs grow round by round: this is as far as they go
            # a jump to the plan known (or the small first round) whose graph does not fit the
            # budget: as one over its cap of arcs, the rounds crawl up from the last bound that
            # finished, once what the round left in the memo is let go. Before, a longer time
            # limit let the jump grow until the budget stopped every round
            # (coopai/vgg16-rpi4-6 period at 240 s: bound 446.0 ms, against 483.0 ms at 60 s,
            # where the jump's share of the time ran out first and the rounds crawled)
            err.__traceback__ = None
            _let_go(memo)
            if course.too_large(plan.max_arcs) is Step.AGAIN:
                continue
            raise
        except PlannerError:
            if st.best is None:
                raise
            return st.stop()
        course.built()
        st.build_s += sg.build_time_s
        ws = warm_start(sg, obj, deadline, prior)
        prior = ws.fixing or prior
        ended = _answer_round(sg, ws, ctx, solve_graph, st, incumbent, bounded)
        if ended is not None:
            return ended
        if deadline.passed():
            if st.best is None:
                raise SpaceTimeout(st.lower)
            return st.stop(timed_out=True)
        best = st.best.found.value if st.best else None
        if course.advance(sg.forward_arcs, sg.outside, best, st.lower, incumbent) is Step.DONE:
            return st.stop()  # the last round held the best plan found: nothing more to gain


def _let_go(memo: dict) -> None:
    """Forget what the rounds remembered (``build_stage_graph``'s memo) and give the memory back."""
    memo.clear()
    release_memory()


def _answer_round(sg: StageGraph, ws: WarmStart, ctx: RoundContext, solve_graph: SolveGraph, st: _State,
                  incumbent: float | None, bounded: bool) -> Exploration | None:
    """Solve one round's graph and raise ``st.lower`` by what it proves; the exploration when
    the rounds end here (certified, infeasible, or a solver that cannot prove more), else None."""
    obj = ctx.objective
    whole = not math.isfinite(sg.outside)  # nothing left out but plans that break a cap
    if ws.empty:  # no plan within the round's bound, caps aside
        if whole:
            if incumbent is not None:  # cannot be: the incumbent lies within the bound
                return st.stop()
            return Exploration(sg, None, st.lower, False, st.rounds, st.build_s, infeasible=True)
        st.lower = max(st.lower, sg.outside)
        return None
    found = graph_answer(sg, ctx, ws, solve_graph)
    if found.arcs and (st.best is None or found.value < st.best.found.value):
        st.best = _Best(sg, found)
    in_graph = found.proven_in_graph()  # nothing in the graph (infeasible), or the solver's bound
    if bounded:
        st.lower = max(st.lower, min(sg.outside, in_graph if in_graph is not None else -math.inf))
    elif in_graph is not None and math.isfinite(in_graph):
        st.lower = in_graph
    # the plan's own value (a solver's may be rounded: CP-SAT's integer units)
    if found.optimal and found.arcs and sg.path_value(found.arcs, obj) <= sg.outside * (1 + OUTSIDE_TOL):
        return Exploration(sg, found, st.lower if bounded else found.bound, True, st.rounds, st.build_s,
                           coarse=st.coarse)
    if found.infeasible and whole and found.cutoff is None:
        if incumbent is not None:
            return st.stop()
        return Exploration(sg, None, st.lower, False, st.rounds, st.build_s, infeasible=True)
    if found.stopped or (whole and found.cutoff is None) or not (found.optimal or found.infeasible):
        # out of time, the whole space solved, or a solver that cannot prove more
        return Exploration(st.best.graph if st.best else sg, st.best.found if st.best else None, st.lower,
                           False, st.rounds, st.build_s, timed_out=found.stopped or ctx.deadline.passed(),
                           lower_source=st.source(), coarse=st.coarse)
    return None


def graph_answer(sg: StageGraph, ctx: RoundContext, ws: WarmStart, solve_graph: SolveGraph) -> GraphSolve:
    """One round's answer over its graph: the warm start's own when its label search was exact
    (``ws.capped_exact``: the best plan within the caps and the round's bound, or the proof that
    there is none), else the planner's solver (``solve_graph``).

    The exact label searches (``formulations.caps.capped_shortest_path`` under memory caps, the
    min-max search of ``formulations.minmax``) solve exactly the problem the MILP and CP-SAT
    models state over the same graph, so a solver would only prove it again. It mattered: on
    AutoDiCE's VGG-19 (4 boards) under a 105.8 MB memory cap (a Pareto front's ε-step), the
    label search proved in 0.1 s that a round's graph held no plan within the caps, and HiGHS
    took 166 s to prove the same (docs/pareto.md)."""
    if ws.capped_exact:
        found = solve_dp(sg, ctx.objective, ws)
        found.info = {**found.info, "solved_by": "label search"}
        return found
    return solve_graph(sg, ctx, ws)


def _flow_to_go(instance: Instance, obj: str, deadline: Deadline):
    """Energy: the flow LP's floors after a boundary from an exact state
    (``formulations.flow_togo``), its LP within ``FLOOR_TIME`` of the time left; None for the
    other objectives or when the LP fails."""
    if obj != "energy":
        return None
    from formulations.flow_togo import flow_to_go

    return flow_to_go(instance, deadline=deadline.share(FLOOR_TIME))


def _floor(instance: Instance, obj: str, deadline: Deadline) -> float:
    """``milp_planner.cost.floors.lower_floor`` (usually remembered from the anytime start),
    its LP within ``FLOOR_TIME`` of the time left."""
    return lower_floor(instance, obj, deadline=deadline.share(FLOOR_TIME)).value


class CoarseOnly(SearchStopped):
    """The full relaxation could not bound the space; ``lower`` is the coarse relaxation's
    bound (``formulations.coarse``), and no plan was enumerated. ``memory``: the memory budget
    stopped the full relaxation."""

    memory: bool = False


def _full_bounds(instance, obj, deadline: Deadline, settings):
    """The full relaxation; under ``auto`` within half the time left, plus half the
    ``relaxation_credit`` (else the coarse one runs)."""
    if settings.relaxation == "coarse":
        raise SpaceTooLarge("the coarse relaxation was asked for (relaxation=coarse)")
    own = deadline
    if settings.relaxation == "auto" and not deadline.never:
        own = deadline.within((deadline.left() + max(0.0, settings.relaxation_credit)) / 2)
    return layout_bounds(instance, obj, deadline=own, max_options=settings.max_options, symmetry=settings.symmetry,
                         drop_overflow=True)  # the rounds' graphs leave out arcs that overflow a memory cap


def _blocked_lower(instance: Instance, obj: str, deadline: Deadline, settings: RoundSettings, bounds,
                   st: _State) -> float:
    """The coarse relaxation's bound with link-group blocks (regions as they are), when the
    full relaxation ``bounds`` had to leave blocks out (``LayoutBounds.blocks_off``: too many
    classes) on an instance with link groups; within ``BLOCKS_SHARE`` of the time left; recorded
    in ``st.coarse`` and ``st.coarse_lower``. -inf when it does not apply or does not finish.
    Both bounds are proofs, so the larger is (on AutoDiCE's ResNet-101 boards, latency: 52.87 ms
    with blocks against 46.67 ms from the full relaxation without them)."""
    from formulations.coarse import coarse_pass
    from formulations.link_groups import node_ids

    if obj not in BLOCKED_OBJECTIVES or not getattr(bounds, "blocks_off", "") or node_ids(instance) is None:
        return -math.inf
    passes: list[dict] = []
    lb = coarse_pass(instance, obj, deadline.share(BLOCKS_SHARE), settings.symmetry, None, True, 0.0, passes)
    lower = None if lb is None else float(lb.lower)
    st.coarse = {"grid": "exact", "blocks": lower is not None, "lower": lower, "passes": passes,
                 "beside": f"the full relaxation without blocks ({bounds.blocks_off})"}
    st.coarse_lower = -math.inf if lower is None else lower
    return st.coarse_lower


def _coarse_only(instance, obj, deadline: Deadline, settings, incumbent, st: _State, why: Exception,
                 ctx: RoundContext) -> Exploration:
    """The coarse relaxation's bound, the full one having refused (``why``): with an
    incumbent, an exploration that proves that bound; without one, ``CoarseOnly``."""
    from formulations.coarse import coarse_bounds, refined_coarse_bounds

    if settings.relaxation == "coarse":
        reason = "relaxation=coarse"
    else:
        reason = "its share of the time ran out" if isinstance(why, TimeoutError) else str(why)
    # the full relaxation's tables (stopped by the budget or by its share of the time) are
    # garbage once the traceback lets go of its frames; the resident memory the budget measures
    # drops only when the heap is trimmed too (without it the coarse pass met the 2 GB budget
    # on tables the full one left: fleet/mobilenetv2-16dev-4types latency)
    why.__traceback__ = None
    release_memory()
    try:
        if obj in REFINED_OBJECTIVES:
            refined = refined_coarse_bounds(instance, obj, deadline=deadline, symmetry=settings.symmetry,
                                            refine_by=deadline.share(REFINE_SHARE))
            lb, st.coarse = refined.bounds, refined.info()
        else:
            lb = coarse_bounds(instance, obj, deadline=deadline, symmetry=settings.symmetry)
    except TimeoutError:
        raise SpaceTimeout(None) from None
    st.lower = float(lb.lower)
    st.lower_source = "coarse"
    if obj == "period":
        _threshold(st, lb, instance, incumbent, deadline, ctx)
    msg = (f"the coarse relaxation bounds the space ({reason}; no plan enumerated)" if settings.relaxation == "coarse"
           else f"the full layout relaxation stopped ({reason}); the coarse relaxation bounds the space")
    memory = isinstance(why, MemoryBudgetExceeded)
    if incumbent is None:
        err = CoarseOnly(msg, st.lower)
        err.memory = memory
        raise err
    out = st.stop(memory_out=msg if memory else "")
    out.refused = msg
    return out

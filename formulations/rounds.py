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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol

from milp_planner.deadline import Deadline
from formulations.budget import MemoryBudgetExceeded, release_memory
from formulations.caps import Fixing
from formulations.certificate import Exploration, GraphSolve, MemoryStop, SearchStopped, SpaceTimeout, loose
from formulations.drivers import solve_dp
from formulations.relaxation import layout_bounds
from formulations.stagegraph import SpaceTooLarge, StageGraph, build_stage_graph
from formulations.symmetry import reduction_for
from formulations.warmstart import WarmStart

from milp_planner.cost.floors import lower_floor
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance


INCUMBENT_PROVEN = 1e-7  # relative: a proven bound this close to the incumbent ends the rounds
FIRST_CAP = 4000  # arcs a round may enumerate after a round of fewer than FIRST_CAP / 16
AIM_GROWTH = 4  # the next round aims at this many times the last round's arcs
MAX_EXP = 700.0  # math.exp overflows past about 709.78: a step beyond this aims at no finite bound
TINY_STEP = 1e-4  # relative: a round this close to the last that overflows is retried larger
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
    symmetry: bool = True  # plans equal up to exchanging interchangeable devices are one plan
    relaxation: str = "auto"  # full | coarse | auto (the full one within half the time left, else coarse)
    #: seconds spent before the rounds on their behalf (the sub-fleet ladder): under ``auto`` the
    #: full relaxation gets half of the time left plus this (the half it had without them)
    relaxation_credit: float = 0.0
    #: a lower bound of the objective proven elsewhere (a Pareto front's ε-step under looser
    #: caps: ``formulations.pareto``); the rounds start there instead of crawling up to it
    known_lower: float = 0.0


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


def _aim(grown: list[tuple[float, int]]) -> float:
    """The bound at which the next round should enumerate about ``AIM_GROWTH`` times the arcs of
    the last, from the growth between the last two rounds that found arcs (log-linear in the
    bound; inf without two such rounds). Near the optimum the count grows ever more slowly, so
    this errs on the small side."""
    if len(grown) < 2:
        return math.inf
    (u1, a1), (u2, a2) = grown[-2], grown[-1]
    if a2 <= a1 or u2 <= u1 or u1 <= 0:
        return math.inf
    rate = math.log(a2 / a1) / math.log(u2 / u1)
    if not rate > 0:  # bounds so far apart that their ratio overflows
        return math.inf
    step = math.log(max(AIM_GROWTH, FIRST_CAP / 2 / a2)) / rate
    return u2 * math.exp(step) if step < MAX_EXP else math.inf


def _below_overflow(upper: float, done: float, cap: float, overflowed: list[tuple[float, float]]) -> float | None:
    """``upper``, or halfway from ``done`` (the bound of the last round that finished) to the
    least bound that overflowed a cap at least ``cap`` when ``upper`` is at or above it: the
    plans within a bound only grow with it, so such a round would overflow again (on
    ``coopai/vgg16-rpi4-6.yaml`` period the rounds went back to the incumbent after each round
    that finished and bisected down to the same bounds three times in one minute). None when
    that overflow is within ``TINY_STEP`` of ``done``: no round of this cap can prove more."""
    least = min((t for t, c in overflowed if c >= cap), default=math.inf)
    if upper < least or not least > done:
        return upper
    if least <= done * (1 + TINY_STEP):
        return None
    return done + (least - done) / 2


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
    obj = ctx.objective
    deadline = ctx.deadline
    bounded = settings.bounded
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
    st.lower = float(bounds.lower) if bounded else None  # period: the best weighted pass's bound
    if bounded:  # a floor valid for every plan (the flow floor counts transfers) may be higher
        st.lower = max(st.lower, _floor(instance, obj, deadline))
        crawl_from = st.lower  # where the rounds start without ``known_lower``
        st.lower = max(st.lower, settings.known_lower, _blocked_lower(instance, obj, deadline, settings, bounds, st))
    if bounded and obj == "period":
        _threshold(st, bounds, instance, incumbent, deadline, ctx)
    upper = min(st.lower * (1 + settings.delta), cap_at) if bounded else math.inf
    # a known bound above the relaxation's: the first round starts there with the round budget;
    # if that overflows, the rounds crawl up from the relaxation's bound as without it (the
    # arcs within a bound do not shrink with the window above a known bound, and the crawl's
    # rounds grow their budget with the arcs they found)
    known_try = bounded and not minmax and st.lower > crawl_from
    # period and memory with a plan known: the small first round (just above the relaxation's
    # bound, which can be tight) gets the round budget of arcs and a quarter of the time; past
    # either it goes straight to the plan (the mean-load floor is weak: such a round can
    # enumerate nearly as many arcs as the jump and prove only what the search's first probe
    # proves at once)
    first_try = minmax and bounded and math.isfinite(cap_at) and math.isfinite(st.lower) and cap_at > upper
    if bounded and math.isinf(st.lower):
        # the relaxation (drop_overflow) proves that every plan has a stage part that fits no
        # device's memory cap: a round within 0 enumerates nothing and shows the caps infeasible
        upper = 0.0
    budget, max_arcs = settings.round_budget, settings.max_arcs
    growth, prev_arcs = settings.growth, 0
    # period and memory: the label search, not the enumeration, limits a round, so the round
    # after the first goes straight to the best plan known, with no arc budget; when that graph
    # cannot be built within 75 % of the time left (or at all), the rounds crawl up from the
    # bound as for latency, each proving its bound
    jump = minmax
    memo: dict = {}  # arcs priced by earlier rounds
    # energy: the flow LP's floor after each arc from its exact head state (formulations.flow_togo)
    to_go = _flow_to_go(instance, obj, deadline) if bounded else None
    prior = None  # the memory caps' multipliers of the last round that had them
    done_upper = st.lower  # the bound of the last round that finished
    retry_cap = 0  # a larger cap for a round retried at the same bound
    grown: list[tuple[float, int]] = []  # (bound, arcs enumerated) of the rounds that found arcs
    # period and memory: (bound, arc cap) of the rounds that overflowed their cap or their time;
    # the plans within a bound only grow with it, so no later round of at most that cap tries a
    # bound at or above it (it bisects between the last round that finished and the overflow)
    overflowed: list[tuple[float, float]] = []

    while True:
        if incumbent is not None and st.lower is not None and st.lower >= incumbent * (1 - INCUMBENT_PROVEN):
            return st.stop()  # the incumbent is proven optimal: nothing better to enumerate
        known = [v for v in (st.best.found.value if st.best else None, incumbent) if v is not None]
        # a round may grow the graph 16-fold (at least to FIRST_CAP arcs), up to the round budget:
        # near the optimum a small step can multiply the plans a hundredfold, and a round that
        # overflows costs what it enumerated before it gave up
        cap = max_arcs if not math.isfinite(upper) or jump else min(max_arcs, max(budget, 4 * prev_arcs))
        if not minmax:  # (a min-max round is within the incumbent or a bisection step)
            cap = min(cap, max(FIRST_CAP, 16 * prev_arcs, retry_cap))
        if minmax and not jump:
            below = _below_overflow(upper, done_upper, cap, overflowed)
            if below is None:  # every bound left would overflow again
                if st.best is None and incumbent is None:
                    raise SpaceTooLarge(f"the plans within {upper:.6g} are too many to enumerate "
                                        f"within {cap:,.0f} arcs")
                return st.stop()
            upper = below
        st.rounds += 1
        ctx.report(phase=f"round {st.rounds}", within=upper if math.isfinite(upper) else None,
                   incumbent=min(known) if known else None, bound=st.lower, force=True)
        trying = first_try and st.rounds == 1
        if known_try or trying:  # a first round from a known bound, or just above the relaxation's
            cap = min(max_arcs, budget)
        if trying:
            build_by = deadline.share(0.25)
        else:
            build_by = deadline if not jump or st.rounds == 1 else deadline.share(0.75)
        try:
            sg = build_graph(instance, max_arcs=cap, progress=lambda **k: ctx.report(**k),
                                   deadline=build_by, objective=obj if bounded else "latency",
                                   upper=upper if math.isfinite(upper) else None, drop_overflow=True,
                                   bounds=bounds, memo=memo, to_go=to_go,
                                   reduction=reduction_for(instance, obj, settings.symmetry))
        except TimeoutError:
            if trying and not deadline.passed():
                upper = cap_at  # the small first round took its share: straight to the plan known
                continue
            if jump and not deadline.never and not deadline.passed():
                overflowed.append((upper, math.inf))  # less time is left for any later round
                # the jump's share of the time ran out: crawl up from the bound instead
                jump, upper = False, done_upper * (1 + growth)
                continue
            if st.best is None:
                raise SpaceTimeout(st.lower) from None
            return st.stop(timed_out=True)
        except SpaceTooLarge:
            if known_try:
                known_try = False
                upper = min(crawl_from * (1 + settings.delta), cap_at)
                continue
            if trying:
                upper = cap_at  # the small first round overflowed its budget: straight to the plan known
                continue
            if minmax:
                overflowed.append((upper, cap))
            if jump:
                jump, upper = False, done_upper * (1 + growth)
                continue
            if math.isfinite(upper) and cap < min(max_arcs, max(budget, 4 * prev_arcs)) and \
                    upper <= done_upper * (1 + TINY_STEP):
                # many plans tie within a tiny step (interchangeable devices): a larger round
                retry_cap = 4 * cap
                continue
            if math.isfinite(upper) and cap < max_arcs and upper > done_upper * (1 + 1e-7):
                # too many plans within this bound for one round: try halfway back
                upper = done_upper + (upper - done_upper) / 2
                growth = max(growth / 4, 1e-4)
                continue
            if st.best is None:
                raise
            return st.stop()
        except PlannerError:
            if st.best is None:
                raise
            return st.stop()
        done_upper, retry_cap, known_try = upper, 0, False
        st.build_s += sg.build_time_s
        whole = not math.isfinite(sg.outside)  # nothing left out but plans that break a cap
        ws = warm_start(sg, obj, deadline, prior)
        prior = ws.fixing or prior
        if ws.empty:  # no plan within `upper`, caps aside
            if whole:
                if incumbent is not None:  # cannot be: the incumbent lies within `upper`
                    return st.stop()
                return Exploration(sg, None, st.lower, False, st.rounds, st.build_s, infeasible=True)
            st.lower = max(st.lower, sg.outside)
        else:
            found = graph_answer(sg, ctx, ws, solve_graph)
            if found.arcs and (st.best is None or found.value < st.best.found.value):
                st.best = _Best(sg, found)
            in_graph = found.proven_in_graph()  # nothing in the graph (infeasible), or the solver's bound
            if bounded:
                st.lower = max(st.lower, min(sg.outside, in_graph if in_graph is not None else -math.inf))
            elif in_graph is not None and math.isfinite(in_graph):
                st.lower = in_graph
            # the plan's own value (a solver's may be rounded: CP-SAT's integer units)
            if found.optimal and found.arcs and sg.path_value(found.arcs, obj) <= sg.outside * (1 + 1e-9):
                return Exploration(sg, found, st.lower if bounded else found.bound, True, st.rounds, st.build_s,
                                   coarse=st.coarse)
            if found.infeasible and whole and found.cutoff is None:
                if incumbent is not None:
                    return st.stop()
                return Exploration(sg, None, st.lower, False, st.rounds, st.build_s, infeasible=True)
            if found.stopped or (whole and found.cutoff is None) or not (found.optimal or found.infeasible):
                # out of time, the whole space solved, or a solver that cannot prove more
                return Exploration(st.best.graph if st.best else sg, st.best.found if st.best else None, st.lower,
                                   False, st.rounds, st.build_s,
                                   timed_out=found.stopped or deadline.passed(),
                                   lower_source=st.source(), coarse=st.coarse)
        if deadline.passed():
            if st.best is None:
                raise SpaceTimeout(st.lower)
            return st.stop(timed_out=True)
        # the next bound: past every pruned partial plan's floor; the step doubles while
        # the graphs grow slowly and halves when they grow fast (near the optimum the
        # number of plans within a bound grows very fast)
        growth = growth * 2 if sg.forward_arcs <= 2 * prev_arcs + 1000 else max(growth / 2, 1e-4)
        if sg.forward_arcs:
            grown.append((done_upper, sg.forward_arcs))
        prev_arcs = sg.forward_arcs
        upper = max(sg.outside, min(upper * (1 + growth), _aim(grown)))
        if minmax:
            # period and memory: while the graphs stay tiny (under 200 arcs) the bound doubles
            # until a plan is met; the round within that incumbent certifies (a round too large
            # for the budget falls back halfway: a bisection between the bound and the incumbent)
            if st.best is not None:
                if st.best.found.value <= done_upper * (1 + 1e-12):  # this round held it: nothing more to gain
                    return st.stop()
                upper = st.best.found.value
            elif jump and incumbent is not None:
                upper = incumbent
            elif sg.forward_arcs < 200:
                upper = max(upper, 2 * done_upper)
        elif st.best is not None:
            upper = min(upper, st.best.found.value)
        if upper > 2 * max(st.lower, 1e-12) and not minmax:
            upper = math.inf
        if bounded:
            upper = min(upper, cap_at)  # no plan worse than the incumbent is needed


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

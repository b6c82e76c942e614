"""Exact planners: ``dp``, ``milp`` (Pyomo + HiGHS), ``cpsat`` (OR-Tools) and ``bruteforce``.

All four search the instance's plan space (docs/model.md section 5). ``dp``, ``milp`` and ``cpsat``
run the rounds of ``milp_planner.engine.rounds`` over the stage graph: each round is warm-started by
the DP (``formulations.warmstart``) and solved by a driver of ``milp_planner.engine.drivers``; for
additive objectives (latency, energy) the DP's prefix and suffix bounds first remove every stage
arc that cannot be part of a plan better than the warm start (exact reduced-cost fixing).
``bruteforce`` enumerates every plan and scores each with the evaluator itself: it shares no
pricing code with the others, which makes it the cross-check of the tests.

The certificate (``PlanResult``): status, the evaluator's objective of the plan, the best proven
bound, the gap, the solve time and the space. A solver objective that disagrees with the
evaluator beyond 1e-6 relative (plus CP-SAT's stated rounding tolerance) raises an error
(``formulations.certificate``): that is a bug, not a result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from formulations.budget import (DEFAULT_BUDGET, DEFAULT_HEADROOM, MemoryBudgetExceeded, active_budget, auto_budget,
                                 budget_problem, memory_budget, parse_size, release_memory)
from formulations.caps import Fixing
from formulations.certificate import Exploration, GraphSolve, MemoryStop, SearchStopped, SpaceTimeout, disagreement
from formulations.diagnosis import explain_infeasible
from formulations.minmax import MINMAX
from formulations.stagegraph import StageGraph, stage_options
from formulations.tolerance import STRICTLY_BETTER
from formulations.warmstart import WarmStart, dp_warm_start
from milp_planner.certificate import OPTIMAL_GAP, Proof
from milp_planner.cost.evaluator import evaluate, evaluate_stages
from milp_planner.cost.floors import lower_floor
from milp_planner.deadline import NEVER, Deadline
from milp_planner.engine.drivers import solve_cpsat, solve_dp, solve_highs
from milp_planner.engine.memory_search import memory_plans
from milp_planner.engine.polish import polish
from milp_planner.engine.rounds import CoarseOnly, RoundSettings, explore
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.planners.anytime_start import Start, StartReport, run_start, start_budget
from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.subfleet import (LADDER_MIN_LIMIT_S, LADDER_SHARE, MIN_TRY_S, NO_LIMIT_IMPROVE_S,
                                            RUNG_STARTS_SHARE, ImproveReport, Restriction, neighbourhoods,
                                            rung_starts, search_restricted)
from milp_planner.planners.subfleet import ladder as subfleet_ladder
from milp_planner.planners.subfleet import ladder_pays, small_space
from milp_planner.space.plan import Plan

FALLBACK_S = 0.5  # seconds the single-device fallback may take once the time limit has run out
IMPROVE_MARGIN_S = 0.1  # the improvement loop ends this long before the time limit (scoring, report)
FLOOR_SHARE = 0.1  # the floors before the search (cost.flow's LP; for the period, and the energy under memory
#: caps, then the flow MIPs of cost.flow_mip in what is left): at most this share of the time left
FLOOR_GRACE_S = 0.25  # a floor not computed before the search: at most this long past the limit
MEMORY_SEARCH_S = 5.0  # the memory objective's restricted searches (memory_start): at most this long
MEMORY_SEARCH_SHARE = 0.1  # and at most this share of the time left
POLISH_S = 4.0  # the combination of the start's layouts (polish_start): at most this long
POLISH_SHARE = 0.08  # and at most this share of the time left
#: after the memory budget stopped the rounds, the improvement loop runs when releasing what they
#: held brings the resident memory under this share of the budget
IMPROVE_AFTER_MEMORY_SHARE = 0.6
POLISH_EXACT_OPTIONS = 20_000  # over spaces of at most this many stage options, polish runs its beam only


def _replace_plan(res: PlanResult, plan: Plan, plan_from: str, why: str) -> None:
    """A better plan found after the search replaces ``res.plan``: the search's own value and
    certificate no longer describe it (the evaluator scores it; the bound stays)."""
    res.plan = plan
    res.info["plan_from"] = plan_from
    res.solver_value, res.tolerance = None, 0.0
    res.message = (f"{res.message}; " if res.message else "") + why


def _rounds_source(info: dict) -> str:
    """What proved the rounds' bound: the full layout relaxation and enumeration, or the coarse one."""
    return "coarse" if info.get("relaxation") == "coarse" else "rounds"


def _coarse_bound(err: SearchStopped) -> bool:
    """Whether the bound of rounds stopped before any plan is the coarse relaxation's."""
    return isinstance(err, CoarseOnly) or getattr(err, "lower_source", "") == "coarse"


def _proofs(ex: Exploration, info: dict) -> list[Proof]:
    """What the rounds proved: their bound over the whole space (``certified`` when the best
    plan of their graph is no worse than anything left outside it)."""
    if ex.lower is None:
        return []
    return [Proof(ex.lower, "certified" if ex.certified else _rounds_source(info))]


@dataclass
class Ladder:
    """The sub-fleet ladder's report and its rungs that did not settle (the improvement loop
    tries them again with the time left)."""

    report: ImproveReport
    unsettled: list[Restriction]
    settled: frozenset  # the keys (``Restriction.key``) of the rungs that settled
    starts: ImproveReport | None = None  # the fast baselines on each rung (``subfleet.rung_starts``)

    @property
    def seconds(self) -> float:
        """The ladder's seconds, its rung starts included."""
        return self.report.seconds + (self.starts.seconds if self.starts is not None else 0.0)


@dataclass
class _Rounded:
    """What the rounds hand on: the result, whether they settled it (certified, or the space
    proven infeasible: nothing left to improve), whether the memory budget stopped them, and
    the plan's value when known without evaluating it again."""

    result: PlanResult
    settled: bool
    memory_out: bool
    value: float | None = None


def _solver_available(name: str) -> str | None:
    import logging

    import pyomo.environ as pyo

    log = logging.getLogger("pyomo")
    level = log.level
    log.setLevel(logging.CRITICAL)  # Pyomo logs a traceback for an unknown name
    try:
        ok = pyo.SolverFactory(name).available(exception_flag=False)
    except Exception:  # Pyomo raises assorted errors for unknown names
        ok = False
    finally:
        log.setLevel(level)
    return None if ok else "is not an available Pyomo solver (e.g. appsi_highs)"


#: the options of the rounds (``milp_planner.engine.rounds.RoundSettings``) and of the DP warm start
ROUND_OPTIONS = (
    Option("bounded", bool, True, "enumerate only plans within an upper bound"),
    Option("max_arcs", int, 3_000_000, "most stage arcs in the graph", ge=1, le=10**9),
    Option("max_options", int, 250_000, "most stage options per layer range", ge=1, le=10**9),
    Option("delta", float, 0.0025, "first round's relative window above the bound", ge=0, le=1e6),
    Option("round_budget", int, 60_000, "arcs one round may enumerate", ge=1, le=10**9),
    Option("known_lower", float, 0.0, "a proven lower bound of the objective (e.g. a Pareto front's ε-step under "
           "looser caps), where the rounds start", ge=0, le=1e300),
    Option("growth", float, 0.002, "relative window growth per round", gt=0, le=1e6),
    Option("capped_search", bool, True, "resource-constrained DP search under memory, latency or energy caps; "
           "its exact answer replaces a round's MILP / CP-SAT solve (false: the models solve every round)"),
    Option("max_labels", int, 2_000_000, "label budget of the capped and the min-max label searches",
           ge=1, le=10**9),
    Option("lagrange_rounds", int, 12, "Lagrangian price rounds", ge=0, le=10**6),
    Option("symmetry", bool, True, "plans equal up to exchanging interchangeable devices are one plan"),
    Option("relaxation", str, "auto", "layout relaxation that bounds the rounds: full, coarse (bound only, "
           "formulations.coarse) or auto (full within half the time left, else coarse)",
           choices=("auto", "full", "coarse")),
)


#: the options of the anytime start and the memory budget (dp, milp, cpsat)
ANYTIME_OPTIONS = (
    Option("anytime", bool, True, "start from the best fast baseline's plan in the space (docs/exact.md)"),
    Option("improve", bool, True, "spend the time left on exact searches over sub-fleets and smaller spaces "
           "(planners.subfleet; with anytime)"),
    Option("memory_budget", str, None, "resident memory at which the search stops with its best plan and bound "
           "(bytes, or like 4GB, 512MB); auto: 2GB, or 1GB above what the process holds when the search begins "
           "if that is more (formulations.budget.DEFAULT_HEADROOM)", check=budget_problem),
    Option("memory_search", bool, True, "memory objective: beam searches over small restricted plan spaces "
           "improve the anytime start (milp_planner.engine.memory_search; with anytime)"),
    Option("polish", bool, True, "the best plan built from the stage layouts of the anytime start's plans "
           "becomes the incumbent (milp_planner.engine.polish; with anytime)"),
    Option("polish_aside", bool, False, "period and memory over small spaces: keep the polished plan aside, "
           "not the rounds' incumbent (default false: the rounds start from it; docs/exact.md)"),
)
FIX_ARCS = Option("fix_arcs", bool, True, "remove arcs that cannot beat the warm start (reduced-cost fixing)")
LOG = Option("log", bool, False, "print the solver log")


class ExactPlanner(Planner):
    """The rounds, the warm start and the certificate shared by ``dp``, ``milp`` and ``cpsat``;
    a subclass only says how one round's graph is solved (``solve_graph``)."""

    exact = True
    option_specs = ROUND_OPTIONS + ANYTIME_OPTIONS

    #: runs the anytime start and reports floors (the rounds' planners; not bruteforce)
    anytime_capable = True

    def run_search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        try:
            return self.search(instance, ctx)
        except SearchStopped as err:  # stopped before any plan, and no anytime start to return
            return self._fallback(instance, err, ctx)

    def score(self, out: PlanResult, instance: Instance) -> None:
        """The evaluator's value, checked against the solver's own (a mismatch is a bug)."""
        super().score(out, instance)
        if out.solver_value is not None and disagreement(out.solver_value, out.value, out.tolerance):
            raise RuntimeError(
                f"{self.name}: solver objective {out.solver_value!r} disagrees with the evaluator's {out.value!r} "
                "(a formulation bug; please report it)")

    def _fallback(self, instance, err: SearchStopped, ctx: SolveContext) -> PlanResult:
        """Stopped before any plan, without an anytime start: the best single-device plan (always
        in the space; within a second, the best of the devices scored by then), with the bound
        proven so far."""
        from milp_planner.planners import get_planner

        proven = f"; proven bound {err.lower:.6g}" if err.lower else ""
        status = "timeout" if isinstance(err, SpaceTimeout) else "feasible"
        single = get_planner("offload").solve(instance, objective=ctx.objective, time_limit=FALLBACK_S)
        info = {}
        if isinstance(err, MemoryStop) or getattr(err, "memory", False):
            info["stopped_by"] = "memory budget"
        if _coarse_bound(err):
            info["relaxation"] = "coarse"
        proofs = [] if err.lower is None else [Proof(err.lower, _rounds_source(info))]
        if single.plan is not None and single.metrics is not None and single.metrics.feasible \
                and single.metrics.in_space:
            return PlanResult(self.name, status, ctx.objective, plan=single.plan, info=info, proofs=proofs,
                              message=f"{err}; returning the best single-device plan{proven}")
        return PlanResult(self.name, status, ctx.objective, info=info, proofs=proofs,
                          message=f"{err}; no plan yet{proven}")

    def more_proofs(self, out: PlanResult, instance: Instance, ctx: SolveContext) -> list[Proof]:
        """The floors of ``milp_planner.cost.floors`` (valid for every plan), remembered from the
        start (``_start_proven``); one not computed then gets a quarter second past the limit at
        most. None for bruteforce (its own enumeration proves what it proves), lp-round (its
        bound is the LP's) and a space proven infeasible."""
        if not self.exact or not self.anytime_capable or out.status == "infeasible":
            return []
        floor = lower_floor(instance, out.objective, deadline=ctx.deadline.at_least(FLOOR_GRACE_S))
        return [Proof(floor.value, floor.source)]

    def solve_graph(self, sg: StageGraph, ctx: SolveContext, ws: WarmStart) -> GraphSolve:
        """Solve one stage graph; ``ws`` is the DP warm start. This base version is the DP."""
        return solve_dp(sg, ctx.objective, ws)

    def explore(self, instance: Instance, ctx: SolveContext, solve_graph=None,
                incumbent: float | None = None, relaxation_credit: float = 0.0) -> Exploration:
        """Enumerate and solve the space in rounds until an optimum is certified
        (``milp_planner.engine.rounds.explore``); ``solve_graph`` defaults to this planner's;
        ``incumbent`` is the objective of a plan of the space that meets the caps;
        ``relaxation_credit``: the seconds the sub-fleet ladder took (``RoundSettings``)."""
        settings = RoundSettings(
            bounded=bool(self.options.get("bounded", True)),
            max_arcs=int(self.options.get("max_arcs", 3_000_000)),
            max_options=int(self.options.get("max_options", 250_000)),
            delta=float(self.options.get("delta", 0.0025)),
            round_budget=int(self.options.get("round_budget", 60_000)),  # arcs one round may enumerate
            growth=float(self.options.get("growth", 0.002)),
            symmetry=bool(self.options.get("symmetry", True)),
            relaxation=str(self.options.get("relaxation", "auto")),
            relaxation_credit=relaxation_credit,
            known_lower=float(self.options.get("known_lower", 0.0)),
        )
        return explore(instance, ctx, solve_graph or self.solve_graph, self.warm_start, settings, incumbent)

    def stage_graph(self, instance: Instance, ctx: SolveContext) -> StageGraph:
        """A stage graph that holds an optimum of the space (the DP's rounds of ``explore``),
        with ``sg.lower`` a proven lower bound; ``sg.complete`` is False when the rounds
        stopped early and the graph may miss better plans."""
        ex = self.explore(instance, ctx, solve_graph=ExactPlanner.solve_graph.__get__(self))
        sg = ex.graph
        sg.lower = ex.lower
        sg.complete = ex.certified or ex.infeasible or not math.isfinite(sg.outside)
        return sg

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        """The exact pipeline (docs/exact.md): the anytime start, a floor that may prove it at
        once, the sub-fleet ladder, the polish of the start's layouts, the rounds, and, when they
        stopped early, the improvement loop; ``Planner.solve`` then certifies the result."""
        start = self.anytime_start(instance, ctx)
        proven = self._start_proven(instance, ctx, start)
        if proven is None and ctx.objective == "memory" and self.memory_start(instance, ctx, start):
            proven = self._start_proven(instance, ctx, start)
        if proven is not None:
            return proven
        with memory_budget(self.memory_budget(), self.memory_headroom()):
            ladder = self.subfleet_ladder(instance, ctx, start)
            self.polish_start(instance, ctx, start)
            done = self._after_rounds(instance, ctx, start, ladder)
            res = done.result
            if not done.settled and res.plan is not None and (not done.memory_out or self._memory_released(res)):
                self.improve(instance, ctx, res, ladder, done.value)
            self._take_aside(instance, ctx, res, start)
            return self._with_ladder(res, ladder)

    def _after_rounds(self, instance: Instance, ctx: SolveContext, start: StartReport | None,
                      ladder: Ladder | None) -> "_Rounded":
        """The rounds' result (``explore``), or, when they stopped before any plan of their own,
        the anytime start's plan with the bound they proved. Holds none of their graphs."""
        try:
            ex = self.explore(instance, ctx, incumbent=start.start.value if start and start.start else None,
                              relaxation_credit=ladder.seconds if ladder is not None else 0.0)
        except SearchStopped as err:
            if start is None or start.start is None:
                raise
            info = {"anytime": start.info(), "plan_from": f"anytime start ({start.start.baseline})"}
            memory = isinstance(err, MemoryStop) or getattr(err, "memory", False)
            if memory:
                info["stopped_by"] = "memory budget"
            if _coarse_bound(err):
                info["relaxation"] = "coarse"
            if getattr(err, "threshold", None):
                info["threshold"] = err.threshold
            if getattr(err, "coarse", None):
                info["coarse"] = err.coarse
            status = "timeout" if isinstance(err, SpaceTimeout) else "feasible"
            res = PlanResult(self.name, status, ctx.objective, plan=start.start.plan, info=info,
                             proofs=[] if err.lower is None else [Proof(err.lower, _rounds_source(info))],
                             message=f"{err}; returning the anytime start ({start.start.baseline}'s plan) "
                                     "and the bound proven so far")
            err.__traceback__ = None  # its frames hold the rounds' graphs and tables
            return _Rounded(res, False, memory, start.start.value)
        return _Rounded(self._result(instance, ctx, ex, start), ex.certified or ex.infeasible, bool(ex.memory_out))

    def _start_proven(self, instance: Instance, ctx: SolveContext, start: StartReport | None) -> PlanResult | None:
        """The anytime start's plan, when a floor of ``milp_planner.cost.floors`` (valid for
        every plan) already proves it optimal (for example the flow floor on a fleet whose plan
        is one device behind a slow source link): no rounds are needed. Else None."""
        if start is None or start.start is None or not math.isfinite(start.start.value):
            return None
        floor = lower_floor(instance, ctx.objective, deadline=ctx.deadline.share(FLOOR_SHARE))
        if floor.value < start.start.value * (1 - OPTIMAL_GAP):
            return None
        return PlanResult(self.name, "feasible", ctx.objective, plan=start.start.plan,
                          proofs=[Proof(floor.value, floor.source)],
                          info={"stage_arcs": 0, "nodes": 0, "rounds": 0, "anytime": start.info(),
                                "plan_from": f"anytime start ({start.start.baseline})"},
                          message=f"the {floor.source} floor proves the anytime start ({start.start.baseline}'s "
                                  "plan) optimal; no plan space was enumerated")

    def memory_start(self, instance: Instance, ctx: SolveContext, start: StartReport | None) -> bool:
        """The memory objective: beam searches over restricted plan spaces
        (``milp_planner.engine.memory_search``) within ``MEMORY_SEARCH_SHARE`` of the time left (at most
        ``MEMORY_SEARCH_S``); a better plan becomes the anytime start's incumbent
        (``info["anytime"]["memory_search"]`` records what was tried). Only with the anytime
        start (option ``memory_search``). Returns whether the incumbent improved."""
        if start is None or not self.options.get("memory_search", True):
            return False
        ctx.report(phase="anytime start: memory search over restricted spaces", force=True)
        upper = start.start.value if start.start is not None else math.inf
        deadline = ctx.deadline.share(MEMORY_SEARCH_SHARE).within(MEMORY_SEARCH_S)
        found = memory_plans(instance, deadline=deadline, upper=upper)
        start.memory_search = {"tried": found.tried, "seconds": round(found.seconds, 3),
                               "best": found.value if found.plan is not None else None}
        if found.plan is None:
            return False
        start.start = Start(found.plan, found.value, f"memory search ({found.source})", False)
        ctx.report(phase=f"anytime start: memory search ({found.source})", incumbent=found.value, force=True)
        return True

    def polish_start(self, instance: Instance, ctx: SolveContext, start: StartReport | None) -> None:
        """The best plan built from the stage layouts of the start's plans (``milp_planner.engine.polish``)
        within ``POLISH_SHARE`` of the time left (at most ``POLISH_S``); a better plan becomes the
        incumbent (``info["anytime"]["polish"]`` records what was tried). Not over small spaces
        for latency and energy (``ladder_pays``), where the full search is quicker. Over the
        smallest spaces (at most ``POLISH_EXACT_OPTIONS``) the beam only, without the label
        search. Option ``polish_aside`` (period and memory over small spaces) keeps the polished
        plan aside (``StartReport.aside``): returned if the rounds end with nothing better, but
        not their incumbent. It was the default while the min-max label search's Lagrangian step
        was short (docs/exact.md "polish"); on ``fleet/vgg16-4dev-uncapped.yaml`` (104,008
        options) the label search finds 379.8 ms, the beam nothing better than 387.1 ms; option
        ``polish``."""
        if start is None or start.start is None or not self.options.get("polish", True):
            return
        max_options, symmetry = int(self.options.get("max_options", 250_000)), bool(self.options.get("symmetry", True))
        deadline = ctx.deadline.share(POLISH_SHARE).within(POLISH_S)
        if deadline.left() < MIN_TRY_S:
            return
        # the deadline bounds the space's size count too (16 devices' capacity cuts: 3 s)
        if not ladder_pays(instance, ctx.objective, max_options, symmetry, deadline=deadline):
            return
        ctx.report(phase="anytime start: combining the plans' stage layouts", force=True)
        small = small_space(instance, max_options, symmetry, deadline=deadline)
        exact = not (small and small_space(instance, max_options, symmetry, at_most=POLISH_EXACT_OPTIONS,
                                           deadline=deadline))
        found = polish(instance, ctx.objective, start.ranked_plans(), upper=start.start.value,
                       deadline=deadline, exact=exact)
        aside = small and bool(self.options.get("polish_aside", False))
        start.polish = {"tried": found.tried, "seconds": round(found.seconds, 3),
                        "best": found.value if found.plan is not None else None, "aside": aside}
        if found.plan is None:
            return
        polished = Start(found.plan, found.value, f"polish ({found.source})", False)
        if aside:
            start.aside = polished
            return
        start.start = polished
        ctx.report(phase=f"anytime start: polish ({found.source})", incumbent=found.value, force=True)

    @staticmethod
    def _take_aside(instance: Instance, ctx: SolveContext, res: PlanResult, start: StartReport | None) -> None:
        """The plan kept aside by ``polish_start``, when it beats the plan the search returns."""
        aside = start.aside if start is not None else None
        if aside is None or res.plan is None:
            return
        if aside.value < evaluate(res.plan, instance).value(ctx.objective) * (1 - STRICTLY_BETTER):
            _replace_plan(res, aside.plan, f"anytime start ({aside.baseline}, kept aside)",
                          f"the plan polished from the start's layouts ({aside.baseline}), kept aside, is better")

    def subfleet_ladder(self, instance: Instance, ctx: SolveContext, start: StartReport | None) -> Ladder | None:
        """The sub-fleet ladder (``planners.subfleet``) within ``LADDER_SHARE`` of the time limit;
        its best plan, if better, becomes the anytime start's incumbent. None: not run (no
        anytime start, option ``improve`` off, no time limit or one under ``LADDER_MIN_LIMIT_S``,
        or latency and energy over a small space, where the full search goes first: ``ladder_pays``)."""
        if start is None or not self.options.get("improve", True) or ctx.time_limit is None \
                or ctx.time_limit < LADDER_MIN_LIMIT_S:
            return None
        rungs = subfleet_ladder(instance, ctx.objective)
        if not rungs or not ladder_pays(instance, ctx.objective, int(self.options.get("max_options", 250_000)),
                                        bool(self.options.get("symmetry", True))):
            return None
        best = start.start.value if start.start else None
        ctx.report(phase="ladder: the fast baselines on each sub-fleet", incumbent=best, force=True)
        starts = rung_starts(instance, ctx.objective, rungs, best,
                             Deadline.after(RUNG_STARTS_SHARE * ctx.time_limit), seed=ctx.seed)
        deadline = Deadline.after(LADDER_SHARE * ctx.time_limit)
        if starts.best is not None:
            best = starts.best.value
            start.start = Start(starts.best.plan, starts.best.value, starts.best.source, False)
            ctx.report(phase=f"anytime start: {starts.best.source}", incumbent=best, force=True)
        rep = search_restricted(self, instance, ctx, rungs, best, deadline, "ladder", per_try=1.0,
                                stop_unsettled=True)
        settled = 0
        for t in rep.tried:
            if not t.settled:
                break
            settled += 1
        if rep.best is not None:
            start.start = Start(rep.best.plan, rep.best.value, rep.best.source, False)
            ctx.report(phase=f"anytime start: {rep.best.source}", incumbent=rep.best.value, force=True)
        return Ladder(rep, rungs[settled:], frozenset(t.key for t in rep.tried if t.settled), starts)

    def improve(self, instance: Instance, ctx: SolveContext, res: PlanResult, ladder: Ladder | None,
                value: float | None = None) -> None:
        """The improvement loop (``planners.subfleet``): after the full search stopped early,
        the time left goes to exact searches over restricted spaces; a better plan replaces
        ``res.plan`` (``info["plan_from"]`` says where it came from). The bound and the status
        rule stay those of the whole space."""
        if not self.options.get("improve", True) or not self.options.get("anytime", True):
            return
        if ctx.deadline.never:
            deadline = Deadline.after(NO_LIMIT_IMPROVE_S)
        else:
            deadline = ctx.deadline.shifted(-IMPROVE_MARGIN_S)
        if deadline.left() < MIN_TRY_S:
            return
        if value is None:
            m = evaluate(res.plan, instance)
            if not (m.in_space and m.feasible):
                return
            value = m.value(ctx.objective)
        unsettled = ladder.unsettled if ladder is not None else subfleet_ladder(instance, ctx.objective)
        spaces = neighbourhoods(instance, ctx.objective, res.plan, unsettled,
                                ladder.settled if ladder is not None else frozenset())
        rep = search_restricted(self, instance, ctx, spaces, value, deadline, "improve")
        res.info["improve"] = rep.info()
        if rep.best is not None:
            _replace_plan(res, rep.best.plan, f"improvement loop ({rep.best.source})",
                          f"the improvement loop found a better plan over {rep.best.source}")

    @staticmethod
    def _with_ladder(res: PlanResult, ladder: Ladder | None) -> PlanResult:
        if ladder is not None:
            res.info["ladder"] = ladder.report.info()
            if ladder.starts is not None:
                res.info["ladder"]["rung_starts"] = ladder.starts.info()
        return res

    def _memory_released(self, res: PlanResult) -> bool:
        """After the memory budget stopped the rounds: release what they held (their graph and
        tables must be unreferenced by now) and say whether the resident memory is back under
        ``IMPROVE_AFTER_MEMORY_SHARE`` of the budget, leaving room for the improvement loop's
        smaller searches (which stop at the budget too); if not, ``info["improve"]`` says why
        the loop was skipped."""
        rss, budget = release_memory(), active_budget() or self.memory_budget()
        if rss < IMPROVE_AFTER_MEMORY_SHARE * budget:
            return True
        res.info["improve"] = {"skipped": f"resident memory {rss / 1e9:.2f} GB after the rounds' release, above "
                                          f"{IMPROVE_AFTER_MEMORY_SHARE:.0%} of the {budget / 1e9:g} GB budget"}
        return False

    def memory_budget(self) -> int:
        """The memory budget in bytes (option ``memory_budget``)."""
        value = self.options.get("memory_budget")
        return DEFAULT_BUDGET if auto_budget(value) else parse_size(value)

    def memory_headroom(self) -> int:
        """The room the default budget keeps above what the process holds when the search
        begins (``DEFAULT_HEADROOM``); 0 for a budget the user gave (the whole process)."""
        return DEFAULT_HEADROOM if auto_budget(self.options.get("memory_budget")) else 0

    def anytime_start(self, instance: Instance, ctx: SolveContext) -> StartReport | None:
        """The fast baselines' best plan of the space (``planners.anytime_start``), or None when
        switched off (option ``anytime``) or the time limit leaves no time for it."""
        if not self.anytime_capable or not self.options.get("anytime", True):
            return None
        budget = start_budget(ctx.remaining(), len(instance.devices))
        if budget <= 0:
            return None
        ctx.report(phase="anytime start: the fast baselines", force=True)
        report = run_start(instance, ctx.objective, budget, seed=ctx.seed, time_limit=ctx.remaining())
        if report.start is not None:
            ctx.report(phase=f"anytime start: {report.start.baseline}", incumbent=report.start.value, force=True)
        return report

    def _result(self, instance: Instance, ctx: SolveContext, ex: Exploration, start: StartReport | None) -> PlanResult:
        obj = ctx.objective
        sg = ex.graph
        info = {"stage_arcs": len(sg.arcs) if sg else 0, "nodes": sg.n_nodes if sg else 0,
                "space_build_s": ex.build_s, "rounds": ex.rounds}
        if start is not None:
            info["anytime"] = start.info()
        if ex.memory_out:
            info["stopped_by"] = "memory budget"
        if ex.lower_source:
            info["relaxation"] = ex.lower_source
        if ex.threshold:
            info["threshold"] = ex.threshold
        if ex.coarse:
            info["coarse"] = ex.coarse
        if ex.found is not None:
            info.update(ex.found.info)
        if ex.infeasible:
            return PlanResult(self.name, "infeasible", obj, info=info, message=self._explain(sg, ctx))
        incumbent = start.start if start is not None else None
        if incumbent is not None and (ex.found is None or incumbent.value < ex.found.value * (1 - STRICTLY_BETTER)):
            return self._start_result(ex, incumbent, info, obj)
        if ex.found is None:  # nothing proven infeasible, but no plan either
            status = "timeout" if ex.timed_out else "error"
            msg = ("no plan found within the time limit" if ex.timed_out
                   else ex.memory_out or f"{self.name} found no plan that meets the caps; use --planner milp or cpsat")
            return PlanResult(self.name, status, obj, info=info, message=msg, proofs=_proofs(ex, info))
        found = ex.found
        plan = sg.plan_from_arcs(found.arcs)
        status = "timeout" if ex.timed_out else "feasible"
        res = PlanResult(self.name, status, obj, plan=plan, proofs=_proofs(ex, info),
                         info=info, message=self.stop_message(ex))
        res.solver_value, res.tolerance = found.value, found.tol
        return res

    def _start_result(self, ex: Exploration, start: Start, info: dict, obj: str) -> PlanResult:
        """The anytime start's plan: the rounds found nothing better (or proved it optimal)."""
        info["plan_from"] = f"anytime start ({start.baseline})"
        if ex.lower is not None and ex.lower >= start.value * (1 - OPTIMAL_GAP):
            msg = f"the rounds proved the anytime start ({start.baseline}'s plan) optimal"
        else:
            msg = f"{self.stop_message(ex)}; the anytime start ({start.baseline}'s plan) is the best plan found"
        status = "timeout" if ex.timed_out else "feasible"
        return PlanResult(self.name, status, obj, plan=start.plan, info=info, message=msg, proofs=_proofs(ex, info))

    def _explain(self, sg: StageGraph, ctx: SolveContext) -> str:
        try:
            return explain_infeasible(sg, ctx.deadline)
        except MemoryBudgetExceeded as err:
            return f"no plan of the space meets the caps (the explanation stopped: {err})"

    def stop_message(self, ex: Exploration) -> str:
        if ex.certified:
            return ""
        if ex.memory_out:
            return f"{ex.memory_out}; the bound is the best proven"
        if ex.refused:
            return f"{ex.refused}; the bound is the best proven"
        if ex.timed_out:
            return "the time limit stopped the search; the bound is the best proven"
        return "not certified: the plan space within the best plan is too large to enumerate"

    def warm_start(self, sg: StageGraph, objective: str, deadline: Deadline = NEVER,
                   prior: Fixing | None = None) -> WarmStart:
        """A plan to start the solvers from, and the DP's bound (``formulations.warmstart``)."""
        return dp_warm_start(sg, objective, deadline, prior,
                             capped_search=bool(self.options.get("capped_search", True)),
                             max_labels=int(self.options.get("max_labels", 2_000_000)),
                             lagrange_rounds=int(self.options.get("lagrange_rounds", 12)))


class DPPlanner(ExactPlanner):
    name = "dp"
    description = ("dynamic program over stage boundaries and tensor layouts (shortest paths for latency/energy; "
                   "label searches for memory caps, period and memory, within a label budget)")
    source = "this project (docs/model.md, lessons measured); shortest path over the stage graph"

    def stop_message(self, ex: Exploration) -> str:
        if ex.certified or ex.timed_out or ex.memory_out or ex.refused:
            return super().stop_message(ex)
        if ex.graph is not None and ex.graph.objective in MINMAX:
            if ex.graph.objective != "period" and ex.graph.instance.constraints.period_s is not None:
                return ("a period cap binds and dp's min-max label search does not carry it: this is the best "
                        "plan found within it and the bound is proven. Use --planner milp or cpsat to certify")
            return ("the min-max label search stopped at its label budget (max_labels); the plan is the best "
                    "found and the bound is proven")
        return ("caps bind: this is a feasible plan (the DP's, repaired); the bound is the DP without caps. "
                "Use --planner milp or cpsat to certify")


class MILPPlanner(ExactPlanner):
    name = "milp"
    description = "path-flow MILP over the stage graph (Pyomo + HiGHS), DP warm start and arc fixing"
    source = "this project; Pyomo model in formulations.milp"
    option_specs = ROUND_OPTIONS + ANYTIME_OPTIONS + (
        Option("solver", str, "appsi_highs", "Pyomo solver name", check=_solver_available),
        FIX_ARCS,
        LOG,
    )

    def solve_graph(self, sg: StageGraph, ctx: SolveContext, ws: WarmStart) -> GraphSolve:
        return solve_highs(sg, ctx, ws, solver_name=self.options.get("solver", "appsi_highs"),
                           fix_arcs=bool(self.options.get("fix_arcs", True)),
                           log=bool(self.options.get("log", False)))


class CPSATPlanner(ExactPlanner):
    name = "cpsat"
    description = "path-flow CP-SAT model over the stage graph (OR-Tools), integer ns/nJ/bytes, DP hint"
    source = "this project; CpModel in formulations.cpsat"
    option_specs = ROUND_OPTIONS + ANYTIME_OPTIONS + (FIX_ARCS,)

    def solve_graph(self, sg: StageGraph, ctx: SolveContext, ws: WarmStart) -> GraphSolve:
        return solve_cpsat(sg, ctx, ws, fix_arcs=bool(self.options.get("fix_arcs", True)))


class BruteForcePlanner(ExactPlanner):
    """Every plan of the space scored by the evaluator: the cross-check of the other planners.

    Without a time limit it refuses a space of more than ``max_plans`` plans (counted before
    it starts). With one it enumerates until the limit and then returns the best plan it has
    seen, status ``timeout`` and no bound: nothing is proven before every plan is seen.
    """

    name = "bruteforce"
    anytime_capable = False  # the cross-check: nothing but its own enumeration
    description = "enumerates every plan of the space and scores each with the evaluator (tiny instances)"
    source = "this project; the cross-check of the exact planners"
    option_specs = (Option("max_plans", int, 200_000, "most plans enumerated", ge=1, le=10**9),)

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        limit = int(self.options.get("max_plans", 200_000))
        obj = ctx.objective
        deadline = ctx.deadline
        n = len(instance.graph.layers)
        fl = max(1, instance.search.fusion_limit)
        try:
            options = {(b, e): stage_options(instance, b, e, deadline)
                       for b in range(n) for e in range(b, min(n, b + fl))}
        except TimeoutError:
            return PlanResult(self.name, "timeout", obj, message="the time limit ran out while listing the "
                              "stage options: no plan, and bruteforce proves no bound before it has seen every plan")
        total = _plan_count(options, n, fl)
        if total > limit and deadline.never:
            raise PlannerError(f"{instance.name}: {total} plans, more than max_plans {limit}; bruteforce is for "
                               "tiny instances (with --time-limit it returns the best plan seen in that time)")
        best_value, best_stack, seen = math.inf, None, 0
        for stack in _plans(options, n, fl):
            seen += 1
            m = evaluate_stages([_stage_tuple(o) for o in stack], instance)
            if m.feasible:
                v = m.value(obj)
                if v < best_value - 1e-15:
                    best_value, best_stack = v, list(stack)
            if seen % 256 == 0:
                ctx.report(phase=f"bruteforce: {seen} of {total} plans",
                           incumbent=best_value if best_stack is not None else None)
            if deadline.passed():
                break
        info = {"plans": seen, "plans_total": total}
        names = instance.device_names
        plan = Plan(instance.name, [o.to_stage(names) for o in best_stack]) if best_stack is not None else None
        if seen < total:
            what = "the best of them" if plan is not None else "none of them is feasible"
            return PlanResult(self.name, "timeout", obj, plan=plan, info=info,
                              message=f"the time limit stopped the enumeration after {seen} of {_amount(total)} plans; "
                                      f"this is {what}; bruteforce proves no bound before it has seen every plan")
        if plan is None:
            return PlanResult(self.name, "infeasible", obj, info=info,
                              message=f"none of the {seen} plans of the space is feasible")
        return PlanResult(self.name, "feasible", obj, plan=plan, info=info, proofs=[Proof(best_value, "enumeration")])


def _stage_tuple(o) -> tuple:
    """A stage option as the evaluator's stage tuple (parts in range order)."""
    parts = [(d, r) for d, r in zip(o.devices, o.ranges)]
    if o.axis != "none":
        parts.sort(key=lambda x: x[1])
    return (o.first, o.last, o.axis, parts)


def _amount(count: int) -> str:
    """A plan count for a message: digits grouped, or 3 significant digits when huge."""
    return f"{count:,}" if count < 10**12 else f"{float(count):.3g}"


def _plan_count(options: dict, n: int, fl: int) -> int:
    """How many plans the stage options make: plans from boundary b = sum over the stages
    b..e of their options times the plans from e + 1."""
    count = [0] * n + [1]
    for b in range(n - 1, -1, -1):
        count[b] = sum(len(options[(b, e)]) * count[e + 1] for e in range(b, min(n, b + fl)))
    return count[0]


def _plans(options: dict, n: int, fl: int):
    """Every plan as a list of stage options, depth first (the list is reused between plans)."""
    stack: list = []

    def rec(b):
        if b == n:
            yield stack
            return
        for e in range(b, min(n, b + fl)):
            for o in options[(b, e)]:
                stack.append(o)
                yield from rec(e + 1)
                stack.pop()

    yield from rec(0)

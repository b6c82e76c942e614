"""Certified Pareto fronts by the ε-constraint method with lexicographic steps, over the planners.

``pareto_front(instance, ["latency", "energy"])`` enumerates the non-dominated objective vectors
of the plan space with an exact planner (``milp`` by default):

- two objectives (f1, f2): minimise f1 subject to f2 <= eps; then minimise f2 subject to
  f1 <= f1* (the lexicographic step: the point is not weakly dominated); record the point and
  tighten eps strictly below its f2. A proven-infeasible step ends the loop: the front is
  complete (``certified``) when every step was solved to optimality.
- three objectives (f1, f2, f3): slices f3 <= c; in each slice the two-objective loop above, with a
  third lexicographic step (minimise f3 subject to f1 <= f1*, f2 <= f2*); the next slice's c is
  strictly below the largest f3 of the slice. Every non-dominated point appears in some slice.

What the loop formulates and returns is planner-free and lives in ``formulations.pareto``: the
caps expressed through the instance (``capped_instance``), so any planner that honours the
instance's caps can be used (``milp``, ``cpsat``; ``dp`` certifies a step only when its plan
happens to meet the caps); the next cap strictly below a point and the front's ``resolution``
(``next_cap``); the points, steps and front (``ParetoPoint``, ``BoundStep``, ``ParetoFront``);
the hypervolume and the lower bound set. A step whose solver returns a plan over the cap by the
solver's tolerance (a MILP's 1e-6) is retried a step lower and the range it skipped is not
excluded (the front is then not certified).

Memory: each ε-step runs under the step planner's ``memory_budget`` (option, default 2 GB of
resident memory, or 1 GB above what the process holds when the step begins; the lexicographic
graph steps too). After every step the front drops its
references to the step's graphs and models, runs the garbage collector and hands freed heap
back to the system (``release_memory``), so one step's peak is not carried into the next
(``BoundStep.rss_bytes`` records the resident memory after each step). A step that stops on the
budget without a plan ends the front (there is no point to take the next cap from); its
proven bound stays in the lower bound set.

Anytime: with ``time_limit`` the loop stops when it runs out and returns the points found so far,
each with its status and proven bound; ``certified`` is then false and a lower bound set is built
from the steps' proven bounds (a step with caps c2 (, c3) and bound b proves that no plan has
f2 <= c2 (, f3 <= c3) and f1 < b; see ``formulations.pareto.lower_bound_set``).

Lazy lexicographic steps (``lexicographic="lazy"``, or ``"auto"`` for two objectives whose second is
period or memory): no lexicographic step; the next ε-step shows the point non-dominated (its
proven bound is above the point's f1) or drops it (its optimum has the same f1 and a smaller f2).

With the default ``milp`` and an additive f1 (latency, energy), the lexicographic steps run over
the stage graph of the plans within f1 <= f1* (``lexicographic_solve``), not the whole space.

Research code that extends the model with its own constraints passes ``solve``: any callable
``solve(instance, objective, time_limit) -> PlanResult`` (status, plan, value, bound); the loop
only relies on it honouring the instance's caps and on ``status == "infeasible"`` with no plan
meaning "proven infeasible".

>>> from milp_planner.pareto import pareto_front                        # doctest: +SKIP
>>> front = pareto_front(instance, ["latency", "energy"], time_limit=600)  # doctest: +SKIP
>>> front.certified, [p.values for p in front.points]                   # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from milp_planner.deadline import Deadline
from formulations.budget import (DEFAULT_BUDGET, DEFAULT_HEADROOM, MemoryBudgetExceeded, auto_budget, memory_budget,
                                 parse_size, release_memory)
from formulations.pareto import (BoundStep, ParetoFront, ParetoPoint, capped_instance, check_objectives,
                                 hypervolume, lower_bound_set, next_cap, non_dominated, objective_value,
                                 reference_point, resolution)
from milp_planner.certificate import Proof, certify
from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.planners import PlanResult, get_planner

#: how a point is shown non-dominated (``pareto_front(lexicographic=...)``)
LEXICOGRAPHIC = ("auto", "steps", "lazy")
MINMAX_OBJECTIVES = ("memory", "period")
RETRIES = 2  # ε-steps retried with a tighter cap when the solver's plan breaks the cap by its tolerance
FLOOR_SHARE = 0.2  # of the time left: the one solve that proves f2's least value (``_Run.least``)
FLOOR_LIMIT_S = 60.0  # its seconds when the front has no time limit

Solve = Callable[[Instance, str, "float | None"], Any]


def planner_solve(planner: str = "milp", **options) -> Solve:
    """The default ``solve``: an exact planner of ``milp_planner.planners``."""
    p = get_planner(planner, **options)
    if "anytime" not in options and any(o.name == "anytime" for o in p.option_specs):
        # the fast baselines' start (about 0.3 s a solve) would dominate a front of many small
        # ε-steps; each step is exact anyway (-O anytime=true asks for it)
        p = get_planner(planner, anytime=False, **options)

    def solve(inst: Instance, objective: str, time_limit: float | None, known_lower: float = 0.0):
        q = p
        if known_lower > 0 and any(o.name == "known_lower" for o in p.option_specs):
            q = get_planner(planner, **{**p.options, "known_lower": known_lower})
        return q.solve(inst, objective=objective, time_limit=time_limit)

    solve.takes_known_lower = True
    return solve


CAP_FIELD = {"latency": "latency_s", "energy": "energy_j"}


def _step_budget(budget: int | None):
    """The memory budget of a lexicographic step: ``budget`` bytes of the whole process, or
    (None) the planners' default, 2 GB or ``DEFAULT_HEADROOM`` above what the process holds."""
    if budget is None:
        return memory_budget(DEFAULT_BUDGET, DEFAULT_HEADROOM)
    return memory_budget(budget)


def lexicographic_solve(instance: Instance, objective: str, within: str, time_limit: float | None, *,
                        max_arcs: int = 3_000_000, budget: int | None = None):
    """Minimise ``objective`` over the plans whose ``within`` (latency or energy, capped in
    ``instance``) is at most its cap: the lexicographic step of a front.

    The cap is the optimum of ``within`` (or just above), so few plans meet it: the stage graph
    enumerates exactly the plans whose ``within`` is at most the cap (``build_stage_graph`` with
    that upper bound: every such plan is in the graph); an additive ``objective`` is then
    minimised by the exact label search under the instance's caps (``_label_solve``), and
    otherwise (or when the search stops) the MILP of that graph by HiGHS. Returns a
    ``PlanResult`` (the evaluator's metrics, the solver's proven bound), or None when the graph
    cannot be built in time, in ``max_arcs`` or within the memory ``budget`` (bytes of resident
    memory, default the planners' 2 GB; the caller then uses its planner)."""
    import pyomo.environ as pyo

    from formulations.certificate import disagreement, finite
    from formulations.milp import build_milp, fresh_highs_threads, highs_options, objective_unscale, solution_arcs
    from formulations.stagegraph import SpaceTooLarge, build_stage_graph

    started = time.perf_counter()
    cap = float(getattr(instance.constraints, CAP_FIELD[within]))
    deadline = Deadline.after(time_limit)
    try:
        with _step_budget(budget):
            sg = build_stage_graph(instance, objective=within, upper=cap, drop_overflow=True, deadline=deadline,
                                   max_arcs=max_arcs)
    except (TimeoutError, SpaceTooLarge, PlannerError, MemoryBudgetExceeded):
        return None
    found = _label_solve(sg, instance, objective, deadline, budget)
    if found is not None:
        found.solve_time_s = time.perf_counter() - started
        return found
    m = build_milp(sg, objective)
    solver = pyo.SolverFactory("appsi_highs")
    fresh_highs_threads()
    solver.highs_options = {"threads": 1, **highs_options(len(m.ARCS))}
    left = None if deadline.never else max(1.0, deadline.left())
    results = solver.solve(m, load_solutions=False, timelimit=left, tee=False)
    tc = str(results.solver.termination_condition)
    info = {"lexicographic_graph_arcs": len(sg.arcs), "termination": tc}
    if tc in ("infeasible", "infeasibleOrUnbounded"):
        return PlanResult("milp", "infeasible", objective, info=info, solve_time_s=time.perf_counter() - started)
    try:
        solver.load_vars()
        arcs = solution_arcs(sg, m)
    except Exception:  # no primal solution (stopped before the first one)
        arcs = []
    bound = finite(results.problem.lower_bound, objective_unscale(m))
    if not arcs:
        return PlanResult("milp", "timeout", objective, bound=bound, info=info,
                          solve_time_s=time.perf_counter() - started)
    plan = sg.plan_from_arcs(arcs)
    plan.instance = instance.name
    metrics = evaluate(plan, instance)
    value = metrics.value(objective)
    solver_value = pyo.value(m.obj) * objective_unscale(m)
    if disagreement(solver_value, value):
        raise RuntimeError(f"lexicographic step: solver objective {solver_value!r} disagrees with the evaluator's "
                           f"{value!r} (a formulation bug; please report it)")
    if tc == "optimal" and bound is None:
        bound = value  # (HiGHS proved it within its gap of 1e-7; no bound reported)
    cert = certify(value, metrics.feasible, [Proof(bound, "milp")] if bound is not None else [],
                   stopped=tc != "optimal")
    return PlanResult("milp", cert.status, objective, plan=plan, value=value, bound=cert.bound,
                      bound_source=cert.bound_source, metrics=metrics, info=info,
                      solve_time_s=time.perf_counter() - started)


def _label_solve(sg, instance: Instance, objective: str, deadline: Deadline, budget: int | None):
    """The lexicographic step by the exact label search (``formulations.caps.capped_shortest_path``)
    over ``sg``, which holds every plan within the ``within`` cap: the best plan within every
    latency, energy, period and memory cap, or the proof that there is none. None when it does
    not apply (a min-max ``objective``) or stops (label budget, time, memory budget): the MILP
    decides then."""
    from formulations.caps import LabelLimit, additive_caps, capped_shortest_path
    from formulations.certificate import disagreement
    from formulations.warmstart import memory_caps

    if objective not in CAP_FIELD:
        return None
    try:
        with _step_budget(budget):
            found = capped_shortest_path(sg, objective, memory_caps(sg), additive=additive_caps(instance),
                                         deadline=deadline, max_labels=LEX_LABELS)
    except (LabelLimit, MemoryBudgetExceeded):
        return None
    info = {"lexicographic_graph_arcs": len(sg.arcs), "solved_by": "label search"}
    if not found.arcs:
        return PlanResult("milp", "infeasible", objective, info=info)
    plan = sg.plan_from_arcs(found.arcs)
    plan.instance = instance.name
    metrics = evaluate(plan, instance)
    if not metrics.feasible:  # a sum within a cap's slack that the evaluator finds just over it
        return None
    value = metrics.value(objective)
    if disagreement(found.value, value):
        raise RuntimeError(f"lexicographic step: label search value {found.value!r} disagrees with the evaluator's "
                           f"{value!r} (a formulation bug; please report it)")
    cert = certify(value, True, [Proof(found.value, "label search")])  # the exact search's optimum
    return PlanResult("milp", cert.status, objective, plan=plan, value=value, bound=cert.bound,
                      bound_source=cert.bound_source, metrics=metrics, info=info)


LEX_LABELS = 2_000_000  # labels of the lexicographic step's label search before the MILP takes over


@dataclass
class _Loop:
    """The state of one two-objective loop (``_Run.front2``) between its ε-steps."""

    f1: str
    f2: str
    tail: list[str]
    extra: dict[str, float]
    lazy: bool
    eps: float | None = None
    f2_floor: float | None = None  # proven: no plan within ``extra`` has f2 below it
    waiting: ParetoPoint | None = None  # lazy: the last point, not yet shown non-dominated
    waiting_status: str = ""
    retries: int = 0  # ε-steps retried a step lower
    broke_bound: float = math.inf
    broke_cap: float = -math.inf

    def settle(self, bound: float | None) -> None:
        """Confirm the waiting point when ``bound`` is above its f1; it waits no longer."""
        # the step after ``waiting`` proved f1 >= bound for every plan with a smaller f2
        if self.waiting is not None and bound is not None and bound > self.waiting.values[self.f1] * (1 + 1e-9):
            self.waiting.status = self.waiting_status
        self.waiting = None

    def retry_lower(self, bound: float | None) -> None:
        """Retry the ε-step a step lower after its plan broke the cap, remembering its bound and cap."""
        self.retries += 1
        self.broke_bound = min(self.broke_bound, bound if bound is not None else 0.0)
        self.broke_cap = max(self.broke_cap, self.eps)
        self.eps = next_cap(self.f2, self.eps)  # the same step, a step lower


class _Run:
    """The state of one front computation: deadline, solver, steps and counters."""

    def __init__(self, instance: Instance, solve: Solve, time_limit: float | None, max_points: int | None,
                 graph_lex: bool = False, lex_options: dict | None = None, lazy: bool = False):
        self.instance = instance
        self.lazy = lazy  # two objectives: the next ε-step, not a lexicographic step, shows a point non-dominated
        self.graph_lex = graph_lex  # lexicographic steps by ``lexicographic_solve`` (MILP)
        self.lex_options = lex_options or {}  # its max_arcs and memory budget
        self.solve_fn = solve
        self.uncapped_fn: Solve | None = None  # the steps without caps, when it differs (``pareto_front``)
        self.started = time.perf_counter()
        self.deadline = Deadline.after(time_limit)
        self.max_points = max_points
        self.steps: list[BoundStep] = []
        self.solves = 0
        self.stopped = ""  # why the run stopped early ("" when it was not)
        self.uncovered: list[dict] = []  # boxes no step excluded (ε-steps retried a step lower)
        self.last_time_s: float | None = None  # the last step's time and the memory after it
        self.last_rss: int | None = None

    def remaining(self) -> float | None:
        return self.deadline.seconds()

    def out_of_time(self) -> bool:
        return self.deadline.passed()

    def solve(self, caps: dict[str, float], objective: str, within: str | None = None,
              time_limit: float | None = None):
        """One step; ``within``: the additive objective the lexicographic step keeps at its optimum;
        ``time_limit``: at most this long (default: the time left)."""
        self.solves += 1
        inst = capped_instance(self.instance, caps)
        started = time.perf_counter()
        left = self.deadline.within(time_limit).seconds()
        res, known = None, 0.0
        if within in CAP_FIELD and self.graph_lex:
            res = lexicographic_solve(inst, objective, within, left, **self.lex_options)
            if res is None and self.out_of_time():  # no time left for the planner either
                res = PlanResult("milp", "timeout", objective, message="the time limit ran out")
        if res is None:
            try:
                fn = self.uncapped_fn if not caps and self.uncapped_fn is not None else self.solve_fn
                known = self.known_lower(caps, objective) if getattr(fn, "takes_known_lower", False) else 0.0
                res = fn(inst, objective, left, known_lower=known) if known > 0 else fn(inst, objective, left)
            except PlannerError as err:  # e.g. a step's space too large: the front keeps its points
                res = PlanResult("milp", "error", objective, message=str(err))
        if known > 0 and res.status != "infeasible" and (res.bound is None or res.bound < known):
            res.bound = known  # (a step stopped early, or refused, keeps the looser caps' proof)
        del inst
        self.last_time_s = time.perf_counter() - started
        self.last_rss = release_memory()  # the step's graphs and models are garbage now
        proven_infeasible = res.status == "infeasible" and res.plan is None
        ok = res.plan is not None and res.metrics is not None and res.metrics.feasible
        return res, proven_infeasible, ok

    def known_lower(self, caps: dict[str, float], objective: str) -> float:
        """The best bound of ``objective`` the steps so far proved over a superset of the plans
        within ``caps``: a step minimising it under caps each at least as loose (a cap it lacks
        is none). The ε-steps' optima only grow as the caps tighten, so the next step's rounds
        start there instead of crawling up from the relaxation's bound (0: none)."""
        best = 0.0
        for s in self.steps:
            if s.minimised != objective or s.bound is None or not math.isfinite(s.bound):
                continue
            if all(k in caps and caps[k] <= c for k, c in s.caps.items()):
                best = max(best, float(s.bound) * (1 - 1e-9))  # (a solver's bound may carry its tolerance)
        return best

    def record(self, caps: dict[str, float], minimised: str, bound: float | None, status: str,
               message: str = "") -> None:
        """Append the ε-step just solved to ``steps``, with its time and the memory after it."""
        self.steps.append(BoundStep(caps, minimised, bound, status, time_s=self.last_time_s,
                                    rss_bytes=self.last_rss, message=message))

    def least(self, objective: str, caps: dict[str, float]) -> float:
        """A proven lower bound of ``objective`` over the plans within ``caps`` (0 when it proves
        nothing), recorded as a step minimising ``objective``. Latency and energy: one solve of
        at most ``FLOOR_SHARE`` of the time left (``FLOOR_LIMIT_S`` without a time limit), which
        usually certifies. Memory and period: their floors over every plan
        (``milp_planner.cost.floors``, no search): on AutoDiCE's 4 boards a memory solve took
        32-118 s and proved no more."""
        if objective in MINMAX_OBJECTIVES:
            from milp_planner.cost.floors import lower_floor

            started = time.perf_counter()
            floor = lower_floor(capped_instance(self.instance, caps), objective,
                                deadline=self.deadline.share(FLOOR_SHARE).within(FLOOR_LIMIT_S))
            self.last_time_s = time.perf_counter() - started
            self.record(caps, objective, floor.value, "feasible", f"the {floor.source} floor (no search)")
            return float(floor.value)
        left = self.remaining()
        res, infeasible, ok = self.solve(caps, objective,
                                         time_limit=FLOOR_LIMIT_S if left is None else FLOOR_SHARE * left)
        if infeasible:
            self.record(caps, objective, math.inf, "infeasible")
            return math.inf
        bound = res.bound  # proven (an optimal value may still be above the bound by the gap's 1e-6)
        self.record(caps, objective, bound, res.status if ok else "error", "" if res.status == "optimal" else res.message)
        return 0.0 if bound is None else float(bound)

    def front2(self, f1: str, f2: str, tail: list[str], extra: dict[str, float],
               points: list[ParetoPoint]) -> bool:
        """The two-objective loop over (f1, f2) under the ``extra`` caps; lexicographic steps on
        f2 then ``tail``. Appends to ``points``; returns True when the loop ended by a proven
        infeasible step (the slice is complete, provided every step was optimal).

        Lazy (``self.lazy`` and no ``tail``): no lexicographic step; the next ε-step (f2 strictly
        below the point's) tells whether the point is weakly dominated (its optimum has the same
        f1, up to the caps' relative 1e-9: the point is dropped) or not (its proven bound is above
        the point's f1: confirmed). A point not yet confirmed when the run stops is ``feasible``.

        The last ε-step of a complete front asks for f2 below its least value, and proving that no
        plan exists there can take the exact planner as long as all the other steps (it enumerates
        the plans by f1). So after the first point the loop proves a lower bound of f2 once
        (``least``); an ε-step whose cap is below it is infeasible without a solve."""
        loop = _Loop(f1, f2, tail, extra, lazy=self.lazy and not tail)
        while True:
            if self._stops_early(points):
                return False
            caps = self._step_caps(loop)
            if caps is None:
                continue
            if loop.eps is not None and loop.eps < loop.f2_floor:
                self.last_time_s = 0.0  # no solve (the memory after it is the last step's)
                self._ends_infeasible(loop, caps, f"no plan has {f2} below {loop.f2_floor:.9g} (proven)")
                return True
            res, infeasible, ok = self.solve(caps, f1)
            if infeasible:
                self._ends_infeasible(loop, caps)
                return True
            bound, broke = self._record_step(caps, f1, res, ok)
            if broke and loop.eps is not None and loop.retries < RETRIES:
                loop.retry_lower(bound)
                continue
            if not ok:
                self._stop_without_plan(loop, caps, res, bound)
                return False
            bound = self._close_retries(loop, caps, res, bound)
            self._settle_waiting(loop, res, bound, points)
            chosen, status = self._lexicographic_steps(loop, caps, res)
            point = self._point(loop, res, chosen, status)
            points.append(point)
            if loop.lazy:
                loop.waiting, loop.waiting_status = point, status
            loop.eps = next_cap(f2, point.values[f2])

    def _stops_early(self, points: list[ParetoPoint]) -> bool:
        """Whether the run stops before the next ε-step (time limit or ``max_points``), noting why."""
        if self.out_of_time():
            self.stopped = self.stopped or "the time limit ran out"
            return True
        if self.max_points is not None and len(points) >= self.max_points:
            self.stopped = self.stopped or f"--points {self.max_points} reached"
            return True
        return False

    def _step_caps(self, loop: _Loop) -> dict[str, float] | None:
        """The next ε-step's caps, proving f2's floor before the first capped step (None: the
        time ran out while proving it)."""
        caps = dict(loop.extra)
        if loop.eps is not None:
            caps[loop.f2] = loop.eps
            if loop.f2_floor is None:
                loop.f2_floor = self.least(loop.f2, dict(loop.extra))
                if self.out_of_time():
                    return None
        return caps

    def _ends_infeasible(self, loop: _Loop, caps: dict[str, float], message: str = "") -> None:
        """Record the proven infeasible ε-step that ends the loop, and the range a retry left uncovered."""
        self.record(caps, loop.f1, math.inf, "infeasible", message)
        loop.settle(loop.broke_bound)
        if loop.retries and math.isfinite(loop.broke_bound):
            self.uncovered.append({loop.f2: (caps[loop.f2], loop.broke_cap), loop.f1: (loop.broke_bound, math.inf)})

    def _record_step(self, caps: dict[str, float], f1: str, res, ok: bool) -> tuple[float | None, bool]:
        """Record the ε-step just solved: its proven bound and whether its plan breaks the caps."""
        bound = res.bound if res.status != "optimal" else res.value
        broke = not ok and res.plan is not None and res.metrics is not None and not res.metrics.feasible
        if broke:
            # the solver's plan passes a cap by its tolerance: its bound holds for these caps
            # (the solver's feasible set holds the plans within them); its plan does not
            bound = res.bound
            why = "; ".join(res.metrics.violations)
            res.message = "its plan breaks the caps" + (f" ({why})" if why else "")
        self.record(caps, f1, bound, res.status if ok else "error",
                    "" if res.status == "optimal" and ok else res.message)
        return bound, broke

    def _stop_without_plan(self, loop: _Loop, caps: dict[str, float], res, bound: float | None) -> None:
        """End the run at an ε-step without a plan, naming the step and why."""
        # no plan within these caps, so no next cap: the front ends here; the step's
        # proven bound (if any) stays in the lower bound set
        loop.settle(None if bound is None else min(bound, loop.broke_bound))
        where = ", ".join(f"{o} <= {c:.6g}" for o, c in caps.items()) or "no cap"
        why = res.message or f"it ended {res.status} without a plan"
        number = sum(step.minimised == loop.f1 for step in self.steps)  # (not the f2 floor's step)
        self.stopped = self.stopped or f"the ε-step {number} ({where}) found no plan: {why}"

    def _close_retries(self, loop: _Loop, caps: dict[str, float], res, bound: float | None) -> float | None:
        """The step's bound after the retries that led to it (noting the range they left
        uncovered); resets the retries."""
        if loop.retries and loop.broke_bound < res.value * (1 - 1e-9):
            # a plan with f2 between this cap and the broken step's and f1 in [broke_bound,
            # this optimum) is not excluded: the front is not complete there
            self.uncovered.append({loop.f2: (caps[loop.f2], loop.broke_cap), loop.f1: (loop.broke_bound, res.value)})
        if loop.retries:
            bound = None if bound is None else min(bound, loop.broke_bound)
        loop.retries, loop.broke_bound, loop.broke_cap = 0, math.inf, -math.inf
        return bound

    def _settle_waiting(self, loop: _Loop, res, bound: float | None, points: list[ParetoPoint]) -> None:
        """Lazy: drop the waiting point if this step's plan dominates it, else settle it by ``bound``."""
        if loop.waiting is not None and res.value <= loop.waiting.values[loop.f1] * (1 + 1e-9):
            points.remove(loop.waiting)  # this plan has its f1 and a smaller f2
            loop.waiting = None
        loop.settle(bound)

    def _lexicographic_steps(self, loop: _Loop, caps: dict[str, float], res) -> tuple[Any, str]:
        """The plan after the lexicographic steps on f2 then the tail (none when lazy) and its status."""
        chosen, status = res, ("optimal" if res.status == "optimal" else res.status)
        fixed = {loop.f1: res.value}
        for obj in ([] if loop.lazy else [loop.f2] + loop.tail):
            if self.out_of_time():
                status = "timeout" if status == "optimal" else status
                break
            lex, _, lex_ok = self.solve({**caps, **fixed}, obj, within=loop.f1)
            if lex_ok and objective_value(lex.metrics, obj) < objective_value(chosen.metrics, obj):
                chosen = lex
            proven = lex_ok and lex.status == "optimal" and objective_value(chosen.metrics, obj) <= \
                lex.value + max(1e-9 * abs(lex.value), lex.info.get("tolerance", 0.0))
            if not proven and status == "optimal":
                # the lexicographic step was not proven: the point may be weakly dominated
                status = lex.status if lex.status not in ("optimal", "infeasible") else "feasible"
            fixed[obj] = objective_value(chosen.metrics, obj)
        return chosen, status

    def _point(self, loop: _Loop, res, chosen, status: str) -> ParetoPoint:
        """The front point of the ε-step ``res`` with the plan ``chosen`` by its lexicographic steps."""
        metrics = evaluate(chosen.plan, self.instance)
        values = {o: objective_value(metrics, o) for o in [loop.f1, loop.f2] + loop.tail}
        return ParetoPoint(values, chosen.plan, metrics, "feasible" if loop.lazy else status, loop.f1,
                           res.value if res.status == "optimal" else res.bound)



def _declares(planner: str, option: str) -> bool:
    return any(o.name == option for o in get_planner(planner).option_specs)


def _lex_options(planner: str, options: dict) -> dict:
    """The step planner's options that ``lexicographic_solve`` honours too (max_arcs and the
    memory budget), resolved with the planner's defaults (checked by ``planner_solve``)."""
    if planner != "milp":
        return {}
    resolved = get_planner(planner, **options).options
    out = {"max_arcs": int(resolved.get("max_arcs", 3_000_000))}
    if not auto_budget(resolved.get("memory_budget")):
        out["budget"] = parse_size(resolved["memory_budget"])
    return out


def pareto_front(instance: Instance, objectives, *, planner: str = "milp", solve: Solve | None = None,
                 time_limit: float | None = None, max_points: int | None = None,
                 reference: list[float] | None = None, planner_options: dict | None = None,
                 lexicographic: str = "auto") -> ParetoFront:
    """The Pareto front of ``instance`` over 2 or 3 of latency, energy, memory, period (see the module doc).

    ``solve`` replaces the planner (a callable ``(instance, objective, time_limit) -> PlanResult``);
    ``planner_options``: the step planner's options (``-O``: e.g. ``{"memory_budget": "8GB"}``,
    checked against its declared options; with ``milp`` the lexicographic graph steps honour
    ``max_arcs`` and ``memory_budget`` too);
    ``max_points`` stops after that many points; ``reference`` is the hypervolume's reference point
    (default: the nadir of the points found times 1.1). ``lexicographic``: ``steps`` (a
    lexicographic step after each ε-step), ``lazy`` (two objectives: the next ε-step decides,
    see ``_Run.front2``) or ``auto`` (lazy when the second of two objectives is period or
    memory, whose lexicographic MILPs are the slow ones).
    """
    objs = check_objectives(objectives)
    if lexicographic not in LEXICOGRAPHIC:
        raise PlannerError(f"--lexicographic: {lexicographic!r} is not one of {', '.join(LEXICOGRAPHIC)}")
    lazy = len(objs) == 2 and (lexicographic == "lazy" or (lexicographic == "auto" and objs[1] in MINMAX_OBJECTIVES))
    if reference is not None and len(reference) != len(objs):
        raise PlannerError(f"--reference: give {len(objs)} values, one per objective (got {len(reference)})")
    options = dict(planner_options or {})
    run = _Run(instance, solve or planner_solve(planner, **options), time_limit, max_points,
               graph_lex=solve is None and planner == "milp", lex_options=_lex_options(planner, options), lazy=lazy)
    if solve is None and "anytime" not in options and _declares(planner, "anytime"):
        # the steps without caps (the first ε-step, the floor of f2 of a first slice) are single
        # objective solves, where the fast baselines' start and a floor often prove the optimum in
        # seconds (DenseNet-121 on 4 boards, least energy: 309 s without the start, 3 s with it)
        run.uncapped_fn = planner_solve(planner, anytime=True, **options)
    found: list[ParetoPoint] = []
    if len(objs) == 2:
        complete = run.front2(objs[0], objs[1], [], {}, found)
    else:
        f1, f2, f3 = objs
        complete, slice_cap = True, None
        while True:
            extra = {} if slice_cap is None else {f3: slice_cap}
            mark = len(found)
            done = run.front2(f1, f2, [f3], extra, found)
            if not done:
                complete = False
                break
            if len(found) == mark:  # the slice is empty: no plan has f3 <= slice_cap
                break
            slice_cap = next_cap(f3, max(p.values[f3] for p in found[mark:]))
    points = non_dominated(found, objs)
    certified = complete and all(p.status == "optimal" for p in found) and not run.uncovered
    vectors = [tuple(p.values[o] for o in objs) for p in points]
    ref = list(reference) if reference is not None else reference_point(vectors)
    front = ParetoFront(instance.name, objs, planner if solve is None else "custom", points, certified,
                        steps=run.steps, reference=ref, solves=run.solves, resolution=resolution(objs))
    front.hypervolume = hypervolume(vectors, ref) if ref else None
    if not certified:
        front.bound_set = lower_bound_set(run.steps, objs)
        if ref and front.bound_set:
            front.bound_hypervolume = hypervolume([tuple(b[o] for o in objs) for b in front.bound_set], ref)
        reasons = [run.stopped] if run.stopped else []
        if run.uncovered:
            reasons.append(f"{len(run.uncovered)} ε-step(s) retried a step lower after the solver's plan broke "
                           "the cap by its tolerance; the range between the two caps is not excluded")
        if complete and not run.uncovered:
            reasons.append("some steps were not proven optimal")
        front.message = "; ".join(reasons)
    front.elapsed_s = time.perf_counter() - run.started
    return front

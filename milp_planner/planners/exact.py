"""Exact planners: ``dp``, ``milp`` (Pyomo + HiGHS), ``cpsat`` (OR-Tools) and ``bruteforce``.

All four search the instance's plan space (MODEL.md section 5). ``milp`` and ``cpsat`` solve
the path-flow models of ``formulations`` over the stage graph, warm-started by the DP; for
additive objectives (latency, energy) the DP's prefix and suffix bounds first remove every stage
arc that cannot be part of a plan better than the warm start (exact reduced-cost fixing).
``bruteforce`` enumerates every plan and scores each with the evaluator itself: it shares no
pricing code with the others, which makes it the cross-check of the tests.

The certificate (``PlanResult``): status, the evaluator's objective of the plan, the best proven
bound, the gap, the solve time and the space. A solver objective that disagrees with the
evaluator beyond 1e-6 relative (plus CP-SAT's stated rounding tolerance) raises an error:
that is a bug, not a result.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from formulations.caps import Fixing, LabelLimit, PathArrays, capped_shortest_path, lagrangian_fixing
from formulations.dp import ADDITIVE, arc_cost, prefix_suffix, shortest_path, terminal_cost
from formulations.relaxation import layout_bounds
from formulations.stagegraph import SpaceTooLarge, StageGraph, build_stage_graph, stage_options

from milp_planner.errors import PlannerError
from milp_planner.cost.evaluator import evaluate_stages
from milp_planner.instance import Instance
from milp_planner.planners.base import Planner, PlanResult, SolveContext, space_dict

REL_TOL = 1e-6


class SpaceTimeout(Exception):
    """The time limit ran out while enumerating the space; ``lower`` is what was proven."""

    def __init__(self, lower: float | None):
        super().__init__("the time limit ran out while enumerating the plan space")
        self.lower = lower


@dataclass
class GraphSolve:
    """What a solver found in one stage graph."""

    arcs: list[int]  # the best plan found ([] for none)
    value: float | None  # its objective as the solver computes it
    bound: float | None  # proven lower bound over the graph
    optimal: bool  # proven optimal over the graph
    infeasible: bool = False  # proven: no plan of the graph meets the caps (at or below ``cutoff``)
    cutoff: float | None = None  # the solve looked only at plans no worse than this
    stopped: bool = False  # the solver ran out of time
    tol: float = 0.0  # absolute tolerance of the solver's integer scaling
    info: dict = field(default_factory=dict)


class WarmStart(NamedTuple):
    """The DP's plan for one stage graph, its value, the DP bound (None: not a bound) and
    whether the plan meets the caps; ``capped_exact``: it is the best plan within the memory
    caps no worse than the round's bound, or there is none (``arcs`` empty, or a plan within
    the caps above the bound); ``fixing``: the
    Lagrangian bounds of the memory caps on every arc, when the caps bind."""

    arcs: list[int]
    value: float
    bound: float | None
    feasible: bool
    capped_exact: bool = False
    fixing: Fixing | None = None
    support: tuple[float, np.ndarray] | None = None  # (a bound, the arcs every capped plan within it uses)


@dataclass
class Exploration:
    """The outcome of the rounds of ``ExactPlanner.explore``."""

    graph: StageGraph | None  # the graph of the best plan (or the last graph)
    found: GraphSolve | None  # the best plan over all rounds
    lower: float | None  # proven lower bound over the whole space
    certified: bool
    rounds: int
    build_s: float
    timed_out: bool = False
    infeasible: bool = False


class ExactPlanner(Planner):
    exact = True

    def solve(self, instance, **kw):
        try:
            return super().solve(instance, **kw)
        except SpaceTimeout as err:
            return self._fallback(instance, err, kw)

    def _fallback(self, instance, err: SpaceTimeout, kw) -> PlanResult:
        """Out of time before any plan: the best single-device plan (always in the space),
        with the bound proven so far."""
        from milp_planner.planners import get_planner

        obj = kw.get("objective") or instance.objective
        proven = f"; proven bound {err.lower:.6g}" if err.lower else ""
        res = get_planner("offload").solve(instance, objective=obj)
        if res.plan is not None and res.metrics is not None and res.metrics.feasible and res.metrics.in_space:
            res.planner, res.status, res.info = self.name, "timeout", {}
            res.message = f"{err}; returning the best single-device plan{proven}"
        else:
            res = PlanResult(self.name, "timeout", obj, message=f"{err}; no plan yet{proven}")
            res.space = space_dict(instance)
        res.bound = err.lower if err.lower is None or res.value is None else min(err.lower, res.value)
        res.solve_time_s = kw.get("time_limit") or 0.0
        return res

    def solve_graph(self, sg: StageGraph, ctx: SolveContext, ws) -> GraphSolve:
        """Solve one stage graph; ``ws`` is the DP warm start. This base version is the DP:
        optimal over the graph when the DP's plan meets the caps, or when the warm start is
        the constrained search's (the best plan within the memory caps, or none)."""
        arcs, value, dp_bound, feasible = ws[:4]
        if ws.capped_exact:
            cut = _cutoff(sg, ctx.objective, ws)
            if not feasible:
                return GraphSolve([], None, None, False, infeasible=True, cutoff=cut)
            if cut is not None and value > _loose(cut):  # none within the cutoff, this one above it
                return GraphSolve(arcs, value, None, False, infeasible=True, cutoff=cut)
            return GraphSolve(arcs, value, value, True)
        if not feasible:
            return GraphSolve([], None, dp_bound, False)
        optimal = dp_bound is not None and value <= dp_bound * (1 + REL_TOL) + 1e-15
        return GraphSolve(arcs, value, dp_bound, optimal)

    def explore(self, instance: Instance, ctx: SolveContext, solve_graph=None) -> Exploration:
        """Enumerate and solve the space in rounds until an optimum is certified.

        Latency and energy: each round enumerates the plans within an upper bound (starting
        just above the layout relaxation's bound) and solves that graph. A plan no worse than
        every plan left outside the graph (``sg.outside``) is optimal over the whole space.
        Otherwise the bound grows in small steps (the number of plans within a bound grows
        very fast near the optimum) and never beyond the best plan found, so the round after
        a feasible plan is found holds every better plan. Each round proves
        ``min(graph bound, sg.outside)`` a lower bound. Period and memory are not additive:
        one round over the whole space.
        """
        solve_graph = solve_graph or self.solve_graph
        obj = ctx.objective
        deadline = None if ctx.time_limit is None else ctx.started + ctx.time_limit
        max_arcs = int(self.options.get("max_arcs", 3_000_000))
        bounded = obj in ADDITIVE and self.options.get("bounded", True)
        try:
            bounds = (layout_bounds(instance, obj, deadline=deadline,
                                    max_options=int(self.options.get("max_options", 250_000)))
                      if bounded else None)
        except TimeoutError:
            raise SpaceTimeout(None) from None
        lower = float(bounds.to_go[0].min()) if bounded else None
        upper = lower * (1 + float(self.options.get("delta", 0.0025))) if bounded else math.inf
        budget = int(self.options.get("round_budget", 60_000))  # arcs one round may enumerate
        growth, prev_arcs = float(self.options.get("growth", 0.002)), 0
        best: tuple[StageGraph, GraphSolve] | None = None
        rounds, build_s = 0, 0.0
        memo: dict = {}  # arcs priced by earlier rounds
        prior = None  # the memory caps' multipliers of the last round that had them
        done_upper = lower  # the bound of the last round that finished
        while True:
            rounds += 1
            ctx.report(phase=f"space within {upper:.6g}" if math.isfinite(upper) else "space", bound=lower,
                       force=True)
            cap = max_arcs if not math.isfinite(upper) else min(max_arcs, max(budget, 4 * prev_arcs))
            try:
                sg = build_stage_graph(instance, max_arcs=cap, progress=lambda **k: ctx.report(**k),
                                       deadline=deadline, objective=obj if bounded else "latency",
                                       upper=upper if math.isfinite(upper) else None, drop_overflow=True,
                                       bounds=bounds, memo=memo)
            except TimeoutError:
                if best is None:
                    raise SpaceTimeout(lower) from None
                return Exploration(best[0], best[1], lower, False, rounds, build_s, timed_out=True)
            except SpaceTooLarge:
                if math.isfinite(upper) and cap < max_arcs and upper > done_upper * (1 + 1e-7):
                    # too many plans within this bound for one round: try halfway back
                    upper = done_upper + (upper - done_upper) / 2 if math.isfinite(upper) else 2 * done_upper
                    growth = max(growth / 4, 1e-4)
                    continue
                if best is None:
                    raise
                return Exploration(best[0], best[1], lower, False, rounds, build_s)
            except PlannerError:
                if best is None:
                    raise
                return Exploration(best[0], best[1], lower, False, rounds, build_s)
            done_upper = upper
            build_s += sg.build_time_s
            whole = not math.isfinite(sg.outside)  # nothing left out but plans that break a cap
            ws = self.warm_start(sg, obj, deadline, prior=prior)
            prior = ws.fixing or prior
            if ws[2] is None and not ws[0]:  # no plan within `upper`, caps aside
                if whole:
                    return Exploration(sg, None, lower, False, rounds, build_s, infeasible=True)
                lower = max(lower, sg.outside)
            else:
                found = solve_graph(sg, ctx, ws)
                if found.arcs and (best is None or found.value < best[1].value):
                    best = (sg, found)
                # what the graph proves: nothing in it (infeasible), or the solver's bound
                in_graph = (found.cutoff if found.cutoff is not None else math.inf) if found.infeasible else found.bound
                if found.cutoff is not None and in_graph is not None:
                    in_graph = min(in_graph, found.cutoff)  # plans above the cutoff were not looked at
                if bounded:
                    lower = max(lower, min(sg.outside, in_graph if in_graph is not None else -math.inf))
                elif in_graph is not None and math.isfinite(in_graph):
                    lower = in_graph
                if found.optimal and found.arcs and found.value <= sg.outside * (1 + 1e-9):
                    return Exploration(sg, found, lower if bounded else found.bound, True, rounds, build_s)
                if found.infeasible and whole and found.cutoff is None:
                    return Exploration(sg, None, lower, False, rounds, build_s, infeasible=True)
                if found.stopped or (whole and found.cutoff is None) or not (found.optimal or found.infeasible):
                    # out of time, the whole space solved, or a solver that cannot prove more
                    return Exploration(best[0] if best else sg, best[1] if best else None, lower, False,
                                       rounds, build_s, timed_out=found.stopped)
            if deadline is not None and time.perf_counter() > deadline:
                if best is None:
                    raise SpaceTimeout(lower)
                return Exploration(best[0], best[1], lower, False, rounds, build_s, timed_out=True)
            # the next bound: past every pruned partial plan's floor; the step doubles while
            # the graphs grow slowly and halves when they grow fast (near the optimum the
            # number of plans within a bound grows very fast)
            growth = growth * 2 if sg.forward_arcs <= 2 * prev_arcs + 1000 else max(growth / 2, 1e-4)
            prev_arcs = sg.forward_arcs
            upper = max(sg.outside, upper * (1 + growth))
            if best is not None:
                upper = min(upper, best[1].value)
            if upper > 2 * max(lower, 1e-12):
                upper = math.inf

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
        ex = self.explore(instance, ctx)
        obj = ctx.objective
        sg = ex.graph
        info = {"stage_arcs": len(sg.arcs), "nodes": sg.n_nodes, "space_build_s": ex.build_s,
                "rounds": ex.rounds}
        if ex.found is not None:
            info.update(ex.found.info)
        if ex.infeasible:
            return PlanResult(self.name, "infeasible", obj, info=info, message=explain_infeasible(sg, ctx))
        if ex.found is None:  # nothing proven infeasible, but no plan either
            status = "timeout" if ex.timed_out else "error"
            msg = ("no plan found within the time limit" if ex.timed_out
                   else f"{self.name} found no plan that meets the caps; use --planner milp or cpsat")
            return PlanResult(self.name, status, obj, bound=ex.lower, info=info, message=msg)
        found = ex.found
        plan = sg.plan_from_arcs(found.arcs)
        status = "optimal" if ex.certified else ("timeout" if ex.timed_out else "feasible")
        res = PlanResult(self.name, status, obj, plan=plan, bound=found.value if ex.certified else ex.lower,
                         info=info, message=self.stop_message(ex))
        res._solver_value, res._tol = found.value, found.tol
        return res

    def stop_message(self, ex: Exploration) -> str:
        if ex.certified:
            return ""
        if ex.timed_out:
            return "the time limit stopped the search; the bound is the best proven"
        return "not certified: the plan space within the best plan is too large to enumerate"

    def finish(self, res: PlanResult) -> PlanResult:
        """Check the solver's objective against the evaluator's (a mismatch is a bug)."""
        sv = getattr(res, "_solver_value", None)
        if sv is not None:
            self.check_agreement(sv, res, tol_abs=getattr(res, "_tol", 0.0))
            if res.status == "optimal":
                res.bound = min(res.value, res.bound if res.bound is not None else res.value)
            elif res.bound is not None and res.value is not None:
                res.bound = min(res.bound, res.value)
        return res

    def warm_start(self, sg: StageGraph, objective: str, deadline: float | None = None,
                   prior: Fixing | None = None) -> "WarmStart":
        """A plan to start the solvers from, and the DP's bound.

        The DP runs without the caps, except that arcs which alone overflow a device's memory
        are dropped (no feasible plan contains them), so its value bounds additive objectives.
        When its plan still breaks a memory cap, the duals of the path-flow LP bound every arc
        and every partial plan within the caps (``formulations.caps``), and a
        resource-constrained shortest path pruned by them finds the best plan within the caps
        among those no worse than the round's bound (``capped_exact``: that plan, or none, is
        exact); past its label budget or the deadline, a few Lagrangian rounds price the
        overflowing devices' memory into the arc costs instead. ``prior``: an earlier round's
        ``fixing``, whose multipliers shrink this round's LP.
        """
        inst = sg.instance
        dp_obj = objective if objective in ADDITIVE else "latency"
        base = arc_cost(sg, dp_obj)
        caps = [dev.memory_bytes if inst.constraints.memory else None for dev in inst.devices]
        cost = [math.inf if _overflows(arc, caps) else c for arc, c in zip(sg.arcs, base)]
        term = terminal_cost(sg, dp_obj)
        try:
            arcs, dp_value = shortest_path(sg, dp_obj, cost=cost, term=term)
        except (KeyError, ValueError):
            return WarmStart([], math.inf, None, False)
        if not math.isfinite(dp_value):
            return WarmStart([], math.inf, None, False)
        bound = dp_value if objective in ADDITIVE else None
        metrics = evaluate_stages(_stages(sg, arcs), inst)
        best = (arcs, metrics) if metrics.feasible else None
        only_memory = inst.constraints.latency_s is None and inst.constraints.energy_j is None
        fixing = None
        if best is None and objective in ADDITIVE and only_memory and self.options.get("capped_search", True):
            partial = sg.upper is not None and math.isfinite(sg.outside)
            upper = sg.upper if partial else math.inf
            arrays = PathArrays(sg)  # shared by the LP's bounds and every search below
            fixing = lagrangian_fixing(sg, objective, caps, arrays=arrays, prior=prior, upper=upper)
            bound = max(bound, fixing.bound)
            if fixing.incumbent is not None:
                upper = min(upper, fixing.incumbent[1])
            now = time.perf_counter()
            # at most a third of the time left: the solvers need the rest if it gives up
            until = None if deadline is None else now + max(0.0, deadline - now) / 3
            found = None
            if fixing.bound <= _loose(upper):
                # deepening: a search within a smaller bound keeps far fewer labels, and finds
                # the optimum whenever it lies there; each empty search proves its bound
                lo = fixing.bound
                steps = [lo + (upper - lo) / 4, upper] if math.isfinite(upper) else [upper]
                for step in steps:
                    try:
                        found = capped_shortest_path(
                            sg, objective, caps, upper=step, deadline=until, fixing=fixing, arrays=arrays,
                            max_labels=int(self.options.get("max_labels", 2_000_000)))
                    except LabelLimit:
                        found = False
                        break
                    if found.arcs:
                        upper = step  # the support holds for this bound
                        break
                    bound = max(bound, step)  # no plan of the graph within the caps up to here
            if found is None or (found and not found.arcs):  # nothing within the caps and the bound
                if fixing.incumbent is None:
                    return WarmStart([], math.inf, bound, False, capped_exact=True, fixing=fixing)
                # the Lagrangian's plan meets the caps above the bound: the next round's
                return WarmStart(fixing.incumbent[0], fixing.incumbent[1], bound, True, capped_exact=True,
                                 fixing=fixing)
            if found:
                return WarmStart(found.arcs, found.value, bound, True, capped_exact=True, fixing=fixing,
                                 support=(upper, found.support))
            if fixing.incumbent is not None:
                best = (fixing.incumbent[0], evaluate_stages(_stages(sg, fixing.incumbent[0]), inst))
        lam = [0.0] * len(inst.devices)
        scale = max(dp_value, 1e-12)
        for _ in range(int(self.options.get("lagrange_rounds", 12))):
            if best is not None:
                break
            for d, dev in enumerate(inst.devices):
                cap = caps[d]
                if cap and metrics.memory_bytes[dev.name] > cap:
                    lam[d] = lam[d] * 2 if lam[d] else scale / cap
            priced = [c + sum(lam[d] * (arc.weights[d] + arc.working[d]) for d in range(len(lam)) if lam[d])
                      if math.isfinite(c) else c for arc, c in zip(sg.arcs, cost)]
            arcs, _ = shortest_path(sg, dp_obj, cost=priced, term=term)
            metrics = evaluate_stages(_stages(sg, arcs), inst)
            if metrics.feasible:
                best = (arcs, metrics)
        if best is None:
            return WarmStart(arcs, metrics.value(objective), bound, False, fixing=fixing)
        return WarmStart(best[0], best[1].value(objective), bound, True, fixing=fixing)

    def check_agreement(self, solver_value: float, result: PlanResult, tol_abs: float = 0.0) -> None:
        ev = result.value
        if ev is None or solver_value is None:
            return
        if abs(ev - solver_value) > REL_TOL * max(abs(ev), 1e-12) + tol_abs:
            raise RuntimeError(
                f"{self.name}: solver objective {solver_value!r} disagrees with the evaluator's {ev!r} "
                "(a formulation bug; please report it)")


def _stages(sg: StageGraph, arcs):
    out = []
    for a in sorted(arcs, key=lambda a: sg.arcs[a].option.first):
        o = sg.arcs[a].option
        parts = [(d, r) for d, r in zip(o.devices, o.ranges)]
        if o.axis != "none":
            parts.sort(key=lambda x: x[1])
        out.append((o.first, o.last, o.axis, parts))
    return out


def _overflows(arc, caps) -> bool:
    return any(cap is not None and arc.weights[d] + arc.working[d] > cap for d, cap in enumerate(caps))


def _cutoff(sg: StageGraph, objective: str, ws) -> float | None:
    """The value a solver of one round's graph needs to look below: the warm start's when it
    meets the caps, else the round's bound (a plan above it is looked for in the next round,
    which holds every plan up to a larger bound). None: look at every plan."""
    if objective not in ADDITIVE:
        return None
    _, ws_value, _, ws_feasible = ws[:4]
    partial = sg.upper is not None and math.isfinite(sg.outside)  # the round left plans out
    cut = min(ws_value if ws_feasible else math.inf, sg.upper if partial else math.inf)
    return cut if math.isfinite(cut) else None


def _loose(v: float) -> float:
    return v * (1 + 1e-9) + 1e-12


def _pruned_arcs(sg: StageGraph, objective: str, upper: float | None, fixing: Fixing | None = None,
                 support: tuple[float, np.ndarray] | None = None) -> list[int]:
    """Arcs that can be part of a feasible plan no worse than ``upper``.

    An arc that alone overflows a device's memory is never feasible; with an ``upper`` bound
    on an additive objective, an arc whose best path (DP prefix + arc + suffix) exceeds it
    cannot be optimal either (exact reduced-cost fixing), nor can one whose Lagrangian bound
    under the memory caps (``fixing``) exceeds it, nor one outside the ``support`` of the
    capped label search (no plan within the caps and its bound uses it).
    """
    inst = sg.instance
    caps = [dev.memory_bytes if inst.constraints.memory else None for dev in inst.devices]
    ok = [not _overflows(arc, caps) for arc in sg.arcs]
    if upper is None or objective not in ADDITIVE:
        return [a for a in range(len(sg.arcs)) if ok[a]]
    if fixing is not None:
        ok = [o and bool(f) for o, f in zip(ok, fixing.keep(upper))]
    if support is not None and upper <= support[0]:
        ok = [o and bool(f) for o, f in zip(ok, support[1])]
    cost = [c if ok[a] else math.inf for a, c in enumerate(arc_cost(sg, objective))]
    pre, suf = prefix_suffix(sg, cost, terminal_cost(sg, objective))
    slack = upper * (1 + 1e-9) + 1e-12
    return [a for a, arc in enumerate(sg.arcs) if ok[a] and pre[arc.tail] + cost[a] + suf[arc.head] <= slack]


class DPPlanner(ExactPlanner):
    name = "dp"
    description = ("dynamic program over stage boundaries and tensor layouts (exact for latency/energy; "
                   "with memory caps through a resource-constrained search within a label budget)")
    source = "this project (MODEL.md, lessons measured); shortest path over the stage graph"

    def stop_message(self, ex: Exploration) -> str:
        if ex.certified or ex.timed_out:
            return super().stop_message(ex)
        if ex.found is not None and ex.found.bound is None:
            return "dp is exact for latency and energy only; this plan minimises latency"
        return ("caps bind: this is a feasible plan (the DP's, repaired); the bound is the DP without caps. "
                "Use --planner milp or cpsat to certify")

    def solve(self, instance, **kw):
        return self.finish(super().solve(instance, **kw))


class MILPPlanner(ExactPlanner):
    name = "milp"
    description = "path-flow MILP over the stage graph (Pyomo + HiGHS), DP warm start and arc fixing"
    source = "this project; Pyomo model in formulations.milp"

    def solve_graph(self, sg: StageGraph, ctx: SolveContext, ws) -> GraphSolve:
        import pyomo.environ as pyo

        from formulations.milp import build_milp, fresh_highs_threads, objective_unscale, solution_arcs

        obj = ctx.objective
        ws_arcs, ws_value, dp_bound, ws_feasible = ws[:4]
        cutoff = _cutoff(sg, obj, ws)
        keep = _pruned_arcs(sg, obj, cutoff, ws.fixing, ws.support) if self.options.get("fix_arcs", True) else None
        ctx.report(phase="model", incumbent=ws_value if ws_feasible else None, bound=dp_bound, force=True)
        if keep is not None and not set(sg.out_arcs[sg.source]) & set(keep):  # nothing within the cutoff
            return GraphSolve([], None, None, False, infeasible=True, cutoff=cutoff, info={"model_arcs": 0})
        m = build_milp(sg, obj, arcs=keep)
        if cutoff is not None:
            m.cutoff = pyo.Constraint(expr=getattr(m, obj) <= _loose(cutoff))
        if ws_feasible:
            chosen = set(ws_arcs)
            for a in m.ARCS:
                m.x[a].value = 1 if a in chosen else 0
        name = self.options.get("solver", "appsi_highs")
        solver = pyo.SolverFactory(name)
        remaining = ctx.remaining()
        kw = {}
        if name == "appsi_highs":
            # the legacy solve() resets the config from its arguments: pass them there
            fresh_highs_threads()
            solver.highs_options = {"threads": max(1, ctx.threads), "mip_rel_gap": 1e-7, "mip_abs_gap": 0.0}
            kw = {"timelimit": None if remaining is None else max(1.0, remaining),
                  "tee": bool(self.options.get("log", False)), "warmstart": ws_feasible}
        results = solver.solve(m, load_solutions=False, **kw)
        tc = str(results.solver.termination_condition)
        info = {"model_arcs": len(m.ARCS), "termination": tc}
        if tc in ("infeasible", "infeasibleOrUnbounded"):
            return GraphSolve([], None, None, False, infeasible=True, cutoff=cutoff, info=info)
        try:
            if name == "appsi_highs":
                solver.load_vars()
            else:
                m.solutions.load_from(results)
            arcs = solution_arcs(sg, m)
        except Exception:  # no primal solution available (e.g. stopped before the first one)
            arcs = []
        if not arcs and ws_feasible:
            arcs = list(ws_arcs)
        bound = _finite(results.problem.lower_bound, objective_unscale(m))
        if dp_bound is not None:
            bound = dp_bound if bound is None else max(bound, dp_bound)
        optimal = tc == "optimal"
        value = sg.path_value(arcs, obj) if arcs else None
        return GraphSolve(arcs, value, bound, optimal and bool(arcs), stopped=not optimal, info=info)

    def solve(self, instance, **kw):
        return self.finish(super().solve(instance, **kw))


def _finite(v, scale=1.0):
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v * scale if math.isfinite(v) else None


class CPSATPlanner(ExactPlanner):
    name = "cpsat"
    description = "path-flow CP-SAT model over the stage graph (OR-Tools), integer ns/nJ/bytes, DP hint"
    source = "this project; CpModel in formulations.cpsat"

    def solve_graph(self, sg: StageGraph, ctx: SolveContext, ws) -> GraphSolve:
        from ortools.sat.python import cp_model

        from formulations.cpsat import build_cpsat

        obj = ctx.objective
        ws_arcs, ws_value, dp_bound, ws_feasible = ws[:4]
        cutoff = _cutoff(sg, obj, ws)
        keep = _pruned_arcs(sg, obj, cutoff, ws.fixing, ws.support) if self.options.get("fix_arcs", True) else None
        if keep is not None and not set(sg.out_arcs[sg.source]) & set(keep):  # nothing within the cutoff
            return GraphSolve([], None, None, False, infeasible=True, cutoff=cutoff, info={"model_arcs": 0})
        cm = build_cpsat(sg, obj, arcs=keep)
        if cutoff is not None:
            cm.model.Add(getattr(cm, obj) <= math.ceil(_loose(cutoff) * cm.scale + (cm.n_layers + 1) * 0.5))
        if ws_feasible:
            chosen = set(ws_arcs)
            for a, var in cm.x.items():
                cm.model.AddHint(var, 1 if a in chosen else 0)
        solver = cp_model.CpSolver()
        remaining = ctx.remaining()
        if remaining is not None:
            solver.parameters.max_time_in_seconds = max(1.0, remaining)
        solver.parameters.num_workers = max(1, ctx.threads)
        solver.parameters.random_seed = ctx.seed
        solver.parameters.relative_gap_limit = 0.0

        class Progress(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self_inner):
                ctx.report(incumbent=self_inner.ObjectiveValue() / cm.scale,
                           bound=self_inner.BestObjectiveBound() / cm.scale)

        status = solver.Solve(cm.model, Progress())
        info = {"model_arcs": len(cm.x), "status": solver.StatusName(status), "tolerance": cm.tolerance}
        if status == cp_model.INFEASIBLE:
            return GraphSolve([], None, None, False, infeasible=True, cutoff=cutoff, info=info)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return GraphSolve([], None, dp_bound, False, stopped=True, info=info)
        bound = max(0.0, solver.BestObjectiveBound() / cm.scale - cm.tolerance)
        if dp_bound is not None:
            bound = max(bound, dp_bound)
        return GraphSolve(cm.solution_arcs(solver), solver.ObjectiveValue() / cm.scale, bound,
                          status == cp_model.OPTIMAL, stopped=status != cp_model.OPTIMAL, tol=cm.tolerance,
                          info=info)

    def solve(self, instance, **kw):
        return self.finish(super().solve(instance, **kw))


class BruteForcePlanner(ExactPlanner):
    name = "bruteforce"
    description = "enumerates every plan of the space and scores each with the evaluator (tiny instances)"
    source = "this project; the cross-check of the exact planners"

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        limit = int(self.options.get("max_plans", 200_000))
        n = len(instance.graph.layers)
        fl = max(1, instance.search.fusion_limit)
        options = {(b, e): stage_options(instance, b, e) for b in range(n) for e in range(b, min(n, b + fl))}
        best = [math.inf, None]
        count = [0]
        obj = ctx.objective

        def norm(o):
            parts = [(d, r) for d, r in zip(o.devices, o.ranges)]
            if o.axis != "none":
                parts.sort(key=lambda x: x[1])
            return (o.first, o.last, o.axis, parts)

        def rec(b, stack):
            if b == n:
                count[0] += 1
                if count[0] > limit:
                    raise PlannerError(f"{instance.name}: more than {limit} plans; bruteforce is for tiny instances")
                m = evaluate_stages([norm(o) for o in stack], instance)
                if m.feasible:
                    v = m.value(obj)
                    if v < best[0] - 1e-15:
                        best[0], best[1] = v, list(stack)
                return
            for e in range(b, min(n, b + fl)):
                for o in options[(b, e)]:
                    stack.append(o)
                    rec(e + 1, stack)
                    stack.pop()

        rec(0, [])
        info = {"plans": count[0]}
        if best[1] is None:
            return PlanResult(self.name, "infeasible", obj, info=info,
                              message=f"none of the {count[0]} plans of the space is feasible")
        from milp_planner.space.plan import Plan

        names = instance.device_names
        plan = Plan(instance.name, [o.to_stage(names) for o in best[1]])
        return PlanResult(self.name, "optimal", obj, plan=plan, bound=best[0], info=info)


def explain_infeasible(sg: StageGraph, ctx: SolveContext) -> str:
    """Why no plan of the space is feasible, in terms a user can act on."""
    inst = sg.instance
    if sg.upper is not None or any(c is not None for c in (d.memory_bytes for d in inst.devices)):
        try:  # the whole space, arcs that overflow a cap included: they say what would fit
            sg = build_stage_graph(inst, max_arcs=1_000_000)
        except (PlannerError, TimeoutError):
            pass
    msgs = []
    n_layers = len(inst.graph.layers)
    caps = [dev.memory_bytes if inst.constraints.memory else None for dev in inst.devices]
    if any(c is not None for c in caps):
        # a layer no stage option can hold within every participant's memory
        for lid in range(n_layers):
            best = None
            for arc in sg.arcs:
                o = arc.option
                if not o.first <= lid <= o.last:
                    continue
                over = max((arc.weights[d] + arc.working[d]) / caps[d] if caps[d] else 0.0 for d in o.devices)
                if best is None or over < best[0]:
                    best = (over, arc)
            if best is not None and best[0] > 1.0:
                arc = best[1]
                d = max(arc.option.devices, key=lambda d: (arc.weights[d] + arc.working[d]) / caps[d] if caps[d] else 0)
                need = arc.weights[d] + arc.working[d]
                layer = inst.graph.layers[lid]
                msgs.append(f"layer {lid} ({layer.name}) fits on no device: its least demanding placement needs "
                            f"{need / 1e6:.3f} MB on {inst.devices[d].name}, which has {caps[d] / 1e6:.3f} MB")
                break
        if not msgs:
            ratio, need = _least_memory(sg)
            if ratio is not None and ratio > 1.0:
                parts = ", ".join(f"{inst.devices[d].name} {b / 1e6:.3f} MB (has {caps[d] / 1e6:.3f} MB)"
                                  for d, b in need.items() if caps[d] and b > caps[d])
                msgs.append(f"memory is too small: the plan needing the least memory (relative to the caps) "
                            f"exceeds them by a factor {ratio:.4f}; it needs {parts}")
    if inst.constraints.latency_s is not None:
        arcs, v = shortest_path(sg, "latency")
        if v > float(inst.constraints.latency_s):
            msgs.append(f"the fastest plan of the space takes {v * 1e3:.6g} ms, above the latency cap "
                        f"{float(inst.constraints.latency_s) * 1e3:.6g} ms")
    if inst.constraints.energy_j is not None:
        arcs, v = shortest_path(sg, "energy")
        if v > float(inst.constraints.energy_j):
            msgs.append(f"the least-energy plan of the space needs {v:.6g} J, above the energy cap "
                        f"{float(inst.constraints.energy_j):.6g} J")
    if not msgs:
        msgs.append("no plan satisfies all caps together (each cap alone can be met); relax one of them")
    return "; ".join(msgs)


def _least_memory(sg: StageGraph):
    """Smallest factor s such that some plan fits every device in s x its cap, and that plan's needs."""
    from ortools.sat.python import cp_model

    inst = sg.instance
    caps = {d: dev.memory_bytes for d, dev in enumerate(inst.devices) if dev.memory_bytes}
    if not caps:
        return None, {}
    from formulations.cpsat import build_cpsat

    saved = inst.constraints
    from dataclasses import replace

    inst.constraints = replace(saved, memory=False, latency_s=None, energy_j=None)
    try:
        cm = build_cpsat(sg, "latency")
    finally:
        inst.constraints = saved
    m = cm.model
    scale = 1000  # the factor in thousandths, up to 1000x the caps
    ratio = m.NewIntVar(0, 10**6, "ratio")
    for d, cap in caps.items():
        m.Add(cm.memory[d] * scale <= ratio * cap)
    m.Minimize(ratio)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 20.0
    solver.parameters.num_workers = 1
    st = solver.Solve(m)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, {}
    return solver.Value(ratio) / scale, {d: solver.Value(cm.memory[d]) for d in caps}

"""Solver drivers: one round's stage graph solved by the DP, by HiGHS (Pyomo MILP) or by CP-SAT.

Each driver takes the round's stage graph, the solve context and the DP warm start, and
returns a ``GraphSolve``: the best path found, its solver value, the proven bound over the
graph, and whether it is optimal, infeasible (up to the cutoff) or stopped by the time limit.
"""

from __future__ import annotations

import math
from typing import Protocol

from formulations.certificate import REL_TOL, GraphSolve, finite
from formulations.stagegraph import StageGraph
from formulations.tolerance import loose
from formulations.warmstart import WarmStart, cutoff, plan_stages, pruned_arcs
from milp_planner.cost.evaluator import evaluate_stages
from milp_planner.deadline import Deadline


class SolverContext(Protocol):
    """What a driver needs of ``milp_planner.planners.base.SolveContext``."""

    objective: str
    threads: int
    seed: int
    deadline: Deadline

    def report(self, **info) -> None: ...


def solve_dp(sg: StageGraph, objective: str, ws: WarmStart) -> GraphSolve:
    """The DP's answer over one graph: optimal when the DP's plan meets the caps, or when the
    warm start is the constrained search's (the best plan within the memory caps, or none)."""
    if ws.capped_exact:
        cut = cutoff(sg, objective, ws)
        if not ws.feasible:
            return GraphSolve([], None, None, False, infeasible=True, cutoff=cut)
        if cut is not None and ws.value > loose(cut):  # none within the cutoff, this one above it
            return GraphSolve(ws.arcs, ws.value, None, False, infeasible=True, cutoff=cut)
        return GraphSolve(ws.arcs, ws.value, ws.value, True)
    if not ws.feasible:
        return GraphSolve([], None, ws.bound, False)
    optimal = ws.bound is not None and ws.value <= ws.bound * (1 + REL_TOL) + 1e-15
    return GraphSolve(ws.arcs, ws.value, ws.bound, optimal)


def _none_within(ws: WarmStart, cut: float | None) -> GraphSolve:
    """The fixing left no arc within the cutoff: proven infeasible up to it. A warm start that
    meets the caps above the cutoff (a min-max search's plan) is kept for the next round."""
    above = ws.feasible and ws.capped_exact and cut is not None and ws.value > loose(cut)
    return GraphSolve(list(ws.arcs) if above else [], ws.value if above else None, None, False, infeasible=True,
                      cutoff=cut, info={"model_arcs": 0})


def _out_of_time(sg: StageGraph, ctx: SolverContext, ws: WarmStart) -> GraphSolve | None:
    """The time limit ran out before the solver's model was built (building one over many
    arcs takes seconds): the warm start, stopped; None while there is time left."""
    if not ctx.deadline.passed():
        return None
    arcs = list(ws.arcs) if ws.feasible else []
    return GraphSolve(arcs, sg.path_value(arcs, ctx.objective) if arcs else None, ws.bound, False, stopped=True,
                      info={"model_arcs": 0})


#: plans over a cap (within the solver's tolerance) cut off and solved again, at most this often
NOGOOD_ROUNDS = 16
INT_LIMIT = 2.0**62  # CP-SAT's integers are int64: a bound beyond this is no bound


def solve_highs(sg: StageGraph, ctx: SolverContext, ws: WarmStart, *, solver_name: str = "appsi_highs",
                fix_arcs: bool = True, log: bool = False) -> GraphSolve:
    """The path-flow MILP of ``formulations.milp`` over the arcs that survive fixing, with the
    warm start loaded, solved by Pyomo's ``solver_name`` (HiGHS by default)."""
    import pyomo.environ as pyo

    from formulations.milp import build_milp, fresh_highs_threads, highs_options, objective_unscale, solution_arcs

    obj = ctx.objective
    cut = cutoff(sg, obj, ws)
    keep = pruned_arcs(sg, obj, cut, ws.fixing, ws.support) if fix_arcs else None
    ctx.report(phase=f"MILP ({solver_name}) on {len(keep) if keep is not None else len(sg.arcs):,} arcs",
               incumbent=ws.incumbent, bound=ws.bound, force=True)
    if keep is not None and not set(sg.out_arcs[sg.source]) & set(keep):  # nothing within the cutoff
        return _none_within(ws, cut)
    late = _out_of_time(sg, ctx, ws)
    if late is not None:
        return late
    m = build_milp(sg, obj, arcs=keep)
    if cut is not None:
        target = m.peak if obj == "memory" else getattr(m, obj)
        m.cutoff = pyo.Constraint(expr=target <= loose(cut) / objective_unscale(m))
    if ws.feasible:
        chosen = set(ws.arcs)
        for a in m.ARCS:
            m.x[a].value = 1 if a in chosen else 0
    solver = pyo.SolverFactory(solver_name)
    remaining = ctx.deadline.seconds()
    kw = {}
    if solver_name == "appsi_highs":
        # the legacy solve() resets the config from its arguments: pass them there
        fresh_highs_threads()
        solver.highs_options = {"threads": max(1, ctx.threads), **highs_options(len(m.ARCS))}
        kw = {"timelimit": None if remaining is None else max(1.0, remaining), "tee": log,
              "warmstart": ws.feasible}
    m.nogood = pyo.ConstraintList()
    for _ in range(NOGOOD_ROUNDS):
        results = solver.solve(m, load_solutions=False, **kw)
        tc = str(results.solver.termination_condition)
        info = {"model_arcs": len(m.ARCS), "termination": tc, "nogood_cuts": len(m.nogood)}
        if tc in ("infeasible", "infeasibleOrUnbounded"):
            return GraphSolve([], None, None, False, infeasible=True, cutoff=cut, info=info)
        try:
            if solver_name == "appsi_highs":
                solver.load_vars()
            else:
                m.solutions.load_from(results)
            arcs = solution_arcs(sg, m)
        except Exception:  # no primal solution available (e.g. stopped before the first one)
            arcs = []
        if not arcs or evaluate_stages(plan_stages(sg, arcs), sg.instance).feasible:
            break
        # HiGHS's feasibility tolerance (1e-7 of a cap) let a plan pass a cap the evaluator holds
        # to 1e-9: that plan is not in the space within the caps, so it is cut off and the model
        # solved again (its bound still holds: only a plan over a cap is removed)
        m.nogood.add(sum(m.x[a] for a in arcs) <= len(arcs) - 1)
        remaining = ctx.deadline.seconds()
        if "timelimit" in kw:
            kw["timelimit"] = None if remaining is None else max(1.0, remaining)
    if not arcs and ws.feasible:
        arcs = list(ws.arcs)
    bound = finite(results.problem.lower_bound, objective_unscale(m))
    if ws.bound is not None:
        bound = ws.bound if bound is None else max(bound, ws.bound)
    optimal = tc == "optimal"
    value = sg.path_value(arcs, obj) if arcs else None
    return GraphSolve(arcs, value, bound, optimal and bool(arcs), stopped=not optimal, info=info)


def solve_cpsat(sg: StageGraph, ctx: SolverContext, ws: WarmStart, *, fix_arcs: bool = True) -> GraphSolve:
    """The path-flow CP-SAT model of ``formulations.cpsat`` (integer ns / nJ / bytes) over the
    arcs that survive fixing, hinted with the warm start."""
    from ortools.sat.python import cp_model

    from formulations.cpsat import build_cpsat, magnitudes

    obj = ctx.objective
    cut = cutoff(sg, obj, ws)
    keep = pruned_arcs(sg, obj, cut, ws.fixing, ws.support) if fix_arcs else None
    if keep is not None and not set(sg.out_arcs[sg.source]) & set(keep):  # nothing within the cutoff
        return _none_within(ws, cut)
    ctx.report(phase=f"CP-SAT on {len(keep) if keep is not None else len(sg.arcs):,} arcs",
               incumbent=ws.incumbent, bound=ws.bound, force=True)
    late = _out_of_time(sg, ctx, ws)
    if late is not None:
        return late
    cm = build_cpsat(sg, obj, arcs=keep, typical=magnitudes(sg, list(ws.arcs) if ws.arcs else None))
    # (a cutoff past what an int64 holds cuts nothing: the rounds' bound doubles while they find
    # no plan, and reached 5e21 bytes on a random instance whose caps no plan meets)
    if cut is not None and obj == "memory" and loose(cut) < INT_LIMIT:  # bytes, exact: every device within it
        for mem in cm.memory.values():
            cm.model.Add(mem <= math.floor(loose(cut)))
    elif cut is not None and obj != "memory" and loose(cut) * cm.scale < INT_LIMIT:
        cm.model.Add(getattr(cm, obj) <= math.ceil(loose(cut) * cm.scale + (cm.n_layers + 1) * 0.5))
    if ws.feasible:
        chosen = set(ws.arcs)
        for a, var in cm.x.items():
            cm.model.AddHint(var, 1 if a in chosen else 0)
    solver = cp_model.CpSolver()
    remaining = ctx.deadline.seconds()
    if remaining is not None:
        solver.parameters.max_time_in_seconds = max(1.0, remaining)
    solver.parameters.num_workers = max(1, ctx.threads)
    solver.parameters.random_seed = ctx.seed
    solver.parameters.relative_gap_limit = 0.0

    class Progress(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            ctx.report(phase="CP-SAT found a plan", incumbent=self.ObjectiveValue() / cm.scale,
                       bound=self.BestObjectiveBound() / cm.scale)

    for cuts in range(NOGOOD_ROUNDS):
        status = solver.Solve(cm.model, Progress())
        info = {"model_arcs": len(cm.x), "status": solver.StatusName(status), "tolerance": cm.tolerance,
                "nogood_cuts": cuts}
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        arcs = cm.solution_arcs(solver)
        if evaluate_stages(plan_stages(sg, arcs), sg.instance).feasible:
            break
        # the caps are widened by the rounding (no plan within them is left out): a plan the
        # evaluator finds over one is cut off and the model solved again
        cm.model.AddBoolOr([cm.x[a].Not() for a in arcs])
        cm.model.ClearHints()
        remaining = ctx.deadline.seconds()
        if remaining is not None:
            solver.parameters.max_time_in_seconds = max(1.0, remaining)
    if status == cp_model.INFEASIBLE:
        return GraphSolve([], None, None, False, infeasible=True, cutoff=cut, info=info)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return GraphSolve([], None, ws.bound, False, stopped=True, info=info)
    bound = max(0.0, solver.BestObjectiveBound() / cm.scale - cm.tolerance)
    if ws.bound is not None:
        bound = max(bound, ws.bound)
    return GraphSolve(cm.solution_arcs(solver), solver.ObjectiveValue() / cm.scale, bound,
                      status == cp_model.OPTIMAL, stopped=status != cp_model.OPTIMAL, tol=cm.tolerance, info=info)

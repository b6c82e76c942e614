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

from formulations.dp import ADDITIVE, arc_cost, prefix_suffix, shortest_path, terminal_cost
from formulations.stagegraph import StageGraph, build_stage_graph, stage_options

from ..errors import PlannerError
from ..evaluator import evaluate_stages
from ..instance import Instance
from .base import Planner, PlanResult, SolveContext

REL_TOL = 1e-6


class ExactPlanner(Planner):
    exact = True

    def stage_graph(self, instance: Instance, ctx: SolveContext) -> StageGraph:
        deadline = None if ctx.time_limit is None else ctx.started + ctx.time_limit
        return build_stage_graph(instance, max_arcs=int(self.options.get("max_arcs", 3_000_000)),
                                 progress=lambda **k: ctx.report(**k), deadline=deadline)

    def warm_start(self, sg: StageGraph, objective: str):
        """(arcs, their value under ``objective``, the DP bound or None, plan feasible?).

        The DP runs without the caps, except that arcs which alone overflow a device's memory
        are dropped (no feasible plan contains them), so its value bounds additive objectives.
        When its plan still breaks a cap, a few Lagrangian rounds price the overflowing
        devices' memory into the arc costs to find a feasible plan for the warm start.
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
            return [], math.inf, None, False
        if not math.isfinite(dp_value):
            return [], math.inf, None, False
        bound = dp_value if objective in ADDITIVE else None
        metrics = evaluate_stages(_stages(sg, arcs), inst)
        best = (arcs, metrics) if metrics.feasible else None
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
            return arcs, metrics.value(objective), bound, False
        return best[0], best[1].value(objective), bound, True

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


def _pruned_arcs(sg: StageGraph, objective: str, upper: float | None) -> list[int]:
    """Arcs that can be part of a feasible plan no worse than ``upper``.

    An arc that alone overflows a device's memory is never feasible; with an ``upper`` bound
    on an additive objective, an arc whose best path (DP prefix + arc + suffix) exceeds it
    cannot be optimal either (exact reduced-cost fixing).
    """
    inst = sg.instance
    caps = [dev.memory_bytes if inst.constraints.memory else None for dev in inst.devices]
    ok = [not _overflows(arc, caps) for arc in sg.arcs]
    if upper is None or objective not in ADDITIVE:
        return [a for a in range(len(sg.arcs)) if ok[a]]
    cost = [c if ok[a] else math.inf for a, c in enumerate(arc_cost(sg, objective))]
    pre, suf = prefix_suffix(sg, cost, terminal_cost(sg, objective))
    slack = upper * (1 + 1e-9) + 1e-12
    return [a for a, arc in enumerate(sg.arcs) if ok[a] and pre[arc.tail] + cost[a] + suf[arc.head] <= slack]


class DPPlanner(ExactPlanner):
    name = "dp"
    description = "dynamic program over stage boundaries and tensor layouts (exact for latency/energy without caps)"
    source = "this project (MODEL.md, lessons measured); shortest path over the stage graph"

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        sg = self.stage_graph(instance, ctx)
        arcs, value, bound, feasible = self.warm_start(sg, ctx.objective)
        info = {"stage_arcs": len(sg.arcs), "nodes": sg.n_nodes, "space_build_s": sg.build_time_s}
        if not arcs:
            return PlanResult(self.name, "infeasible", ctx.objective, info=info, message=explain_infeasible(sg, ctx))
        plan = sg.plan_from_arcs(arcs)
        res = PlanResult(self.name, "optimal", ctx.objective, plan=plan, bound=bound, info=info)
        if ctx.objective not in ADDITIVE:
            res.status, res.bound = "feasible", None
            res.message = "dp is exact for latency and energy only; this plan minimises latency"
        elif not feasible:
            res.status = "error"
            res.message = ("dp ignores caps and its optimum violates them; its value is a lower bound. "
                           "Use --planner milp or cpsat")
        elif value > bound * (1 + REL_TOL):
            res.status = "feasible"
            res.message = "caps bind: this is a feasible plan, the bound is the DP without caps"
        return res


class MILPPlanner(ExactPlanner):
    name = "milp"
    description = "path-flow MILP over the stage graph (Pyomo + HiGHS), DP warm start and arc fixing"
    source = "this project; Pyomo model in formulations.milp"

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        import pyomo.environ as pyo

        from formulations.milp import build_milp, objective_unscale, solution_arcs

        sg = self.stage_graph(instance, ctx)
        obj = ctx.objective
        ws_arcs, ws_value, dp_bound, ws_feasible = self.warm_start(sg, obj)
        if not ws_arcs:
            return PlanResult(self.name, "infeasible", obj, message=explain_infeasible(sg, ctx))
        keep = None
        if self.options.get("fix_arcs", True):
            keep = _pruned_arcs(sg, obj, ws_value if ws_feasible else None)
        ctx.report(phase="model", incumbent=ws_value if ws_feasible else None, bound=dp_bound, force=True)
        m = build_milp(sg, obj, arcs=keep)
        chosen = set(ws_arcs)
        if ws_feasible:
            for a in m.ARCS:
                m.x[a].value = 1 if a in chosen else 0
        solver = pyo.SolverFactory(self.options.get("solver", "appsi_highs"))
        remaining = ctx.remaining()
        name = self.options.get("solver", "appsi_highs")
        if name == "appsi_highs":
            if remaining is not None:
                solver.config.time_limit = max(1.0, remaining)
            solver.config.stream_solver = bool(self.options.get("log", False))
            solver.highs_options = {"threads": max(1, ctx.threads), "mip_rel_gap": 1e-7,
                                    "mip_abs_gap": 0.0}
            if ws_feasible and solver.warm_start_capable():
                solver.config.warmstart = True
            results = solver.solve(m, load_solutions=False)
        else:  # any other Pyomo solver
            results = solver.solve(m, load_solutions=False)
        tc = str(results.solver.termination_condition)
        unscale = objective_unscale(m)
        lb = results.problem.lower_bound
        info = {"stage_arcs": len(sg.arcs), "model_arcs": len(m.ARCS), "nodes": sg.n_nodes,
                "space_build_s": sg.build_time_s, "termination": tc}
        if tc in ("infeasible", "infeasibleOrUnbounded"):
            return PlanResult(self.name, "infeasible", obj, info=info,
                              message=explain_infeasible(sg, ctx))
        has_solution = False
        try:
            if name == "appsi_highs":
                solver.load_vars()
            else:
                m.solutions.load_from(results)
            has_solution = True
        except Exception:  # no primal solution available (e.g. stopped before the first one)
            has_solution = False
        arcs = solution_arcs(sg, m) if has_solution else []
        if not arcs and ws_feasible:
            arcs = ws_arcs
        if not arcs:
            return PlanResult(self.name, "timeout", obj, info=info, bound=_finite(lb, unscale),
                              message="no plan found within the time limit")
        plan = sg.plan_from_arcs(arcs)
        res = PlanResult(self.name, "optimal" if tc == "optimal" else "timeout", obj, plan=plan, info=info)
        bound = _finite(lb, unscale)
        if dp_bound is not None:
            bound = max(bound or 0.0, dp_bound) if bound is not None else dp_bound
        res.bound = bound
        res._solver_value = sg.path_value(arcs, obj)
        return res

    def solve(self, instance, **kw):
        res = super().solve(instance, **kw)
        sv = getattr(res, "_solver_value", None)
        if sv is not None:
            self.check_agreement(sv, res)
            if res.status == "optimal":
                res.bound = min(res.bound if res.bound is not None else res.value, res.value)
        return res


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

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        from ortools.sat.python import cp_model

        from formulations.cpsat import build_cpsat

        sg = self.stage_graph(instance, ctx)
        obj = ctx.objective
        ws_arcs, ws_value, dp_bound, ws_feasible = self.warm_start(sg, obj)
        if not ws_arcs:
            return PlanResult(self.name, "infeasible", obj, message=explain_infeasible(sg, ctx))
        keep = None
        if self.options.get("fix_arcs", True):
            keep = _pruned_arcs(sg, obj, ws_value if ws_feasible else None)
        cm = build_cpsat(sg, obj, arcs=keep)
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
        info = {"stage_arcs": len(sg.arcs), "model_arcs": len(cm.x), "nodes": sg.n_nodes,
                "space_build_s": sg.build_time_s, "status": solver.StatusName(status),
                "tolerance": cm.tolerance}
        if status == cp_model.INFEASIBLE:
            return PlanResult(self.name, "infeasible", obj, info=info, message=explain_infeasible(sg, ctx))
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return PlanResult(self.name, "timeout", obj, info=info,
                              message="no plan found within the time limit")
        arcs = cm.solution_arcs(solver)
        plan = sg.plan_from_arcs(arcs)
        bound = max(0.0, solver.BestObjectiveBound() / cm.scale - cm.tolerance)
        if dp_bound is not None:
            bound = max(bound, dp_bound)
        res = PlanResult(self.name, "optimal" if status == cp_model.OPTIMAL else "timeout", obj,
                         plan=plan, bound=bound, info=info)
        res._solver_value = solver.ObjectiveValue() / cm.scale
        res._tol = cm.tolerance
        return res

    def solve(self, instance, **kw):
        res = super().solve(instance, **kw)
        sv = getattr(res, "_solver_value", None)
        if sv is not None:
            self.check_agreement(sv, res, tol_abs=res._tol)
            if res.bound is not None and res.value is not None:
                res.bound = min(res.bound, res.value)
        return res


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
        from ..plan import Plan

        names = instance.device_names
        plan = Plan(instance.name, [o.to_stage(names) for o in best[1]])
        return PlanResult(self.name, "optimal", obj, plan=plan, bound=best[0], info=info)


def explain_infeasible(sg: StageGraph, ctx: SolveContext) -> str:
    """Why no plan of the space is feasible, in terms a user can act on."""
    inst = sg.instance
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

"""``lp-round``: solve the LP relaxation of the MILP, then round its flow into one plan.

The model is exactly the one ``milp`` solves: ``formulations.milp.build_milp`` over the
instance's stage graph, on the same arc subset (arcs that alone overflow a memory cap are
dropped; for latency and energy, the DP's prefix/suffix bounds also drop every arc that
cannot beat the DP warm start). The binaries ``x`` and ``end`` are relaxed to [0, 1]
(Pyomo's ``core.relax_integer_vars``) and the LP is solved with HiGHS (``appsi_highs``).

Reported:

* ``bound``: the LP optimum. The LP relaxes the same MILP, so its optimum is a lower bound
  on every plan of the space for every objective (latency, energy, period, memory); HiGHS
  solves it to its default tolerances (1e-7). For latency and energy without caps the LP is
  a shortest-path LP, whose polytope is integral: the bound is then the optimum itself.
  When ``ExactPlanner.stage_graph`` returns a partial graph (``sg.complete`` false: it could
  not hold every plan better than its best feasible one), the LP bounds only that part, so
  ``bound`` is the graph's own proven lower bound (``sg.lower``) instead.
* the plan, scored by the evaluator through ``Planner.solve`` like every other planner's;
  status ``feasible`` (``infeasible`` when the LP is infeasible, or when no plan found
  below satisfies the caps; ``timeout`` when the LP stops at the time limit). The planner
  certifies nothing (``exact = False``): the bound is only the LP's.
* ``info``: ``lp_value``, ``lp_time_s`` (building and solving the LP), ``fractional_arcs``
  (arcs with 1e-6 < x < 1 - 1e-6), ``stage_arcs``, ``model_arcs``, ``support_arcs`` (x > 1e-9)
  and ``rounding`` (``greedy``, or which repair gave the plan).

Rounding rule (deterministic). Start at the stage graph's source node. At each node take the
out-arc of the model with the largest LP flow ``x``; flows within 1e-9 of each other are
ties, broken by the lowest objective cost of the arc (its latency or energy coefficient in
the model; for period the largest per-device load it adds; for memory the largest
per-device weights + working set it adds), then by the lowest arc id. Stop at a terminal
node. Flow conservation makes this well defined: the source sends one unit and every other
non-terminal node passes on what it receives, so the node reached always has an out-arc
with positive flow (at least its inflow divided by its out-degree). When the LP solution is
integral (``fractional_arcs == 0``) the rounded plan is the LP's own path, hence optimal.

Repair. The rounding ignores the caps (memory, latency, energy): the LP may satisfy a cap
only on average over the paths it mixes. When the evaluator finds that the rounded plan
breaks one, two plans of the space are tried and the better feasible one (by the
evaluator's value) is returned: the best plan using only arcs with positive LP flow (the
MILP restricted to the LP's support, every cap exact; small, since a basic LP solution has
few positive arcs; at most ``repair_time_limit`` seconds, default 30), and the DP warm start
of the exact planners (a DP that drops arcs overflowing a cap alone, with Lagrangian
repair), when that one is feasible. The result message names the broken cap and the repair
used (``info["rounding"]`` too); if neither fits the caps, the rounded plan is returned and
``Planner.solve`` reports it ``infeasible`` with the violated caps.

Options: ``fix_arcs`` (true: the arc subset of ``milp``; false: every arc that fits the caps
alone), ``repair_time_limit``, ``max_arcs`` and ``lagrange_rounds`` as for the exact planners.
"""

from __future__ import annotations

import time

from formulations.diagnosis import explain_infeasible
from formulations.warmstart import pruned_arcs

from milp_planner.cost.evaluator import evaluate
from milp_planner.instance import Instance
from milp_planner.planners.base import Option, PlanResult, SolveContext
from milp_planner.planners.exact import FIX_ARCS, LOG, ROUND_OPTIONS, ExactPlanner

FLOW_TIE = 1e-9  # flows closer than this are ties
FRACTIONAL = 1e-6  # x in (1e-6, 1 - 1e-6) counts as fractional
SUPPORT = 1e-9  # x above this is in the LP's support


class LPRoundPlanner(ExactPlanner):
    name = "lp-round"
    description = "LP relaxation of the MILP (HiGHS), greedy rounding of its flow; the LP optimum as bound"
    source = "this project; LP relaxation of formulations.milp, largest-flow rounding (GitHub issue #6)"
    exact = False  # the bound is the LP's; the plan is not certified
    bound_name = "lp-relaxation"
    option_specs = ROUND_OPTIONS + (
        FIX_ARCS,
        LOG,
        Option("repair_time_limit", float, 30.0, "seconds for the support MILP that repairs a rounding",
               gt=0, le=1e7),
    )

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        import pyomo.environ as pyo

        from formulations.milp import build_milp, fresh_highs_threads, objective_unscale

        obj = ctx.objective
        sg = self.stage_graph(instance, ctx)
        ws = self.warm_start(sg, obj, ctx.deadline)
        info = {"stage_arcs": len(sg.arcs)}
        if not ws.arcs:
            return PlanResult(self.name, "infeasible", obj, info=info, message=_explain(sg, ctx))
        keep = pruned_arcs(sg, obj, ws.value if ws.feasible and self.options.get("fix_arcs", True) else None)
        info["model_arcs"] = len(keep)

        t0 = time.perf_counter()
        m = build_milp(sg, obj, arcs=keep)
        pyo.TransformationFactory("core.relax_integer_vars").apply_to(m)
        solver = pyo.SolverFactory("appsi_highs")
        remaining = ctx.remaining()
        fresh_highs_threads()
        solver.highs_options = {"threads": max(1, ctx.threads)}
        # the legacy solve() resets the config from its arguments: pass them there
        results = solver.solve(m, load_solutions=False, timelimit=None if remaining is None else max(1.0, remaining),
                               tee=bool(self.options.get("log", False)))
        tc = str(results.solver.termination_condition)
        info["lp_time_s"] = time.perf_counter() - t0
        info["termination"] = tc
        if tc in ("infeasible", "infeasibleOrUnbounded"):
            info["lp_value"] = None
            return PlanResult(self.name, "infeasible", obj, info=info,
                              message="the LP relaxation is infeasible, so is every plan: " + _explain(sg, ctx))
        if tc != "optimal":
            info["lp_value"] = None
            if ws.feasible:
                return PlanResult(self.name, "timeout", obj, plan=sg.plan_from_arcs(ws.arcs), bound=ws.bound,
                                  info=info, message=f"LP stopped ({tc}); returning the DP warm start")
            return PlanResult(self.name, "timeout", obj, info=info, bound=ws.bound,
                              message=f"LP stopped ({tc}) and the DP warm start breaks the caps")
        solver.load_vars()
        lp_value = float(pyo.value(m.obj)) * objective_unscale(m)
        x = {a: float(m.x[a].value or 0.0) for a in m.ARCS}
        info["lp_value"] = lp_value
        info["fractional_arcs"] = sum(1 for v in x.values() if FRACTIONAL < v < 1 - FRACTIONAL)
        info["support_arcs"] = sum(1 for v in x.values() if v > SUPPORT)

        arc_cost, _ = _objective_costs(m, obj)
        rounded = _greedy(sg, x, arc_cost)
        plan, label, message = None, None, ""
        if rounded is not None:
            metrics = evaluate(sg.plan_from_arcs(rounded), instance)
            if metrics.feasible:
                plan, label = sg.plan_from_arcs(rounded), "greedy"
            else:
                message = "rounded plan breaks " + "; ".join(metrics.violations)
        else:  # cannot happen with exact flow conservation; kept for numerical safety
            message = "rounding reached a node with no out-flow"
        if plan is None:
            tried = []
            support = [a for a, v in x.items() if v > SUPPORT]
            path = _support_milp(sg, obj, support, ctx, float(self.options.get("repair_time_limit", 30.0)))
            if path:
                tried.append(("best plan over the LP support", path))
            if ws.feasible:
                tried.append(("DP warm start", ws.arcs))
            best = None
            for lab, arcs in tried:
                mt = evaluate(sg.plan_from_arcs(arcs), instance)
                if mt.feasible and (best is None or mt.value(obj) < best[0]):
                    best = (mt.value(obj), lab, arcs)
            if best is not None:
                plan, label = sg.plan_from_arcs(best[2]), "repaired: " + best[1]
                message += f"; repaired with the {best[1]}"
            else:
                label = "greedy (no feasible repair)"
                message += "; no repair fits the caps (tried: " + (", ".join(t for t, _ in tried) or "none") + ")"
                plan = sg.plan_from_arcs(rounded) if rounded is not None else None
        info["rounding"] = label
        bound = lp_value
        if not getattr(sg, "complete", True):
            # the graph holds only part of the space: the LP bounds that part, not the space;
            # what the enumeration itself proved (sg.lower) still holds
            bound = getattr(sg, "lower", None)
            info["graph_complete"] = False
            message = "; ".join(x for x in (message, "the stage graph is partial: bound = its proven lower bound, "
                                            "not the LP's") if x)
        if plan is None:
            return PlanResult(self.name, "infeasible", obj, info=info, bound=bound, message=message)
        return PlanResult(self.name, "feasible", obj, plan=plan, bound=bound, info=info, message=message)

    def solve(self, instance, **kw):
        res = super().solve(instance, **kw)
        if res.bound is not None and res.value is not None and res.metrics is not None and res.metrics.feasible:
            # the plan is a point of the MILP, so the LP optimum cannot exceed its value
            if res.bound > res.value * (1 + 1e-6) + 1e-12:
                raise RuntimeError(f"{self.name}: LP bound {res.bound!r} above the evaluator's value "
                                   f"{res.value!r} of a feasible plan (a formulation bug; please report it)")
            res.bound = min(res.bound, res.value)
        return res


def _explain(sg, ctx) -> str:
    try:
        return explain_infeasible(sg, ctx.deadline)
    except Exception:  # pragma: no cover - the explanation is a courtesy
        return "no plan of the space satisfies the caps"


def _coefs(m, expr):
    """(kind, index, |coefficient|) of the x and end variables in a linear expression."""
    from pyomo.repn import generate_standard_repn

    if expr is None or isinstance(expr, (int, float)):
        return
    repn = generate_standard_repn(expr, compute_values=True, quadratic=False)
    for v, c in zip(repn.linear_vars, repn.linear_coefs):
        comp = v.parent_component()
        if comp is m.x:
            yield "x", v.index(), abs(float(c))
        elif comp is m.end:
            yield "end", v.index(), abs(float(c))


def _memory_coefs(m) -> dict:
    """Per device, per arc: the weights plus the working set the arc adds (model units, kB)."""
    work: dict = {d: {} for d in m.DEV}
    for (_, d), con in m.working_lb.items():
        for kind, a, c in _coefs(m, con.body):
            if kind == "x":  # the same coefficient in every layer the arc covers
                work[d][a] = max(work[d].get(a, 0.0), c)
    out = {}
    for d in m.DEV:
        per = dict(work[d])
        for kind, a, c in _coefs(m, m.weights[d].expr):
            if kind == "x":
                per[a] = per.get(a, 0.0) + c
        out[d] = per
    return out


def _objective_costs(m, objective: str):
    """Per-arc and per-terminal cost of the objective, read from the model's coefficients.

    latency / energy: the arc's coefficient in ``m.latency`` / ``m.energy`` (and the gather's
    for terminals). period: the largest per-device load the arc adds (``m.period_lb`` and the
    shared-medium constraint). memory: the largest per-device weights + working set of the arc.
    """
    arc = {a: 0.0 for a in m.ARCS}
    end = {t: 0.0 for t in m.TERM}
    tables = {"x": arc, "end": end}
    if objective in ("latency", "energy"):
        expr = m.latency.expr if objective == "latency" else m.energy.expr
        for kind, i, c in _coefs(m, expr):
            tables[kind][i] += c
    elif objective == "period":
        cons = list(m.period_lb.values())
        if hasattr(m, "period_medium"):
            cons.append(m.period_medium)
        for con in cons:
            for kind, i, c in _coefs(m, con.body):
                tables[kind][i] = max(tables[kind][i], c)
    else:
        for per in _memory_coefs(m).values():
            for a, c in per.items():
                arc[a] = max(arc[a], c)
    return arc, end


def _greedy(sg, x: dict, cost: dict):
    """The rounding rule: from the source, the out-arc of largest flow, ties by cost then id."""
    node = sg.source
    path = []
    while node not in sg.terminals:
        outs = [a for a in sg.out_arcs[node] if a in x]
        if not outs:
            return None
        top = max(x[a] for a in outs)
        if top <= 0.0:
            return None
        a = min((a for a in outs if x[a] >= top - FLOW_TIE), key=lambda a: (cost[a], a))
        path.append(a)
        node = sg.arcs[a].head
    return path


def _support_milp(sg, objective: str, support: list[int], ctx: SolveContext, time_limit: float):
    """The best plan using only arcs with positive LP flow: the MILP restricted to them.

    Every cap is enforced exactly, as in ``milp``. Returns its arcs, or [] when the support
    holds no feasible plan or HiGHS finds none within ``time_limit`` seconds.
    """
    import pyomo.environ as pyo

    from formulations.milp import build_milp, fresh_highs_threads, solution_arcs

    if not support:
        return []
    m = build_milp(sg, objective, arcs=support)
    solver = pyo.SolverFactory("appsi_highs")
    fresh_highs_threads()
    solver.highs_options = {"threads": max(1, ctx.threads)}
    results = solver.solve(m, load_solutions=False, timelimit=max(1.0, ctx.deadline.within(time_limit).left()))
    if str(results.solver.termination_condition) in ("infeasible", "infeasibleOrUnbounded"):
        return []
    try:
        solver.load_vars()
    except Exception:  # no solution within the time limit
        return []
    return solution_arcs(sg, m)

"""MILP of the plan space as a path flow with side constraints (Pyomo; HiGHS by default).

Components of the model returned by ``build_milp(sg, objective)``:

``m.ARCS``, ``m.DEV``, ``m.LAYERS``, ``m.TERM``   index sets (stage arcs, devices, layers, end nodes)
``m.x[a]``          1 if stage option ``a`` is chosen (binary)
``m.end[t]``        1 if the plan ends in terminal node ``t`` (its gather pattern)
``m.flow[v]``       flow conservation: the chosen stages form one path from the first layer on
``m.cover[l]``      exactly one chosen stage covers layer ``l`` (implied, tightens the LP)
``m.weights[d]``    weight bytes stored on device ``d`` (expression)
``m.working[d]``    largest working set of device ``d`` over the stages (variable), with
``m.working_lb[l, d]``  working[d] >= working set of the stage covering layer ``l``
``m.memory[d]``     weights[d] + working[d] (expression); ``m.memory_cap[d]`` when capped
``m.latency``, ``m.energy``  expressions; ``m.latency_cap``, ``m.energy_cap`` when capped
``m.device_load[d]``       device ``d``'s compute + receive time (expression; ``m.medium`` the shared
                    medium's transfer time), built for the period objective or its cap
``m.period_cap[d]``  device_load[d] <= cap (and ``m.period_medium_cap``) when ``constraints.period_s`` is set
``m.period``        variable with ``m.period_lb[d]`` (period objective)
``m.obj``           the objective (minimise ``latency``, ``energy``, ``period`` or memory)

Add your own constraints to ``m`` and solve with any Pyomo MILP solver; ``solution_arcs(sg, m)``
reads the chosen arcs back and ``sg.plan_from_arcs`` turns them into a plan.

>>> import pyomo.environ as pyo                                     # doctest: +SKIP
>>> from formulations import build_stage_graph, build_milp, solution_arcs
>>> sg = build_stage_graph(instance)                               # doctest: +SKIP
>>> m = build_milp(sg, "latency")                                   # doctest: +SKIP
>>> m.no_pi = pyo.Constraint(expr=m.weights[0] <= 50e6)  # your own constraint   # doctest: +SKIP
>>> pyo.SolverFactory("appsi_highs").solve(m)                       # doctest: +SKIP
>>> plan = sg.plan_from_arcs(solution_arcs(sg, m))                  # doctest: +SKIP
"""

from __future__ import annotations

import pyomo.environ as pyo

from formulations.additive_caps import arcs_over_caps
from formulations.stagegraph import StageGraph
from milp_planner.highs import PRESOLVE_RULES_OFF

#: HiGHS's options for every MILP of the project. Its feasibility tolerances stay at their
#: defaults (1e-7 primal, 1e-6 MIP): at 1e-9 HiGHS called a feasible 22-arc model infeasible
#: (a random instance of the differential bed). The caps' rows are scaled to a right-hand side
#: of 1, so what a plan may pass a cap by is relative to the cap; the evaluator checks every
#: plan, and one over a cap is never reported as a solution (``milp_planner.certificate``).
#: models of at most this many arcs are solved without presolve at all (it saves nothing there,
#: and a wrong presolve reduction is the likeliest way for HiGHS to misstate an optimum:
#: ``milp_planner.highs``); larger ones without its reductions known to have been wrong
PRESOLVE_MIN_ARCS = 5000
HIGHS_OPTIONS = {"mip_rel_gap": 1e-7, "mip_abs_gap": 0.0, "presolve_rule_off": PRESOLVE_RULES_OFF}


def highs_options(n_arcs: int) -> dict:
    """``HIGHS_OPTIONS`` for a model of ``n_arcs`` stage arcs."""
    return {**HIGHS_OPTIONS, **({"presolve": "off"} if n_arcs <= PRESOLVE_MIN_ARCS else {})}


def build_milp(sg: StageGraph, objective: str, arcs: list[int] | None = None,
               memory_scale: float = 1e-3) -> pyo.ConcreteModel:
    """A Pyomo model of the plan space ``sg`` (restricted to ``arcs`` when given).

    Memory is modelled in kilobytes (``memory_scale`` per byte): coefficients stay well scaled
    and one byte (1e-3) stays far above HiGHS's feasibility tolerance (1e-6), so a cap is never
    exceeded by rounding; times are in seconds and energy in joules.
    """
    inst = sg.instance
    arc_ids = list(range(len(sg.arcs))) if arcs is None else list(arcs)
    over = arcs_over_caps(sg, arc_ids)  # on no path within the latency / energy caps: left out
    arc_ids = [a for a in arc_ids if a not in over]
    m = pyo.ConcreteModel(name=f"plan space of {inst.name}")
    m.ARCS = pyo.Set(initialize=arc_ids, ordered=True)
    m.DEV = pyo.RangeSet(0, len(inst.devices) - 1)
    m.LAYERS = pyo.RangeSet(0, len(inst.graph.layers) - 1)
    m.TERM = pyo.Set(initialize=sorted(sg.terminals), ordered=True)
    m.x = pyo.Var(m.ARCS, within=pyo.Binary)
    m.end = pyo.Var(m.TERM, within=pyo.Binary)
    covering = _path_flow(m, sg, arc_ids)
    _memory(m, sg, arc_ids, covering, memory_scale)
    _latency_and_energy(m, sg, arc_ids)
    if objective == "period" or inst.constraints.period_s is not None:
        _device_loads(m, sg, arc_ids)
    _objective(m, inst, objective)
    m.objective_name = objective
    m.memory_scale = memory_scale
    return m


def _path_flow(m: pyo.ConcreteModel, sg: StageGraph, arc_ids: list[int]) -> list[list[int]]:
    """``m.flow`` and ``m.cover``: the chosen arcs form one path from the source to a terminal
    and cover every layer once. Returns the arcs covering each layer."""
    keep = set(arc_ids)

    def flow_rule(m, v):
        inflow = sum(m.x[a] for a in sg.in_arcs[v] if a in keep)
        outflow = sum(m.x[a] for a in sg.out_arcs[v] if a in keep)
        if v == sg.source:
            return outflow == 1
        if v in sg.terminals:
            return inflow == m.end[v]
        if isinstance(inflow, int) and isinstance(outflow, int):
            return pyo.Constraint.Skip  # a node no kept arc touches
        return inflow == outflow

    m.NODES = pyo.Set(initialize=range(sg.n_nodes))
    m.flow = pyo.Constraint(m.NODES, rule=flow_rule)
    covering: list[list[int]] = [[] for _ in m.LAYERS]
    for a in arc_ids:
        o = sg.arcs[a].option
        for lid in range(o.first, o.last + 1):
            covering[lid].append(a)
    m.cover = pyo.Constraint(m.LAYERS, rule=lambda m, l: sum(m.x[a] for a in covering[l]) == 1)
    return covering


def _memory(m: pyo.ConcreteModel, sg: StageGraph, arc_ids: list[int], covering: list[list[int]], s: float) -> None:
    """``m.weights``, ``m.working`` (the largest working set over the stages), ``m.memory`` and
    the memory caps, in units of ``1 / s`` bytes."""
    m.weights = pyo.Expression(m.DEV, rule=lambda m, d: sum(s * sg.arcs[a].weights[d] * m.x[a]
                                                            for a in arc_ids if sg.arcs[a].weights[d]))
    m.working = pyo.Var(m.DEV, within=pyo.NonNegativeReals)
    m.working_lb = pyo.Constraint(
        m.LAYERS, m.DEV,
        rule=lambda m, l, d: m.working[d] >= sum(s * sg.arcs[a].working[d] * m.x[a] for a in covering[l])
        if any(sg.arcs[a].working[d] for a in covering[l]) else pyo.Constraint.Skip)
    m.memory = pyo.Expression(m.DEV, rule=lambda m, d: m.weights[d] + m.working[d])
    inst = sg.instance
    if inst.constraints.memory:
        caps = {d: dev.memory_bytes for d, dev in enumerate(inst.devices) if dev.memory_bytes is not None}
        m.CAPPED = pyo.Set(initialize=sorted(caps))
        m.memory_cap = pyo.Constraint(m.CAPPED, rule=lambda m, d: m.memory[d] <= s * caps[d])


def _latency_and_energy(m: pyo.ConcreteModel, sg: StageGraph, arc_ids: list[int]) -> None:
    """``m.latency`` and ``m.energy`` (the stages' and the gather's) and their caps, as rows
    scaled to a right-hand side of 1 so that the solver's feasibility tolerance is relative to
    the cap, as the evaluator's slack is."""
    m.latency = pyo.Expression(expr=sum(sg.arcs[a].tau * m.x[a] for a in arc_ids)
                               + sum(sg.terminals[t].gather_s * m.end[t] for t in m.TERM))
    m.energy = pyo.Expression(expr=sum(sg.arcs[a].energy * m.x[a] for a in arc_ids)
                              + sum(sg.terminals[t].energy * m.end[t] for t in m.TERM))
    cons = sg.instance.constraints
    if cons.latency_s is not None:
        m.latency_cap = pyo.Constraint(expr=m.latency / float(cons.latency_s) <= 1.0)
    if cons.energy_j is not None:
        m.energy_cap = pyo.Constraint(expr=m.energy / float(cons.energy_j) <= 1.0)


def _device_loads(m: pyo.ConcreteModel, sg: StageGraph, arc_ids: list[int]) -> None:
    """The period's terms, exactly the evaluator's: ``m.device_load`` (each device's compute +
    receive time summed over the stages; the sink also receives the gather), ``m.medium`` on a
    shared medium (every transfer), and the period cap when set."""
    shared = sg.instance.network.medium == "shared"
    m.device_load = pyo.Expression(
        m.DEV, rule=lambda m, d: sum(sg.arcs[a].load[d] * m.x[a] for a in arc_ids if sg.arcs[a].load[d])
        + sum(sg.terminals[t].load[d] * m.end[t] for t in m.TERM))
    if shared:
        m.medium = pyo.Expression(expr=sum(sg.arcs[a].transfer_s * m.x[a] for a in arc_ids)
                                  + sum(sg.terminals[t].gather_s * m.end[t] for t in m.TERM))
    if sg.instance.constraints.period_s is not None:
        cap = float(sg.instance.constraints.period_s)
        m.period_cap = pyo.Constraint(m.DEV, rule=lambda m, d: m.device_load[d] / cap <= 1.0)
        if shared:
            m.period_medium_cap = pyo.Constraint(expr=m.medium / cap <= 1.0)


def _objective(m: pyo.ConcreteModel, inst, objective: str) -> None:
    """``m.obj``: the period (``m.period`` above every device's load and the medium's), the
    peak memory (``m.peak``), the energy or the latency."""
    if objective == "period":
        m.period = pyo.Var(within=pyo.NonNegativeReals)
        m.period_lb = pyo.Constraint(m.DEV, rule=lambda m, d: m.period >= m.device_load[d])
        if inst.network.medium == "shared":
            m.period_medium = pyo.Constraint(expr=m.period >= m.medium)
        m.obj = pyo.Objective(expr=m.period)
    elif objective == "memory":
        m.peak = pyo.Var(within=pyo.NonNegativeReals)
        m.peak_lb = pyo.Constraint(m.DEV, rule=lambda m, d: m.peak >= m.memory[d])
        m.obj = pyo.Objective(expr=m.peak)
    elif objective == "energy":
        m.obj = pyo.Objective(expr=m.energy)
    else:
        m.obj = pyo.Objective(expr=m.latency)


def fresh_highs_threads() -> None:
    """Free HiGHS's thread scheduler. HiGHS keeps one per process, sized by its first run, and a
    later run that asks for another number of threads fails; call this before such a run."""
    import highspy

    highspy.Highs().resetGlobalScheduler(True)


def objective_unscale(m: pyo.ConcreteModel) -> float:
    """Factor turning the model's objective units into the evaluator's (bytes for memory)."""
    return 1.0 / m.memory_scale if m.objective_name == "memory" else 1.0


def solution_arcs(sg: StageGraph, m: pyo.ConcreteModel) -> list[int]:
    """Arcs with x = 1 in the model's current values, in stage order."""
    chosen = [a for a in m.ARCS if m.x[a].value is not None and m.x[a].value > 0.5]
    return sorted(chosen, key=lambda a: sg.arcs[a].option.first)

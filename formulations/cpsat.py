"""CP-SAT model of the plan space (OR-Tools), the same path flow as the MILP in integers.

Times and energies are scaled to integer units: at most a nanosecond and a nanojoule
(``TIME_RES``, ``ENERGY_RES``), and at most ``RELATIVE_RES`` of a typical plan's latency or
energy (``magnitudes``: the warm start's, else the most any plan can cost), so that millisecond
and millijoule plans are told apart as finely as second and joule ones. Every arc's cost is
rounded to the nearest unit, so a plan of ``k`` stages may differ from the evaluator by at most
``(k + 1) / 2`` units (``tolerance``). Memory is exact (bytes).

``build_cpsat(sg, objective)`` returns a ``CpsatModel``: ``model`` (the ``CpModel``), ``x``
(arc -> BoolVar), ``end`` (terminal -> BoolVar), ``memory`` (device -> IntVar), ``latency``,
``energy`` (linear expressions in units), ``period`` (IntVar or None) and ``scale`` (units per
objective unit). Add constraints to ``model`` before solving.

>>> from ortools.sat.python import cp_model                       # doctest: +SKIP
>>> from formulations import build_stage_graph, build_cpsat
>>> sg = build_stage_graph(instance)                             # doctest: +SKIP
>>> cm = build_cpsat(sg, "latency")                              # doctest: +SKIP
>>> cm.model.Add(cm.memory[0] <= 64_000_000)   # your own constraint   # doctest: +SKIP
>>> solver = cp_model.CpSolver(); solver.Solve(cm.model)          # doctest: +SKIP
>>> plan = sg.plan_from_arcs(cm.solution_arcs(solver))            # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from formulations.additive_caps import arcs_over_caps
from formulations.stagegraph import StageGraph

TIME_RES = 1e-9  # the largest unit of time: seconds per unit
ENERGY_RES = 1e-9  # the largest unit of energy: joules per unit
RELATIVE_RES = 1e-10  # a unit is at most this share of a typical plan's latency or energy


@dataclass
class CpsatModel:
    model: cp_model.CpModel
    x: dict
    end: dict
    memory: dict
    latency: object
    energy: object
    period: object
    objective: str
    scale: float  # model units per objective unit (1 / resolution; 1 for memory bytes)
    n_layers: int

    @property
    def tolerance(self) -> float:
        """Largest absolute difference, in objective units, rounding can cause on one plan."""
        return 0.0 if self.objective == "memory" else (self.n_layers + 1) * 0.5 / self.scale

    def solution_arcs(self, solver: cp_model.CpSolver) -> list[int]:
        return sorted((a for a, v in self.x.items() if solver.Value(v)), key=lambda a: a)


def _units(v: float, res: float) -> int:
    return int(round(v / res))


def magnitudes(sg: StageGraph, arcs: list[int] | None = None) -> tuple[float, float]:
    """(seconds, joules): a typical plan's latency and energy, from ``arcs`` (a plan, e.g. the
    warm start's), else the most any plan of ``sg`` can cost (each layer at its dearest arc)."""
    if arcs:
        return sg.path_value(arcs, "latency"), sg.path_value(arcs, "energy")
    n = len(sg.instance.graph.layers)
    tau, joules = [0.0] * n, [0.0] * n
    for arc in sg.arcs:
        o, width = arc.option, arc.option.last - arc.option.first + 1
        for lid in range(o.first, o.last + 1):
            tau[lid] = max(tau[lid], arc.tau / width)
            joules[lid] = max(joules[lid], arc.energy / width)
    ends = sg.terminals.values()
    return (sum(tau) + max((t.gather_s for t in ends), default=0.0),
            sum(joules) + max((t.energy for t in ends), default=0.0))


#: the most units any plan's sum may reach: CP-SAT answered a wrong optimum (a memory optimum
#: under a period cap, 520 bytes for 504) once its loads reached 2e10 units
MAX_UNITS = 2**31


def _resolution(largest: float, typical: float, most: float) -> float:
    """The unit: at most ``largest`` and ``RELATIVE_RES`` of ``typical``, and at least what
    keeps ``most`` (the largest sum any plan reaches) within ``MAX_UNITS``."""
    unit = largest if not typical > 0 else min(largest, RELATIVE_RES * typical)
    return max(unit, most / MAX_UNITS)


def build_cpsat(sg: StageGraph, objective: str, arcs: list[int] | None = None,
                typical: tuple[float, float] | None = None) -> CpsatModel:
    """A CP-SAT model of the plan space ``sg`` (restricted to ``arcs`` when given); ``typical``:
    a plan's (seconds, joules) that sets the units (default ``magnitudes(sg)``)."""
    inst = sg.instance
    time_res, energy_res = _resolutions(sg, typical)
    n_layers = len(inst.graph.layers)
    arc_ids = list(range(len(sg.arcs))) if arcs is None else list(arcs)
    over = arcs_over_caps(sg, arc_ids)  # on no path within the latency / energy caps: left out
    arc_ids = [a for a in arc_ids if a not in over]
    m = cp_model.CpModel()
    x = {a: m.NewBoolVar(f"x{a}") for a in arc_ids}
    end = {t: m.NewBoolVar(f"end{t}") for t in sg.terminals}
    covering = _path_flow(m, sg, arc_ids, x, end)
    memory, memory_ub = _memory(m, sg, arc_ids, x, covering)

    def units(v: float) -> int:
        return _units(v, time_res)

    latency = (sum(units(sg.arcs[a].tau) * x[a] for a in arc_ids)
               + sum(units(sg.terminals[t].gather_s) * end[t] for t in end))
    energy = (sum(_units(sg.arcs[a].energy, energy_res) * x[a] for a in arc_ids)
              + sum(_units(sg.terminals[t].energy, energy_res) * end[t] for t in end))
    # a cap in units, widened by what rounding may add to a plan's sum (a plan within the cap is
    # never left out; one the widening lets over it is cut off by the driver, ``solve_cpsat``)
    widen = n_layers + 2
    if inst.constraints.latency_s is not None:
        m.Add(latency <= units(float(inst.constraints.latency_s)) + widen)
    if inst.constraints.energy_j is not None:
        m.Add(energy <= _units(float(inst.constraints.energy_j), energy_res) + widen)
    loads = []  # the period's terms in units, exactly the evaluator's (see formulations.milp)
    if objective == "period" or inst.constraints.period_s is not None:
        loads = _loads(sg, arc_ids, x, end, units)
    if inst.constraints.period_s is not None:
        cap = units(float(inst.constraints.period_s)) + widen
        for expr in loads:
            if not isinstance(expr, int):
                m.Add(expr <= cap)
    period = None
    scale = 1.0 / time_res
    if objective == "period":
        period = m.NewIntVar(0, _period_ub(sg, covering, units), "period")
        for expr in loads:
            m.Add(period >= expr)
        m.Minimize(period)
    elif objective == "memory":
        peak = m.NewIntVar(0, max(memory_ub.values(), default=0), "peak")
        m.AddMaxEquality(peak, list(memory.values()))
        m.Minimize(peak)
        scale = 1.0
    elif objective == "energy":
        m.Minimize(energy)
        scale = 1.0 / energy_res
    else:
        m.Minimize(latency)
    return CpsatModel(m, x, end, memory, latency, energy, period, objective, scale, n_layers)


def _resolutions(sg: StageGraph, typical: tuple[float, float] | None) -> tuple[float, float]:
    """(seconds, joules) per unit, from ``typical`` (default ``magnitudes(sg)``) widened to the
    caps, and what keeps the dearest plan within ``MAX_UNITS``."""
    cons = sg.instance.constraints
    most_s, most_j = magnitudes(sg)  # every layer at its dearest arc: no plan sums more
    seconds, joules = typical if typical is not None else (most_s, most_j)
    for cap in (cons.latency_s, cons.period_s):
        if cap is not None:
            seconds = max(seconds, float(cap))
    if cons.energy_j is not None:
        joules = max(joules, float(cons.energy_j))
    return _resolution(TIME_RES, seconds, most_s), _resolution(ENERGY_RES, joules, most_j)


def _path_flow(m: cp_model.CpModel, sg: StageGraph, arc_ids: list[int], x: dict, end: dict) -> list[list[int]]:
    """One path of chosen arcs from the source to a terminal, covering every layer once.
    Returns the arcs covering each layer."""
    keep = set(arc_ids)
    for v in range(sg.n_nodes):
        inflow = [x[a] for a in sg.in_arcs[v] if a in keep]
        outflow = [x[a] for a in sg.out_arcs[v] if a in keep]
        if v == sg.source:
            m.AddExactlyOne(outflow)
        elif v in sg.terminals:
            m.Add(sum(inflow) == end[v])
        elif inflow or outflow:
            m.Add(sum(inflow) == sum(outflow))
    covering: list[list[int]] = [[] for _ in sg.instance.graph.layers]
    for a in arc_ids:
        o = sg.arcs[a].option
        for lid in range(o.first, o.last + 1):
            covering[lid].append(a)
    for arcs in covering:
        m.AddExactlyOne([x[a] for a in arcs])
    return covering


def _memory(m: cp_model.CpModel, sg: StageGraph, arc_ids: list[int], x: dict,
            covering: list[list[int]]) -> tuple[dict, dict]:
    """Per device its memory (weights + the largest working set, bytes; capped when the
    instance caps memory) and that variable's upper bound."""
    inst = sg.instance
    caps = {d: dev.memory_bytes for d, dev in enumerate(inst.devices)
            if dev.memory_bytes is not None and inst.constraints.memory}
    memory, memory_ub = {}, {}
    for d in range(len(inst.devices)):
        wmax = sum(max((sg.arcs[a].weights[d] for a in arcs), default=0) for arcs in covering)
        smax = max((sg.arcs[a].working[d] for a in arc_ids), default=0)
        working = m.NewIntVar(0, smax, f"working{d}")
        for arcs in covering:
            m.Add(working >= sum(sg.arcs[a].working[d] * x[a] for a in arcs if sg.arcs[a].working[d]))
        mem = m.NewIntVar(0, wmax + smax, f"memory{d}")
        memory_ub[d] = wmax + smax
        m.Add(mem == sum(sg.arcs[a].weights[d] * x[a] for a in arc_ids if sg.arcs[a].weights[d]) + working)
        if d in caps:
            m.Add(mem <= caps[d])
        memory[d] = mem
    return memory, memory_ub


def _loads(sg: StageGraph, arc_ids: list[int], x: dict, end: dict, units) -> list:
    """The period's terms in units: each device's compute + receive time (the sink's with the
    gather), and on a shared medium every transfer."""
    loads = [sum(units(sg.arcs[a].load[d]) * x[a] for a in arc_ids if sg.arcs[a].load[d])
             + sum(units(sg.terminals[t].load[d]) * end[t] for t in end)
             for d in range(len(sg.instance.devices))]
    if sg.instance.network.medium == "shared":
        loads.append(sum(units(sg.arcs[a].transfer_s) * x[a] for a in arc_ids)
                     + sum(units(sg.terminals[t].gather_s) * end[t] for t in end))
    return loads


def _period_ub(sg: StageGraph, covering: list[list[int]], units) -> int:
    """An upper bound of the period variable: every layer at its dearest load, the gather, and
    the medium's transfers on top."""
    ub = (sum(max((units(max(sg.arcs[a].load)) for a in arcs), default=0) for arcs in covering)
          + max((units(t.gather_s) for t in sg.terminals.values()), default=0))
    return max(ub, sum(max((units(sg.arcs[a].transfer_s) for a in arcs), default=0) for arcs in covering) + ub)

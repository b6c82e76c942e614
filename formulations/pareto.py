"""The ε-constraint method's formulation-level parts: the caps, the steps and the front's data.

The loop that computes a Pareto front (``milp_planner.pareto.pareto_front``: ε-steps and
lexicographic steps solved by an exact planner) is a driver over the planners; this module holds
what it formulates and returns, with no planner in it:

- ``capped_instance(instance, caps)``: an ε-step's caps expressed through the instance
  (``Constraints.latency_s``/``energy_j``/``period_s`` and the devices' ``memory_bytes`` for the
  memory objective, the largest memory of any device), so any planner that honours the
  instance's caps solves the step; ``check_objectives``: the 2 or 3 objectives a front takes;
- ``next_cap`` and ``resolution``: the next cap, strictly below a point (below);
- ``ParetoPoint``, ``BoundStep`` and ``ParetoFront``: a point, what one ε-step proved, the front
  (``to_dict()``: the ``pareto --json`` structure);
- ``non_dominated``, ``hypervolume``, ``reference_point`` and ``lower_bound_set``: the front's
  points, its hypervolume, and the lower bound set its steps' proven bounds give.

Strictly below: the next cap is f2 x (1 - ``RESOLUTION``) for seconds and joules (the evaluator
lets a plan pass a cap by a relative 1e-9, ``milp_planner.cost.evaluator.CAP_SLACK``, so the
point just found is outside the next step) and f2 - 1 byte for memory (exact). A plan whose f2
lies in the step's gap (less than ``RESOLUTION`` below a point's) is not looked for: the front
states its ``resolution``, and ``certified`` means: every plan of the space within the caps is
weakly dominated by a point of the front once that point's values are lowered by the resolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from milp_planner.cost.evaluator import Metrics
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance

#: objectives that can be capped (and so take part in a front)
PARETO_OBJECTIVES = ("latency", "energy", "memory", "period")
#: the evaluator's name of each objective's metric (as ``evaluate --json`` names them)
METRIC_NAMES = {"latency": "latency_s", "energy": "energy_j", "memory": "max_memory_bytes", "period": "period_s"}
#: relative: the next ε-step's cap lies this far below the last point's value (seconds and joules):
#: twice the evaluator's cap slack, so the point just found is outside it
RESOLUTION = 2e-9
MEMORY_STEP = 1  # bytes: memory is exact


@dataclass
class ParetoPoint:
    """One point of the front: its objective vector, plan, evaluator metrics and what was proven."""

    values: dict[str, float]
    plan: Any
    metrics: Metrics
    status: str  # "optimal" when every lexicographic step was proven optimal
    minimised: str  # the objective minimised at this point's ε-step
    bound: float | None  # the proven lower bound of ``minimised`` at that step

    def to_dict(self) -> dict:
        m = self.metrics.to_dict()
        return {"values": self.values, "status": self.status, "minimised": self.minimised, "bound": self.bound,
                "metrics": {k: m[k] for k in ("latency_s", "energy_j", "period_s", "memory_bytes",
                                              "max_memory_bytes", "feasible")},
                "plan": self.plan.to_dict()}


@dataclass
class BoundStep:
    """What one ε-step proved: no plan has ``capped`` objective <= ``cap`` and ``minimised`` < ``bound``.

    ``time_s``: the step's solve time; ``rss_bytes``: the process's resident memory after the
    step and ``release_memory``; ``message``: why a step not proven optimal stopped."""

    caps: dict[str, float]
    minimised: str
    bound: float | None
    status: str
    time_s: float | None = None
    rss_bytes: int | None = None
    message: str = ""

    def to_dict(self) -> dict:
        out = {"caps": self.caps, "minimised": self.minimised, "bound": self.bound, "status": self.status}
        if self.time_s is not None:
            out["time_s"] = self.time_s
        if self.rss_bytes is not None:
            out["rss_bytes"] = self.rss_bytes
        if self.message:
            out["message"] = self.message
        return out


@dataclass
class ParetoFront:
    """The result of ``milp_planner.pareto.pareto_front``; ``to_dict()`` is the ``pareto --json`` structure."""

    instance: str
    objectives: list[str]
    planner: str
    points: list[ParetoPoint]
    certified: bool
    steps: list[BoundStep] = field(default_factory=list)
    bound_set: list[dict[str, float]] | None = None
    reference: list[float] | None = None
    hypervolume: float | None = None
    bound_hypervolume: float | None = None
    resolution: dict | None = None  # per objective: the steps' resolution (``resolution``)
    elapsed_s: float = 0.0
    solves: int = 0
    message: str = ""

    @property
    def hypervolume_gap(self) -> float | None:
        """(HV(bound set) - HV(front)) / HV(bound set): 0 when certified, None without a bound set."""
        if self.certified:
            return 0.0
        if self.bound_hypervolume is None or self.hypervolume is None or self.bound_hypervolume <= 0:
            return None
        return max(0.0, (self.bound_hypervolume - self.hypervolume) / self.bound_hypervolume)

    def vectors(self) -> list[tuple[float, ...]]:
        return [tuple(p.values[o] for o in self.objectives) for p in self.points]

    def to_dict(self) -> dict:
        return {"instance": self.instance, "objectives": self.objectives, "planner": self.planner,
                "certified": self.certified, "resolution": self.resolution,
                "points": [p.to_dict() for p in self.points],
                "hypervolume": self.hypervolume, "reference_point": self.reference,
                "bound_set": self.bound_set, "bound_hypervolume": self.bound_hypervolume,
                "hypervolume_gap": self.hypervolume_gap, "elapsed_s": self.elapsed_s, "solves": self.solves,
                "message": self.message,
                "steps": [s.to_dict() for s in self.steps]}


def objective_value(metrics: Metrics, objective: str) -> float:
    return metrics.value(objective)


def next_cap(objective: str, value: float) -> float:
    """The largest cap strictly below ``value`` that the evaluator tells apart from it."""
    if objective == "memory":
        return float(math.floor(value) - MEMORY_STEP)
    return value * (1 - RESOLUTION) if value > 0 else value - 1.0  # (no plan has a negative objective)


def resolution(objectives) -> dict[str, dict[str, float]]:
    """Per objective, how far below a front point's value a plan may lie unseen (``certified``
    holds up to it): ``{"relative": ...}`` or ``{"absolute": ...}`` (bytes)."""
    return {o: ({"absolute": float(MEMORY_STEP)} if o == "memory" else {"relative": RESOLUTION}) for o in objectives}


def capped_instance(instance: Instance, caps: dict[str, float]) -> Instance:
    """``instance`` with the objective caps added (the tighter of its own and the cap wins)."""
    c = instance.constraints
    devices = instance.devices
    for obj, cap in caps.items():
        if obj == "latency":
            own = c.latency_s
            c = replace(c, latency_s=Fraction(cap) if own is None else min(own, Fraction(cap)))
        elif obj == "energy":
            own = c.energy_j
            c = replace(c, energy_j=Fraction(cap) if own is None else min(own, Fraction(cap)))
        elif obj == "period":
            own = c.period_s
            c = replace(c, period_s=Fraction(cap) if own is None else min(own, Fraction(cap)))
        elif obj == "memory":
            cap_b = max(0, int(math.floor(cap)))
            devices = tuple(replace(d, memory_bytes=cap_b if (d.memory_bytes is None or not instance.constraints.memory)
                                    else min(d.memory_bytes, cap_b)) for d in devices)
            c = replace(c, memory=True)
        else:
            raise PlannerError(f"objective {obj!r} cannot be capped (a Pareto front takes "
                               f"{', '.join(PARETO_OBJECTIVES)})")
    return replace(instance, constraints=c, devices=devices)


def check_objectives(objectives) -> list[str]:
    objs = list(objectives)
    if len(objs) not in (2, 3):
        raise PlannerError(f"--objectives: give 2 or 3 objectives (got {len(objs)})")
    if len(set(objs)) != len(objs):
        raise PlannerError(f"--objectives: {','.join(objs)} repeats an objective")
    for o in objs:
        if o not in PARETO_OBJECTIVES:
            raise PlannerError(f"--objectives: unknown objective {o!r} (use {', '.join(PARETO_OBJECTIVES)})")
    return objs



def non_dominated(points: list[ParetoPoint], objectives: list[str]) -> list[ParetoPoint]:
    """The points no other point dominates, one per objective vector, sorted by the first objective."""
    vec = [tuple(p.values[o] for o in objectives) for p in points]
    keep: dict[tuple, ParetoPoint] = {}
    for i, v in enumerate(vec):
        dominated = any(all(a <= b for a, b in zip(w, v)) and w != v for w in vec)
        if not dominated and v not in keep:
            keep[v] = points[i]
    return [keep[v] for v in sorted(keep)]


def hypervolume(vectors: list[tuple[float, ...]], reference: list[float]) -> float:
    """The hypervolume (minimisation) dominated by ``vectors`` up to ``reference`` (pymoo's HV)."""
    import numpy as np
    from pymoo.indicators.hv import HV

    inside = [v for v in vectors if all(a < r for a, r in zip(v, reference))]
    if not inside:
        return 0.0
    return float(HV(ref_point=np.array(reference, dtype=float))(np.array(inside, dtype=float)))


def reference_point(vectors: list[tuple[float, ...]], factor: float = 1.1) -> list[float] | None:
    """The nadir of ``vectors`` times ``factor`` (every objective is >= 0)."""
    if not vectors:
        return None
    return [max(v[i] for v in vectors) * factor or 1e-12 for i in range(len(vectors[0]))]


def lower_bound_set(steps: list[BoundStep], objectives: list[str]) -> list[dict[str, float]]:
    """A lower bound set from the ε-steps that minimised the first objective (2 or 3 objectives).

    A step with caps c (on the other objectives; absent = infinite) and proven bound b says: no
    plan has f_j <= c_j for every capped j and f1 < b (b = inf: no plan at all; no bound: 0, as
    every objective is >= 0). So f1 >= B(y) = max{b_s : y_j <= c_sj for all j} for every plan y.
    B is constant on the cells of the grid of the steps' caps (0 and inf added): on the cell
    (g_i, g_i+1] x (h_k, h_k+1] it is the largest bound of the steps whose caps reach g_i+1 and
    h_k+1. Every plan in that cell lies above (B, g_i, h_k): those corners, cells with B = inf
    dropped and points above another dropped, are the set. Every feasible plan weakly dominates
    one of them (no plan lies strictly below the set)."""
    f1, rest = objectives[0], list(objectives[1:])
    used = [s for s in steps if s.minimised == f1]
    if not used:
        return [{o: 0.0 for o in objectives}]
    grids = [sorted({0.0, math.inf} | {max(0.0, float(s.caps[o])) for s in used if o in s.caps}) for o in rest]

    def bound_of(s: BoundStep) -> float:
        return 0.0 if s.bound is None else max(0.0, float(s.bound))

    caps = [[float(s.caps.get(o, math.inf)) for o in rest] for s in used]
    bounds = [bound_of(s) for s in used]
    cells: set[tuple[float, ...]] = set()

    def walk(j: int, corner: list[float], upper: list[float]) -> None:
        if j == len(rest):
            b = max((bd for bd, c in zip(bounds, caps) if all(ci >= u for ci, u in zip(c, upper))), default=0.0)
            if b != math.inf:
                cells.add((b, *corner))
            return
        g = grids[j]
        for i in range(len(g) - 1):
            walk(j + 1, corner + [g[i]], upper + [g[i + 1]])

    walk(0, [], [])
    pts = list(cells)
    keep = [p for p in pts if not any(q != p and all(a <= b for a, b in zip(q, p)) for q in pts)]
    return [dict(zip([f1] + rest, p)) for p in sorted(keep, key=lambda p: p[1:])]


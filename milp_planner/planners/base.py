"""One small interface for every planner (exact, heuristic or relaxed).

A planner is a class with a ``name``, a one-line ``description``, a ``source`` and a
``search(instance, ctx)`` method returning a ``Plan`` (or a ``PlanResult`` when it knows more,
e.g. a proven bound). ``Planner.solve`` times it, scores the plan with the evaluator and
returns a ``PlanResult``; the objective value reported is always the evaluator's.

>>> from milp_planner.planners import get_planner             # doctest: +SKIP
>>> result = get_planner("offload").solve(instance)           # doctest: +SKIP
>>> result.value, result.status                               # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from milp_planner.cost.evaluator import Metrics, evaluate
from milp_planner.instance import Instance
from milp_planner.space.plan import Plan

STATUSES = ("optimal", "feasible", "infeasible", "timeout", "error")


@dataclass
class SolveContext:
    """What every planner is told: objective, limits, seed, and where to report progress."""

    objective: str = "latency"
    time_limit: float | None = None
    threads: int = 1
    seed: int = 0
    progress: Callable[[dict], None] | None = None  # called with {"incumbent", "bound", "gap", "elapsed"}
    started: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @property
    def deadline(self) -> float | None:
        """The ``time.perf_counter()`` value at which the time limit runs out (None: no limit)."""
        return None if self.time_limit is None else self.started + self.time_limit

    def remaining(self) -> float | None:
        return None if self.time_limit is None else max(0.0, self.time_limit - self.elapsed())

    def report(self, **info) -> None:
        if self.progress is not None:
            info.setdefault("elapsed", self.elapsed())
            info.setdefault("objective", self.objective)
            self.progress(info)


@dataclass
class PlanResult:
    """A plan plus what the planner knows about it. ``value`` is the evaluator's objective."""

    planner: str
    status: str
    objective: str
    plan: Plan | None = None
    value: float | None = None
    bound: float | None = None
    solve_time_s: float = 0.0
    space: dict = field(default_factory=dict)
    metrics: Metrics | None = None
    info: dict = field(default_factory=dict)
    message: str = ""

    @property
    def gap(self) -> float | None:
        """Relative gap (value - bound) / value, or None without a bound."""
        if self.value is None or self.bound is None:
            return None
        if self.value == 0:
            return 0.0
        return max(0.0, (self.value - self.bound) / abs(self.value))

    def to_dict(self) -> dict:
        return {
            "planner": self.planner,
            "status": self.status,
            "objective_name": self.objective,
            "objective": self.value,
            "bound": self.bound,
            "gap": self.gap,
            "solve_time_s": self.solve_time_s,
            "space": self.space,
            "message": self.message,
            "info": self.info,
            "metrics": self.metrics.to_dict() if self.metrics else None,
            "plan": self.plan.to_dict() if self.plan else None,
        }


class Planner:
    """Base class. Subclasses set ``name``, ``description``, ``source`` and implement ``search``."""

    name = "base"
    description = ""
    source = ""
    exact = False  # proves bounds
    seeded = False  # result depends on ctx.seed

    def __init__(self, **options):
        self.options = options

    def search(self, instance: Instance, ctx: SolveContext) -> Plan | PlanResult:
        raise NotImplementedError

    def solve(self, instance: Instance, objective: str | None = None, time_limit: float | None = None,
              threads: int = 1, seed: int = 0, progress=None) -> PlanResult:
        ctx = SolveContext(objective or instance.objective, time_limit, threads, seed, progress)
        out = self.search(instance, ctx)
        elapsed = ctx.elapsed()
        if isinstance(out, Plan):
            out = PlanResult(self.name, "feasible", ctx.objective, plan=out)
        out.solve_time_s = elapsed
        out.objective = ctx.objective
        if out.plan is not None:
            out.plan.instance = instance.name
            out.plan.meta.setdefault("planner", self.name)
            out.metrics = evaluate(out.plan, instance)
            out.value = out.metrics.value(ctx.objective)
            if out.status == "feasible" and not out.metrics.feasible:
                out.status = "infeasible"
                out.message = out.message or "; ".join(out.metrics.violations)
        if not out.space:
            out.space = space_dict(instance)
        return out


def space_dict(instance: Instance) -> dict:
    s = instance.search
    return {"fusion_limit": s.fusion_limit, "max_parts": s.max_parts, "splits": list(s.splits), "axes": list(s.axes)}

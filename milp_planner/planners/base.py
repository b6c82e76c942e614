"""One small interface for every planner (exact, heuristic or relaxed).

A planner is a class with a ``name``, a one-line ``description``, a ``source`` and a
``search(instance, ctx)`` method returning a ``Plan`` (or a ``PlanResult`` when it knows more,
e.g. a proven bound). ``Planner.solve`` times it, scores the plan with the evaluator and
returns a ``PlanResult``; the objective value reported is always the evaluator's.

>>> from milp_planner.planners import get_planner             # doctest: +SKIP
>>> result = get_planner("offload").solve(instance)           # doctest: +SKIP
>>> result.value, result.status                               # doctest: +SKIP

Options: a planner declares what it accepts as ``option_specs = (Option(...), ...)`` with a type,
a default and a range; ``Planner(**options)`` (and ``get_planner(name, **options)``, and
``-O key=value`` on the command line) checks them against that declaration, so a mistyped
or unknown option is a ``PlannerError`` naming it and the valid ones, never ignored.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from milp_planner.certificate import Proof, certify, relative_gap
from milp_planner.deadline import NEVER, Deadline
from milp_planner.errors import PlannerError

from milp_planner.cost.evaluator import Metrics, evaluate
from milp_planner.instance import Instance
from milp_planner.space.plan import Plan


_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list"}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


@dataclass(frozen=True)
class Option:
    """One declared planner option: its type, default and allowed values.

    ``default=None`` means "decided from the instance" (the planner's docstring says how).
    ``ge``/``gt``/``le`` bound numbers; ``choices`` lists the allowed strings; ``check`` is
    an extra test returning the reason a value is wrong, or None.
    """

    name: str
    type: type
    default: Any = None
    help: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple | None = None
    check: Callable[[Any], str | None] | None = None

    def describe(self) -> str:
        """``name=default`` with the range, for ``milp-planner planners``."""
        rng = []
        if self.choices:
            rng.append("|".join(map(str, self.choices)))
        if self.gt is not None:
            rng.append(f">{self.gt:g}")
        if self.ge is not None:
            rng.append(f">={self.ge:g}")
        if self.le is not None:
            rng.append(f"<={self.le:g}")
        default = "auto" if self.default is None else (str(self.default).lower() if isinstance(self.default, bool)
                                                        else self.default)
        return f"{self.name}={default}" + (f" ({', '.join(rng)})" if rng else "")

    def coerce(self, value: Any, planner: str) -> Any:
        """``value`` (a Python value, or text from ``-O key=value``) as this option's type."""
        def bad(reason: str):
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            return PlannerError(f"planner {planner!r}: option {self.name} {reason} (got {shown})")

        if value is None:
            if self.default is None:
                return None
            raise bad(f"must be {_TYPE_NAMES[self.type]}")
        t = self.type
        if t is bool:
            if isinstance(value, bool):
                v = value
            elif isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
                v = value.strip().lower() in _TRUE
            elif isinstance(value, int) and value in (0, 1):
                v = bool(value)
            else:
                raise bad("must be true or false")
        elif t is int:
            if isinstance(value, bool):
                raise bad("must be an integer")
            if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
                value = int(value)
            if isinstance(value, str):
                text = value.strip()
                if len(text) > 20:
                    raise bad("must be an integer of at most 20 digits")
                try:
                    value = int(text)
                except ValueError:
                    raise bad("must be an integer") from None
            if not isinstance(value, int):
                raise bad("must be an integer")
            v = value
        elif t is float:
            if isinstance(value, bool):
                raise bad("must be a number")
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    raise bad("must be a number") from None
            if not isinstance(value, (int, float)):
                raise bad("must be a number")
            try:
                v = float(value)
            except OverflowError:
                raise bad("is out of range") from None
            if not math.isfinite(v):
                raise bad("must be a finite number")
        elif t is str:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise bad("must be a string")
            v = str(value)
        elif t is list:
            if not isinstance(value, (list, tuple)):
                raise bad("must be a list (JSON, e.g. [[0, 3], [4, 9]])")
            v = list(value)
        else:  # pragma: no cover - a declaration error
            raise TypeError(f"option {self.name}: unsupported type {t}")
        if self.choices is not None and v not in self.choices:
            raise bad(f"must be one of {', '.join(map(str, self.choices))}")
        if t in (int, float):
            if self.ge is not None and not v >= self.ge:
                raise bad(f"must be >= {self.ge:g}")
            if self.gt is not None and not v > self.gt:
                raise bad(f"must be > {self.gt:g}")
            if self.le is not None and not v <= self.le:
                raise bad(f"must be <= {self.le:g}")
        if self.check is not None:
            why = self.check(v)
            if why:
                raise bad(why)
        return v


def resolve_planner_options(planner: str, declared: tuple[Option, ...], given: dict) -> dict:
    """Check ``given`` against ``declared``: the options with defaults filled in (``None`` left out).

    An unknown key is a ``PlannerError`` naming it and the valid ones (with a close match).
    """
    import difflib

    spec = {o.name: o for o in declared}
    for key in given:
        if key not in spec:
            valid = f"valid: {', '.join(spec)}" if spec else "it takes no options"
            hint = difflib.get_close_matches(str(key), list(spec), n=1)
            did = f"; did you mean {hint[0]!r}?" if hint else ""
            raise PlannerError(f"planner {planner!r}: unknown option {str(key)!r} ({valid}){did}")
    out = {o.name: o.default for o in declared if o.default is not None}
    for key, value in given.items():
        v = spec[key].coerce(value, planner)
        if v is not None:
            out[key] = v
        else:
            out.pop(key, None)
    return out


def parse_option_text(text: str) -> Any:
    """The value of ``-O key=VALUE``: JSON when it parses (numbers, lists, true), else the text."""
    import json

    try:
        return json.loads(text, parse_constant=lambda c: c)
    except (ValueError, RecursionError):
        return text


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
    def deadline(self) -> Deadline:
        """When the time limit runs out (``NEVER`` without one)."""
        return NEVER if self.time_limit is None else Deadline(self.started + self.time_limit)

    def part_of_limit(self, fraction: float) -> Deadline:
        """``fraction`` of the time limit from the solve's start (``NEVER`` without a limit)."""
        return NEVER if self.time_limit is None else Deadline(self.started + fraction * self.time_limit)

    def remaining(self) -> float | None:
        """Seconds left (None without a limit)."""
        return self.deadline.seconds()

    def report(self, **info) -> None:
        if self.progress is not None:
            info.setdefault("elapsed", self.elapsed())
            info.setdefault("objective", self.objective)
            self.progress(info)


@dataclass
class PlanResult:
    """A plan plus what the planner knows about it. ``value`` is the evaluator's objective.

    A planner's ``search`` fills in the facts: the plan, ``proofs`` (proven lower bounds with
    their sources), ``status`` ``timeout`` when the time limit stopped it, ``infeasible`` when it
    proved that no plan meets the caps, and ``solver_value`` / ``tolerance`` (its solver's own
    objective of the plan and that solver's stated rounding). ``Planner.solve`` scores the plan
    and then ``status``, ``bound`` and ``bound_source`` follow from those facts by the one rule,
    ``milp_planner.certificate.certify``."""

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
    proofs: list[Proof] = field(default_factory=list)
    bound_source: str | None = None
    solver_value: float | None = None  # the solver's own objective of ``plan`` (checked against the evaluator's)
    tolerance: float = 0.0  # absolute: how far the solver's rounding may put its value from the evaluator's

    @property
    def gap(self) -> float | None:
        """Relative gap (value - bound) / value, or None without a bound."""
        return relative_gap(self.value, self.bound)

    def settle(self, exact: bool) -> None:
        """``status``, ``bound`` and ``bound_source`` from the facts (``certify``); a plan that
        breaks the caps has the violations in ``message``."""
        feasible = None if self.metrics is None else self.metrics.feasible
        value = self.value if self.plan is not None else None
        cert = certify(value, feasible, self.proofs, stopped=self.status == "timeout",
                       infeasible=self.status == "infeasible" and self.plan is None, exact=exact)
        if value is not None and not feasible:
            why = "; ".join(self.metrics.violations)
            self.message = (f"{self.planner}: the solver's plan breaks the caps ({why}), within the solver's "
                            "tolerance; no plan within the caps is reported" + (f"; {self.message}" if self.message
                                                                              else "")) if exact else \
                (self.message or why)
        self.status, self.bound, self.bound_source = cert.status, cert.bound, cert.bound_source

    def to_dict(self) -> dict:
        return {
            "planner": self.planner,
            "status": self.status,
            "objective_name": self.objective,
            "objective": self.value,
            "bound": self.bound,
            "bound_source": self.bound_source,
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
    option_specs: tuple[Option, ...] = ()  # the declared options

    def __init__(self, **options):
        #: the checked options, declared defaults filled in (an "auto" default is left out)
        self.options = resolve_planner_options(self.name, self.option_specs, options)

    def search(self, instance: Instance, ctx: SolveContext) -> Plan | PlanResult:
        raise NotImplementedError

    def solve(self, instance: Instance, objective: str | None = None, time_limit: float | None = None,
              threads: int = 1, seed: int = 0, progress=None) -> PlanResult:
        """Run ``search``, score its plan and certify the result; the arguments are checked
        (``PlannerError``)."""
        check_solve_arguments(objective, time_limit, threads, seed)
        ctx = SolveContext(objective or instance.objective, time_limit, threads, seed, progress)
        out = self.run_search(instance, ctx)
        if isinstance(out, Plan):
            out = PlanResult(self.name, "feasible", ctx.objective, plan=out)
        out.objective = ctx.objective
        self.score(out, instance)
        out.proofs += self.more_proofs(out, instance, ctx)
        out.settle(self.exact)
        if not out.space:
            out.space = space_dict(instance)
        out.solve_time_s = ctx.elapsed()
        return out

    def run_search(self, instance: Instance, ctx: SolveContext) -> Plan | PlanResult:
        """``search``, with whatever fall-back a planner has when it stops early."""
        return self.search(instance, ctx)

    def score(self, out: PlanResult, instance: Instance) -> None:
        """The evaluator's metrics and value of the result's plan (a bound given as ``bound``
        by a planner without named proofs counts as one)."""
        if out.bound is not None and not out.proofs:
            out.proofs = [Proof(float(out.bound), self.bound_name)]
        out.bound = None
        if out.plan is None:
            out.metrics, out.value = None, None
            return
        out.plan.instance = instance.name
        out.plan.meta.setdefault("planner", self.name)
        out.metrics = evaluate(out.plan, instance)
        out.value = out.metrics.value(out.objective)

    #: the source named for a bound a planner returns without naming it
    bound_name = "planner"

    def more_proofs(self, out: PlanResult, instance: Instance, ctx: SolveContext) -> list[Proof]:
        """Proofs beyond the search's own (the exact planners add their floors)."""
        return []


def check_solve_arguments(objective, time_limit, threads, seed) -> None:
    """``PlannerError`` unless the time limit is finite and >= 0 (or None), threads >= 1, seed >= 0.

    A time limit of 0 stops at the first check (tests use it); the command line asks for > 0.
    """
    from milp_planner.instance.types import OBJECTIVES

    if objective is not None and objective not in OBJECTIVES:
        raise PlannerError(f"objective must be one of {', '.join(OBJECTIVES)} (got {objective!r})")
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) \
                or not math.isfinite(time_limit) or time_limit < 0:
            raise PlannerError(f"time limit must be a finite number of seconds >= 0 (got {time_limit!r})")
        if time_limit > 10**7:
            raise PlannerError(f"time limit must be at most 1e7 s (got {time_limit!r})")
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
        raise PlannerError(f"threads must be an integer from 1 to 1024 (got {threads!r})")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise PlannerError(f"seed must be an integer from 0 to 2**32-1 (got {seed!r})")


def space_dict(instance: Instance) -> dict:
    s = instance.search
    return {"fusion_limit": s.fusion_limit, "max_parts": s.max_parts, "splits": list(s.splits), "axes": list(s.axes)}

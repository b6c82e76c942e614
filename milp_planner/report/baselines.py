"""Baselines beside a result: named planners from the literature run on the same instance.

``run_baselines`` solves the instance with each named planner through the common planner
interface (``get_planner(name).solve``), so every plan is scored by the same evaluator, and
says how far each is from a reference value (usually a certified optimum).

A certificate speaks only of the instance's search space, and several baselines leave it
(other cuts, deeper fusion, more parts, another axis). Such a baseline's gap is measured
against a ``Reference`` whose space contains its plan: the optimum or a proven bound of the
exact planner over a space with every integer cut (split family ``any``) that encloses the
plan, or the floor of ``milp_planner.cost.floors`` over it. A gap to a reference that covers the
plan is never negative; a baseline that beats the in-space optimum is reported as such
(``vs_in_space``), never as a negative gap.

>>> rows = run_baselines(inst, ["neurosurgeon", "modnn"], reference=0.015,
...                      objective="latency", time_limit=10)          # doctest: +SKIP
>>> rows[0].planner, rows[0].value, rows[0].vs_reference              # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from milp_planner.deadline import NEVER, Deadline
from milp_planner.errors import PlannerError
from milp_planner.instance import AXES, Instance, SearchSpace
from milp_planner.planners import planner_class
from milp_planner.space.cuts import out_of_space
from milp_planner.space.plan import Plan

# Three baselines from the literature that are polynomial (they finish in well under a
# second on the packaged examples): whole-layer pipelines (Neurosurgeon), layer-by-layer
# splits biased by speed (MoDNN), and fusion with all-device row splits (CoopAI).
DEFAULT_BASELINES = ("neurosurgeon", "modnn", "coopai")
DEFAULT_BASELINE_TIME_LIMIT = 10.0  # seconds per baseline
MIN_REFERENCE_S = 0.5  # an exact reference given less time than this proves nothing worth waiting for


GAP_SNAP = 1e-9  # a relative gap below this is floating-point noise between two evaluations: 0


@dataclass(frozen=True)
class Reference:
    """A proven value a baseline's gap may be measured against, and the space it holds for.

    ``kind`` says what it is: ``in-space optimum``, ``any-cut optimum``, ``any-cut bound`` or
    ``floor``; ``space`` is the search space it is proven over (every plan of it has an
    objective of at least ``value``)."""

    value: float
    kind: str
    space: SearchSpace
    source: str = ""
    feasible_only: bool = True  # proven for the plans that meet the caps (an exact planner's)

    def covers(self, plan: Plan | None, instance: Instance, feasible: bool | None) -> bool:
        """Whether ``plan`` (``feasible``: it meets the caps) is one of the plans this
        reference holds for, so that its value is at least ``value``."""
        if plan is None or (self.feasible_only and not feasible):
            return False
        return not out_of_space(plan, replace(instance, search=self.space))

    def to_dict(self) -> dict:
        return {"value": self.value, "kind": self.kind, "source": self.source,
                "space": {"fusion_limit": self.space.fusion_limit, "max_parts": self.space.max_parts,
                          "splits": list(self.space.splits), "axes": list(self.space.axes)}}


@dataclass(frozen=True)
class BaselineRun:
    """One baseline's result, as the evaluator scores it.

    ``vs_reference`` is the gap to ``reference``, a proven value over a space that contains the
    baseline's plan (never negative); None when no such value is known. ``vs_in_space`` is the
    plain difference to the exact planner's in-space value: negative when a plan outside the
    space beats it, and then not a gap."""

    planner: str
    source: str  # the paper it reproduces
    status: str
    value: float | None  # the evaluator's objective of its plan
    vs_reference: float | None  # (value - reference) / reference; None without a covering reference
    feasible: bool | None  # meets the memory, latency and energy caps
    in_space: bool | None  # inside the instance's search space
    solve_time_s: float
    message: str = ""
    reference: Reference | None = None  # what vs_reference is measured against
    vs_in_space: float | None = None  # (value - in-space value) / in-space value

    def to_dict(self) -> dict:
        return {"planner": self.planner, "source": self.source, "status": self.status,
                "objective": self.value, "vs_result": self.vs_in_space, "vs_reference": self.vs_reference,
                "reference": None if self.reference is None else self.reference.to_dict(),
                "feasible": self.feasible, "in_space": self.in_space, "solve_time_s": self.solve_time_s,
                "message": self.message}


def enclosing_space(space: SearchSpace, plan: Plan | None, n_devices: int) -> SearchSpace:
    """The smallest space with every integer cut that contains ``space`` and ``plan``: its
    fusion depth, part count and axes widened to what the plan uses."""
    fusion, parts, axes = space.fusion_limit, space.max_parts, set(space.axes)
    for s in (plan.stages if plan is not None else ()):
        fusion = max(fusion, s.last - s.first + 1)
        parts = max(parts, len(s.parts))
        if len(s.parts) > 1 and s.axis != "none":
            axes.add(s.axis)
    return SearchSpace(fusion, min(max(parts, 1), max(n_devices, 1)), ("any",),
                       tuple(a for a in AXES if a in axes))


def floor_reference(instance: Instance, objective: str, space: SearchSpace,
                    deadline: Deadline = NEVER) -> list[Reference]:
    """The problem-specific floors of ``milp_planner.cost.floors`` over ``space`` (they hold for
    any cuts and fusion depth, so for every plan with at most ``max_parts`` parts on ``axes``).

    A floor of an instance with caps may use them (the flow MIP stores at most a device's
    memory), so it holds only for the plans within the caps; the floor of the same instance
    without its caps holds for every plan, and is the one an infeasible plan is measured
    against. ``deadline`` bounds the flow floor's LP."""
    from milp_planner.cost.floors import lower_floor

    every = SearchSpace(len(instance.graph.layers), space.max_parts, ("any",), space.axes)
    capped = has_caps(instance)
    cases = [(instance, capped)] + ([(without_caps(instance), False)] if capped else [])
    out = []
    for inst, feasible_only in cases:
        fl = lower_floor(replace(inst, search=space), objective, deadline=deadline)
        if fl.value is not None and fl.value > 0:
            out.append(Reference(float(fl.value), "floor", every, f"floor ({fl.source})",
                                 feasible_only=feasible_only))
    return out


def has_caps(instance: Instance) -> bool:
    """Whether any plan of ``instance`` can break a cap (memory, latency, energy or period)."""
    c = instance.constraints
    return instance.memory_capped or any(v is not None for v in (c.latency_s, c.energy_j, c.period_s))


def without_caps(instance: Instance) -> Instance:
    """``instance`` with no cap at all: every plan meets them."""
    from milp_planner.instance import Constraints

    return replace(instance, constraints=Constraints(memory=False))


def any_cut_reference(instance: Instance, objective: str, space: SearchSpace, planner: str = "dp",
                      time_limit: float | None = 60.0, threads: int = 1) -> Reference | None:
    """The exact planner ``planner`` over ``space`` (splits ``any``): its certified optimum, or
    the bound it proved before ``time_limit``; None when it proves nothing (the cut vectors or
    stage options are too many to list, or no bound in time)."""
    sub = replace(instance, search=space)
    try:
        res = planner_class(planner)().solve(sub, objective=objective, time_limit=time_limit, threads=threads)
    except PlannerError:
        return None
    if res.status == "optimal" and res.value is not None:
        return Reference(float(res.value), "any-cut optimum", space, f"{planner} over splits any")
    if res.bound is not None and res.bound > 0:
        return Reference(float(res.bound), "any-cut bound", space, f"{planner} over splits any ({res.status})")
    return None


def best_covering(references, plan: Plan | None, instance: Instance, feasible: bool | None) -> Reference | None:
    """The largest reference that holds for ``plan``."""
    ok = [r for r in references if r.covers(plan, instance, feasible)]
    return max(ok, key=lambda r: r.value) if ok else None


def covering_gap(value: float | None, ref: Reference | None) -> float | None:
    """(value - ref) / ref, snapped to 0 within floating-point noise. A value below a reference
    that covers its plan would make the reference false: that raises, it is never a gap."""
    gap = relative_gap(value, None if ref is None else ref.value)
    if gap is None:
        return None
    if abs(gap) < GAP_SNAP:
        return 0.0
    if gap < 0:
        raise AssertionError(f"a plan of value {value!r} lies below the {ref.kind} {ref.value!r} "
                             f"({ref.source}) of a space that contains it: that bound is wrong")
    return gap


def parse_baselines(text: str | None, planner: str) -> list[str]:
    """The baseline names of ``--compare TEXT`` for a run of ``planner``.

    ``None`` (the flag not given): the default baselines when ``planner`` is exact (there is
    a certificate to compare with), none otherwise. ``none`` or an empty string: none.
    Otherwise a comma-separated list of planner names; an unknown name raises
    ``PlannerError``. ``planner`` itself is left out.
    """
    if text is None:
        names = list(DEFAULT_BASELINES) if planner_class(planner).exact else []
    elif text.strip().lower() in ("", "none"):
        names = []
    else:
        names = [n.strip() for n in text.split(",") if n.strip()]
        for n in names:
            try:
                planner_class(n)
            except PlannerError as e:
                raise PlannerError(f"--compare: {e}") from None
    return [n for n in dict.fromkeys(names) if n != planner]


def relative_gap(value: float | None, reference: float | None) -> float | None:
    """(value - reference) / |reference|, or None when either is missing or reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return (value - reference) / abs(reference)


class _OutOfTime(Exception):
    """Raised from a baseline's progress callback once its time limit has passed (not
    ``DeadlinePassed``: a planner catches that one for its own steps)."""


def run_baselines(instance: Instance, names, reference: float | None, objective: str,
                  time_limit: float | None = DEFAULT_BASELINE_TIME_LIMIT, threads: int = 1, seed: int = 0,
                  progress=None, *, bound: float | None = None, certified: bool = False,
                  exact_planner: str | None = None, reference_time_limit: float | None = None,
                  budget_s: float | None = None) -> list[BaselineRun]:
    """Solve ``instance`` with each planner of ``names`` and compare it with ``reference``.

    ``reference`` is the value of the exact planner's plan (``certified``: proven optimal over
    the instance's space; else ``bound`` is its proven bound, if any). A baseline inside the
    space is measured against that optimum or bound. A baseline outside it is measured
    against a reference over the smallest space with every integer cut that contains its plan
    (``enclosing_space``): the larger of the floor of ``milp_planner.cost.floors`` and, when
    ``exact_planner`` is given, that planner's optimum or bound over the space within
    ``reference_time_limit`` (default ``time_limit``) seconds. ``vs_in_space`` keeps the plain
    difference to ``reference``, negative when an out-of-space plan beats it.

    Each planner gets ``time_limit`` through the planner interface; the dynamic programs of
    the heuristics do not watch the clock themselves, so a baseline is also stopped at its
    next progress report after the limit (status ``timeout``, no plan). A baseline that
    fails with a ``PlannerError`` (e.g. it cannot handle this model) is reported with status
    ``error`` and the reason, not raised: the comparison is secondary to the result it is
    printed beside. ``progress(name)`` is called before each one.

    ``budget_s`` bounds the whole comparison (baselines and references): the references get
    what the baselines left of it, and with nothing left a plan outside the space is measured
    against the floors alone (its row says so).
    """
    deadline = Deadline.after(budget_s)
    runs = []  # (name, cls, result or None, seconds, status, message)
    for name in names:
        runs.append(_run_one(instance, name, objective, time_limit, threads, seed, progress))
    refs, failed = _references(instance, runs, reference, bound, certified, objective, exact_planner,
                               time_limit if reference_time_limit is None else reference_time_limit, threads, progress,
                               deadline)
    rows = []
    for name, cls, res, seconds, status, message in runs:
        if res is None:
            rows.append(BaselineRun(name, cls.source, status, None, None, None, None, seconds, message))
            continue
        m = res.metrics
        try:
            ref = best_covering(refs, res.plan, instance, m is not None and m.feasible) if res.value is not None \
                else None
            gap = covering_gap(res.value, ref)
        except Exception as err:  # noqa: BLE001 - a comparison never costs the result beside it
            ref, gap = None, None
            message = _join(message, f"internal error in the comparison: {type(err).__name__}: {err}")
        rows.append(BaselineRun(
            planner=name, source=cls.source, status=res.status, value=res.value, vs_reference=gap,
            feasible=None if m is None else m.feasible, in_space=None if m is None else m.in_space,
            solve_time_s=seconds, message=_join(message, failed) if res.metrics is not None
            and res.metrics.in_space is False else message, reference=ref,
            vs_in_space=relative_gap(res.value, reference)))
    return rows


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _run_one(instance, name, objective, time_limit, threads, seed, progress):
    """(name, class, result or None, seconds, status, message) of one baseline: a failure,
    expected (``PlannerError``) or not, is its row's status and message, never raised."""
    cls = planner_class(name)
    if progress is not None:
        progress(name)
    started = time.perf_counter()
    deadline = Deadline.after(time_limit)

    def watch(info: dict) -> None:
        if deadline.passed():
            raise _OutOfTime

    try:
        res = cls().solve(instance, objective=objective, time_limit=time_limit, threads=threads, seed=seed,
                          progress=watch)
    except _OutOfTime:
        return (name, cls, None, time.perf_counter() - started, "timeout", f"no plan within {time_limit:g} s")
    except PlannerError as e:
        return (name, cls, None, time.perf_counter() - started, "error", str(e))
    except Exception as e:  # noqa: BLE001 - reported on its line
        return (name, cls, None, time.perf_counter() - started, "error",
                f"internal error: {type(e).__name__}: {e}")
    return (name, cls, res, res.solve_time_s, res.status, res.message)


def _references(instance, runs, reference, bound, certified, objective, exact_planner, time_limit, threads,
                progress, deadline: Deadline = NEVER) -> tuple[list[Reference], str]:
    """The references a baseline may be measured against (see ``run_baselines``), and what
    failed or was left out while computing them (said on the rows of plans outside the space).
    ``deadline`` ends the whole comparison."""
    refs: list[Reference] = []
    in_space_ref = reference if certified else bound
    if in_space_ref is not None:
        refs.append(Reference(float(in_space_ref), "in-space optimum" if certified else "in-space bound",
                              instance.search, "the exact planner over the instance's space"))
    spaces = {}
    for _, _, res, *_ in runs:
        m = None if res is None else res.metrics
        if res is not None and res.plan is not None and m is not None and m.in_space is False:
            sp = enclosing_space(instance.search, res.plan, len(instance.devices))
            spaces.setdefault(sp, None)
    if spaces and progress is not None:
        progress("references over the spaces with every cut")
    failed = []
    for sp in spaces:
        try:
            refs.extend(floor_reference(instance, objective, sp, deadline))
            if exact_planner is None:
                continue
            left = time_limit if deadline.never else deadline.left()
            if left is not None and time_limit is not None:
                left = min(left, time_limit)
            if left is not None and left < MIN_REFERENCE_S:
                skipped = f"no time left in the comparison for {exact_planner} over splits any (floors only)"
                if skipped not in failed:
                    failed.append(skipped)
                continue
            ex = any_cut_reference(instance, objective, sp, exact_planner, left, threads)
            if ex is not None:
                refs.append(ex)
        except Exception as err:  # noqa: BLE001 - a reference the comparison goes without
            failed.append(f"internal error computing the reference over splits any: {type(err).__name__}: {err}")
    return refs, _join(*failed)

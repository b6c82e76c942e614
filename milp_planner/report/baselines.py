"""Baselines beside a result: named planners from the literature run on the same instance.

``run_baselines`` solves the instance with each named planner through the common planner
interface (``get_planner(name).solve``), so every plan is scored by the same evaluator, and
says how far each is from a reference value (usually a certified optimum).

>>> rows = run_baselines(inst, ["neurosurgeon", "modnn"], reference=0.015,
...                      objective="latency", time_limit=10)          # doctest: +SKIP
>>> rows[0].planner, rows[0].value, rows[0].vs_reference              # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.planners import planner_class

# Three baselines from the literature that are polynomial (they finish in well under a
# second on the packaged examples): whole-layer pipelines (Neurosurgeon), layer-by-layer
# splits biased by speed (MoDNN), and fusion with all-device row splits (CoopAI).
DEFAULT_BASELINES = ("neurosurgeon", "modnn", "coopai")
DEFAULT_BASELINE_TIME_LIMIT = 10.0  # seconds per baseline


@dataclass(frozen=True)
class BaselineRun:
    """One baseline's result, as the evaluator scores it."""

    planner: str
    source: str  # the paper it reproduces
    status: str
    value: float | None  # the evaluator's objective of its plan
    vs_reference: float | None  # (value - reference) / reference; None without both
    feasible: bool | None  # meets the memory, latency and energy caps
    in_space: bool | None  # inside the instance's search space
    solve_time_s: float
    message: str = ""

    def to_dict(self) -> dict:
        return {"planner": self.planner, "source": self.source, "status": self.status,
                "objective": self.value, "vs_result": self.vs_reference, "feasible": self.feasible,
                "in_space": self.in_space, "solve_time_s": self.solve_time_s, "message": self.message}


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
    """Raised from a baseline's progress callback once its time limit has passed."""


def run_baselines(instance: Instance, names, reference: float | None, objective: str,
                  time_limit: float | None = DEFAULT_BASELINE_TIME_LIMIT, threads: int = 1, seed: int = 0,
                  progress=None) -> list[BaselineRun]:
    """Solve ``instance`` with each planner of ``names`` and compare it with ``reference``.

    Each planner gets ``time_limit`` through the planner interface; the dynamic programs of
    the heuristics do not watch the clock themselves, so a baseline is also stopped at its
    next progress report after the limit (status ``timeout``, no plan). A baseline that
    fails with a ``PlannerError`` (e.g. it cannot handle this model) is reported with status
    ``error`` and the reason, not raised: the comparison is secondary to the result it is
    printed beside. ``progress(name)`` is called before each one.
    """
    rows = []
    for name in names:
        cls = planner_class(name)
        if progress is not None:
            progress(name)
        started = time.perf_counter()

        def watch(info: dict) -> None:
            if time_limit is not None and time.perf_counter() - started > time_limit:
                raise _OutOfTime

        try:
            res = cls().solve(instance, objective=objective, time_limit=time_limit, threads=threads, seed=seed,
                              progress=watch)
        except _OutOfTime:
            rows.append(BaselineRun(name, cls.source, "timeout", None, None, None, None,
                                    time.perf_counter() - started, f"no plan within {time_limit:g} s"))
            continue
        except PlannerError as e:
            rows.append(BaselineRun(name, cls.source, "error", None, None, None, None,
                                    time.perf_counter() - started, str(e)))
            continue
        m = res.metrics
        rows.append(BaselineRun(
            planner=name, source=cls.source, status=res.status, value=res.value,
            vs_reference=relative_gap(res.value, reference),
            feasible=None if m is None else m.feasible, in_space=None if m is None else m.in_space,
            solve_time_s=res.solve_time_s, message=res.message))
    return rows

"""Rows of ``results.csv`` from run records, gaps to the best proven bound, and per-cell summaries.

Gap rules (also in docs/reports.md):

- An instance's *best bound* is the largest lower bound certified by an exact planner for the
  instance's objective: its ``bound``, or its value when it reports ``optimal`` without one.
  Planners that are not exact never contribute a bound.
- ``gap = (value - reference) / value`` (0 when value is 0), where the reference is a proven
  value that holds for the row's plan, so the gap is never negative. For a feasible plan inside
  the instance's search space it is the best bound (``ref_kind`` ``in-space optimum`` or
  ``in-space bound``). A plan outside the space, or one that breaks a cap, is not covered by
  the in-space bound: its reference is the floor of ``milp_planner.cost.floors`` over the smallest
  space with every integer cut that holds the plan (``ref_kind`` ``floor``;
  ``milp_planner.report.baselines``). ``vs_in_space`` keeps (value - best_bound) / value,
  negative when such a plan beats the in-space optimum. Empty without a reference.
- ``certified`` is true for every row of an instance on which some exact planner reported
  ``optimal``.
- ``gap_to_best_known = (value - best) / value`` where ``best`` is the smallest value of a
  feasible plan any planner found for that instance: it is what the report shows for an
  instance without any proven bound (marked as such), never called a certified gap.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass, field

METRICS = ("latency_s", "energy_j", "period_s", "throughput_ips", "max_memory_bytes", "feasible", "in_space")
VERSION_COLUMNS = ("milp_planner", "python", "highspy", "ortools", "torch", "numpy")

COLUMNS = (
    "instance", "instance_file", "planner", "kind", "seed", "objective", "value",
    *METRICS,
    "bound", "best_bound", "gap", "ref_kind", "ref_value", "vs_in_space", "gap_to_best_known", "certified",
    "status", "runtime_s", "solve_time_s", "time_limit_s", "killed", "cached", "error", "message",
    *(f"{v}_version" for v in VERSION_COLUMNS),
    "host", "key",
)

OK_STATUSES = ("optimal", "feasible", "timeout")  # a run that may hold a usable plan


def _kind(task: dict) -> str:
    return "exact" if task.get("exact") else ("seeded" if task.get("seeded") else "heuristic")


GAP_SNAP = 1e-9  # |gap| below this is floating-point noise between two evaluations: 0


def rel_gap(value, ref):
    if value is None or ref is None:
        return None
    if value == 0:
        return 0.0
    gap = (value - ref) / abs(value)
    return 0.0 if abs(gap) < GAP_SNAP else gap


def build_rows(records: list[dict]) -> list[dict]:
    """One row per record (instance, planner, seed), gaps filled in."""
    rows = []
    for rec in records:
        task = rec["task"]
        res = rec.get("result") or {}
        metrics = res.get("metrics") or {}
        v = rec.get("versions") or {}
        status = rec.get("status") or res.get("status") or "error"
        msg = rec.get("message") or ""
        row = {
            "instance": task["instance_name"],
            "instance_file": task["instance_path"],
            "planner": task["planner"],
            "kind": _kind(task),
            "seed": task["seed"],
            "objective": res.get("objective_name") or task.get("objective"),
            "value": res.get("objective"),
            **{m: metrics.get(m) for m in METRICS},
            "bound": res.get("bound"),
            "best_bound": None,
            "gap": None,
            "gap_to_best_known": None,
            "certified": False,
            "status": status,
            "runtime_s": rec.get("wall_s"),
            "solve_time_s": res.get("solve_time_s"),
            "time_limit_s": task.get("time_limit"),
            "killed": bool(rec.get("killed")),
            "cached": bool(rec.get("cached")),
            "error": msg if status in ("error", "timeout") else "",
            "message": msg if status not in ("error", "timeout") else "",
            **{f"{k}_version": v.get(k) for k in VERSION_COLUMNS},
            "host": rec.get("host"),
            "key": rec.get("key"),
            "_exact": bool(task.get("exact")),
            "_plan": res.get("plan"),
            "_metrics": metrics or None,
        }
        rows.append(row)
    fill_gaps(rows)
    return rows


def fill_gaps(rows: list[dict], instances: dict | None = None) -> None:
    """Set best_bound, gap (with ref_kind, ref_value, vs_in_space), gap_to_best_known and
    certified on every row, instance by instance. ``instances``: loaded ``Instance`` per
    ``instance_file`` (others are loaded from the file when a floor is needed)."""
    floors = _Floors(instances)
    by_inst: dict[tuple, list[dict]] = {}
    for r in rows:
        by_inst.setdefault((r["instance_file"], r["objective"]), []).append(r)
    for group in by_inst.values():
        bounds, certified = [], False
        for r in group:
            if not r["_exact"] or r["status"] == "error":
                continue
            b = r["bound"]
            if b is None and r["status"] == "optimal":
                b = r["value"]
            if b is not None and math.isfinite(b):
                bounds.append(b)
            if r["status"] == "optimal" and r["value"] is not None:
                certified = True
        best_bound = max(bounds) if bounds else None
        feasible_values = [r["value"] for r in group if r["value"] is not None and r["feasible"]]
        best_known = min(feasible_values) if feasible_values else None
        for r in group:
            r["best_bound"] = best_bound
            r["certified"] = certified
            r["gap_to_best_known"] = rel_gap(r["value"], best_known)
            r["vs_in_space"] = rel_gap(r["value"], best_bound)
            r["gap"] = r["ref_kind"] = r["ref_value"] = None
            if r["value"] is None:
                continue
            if r["in_space"] is not False and r["feasible"] is not False:
                if best_bound is not None:
                    r["ref_kind"] = "in-space optimum" if certified else "in-space bound"
                    r["ref_value"], r["gap"] = best_bound, r["vs_in_space"]
                continue
            ref = floors.get(r)
            if ref is not None:
                r["ref_kind"], r["ref_value"] = ref.kind, ref.value
                r["gap"] = rel_gap(r["value"], ref.value)
                if r["gap"] < 0:
                    raise AssertionError(f"{r['instance']} / {r['planner']}: value {r['value']!r} below the "
                                         f"{ref.kind} {ref.value!r} of a space that holds its plan")


class _Floors:
    """The floor reference of a row's plan outside the space, the largest that holds for it
    (instances loaded once)."""

    def __init__(self, instances: dict | None = None):
        self.instances: dict[str, object] = dict(instances or {})
        self.refs: dict[tuple, object] = {}

    def get(self, r: dict):
        from milp_planner.instance import load_instance
        from milp_planner.report.baselines import enclosing_space, floor_reference
        from milp_planner.space.plan import Plan

        if not r.get("_plan") or not r.get("instance_file"):
            return None
        f = r["instance_file"]
        if f not in self.instances:
            self.instances[f] = load_instance(f)
        inst = self.instances[f]
        plan = Plan.from_dict(r["_plan"])
        space = enclosing_space(inst.search, plan, len(inst.devices))
        key = (f, r["objective"], space)
        if key not in self.refs:
            self.refs[key] = floor_reference(inst, r["objective"], space)
        covering = [ref for ref in self.refs[key] if ref.covers(plan, inst, r["feasible"] is not False)]
        return max(covering, key=lambda ref: ref.value) if covering else None


def _csv_value(x):
    from milp_planner.io import csv_cell

    if x is None:
        return ""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float):
        return repr(x)
    return csv_cell(x)  # no formula: "=HYPERLINK(...)" as an instance name is text


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_csv_value(r.get(c)) for c in COLUMNS])
    return buf.getvalue()


# ---------------------------------------------------------------------------------------
# summaries for the documents


@dataclass
class Cell:
    """One planner on one instance, over its seeds."""

    planner: str
    instance: str
    runs: int = 0
    gaps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    runtimes: list[float] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    infeasible: int = 0
    out_of_space: int = 0
    references: set = field(default_factory=set)  # ref_kind of the gaps not to the in-space bound
    beats_in_space: int = 0  # runs outside the space (or over a cap) below the in-space optimum

    @property
    def gap_mean(self):
        return statistics.fmean(self.gaps) if self.gaps else None

    @property
    def gap_std(self):
        return statistics.pstdev(self.gaps) if len(self.gaps) > 1 else None

    @property
    def runtime_mean(self):
        return statistics.fmean(self.runtimes) if self.runtimes else None


@dataclass
class InstanceSummary:
    name: str
    file: str
    objective: str
    best_bound: float | None
    certified: bool
    best_row: dict | None
    proven: bool  # gaps are to a proven bound (else to the best known plan)


def summarize(rows: list[dict]):
    """(instances, planners, cells[(instance file, planner)]) in first-seen order."""
    instances: dict[str, InstanceSummary] = {}
    planners: list[str] = []
    cells: dict[tuple[str, str], Cell] = {}
    by_file: dict[str, list[dict]] = {}
    for r in rows:
        by_file.setdefault(r["instance_file"], []).append(r)
        if r["planner"] not in planners:
            planners.append(r["planner"])
    for f, group in by_file.items():
        proven = group[0]["best_bound"] is not None
        candidates = [r for r in group if r["value"] is not None and r["_plan"] and r["feasible"]]
        if not candidates:
            candidates = [r for r in group if r["value"] is not None and r["_plan"]]
        best = min(candidates, key=lambda r: (r["value"], not r["_exact"], r["runtime_s"] or 0.0)) if candidates else None
        instances[f] = InstanceSummary(group[0]["instance"], f, group[0]["objective"], group[0]["best_bound"],
                                       group[0]["certified"], best, proven)
        for r in group:
            c = cells.setdefault((f, r["planner"]), Cell(r["planner"], r["instance"]))
            c.runs += 1
            c.statuses.append(r["status"])
            gap = r["gap"] if proven else r["gap_to_best_known"]
            if gap is not None:
                c.gaps.append(gap)
                if proven and r.get("ref_kind") and not r["ref_kind"].startswith("in-space"):
                    c.references.add(r["ref_kind"])
            if proven and r.get("vs_in_space") is not None and r["vs_in_space"] < 0 and (
                    r["in_space"] is False or not r["feasible"]):
                c.beats_in_space += 1
            if r["value"] is not None:
                c.values.append(r["value"])
                if not r["feasible"]:
                    c.infeasible += 1
                if r["in_space"] is False:
                    c.out_of_space += 1
            if r["runtime_s"] is not None:
                c.runtimes.append(r["runtime_s"])
    return list(instances.values()), planners, cells


def fmt_pct(x: float | None) -> str:
    if x is None:
        return "-"
    p = x * 100
    if p == 0:
        return "0 %"
    if abs(p) < 0.01:
        return f"{p:.1e} %"
    return f"{p:.2f} %"


def cell_text(c: Cell | None) -> str:
    """'mean ± std' of the gap over seeds, or what went wrong."""
    if c is None:
        return ""
    if not c.gaps:
        bad = sorted(set(c.statuses))
        return "/".join(bad) if bad else "-"
    text = fmt_pct(c.gap_mean)
    if c.gap_std is not None:
        text += f" ± {fmt_pct(c.gap_std).replace(' %', '')}"
    notes = []
    if len(c.gaps) < c.runs:
        notes.append(f"{len(c.gaps)}/{c.runs} runs")
    if c.infeasible:
        notes.append(f"{c.infeasible} infeasible")
    if c.out_of_space:
        notes.append("out of space" if c.out_of_space == len(c.values) == 1 else f"{c.out_of_space} out of space")
    if c.references:
        notes.append("vs " + "/".join(sorted(c.references)))
    if c.beats_in_space:
        notes.append("below the in-space optimum" if c.beats_in_space == c.runs == 1
                     else f"{c.beats_in_space} below the in-space optimum")
    if notes:
        text += f" ({', '.join(notes)})"
    return text


def fmt_value(objective: str, x: float | None) -> str:
    if x is None:
        return "-"
    if objective in ("latency", "period"):
        if x == 0:
            return "0 s"
        if abs(x) < 1e-3:
            return f"{x * 1e6:.4g} us"
        if abs(x) < 1:
            return f"{x * 1e3:.4g} ms"
        return f"{x:.4g} s"
    if objective == "energy":
        return f"{x:.4g} J"
    if objective == "memory":
        for unit in ("B", "kB", "MB", "GB"):
            if abs(x) < 1000 or unit == "GB":
                return f"{x:.0f} {unit}" if unit == "B" else f"{x:.2f} {unit}"
            x /= 1000
    return f"{x:.6g}"


def fmt_time(x: float | None) -> str:
    if x is None:
        return "-"
    if x < 0.01:
        return f"{x * 1e3:.1f} ms"
    if x < 1:
        return f"{x * 1e3:.0f} ms"
    return f"{x:.1f} s"

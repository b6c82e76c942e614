"""The report's content as a small list of blocks, rendered by ``markdown.py`` and ``html.py``.

Both documents say the same thing in the same order: the gap table, the gap plot, time
against quality, objective and runtime tables, one section per instance (its best plan as a
chart, as a timeline per device, and as the predicted timeline of ``milp_planner.trace``: an
SVG, inline in the HTML, and a Chrome Trace Event file under ``traces/``), the runs that
failed, and the versions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from milp_planner.report import figures
from milp_planner.report.results import Cell, cell_text, fmt_pct, fmt_time, fmt_value


@dataclass
class Heading:
    level: int
    text: str
    anchor: str = ""


@dataclass
class Para:
    text: str
    muted: bool = False


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric_from: int = 1  # columns from this index are right-aligned
    caption: str = ""


@dataclass
class Image:
    name: str  # file name under figures/
    alt: str
    png: bytes = b""


@dataclass
class Svg:
    """An SVG that milp-planner drew itself (``trace.timeline_svg``: every name in it escaped
    there): inline in report.html, the file ``figures/<name>`` for report.md."""

    name: str  # file name under figures/
    alt: str
    inline: str = ""  # markup for HTML (no namespace)
    standalone: str = ""  # the .svg file


@dataclass
class Bullets:
    items: list[str] = field(default_factory=list)


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # other files beside the report (traces/...)

    def images(self) -> list[Image]:
        return [b for b in self.blocks if isinstance(b, Image)]

    def svgs(self) -> list[Svg]:
        return [b for b in self.blocks if isinstance(b, Svg)]


def slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")
    return s[:60] or "instance"


def build_document(rows: list[dict], instances_by_file: dict, meta: dict) -> Document:
    """``instances_by_file``: loaded ``Instance`` per resolved instance path (for the plan charts)."""
    from milp_planner.report.results import summarize

    summaries, planners, cells = summarize(rows)
    doc = Document("milp-planner report")
    add = doc.blocks.append
    add(_overview(rows, summaries, planners, meta))
    _gap_section(add, summaries, planners, cells)
    _time_quality_section(add, rows, summaries, planners)
    _values_section(add, summaries, planners, cells)
    add(Heading(2, "Best plan per instance", "instances"))
    for i, s in enumerate(summaries):
        _instance_section(doc, i, s, instances_by_file.get(s.file))
    _failures_section(add, rows)
    add(Heading(2, "Versions", "versions"))
    v = meta.get("versions", {})
    add(Bullets([f"{k}: {val}" for k, val in v.items() if val] + ["results.csv holds the versions each run used"]))
    return doc


def _overview(rows, summaries, planners, meta) -> Para:
    """The opening line: how many instances, planners and runs, where they ran, and by which version."""
    n_runs = len(rows)
    return Para(f"{len(summaries)} instance{'s' if len(summaries) != 1 else ''} x {len(planners)} planner"
                f"{'s' if len(planners) != 1 else ''}, {n_runs} runs ({meta.get('ran', 0)} run now, "
                f"{meta.get('cached', 0)} from the cache) on {meta.get('where', 'local processes')}; "
                f"time limit {meta.get('time_limit_text', '-')}, seeded planners repeated over "
                f"{meta.get('repeats', 1)} seed{'s' if meta.get('repeats', 1) != 1 else ''}. "
                f"Generated {meta.get('generated', '')} by milp-planner {meta.get('version', '')}.", muted=True)


def _gap_section(add, summaries, planners, cells) -> None:
    """The gap of every planner to the best proven bound: how to read it, the tables and the plot."""
    add(Heading(2, "Gap to the best proven bound", "gaps"))
    add(Para("Gap = (value - best bound) / value, where the best bound is the largest lower bound "
             "certified by an exact planner for the instance's objective. Cells show the mean over "
             "seeds ± its standard deviation. ✓ marks an instance whose optimum is certified (an exact "
             "planner reported optimal); * marks an instance without any proven bound, whose gaps are to "
             "the best plan found instead. A cell without a number names what the runs ended with. "
             "Certificates speak only of plans inside the instance's search space: a plan outside it "
             "(marked out of space), or one that breaks a cap, is measured instead against the floor of "
             "milp_planner/cost/floors.py over the smallest space with every integer cut that holds it (marked "
             "vs floor), so no gap is negative; when such a plan beats the in-space optimum, the cell says "
             "so (below the in-space optimum). docs/reports.md, 'Baselines outside the space'."))
    fixed = {s.file: [s.name + (" ✓" if s.certified else ("" if s.proven else " *")), s.objective,
                      fmt_value(s.objective, s.best_bound)] for s in summaries}
    _tables(add, summaries, planners, ["instance", "objective", "best bound"], fixed,
            lambda s, p: cell_text(cells.get((s.file, p))), numeric_from=2)
    add(Image("gaps.png", "gap per planner and instance", figures.gap_plot(summaries, planners, cells)))


def _time_quality_section(add, rows, summaries, planners) -> None:
    """Every run's wall time against its gap, as a plot."""
    add(Heading(2, "Time against quality", "time-quality"))
    add(Para("Every run: its wall time (log scale) against its gap."))
    add(Image("time_quality.png", "runtime against gap", figures.time_quality_plot(rows, summaries, planners)))


def _values_section(add, summaries, planners, cells) -> None:
    """The best objective value and the mean wall time of every planner on every instance."""
    add(Heading(2, "Objective values and runtimes", "values"))
    def best_value(s, p):
        c: Cell | None = cells.get((s.file, p))
        if c is None or not c.values:
            return "-"
        return fmt_value(s.objective, min(c.values)) + (f" (best of {len(c.values)})" if len(c.values) > 1 else "")

    _tables(add, summaries, planners, ["instance", "objective"], {s.file: [s.name, s.objective] for s in summaries},
            best_value, numeric_from=2, caption="Best objective value per planner")
    _tables(add, summaries, planners, ["instance"], {s.file: [s.name] for s in summaries},
            lambda s, p: fmt_time(cells[(s.file, p)].runtime_mean) if (s.file, p) in cells else "-",
            numeric_from=1, caption="Mean wall time per run")


def _instance_section(doc: Document, i: int, s, inst) -> None:
    """The section of instance ``i``: facts on its best plan, then its charts when ``inst`` is loaded."""
    add = doc.blocks.append
    add(Heading(3, s.name, f"instance-{i}"))
    best = s.best_row
    facts = [f"file: {s.file}", f"objective: {s.objective}",
             f"best bound: {fmt_value(s.objective, s.best_bound)}"
             + (" (optimum certified)" if s.certified else "")]
    if best is None:
        facts.append("no planner returned a plan")
        add(Bullets(facts))
        return
    facts.append(_best_plan_text(s, best))
    m = best["_metrics"] or {}
    if m:
        facts.append(_metrics_text(m))
    add(Bullets(facts))
    if inst is None:
        return
    base = f"{i:02d}-{slug(s.name)}"
    _plan_chart(add, best, inst, s.name, base)
    if m:
        _gantt(add, m, inst, s.name, base)
        _predicted_timeline(doc, m, inst, s.name, base)


def _best_plan_text(s, best: dict) -> str:
    """Which run found the best plan of ``s``, with its value, status and gap."""
    seed = f", seed {best['seed']}" if best["kind"] == "seeded" else ""
    return (f"best plan: {best['planner']}{seed}, {s.objective} {fmt_value(s.objective, best['value'])}"
            f", status {best['status']}" + ("" if best["feasible"] else " (INFEASIBLE)")
            + (f", gap {fmt_pct(best['gap'])}" if best["gap"] is not None else ""))


def _metrics_text(m: dict) -> str:
    """Latency, energy, period, largest memory and stage count of a plan's metrics."""
    return (f"latency {fmt_value('latency', m.get('latency_s'))}, energy {fmt_value('energy', m.get('energy_j'))}, "
            f"period {fmt_value('period', m.get('period_s'))}, largest memory "
            f"{fmt_value('memory', m.get('max_memory_bytes'))}, {len(m.get('stages', []))} stages")


def _plan_chart(add, best: dict, inst, name: str, base: str) -> None:
    """The chart of which device computes which rows of the best plan (or why it is missing)."""
    try:
        add(Image(f"plan-{base}.png", f"best plan of {name}: layers, rows and devices",
                  figures.plan_chart(best["_plan"], inst,
                                     f"{name}: best plan ({best['planner']}) — which device computes which rows")))
    except Exception as e:  # a broken plan must not sink the report
        add(Para(f"(plan chart not drawn: {type(e).__name__}: {e})", muted=True))


def _gantt(add, metrics: dict, inst, name: str, base: str) -> None:
    """The timeline per device of the best plan (or why it is missing)."""
    try:
        add(Image(f"gantt-{base}.png", f"timeline of the best plan of {name}",
                  figures.gantt(metrics, inst, f"{name}: timeline per device (receive, then compute)")))
    except Exception as e:
        add(Para(f"(timeline not drawn: {type(e).__name__}: {e})", muted=True))


def _failures_section(add, rows) -> None:
    """The runs that crashed, timed out or returned an infeasible plan, as a table (or "None.")."""
    bad = [r for r in rows if r["status"] in ("error", "timeout") or (r["value"] is not None and not r["feasible"])]
    add(Heading(2, "Runs that failed or ran out of time", "failures"))
    if bad:
        frows = [[r["instance"], r["planner"], str(r["seed"]), r["status"] + (" (killed)" if r["killed"] else ""),
                  fmt_time(r["runtime_s"]), _clip(r["error"] or r["message"] or ("infeasible plan" if not r["feasible"] else ""))]
                 for r in bad]
        add(Table(["instance", "planner", "seed", "status", "time", "message"], frows, numeric_from=99))
    else:
        add(Para("None."))


def _predicted_timeline(doc: Document, metrics: dict, inst, name: str, base: str) -> None:
    """The predicted timeline of a plan (``milp_planner.trace``): an SVG with one row per device
    and per link, and the same schedule as a Chrome Trace Event file ``traces/<base>.json``."""
    from milp_planner.trace import predicted_events, schedule_from_metrics_dict, timeline_svg, trace_document

    add = doc.blocks.append
    try:
        sc = schedule_from_metrics_dict(metrics, list(inst.device_names), inst.network.medium == "shared")
        svg = Svg(f"timeline-{base}.svg", f"predicted timeline of the best plan of {name}: one row per device "
                  "and per link (sender -> receiver); blue bars compute a stage, orange bars carry a message",
                  timeline_svg(sc, standalone=False), timeline_svg(sc))
        trace = json.dumps(trace_document(predicted_events(sc))) + "\n"
    except Exception as e:  # a broken record must not sink the report
        add(Para(f"(predicted timeline not drawn: {type(e).__name__}: {e})", muted=True))
        return
    add(svg)
    rel = f"traces/timeline-{base}.json"
    doc.files[rel] = trace
    add(Para(f"The same predicted timeline as a Chrome Trace Event file: {rel}, beside this report. To zoom "
             "in and follow each message to the compute that waits for it, open ui.perfetto.dev and drag the "
             "file in (or \"Open trace file\"), or open chrome://tracing in Chrome or Chromium and press "
             "\"Load\"; the file stays on this machine.", muted=True))


PLANNERS_PER_TABLE = 8


def _tables(add, summaries, planners, fixed_headers, fixed, cell, numeric_from, caption=""):
    """Planners as columns, instances as rows; more than PLANNERS_PER_TABLE planners are split
    over several tables (each repeating the instance columns), so no table needs scrolling."""
    n = len(planners)
    chunks = [planners[i:i + PLANNERS_PER_TABLE] for i in range(0, n, PLANNERS_PER_TABLE)] or [[]]
    for k, chunk in enumerate(chunks):
        rows = [fixed[s.file] + [cell(s, p) for p in chunk] for s in summaries]
        cap = caption
        if len(chunks) > 1:
            first = k * PLANNERS_PER_TABLE + 1
            cap = (caption + " " if caption else "") + f"(planners {first}-{first + len(chunk) - 1} of {n})"
        add(Table(fixed_headers + chunk, rows, numeric_from=numeric_from, caption=cap))


def _clip(text: str, n: int = 160) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"

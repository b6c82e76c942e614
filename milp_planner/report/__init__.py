"""``milp-planner report``: every planner on every instance, gaps to proven bounds, documents.

>>> from milp_planner.report import run_report                                   # doctest: +SKIP
>>> out = run_report(["instances/examples/tiny-2dev.yaml"], planners="all",      # doctest: +SKIP
...                  time_limit=30, repeats=3, out="report")
>>> out.paths                                                                     # doctest: +SKIP

Pieces: ``runner`` (the runs end to end: ``tasks``, ``cache``, ``records``, local ``workers``
or Dask ``cluster``), ``results`` (CSV rows and gaps),
``figures`` (matplotlib), ``document`` / ``markdown`` / ``html`` (the documents), ``cli``.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from milp_planner.errors import PlannerError

__all__ = ["run_report", "ReportOutcome", "add_report_parser"]


@dataclass
class ReportOutcome:
    rows: list[dict]
    paths: dict[str, Path] = field(default_factory=dict)
    ran: int = 0
    cached: int = 0


def _select_planners(planners) -> list[str]:
    from milp_planner.planners import planner_class, planner_names

    if planners is None or planners == "all" or planners == ["all"]:
        names = planner_names()
        if not names:
            raise PlannerError("no planners are registered")
        return names
    if isinstance(planners, str):
        planners = [p.strip() for p in planners.split(",")]
    names = []
    for p in planners:
        if not p:
            continue
        if p == "all":
            raise PlannerError("--planners: 'all' cannot be combined with names")
        planner_class(p)  # PlannerError for an unknown name
        if p not in names:
            names.append(p)
    if not names:
        raise PlannerError("--planners: no planner named")
    return names


def report_output(out, inputs=(), cache_dir=None):
    """The ``OutputDir`` of a report in ``out``: its cache (``out/.cache``, or ``cache_dir``
    when that lies in ``out``) is carried over from one report to the next."""
    from milp_planner.io import OutputDir

    keep = [".cache"]
    if cache_dir is not None:
        try:
            rel = Path(os.path.abspath(cache_dir)).relative_to(Path(os.path.abspath(out)))
        except ValueError:
            keep = []
        else:
            if not rel.parts:
                raise PlannerError(f"--cache {cache_dir}: is the --out folder itself; give the cache its own "
                                   "folder (default: OUT/.cache)")
            keep = [rel.parts[0]]
    return OutputDir(out, "report", inputs, keep=keep)


def run_report(instances, planners="all", *, time_limit: float | None = 60.0, repeats: int = 3,
               out="report", workers: int | None = None, dask: str | None = None, cache_dir=None,
               options: dict[str, dict] | None = None, retry_failed: bool = False, progress: bool = True,
               grace_factor: float | None = None, grace_s: float | None = None, on_result=None,
               console=None, pareto=None, pareto_time_limit: float | None = None) -> ReportOutcome:
    """Run, cache, and write ``results.csv``, ``report.md`` (+ ``figures/``, ``traces/``) and
    ``report.html`` in ``out``.

    ``pareto``: ``--pareto`` items (``"[INSTANCE=]OBJ,OBJ[,OBJ]"`` text or ``ParetoRequest``s of
    ``report.pareto_section``): a Pareto section with NSGA-II against the front on those
    instances, each front and NSGA-II run within ``pareto_time_limit`` (default ``time_limit``);
    its numbers also go to ``pareto.json``.
    Nothing but the cache is written to ``out`` until every run is back; the folder is then
    written as a whole (``milp_planner.io.OutputDir``: new, empty or a report's, replaced at once).
    """
    from milp_planner.instance import load_instance
    from milp_planner.report import runner
    from milp_planner.report.document import build_document
    from milp_planner.report.html import render_html
    from milp_planner.report.markdown import render_markdown
    from milp_planner.report.results import build_rows, to_csv

    if repeats < 1:
        raise PlannerError("--repeats must be at least 1")
    if time_limit is not None and time_limit <= 0:
        raise PlannerError("--time-limit must be positive")
    if workers is not None and workers < 1:
        raise PlannerError("--workers must be at least 1")
    paths = []
    for p in instances:
        rp = Path(p).resolve()
        if rp not in paths:
            paths.append(rp)
    if not paths:
        raise PlannerError("no instance files given")
    names = _select_planners(planners)
    for p in options or {}:
        if p not in names:
            raise PlannerError(f"--option for planner {p!r}, which is not in --planners ({', '.join(names)})")
    loaded = [load_instance(p) for p in paths]
    for inst, p in zip(loaded, paths):
        if inst.path is None:
            inst.path = p
    from milp_planner.report import pareto_section

    requests = [r if isinstance(r, pareto_section.ParetoRequest) else pareto_section.parse_pareto_spec(r)
                for r in (pareto or [])]
    pareto_section.check_requests(loaded, requests)
    if pareto_time_limit is not None and pareto_time_limit <= 0:
        raise PlannerError("--pareto-time-limit must be positive")
    tasks = runner.make_tasks(loaded, names, time_limit=time_limit, repeats=repeats, options=options)

    from milp_planner.report.tasks import profile_files

    inputs = [*paths, *(f for inst in loaded for f in profile_files(inst))]
    target = report_output(out, inputs, cache_dir).check()  # before any run
    out = Path(out)
    cache = runner.Cache(Path(cache_dir) if cache_dir else runner.default_cache_dir(out))
    executor = runner.make_executor(workers, dask,
                                    runner.GRACE_FACTOR if grace_factor is None else grace_factor,
                                    runner.GRACE_S if grace_s is None else grace_s)
    summary = runner.run_all(tasks, cache, executor, progress=progress, retry_failed=retry_failed,
                             on_result=on_result, console=console)

    rows = build_rows(summary.records)
    meta = {
        "ran": summary.ran, "cached": summary.cached, "where": executor.describe() if summary.ran else "the cache",
        "time_limit_text": "none" if time_limit is None else f"{time_limit:g} s", "repeats": repeats,
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "version": runner.__version__, "versions": runner.versions(),
    }
    by_file = {str(Path(i.path).resolve()): i for i in loaded}
    doc = build_document(rows, by_file, meta)
    comparisons = []
    if requests:
        if progress:
            print(f"Pareto section: {len(requests)} request(s), fronts and NSGA-II in this process "
                  "(not cached)", file=sys.stderr)
        comparisons = pareto_section.run_requests(
            loaded, requests, time_limit if pareto_time_limit is None else pareto_time_limit,
            on_done=(lambda c: print(f"  {c.instance} {' x '.join(c.objectives)}: {len(c.front.points)} points, "
                                     f"{'certified' if c.front.certified else 'bounded'}", file=sys.stderr))
            if progress else None)
        pareto_section.insert_blocks(doc, pareto_section.pareto_blocks(comparisons))
    # Everything is rendered in memory before the first byte goes to ``out``.
    md = render_markdown(doc)
    html = render_html(doc)
    csv_text = to_csv(rows)
    images = {img.name: img.png for img in doc.images()}
    images.update({svg.name: svg.standalone for svg in doc.svgs()})

    written = {"html": out / "report.html", "md": out / "report.md", "csv": out / "results.csv"}
    with target:  # built beside, swapped in whole (the cache carried over)
        for name, png in images.items():
            target.write(f"figures/{name}", png)
        for rel, text in doc.files.items():  # traces/*.json
            target.write(rel, text)
        target.write("report.html", html)
        target.write("report.md", md)
        target.write("results.csv", csv_text)
        if comparisons:
            from milp_planner.io import dumps_json

            written["pareto"] = out / "pareto.json"
            target.write("pareto.json", dumps_json([c.to_dict() for c in comparisons]) + "\n")
    if doc.files:
        written["traces"] = out / "traces"
    fig_dir = out / "figures"
    written["figures"] = fig_dir
    written["cache"] = cache.dir
    return ReportOutcome(rows, written, summary.ran, summary.cached)


def add_report_parser(subparsers):
    from milp_planner.report.cli import add_report_parser as add

    return add(subparsers)



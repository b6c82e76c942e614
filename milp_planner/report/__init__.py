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
    from milp_planner.report import runner
    from milp_planner.report.document import build_document
    from milp_planner.report.results import build_rows

    _check_settings(repeats, time_limit, workers)
    paths = _instance_paths(instances)
    names = _select_planners(planners)
    _check_options(options, names)
    loaded = _load_instances(paths)
    requests = _pareto_requests(loaded, pareto, pareto_time_limit)
    tasks = runner.make_tasks(loaded, names, time_limit=time_limit, repeats=repeats, options=options)

    target = report_output(out, _input_files(paths, loaded), cache_dir).check()  # before any run
    out = Path(out)
    cache = runner.Cache(Path(cache_dir) if cache_dir else runner.default_cache_dir(out))
    executor = runner.make_executor(workers, dask,
                                    runner.GRACE_FACTOR if grace_factor is None else grace_factor,
                                    runner.GRACE_S if grace_s is None else grace_s)
    summary = runner.run_all(tasks, cache, executor, progress=progress, retry_failed=retry_failed,
                             on_result=on_result, console=console)

    rows = build_rows(summary.records)
    meta = _meta(summary, executor, time_limit, repeats)
    by_file = {str(Path(i.path).resolve()): i for i in loaded}
    doc = build_document(rows, by_file, meta)
    comparisons = _pareto_section(doc, loaded, requests,
                                  time_limit if pareto_time_limit is None else pareto_time_limit, progress)
    # Everything is rendered in memory before the first byte goes to ``out``.
    files = _render(doc, rows)
    with target:  # built beside, swapped in whole (the cache carried over)
        _write_report(target, files, comparisons)
    return ReportOutcome(rows, _written(out, doc, comparisons, cache), summary.ran, summary.cached)


def _check_settings(repeats: int, time_limit: float | None, workers: int | None) -> None:
    """``PlannerError`` for a repeat count, time limit or worker count out of range."""
    if repeats < 1:
        raise PlannerError("--repeats must be at least 1")
    if time_limit is not None and time_limit <= 0:
        raise PlannerError("--time-limit must be positive")
    if workers is not None and workers < 1:
        raise PlannerError("--workers must be at least 1")


def _instance_paths(instances) -> list[Path]:
    """The instance files resolved, each once, in the order given (``PlannerError`` for none)."""
    paths = []
    for p in instances:
        rp = Path(p).resolve()
        if rp not in paths:
            paths.append(rp)
    if not paths:
        raise PlannerError("no instance files given")
    return paths


def _check_options(options: dict[str, dict] | None, names: list[str]) -> None:
    """``PlannerError`` for an ``--option`` of a planner that is not in the report."""
    for p in options or {}:
        if p not in names:
            raise PlannerError(f"--option for planner {p!r}, which is not in --planners ({', '.join(names)})")


def _load_instances(paths: list[Path]) -> list:
    """The instances of ``paths``, each knowing the file it came from."""
    from milp_planner.instance import load_instance

    loaded = [load_instance(p) for p in paths]
    for inst, p in zip(loaded, paths):
        if inst.path is None:
            inst.path = p
    return loaded


def _pareto_requests(loaded: list, pareto, pareto_time_limit: float | None) -> list:
    """The ``--pareto`` items as ``ParetoRequest``s, checked against the instances and the time limit."""
    from milp_planner.report import pareto_section

    requests = [r if isinstance(r, pareto_section.ParetoRequest) else pareto_section.parse_pareto_spec(r)
                for r in (pareto or [])]
    pareto_section.check_requests(loaded, requests)
    if pareto_time_limit is not None and pareto_time_limit <= 0:
        raise PlannerError("--pareto-time-limit must be positive")
    return requests


def _input_files(paths: list[Path], loaded: list) -> list[Path]:
    """The files the report reads: the instances and their profiles."""
    from milp_planner.report.tasks import profile_files

    return [*paths, *(f for inst in loaded for f in profile_files(inst))]


def _meta(summary, executor, time_limit: float | None, repeats: int) -> dict:
    """What the document says about the runs: counts, where they ran, limits, date and versions."""
    from milp_planner.report import runner

    return {
        "ran": summary.ran, "cached": summary.cached, "where": executor.describe() if summary.ran else "the cache",
        "time_limit_text": "none" if time_limit is None else f"{time_limit:g} s", "repeats": repeats,
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "version": runner.__version__, "versions": runner.versions(),
    }


def _pareto_section(doc, loaded: list, requests: list, time_limit: float | None, progress: bool) -> list:
    """Run the Pareto requests (if any), add their section to ``doc`` and return the comparisons."""
    from milp_planner.report import pareto_section

    if not requests:
        return []
    if progress:
        print(f"Pareto section: {len(requests)} request(s), fronts and NSGA-II in this process "
              "(not cached)", file=sys.stderr)
    comparisons = pareto_section.run_requests(loaded, requests, time_limit,
                                              on_done=_print_comparison if progress else None)
    pareto_section.insert_blocks(doc, pareto_section.pareto_blocks(comparisons))
    return comparisons


def _print_comparison(c) -> None:
    """One progress line on stderr for a finished Pareto comparison."""
    print(f"  {c.instance} {' x '.join(c.objectives)}: {len(c.front.points)} points, "
          f"{'certified' if c.front.certified else 'bounded'}", file=sys.stderr)


def _render(doc, rows: list[dict]) -> list[tuple[str, object]]:
    """The report's files but ``pareto.json`` as (relative path, content), in the order they are written."""
    from milp_planner.report.html import render_html
    from milp_planner.report.markdown import render_markdown
    from milp_planner.report.results import to_csv

    md = render_markdown(doc)
    html = render_html(doc)
    csv_text = to_csv(rows)
    images = {img.name: img.png for img in doc.images()}
    images.update({svg.name: svg.standalone for svg in doc.svgs()})
    return [*((f"figures/{name}", png) for name, png in images.items()),
            *doc.files.items(),  # traces/*.json
            ("report.html", html), ("report.md", md), ("results.csv", csv_text)]


def _write_report(target, files: list[tuple[str, object]], comparisons: list) -> None:
    """Write the rendered files into ``target``, then ``pareto.json`` when there are comparisons."""
    for rel, data in files:
        target.write(rel, data)
    if comparisons:
        from milp_planner.io import dumps_json

        target.write("pareto.json", dumps_json([c.to_dict() for c in comparisons]) + "\n")


def _written(out: Path, doc, comparisons: list, cache) -> dict[str, Path]:
    """The paths ``ReportOutcome.paths`` names: documents, ``pareto.json``, traces, figures and cache."""
    written = {"html": out / "report.html", "md": out / "report.md", "csv": out / "results.csv"}
    if comparisons:
        written["pareto"] = out / "pareto.json"
    if doc.files:
        written["traces"] = out / "traces"
    written["figures"] = out / "figures"
    written["cache"] = cache.dir
    return written


def add_report_parser(subparsers):
    from milp_planner.report.cli import add_report_parser as add

    return add(subparsers)



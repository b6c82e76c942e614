"""A report's runs end to end: cache lookups, execution (local processes or Dask) and progress.

The pieces: ``tasks`` (one ``Task`` per run and its cache key), ``cache`` (one JSON record per
finished run), ``records`` (running one task and the record it leaves), ``workers`` (local
worker processes that die with the report) and ``cluster`` (Dask). ``run_all`` runs the tasks
not yet in the cache and caches each record as soon as it is back.

Execution. Every run happens in a child process that the parent may kill: locally a small pool
of persistent worker processes, on Dask a persistent child of each Dask worker; a run not back
by ``time_limit x 1.5 + 30 s`` is killed and recorded as ``timeout``. Planners always receive
``time_limit`` too; the kill is only the safety net for a planner that does not honour it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from milp_planner import __version__
from milp_planner.report.cache import Cache, default_cache_dir, jsonable
from milp_planner.report.cluster import DaskExecutor, run_task_subprocess
from milp_planner.report.records import died_record, run_task, run_task_captured, timeout_record, versions
from milp_planner.report.tasks import (CACHE_FORMAT, GRACE_FACTOR, GRACE_S, Task, class_ref, kill_after_s,
                                       instance_digest, make_tasks, resolve_ref)
from milp_planner.report.workers import LocalExecutor, terminate_on_sigterm

_jsonable = jsonable  # the name benchmarks/bench_seeds.py uses

# what callers (report/__init__.py, benchmarks) use through this module
__all__ = ["__version__", "Cache", "default_cache_dir", "jsonable", "_jsonable", "DaskExecutor", "run_task_subprocess",
           "died_record", "run_task", "run_task_captured", "timeout_record", "versions", "CACHE_FORMAT",
           "GRACE_FACTOR", "GRACE_S", "Task", "class_ref", "kill_after_s", "instance_digest", "make_tasks",
           "resolve_ref", "LocalExecutor", "RunSummary", "run_all", "make_executor"]


@dataclass
class RunSummary:
    records: list[dict] = field(default_factory=list)  # in task order
    cached: int = 0
    ran: int = 0


def run_all(tasks: list[Task], cache: Cache, executor, *, progress: bool = True, retry_failed: bool = False,
            on_result: Callable[[Task, dict], None] | None = None, console=None) -> RunSummary:
    """Every task's record: from the cache, or run (and cached as soon as it is back)."""
    records: dict[str, dict] = {}
    todo = []
    seen = set()
    for t in tasks:
        if t.key in seen:
            continue
        seen.add(t.key)
        rec = cache.get(t.key)
        if rec is not None and retry_failed and (rec.get("status") == "error" or rec.get("killed")):
            rec = None
        if rec is not None:
            rec["cached"] = True
            records[t.key] = rec
        else:
            todo.append(t)
    summary = RunSummary(cached=len(records))

    bar = _Progress(len(todo), len(records), executor.describe(), enabled=progress and bool(todo), console=console)

    def done(task: Task, rec: dict) -> None:
        rec["cached"] = False
        cache.put(rec)
        records[task.key] = rec
        summary.ran += 1
        bar.advance(task, rec)
        if on_result is not None:
            on_result(task, rec)

    with bar, terminate_on_sigterm():
        executor.run(todo, done, bar.refresh)
    summary.records = [records[t.key] for t in tasks]
    return summary


class _Progress:
    """A rich progress bar with an estimate of the time left, refreshed by hand (no thread)."""

    def __init__(self, total: int, cached: int, where: str, enabled: bool, console=None):
        self.enabled = enabled
        self.total = total
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.console = console or Console(stderr=True)
        from rich.table import Column

        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left"),
            TextColumn("{task.fields[last]}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
            console=self.console, auto_refresh=False, transient=False, expand=True)
        self.cached = cached
        self.where = where

    def __enter__(self):
        if self.enabled:
            self.progress.start()
            self.console.print(f"{self.total} runs on {self.where}"
                               + (f" ({self.cached} already in the cache)" if self.cached else ""))
            self.task = self.progress.add_task("runs", total=self.total, last="")
            self.progress.refresh()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.progress.refresh()
            self.progress.stop()
        return False

    def advance(self, task: Task, rec: dict) -> None:
        if self.enabled:
            seed = f" seed {task.seed}" if task.seeded else ""
            last = f"{task.planner} on {task.instance_name}{seed}: {rec.get('status')}"
            self.progress.update(self.task, advance=1, last=last)
            self.progress.refresh()

    def refresh(self) -> None:
        if self.enabled:
            self.progress.refresh()


def make_executor(workers: int | None = None, dask: str | None = None, grace_factor: float = GRACE_FACTOR,
                  grace_s: float = GRACE_S):
    if dask:
        return DaskExecutor(dask, workers, grace_factor, grace_s)
    return LocalExecutor(workers, grace_factor, grace_s)

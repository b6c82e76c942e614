"""Running one task in the process at hand, and the record it leaves: status, message,
traceback, the planner's result, wall time, versions and host. An exception in a planner is an
``error`` record with its message and traceback, never the end of the report; a run killed at
its deadline is a ``timeout`` record, a worker that died an ``error`` record.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import tempfile
import time
import traceback

from milp_planner import __version__
from milp_planner.report.cache import jsonable
from milp_planner.report.tasks import CACHE_FORMAT, Task, resolve_ref

SOLVER_LIBS = ("highspy", "ortools", "torch", "numpy")

_VERSIONS: dict | None = None
_INSTANCES: dict = {}


def versions() -> dict:
    """milp-planner, Python and solver library versions of this process (libraries not imported)."""
    global _VERSIONS
    if _VERSIONS is None:
        from importlib.metadata import PackageNotFoundError, version

        v = {"milp_planner": __version__, "python": platform.python_version()}
        for lib in SOLVER_LIBS:
            try:
                v[lib] = version(lib)
            except PackageNotFoundError:
                v[lib] = None
        _VERSIONS = v
    return dict(_VERSIONS)


def _load(task: Task):
    from milp_planner.instance import load_instance

    key = (task.instance_path, task.instance_digest)
    inst = _INSTANCES.get(key)
    if inst is None:
        if len(_INSTANCES) > 8:
            _INSTANCES.clear()
        inst = _INSTANCES[key] = load_instance(task.instance_path)
    return inst


def base_record(task: Task) -> dict:
    return {
        "format": CACHE_FORMAT,
        "key": task.key,
        "task": task.to_dict(),
        "status": None,
        "message": "",
        "traceback": "",
        "result": None,
        "wall_s": 0.0,
        "killed": False,
        "versions": versions(),
        "host": socket.gethostname(),
        "finished_at": None,
    }


def run_task(task: Task) -> str:
    """Run ``task`` here and now; the record as JSON text. Never raises for a planner's fault."""
    rec = base_record(task)
    t0 = time.perf_counter()
    try:
        inst = _load(task)
        cls = resolve_ref(task.planner_ref)
        t0 = time.perf_counter()  # the run's time: imports and instance loading left out
        planner = cls(**dict(task.options))
        result = planner.solve(inst, time_limit=task.time_limit, threads=task.threads, seed=task.seed)
        rec["result"] = result.to_dict()
        rec["status"] = result.status
        rec["message"] = result.message or ""
    except TimeoutError as e:  # a planner that gives up at its time limit without a plan
        rec["status"] = "timeout"
        rec["message"] = f"{type(e).__name__}: {e}".strip()
        rec["traceback"] = traceback.format_exc(limit=20)
    except Exception as e:  # a crashing planner is a result, not the end of the report
        rec["status"] = "error"
        rec["message"] = f"{type(e).__name__}: {e}".strip()
        rec["traceback"] = traceback.format_exc(limit=20)
    rec["wall_s"] = time.perf_counter() - t0
    rec["finished_at"] = time.time()
    return json.dumps(rec, default=jsonable)


def timeout_record(task: Task, waited_s: float, note: str = "") -> dict:
    rec = base_record(task)
    rec["status"] = "timeout"
    rec["killed"] = True
    rec["wall_s"] = waited_s
    rec["finished_at"] = time.time()
    tl = "no time limit" if task.time_limit is None else f"time limit {task.time_limit:g} s"
    rec["message"] = note or f"no result after {waited_s:.1f} s ({tl}); run killed"
    return rec


def died_record(task: Task, waited_s: float, exitcode) -> dict:
    rec = base_record(task)
    rec["status"] = "error"
    rec["wall_s"] = waited_s
    rec["finished_at"] = time.time()
    rec["message"] = f"worker process died (exit code {exitcode}) while running the planner"
    return rec


LOG_TAIL = 8000  # characters of a run's captured output kept in its record


def run_task_captured(task: Task) -> str:
    """``run_task`` with this process's stdout and stderr (file descriptors 1 and 2) captured
    into the record's ``log`` (its last characters), so solver chatter does not scribble over
    the progress bar."""
    with tempfile.TemporaryFile(mode="w+b") as buf:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(buf.fileno(), 1)
            os.dup2(buf.fileno(), 2)
            out = run_task(task)
        finally:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:
                    pass
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        size = buf.seek(0, os.SEEK_END)
        buf.seek(max(0, size - 4 * LOG_TAIL))
        log = buf.read().decode(errors="replace")[-LOG_TAIL:]
    if log.strip():
        rec = json.loads(out)
        rec["log"] = log
        out = json.dumps(rec, default=jsonable)
    return out

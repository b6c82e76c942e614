"""The task list of a report, its run cache, and how the runs execute (local processes or Dask).

One *task* is one run: an instance file, a planner (with its options), a time limit and a
seed. Its *key* is a SHA-256 of everything its result depends on:

- the instance file's bytes, plus the referenced model file's bytes (or the ``zoo:`` reference
  itself: zoo models are fixed by the package version),
- the planner name and its options, the time limit, the seed, the thread count,
- ``milp_planner.__version__``.

A finished run (whatever its status: optimal ... error, timeout) is one JSON file
``KEY.json`` in the cache directory, written atomically as soon as the run is back, so an
interrupted report resumes where it stopped and a repeated one runs nothing.

Execution. Every run happens in a child process that the parent may kill:

- locally (``LocalExecutor``), a small pool of persistent worker processes (``--workers``,
  default: the CPU count) that keep loaded instances between runs; the parent gives each run
  a deadline of ``time_limit x 1.5 + 30 s`` and kills (then replaces) a worker whose run is
  not back by then, recording the run as ``timeout``;
- on Dask (``DaskExecutor``), each Dask task hands the run to a persistent child process of
  the Dask worker (started with ``subprocess``: Dask worker processes are daemonic and may not
  have ``multiprocessing`` children) and kills it at the same deadline.

Planners always receive ``time_limit`` too; the kill is only the safety net for a planner
that does not honour it. An exception in a planner is an ``error`` record with its message
and traceback; the report goes on.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import pickle
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable

from milp_planner import __version__
from milp_planner.errors import PlannerError
from milp_planner.io import write_atomic

GRACE_FACTOR = 1.5
GRACE_S = 30.0
CACHE_FORMAT = 1
SOLVER_LIBS = ("highspy", "ortools", "torch", "numpy")


# ---------------------------------------------------------------------------------------
# tasks and keys


@dataclass(frozen=True)
class Task:
    """One run. ``planner_ref`` is ``module:QualName`` of the planner class (resolved by the parent)."""

    instance_path: str
    instance_name: str
    instance_digest: str
    objective: str
    planner: str
    planner_ref: str
    exact: bool
    seeded: bool
    options: tuple = ()  # sorted (key, value) pairs
    time_limit: float | None = None
    seed: int = 0
    threads: int = 1

    @property
    def key(self) -> str:
        ident = {
            "format": CACHE_FORMAT,
            "instance": self.instance_digest,
            "planner": self.planner,
            "options": [[k, v] for k, v in self.options],
            "time_limit": self.time_limit,
            "seed": self.seed,
            "threads": self.threads,
            "version": __version__,
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:32]

    @property
    def deadline_s(self) -> float:
        return deadline(self.time_limit)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["options"] = dict(self.options)
        return d


def deadline(time_limit: float | None, factor: float = GRACE_FACTOR, grace_s: float = GRACE_S) -> float:
    """Seconds after which a run is killed: ``time_limit x factor + grace`` (inf without a limit)."""
    return math.inf if time_limit is None else time_limit * factor + grace_s


def instance_digest(path: Path, model_ref: str) -> str:
    """SHA-256 of the instance file's bytes plus its model file's bytes (or its zoo reference)."""
    path = Path(path)
    h = hashlib.sha256()
    h.update(b"instance\0")
    h.update(path.read_bytes())
    h.update(b"\0model\0")
    ref = model_ref or ""
    if ref and not ref.startswith("zoo:"):
        model_path = Path(ref) if Path(ref).is_absolute() else path.parent / ref
        try:
            h.update(model_path.read_bytes())
        except OSError:
            h.update(ref.encode())
    else:
        h.update(ref.encode())
    return h.hexdigest()


def class_ref(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_ref(ref: str) -> type:
    module, qual = ref.split(":", 1)
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def make_tasks(instances: list, planners: list[str], *, time_limit: float | None, repeats: int = 1,
               options: dict[str, dict] | None = None, threads: int = 1) -> list[Task]:
    """Every (instance, planner, seed) run. ``instances`` are loaded ``Instance`` objects with ``path``.

    Seeded planners run with seeds 0..repeats-1, the others once (seed 0).
    """
    from milp_planner.planners import planner_class

    options = options or {}
    classes = {name: planner_class(name) for name in planners}
    tasks = []
    for inst in instances:
        if inst.path is None:
            raise PlannerError(f"instance {inst.name!r}: a report needs instances read from files")
        digest = instance_digest(inst.path, inst.model)
        for name in planners:
            cls = classes[name]
            seeds = range(repeats) if getattr(cls, "seeded", False) else range(1)
            opts = tuple(sorted(options.get(name, {}).items()))
            for seed in seeds:
                tasks.append(Task(
                    instance_path=str(Path(inst.path).resolve()), instance_name=inst.name,
                    instance_digest=digest, objective=inst.objective, planner=name,
                    planner_ref=class_ref(cls), exact=bool(getattr(cls, "exact", False)),
                    seeded=bool(getattr(cls, "seeded", False)), options=opts,
                    time_limit=None if time_limit is None else float(time_limit), seed=int(seed),
                    threads=int(threads)))
    return tasks


# ---------------------------------------------------------------------------------------
# the cache


class Cache:
    """``KEY.json`` files in one directory; each written atomically."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        p = self.path(key)
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(rec, dict) or rec.get("key") != key:
            return None
        return rec

    def put(self, record: dict) -> None:
        write_atomic(self.path(record["key"]), json.dumps(record, default=_jsonable, indent=1) + "\n")


def default_cache_dir(out_dir: Path) -> Path:
    return Path(out_dir) / ".cache"


# ---------------------------------------------------------------------------------------
# running one task (in a worker process)

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


def _jsonable(x):
    if isinstance(x, Fraction):
        return float(x)
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    item = getattr(x, "item", None)  # numpy scalars
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    tolist = getattr(x, "tolist", None)
    if callable(tolist):
        return tolist()
    return str(x)


def _load(task: Task):
    from milp_planner.instance import load_instance

    key = (task.instance_path, task.instance_digest)
    inst = _INSTANCES.get(key)
    if inst is None:
        if len(_INSTANCES) > 8:
            _INSTANCES.clear()
        inst = _INSTANCES[key] = load_instance(task.instance_path)
    return inst


def _base_record(task: Task) -> dict:
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
    rec = _base_record(task)
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
    return json.dumps(rec, default=_jsonable)


def timeout_record(task: Task, waited_s: float, note: str = "") -> dict:
    rec = _base_record(task)
    rec["status"] = "timeout"
    rec["killed"] = True
    rec["wall_s"] = waited_s
    rec["finished_at"] = time.time()
    tl = "no time limit" if task.time_limit is None else f"time limit {task.time_limit:g} s"
    rec["message"] = note or f"no result after {waited_s:.1f} s ({tl}); run killed"
    return rec


def died_record(task: Task, waited_s: float, exitcode) -> dict:
    rec = _base_record(task)
    rec["status"] = "error"
    rec["wall_s"] = waited_s
    rec["finished_at"] = time.time()
    rec["message"] = f"worker process died (exit code {exitcode}) while running the planner"
    return rec


# ---------------------------------------------------------------------------------------
# local execution: persistent worker processes, killed and replaced on overrun


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
        out = json.dumps(rec, default=_jsonable)
    return out


def _worker_loop(conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        task = pickle.loads(msg)
        out = run_task_captured(task)
        try:
            conn.send(out)
        except (BrokenPipeError, OSError):
            return


class _Worker:
    def __init__(self, ctx):
        parent, child = ctx.Pipe()
        self.conn = parent
        self.proc = ctx.Process(target=_worker_loop, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.task: Task | None = None
        self.started = 0.0

    def submit(self, task: Task) -> None:
        self.task = task
        self.started = time.monotonic()
        self.conn.send(pickle.dumps(task))

    def kill(self) -> None:
        try:
            self.proc.kill()
        except Exception:
            pass
        self.proc.join(5)
        self.conn.close()


def _mp_context():
    import multiprocessing as mp

    methods = mp.get_all_start_methods()
    # fork: workers see the parent's imported modules (and test doubles); the parent runs no
    # threads of its own while they start (the progress bar is refreshed by hand).
    return mp.get_context("fork" if "fork" in methods else "spawn")


class LocalExecutor:
    """Runs tasks on ``workers`` local processes; kills a run at its deadline."""

    def __init__(self, workers: int | None = None, grace_factor: float = GRACE_FACTOR, grace_s: float = GRACE_S):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.grace_factor = grace_factor
        self.grace_s = grace_s

    def describe(self) -> str:
        return f"{self.workers} local worker process{'es' if self.workers != 1 else ''}"

    def run(self, tasks: list[Task], on_result: Callable[[Task, dict], None], tick: Callable[[], None] = lambda: None) -> None:
        from multiprocessing.connection import wait

        ctx = _mp_context()
        pending = list(reversed(tasks))
        pool: list[_Worker] = []
        try:
            for _ in range(min(self.workers, len(tasks))):
                pool.append(_Worker(ctx))
            while pending or any(w.task is not None for w in pool):
                for w in pool:
                    if w.task is None and pending:
                        w.submit(pending.pop())
                busy = [w for w in pool if w.task is not None]
                now = time.monotonic()
                limits = [w.started + deadline(w.task.time_limit, self.grace_factor, self.grace_s) - now for w in busy]
                timeout = max(0.0, min([0.25] + limits))
                ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=timeout)
                tick()
                for i, w in enumerate(pool):
                    if w.task is None:
                        continue
                    task, waited = w.task, time.monotonic() - w.started
                    if w.conn in ready:
                        try:
                            rec = json.loads(w.conn.recv())
                        except (EOFError, OSError):
                            rec = None
                        if rec is not None:
                            w.task = None
                            on_result(task, rec)
                            continue
                    if w.proc.sentinel in ready or not w.proc.is_alive():
                        code = w.proc.exitcode
                        w.kill()
                        pool[i] = _Worker(ctx)
                        on_result(task, died_record(task, waited, code))
                    elif waited > deadline(task.time_limit, self.grace_factor, self.grace_s):
                        w.kill()
                        pool[i] = _Worker(ctx)
                        on_result(task, timeout_record(task, waited))
        finally:
            for w in pool:
                if w.task is None and w.proc.is_alive():
                    try:
                        w.conn.send(None)
                    except OSError:
                        pass
            for w in pool:
                if w.task is not None:
                    w.kill()
                else:
                    w.proc.join(2)
                    if w.proc.is_alive():
                        w.kill()


# ---------------------------------------------------------------------------------------
# Dask execution: each Dask task runs the planner in a subprocess with a deadline


class _ChildRunner:
    """A persistent Python child of this process that runs tasks one at a time.

    Used on Dask workers: their processes are daemonic and may not start ``multiprocessing``
    children, but ``subprocess`` is allowed. The child keeps its imports (Pyomo, OR-Tools:
    seconds) and loaded instances between runs; it is killed, and replaced at the next run,
    when a run overruns its deadline. Protocol on its stdin/stdout: 8-byte big-endian length,
    then a pickled ``Task`` in and a JSON record out.
    """

    def __init__(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        code = "from milp_planner.report.runner import _child_main; _child_main()"
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def run(self, task: Task, limit: float) -> str | None:
        """The record's JSON, "" if the child died, None if ``limit`` seconds passed (child killed)."""
        data = pickle.dumps(task)
        try:
            self.proc.stdin.write(len(data).to_bytes(8, "big") + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return ""
        end = time.monotonic() + limit
        head = self._read(8, end)
        if head is None or len(head) < 8:
            return head if head is None else ""
        body = self._read(int.from_bytes(head, "big"), end)
        if body is None:
            return None
        return body.decode() if body else ""

    def _read(self, n: int, end: float) -> bytes | None:
        import select

        fd = self.proc.stdout.fileno()
        buf = bytearray()
        while len(buf) < n:
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], None if math.isinf(left) else left)
            if not ready:
                return None
            chunk = os.read(fd, min(1 << 20, n - len(buf)))
            if not chunk:
                return bytes(buf) if len(buf) == n else b""
            buf += chunk
        return bytes(buf)


def _child_main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")  # the protocol channel
    os.dup2(2, 1)  # stray prints between runs must not corrupt it
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        task = pickle.loads(inp.read(int.from_bytes(head, "big")))
        rec = run_task_captured(task).encode()
        try:
            out.write(len(rec).to_bytes(8, "big") + rec)
            out.flush()
        except (BrokenPipeError, OSError):
            return


_CHILD = threading.local()


def run_task_subprocess(task: Task, grace_factor: float = GRACE_FACTOR, grace_s: float = GRACE_S) -> dict:
    """Run ``task`` in this thread's persistent child process; kill it at the run's deadline.

    The function a Dask worker executes: the time limit is enforced on the worker itself.
    """
    limit = deadline(task.time_limit, grace_factor, grace_s)
    child = getattr(_CHILD, "runner", None)
    if child is None or not child.alive():
        child = _CHILD.runner = _ChildRunner()
    t0 = time.monotonic()
    out = child.run(task, limit)
    waited = time.monotonic() - t0
    if out is None:
        child.kill()
        _CHILD.runner = None
        return timeout_record(task, waited)
    if not out:
        code = child.proc.poll()
        child.kill()
        _CHILD.runner = None
        return died_record(task, waited, code)
    return json.loads(out)


class DaskExecutor:
    """Runs tasks on a Dask distributed cluster (``address``) or a new ``LocalCluster`` ("local")."""

    def __init__(self, address: str, workers: int | None = None, grace_factor: float = GRACE_FACTOR,
                 grace_s: float = GRACE_S):
        self.address = address
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.grace_factor = grace_factor
        self.grace_s = grace_s

    def describe(self) -> str:
        return f"Dask cluster {self.address}" if self.address != "local" else f"Dask LocalCluster ({self.workers} workers)"

    def _client(self):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise PlannerError("--dask needs the optional extra: pip install 'milp-planner[distributed]'") from None
        if self.address == "local":
            cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            return Client(cluster), cluster
        try:
            return Client(self.address, timeout="20s"), None
        except OSError as e:
            raise PlannerError(f"--dask {self.address}: cannot reach the scheduler ({e})") from None

    def run(self, tasks: list[Task], on_result: Callable[[Task, dict], None], tick: Callable[[], None] = lambda: None) -> None:
        if not tasks:
            return
        from distributed import as_completed

        client, cluster = self._client()
        futures = {}
        try:
            for t in tasks:
                fut = client.submit(run_task_subprocess, t, self.grace_factor, self.grace_s, pure=False,
                                    key=f"milp-planner-{t.planner}-{t.key[:12]}-{uuid.uuid4().hex[:8]}")
                futures[fut.key] = (fut, t)
            ac = as_completed([f for f, _ in futures.values()], with_results=False)
            while not ac.is_empty():
                batch = ac.next_batch(block=False)
                if not batch:
                    tick()
                    time.sleep(0.1)
                    continue
                for fut in batch:
                    task = futures[fut.key][1]
                    try:
                        rec = fut.result()
                    except Exception as e:  # the Dask task itself failed (worker lost, ...)
                        rec = died_record(task, 0.0, None)
                        rec["message"] = f"Dask task failed: {type(e).__name__}: {e}"
                    on_result(task, rec)
                tick()
        finally:
            for fut, _ in futures.values():
                if not fut.done():
                    fut.cancel()
            client.close()
            if cluster is not None:
                cluster.close()


# ---------------------------------------------------------------------------------------
# the whole batch: cache lookups, execution, progress


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

    with bar:
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

"""Dask execution: each Dask task hands its run to a persistent child process of the Dask
worker (started with ``subprocess``: Dask worker processes are daemonic and may not have
``multiprocessing`` children) and kills it at the run's deadline, so time limits are enforced
on the worker itself. The child dies with the Dask worker (``workers.die_with_parent``).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Callable

from milp_planner.errors import PlannerError
from milp_planner.report.records import died_record, run_task_captured, timeout_record
from milp_planner.deadline import Deadline
from milp_planner.report.tasks import GRACE_FACTOR, GRACE_S, Task, kill_after_s
from milp_planner.report.workers import die_with_parent


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
        code = f"from milp_planner.report.cluster import _child_main; _child_main({os.getpid()})"
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
        end = Deadline.after(limit)
        head = self._read(8, end)
        if head is None or len(head) < 8:
            return head if head is None else ""
        body = self._read(int.from_bytes(head, "big"), end)
        if body is None:
            return None
        return body.decode() if body else ""

    def _read(self, n: int, end: Deadline) -> bytes | None:
        import select

        fd = self.proc.stdout.fileno()
        buf = bytearray()
        while len(buf) < n:
            if end.passed():
                return None
            ready, _, _ = select.select([fd], [], [], end.seconds())
            if not ready:
                return None
            chunk = os.read(fd, min(1 << 20, n - len(buf)))
            if not chunk:
                return bytes(buf) if len(buf) == n else b""
            buf += chunk
        return bytes(buf)


def _child_main(parent_pid: int | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None:
        die_with_parent(parent_pid)
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
    limit = kill_after_s(task.time_limit, grace_factor, grace_s)
    child = getattr(_CHILD, "runner", None)
    if child is None or not child.alive():
        child = _CHILD.runner = _ChildRunner()
    t0 = time.perf_counter()
    out = child.run(task, limit)
    waited = time.perf_counter() - t0
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

"""Local execution: a small pool of persistent worker processes, killed and replaced when a
run overruns its deadline, and never outliving the report.

``LocalExecutor`` keeps ``--workers`` processes (default: the CPU count) that keep loaded
instances between runs; the parent gives each run a deadline of ``time_limit x 1.5 + 30 s``
and kills (then replaces) a worker whose run is not back by then, recording the run as
``timeout``.

Workers die with the report: on Linux each asks the kernel for SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), and a watchdog thread in each exits when its parent pid changes
(any POSIX system, within a second). The parent turns SIGTERM into an orderly stop that kills
its workers (``terminate_on_sigterm``); SIGKILL of the parent leaves the first two.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable

from milp_planner.deadline import NEVER, Deadline
from milp_planner.report.records import died_record, run_task_captured, timeout_record
from milp_planner.report.tasks import GRACE_FACTOR, GRACE_S, Task, kill_after_s

PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCHDOG_S = 1.0  # how often a worker looks whether its parent is still there


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit when process ``parent_pid`` (its parent) exits.

    Linux: the kernel sends SIGKILL at the parent's death (``prctl(PR_SET_PDEATHSIG)``). Also,
    everywhere, a daemon thread polls ``os.getppid()``: a changed parent (re-parented to init or
    a subreaper) means the parent is gone, and the process exits at once."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the watchdog alone
            pass
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)

    def watch():
        while True:
            time.sleep(WATCHDOG_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="milp-planner-parent-watchdog", daemon=True).start()


class Terminated(BaseException):
    """SIGTERM received by the report's process: stop, killing the workers on the way out."""


@contextmanager
def terminate_on_sigterm():
    """Within the block, SIGTERM raises ``Terminated`` in the main thread (so ``finally``
    clauses kill the workers) instead of ending the process on the spot. A no-op outside the
    main thread, where signal handlers cannot be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _worker_loop(conn, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, inherited by fork
    die_with_parent(parent_pid)
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
        self.proc = ctx.Process(target=_worker_loop, args=(child, os.getpid()), daemon=True)
        self.proc.start()
        child.close()
        self.task: Task | None = None
        self.started = 0.0
        self.kill_at = NEVER

    def submit(self, task: Task, kill_after: float) -> None:
        """Send ``task``; it is killed ``kill_after`` seconds from now (``kill_at``)."""
        self.task = task
        self.started = time.perf_counter()
        self.kill_at = Deadline.after(kill_after)
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
                        task = pending.pop()
                        w.submit(task, kill_after_s(task.time_limit, self.grace_factor, self.grace_s))
                busy = [w for w in pool if w.task is not None]
                timeout = min([0.25] + [w.kill_at.left() for w in busy])
                ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=timeout)
                tick()
                for i, w in enumerate(pool):
                    if w.task is None:
                        continue
                    task, waited = w.task, time.perf_counter() - w.started
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
                    elif w.kill_at.passed():
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

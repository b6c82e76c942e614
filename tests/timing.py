"""Time-limit assertions that a loaded machine cannot fail: CPU time, not wall time.

A planner that honours its deadline stops within about the limit of wall time, so it cannot
have used more CPU than that; one that ignores it uses its CPU whatever the machine's load.
The process's CPU time (all its threads) is what the tests compare with ``slack(limit)``:
other processes on the machine do not add to it. Finished children count only where a test
runs them (``children=True``: the CLI, the report's workers): no planner starts a process, and
in a test worker a child of an earlier test, reaped during a solve, added its whole CPU time to
that solve (3.1 CPU s on a 1 s limit, the slow suite's flaky ``test_improve`` limit test).

``limit_clock`` is what the limit tests use: it reads both clocks and calls a run within the
limit when either is (wall: what the user saw; CPU: what the planner did on a loaded machine),
and it freezes the test process's old objects out of the garbage collector for the block. A
1 s run in a slow-suite worker that had used 1,160 CPU s took 3.1 CPU s (CI, stop 45), where
the same run in a fresh process takes 1.0-1.1 s (CPU and wall). The cause was not pinned down;
two costs that are the test worker's, not the planner's, can do it: a full collection of a
large heap (30 million objects held by the process add 0.5 s to this run, one collection), and
CPU time of the process's other threads (every thread counts: a BLAS worker that spins after
a call doubles the CPU time of a busy second). The message of a failure gives both clocks and
the threads.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from contextlib import contextmanager


def slack(limit: float) -> float:
    """What the time-limit promise allows (README: limit + 5 % + 2 s)."""
    return limit * 1.05 + 2.0


def cpu_seconds(children: bool = False) -> float:
    """CPU seconds used so far by this process (and, with ``children``, its waited-for children)."""
    t = os.times()
    return t.user + t.system + (t.children_user + t.children_system if children else 0.0)


@contextmanager
def cpu_clock():
    """``with cpu_clock() as c: ...`` then ``c.seconds``: the CPU time the block used."""

    class Clock:
        seconds = 0.0

    clock, t0 = Clock(), cpu_seconds(children=True)
    try:
        yield clock
    finally:
        clock.seconds = cpu_seconds(children=True) - t0


def wall() -> float:
    return time.perf_counter()


class LimitClock:
    """Both clocks over a block (``limit_clock``), and the verdict on a time limit."""

    cpu = 0.0
    wall = 0.0

    def within(self, limit: float) -> bool:
        """The run honoured ``limit``: one clock or the other within ``slack(limit)``."""
        return min(self.cpu, self.wall) <= slack(limit)

    def __str__(self) -> str:
        return (f"{self.cpu:.2f} CPU s, {self.wall:.2f} wall s, "
                f"{threading.active_count()} Python threads")


@contextmanager
def limit_clock(children: bool = False):
    """``with limit_clock() as c: solve(...)`` then ``assert c.within(limit), c``."""
    clock = LimitClock()
    gc.collect()
    gc.freeze()
    c0, t0 = cpu_seconds(children), wall()
    try:
        yield clock
    finally:
        clock.cpu, clock.wall = cpu_seconds(children) - c0, wall() - t0
        gc.unfreeze()

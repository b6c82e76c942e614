"""Time-limit assertions that a loaded machine cannot fail: CPU time, not wall time.

A planner that honours its deadline stops within about the limit of wall time, so it cannot
have used more CPU than that; one that ignores it uses its CPU whatever the machine's load.
The process's CPU time (all its threads) is what the tests compare with ``slack(limit)``:
other processes on the machine do not add to it. Finished children count only where a test
runs them (``children=True``: the CLI, the report's workers): no planner starts a process, and
in a test worker a child of an earlier test, reaped during a solve, added its whole CPU time to
that solve (3.1 CPU s on a 1 s limit, the slow suite's flaky ``test_improve`` limit test).
"""

from __future__ import annotations

import os
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

"""bench_fidelity's wait for a quiet machine (the benchmark itself needs MPI and minutes)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_fidelity as bf  # noqa: E402


class Clock:
    """A fake clock and load average: each sleep moves time on and the load to the next reading."""

    def __init__(self, loads):
        self.loads, self.t, self.slept = list(loads), 0.0, 0

    def getloadavg(self):
        return (self.loads[0], 0.0, 0.0)

    def sleep(self, s):
        self.t += s
        self.slept += 1
        if len(self.loads) > 1:
            self.loads.pop(0)

    def monotonic(self):
        return self.t


def patch(monkeypatch, clock):
    monkeypatch.setattr(bf.os, "getloadavg", clock.getloadavg)
    monkeypatch.setattr(bf.time, "sleep", clock.sleep)
    monkeypatch.setattr(bf.time, "monotonic", clock.monotonic)


def test_settle_waits_until_the_load_falls(monkeypatch):
    clock = Clock([1.3, 0.9, 0.4, 0.2])
    patch(monkeypatch, clock)
    assert bf.settle(60, poll_s=5) == 0.4 and clock.slept == 2


def test_settle_gives_up_at_its_limit(monkeypatch):
    clock = Clock([1.5])
    patch(monkeypatch, clock)
    assert bf.settle(20, poll_s=5) == 1.5 and clock.slept == 4


def test_a_quiet_machine_is_not_waited_for(monkeypatch):
    clock = Clock([0.1])
    patch(monkeypatch, clock)
    assert bf.settle(60) == 0.1 and clock.slept == 0
    assert not bf._loaded({"loadavg_before": [bf.LOADED]}) and bf._loaded({"loadavg_before": [bf.LOADED + 0.01]})

"""The memory budget of an exact solve: the process's resident memory, checked cheaply in the
hot loops (stage-graph enumeration, relaxation, label search).

``with memory_budget(2e9):`` makes ``check_memory()`` raise ``MemoryBudgetExceeded`` once the
resident set size (RSS, read from ``/proc/self/statm``, or ``resource`` where there is no
/proc) exceeds ``STOP_SHARE`` (90 %) of the budget, so that what a step allocates before the
next check stays within it. The budget counts the whole process, as CP-SAT's
``max_memory_in_mb`` does: on entry, a process already above ``RELEASE_SHARE`` of the budget
(a host that ran other work first) releases its garbage (``release_memory``), and a stop then
says how much the process held when the budget began. The check reads the RSS at most once
per ``_PERIOD_S`` seconds, so a call costs a clock read (the loops it sits in read the clock
for their deadline anyway). Outside a
``memory_budget`` block ``check_memory()`` does nothing. The rounds
(``milp_planner.engine.rounds.explore``) turn the exception into "stop and return the best plan and
bound" (docs/exact.md).
"""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager

DEFAULT_BUDGET = 2_000_000_000  # bytes (2 GB: issue #32's ceiling for any run)
#: the default budget leaves at least this much room above what the process holds when it begins
#: (after the release): a host that holds data of its own (a notebook, a long research loop, a
#: test run) gets ``held + DEFAULT_HEADROOM`` instead of a budget it has spent before the search.
#: A solve from the command line holds 0.1-0.2 GB there, so its budget stays 2 GB.
DEFAULT_HEADROOM = 1_000_000_000
_PERIOD_S = 0.05  # seconds between two reads of the RSS
#: the search stops once the RSS passes this share of the budget: between two checks a step
#: allocates more (the peaks measured over the certification table, with the check at the budget
#: itself: up to 4,078 MiB against 3,815), so the stop comes early enough for the peak to stay under
STOP_SHARE = 0.9
#: on entering a budget, a process holding more than this share of it collects its garbage and
#: trims its heap first (what a previous solve or a host's earlier work freed but kept resident)
RELEASE_SHARE = 0.5

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class MemoryBudgetExceeded(Exception):
    """The process's resident memory went past the memory budget."""

    def __init__(self, rss: int, budget: int, held: int = 0, need: int = 0, grown: bool = False):
        before = (f", of which the process held {held / 1e9:.3g} GB when the budget began"
                  if held > RELEASE_SHARE * budget else "")
        # ``need``: a step about to allocate that much was not started (the process never held it)
        step = f", and the next step would allocate {need / 1e9:.3g} GB more" if need else ""
        what = (f"the default memory budget, {DEFAULT_HEADROOM / 1e9:.3g} GB above what the process held, "
                f"{budget / 1e9:.3g} GB," if grown else f"the memory budget of {budget / 1e9:.3g} GB")
        super().__init__(f"{what} was hit (resident memory "
                         f"{rss / 1e9:.3g} GB{before}{step}, past the {STOP_SHARE:.0%} at which the search stops); "
                         "raise it with -O memory_budget=SIZE")
        self.rss, self.budget, self.held, self.need, self.grown = rss, budget, held, need, grown


def parse_size(text) -> int:
    """Bytes from ``4000000000``, ``"4GB"``, ``"512 MB"``, ``"1.5GiB"`` (decimal units are
    powers of 10); ``ValueError`` with the reason otherwise."""
    if isinstance(text, bool):
        raise ValueError("must be a size in bytes or like 4GB")
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError("must be a size in bytes or like 4GB, 512MB, 2GiB")
        value, unit = float(m.group(1)), m.group(2).lower()
    size = value * _UNITS[unit]
    if not size >= 1 or size > 2**60:  # "0.5" would be a budget of 0 bytes: refused, not rounded down
        raise ValueError("must be a size of at least 1 byte and at most 2**60 bytes")
    return int(size)


def size_problem(text) -> str | None:
    """The reason ``text`` is not a size (for a planner option's check), or None."""
    try:
        parse_size(text)
    except ValueError as err:
        return str(err)
    return None


def auto_budget(value) -> bool:
    """A planner's ``memory_budget`` option left to its default (unset, or given as ``auto``)."""
    return value is None or (isinstance(value, str) and value.strip().lower() == "auto")


def budget_problem(value) -> str | None:
    """The reason ``value`` is neither ``auto`` nor a size (the option's check), or None."""
    return None if auto_budget(value) else size_problem(value)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """The resident set size of this process now, in bytes."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        import resource  # peak, not current: an over-estimate, so the budget still holds

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


_budget: int | None = None
_held = 0  # the RSS when the active budget began (after the release), for the stop's message
_grown = False  # the active budget is its headroom above ``_held`` (for the stop's message)
_next_read = 0.0


@contextmanager
def memory_budget(budget: int | None, headroom: int = 0):
    """Within the block, ``check_memory()`` raises once the RSS exceeds ``STOP_SHARE`` of
    ``budget`` bytes (None: no budget). Blocks nest; the inner budget applies inside it. A
    process above ``RELEASE_SHARE`` of the budget on entry releases its garbage first.
    ``headroom``: the budget is at least what the process holds then plus ``headroom`` bytes
    (the planners' default budget passes ``DEFAULT_HEADROOM``; a budget the user gives counts
    the whole process)."""
    global _budget, _held, _grown, _next_read
    saved = _budget, _held, _grown
    held = rss_bytes() if budget is not None else 0
    if budget is not None and held > RELEASE_SHARE * budget:
        held = release_memory()
    grown = budget is not None and headroom > 0 and held + headroom > budget
    if grown:
        budget = held + headroom
    _budget, _held, _grown, _next_read = budget, held, grown, 0.0
    try:
        yield
    finally:
        _budget, _held, _grown = saved


def active_budget() -> int | None:
    """The budget in force (bytes; after a default budget grew to its headroom), or None."""
    return _budget


def check_memory(force: bool = False, need: int = 0) -> None:
    """Raise ``MemoryBudgetExceeded`` when the process is over the active budget (cheap).
    ``force``: read the RSS even within ``_PERIOD_S`` of the last read (after a step that
    allocates tens of MB at once, where 50 ms is enough to pass the budget). ``need``: bytes
    about to be allocated (read now, counted as if already resident)."""
    global _next_read
    if _budget is None:
        return
    now = time.perf_counter()
    if now < _next_read and not (force or need):
        return
    _next_read = now + _PERIOD_S
    rss = rss_bytes()
    if rss + need > STOP_SHARE * _budget:
        raise MemoryBudgetExceeded(rss, _budget, _held, need, _grown)


def release_memory() -> int:
    """Collect garbage and return freed heap to the system (glibc's ``malloc_trim``; a no-op
    elsewhere); the resident memory afterwards, in bytes. Called between a Pareto front's ε-steps: a step's
    stage graph, Pyomo model and HiGHS objects are garbage once it returns, but the C heap keeps
    their pages unless trimmed. Also before the coarse relaxation, after the full one hit the
    budget."""
    import gc

    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the pages stay with the process
        pass
    return rss_bytes()

"""The memory a command may use, stated before it starts (issue #30).

The exact planners stop at their ``memory_budget`` (2 GB by default, or 1 GB above what the
process holds when the search begins, ``formulations/budget.py``).
``inspect``, ``deploy`` and ``run`` state a budget the same way, as an estimate checked before
the work: a command that would need more is one line naming what is too large, never a crash
half way (a C library that fails to allocate under ``ulimit -v`` aborts or segfaults, and no
Python handler can turn that into a message).

- ``memory_budget(requested)``: the budget in bytes: ``requested`` (default ``DEFAULT_BUDGET``,
  4 GB, or ``$MILP_PLANNER_MEMORY_BUDGET``), lowered to what the process may really get: its
  address-space and data limits (``ulimit -v``/``-d``) less what it already maps, and its
  cgroup's memory limit less what the cgroup already uses.
- ``check_need(need, what, budget)``: ``PlannerError`` when ``need`` bytes exceed the budget.
- ``check_threads(n)``: ``n`` solver threads fit in the address space (each thread's stack is
  reserved there: 1024 threads of 8 MiB are 8 GiB under ``ulimit -v``).
- ``trim_heap()``: hand the memory freed so far back to the system (``deploy`` after each
  sub-model, whose weights C libraries allocated and freed: glibc keeps freed blocks of up to
  32 MiB in the heap, where the next library's allocations do not always fit).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from milp_planner.errors import PlannerError

DEFAULT_BUDGET = 4_000_000_000  # bytes: a deploy of VGG-16 in two ranks needs about 4 GB
ENV = "MILP_PLANNER_MEMORY_BUDGET"


def _gb(x: float) -> str:
    return f"{x / 1e9:.3g} GB"


def _vm_size() -> int:
    """Bytes of address space this process maps now (0 where unknown)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _cgroup_room() -> int | None:
    """Bytes the cgroup (v2) still allows, or None without a limit."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
        rel = line.split("::", 1)[1] if "::" in line else None
    except (OSError, IndexError):
        return None
    if rel is None:
        return None
    base = Path("/sys/fs/cgroup") / rel.lstrip("/")
    try:
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int((base / "memory.current").read_text().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def address_space_room() -> int | None:
    """Bytes of address space left under ``ulimit -v`` (RLIMIT_AS), or None without one."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(0, soft - _vm_size())


def memory_budget(requested: int | None = None) -> tuple[int, str]:
    """The budget in bytes and where it comes from (for messages)."""
    why = "the memory budget"
    if requested is None:
        env = os.environ.get(ENV)
        if env:
            from formulations.budget import parse_size

            try:
                requested = parse_size(env)
            except ValueError as e:
                raise PlannerError(f"${ENV}={env!r}: {e}") from None
            why = f"the memory budget (${ENV})"
        else:
            requested = DEFAULT_BUDGET
    budget = requested
    room = address_space_room()
    if room is not None and room < budget:
        budget, why = room, "the address space left under the process's limit (ulimit -v)"
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    if soft != resource.RLIM_INFINITY and max(0, soft - _rss()) < budget:
        budget, why = max(0, soft - _rss()), "the data-size limit (ulimit -d)"
    room = _cgroup_room()
    if room is not None and room < budget:
        budget, why = room, "the memory left in the process's control group"
    return budget, why


def check_need(need: int, what: str, requested: int | None = None) -> None:
    """``PlannerError`` naming ``what`` when ``need`` bytes exceed the budget."""
    budget, why = memory_budget(requested)
    if need > budget:
        raise PlannerError(f"{what} needs about {_gb(need)} of memory, more than {why} of {_gb(budget)}"
                           + ("; raise it with --memory-budget" if why.startswith("the memory budget") else ""))


def thread_stack_bytes() -> int:
    """The stack the C library reserves for each new thread (RLIMIT_STACK, 8 MiB by default)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 2 * 2**20  # glibc's default for an unlimited stack
    return int(soft)


ARENA_BYTES = 64 * 2**20  # glibc reserves a malloc arena of 64 MiB for a new thread ...
ARENAS_PER_CPU = 8  # ... up to 8 arenas per CPU
LIBRARY_RESERVE = 750 * 10**6  # the solver libraries' own mappings (HiGHS, OR-Tools, Pyomo: ~0.5 GB)


def threads_need(n: int) -> int:
    """Address space ``n`` solver threads reserve: stacks, malloc arenas, the libraries."""
    arenas = min(n, ARENAS_PER_CPU * (os.cpu_count() or 1))
    return n * thread_stack_bytes() + arenas * ARENA_BYTES + LIBRARY_RESERVE


def check_threads(n: int) -> None:
    """``PlannerError`` when ``n`` threads' stacks do not fit in the address space left."""
    room = address_space_room()
    if room is None or threads_need(n) <= room:
        return
    most = max((k for k in range(1, n) if threads_need(k) <= room), default=0)
    use = f"use at most {most} threads" if most else "raise the limit"
    raise PlannerError(f"--threads {n}: {n} threads need about {_gb(threads_need(n))} of address space "
                       f"(stacks of {thread_stack_bytes() // 2**20} MiB, malloc arenas, the solver libraries), "
                       f"and the process's limit (ulimit -v) leaves {_gb(room)}; {use}")


def parse_budget(text: str) -> int:
    """``--memory-budget`` text (``4GB``, ``512MB``) to bytes (``argparse`` type)."""
    import argparse

    from formulations.budget import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} {e}") from None


_TRIM = None


def trim_heap() -> None:
    """``malloc_trim(0)`` where the C library has it (glibc); nothing elsewhere."""
    global _TRIM
    if _TRIM is None:
        _TRIM = False
        try:
            import ctypes
            import ctypes.util

            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            fn = libc.malloc_trim
            fn.argtypes = [ctypes.c_size_t]
            fn.restype = ctypes.c_int
            _TRIM = fn
        except (OSError, AttributeError):
            pass
    if _TRIM:
        _TRIM(0)

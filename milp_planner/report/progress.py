"""Solver progress as lines a person can read, for stderr during ``solve``.

A planner reports progress through ``SolveContext.report(**info)`` with any of these keys:
``phase`` (what it is doing, in words), ``within`` (the round's upper bound: the plans it
enumerates), ``incumbent`` (the best plan's value so far; present and None: no plan yet),
``bound`` (the best proven lower bound), ``gap``, ``arcs`` and ``nodes`` (graph size),
``elapsed`` and ``objective``. Values are in the objective's unit: ms for latency and period,
mJ for energy, MB for memory. For example::

      2.4 s  round 3, plans up to 0.7123 ms: best 0.7123 ms, proven bound 0.70517 ms, gap 1.00 %
"""

from __future__ import annotations

import math

# objective -> (unit, factor from the evaluator's SI value)
UNITS = {"latency": ("ms", 1e3), "period": ("ms", 1e3), "energy": ("mJ", 1e3), "memory": ("MB", 1e-6)}


def in_unit(value: float, objective: str | None) -> str:
    """``value`` (seconds, joules or bytes) in the objective's display unit."""
    unit, factor = UNITS.get(objective or "", ("", 1.0))
    if not math.isfinite(value):
        return "unbounded" if value > 0 else "-inf"
    return f"{value * factor:.6g} {unit}".rstrip()


def format_progress(info: dict) -> str:
    """One progress line: elapsed time, phase, then incumbent, proven bound and gap."""
    obj = info.get("objective")
    head = f"{info.get('elapsed', 0.0):7.1f} s  {info.get('phase') or 'searching'}"
    if info.get("within") is not None:
        head += f", plans up to {in_unit(info['within'], obj)}"
    facts = []
    inc, bound = info.get("incumbent"), info.get("bound")
    if inc is not None:
        facts.append(f"best {in_unit(inc, obj)}")
    elif "incumbent" in info:
        facts.append("no plan yet")
    if bound is not None:
        facts.append(f"proven bound {in_unit(bound, obj)}")
    gap = info.get("gap")
    if gap is None and inc is not None and bound is not None and math.isfinite(inc) and inc > 0:
        gap = max(0.0, (inc - bound) / abs(inc))
    if gap is not None:
        facts.append(f"gap {gap * 100:.2f} %")
    if info.get("arcs") is not None:
        facts.append(f"{info['arcs']:,} arcs")
    if info.get("nodes") is not None:
        facts.append(f"{info['nodes']:,} nodes")
    return head + (": " + ", ".join(facts) if facts else "")

"""Small random instances of the differential bed (``benchmarks/differential.py``) with their
brute-force tables, for tests that check a bound or a graph against every plan."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

import differential as bed  # noqa: E402


def small_cases(spec_of, count: int, start: int, keep=None, max_plans: int = 3000):
    """(seed, instance, brute-force table) of the first ``count`` seeds from ``start`` whose
    spec (``spec_of(seed)``) has at most ``max_plans`` plans and, when given, meets ``keep``."""
    seed = start
    while count:
        spec = spec_of(seed)
        seed += 1
        graph = bed.build_graph(spec)
        inst = bed.build_instance(spec, graph)
        space = bed.list_space(inst)
        if bed.plan_count(space, len(graph.layers)) > max_plans or (keep is not None and not keep(inst)):
            continue
        count -= 1
        yield seed - 1, inst, bed.score(inst, list(bed.all_plans(space, len(graph.layers))))

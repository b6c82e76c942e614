"""Good plans for the memory objective, fast: beam searches over small restricted stage graphs.

The memory of a plan is the largest, over the devices, of the weights of every layer a device
computes any part of plus its largest working set (docs/model.md section 4). Two things make
the general search (``milp_planner.engine.rounds`` + ``formulations.minmax``) slow on it: the rounds
enumerate with the mean weights per device as their floor, which prunes almost nothing, and
the optimum is massively degenerate (only a few large layers and the largest working sets
decide it), so the label search keeps a dense front of weight sums.

Memory does not depend on the devices' speeds, power or links, so plans that balance the
weights and keep the working sets small do not need the many device orders and cut vectors of
the space. This module searches restricted plan spaces, each a **stage graph of its own**
(``milp_planner.engine.restricted.restricted_graph``: every stage one layer, a few layouts per layer, every arc priced by the
evaluator's ``price_stage`` from its tail's ownership state), with **beam searches**
(``beam_search``: per node the few labels of least memory so far; a label holds each device's
weights and largest working set):

- ``uniform``: each layer whole on any one device, or split along each allowed axis over the
  most parts the space allows, at the most balanced cut vector of the space, devices in
  index order;
- ``rotations``: the same with every rotation of the device order, and every cyclic window of
  2 .. ``max_parts`` - 1 consecutive devices at the most balanced cut vector of that many parts
  (so a layer's parts can go to the devices that hold the least).

Every layout comes from the instance's own split families (``formulations.options``), so every
plan found is a plan of the space; ``memory_plans`` still scores it with the evaluator and keeps
it only when it is in the space, within the caps, and the evaluator's memory equals the graph's.
The searches prove nothing about the whole space: they give the exact planners a better
incumbent (``planners.exact``, ``ExactPlanner.memory_start``); the bound stays the ``weights``
floor (``milp_planner.cost.floors``) or what the rounds prove.

>>> from milp_planner.engine.memory_search import memory_plans   # doctest: +SKIP
>>> found = memory_plans(instance, deadline=Deadline.after(2))   # doctest: +SKIP
>>> found.plan, found.value, found.source   # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from milp_planner.deadline import NEVER, Deadline
from formulations.options import StageOption
from milp_planner.engine.restricted import Best, Space, search_spaces
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.space.cuts import _valid, cut_vectors, equal_cuts, ranges_from_cuts, stage_extent

#: the restricted spaces tried, in order (each larger than the one before)
FAMILIES = ("uniform", "rotations")
BEAMS = (1, 4, 16, 64)  # labels kept per node by the beam searches (a wider beam is not always better)


def _balanced_cuts(instance: Instance, n: int, k: int, deadline: Deadline) -> tuple | None:
    """The cut vector of least largest part among those of the space for ``k`` parts of ``n``
    (equal cuts when the space has them), or None when the space has none (or too many to list)."""
    if "equal" in instance.search.splits:
        cuts = equal_cuts(n, k)
        return cuts if k <= n and _valid(cuts, n) else None
    try:
        vectors = cut_vectors(instance, n, k, deadline)
    except PlannerError:  # too many vectors to list: not this part count
        return None
    if not vectors:
        return None
    return min(vectors, key=lambda c: (max(b - a for a, b in ranges_from_cuts(c, n)), c))


def family_options(instance: Instance, family: str, deadline: Deadline = NEVER) -> Callable[[int], list[StageOption]]:
    """The stage options of ``family`` for the one-layer stage of layer l (a function of l).

    Every option's layout is one of the space (split families, ``max_parts``, ``axes``:
    docs/model.md section 5). Raises ``TimeoutError`` past ``deadline``."""
    if family not in FAMILIES:
        raise ValueError(f"unknown memory search family {family!r}")
    n_dev = len(instance.devices)
    sp = instance.search
    kmax = min(sp.max_parts, n_dev)

    def options(lid: int) -> list[StageOption]:
        layer = instance.graph.layers[lid]
        out = [StageOption(lid, lid, "none", (None,), (d,)) for d in range(n_dev)]
        axes = [ax for ax, ok in (("rows", layer.row_splittable), ("channels", layer.channel_splittable))
                if ok and ax in sp.axes]
        for axis in axes:
            n = stage_extent(instance, lid, axis)
            layouts = {}
            for k in range(2, kmax + 1):
                cuts = _balanced_cuts(instance, n, k, deadline)
                if cuts is not None:
                    layouts[k] = tuple(ranges_from_cuts(cuts, n))
            if not layouts:
                continue
            most = max(layouts)
            for k, ranges in sorted(layouts.items()):
                if family == "uniform" and k != most:
                    continue
                shifts = range(n_dev) if family == "rotations" else (0,)
                orders = {tuple((s + i) % n_dev for i in range(k)) for s in shifts}
                out.extend(StageOption(lid, lid, axis, ranges, order) for order in sorted(orders))
        return out

    return options


def memory_plans(instance: Instance, deadline: Deadline = NEVER, upper: float = math.inf,
                 families: Iterable[str] = FAMILIES, widths: Iterable[int] = BEAMS) -> Best:
    """The best plan for the memory objective that beam searches (``beam_search``, each width
    of ``widths``) over the restricted graphs of ``families`` find within ``deadline`` (see the
    module; ``restricted.search_spaces``). A heuristic: it proves nothing.

    ``upper``: the memory of a plan already known; only better plans are returned. A plan is
    kept only when the evaluator finds it in the space, within the caps and below ``upper``,
    with the memory the graph gave it (a disagreement is a pricing bug and raises)."""
    spaces = (Space(family_options(instance, family, deadline), family, {"family": family}) for family in families)
    return search_spaces(instance, "memory", spaces, widths=tuple(widths), upper=upper, deadline=deadline,
                         who="memory search")

"""Better plans from the plans at hand: the best combination of their stage layouts.

Each fast baseline has one good idea: coopai splits every layer's rows over the fleet, hybrid
pipelines groups of devices, offload keeps everything on one device. Their plans share
layouts but not the choice of where one ends and the next begins, nor how many layers each
stage fuses. ``polish`` searches the plans built only from what the given plans use:

- a **layout** is a split stage's axis, its devices in range order and its part sizes in
  proportion (coopai's rows over 4 GPUs, 1:1:1:1);
- every window of at most ``fusion_limit`` layers may be one part on any device the plans use,
  or split along any layout whose axis the window allows, at the cut vector of the space
  closest to the layout's proportions (``space.cuts.nearest_cuts``).

That space is a small stage graph (``milp_planner.engine.restricted``); a beam search gives its best
plan, exactly for latency and energy without memory caps; for the period and memory the exact
label search (``formulations.minmax.minmax_search``) follows it with the time left. Sources are tried in widening rings
(the best plan alone, then the best few, then all), each a larger space, until the deadline.
Every plan found is scored by the evaluator and kept only when it is in the space, within the
caps and better than ``upper``. It proves nothing about the whole space: the exact planners take
its plan as their incumbent (``planners.exact``).

>>> from milp_planner.engine.polish import polish   # doctest: +SKIP
>>> found = polish(instance, "latency", [coopai_plan, hybrid_plan], upper=0.0364)   # doctest: +SKIP
>>> found.plan, found.value, found.tried   # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

from milp_planner.deadline import NEVER, Deadline
from formulations.options import StageOption
from milp_planner.engine.restricted import Best, Space, search_spaces
from milp_planner.instance import Instance
from milp_planner.space.cuts import nearest_cuts, ranges_from_cuts, stage_extent
from milp_planner.space.plan import Plan

RINGS = (1, 3)  # the sources of the first rings (the best plan alone, the best 3), then all of them
WIDTHS = (1, 8)  # beam widths tried on each ring (1 is exact for latency and energy without caps)


@dataclass(frozen=True)
class Layout:
    """A split stage's shape without its layers: the axis, the device of each part in range
    order and the parts' sizes in proportion (summing to 1)."""

    axis: str
    devices: tuple[int, ...]
    shares: tuple[Fraction, ...]


def plan_layouts(instance: Instance, plans: Sequence[Plan]) -> tuple[list[int], list[Layout]]:
    """The devices the plans use (with the source and sink devices) and their split layouts,
    each once, in order of first appearance."""
    devices: dict[int, None] = {}
    net = instance.network
    for e in (net.source, net.sink):
        if not e.external:
            devices[e.device] = None
    layouts: dict[Layout, None] = {}
    for plan in plans:
        for s in plan.stages:
            idx = [instance.device_index(p.device) for p in s.parts]
            devices.update(dict.fromkeys(idx))
            if len(s.parts) < 2 or s.axis == "none":
                continue
            parts = sorted(zip(s.parts, idx), key=lambda x: x[0].range)
            sizes = [p.range[1] - p.range[0] for p, _ in parts]
            total = sum(sizes)
            layouts[Layout(s.axis, tuple(d for _, d in parts), tuple(Fraction(z, total) for z in sizes))] = None
    return list(devices), list(layouts)


def layout_options(instance: Instance, devices: Sequence[int], layouts: Sequence[Layout]
                   ) -> Callable[[int], list[StageOption]]:
    """The stage options starting at layer b (a function of b) of the space ``polish`` searches."""
    g = instance.graph
    sp = instance.search
    n = len(g.layers)
    fl = max(1, sp.fusion_limit)
    cuts_of: dict[tuple, tuple | None] = {}

    def cuts(extent: int, shares: tuple[Fraction, ...]):
        key = (extent, shares)
        if key not in cuts_of:
            c = nearest_cuts(instance, extent, [s * extent for s in shares])
            cuts_of[key] = tuple(ranges_from_cuts(c, extent)) if c is not None else None
        return cuts_of[key]

    def options(b: int) -> list[StageOption]:
        out: dict[StageOption, None] = {}
        for last in range(b, min(n, b + fl)):
            for d in devices:
                out[StageOption(b, last, "none", (None,), (d,))] = None
            allowed = {"rows": "rows" in sp.axes and all(g.layers[i].row_splittable for i in range(b, last + 1)),
                       "channels": "channels" in sp.axes and b == last and g.layers[b].channel_splittable}
            for lay in layouts:
                if not allowed.get(lay.axis):
                    continue
                ranges = cuts(stage_extent(instance, last, lay.axis), lay.shares)
                if ranges is not None and all(r[1] > r[0] for r in ranges):
                    out[StageOption(b, last, lay.axis, ranges, lay.devices)] = None
        return list(out)

    return options


def polish(instance: Instance, objective: str, plans: Sequence[Plan], upper: float = math.inf,
           deadline: Deadline = NEVER, exact: bool = True) -> Best:
    """The best plan of the spaces built from ``plans`` (best first: the first rings use the
    first of them), if better than ``upper`` (see the module; ``restricted.search_spaces``). A
    heuristic: it proves nothing. ``exact``: for the period and memory, the label search follows
    the beam (False: the beam only). A plan is kept only when the evaluator finds it in the
    space, within the caps, with the value the graph gave it (a disagreement is a pricing bug
    and raises)."""
    # a width of 1 is exact for an additive objective without memory caps
    widths = WIDTHS[:1] if objective in ("latency", "energy") and not instance.memory_capped else WIDTHS
    return search_spaces(instance, objective, _rings(instance, plans), widths=widths, upper=upper,
                         deadline=deadline, exact=exact, who="polish")


def _rings(instance: Instance, plans: Sequence[Plan]):
    """The spaces of the first 1, 3, ... and all plans, each once."""
    seen = None
    for size in sorted({min(r, len(plans)) for r in RINGS} | {len(plans)}):
        devices, layouts = plan_layouts(instance, plans[:size])
        if (set(devices), set(layouts)) == seen:
            continue  # the same space as the ring before
        seen = (set(devices), set(layouts))
        yield Space(layout_options(instance, devices, layouts), f"{size} plan{'s' if size > 1 else ''}",
                    {"plans": size, "layouts": len(layouts), "devices": len(devices)})

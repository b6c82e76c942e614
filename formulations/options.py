"""Stage options: what one stage of a plan can be, and their device-free groups.

A *stage option* is layers ``first..last``, an axis, the part ranges and the device of each
part. Options that differ only in their devices share their geometry (what each part computes,
reads and owns): a ``StageGroup`` holds that geometry once, with the per-device compute times
of every device assignment as an array, so the enumeration and the bounds price it once.
With device types (``formulations.symmetry``) a group holds one device order per sequence of
device types, the only orders the relaxation needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from math import perm

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from milp_planner.errors import PlannerError
from milp_planner.cost.evaluator import Pricer
from milp_planner.space.geometry import PartGeometry
from milp_planner.instance import Instance
from milp_planner.space.plan import Part, Stage
from milp_planner.space.cuts import cut_vectors, ranges_from_cuts, stage_extent

from formulations.symmetry import DeviceTypes, order_count, type_orders


class SpaceTooLarge(PlannerError):
    """The plan space (its stage options or its stage graph) exceeds a stated limit."""


@dataclass(frozen=True, slots=True)
class StageOption:
    """One stage: layers first..last, an axis, part ranges and the device of each part."""

    first: int
    last: int
    axis: str
    ranges: tuple  # one (start, stop) per part, or (None,) for axis none
    devices: tuple[int, ...]

    def to_stage(self, names: list[str]) -> Stage:
        if self.axis == "none":
            return Stage(self.first, self.last, "none", (Part(names[self.devices[0]]),))
        return Stage(self.first, self.last, self.axis,
                     tuple(Part(names[d], r) for d, r in zip(self.devices, self.ranges)))


def _layouts(instance: Instance, first: int, last: int, deadline: Deadline = NEVER):
    """(axis, ranges) of every part layout of stage first..last in the search space."""
    g = instance.graph
    sp = instance.search
    n_dev = len(instance.devices)
    yield "none", (None,)
    kmax = min(sp.max_parts, n_dev)
    axes = []
    if "rows" in sp.axes and all(g.layers[i].row_splittable for i in range(first, last + 1)):
        axes.append("rows")
    if "channels" in sp.axes and first == last and g.layers[first].channel_splittable:
        axes.append("channels")
    for axis in axes:
        n = stage_extent(instance, last, axis)
        for k in range(2, kmax + 1):
            for cuts in cut_vectors(instance, n, k, deadline):
                yield axis, tuple(ranges_from_cuts(cuts, n))


def stage_options(instance: Instance, first: int, last: int, deadline: Deadline = NEVER,
                  max_options: int | None = None) -> list[StageOption]:
    """Every stage option on layers first..last inside the instance's search space.

    Raises ``SpaceTooLarge`` above ``max_options`` options and ``TimeoutError`` past
    ``deadline``."""
    n_dev = len(instance.devices)
    layouts = list(_layouts(instance, first, last, deadline))
    _check_count(instance, first, last, layouts, max_options)
    out = []
    for axis, ranges in layouts:
        deadline.check("the time limit ran out while listing the stage options")
        out.extend(StageOption(first, last, axis, ranges, assign) for assign in permutations(range(n_dev), len(ranges)))
    return out


def _check_count(instance: Instance, first: int, last: int, layouts: list, max_options: int | None,
                 types: DeviceTypes | None = None) -> None:
    if max_options is None:
        return
    n_dev = len(instance.devices)
    if types is None or types.trivial:
        count = sum(perm(n_dev, len(ranges)) for _, ranges in layouts)
        what = "layouts x device orders"
    else:
        per_k: dict[int, int] = {}
        count = sum(per_k.setdefault(len(r), order_count(types, len(r))) for _, r in layouts)
        what = "layouts x orders of device types"
    if count > max_options:
        raise SpaceTooLarge(
            f"{instance.name}: stage {first}..{last} alone has {count:,} options ({what}, more than "
            f"{max_options:,}); reduce search.max_parts or splits, or use a heuristic planner")


@dataclass
class StageGroup:
    """The options of one stage layout: same layers, axis and ranges, every device assignment."""

    first: int
    last: int
    axis: str
    ranges: tuple
    geos: list[PartGeometry]  # one per part
    perms: list[tuple[int, ...]]  # the device of each part, one tuple per option (or per type order)
    comp: np.ndarray  # (options, parts): compute seconds of each part on its device
    weights: tuple[int, ...]  # weight bytes of each part (device-free)
    computed: tuple[int, ...]  # bytes each part computes in the stage

    def option(self, p: int) -> StageOption:
        return StageOption(self.first, self.last, self.axis, self.ranges, self.perms[p])


def stage_groups(instance: Instance, pr: Pricer, first: int, last: int,
                 max_options: int | None = None, deadline: Deadline = NEVER,
                 types: DeviceTypes | None = None) -> list[StageGroup]:
    """The options of stage first..last, grouped by layout, with their prices.

    With ``types``, one device order per sequence of orbits (``symmetry.type_orders``): every
    order with the same orbits has the same compute times. Raises ``SpaceTooLarge`` when the
    stage has more than ``max_options`` options and ``TimeoutError`` past ``deadline``."""
    n_dev = len(instance.devices)
    layouts = list(_layouts(instance, first, last, deadline))
    _check_count(instance, first, last, layouts, max_options, types)
    out = []
    for axis, ranges in layouts:
        deadline.check("the time limit ran out while pricing the stage options")
        geos = pr.geometry.parts(first, last, axis, list(ranges))
        k = len(ranges)
        perms, idx = _orders(n_dev, types, k)
        prices = [_part_prices(pr, part, axis) for part in geos]
        per_dev = np.stack([p.times for p in prices], axis=1)
        comp = per_dev[idx, np.arange(k)[None, :]]
        weights = tuple(p.weight for p in prices)
        computed = tuple(p.computed for p in prices)
        out.append(StageGroup(first, last, axis, ranges, geos, perms, comp, weights, computed))
    return out


_ORDERS: dict = {}  # (devices, types, parts) -> (device orders, their array); a few entries


def _orders(n_dev: int, types: DeviceTypes | None, k: int) -> tuple[list, np.ndarray]:
    """The device orders of a k-part layout (every permutation, or one per sequence of orbits)
    and the same as an array, shared by the groups of every stage (not to be modified)."""
    key = (n_dev, types, k)
    hit = _ORDERS.get(key)
    if hit is None:
        perms = list(permutations(range(n_dev), k) if types is None else type_orders(types, k))
        idx = np.array(perms, dtype=np.int64).reshape(len(perms), k)
        idx.setflags(write=False)
        if len(_ORDERS) >= 64:
            _ORDERS.clear()
        hit = _ORDERS[key] = (perms, idx)
    return hit


@dataclass(frozen=True)
class PartPrices:
    """What ``stage_groups`` needs of one part on one pricer: its compute seconds on every
    device, its weight bytes and the bytes it computes."""

    times: np.ndarray
    weight: int
    computed: int


def _part_prices(pr: Pricer, part: PartGeometry, axis: str) -> PartPrices:
    """The part's ``PartPrices``, remembered on the pricer per part object (the geometry
    returns the same object for the same part range, which many layouts of a stage share)."""
    cache = pr.__dict__.setdefault("_part_prices", {})
    key = (id(part), axis == "channels")
    hit = cache.get(key)
    if hit is not None and hit[0] is part:  # the part is held in the value, so its id is not reused
        return hit[1]
    out = PartPrices(_part_times(pr, part), sum(pr.weight_bytes(part, axis).values()), pr.computed_bytes(part))
    cache[key] = (part, out)
    return out


def _part_times(pr: Pricer, part: PartGeometry) -> np.ndarray:
    """``pr.compute_time(d, part)`` of every device d: the same sum in the same order (so the
    same floats), with each layer's times for all devices remembered on the pricer."""
    cache = pr.__dict__.setdefault("_layer_times", {})
    n_dev = pr.n_dev
    out = np.zeros(n_dev)
    for lid, f in part.fraction.items():
        key = (lid, f.numerator, f.denominator, part.axis)
        vec = cache.get(key)
        if vec is None:
            vec = cache[key] = np.array([pr.layer_time(d, lid, f, part.axis) for d in range(n_dev)])
        out = out + vec
    return out

"""A coarser layout relaxation, still a proof, for the spaces the full one cannot bound.

The full relaxation (``formulations.relaxation``) keeps, at a stage boundary, the layout of
every live tensor and lists one device order per sequence of device types. Wide DAGs (Inception
branches, DenseNet's concatenated features) make its classes explode, and many distinct
devices its device orders (8 distinct devices and 4 parts: 1,680 orders per part layout). The
coarse relaxation (``coarse_bounds``) simplifies both; each simplification can only lower a
stage's floor, so ``to_go[0].min()`` stays a lower bound on every plan of the space:

- *The newest tensor only.* A class holds the layout of the output of the last layer before
  the boundary (the tensor the next stage reads on the main path); every other live tensor
  (skips, branches, concatenated features) is read free, wherever it is needed. Its regions
  are widened to a grid of ``grid`` cells per axis (fewer layouts): a part then receives at
  least what it needs minus the most one widened region holds of it (the true regions cover
  what it needs), message latency left out. A boundary
  with more than ``max_classes`` classes, or a stage whose receive table would be too large,
  reads free from every class. Dropping a transfer only lowers a stage's time, energy and
  load; compute, weights and the graph's inputs are priced as in the full relaxation.
- *Merged device types.* When the stage options (part layouts x orders of device types) exceed
  ``max_options``, devices are merged into fewer types (contiguous runs of the devices sorted
  by their time for the whole model) until they fit. A part on a merged type is priced at the
  least of its members: least compute time of that part, least compute and receive power, the
  fastest incoming link and the smallest message latency into any member. A plan's stage (part
  layout, distinct devices) maps to the merged type order of its devices, which uses each type
  at most as often as it has devices and whose floor is no larger. Part layouts (cut vectors)
  do not depend on the devices chosen (``milp_planner.space.cuts``), so every option of the
  space is priced by some merged option. For latency a stage also lasts at least the k-th
  smallest, over the devices, of the least compute of any of its k parts there (the k parts
  sit on k distinct devices), which merging would otherwise forget.

- *Weighted period floors* (``formulations.relaxation``): for the period the backward pass is
  run again with device weights ``w`` (summing to 1), each part priced at the least weight of
  its (merged) type. A plan's stage on devices ``d_1..d_k`` maps to the merged order whose
  floor prices part j at most at ``w_(d_j) x`` (its least relaxed load), so the weighted floor
  of the plan is at most ``sum_d w_d load_d <= max_d load_d``, its period. ``lower`` is the
  best of these passes (``coarse_lower`` returns it).

- *Threshold floors* (``formulations.threshold``): a part's relaxed load here (its type's least
  compute, the least it receives over its type's least links) is at most its load on whichever
  member the plan uses, so the filter leaves every option a plan of period ``<= T`` takes.

- *Link groups* (``blocks``, ``formulations.link_groups``): the newest tensor's widened layouts
  record which regions one node holds. A part claims the largest widened share of the block its
  own node holds (or none), receives at most the block's other shares over its fastest link
  from inside its node and the rest of what it needs over its fastest link from another node
  (each its merged type's least); the least over the choices. Widened shares are at least the
  true ones, so the part's true in-node bytes are at most that sum.

*Refinement* (``refined_coarse_bounds``, latency and energy in the rounds): the grid trades the
bound for speed, and not monotonically (finer is usually higher, not always: merged types
depend on the layouts' count). After the default grid the regions as they are, then a grid of
8, are tried while time allows and until one raises the bound; then, with link groups, the
grid kept with blocks (about 3x the default pass) in the time left; the highest is kept.

The coarse bounds only bound (``bound_source`` ``coarse``); they do not drive the bounded
enumeration, whose pruning needs the exact states' classes.

>>> from formulations.coarse import coarse_bounds                    # doctest: +SKIP
>>> coarse_bounds(instance, "latency").to_go[0].min()                 # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from formulations.budget import MemoryBudgetExceeded, release_memory
from milp_planner.cost.evaluator import Pricer, pricer
from milp_planner.instance import Instance
from milp_planner.space.cuts import whole_model_time

from formulations.link_groups import node_ids
from formulations.options import SpaceTooLarge, StageGroup, _layouts
from formulations.relaxation import (WEIGHT_PASSES, Coarsening, LayoutBounds, _check, _incoming_links,
                                     _layout_bounds, _source_links, _type_least)
from formulations.symmetry import DeviceTypes, device_types, order_count, type_orders

#: most stage options (part layouts x orders of merged types) per layer range
COARSE_OPTIONS = 20_000
#: most classes at a boundary before its reads are free
COARSE_CLASSES = 2048
#: cells per axis of the grid the newest tensor's regions are widened to
COARSE_GRID = 4

#: the grids ``refined_coarse_bounds`` tries after the default one while time allows, each only
#: while no earlier refinement raised the bound: the regions as they are, then 8 cells per axis
#: (neither is always the higher: docs/exact.md, "The coarse relaxation", measured)
REFINE_GRIDS: tuple[int | None, ...] = (None, 8)
#: a refinement pass is not started with less time left than this many times the default pass took
REFINE_MARGIN = 1.0

_MEMO: list = []  # [(key, the objects the key names by id, LayoutBounds)], most recent last


def coarse_bounds(instance: Instance, objective: str, pr: Pricer | None = None,
                  max_options: int = COARSE_OPTIONS, max_classes: int = COARSE_CLASSES,
                  deadline: Deadline = NEVER, symmetry: bool = True,
                  grid: int | None = COARSE_GRID, weight_passes: int | None = None,
                  blocks: bool = False) -> LayoutBounds:
    """The coarse relaxation's cost-to-go bounds for ``objective`` (see the module): a
    ``LayoutBounds`` whose ``to_go[0].min()`` is a lower bound on every plan of the space.

    Raises ``TimeoutError`` past ``deadline`` and
    ``SpaceTooLarge`` when one merged type per device count still exceeds ``max_options``.
    ``weight_passes``: for the period, the most weighted passes that raise ``lower`` (default
    ``relaxation.WEIGHT_PASSES``; 0: the uniform weights only). ``blocks``: with link groups
    (``Device.node``), the newest tensor's layouts record which regions one node holds
    (``formulations.link_groups``)."""
    devs = instance.devices
    passes = WEIGHT_PASSES if weight_passes is None else weight_passes
    key = (objective, max_options, max_classes, grid, blocks, symmetry, passes, id(instance.graph), id(instance.network),
           instance.search, instance.dtype_bytes, tuple((d.name, id(d.compute), id(d.power), d.node) for d in devs))
    for i, (k, _, lb) in enumerate(_MEMO):
        if k == key:
            _MEMO.append(_MEMO.pop(i))
            return lb
    pr = pr or pricer(instance)
    layouts = _StageLayouts(instance, deadline)
    types = merged_types(instance, layouts, max_options, symmetry)
    base = device_types(instance, symmetry)
    if types.orbits == base.orbits:
        coarsening = Coarsening(main_only=True, max_classes=max_classes, types=types, grid=grid, blocks=blocks)
    else:
        groups = _MergedGroups(instance, pr, layouts, types, deadline)
        coarsening = Coarsening(main_only=True, max_classes=max_classes, types=types, grid=grid,
                                groups=groups, links=_merged_links(instance, types), time_floor=groups.time_floor,
                                weighted_compute=groups.weighted_compute, blocks=blocks)
    lb = _layout_bounds(instance, objective, pr, max_options, deadline, symmetry, coarse=coarsening, passes=passes)
    _MEMO.append((key, (instance.graph, instance.network, tuple((d.compute, d.power) for d in devs)), lb))
    del _MEMO[:-2]
    return lb


class RefinedCoarse(NamedTuple):
    """The best coarse bounds of several grids (``refined_coarse_bounds``)."""

    bounds: LayoutBounds  # the pass with the highest ``lower``
    grid: int | None  # its grid (None: the regions as they are)
    passes: list[dict]  # every pass tried: grid, blocks, lower (None: out of time), seconds
    blocks: bool = False  # its layouts record link-group blocks

    def info(self) -> dict:
        """For ``PlanResult.info["coarse"]``."""
        return {"grid": "exact" if self.grid is None else self.grid, "blocks": self.blocks,
                "lower": float(self.bounds.lower), "passes": self.passes}


def refined_coarse_bounds(instance: Instance, objective: str, deadline: Deadline = NEVER,
                          symmetry: bool = True, refine_by: Deadline = NEVER) -> RefinedCoarse:
    """``coarse_bounds`` with the default grid, then with each grid of ``REFINE_GRIDS`` until
    ``refine_by`` (at most ``deadline``) or
    until one raises the bound, then (with link groups) the grid kept with blocks in the time
    left, keeping the bounds of the highest ``lower``. Every grid's bound
    is a proof (see the module: widening regions only lowers a receive, and regions as they are
    need no widening), so the best is too. The first pass raises ``TimeoutError`` past ``deadline``; a refinement pass
    that would not fit (less than ``REFINE_MARGIN`` times the first pass's time left) is not
    started, and one that runs out of time is dropped.

    >>> refined_coarse_bounds(instance, "latency", deadline=Deadline.after(30)).info()  # doctest: +SKIP
    {'grid': 'exact', 'lower': 0.0595..., 'passes': [...]}
    """
    t0 = time.perf_counter()
    best = coarse_bounds(instance, objective, deadline=deadline, symmetry=symmetry)
    first_s = time.perf_counter() - t0
    grid: int | None = COARSE_GRID
    passes = [{"grid": COARSE_GRID, "blocks": False, "lower": float(best.lower), "seconds": round(first_s, 3)}]
    stop = min(refine_by, deadline)
    raised, blocked = False, False
    for g in REFINE_GRIDS:
        if raised:
            break
        lb = coarse_pass(instance, objective, stop, symmetry, g, False, first_s, passes)
        if lb is None:
            break
        if lb.lower > best.lower:
            best, grid, raised = lb, g, True
    if node_ids(instance) is not None:  # link groups: the kept grid with blocks, in the time left
        lb = coarse_pass(instance, objective, stop, symmetry, grid, True, first_s, passes)
        if lb is not None and lb.lower > best.lower:
            best, blocked = lb, True
    return RefinedCoarse(best, grid, passes, blocked)


def coarse_pass(instance: Instance, objective: str, stop: Deadline, symmetry: bool, grid: int | None,
                blocks: bool, first_s: float, passes: list) -> LayoutBounds | None:
    """One pass of the coarse relaxation (a refinement of ``refined_coarse_bounds``, or the
    pass with blocks of ``rounds._blocked_lower``), recorded in ``passes``; None when it would
    not fit before ``stop`` (less than ``REFINE_MARGIN * first_s`` left; not recorded) or ran
    out of time, size or memory."""
    started = time.perf_counter()
    if stop.left() < REFINE_MARGIN * first_s:
        return None
    lb = None
    try:
        lb = coarse_bounds(instance, objective, deadline=stop, symmetry=symmetry, grid=grid, blocks=blocks)
    except (TimeoutError, SpaceTooLarge, MemoryBudgetExceeded) as err:
        if isinstance(err, MemoryBudgetExceeded):
            err.__traceback__ = None  # let the pass's tables go (formulations.budget)
            release_memory()
    passes.append({"grid": "exact" if grid is None else grid, "blocks": blocks,
                   "lower": None if lb is None else float(lb.lower),
                   "seconds": round(time.perf_counter() - started, 3)})
    return lb


def coarse_lower(instance: Instance, objective: str, deadline: Deadline = NEVER,
                 symmetry: bool = True) -> float:
    """The coarse relaxation's lower bound on every plan of the space (``LayoutBounds.lower``:
    for the period the best of its weighted passes)."""
    return float(coarse_bounds(instance, objective, deadline=deadline, symmetry=symmetry).lower)


class _StageLayouts:
    """The part layouts (axis, ranges) of every stage, listed once."""

    def __init__(self, instance: Instance, deadline: Deadline):
        self.instance = instance
        self.deadline = deadline
        self._memo: dict = {}

    def __call__(self, b: int, e: int) -> list:
        hit = self._memo.get((b, e))
        if hit is None:
            _check(self.deadline)
            hit = self._memo[(b, e)] = list(_layouts(self.instance, b, e, self.deadline))
        return hit

    def part_counts(self) -> list[dict[int, int]]:
        """Per stage: how many of its layouts have k parts, for each k."""
        inst = self.instance
        n = len(inst.graph.layers)
        fl = max(1, inst.search.fusion_limit)
        per_stage: list[dict[int, int]] = []
        for b in range(n):
            for e in range(b, min(n, b + fl)):
                counts: dict[int, int] = {}
                for _, ranges in self(b, e):
                    counts[len(ranges)] = counts.get(len(ranges), 0) + 1
                per_stage.append(counts)
        return per_stage


def _options(types: DeviceTypes, per_stage: list[dict[int, int]]) -> int:
    per_k: dict[int, int] = {}
    return max((sum(c * per_k.setdefault(k, order_count(types, k)) for k, c in counts.items())
                for counts in per_stage), default=0)


def _types_of(orbits: list[tuple[int, ...]], n_dev: int) -> DeviceTypes:
    orbits = tuple(tuple(sorted(o)) for o in sorted(orbits, key=min))
    orbit = [0] * n_dev
    where = [(0, 0, 0)] * n_dev
    for i, members in enumerate(orbits):
        for j, d in enumerate(members):
            orbit[d] = i
            where[d] = (i, j, 0)
    units = tuple(tuple((d,) for d in members) for members in orbits)
    return DeviceTypes(units, tuple(where), tuple(orbit), orbits)


def merged_types(instance: Instance, layouts: _StageLayouts, max_options: int, symmetry: bool = True) -> DeviceTypes:
    """The device types of the instance when its stage options fit ``max_options``; else the
    most types (contiguous runs of the devices sorted by their whole-model time, of sizes as
    equal as can be) whose options fit. Raises ``SpaceTooLarge`` when even one type does not."""
    base = device_types(instance, symmetry)
    per_stage = layouts.part_counts()
    if _options(base, per_stage) <= max_options:
        return base
    n_dev = len(instance.devices)
    order = sorted(range(n_dev), key=lambda d: (float(whole_model_time(instance, d, exact=False)), d))
    for t in range(min(len(base.orbits), n_dev) - 1, 0, -1):
        bounds = [round(i * n_dev / t) for i in range(t + 1)]
        types = _types_of([tuple(order[bounds[i]:bounds[i + 1]]) for i in range(t)], n_dev)
        if _options(types, per_stage) <= max_options:
            return types
    raise SpaceTooLarge(f"{instance.name}: the coarse relaxation has more than {max_options:,} options in one "
                        "stage even with every device merged; reduce search.splits or max_parts")


def _merged_links(instance: Instance, types: DeviceTypes) -> tuple:
    """(compute W, receive W, s/byte and s/message in, from the source) per device, each its
    type's least."""
    pc = np.array([float(d.power.compute_w) for d in instance.devices])
    rx = np.array([float(d.power.rx_w) for d in instance.devices])
    inv_bw, lat = _incoming_links(instance)
    src_inv_bw, src_lat = _source_links(instance)
    return tuple(_type_least(arr, types) for arr in (pc, rx, inv_bw, lat, src_inv_bw, src_lat))


class _MergedGroups:
    """``stage_groups`` for merged device types: one device order per sequence of types, each
    part at the least compute time of its type's devices."""

    def __init__(self, instance: Instance, pr: Pricer, layouts: _StageLayouts, types: DeviceTypes,
                 deadline: Deadline):
        self.instance, self.pr, self.layouts, self.types, self.deadline = instance, pr, layouts, types, deadline
        self.orders: dict[int, tuple] = {}
        self._floors: dict[int, float] = {}  # id(group) -> its stage-time floor (the group is kept alive below)
        self._per_dev: dict[int, np.ndarray] = {}  # id(group) -> (devices, parts) compute of each part on each device
        self._alive: list = []
        self._layer: dict = {}  # (layer, fraction, axis) -> its time on every device

    def _compute(self, part) -> np.ndarray:
        """``pr.compute_time(d, part)`` of every device d, the same sums in the same order."""
        total = np.zeros(len(self.instance.devices))
        for lid, f in part.fraction.items():
            key = (lid, f.numerator, f.denominator, part.axis)  # (hashing a Fraction is slow)
            per = self._layer.get(key)
            if per is None:
                per = self._layer[key] = np.array([self.pr.layer_time(d, lid, f, part.axis)
                                                   for d in range(len(total))])
            total = total + per
        return total

    def time_floor(self, group: StageGroup) -> float:
        """A floor of the longest part's compute of ``group`` on any k distinct devices: the
        k-th smallest, over the devices, of the least compute of any of its parts there."""
        return self._floors[id(group)]

    def weighted_compute(self, group: StageGroup, w: np.ndarray, members: bool = False):
        """(options, parts): each part of ``group``'s type orders priced at the least, over the
        devices of its merged type, of ``w_d`` x its compute on d (at most the weighted compute
        on whichever member the plan uses). With ``members`` also (options, parts): the
        member that attains it and (options, parts) its compute there."""
        per_dev = self._per_dev[id(group)]
        pd = w[:, None] * per_dev  # (devices, parts)
        low = pd.copy()
        arg = np.repeat(np.arange(len(w))[:, None], pd.shape[1], axis=1)
        for mem in self.types.orbits:
            mem = list(mem)
            low[mem] = pd[mem].min(axis=0)
            arg[mem] = np.asarray(mem)[pd[mem].argmin(axis=0)]
        k = pd.shape[1]
        idx = (self.orders[k][1], np.arange(k)[None, :])
        if not members:
            return low[idx]
        who = arg[idx]
        return low[idx], who, per_dev[who, np.arange(k)[None, :]]

    def __call__(self, b: int, e: int) -> list[StageGroup]:
        pr, n_dev = self.pr, len(self.instance.devices)
        out = []
        parts: dict = {}  # (axis, range) -> (geometry, least compute per device, weights, computed, compute)
        for axis, ranges in self.layouts(b, e):
            _check(self.deadline)
            k = len(ranges)
            if k not in self.orders:
                perms = list(type_orders(self.types, k))
                self.orders[k] = (perms, np.array(perms, dtype=np.int64).reshape(len(perms), k))
            perms, idx = self.orders[k]
            cols = []
            for r in ranges:  # a part's geometry depends on its own range only
                hit = parts.get((axis, r))
                if hit is None:
                    geo = pr.geometry.parts(b, e, axis, [r])[0]
                    per_dev = self._compute(geo)
                    low = per_dev.copy()
                    for members in self.types.orbits:
                        low[list(members)] = per_dev[list(members)].min()
                    hit = parts[(axis, r)] = (geo, low, sum(pr.weight_bytes(geo, axis).values()),
                                              pr.computed_bytes(geo), per_dev)
                cols.append(hit)
            low = np.array([c[1] for c in cols]).T  # (devices, parts); np.array: np.stack's checks cost more here
            comp = low[idx, np.arange(k)[None, :]]
            grp = StageGroup(b, e, axis, ranges, [c[0] for c in cols], perms, comp,
                             tuple(c[2] for c in cols), tuple(c[3] for c in cols))
            per_dev = np.array([c[4] for c in cols]).T
            # the k parts sit on k distinct devices: one of them is no faster than the k-th
            least = np.sort(per_dev.min(axis=1))
            self._floors[id(grp)] = float(least[k - 1]) * (1 - 1e-12)
            self._per_dev[id(grp)] = per_dev
            self._alive.append(grp)
            out.append(grp)
        return out

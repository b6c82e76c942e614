"""Lower bounds on what is left of a plan, from a relaxation of the tensor layouts.

The exact state at a stage boundary is who owns which rows (or channels) of every live
tensor. The relaxation keeps its *layout class*: the regions of every live tensor (the last
stage's outputs and the open residual skips alike), without the devices that own them; the
graph's inputs are left out (a first stage receives what it reads of them from the source;
later ones read them free). From a class, a stage option's cost is bounded below by letting
each receiving device claim, for each tensor it reads, the one region that saves it the most
(as if it owned it), receiving the rest over its fastest incoming link with the smallest
message latency (a layout's regions belong to distinct devices, so from three regions on
they are priced over its links ranked fastest first: ``_FloorCost._received_ranked``).
Every exact state of the class costs at least that much, so a backward pass
over classes gives, for every boundary and class, a lower bound on the cost to go
(``LayoutBounds.to_go``; ``LayoutBounds.after`` reads it for the options taken from an exact
state). ``formulations.stagegraph.build_stage_graph`` uses it to enumerate only the stage arcs
of plans that can be no worse than an upper bound.

Link groups (``formulations.link_groups``): when devices share a ``node`` (a board's CPU and
GPU), a layout of a tensor read by the next layer alone also records which of its regions one
node holds (its blocks), and a device receives its own node's block over its in-node links and
the rest over its links from other nodes (``_FloorCost._received_grouped``); a type-level
option exits to one class per partition of its parts into nodes (``StageTable.heads``).

Carrying the skips is what makes residual networks tractable: a residual Add pays for a skip
laid out differently from what it reads (ResNet50 on four devices with equal and capacity
splits: 138.4 ms instead of 131.1 ms, against an optimum of 145.9 ms). A class holds a layout
per live tensor, so inside a residual block there are (main layouts) x (skip layouts) classes;
their floors are computed pairwise in numpy.

Options that differ only by exchanging interchangeable devices (``formulations.symmetry``)
have equal floors here (compute, power and the ranked incoming links are equal within an
orbit), so the tables hold one device order per sequence of orbits: the bounds are the same
as over every device order, and ``build_stage_graph`` expands the orders a node allows.

The bounds are additive floors of the objective (``stagegraph.arc_floor``): the stage time
(latency), its energy, the mean device load (period) or the mean weight bytes (memory).
``to_go`` holds them at every boundary: the bounded enumeration adds them to the same
additive floors of a plan's prefix. ``LayoutBounds.lower`` is the bound on every plan: the
least ``to_go[0]``, and for the period the best of the weighted passes below.

Weighted period floors. A plan's period is ``max_d load_d`` (``load_d``: device d's compute
and receive seconds over the plan, ``milp_planner.cost.evaluator``). For weights ``w_d >= 0``
with ``sum_d w_d = 1``, ``max_d load_d >= sum_d w_d load_d``, and the right side is a sum over
the plan's stages of ``sum_j w_(device of part j) (compute_j + receive_j)``: an additive floor,
which the relaxation bounds exactly as it bounds the mean load (the uniform ``w_d = 1 / n``),
with each part's relaxed load (its compute, the least receive from its class) priced at its
device's weight. So every ``w`` gives a proven ``to_go[0]``; the uniform weights are the worst
choice on heterogeneous devices (the cheapest mean load is everything on the fastest device:
that plan's period / n). Three details keep it a proof:

- a part is priced at the least weight of its device's orbit (``_priced_weights``), after
  ``w`` is normalised to sum 1; the priced weights are equal within an orbit, so the tables'
  one device order per sequence of orbits stays exact, and they are nowhere above ``w``, so
  the floor stays below ``sum_d w_d load_d``. In the coarse relaxation the orbits are the
  merged types: a part's receive seconds (already its type's least) are priced at its type's
  least weight, and its compute at the least over the type's members of ``w_d x`` its compute
  on d (``Coarsening.weighted_compute``), both at most what the device the plan uses pays;
- ``sum_d w_d load_d <= max_d load_d`` holds for a whole plan, not for its suffix next to a
  prefix priced otherwise: the weighted tables only give ``lower``; ``to_go`` (what the
  enumeration prunes with next to the prefix's mean load) stays the uniform one.

What it can reach: a plan that runs the whole model on one device d has no transfers but the
source's and the gather, so for any ``w`` the bound is at most ``min_d w_d x`` (that plan's
load), whose best over ``w`` is the fluid bound of the whole model (``1 / sum_d 1 / T_d``).
The weighted bound lifts the relaxation to about the fluid bound plus the communication no
plan avoids; it cannot close a gap that comes from the max (stages that cannot be balanced).

The weights (``_weighted_period``): the fluid bound's (``milp_planner.cost.floors.
fluid_weights``, the LP of the work spread over the devices), then multiplicative steps from
the best weights so far towards the devices the relaxed plan of least weighted load loads most
(a supergradient of the concave dual ``w -> min over plans of w . load``), the step halved
after a pass that does not improve; the best bound is kept (``LayoutBounds.passes`` records
them). A pass costs the stage floors and the backward pass again (not the classes); at most
``WEIGHT_PASSES``, within ``WEIGHT_SHARE`` times the build and before the deadline. With every
device interchangeable (one orbit) the uniform weights are optimal (the dual is concave and
symmetric) and no pass runs. Memory has no weighted passes: its floor counts a stage's weight
bytes whatever devices hold them, so a relaxed plan can put them all on the device of least
weight, ``min_d w_d x total <= total / n``: no weights beat the uniform ones.

Threshold floors (``_FloorCost.threshold``, used by ``formulations.threshold``): with a
threshold ``T`` set, an option with a part whose unweighted relaxed load (its compute, plus the
least it receives from the class) exceeds ``T`` gets an infinite floor; the weighted bound then
holds for the plans of period ``<= T`` only (a device's load over a plan is at least its load in
one stage), and one above ``T`` proves that no plan has period ``<= T``. With a threshold and
weights, the dominance pruning compares the unweighted compute and receive seconds as well.

>>> from formulations.relaxation import layout_bounds               # doctest: +SKIP
>>> lb = layout_bounds(instance, "latency")                         # doctest: +SKIP
>>> lb.to_go[5]          # per class at boundary 5: a bound on the rest of the plan  # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from milp_planner.cost.batch import box_cells
from milp_planner.cost.evaluator import Pricer, pricer
from milp_planner.model.graph import last_readers
from milp_planner.space.geometry import tensor_grid
from milp_planner.instance import Instance

from formulations.budget import check_memory
from formulations.link_groups import NO_LINK, grouped_links, node_ids, node_patterns
from formulations.options import SpaceTooLarge, StageGroup, stage_groups
from formulations.symmetry import DeviceTypes, device_types


@dataclass
class StageTable:
    """The options of stage ``first..last`` flattened: one column per (group, devices), and
    how the relaxation's classes pass through the stage."""

    groups: list[StageGroup]
    group: np.ndarray  # option -> index in groups
    perm: np.ndarray  # option -> index in that group's perms
    heads: np.ndarray  # (options, patterns): indices of its exit layouts in ``exits`` (one per node pattern)
    exits: list[tuple] = field(default_factory=list)  # layouts of the live tensors the stage writes
    carry_of: np.ndarray | None = None  # class at first -> index of what it carries past last
    merged: np.ndarray | None = None  # (exits, carries) -> class index at boundary last + 1
    read_of: np.ndarray | None = None  # class at first -> index of the layouts the stage reads
    best: np.ndarray | None = None  # (read layouts, exits): least floor of an option with that exit
    time_floor: np.ndarray | None = None  # per group: a floor of its stage time (coarse relaxation), or None
    read_keys: list | None = None  # the read layouts ``best``'s rows are priced from
    first: bool = False  # the stage starts at the source's state (it receives the graph's inputs)
    free: bool = False  # too many layouts to price: every row read free (coarse relaxation)
    dead: bool = False  # no layout fits the memory caps (``drop_overflow``): infinite floors
    _flat: tuple | None = None
    _widths: np.ndarray | None = None

    @property
    def widths(self) -> np.ndarray:
        """Per group: its number of parts."""
        if self._widths is None:
            self._widths = np.array([len(grp.geos) for grp in self.groups], dtype=np.int64)
        return self._widths

    def flat(self):
        """(devices, comp, mask, needs) of every option, parts padded to the widest group:
        devices and comp are (options, parts), mask is 1 for real parts, needs maps each tensor
        the stage reads to a (groups, parts, 4) array of needed boxes (r0, r1, c0, c1)."""
        if self._flat is None:
            kmax = max(len(grp.geos) for grp in self.groups)
            O = len(self.group)
            devices = np.zeros((O, kmax), dtype=np.int64)
            comp = np.zeros((O, kmax))
            mask = np.zeros((O, kmax))
            group, perm = np.asarray(self.group), np.asarray(self.perm)
            sizes = np.array([len(grp.perms) for grp in self.groups], dtype=np.int64)
            ks = np.array([len(grp.geos) for grp in self.groups], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)])
            natural = O == int(starts[-1]) and (group == np.repeat(np.arange(len(self.groups)), sizes)).all() \
                and (perm == np.arange(O) - np.repeat(starts[:-1], sizes)).all()
            orders: dict = {}  # the groups of a stage share their device-order lists

            def order_array(grp, k):
                arr = orders.get(id(grp.perms))
                if arr is None:
                    arr = orders[id(grp.perms)] = np.asarray(grp.perms, dtype=np.int64).reshape(-1, k)
                return arr

            if natural:  # every group lists all its orders in turn (as ``_layout_bounds`` builds them)
                k_opt = np.repeat(ks, sizes)
                for k in np.unique(ks):
                    k = int(k)
                    rows = np.flatnonzero(k_opt == k)
                    members = [grp for grp, kk in zip(self.groups, ks) if kk == k and len(grp.perms)]
                    if not members:
                        continue
                    devices[rows, :k] = np.concatenate([order_array(grp, k) for grp in members])
                    # layer compute only: a device's stage_overhead_s (price_stage adds it) is left
                    # out, which only lowers these prices, so the relaxation stays a lower bound
                    comp[rows, :k] = np.concatenate([np.asarray(grp.comp).reshape(-1, k) for grp in members])
                    mask[rows, :k] = 1.0
            else:
                for gi, grp in enumerate(self.groups):
                    rows = np.flatnonzero(group == gi)
                    k = len(grp.geos)
                    sel = perm[rows]
                    if not len(sel):
                        continue
                    devices[rows, :k] = order_array(grp, k)[sel]
                    comp[rows, :k] = np.asarray(grp.comp)[sel]
                    mask[rows, :k] = 1.0
            boxes: dict[str, list] = {}  # tensor -> [(group, part, r0, r1, c0, c1)], set at once below
            for gi, grp in enumerate(self.groups):
                for j, geo in enumerate(grp.geos):
                    for t, reg in geo.needs.items():
                        lst = boxes.setdefault(t, [])
                        if not reg.empty:
                            lst.append((gi, j, reg.rows[0], reg.rows[1], reg.chans[0], reg.chans[1]))
            needs = {}
            for t, lst in boxes.items():
                arr = needs[t] = np.zeros((len(self.groups), kmax, 4), dtype=np.int64)
                if lst:
                    a = np.array(lst, dtype=np.int64)
                    arr[a[:, 0], a[:, 1]] = a[:, 2:]
            self._flat = (devices, comp, mask, needs)
        return self._flat


@dataclass
class LayoutBounds:
    objective: str
    n_layers: int
    classes: list[dict] = field(default_factory=list)  # per boundary: class key -> index
    tables: dict = field(default_factory=dict)  # (first, last) -> StageTable
    to_go: list[np.ndarray] = field(default_factory=list)  # per boundary: bound per class
    layouts: dict = field(default_factory=dict)  # tensor -> {regions: layout id}; keys hold the ids
    build_time_s: float = 0.0
    misses: int = 0  # exact states whose class the relaxation did not reach (bounded by 0)
    types: DeviceTypes | None = None  # the device types its tables list orders of (None: every order)
    # ``drop_overflow``: the largest memory cap the tables were filtered with (None: not
    # filtered) and the range of caps that filter the same groups out (``overflow_cap``)
    overflow_cap: float | None = None
    overflow_range: tuple[float, float] = (0.0, float("inf"))
    lower: float = 0.0  # a lower bound on the objective of every plan (see ``weighted period floors``)
    weights: np.ndarray | None = None  # period: the device weights of ``lower`` (None: uniform)
    # period: ``to_go`` under ``weights`` (per boundary, per class; empty with uniform weights):
    # a bound on ``sum_d w_d x`` the suffix's load on d, ``w`` normalised to sum 1
    weighted_to_go: list = field(default_factory=list)
    passes: list = field(default_factory=list)  # period: a ``WeightPass`` per weighted pass
    _skip: frozenset = frozenset()
    _cost: object = None  # the floors' pricing (weighted passes after the build)
    _collapsed: list = field(default_factory=list)  # boundaries whose classes were priced as the empty one
    _coarse: bool = False
    node_of: np.ndarray | None = None  # per device its link group (``formulations.link_groups``), or None
    blocks_off: str = ""  # why the layouts have no blocks though the instance has link groups
    blocked: frozenset = frozenset()  # with ``node_of``: the tensors whose layouts record blocks

    def layout_id(self, t: str, regions, nodes=None) -> int:
        """The id of tensor ``t``'s layout ``regions`` (any order), registered if new; with
        link groups (``node_of``) also the node of each region's owner (``nodes``)."""
        lay = self.layouts.setdefault(t, {})
        key = _canon_blocks(regions, nodes) if t in self.blocked else _canon(regions)
        return lay.setdefault(key, len(lay))

    def state_class(self, owners: dict) -> tuple | None:
        """The class key of an exact state (tensor -> ((device, region), ...)): each live
        tensor's layout, devices dropped; the graph's inputs are left out (read free).
        None when the relaxation never reached that layout."""
        key = []
        for t, lst in owners.items():
            if t in self._skip:
                continue
            if t in self.blocked:
                regs = _canon_blocks([r for _, r in lst], [self.node_of[d] for d, _ in lst])
            else:
                regs = _canon(r for _, r in lst)
            if not regs:
                continue
            lid = self.layouts.get(t, {}).get(regs)
            if lid is None:
                return None
            key.append((t, lid))
        return tuple(sorted(key))

    def after(self, first: int, last: int, owners: dict) -> np.ndarray:
        """Per option of stage first..last taken from the exact state ``owners``: a bound on
        what is left of the plan after it."""
        t = self.tables[(first, last)]
        key = self.state_class(owners)
        ci = None if key is None else self.classes[first].get(key)
        if ci is None:  # cannot happen for a state the enumeration reached; 0 is always safe
            self.misses += 1
            return np.zeros(len(t.heads))
        return rest_after(self.to_go, t, last, ci)


def rest_after(to_go: list, tab: StageTable, last: int, ci: int) -> np.ndarray:
    """Per option of ``tab`` (ending at ``last``) taken from a state of class ``ci``: the least
    of ``to_go`` (``LayoutBounds.to_go`` or a weighted one) over the classes it may exit to."""
    return to_go[last + 1][tab.merged[tab.heads, tab.carry_of[ci]]].min(axis=1)


def _canon(regions) -> tuple:
    return tuple(sorted((r for r in regions if not r.empty), key=lambda r: (r.rows, r.chans)))


def _canon_blocks(regions, nodes) -> tuple:
    """A layout with link groups: its regions in ``_canon``'s order and the blocks they fall
    into (``link_groups.canonical_labels`` of their owners' nodes); () when empty."""
    pairs = sorted(((r, int(x)) for r, x in zip(regions, nodes) if not r.empty),
                   key=lambda p: (p[0].rows, p[0].chans))
    if not pairs:
        return ()
    first: dict[int, int] = {}  # ``canonical_labels`` of one short row, in Python
    labels = tuple(first.setdefault(x, len(first)) for _, x in pairs)
    return tuple(r for r, _ in pairs), labels


#: most classes at a boundary of the full relaxation with link-group blocks; beyond, the
#: layouts drop their blocks (inside residual blocks the classes are pairs of layouts, and the
#: blocks multiply both; the coarse relaxation reads free past its own ``max_classes``)
MAX_BLOCK_CLASSES = 4096


class _TooManyBlocks(Exception):
    """The layouts with blocks make too many classes (``MAX_BLOCK_CLASSES``)."""


def _node_patterns(instance: Instance, types: DeviceTypes) -> dict | None:
    """Per number of parts, ``link_groups.node_patterns`` of the instance; None without link
    groups, or when some number of parts has too many device orders to list them (the
    layouts then have no blocks)."""
    node_of = node_ids(instance)
    if node_of is None:
        return None
    orbit_of = np.asarray(types.orbit, dtype=np.int64)
    out = {}
    for k in range(1, min(len(node_of), max(1, instance.search.max_parts)) + 1):
        pats = node_patterns(orbit_of, node_of, k)
        if pats is None:
            return None
        out[k] = {seq: [tuple(int(x) for x in row) for row in rows] for seq, rows in pats.items()}
    return out


def _exit_heads(lb: LayoutBounds, grp: StageGroup, tensors: list[str], patterns: dict, exits: dict,
                widen: Callable | None = None) -> np.ndarray:
    """(options, patterns): the exit ids (in ``exits``, extended in place) of each option of
    ``grp``, whose exit class holds the layouts of ``tensors`` (each region ``widen(t, region)``
    if given), under every partition of its parts into nodes its device order allows (repeated
    to the widest). An option at the type level may realise several; its bound after is the
    least over them."""
    k = len(grp.geos)
    orbit_of = np.asarray(lb.types.orbit, dtype=np.int64)
    seqs = orbit_of[np.asarray(grp.perms, dtype=np.int64).reshape(-1, k)]
    table = patterns[k]
    of_pattern: dict[tuple, int] = {}
    per_seq: dict[tuple, list[int]] = {}
    rows: list[list[int]] = []
    for seq in map(tuple, seqs.tolist()):
        ids = per_seq.get(seq)
        if ids is None:
            ids = []
            for pat in table[seq]:
                xi = of_pattern.get(pat)
                if xi is None:
                    xc = tuple((t, lb.layout_id(t, [geo.owns[t] if widen is None else widen(t, geo.owns[t])
                                                    for geo in grp.geos if t in geo.owns],
                                                [pat[j] for j, geo in enumerate(grp.geos) if t in geo.owns]))
                               for t in tensors)
                    xi = of_pattern[pat] = exits.setdefault(xc, len(exits))
                ids.append(xi)
            per_seq[seq] = ids = sorted(set(ids))
        rows.append(ids)
    width = max((len(r) for r in rows), default=1)
    return np.array([r + r[:1] * (width - len(r)) for r in rows], dtype=np.int64).reshape(len(rows), width)


def _padded(blocks: list[np.ndarray]) -> np.ndarray:
    """Row blocks of exit ids stacked, each row repeated from its first column to the widest."""
    width = max((b.shape[1] for b in blocks), default=1)
    out = [np.concatenate([b, np.repeat(b[:, :1], width - b.shape[1], axis=1)], axis=1) for b in blocks]
    return np.concatenate(out) if out else np.zeros((0, width), dtype=np.int64)


def exit_class(lb: LayoutBounds, group: StageGroup, last_read: dict[str, int]) -> tuple:
    """The class key of the live tensors a group writes: (tensor, layout id) pairs."""
    e = group.last
    tensors = sorted({t for geo in group.geos for t in geo.owns if last_read.get(t, -1) > e})
    return tuple((t, lb.layout_id(t, [geo.owns[t] for geo in group.geos if t in geo.owns])) for t in tensors)


_MEMO: list = []  # [(key, the objects the key names by id, LayoutBounds)], most recent last
_MEMO_SIZE = 2


def overflow_cap(instance: Instance) -> float | None:
    """The largest memory cap of the instance's devices when every device has one and
    ``constraints.memory`` holds (a part that alone needs more fits no device), else None."""
    if not instance.constraints.memory or any(d.memory_bytes is None for d in instance.devices):
        return None
    return float(max(d.memory_bytes for d in instance.devices))


def part_need(grp: StageGroup, pr: Pricer | None = None) -> int:
    """The least memory a device holding any one part of ``grp`` needs: that part's weight bytes
    plus the bytes it computes in the stage and, with ``pr``, the bytes of every region it reads
    (all in the evaluator's memory of the device: its working set during the stage holds what it
    reads, owned or received, and what it computes; ``evaluator.price_stage``).

    The reads matter at tight caps: VGG-19's FC1 in four channel parts computes 4 KB but reads
    the whole 100 KB input beside its 102.76 MB of weights, so under a cap between the two
    needs every such layout overflows on every device, and without the reads the relaxation
    kept them (its rounds then enumerated plans whose arcs all overflowed)."""
    if pr is None:
        return max(w + c for w, c in zip(grp.weights, grp.computed))
    reads = [sum(r.cells * pr.unit_bytes(t) for t, r in geo.needs.items()) for geo in grp.geos]
    return max(w + c + r for w, c, r in zip(grp.weights, grp.computed, reads))


def layout_bounds(instance: Instance, objective: str, pr: Pricer | None = None,
                  max_options: int = 200_000, deadline: Deadline = NEVER,
                  symmetry: bool = True, drop_overflow: bool = False,
                  weight_passes: int | None = None) -> LayoutBounds:
    """The relaxation's classes and cost-to-go bounds for ``objective``.

    With ``symmetry`` the tables list one device order per sequence of device types
    (``LayoutBounds.types``); without it, every device order. Raises ``SpaceTooLarge`` when
    one stage has more than ``max_options`` options and ``TimeoutError`` past ``deadline``. ``weight_passes``: for the period, the most weighted passes
    that raise ``LayoutBounds.lower`` (default ``WEIGHT_PASSES``; 0: the uniform weights only).

    The bounds depend on the graph, the devices' cost models and power, the network and the
    search space, not on the caps: the last two are remembered, so the ε-steps of a Pareto
    front (the same instance under other caps) compute them once. (Caps that make devices
    equal can only merge device types, so remembered types stay a valid, finer partition.)

    ``drop_overflow`` (for graphs that leave out the arcs overflowing a memory cap): the stage
    layouts with a part that fits no device's cap (``part_need``: its weights, what it computes
    and what it reads) are left out of the tables;
    a stage with none left keeps its tables with infinite floors. The bounds then hold for the
    plans that meet the memory caps only, and rise when a cap forces a split (e.g. a large FC
    layer in several channel parts). They are remembered for the range of caps that leaves
    out the same layouts."""
    devs = instance.devices
    cap = overflow_cap(instance) if drop_overflow else None
    passes = WEIGHT_PASSES if weight_passes is None else weight_passes
    key = (objective, max_options, symmetry, passes, id(instance.graph), id(instance.network), instance.search,
           instance.dtype_bytes, tuple((d.name, id(d.compute), id(d.power), d.node) for d in devs),
           cap is not None)
    for i, (k, _, lb) in enumerate(_MEMO):
        if k == key and (cap is None or lb.overflow_range[0] <= cap < lb.overflow_range[1]):
            _MEMO.append(_MEMO.pop(i))
            return lb
    try:
        lb = _layout_bounds(instance, objective, pr, max_options, deadline, symmetry, overflow=cap, passes=passes)
    except _TooManyBlocks as why:  # the layouts without blocks (the bound of every instance without groups)
        lb = _layout_bounds(instance, objective, pr, max_options, deadline, symmetry, overflow=cap, passes=passes,
                            blocks=False)
        lb.blocks_off = str(why)
    # the objects named by id stay referenced, so their ids are not reused while remembered
    _MEMO.append((key, (instance.graph, instance.network, tuple((d.compute, d.power) for d in devs)), lb))
    del _MEMO[:-_MEMO_SIZE]
    return lb


@dataclass(frozen=True)
class Coarsening:
    """How the coarse relaxation (``formulations.coarse``) simplifies the full one; every
    simplification can only lower a floor, so its bounds stay proven.

    - ``main_only``: a class holds only the layout of the newest tensor (the output of the
      last layer before the boundary); every other live tensor is read free.
    - ``max_classes``: a boundary with more classes than this keeps none (its reads are free).
    - ``groups``: prices a stage's options as ``stage_groups`` does, for merged device types
      (each part at the least compute of its type's devices); ``None``: ``stage_groups``.
    - ``types``: the (possibly merged) device types the tables list orders of.
    - ``grid``: the newest tensor's regions are widened to a grid of this many cells per
      axis (fewer layouts); a part then receives at least what it needs minus the most one
      widened region holds of it, with no message latency (``None``: the regions as they are).
    - ``time_floor``: a group -> a floor of its longest part's compute over every device
      order (the merged types lose which devices are distinct), or ``None``.
    - ``links``: per device, (compute W, receive W, s/byte and s/message in, s/byte and
      s/message from the source) lowered to its type's least, or ``None`` for the devices' own.
    - ``weighted_compute``: (group, device weights) -> (options, parts) weighted compute of the
      merged type orders, each part at its type's least weight x compute over the members
      (weighted period floors), or ``None``: the part's weight x its compute.
    - ``blocks``: with link groups, the newest tensor's layouts record their blocks
      (``formulations.link_groups``; its links in and out of a node at its type's least).
    """

    main_only: bool = True
    max_classes: int = 4096
    groups: Callable | None = None
    types: DeviceTypes | None = None
    links: tuple | None = None
    time_floor: Callable | None = None
    grid: int | None = 8
    weighted_compute: Callable | None = None
    blocks: bool = False  # the newest tensor's layouts record link-group blocks


def _layout_bounds(instance: Instance, objective: str, pr: Pricer | None, max_options: int,
                   deadline: Deadline, symmetry: bool, coarse: Coarsening | None = None,
                   overflow: float | None = None, passes: int = 0, blocks: bool = True) -> LayoutBounds:
    t0 = time.perf_counter()
    pr = pr or pricer(instance)
    g = instance.graph
    n = len(g.layers)
    fl = max(1, instance.search.fusion_limit)
    last_read = last_readers(instance.graph)
    types = coarse.types if coarse is not None and coarse.types is not None else device_types(instance, symmetry)
    lb = LayoutBounds(objective, n, _skip=frozenset(g.inputs), types=types, overflow_cap=overflow)
    patterns = _node_patterns(instance, types) if blocks and (coarse is None or coarse.blocks) else None
    if patterns is not None:
        lb.node_of = node_ids(instance)
        # a tensor read only by the next layer: a skip's layouts would multiply the classes of
        # its whole block (pairs of layouts) by the blocks of both (the coarse classes hold
        # the newest tensor only)
        lb.blocked = frozenset(layer.output for layer in g.layers
                               if coarse is not None or last_read.get(layer.output, -1) == layer.id + 1)
    fits_up_to, overflows_from = 0.0, float("inf")  # the caps that filter the same layouts
    lb.classes = [dict() for _ in range(n + 1)]
    lb.classes[0][()] = 0  # the source's state is priced exactly; its class is empty
    cost = _floor_cost(instance, objective, lb.node_of, patterns, coarse, types)
    collapsed = [False] * (n + 1)  # boundaries whose classes were priced as the empty class

    for b in range(n):
        keys = list(lb.classes[b])
        if coarse is not None and len(keys) > coarse.max_classes:
            collapsed[b] = True  # every class at b bounded by the empty one: reads free
            keys = [()]
        for e in range(b, min(n, b + fl)):
            _check(deadline)
            if coarse is not None and coarse.groups is not None:
                groups = coarse.groups(b, e)
            else:
                groups = stage_groups(instance, pr, b, e, max_options, deadline, types=lb.types)
            dead = False  # no layout of the stage fits the memory caps
            if overflow is not None and coarse is None:
                needs = [part_need(grp, pr) for grp in groups]
                fits_up_to = max([fits_up_to] + [x for x in needs if x <= overflow])
                overflows_from = min([overflows_from] + [x for x in needs if x > overflow])
                kept = [grp for grp, x in zip(groups, needs) if x <= overflow]
                dead = not kept
                groups = kept or groups
            main = g.layers[e].output if coarse is not None and coarse.main_only else None
            widen = (lambda t, r: _widen(r, tensor_grid(g, t), coarse.grid)) if main and coarse.grid else None
            exits: dict[tuple, int] = {}
            heads = [_group_heads(lb, grp, e, last_read, patterns, main, widen, exits) for grp in groups]
            gidx = np.concatenate([np.full(len(grp.perms), gi) for gi, grp in enumerate(groups)])
            pidx = np.concatenate([np.arange(len(grp.perms)) for grp in groups])
            tab = StageTable(groups, gidx, pidx, _padded(heads), list(exits))
            if coarse is not None and coarse.time_floor is not None:
                tab.time_floor = np.array([coarse.time_floor(grp) for grp in groups], dtype=float)
            reads = {t for grp in groups for geo in grp.geos for t in geo.needs}
            live = {t for t, r in last_read.items() if r > e} if main is None else set()
            carries: dict[tuple, int] = {}
            read_keys: dict[tuple, int] = {}
            tab.carry_of = np.array([carries.setdefault(tuple(x for x in key if x[0] in live), len(carries))
                                     for key in _checked(keys, deadline)], dtype=np.int64)
            tab.read_of = np.array([read_keys.setdefault(tuple(x for x in key if x[0] in reads), len(read_keys))
                                    for key in _checked(keys, deadline)], dtype=np.int64)
            nxt = lb.classes[e + 1]
            tab.merged = _merge_classes(nxt, tab.exits, list(carries), deadline)
            if patterns is not None and coarse is None and len(nxt) > MAX_BLOCK_CLASSES:
                raise _TooManyBlocks(f"{len(nxt):,} classes with link-group blocks after layer {e} "
                                     f"(more than {MAX_BLOCK_CLASSES:,})")
            tab.read_keys, tab.first, tab.dead = list(read_keys), b == 0, dead
            tab.best = _table_floors(cost, lb, pr, tab, deadline, coarse is not None)
            lb.tables[(b, e)] = tab

    lb.to_go = _backward(lb, {k: tab.best for k, tab in lb.tables.items()}, collapsed, fl, deadline)
    lb.overflow_range = (fits_up_to, overflows_from)
    lb._cost, lb._collapsed, lb._coarse = cost, collapsed, coarse is not None
    lb.lower = float(lb.to_go[0].min())
    if objective == "period" and passes > 0:
        _weighted_period(lb, instance, cost, pr, collapsed, fl, deadline, passes, t0)
    lb.build_time_s = time.perf_counter() - t0
    return lb


def _floor_cost(instance: Instance, objective: str, node_of, patterns, coarse: Coarsening | None, types) -> "_FloorCost":
    """The stage floors' prices: the instance's links, or the coarse relaxation's merged types'."""
    cost = _FloorCost(instance, objective, node_of, max(patterns) if patterns else 0)
    cost.widened = coarse is not None and coarse.main_only and bool(coarse.grid)
    cost.weighted_compute = coarse.weighted_compute if coarse is not None else None
    if coarse is not None:
        cost.ranked = False  # (the coarse relaxation's merged types have no ranked links)
    if coarse is not None and coarse.links is not None:
        cost.pc, cost.rx, cost.inv_bw, cost.lat, cost.src_inv_bw, cost.src_lat = (
            np.asarray(a, dtype=float) for a in coarse.links)
        if cost.grouped is not None:  # each device's links in and out of its node, its merged type's least
            cost.grouped = tuple(_type_least(a, types) for a in cost.grouped)
    return cost


def _group_heads(lb: LayoutBounds, grp, e: int, last_read: dict, patterns, main, widen, exits: dict) -> np.ndarray:
    """(device orders of ``grp``, columns): the exit class ids of a stage ending at layer ``e``
    (new ones added to ``exits``); with link-group ``patterns`` one column per node pattern,
    else one. ``main``: the coarse relaxation's newest tensor (the only one its classes hold)."""
    if patterns is not None and main is None:
        tensors = sorted({t for geo in grp.geos for t in geo.owns if last_read.get(t, -1) > e})
        return _exit_heads(lb, grp, tensors, patterns, exits)
    if patterns is not None:
        return _exit_heads(lb, grp, [main] if last_read.get(main, -1) > e else [], patterns, exits, widen)
    if main is None:
        xc = exit_class(lb, grp, last_read)
    elif last_read.get(main, -1) > e:
        regs = [geo.owns[main] for geo in grp.geos if main in geo.owns]
        if widen is not None:
            regs = [widen(main, r) for r in regs]
        xc = ((main, lb.layout_id(main, regs)),)
    else:
        xc = ()
    return np.full((len(grp.perms), 1), exits.setdefault(xc, len(exits)))


def _table_floors(cost: "_FloorCost", lb: LayoutBounds, pr: Pricer, tab: StageTable, deadline: Deadline,
                  coarse: bool) -> np.ndarray:
    """``tab.best`` under ``cost``'s weights: the least floor per (read layouts, exit). The
    coarse relaxation reads free from every class a stage too large to price (``tab.free``); a
    stage none of whose layouts fits the memory caps (``tab.dead``) has infinite floors."""
    if tab.free:
        free = cost.least_floors(lb, pr, tab, [()], deadline, first=tab.first)
        return np.repeat(free, len(tab.read_keys), axis=0)
    if not coarse:  # (only the full relaxation filters layouts by the memory caps: ``dead``)
        best = cost.least_floors(lb, pr, tab, tab.read_keys, deadline, first=tab.first)
        return np.full_like(best, np.inf) if tab.dead else best
    try:
        return cost.least_floors(lb, pr, tab, tab.read_keys, deadline, first=tab.first)
    except SpaceTooLarge:  # too many layouts to price: read free from every class
        tab.free = True
        return _table_floors(cost, lb, pr, tab, deadline, coarse)


#: at most this many bytes per (classes, exits) float64 array of the backward pass (hidp/vgg19-5node
#: latency: its whole arrays passed 2 GB between two memory checks; 64 MB chunks passed it by 50 MB)
BACKWARD_CHUNK_BYTES = 16 * 2**20
#: (classes, exits) arrays a chunk of the backward pass holds at once (the gathered floors and
#: costs to go, their sum)
BACKWARD_TEMPORARIES = 3


def _backward(lb: LayoutBounds, best: dict, collapsed: list[bool], fl: int, deadline: Deadline) -> list:
    """The cost to go per boundary and class from the stages' least floors ``best`` ((first,
    last) -> (read layouts, exits))."""
    n = lb.n_layers
    to_go = [None] * (n + 1)
    to_go[n] = np.zeros(len(lb.classes[n]))
    for b in range(n - 1, -1, -1):
        _check(deadline)
        out = np.full(len(lb.classes[b]), np.inf)
        for e in range(b, min(n, b + fl)):
            tab = lb.tables[(b, e)]
            rest = to_go[e + 1][tab.merged]  # (exits, carries)
            least = np.empty(len(tab.read_of))
            rows = max(1, BACKWARD_CHUNK_BYTES // (8 * max(1, rest.shape[0])))  # (classes, exits) at a time
            for lo in range(0, len(least), rows):
                _check(deadline, need=BACKWARD_TEMPORARIES * 8 * rest.shape[0] * min(rows, len(least) - lo))
                sl = slice(lo, lo + rows)
                least[sl] = (best[(b, e)][tab.read_of[sl]] + rest[:, tab.carry_of[sl]].T).min(axis=1)
            # collapsed: one priced row (the empty class), every class bounded by it
            out = np.minimum(out, least.min() if collapsed[b] else least)
        to_go[b] = out
    return to_go


# --- weighted period floors ------------------------------------------------------------------

#: most weighted passes (one relaxation's floors and backward pass each) for the period
WEIGHT_PASSES = 8
#: the weighted passes stop once they took this many times the relaxation's own build
WEIGHT_SHARE = 2.0
#: the first multiplicative step: the most loaded device's weight grows by up to exp(STEP)
STEP = 0.3


class WeightPass(NamedTuple):
    """One weighted pass of the period relaxation: its device weights, its bound, its seconds."""

    weights: tuple[float, ...]
    bound: float
    seconds: float


def _normalised(w) -> np.ndarray:
    """``w`` (>= 0, not all 0) divided by its sum."""
    w = np.clip(np.asarray(w, dtype=float), 0.0, None)
    total = float(w.sum())
    if not np.isfinite(total) or total <= 0:
        raise ValueError("device weights must be finite, >= 0 and not all 0")
    return w / total


def _priced_weights(lb: LayoutBounds, w) -> np.ndarray:
    """Per device, the weight a part on it is priced at: ``w`` normalised to sum 1, then the
    least over the device's orbit (its merged type in the coarse relaxation). The result is
    equal within an orbit and nowhere above the normalised ``w``."""
    w = _normalised(w)
    out = w.copy()
    if lb.types is not None:
        for members in lb.types.orbits:
            out[list(members)] = w[list(members)].min()
    return out


def _period_pass(lb: LayoutBounds, cost: "_FloorCost", pr: Pricer, w, collapsed, fl: int,
                 deadline: Deadline, coarse: bool):
    """(bound, to go, stage floors) of the period relaxation with device weights ``w``."""
    cost.weights, cost.raw_weights = _priced_weights(lb, w), _normalised(w)
    try:
        best = {}
        for key, tab in lb.tables.items():
            _check(deadline)
            best[key] = _table_floors(cost, lb, pr, tab, deadline, coarse)
        to_go = _backward(lb, best, collapsed, fl, deadline)
    finally:
        cost.weights = cost.raw_weights = None
    return float(to_go[0].min()), to_go, best


def weighted_period_bound(lb: LayoutBounds, instance: Instance, w, pr: Pricer | None = None,
                          deadline: Deadline = NEVER) -> float:
    """The period relaxation's bound with device weights ``w`` (any ``w >= 0``, normalised to
    sum 1; priced at the least weight of each orbit): a lower bound on every plan's period.
    ``lb`` is a period ``LayoutBounds`` (full or coarse) of ``instance``."""
    if lb.objective != "period":
        raise ValueError("weighted bounds are period bounds")
    pr = pr or pricer(instance)
    cost = lb._cost
    fl = max(1, instance.search.fusion_limit)
    return _period_pass(lb, cost, pr, w, lb._collapsed, fl, deadline, lb._coarse)[0]


def _weighted_period(lb: LayoutBounds, instance: Instance, cost: "_FloorCost", pr: Pricer, collapsed,
                     fl: int, deadline: Deadline, passes: int, t0: float) -> None:
    """Raise ``lb.lower`` by weighted passes: the fluid bound's weights first, then
    multiplicative steps from the best weights so far towards the devices the cheapest relaxed
    plan loads most (a supergradient of the concave dual ``w -> min over plans of sum_d w_d
    load_d``), the step halved after a pass that does not improve. A pass that would end past
    ``deadline`` or take the passes past ``WEIGHT_SHARE`` times the build (begun at ``t0``)
    is not started; one that runs out of time is dropped. All devices
    interchangeable: the uniform weights are optimal (the dual is concave and symmetric)."""
    from milp_planner.cost.floors import fluid_weights

    orbits = device_types(instance, True).orbits  # the devices interchangeable in every cost
    if len(orbits) <= 1:
        return
    n_dev = len(instance.devices)
    uniform = np.full(n_dev, 1.0 / n_dev)

    def loads_of(w, to_go, floors):
        cost.weights, cost.raw_weights = _priced_weights(lb, w), _normalised(w)
        try:
            return _path_loads(lb, cost, pr, floors, to_go, collapsed, fl)
        finally:
            cost.weights = cost.raw_weights = None

    start = fluid_weights(instance)
    w = _orbit_mean(orbits, uniform if start is None else np.asarray(start, dtype=float))
    best = None  # (weights, bound, to go, floors)
    step, last, misses = STEP, None, 0
    began = time.perf_counter()
    share = max(0.5, WEIGHT_SHARE * (began - t0))
    for it in range(passes):
        now = time.perf_counter()
        if last is not None and (now + last > began + share or last > deadline.left()):
            break
        try:
            bound, to_go, floors = _period_pass(lb, cost, pr, w, collapsed, fl, deadline, lb._coarse)
        except TimeoutError:
            break
        last = time.perf_counter() - now
        lb.passes.append(WeightPass(tuple(float(x) for x in w), bound, last))
        if best is None:  # the better of the fluid weights and the uniform ones (the tables')
            best = (w, bound, to_go, floors)
            if lb.lower > bound:
                best = (uniform, lb.lower, lb.to_go, {k: t.best for k, t in lb.tables.items()})
        elif bound > best[1]:
            best, misses = (w, bound, to_go, floors), 0
        else:
            step, misses = step / 2, misses + 1
        if it == passes - 1 or misses == 2:  # two steps in a row without a gain: near the best
            break
        loads = loads_of(best[0], best[2], best[3])
        top = float(loads.max())
        if top <= 0:
            break
        w = _orbit_mean(orbits, best[0] * np.exp(step * loads / top))
    if best is not None and best[1] > lb.lower:
        lb.lower, lb.weights, lb.weighted_to_go = best[1], best[0], best[2]


def _orbit_mean(orbits, w: np.ndarray) -> np.ndarray:
    """``w`` averaged over each orbit of interchangeable devices, normalised to sum 1 (by
    symmetry and concavity no worse a dual point)."""
    w = np.clip(np.asarray(w, dtype=float), 0.0, None).copy()
    for members in orbits:
        w[list(members)] = w[list(members)].mean()
    return w / w.sum()


def _path_loads(lb: LayoutBounds, cost: "_FloorCost", pr: Pricer, floors: dict, to_go: list,
                collapsed, fl: int) -> np.ndarray:
    """Per device, the relaxed loads of the plan the relaxation's bound follows (under
    ``cost``'s weights): from the source's class, the stage and exit that attain the cost to
    go, and of that exit's options the one of least weighted floor. A direction for the
    weights only (it proves nothing)."""
    n = lb.n_layers
    loads = np.zeros(len(cost.pc))
    b, ci = 0, lb.classes[0][()]
    while b < n:
        row = 0 if collapsed[b] else ci
        choice, least = None, np.inf
        for e in range(b, min(n, b + fl)):
            tab = lb.tables[(b, e)]
            total = floors[(b, e)][tab.read_of[row]] + to_go[e + 1][tab.merged[:, tab.carry_of[row]]]
            x = int(np.argmin(total))
            if total[x] < least:
                choice, least = (e, x), float(total[x])
        if choice is None:
            break
        e, x = choice
        tab = lb.tables[(b, e)]
        key = () if tab.free else tab.read_keys[tab.read_of[row]]
        loads += cost.option_loads(lb, pr, tab, key, x)
        ci, b = int(tab.merged[x, tab.carry_of[row]]), e + 1
    return loads


SAFE = 1e-5  # relative margin below the float32 floors
#: ``np.take`` into ``out=`` with the default mode "raise" fills a hidden copy of ``out`` first
#: (numpy's documentation: "out is always buffered if mode='raise'"), a transient as large as
#: the result that no memory check sees; the indices built here are always in range
_UNBUFFERED = "clip"


class _FloorCost:
    """Floors of stage options from layout classes, vectorised over classes and options."""

    CHUNK = 1024  # read layouts priced at once
    #: at most this many bytes per (parts, rows, options) float32 temporary of a chunk: the
    #: memory budget is checked between chunks, and 1,024 rows of 16 parts x 10,000 options
    #: were 655 MB each (fleet/mobilenetv2-16dev-4types latency peaked 0.4 GB past the budget)
    CHUNK_BYTES = 64 * 2**20
    widened = False  # the coarse relaxation's widened layouts (``Coarsening.grid``)
    weights = None  # period: per device, the weight its load is priced at (None: 1 / devices)
    raw_weights = None  # period: the weights normalised, before the least over each orbit
    weighted_compute = None  # ``Coarsening.weighted_compute``
    threshold = None  # period: seconds; an option with a part whose relaxed load exceeds it is out (None: off)
    MAX_ELEMENTS = 3e7  # largest array of received seconds (layouts x regions x devices x options)
    #: bytes of one (layouts, regions, groups, parts) array of a chunk of ``_received``
    RECEIVE_CHUNK_BYTES = 16 * 2**20
    ranked = True  # price what a part receives over its ranked incoming links (``_received_ranked``)

    def __init__(self, instance: Instance, objective: str, node_of: np.ndarray | None = None, width: int = 0):
        if objective not in ("latency", "energy", "period", "memory"):
            raise ValueError(f"unknown objective {objective!r}")
        self.objective = objective
        self.name = instance.name
        self.n_dev = len(instance.devices)
        self.shared = instance.network.medium == "shared"
        self.pc = np.array([float(d.power.compute_w) for d in instance.devices])
        self.rx = np.array([float(d.power.rx_w) for d in instance.devices])
        self.inv_bw, self.lat = _incoming_links(instance)
        self.ranked_inv_bw, self.ranked_lat = ranked_incoming_links(instance)
        self.src_inv_bw, self.src_lat = _source_links(instance)
        self.inputs = frozenset(instance.graph.inputs)
        # with link groups: per device its ranked links from its node and from the others
        self.grouped = None if node_of is None else grouped_links(instance, node_of, max(1, width))

    def least_floors(self, lb: LayoutBounds, pr: Pricer, tab: StageTable, read_keys: list[tuple],
                     deadline: Deadline = NEVER, first: bool = False) -> np.ndarray:
        """(read layouts, exits): the least floor of the stage's options with each exit, from
        each layout of the tensors the stage reads. A ``first`` stage (from the source's
        state, where only the source holds the graph's inputs) also receives what it reads of
        them from the source."""
        devices, comp, mask, needs = tab.flat()
        keep, reducers = _exit_reducers(tab.heads)
        load_comp = comp  # unweighted: each part's relaxed compute (the threshold filter's)
        weighted = self.objective == "period" and self.weights is not None
        if weighted:
            comp = self._weighted_comp(tab, devices, comp, mask)  # the floor's compute term, part by part
        tf = None
        if tab.time_floor is not None and self.objective == "latency":
            tf = tab.time_floor[tab.group]
        # every option is priced: a pairwise dominance filter (options no other of their exit
        # beats part by part) removed about 40 % of them but cost more than it saved (session 9,
        # same bounds: the coarse relaxation of ResNet-101 on 4 AutoDiCE boards 39 s -> 7 s,
        # the full one of VGG-19 there, period, 8.4 s -> 2.8 s)
        # float32 halves the memory traffic; the floors are lowered by far more than its
        # rounding (SAFE) so they stay lower bounds
        terms = self._terms(lb, pr, tab, read_keys, deadline, first, keep=keep, dtype=np.float32)
        tf32 = None if tf is None else tf[keep].astype(np.float32)
        devices, comp, mask, load_comp = devices[keep], comp[keep], mask[keep], load_comp[keep]
        comp32 = comp.astype(np.float32)
        load32 = load_comp.T.astype(np.float32)[:, None, :]  # (parts, 1, options)
        mask32 = mask.T.astype(np.float32)[:, None, :]

        def least(rr, into):  # (parts, rows, options) received -> the least per exit, into (rows, exits)
            f = self._floor(tab.groups, tab.group[keep], devices, comp32, mask, rr, tf32)
            f = np.broadcast_to(f, (rr.shape[1], len(keep)))
            if self.threshold is not None:
                f = np.where(self._over(load32, mask32, rr), np.float32(np.inf), f)
            if len(reducers) == 1:
                _, starts, ids = reducers[0]
                into[:, ids] = np.minimum.reduceat(f, starts, axis=1)
                return
            into[:] = np.inf
            for order, starts, ids in reducers:
                into[:, ids] = np.minimum(into[:, ids], np.minimum.reduceat(f[:, order], starts, axis=1))

        P = max(1, len(read_keys))
        out = np.empty((P, len(tab.exits)))
        if len(terms) == 2 and P * 2 >= terms[0][0].n_rows * terms[1][0].n_rows:
            # a residual Add reads two tensors and the classes hold most pairs of their
            # layouts: price every pair, one layout of the second tensor at a time
            (r1, w1), (r2, w2) = terms
            pairs = np.empty((r1.n_rows, r2.n_rows, len(tab.exits)))
            rows = self._chunk_rows(comp.shape[1], len(keep))
            for l2 in range(r2.n_rows):
                second = r2.rows(slice(l2, l2 + 1))
                for lo in range(0, r1.n_rows, rows):
                    _check(deadline, force=True)
                    least(r1.rows(slice(lo, lo + rows)) + second, pairs[lo:lo + rows, l2])
            out[:] = pairs[w1, w2]
        else:
            bufs = None
            rows = self._chunk_rows(comp.shape[1], len(keep))
            for lo in range(0, P, rows):
                _check(deadline, force=True)
                hi = min(P, lo + rows)
                rr, bufs = _chunk_received(terms, lo, hi, bufs, comp.shape[1], len(keep))
                least(rr, out[lo:hi])
        return out * (1 - SAFE)

    def _chunk_rows(self, parts: int, options: int) -> int:
        """Read layouts priced at once: ``CHUNK``, fewer where a (parts, rows, options) float32
        array would pass ``CHUNK_BYTES``."""
        return int(max(1, min(self.CHUNK, self.CHUNK_BYTES // (4 * max(1, parts) * max(1, options)))))

    def _over(self, load, mask, rr) -> np.ndarray:
        """(rows, options): True where some part's relaxed load (``load``: its compute, plus
        what it receives, ``rr``: (parts, rows, options)) exceeds the threshold: no plan with a
        period within it takes that option from that class (``threshold floors``). Exceeds by
        more than the float32 rounding (SAFE), so a part exactly at the threshold stays."""
        return ((load + rr) * mask > np.float32(self.threshold * (1 + SAFE))).any(axis=0)

    def _weighted_comp(self, tab: StageTable, devices, comp, mask) -> np.ndarray:
        """(options, parts): each part's compute priced at its device's weight, or with merged
        types at the least weight x compute over its type's members."""
        if self.weighted_compute is None:
            return self.weights[devices] * comp * mask
        out = np.zeros_like(comp)
        per_group = [self.weighted_compute(grp, self.raw_weights) for grp in tab.groups]
        for gi, arr in enumerate(per_group):
            rows = np.flatnonzero(tab.group == gi)
            out[rows, :arr.shape[1]] = arr[tab.perm[rows]]
        return out

    def option_loads(self, lb: LayoutBounds, pr: Pricer, tab: StageTable, read_key: tuple, exit: int) -> np.ndarray:
        """Per device, the relaxed load (compute + least receive from the read layouts
        ``read_key``) of the option of exit ``exit`` whose weighted floor is least."""
        devices, comp, mask, _ = tab.flat()
        rr = np.zeros(comp.shape[::-1])  # (parts, options)
        for term, which in self._terms(lb, pr, tab, [read_key], NEVER, tab.first):
            rr += term.rows(which[:1])[:, 0, :]
        f = (self._weighted_comp(tab, devices, comp, mask) + self.weights[devices] * rr.T * mask).sum(axis=1)
        if self.threshold is not None:  # the options the threshold leaves
            over = ((comp + rr.T) * mask > self.threshold * (1 + SAFE)).any(axis=1)
            f = np.where(over, np.inf, f)
        cand = np.flatnonzero((tab.heads == exit).any(axis=1))
        o = int(cand[int(np.argmin(f[cand]))])
        devs, load = devices[o], (comp[o] + rr[:, o]) * mask[o]
        if self.weighted_compute is not None:  # merged types: the member its weighted compute is least on
            grp = tab.groups[tab.group[o]]
            _, who, there = self.weighted_compute(grp, self.raw_weights, members=True)
            k = len(grp.geos)
            devs, load = who[tab.perm[o]], there[tab.perm[o]] + rr[:k, o]
        out = np.zeros(len(self.pc))
        np.add.at(out, devs, load[:len(devs)])
        return out

    def _terms(self, lb: LayoutBounds, pr: Pricer, tab: StageTable, read_keys: list[tuple],
               deadline: Deadline, first: bool, keep: np.ndarray | None = None, dtype=float) -> list:
        """Per tensor the stage reads: (its received seconds, a ``_Term`` of (parts, layouts + 1,
        options), per read key the row of its layout); the last row: the tensor is not in the class, nothing.
        A ``first`` stage also receives the graph's inputs from the source (one row).
        ``keep``: the options (columns) in this order; ``dtype``: of the arrays returned."""
        devices, comp, mask, needs = tab.flat()
        group = tab.group
        if keep is not None:
            devices, mask, group = devices[keep], mask[keep], group[keep]
        O, kmax = devices.shape
        G = len(tab.groups)
        part = np.arange(kmax)[:, None]
        flat_idx = (devices * (G * kmax) + group[:, None] * kmax).T + part  # (parts, options)
        mask_t = mask.T  # (parts, options)
        terms = []
        for t in sorted({t for key in read_keys for t, _ in key}):
            if t not in needs:
                continue
            _check(deadline)
            lids = sorted({lid for key in read_keys for tt, lid in key if tt == t})
            pos = {lid: i for i, lid in enumerate(lids)}
            keys = {lid: key for key, lid in lb.layouts[t].items()}
            r_t, link = self._received(pr, t, [keys[lid] for lid in lids], needs[t],  # (L, links, G, kmax)
                                       t in lb.blocked)
            flat_t = r_t.reshape(len(lids), -1)
            # padding parts read a zero column (instead of a multiplication by the mask)
            src = np.zeros((len(lids) + 1, flat_t.shape[1] + 1), dtype=dtype)  # and a last row of 0
            src[:-1, :-1] = flat_t
            idx_t = np.where(mask_t > 0, (link[devices] * (G * kmax) + group[:, None] * kmax).T + part, flat_t.shape[1])
            terms.append((_Term(src, idx_t, deadline), _which_rows(t, pos, read_keys, deadline)))
        for t in sorted(self.inputs & set(needs)) if first else ():
            r_t = self._from_source(pr, t, needs[t])  # (dev, G, kmax)
            rr = (r_t.reshape(-1)[flat_idx] * mask_t)[:, None, :].astype(dtype)  # (kmax, 1, options)
            terms.append((_Term.whole(rr), np.zeros(len(read_keys), dtype=np.int64)))
        return terms

    def _received(self, pr: Pricer, t: str, layouts: list[tuple], need: np.ndarray, blocked: bool = False):
        """(layouts, links, groups, parts) and the link class of each device: a lower bound on
        the seconds a device of that link class (its fastest incoming link, smallest message
        latency) takes to receive what part j of group g reads of ``t`` (``need``: (groups,
        parts, 4) boxes), from each layout, claiming the one region that saves it most and
        receiving the rest. With widened layouts (``widened``), the rest is what it needs
        minus that region's share (the true regions cover the need), without message latency.
        ``blocked``: the layouts are (regions, blocks) pairs (``_received_grouped``)."""
        if blocked:
            blocks = [key[1] if key else () for key in layouts]
            layouts = [key[0] if key else () for key in layouts]
        lat = np.zeros_like(self.lat) if self.widened else self.lat
        pairs, link = np.unique(np.stack([self.inv_bw, lat], axis=1), axis=0, return_inverse=True)
        link = np.asarray(link).reshape(-1)
        rmax = max(len(r) for r in layouts)
        size = len(layouts) * rmax * len(pairs) * need.shape[0] * need.shape[1]
        if size > self.MAX_ELEMENTS:
            raise SpaceTooLarge(
                f"{self.name}: bounding the plan space needs {size:.3g} values for tensor {t} ({len(layouts)} "
                f"layouts x {need.shape[0]} part layouts x {len(pairs)} link classes), more than "
                f"{self.MAX_ELEMENTS:.0e}; reduce search.splits or max_parts, or use a heuristic planner")
        own = np.zeros((len(layouts), rmax, 4), dtype=np.int64)  # r0, r1, c0, c1 (padding is empty)
        for a, rr in enumerate(layouts):
            for i, reg in enumerate(rr):
                own[a, i] = (reg.rows[0], reg.rows[1], reg.chans[0], reg.chans[1])
        labels = None
        if blocked:
            labels = np.full((len(layouts), rmax), -1, dtype=np.int64)
            for a, lab in enumerate(blocks):
                labels[a, :len(lab)] = lab
        # in chunks of layouts (each layout's row is priced alone): the (L, R, G, k) arrays and
        # their temporaries passed the budget by 300 MB between two checks (hidp/vgg19-5node);
        # a chunk's widest arrays have R regions or one row per link class (at most n_dev)
        width = max(rmax, len(pairs), self.n_dev if blocked else 1) * need.shape[0] * need.shape[1]
        step = max(1, int(self.RECEIVE_CHUNK_BYTES // (8 * width)))
        out = classes = None
        for lo in range(0, len(layouts), step):
            check_memory(need=RECEIVE_TEMPORARIES * 8 * width * min(step, len(layouts) - lo))
            part, classes = self._received_chunk(pr, t, own[lo:lo + step],
                                                 None if labels is None else labels[lo:lo + step], need, pairs, link)
            if out is None:
                check_memory(need=len(layouts) * part[0].nbytes)
                out = np.empty((len(layouts),) + part.shape[1:], dtype=part.dtype)
            out[lo:lo + step] = part
        return out, classes

    def _received_chunk(self, pr: Pricer, t: str, own: np.ndarray, labels: np.ndarray | None, need: np.ndarray,
                        pairs: np.ndarray, link: np.ndarray):
        """``_received`` for the layouts of ``own`` ((L, R, 4) boxes, padding empty) and their
        blocks ``labels`` ((L, R), -1 pads; None without blocks); ``pairs`` and ``link``: the
        link classes of the paths without blocks or ranks (the others find their own)."""
        unit = pr.unit_bytes(t)
        nbytes = (box_cells(own[:, :, None, None, :], need[None, None]) * unit).astype(float)  # (L, R, G, k)
        if self.widened:
            h, c, _ = tensor_grid(pr.graph, t)
            whole = np.array([0, h, 0, c], dtype=np.int64)
            needed = (box_cells(need, whole) * unit).astype(float)  # (G, k)
            if labels is not None:
                return self._received_widened_grouped(nbytes, labels, needed)
            rest_b = np.clip(needed[None] - nbytes.max(axis=1), 0, None)[:, None]  # (L, 1, G, k)
            t_recv = rest_b[:, :, None] * pairs[None, None, :, 0, None, None]  # (L, 1, links, G, k)
            return t_recv[:, 0], link
        if labels is not None:
            return self._received_grouped(nbytes, labels)
        if self.ranked and own.shape[1] > 2:
            return self._received_ranked(nbytes)
        msgs = (nbytes > 0).astype(float)
        rest_b = nbytes.sum(axis=1, keepdims=True) - nbytes  # everything but the claimed region
        rest_m = msgs.sum(axis=1, keepdims=True) - msgs
        least = None  # the least over the claimed region, one region at a time: an (L, R, links,
        for r in range(rest_b.shape[1]):  # G, k) array and its temporaries passed 2 GB between checks
            t_recv = (rest_b[:, r, None] * pairs[None, :, 0, None, None]
                      + rest_m[:, r, None] * pairs[None, :, 1, None, None])  # (L, links, G, k)
            least = t_recv if least is None else np.minimum(least, t_recv, out=least)
        return least, link

    def _received_ranked(self, nbytes: np.ndarray):
        """``_received`` for layouts of up to R >= 3 regions, from their bytes ``nbytes`` (L, R,
        G, k). The regions of a layout are owned by distinct devices (a stage has one part per
        device), so a device that claims one region receives every other one from a different
        sender: at least the bytes, largest first, over its incoming links, fastest first, plus
        the messages over its smallest message latencies (``ranked_incoming_links``; the
        rearrangement inequality, for bytes and messages apart). Claiming the largest region
        leaves the fewest bytes at every rank, so it is the least claim. On AutoDiCE's boards a
        device has one fast link (its board's other unit) and Gigabit from every other board:
        the third region of a layout comes over Gigabit, not over the fastest link."""
        k = nbytes.shape[1] - 1
        ranked = np.concatenate([self.ranked_inv_bw[:, :k], self.ranked_lat[:, :k]], axis=1)
        pairs, link = np.unique(ranked, axis=0, return_inverse=True)
        link = np.asarray(link).reshape(-1)
        rest = -np.sort(-nbytes, axis=1)[:, 1:]  # (L, R - 1, G, k): largest first, the largest claimed
        out = np.zeros((nbytes.shape[0], len(pairs)) + nbytes.shape[2:])
        for i in range(k):
            r = rest[:, i][:, None]  # (L, 1, G, k)
            out += r * pairs[None, :, i, None, None] + (r > 0) * pairs[None, :, k + i, None, None]
        return out, link

    def _received_grouped(self, nbytes: np.ndarray, labels: np.ndarray):
        """``_received`` with link groups, from the layouts' region bytes ``nbytes`` (L, R, G,
        k) and blocks ``labels`` (L, R; -1 pads). For each choice of the block its own node
        holds (or none: every label but -1 would do; -1 stands for none), a device claims that
        block's largest region, receives the block's others over its in-node links and every
        other region over its links from other nodes, both ranked (largest bytes over the
        fastest links, as ``_received_ranked``); the least over the choices. A choice no exact
        state can make (a block larger than the device's node) is priced over ``NO_LINK``."""
        in_bw, in_lat, out_bw, out_lat = self.grouped
        R = nbytes.shape[1]
        w_in, w_out = min(max(R - 1, 1), in_bw.shape[1]), min(R, out_bw.shape[1])
        rows = np.concatenate([in_bw[:, :w_in], in_lat[:, :w_in], out_bw[:, :w_out], out_lat[:, :w_out]], axis=1)
        pairs, link = np.unique(rows, axis=0, return_inverse=True)
        link = np.asarray(link).reshape(-1)
        p_in_bw, p_in_lat = pairs[:, :w_in], pairs[:, w_in:2 * w_in]
        p_out_bw, p_out_lat = pairs[:, 2 * w_in:2 * w_in + w_out], pairs[:, 2 * w_in + w_out:]

        # the regions sorted by bytes, largest first, once; a choice's regions keep that order
        order = np.argsort(-nbytes, axis=1, kind="stable")
        vals = np.take_along_axis(nbytes, order, axis=1)  # (L, R, G, k)
        labs = np.take_along_axis(np.broadcast_to(labels[:, :, None, None], nbytes.shape), order, axis=1)

        def over(sel, skip, bw, lat, width):  # the selected regions, ranked -> (L, links, G, k) seconds
            rank = np.cumsum(sel, axis=1, dtype=np.int8) - np.int8(1 + skip)  # rank among those priced
            out = np.zeros((nbytes.shape[0], len(pairs)) + nbytes.shape[2:])
            for i in range(R - skip):
                r = np.where(sel & (rank == i), vals, 0.0).sum(axis=1)[:, None]  # (L, 1, G, k)
                if i >= width:  # more senders than the device has links: no exact state
                    out += r * NO_LINK + (r > 0) * NO_LINK
                else:
                    out += r * bw[None, :, i, None, None] + (r > 0) * lat[None, :, i, None, None]
            return out

        best = None
        for c in range(-1, int(labels.max(initial=-1)) + 1):
            mine = labs == c  # the regions of the block its node holds (c = -1: none, only padding)
            got = over(mine, 1, p_in_bw, p_in_lat, w_in) + over(~mine, 0, p_out_bw, p_out_lat, w_out)
            best = got if best is None else np.minimum(best, got)
        return best, link

    def _received_widened_grouped(self, share: np.ndarray, labels: np.ndarray, needed: np.ndarray):
        """``_received`` for widened layouts with blocks: ``share`` (L, R, G, k) the bytes of
        each widened region a part needs (at least its true region's), ``labels`` (L, R) the
        blocks, ``needed`` (G, k) what the part needs. For each choice of the block its node
        holds, the part claims that block's largest share, receives at most the block's other
        shares over its fastest in-node link and the rest of what it needs over its fastest
        link from another node; the least over the choices; no message latency."""
        in_bw, _, out_bw, _ = self.grouped
        pairs, link = np.unique(np.stack([in_bw[:, 0], out_bw[:, 0]], axis=1), axis=0, return_inverse=True)
        link = np.asarray(link).reshape(-1)
        gain = np.minimum(0.0, pairs[:, 0] - pairs[:, 1])[None, :, None, None]  # per byte from inside
        out = pairs[None, :, 1, None, None]
        best = needed[None, None] * out  # none of the layout on its node: all of it from outside
        lab = labels[:, :, None, None]
        for c in range(int(labels.max(initial=-1)) + 1):
            mine = np.where(lab == c, share, 0.0)
            claimed = mine.max(axis=1)
            rest = np.clip(needed[None] - claimed, 0, None)  # (L, G, k)
            inside = np.minimum(mine.sum(axis=1) - claimed, rest)
            got = rest[:, None] * out + inside[:, None] * gain
            best = np.minimum(best, got)
        return best, link

    def _from_source(self, pr: Pricer, t: str, need: np.ndarray) -> np.ndarray:
        """(devices, groups, parts): the seconds device d takes to receive from the source what
        part j of group g reads of graph input ``t`` (one message; nothing on a source device)."""
        cells = (need[..., 1] - need[..., 0]) * (need[..., 3] - need[..., 2])
        nbytes = (np.clip(cells, 0, None) * pr.unit_bytes(t)).astype(float)
        return (nbytes[None] * self.src_inv_bw[:, None, None]
                + (nbytes[None] > 0) * self.src_lat[:, None, None])

    def _floor(self, groups, group, devices, comp, mask, rr, tf=None) -> np.ndarray:
        """(rows, options): the floor of every option given what each part receives
        (``rr``: (parts, rows, options); parts first keeps the reductions over parts fast);
        ``tf``: per option, a floor of its longest compute (latency; None: none)."""
        obj = self.objective
        if obj == "latency":
            if self.shared:
                longest = comp.max(axis=1) if tf is None else np.maximum(comp.max(axis=1), tf)
                return longest[None] + rr.sum(axis=0)
            out = comp[:, 0][None] + rr[0]
            tmp = np.empty_like(out)
            for j in range(1, comp.shape[1]):  # in place: these are (rows, options) arrays
                np.add(comp[:, j][None], rr[j], out=tmp)
                np.maximum(out, tmp, out=out)
            return out if tf is None else np.maximum(out, tf[None], out=out)
        if obj == "energy":
            rx = self.rx[devices].T.astype(rr.dtype)  # (parts, options), in rr's float32
            out = (self.pc[devices] * comp * mask).sum(axis=1).astype(rr.dtype)[None] + rx[0][None] * rr[0]
            tmp = np.empty_like(out)
            for j in range(1, rr.shape[0]):  # part by part, in place: these are (rows, options) arrays
                np.multiply(rx[j][None], rr[j], out=tmp)
                out += tmp
            return out
        if obj == "period":
            if self.weights is not None:  # sum_d w_d load_d (``weighted period floors``; comp is weighted)
                w = self.weights[devices].astype(np.float32) * mask
                return comp.sum(axis=1)[None] + (w.T[:, None, :] * rr).sum(axis=0)
            return (comp.sum(axis=1)[None] + rr.sum(axis=0)) / self.n_dev
        w = np.array([sum(groups[gi].weights) / self.n_dev for gi in group])
        return np.broadcast_to(w[None], rr.shape[1:])


CHECK_EVERY = 4096  # Python-level items between two deadline and memory checks
#: arrays as wide as a chunk's widest that ``_received_chunk`` holds at once (its inputs, the
#: sorted copies, a choice's selection and sums, the best so far): the memory a chunk asks for
RECEIVE_TEMPORARIES = 8


def _checked(items, deadline: Deadline, every: int = CHECK_EVERY):
    """``items``, with ``_check(deadline)`` before every ``every``-th one."""
    for i, item in enumerate(items):
        if i % every == 0:
            _check(deadline)
        yield item


def _merge_classes(nxt: dict, exits: list[tuple], carries: list[tuple], deadline: Deadline) -> np.ndarray:
    """(exits, carries): the id in ``nxt`` (the next layer's classes, extended in place, row
    by row) of each exit class merged with each carried class. Millions of merges on wide
    DAGs (DenseNet, GoogLeNet): the deadline is checked every ``CHECK_EVERY`` of them."""
    cols = len(carries)
    out = np.empty((len(exits), cols), dtype=np.int64)
    if cols <= CHECK_EVERY:
        rows = max(1, CHECK_EVERY // max(1, cols))
        for lo in range(0, len(exits), rows):
            _check(deadline)
            out[lo:lo + rows] = [[nxt.setdefault(tuple(sorted(x + y)), len(nxt)) for y in carries]
                                 for x in exits[lo:lo + rows]]
        return out
    for i, x in enumerate(exits):
        for lo in range(0, cols, CHECK_EVERY):
            _check(deadline)
            out[i, lo:lo + CHECK_EVERY] = [nxt.setdefault(tuple(sorted(x + y)), len(nxt))
                                           for y in carries[lo:lo + CHECK_EVERY]]
    return out


def _check(deadline: Deadline, force: bool = False, need: int = 0) -> None:
    check_memory(force, need)
    deadline.check("the time limit ran out while bounding the plan space")


def _source_links(instance: Instance):
    """Per device: seconds per byte and per message from the source (0 on a source device)."""
    net = instance.network
    n_dev = len(instance.devices)
    src = net.source
    if src.external:
        return (np.array([1.0 / src.bandwidth_Bps[d] for d in range(n_dev)]),
                np.array([float(src.latency_s[d]) for d in range(n_dev)]))
    s = src.device
    inv_bw = np.array([0.0 if d == s else 1.0 / net.bandwidth_Bps[s][d] for d in range(n_dev)])
    lat = np.array([0.0 if d == s else float(net.latency_s[s][d]) for d in range(n_dev)])
    return inv_bw, lat


def _type_least(a: np.ndarray, types: DeviceTypes) -> np.ndarray:
    """Per device (rows of ``a``), the least over its (merged) type's members, column by column."""
    out = np.array(a, dtype=float)
    for members in types.orbits:
        out[list(members)] = out[list(members)].min(axis=0)
    return out


def _widen(reg, grid: tuple, cells: int):
    """``reg`` widened to the boundaries of a grid of ``cells`` cells per axis."""
    h, c, _ = grid
    if reg.empty:
        return reg

    def snap(iv, n):
        q = max(1, -(-n // cells))
        return (iv[0] // q * q, min(n, -(-iv[1] // q) * q))

    return type(reg)(snap(reg.rows, h), snap(reg.chans, c))


def _incoming_links(instance: Instance):
    """Per device: the smallest seconds per byte and per message of any link into it."""
    inv_bw, lat = ranked_incoming_links(instance)
    return inv_bw[:, 0].copy(), lat[:, 0].copy()


def ranked_incoming_links(instance: Instance):
    """Per device, the seconds per byte of its incoming links from the other devices, fastest
    first, and their seconds per message, smallest first: two (devices, devices - 1) arrays
    (one column of zeros for a single device)."""
    net = instance.network
    n_dev = len(instance.devices)
    inv_bw = np.zeros((n_dev, max(1, n_dev - 1)))
    lat = np.zeros((n_dev, max(1, n_dev - 1)))
    for d in range(n_dev):
        senders = [s for s in range(n_dev) if s != d]
        if senders:
            inv_bw[d] = sorted(1.0 / net.bandwidth_Bps[s][d] for s in senders)
            lat[d] = sorted(net.latency_s[s][d] for s in senders)
    return inv_bw, lat


def _exit_reducers(heads: np.ndarray) -> tuple[np.ndarray, list]:
    """How ``least_floors`` takes the least floor per exit: (the options to price, and per column
    of ``heads`` (options, columns) the options sorted by exit, where each exit's run starts and
    its id). When one column holds every exit the options are priced in exit order, a single
    contiguous reduction (its order is then None)."""
    reducers = []
    for h in range(heads.shape[1]):
        rows = np.arange(len(heads)) if h == 0 else np.flatnonzero(heads[:, h] != heads[:, 0])
        if not len(rows):
            continue
        order = rows[np.argsort(heads[rows, h], kind="stable")]
        starts = np.flatnonzero(np.r_[True, np.diff(heads[order, h]) != 0])
        reducers.append((order, starts, heads[order, h][starts]))
    if len(reducers) == 1:
        return reducers[0][0], [(None,) + reducers[0][1:]]
    return np.arange(len(heads)), reducers


#: a tensor's received seconds (parts, read layouts + 1, options) up to this size are gathered
#: once and held; larger ones are gathered a chunk of rows at a time (``_Term``): held whole they
#: stopped the full relaxation of fleet/vgg16-16dev-4types energy at the budget, asking for
#: 1.0-1.3 GB with 0.6-0.8 GB resident
TERM_BYTES = 256 * 2**20


class _Term:
    """One tensor's received seconds in a stage: (parts, rows, options), one row per read
    layout and a last row of zeros (the class does not hold the tensor). ``src`` holds, per
    row, the seconds of every (link class, group, part) and a last column of zeros (what a
    padding part reads); ``idx`` (parts, options) the column each part of each option reads.
    Held gathered when that takes at most ``TERM_BYTES``; ``rows`` gathers the rest on demand,
    so memory stays bounded by the chunks the caller asks for."""

    def __init__(self, src: np.ndarray, idx: np.ndarray, deadline: Deadline = NEVER):
        self.src, self.idx = src, idx
        self.n_rows = src.shape[0]
        self.full = None
        size = idx.shape[0] * src.shape[0] * idx.shape[1] * src.itemsize
        if size <= TERM_BYTES:
            # (one part's gather alone was 230 MB past the last check: fleet/vgg16-16dev-4types energy)
            check_memory(need=size)
            full = np.empty((idx.shape[0], src.shape[0], idx.shape[1]), dtype=src.dtype)
            for j in range(idx.shape[0]):  # one contiguous (rows, options) gather per part
                np.take(src, idx[j], axis=1, out=full[j], mode=_UNBUFFERED)
                _check(deadline, force=True)
            self.full, self.src, self.idx = full, None, None  # (the table is garbage once gathered)

    @classmethod
    def whole(cls, full: np.ndarray) -> "_Term":
        """A term given gathered, (parts, rows, options)."""
        term = cls.__new__(cls)
        term.src = term.idx = None
        term.n_rows, term.full = full.shape[1], full
        return term

    def rows(self, sel, out: np.ndarray | None = None) -> np.ndarray:
        """(parts, len(sel), options): the rows ``sel``, a slice (a view when held whole) or an
        index array (gathered into ``out`` if given)."""
        if self.full is not None:
            if isinstance(sel, slice):
                return self.full[:, sel]
            return np.take(self.full, sel, axis=1, out=out, mode=_UNBUFFERED)
        sub = self.src[sel]  # (rows asked, cells + 1)
        if out is None:
            out = np.empty((self.idx.shape[0], sub.shape[0], self.idx.shape[1]), dtype=self.src.dtype)
        for j in range(self.idx.shape[0]):
            np.take(sub, self.idx[j], axis=1, out=out[j], mode=_UNBUFFERED)
        return out


def _which_rows(t: str, pos: dict, read_keys: list[tuple], deadline: Deadline) -> np.ndarray:
    """Per read key, the row of ``t``'s term holding its layout (the last row: not held)."""
    return np.array([pos.get(dict(key).get(t), len(pos)) for key in _checked(read_keys, deadline)], dtype=np.int64)


def _chunk_received(terms: list, lo: int, hi: int, bufs, parts: int, options: int):
    """(the received seconds (parts, hi - lo, options) of the read layouts ``lo:hi``, summed over
    the tensors read (``terms``: per tensor its (parts, layouts, options) seconds and each
    row's layout), the buffers to reuse next). A tensor read in the same layout by every row of
    the chunk adds one (parts, 1, options) row: those are summed first, only the others gathered."""
    base = None
    varying = []
    for term, which in terms:
        sel = which[lo:hi]
        if (sel == sel[0]).all():
            row = term.rows(slice(sel[0], sel[0] + 1))
            base = row.copy() if base is None else np.add(base, row, out=base)
        else:
            varying.append((term, sel))
    if len(varying) == 1 and base is None and (np.diff(varying[0][1]) == 1).all():
        term, sel = varying[0]  # consecutive layouts of one tensor: a view when held whole
        return term.rows(slice(sel[0], sel[-1] + 1)), bufs
    if not varying:
        return (base if base is not None else np.zeros((parts, 1, options), dtype=np.float32)), bufs
    # two buffers reused across the chunks (fresh large temporaries cost page faults)
    shape = (parts, hi - lo, options)
    if bufs is None or bufs[0].shape[1] < hi - lo:
        bufs = (np.empty(shape, dtype=np.float32), np.empty(shape, dtype=np.float32))
    rr, tmp = bufs[0][:, :hi - lo], bufs[1][:, :hi - lo]
    varying[0][0].rows(varying[0][1], out=rr)
    for term, sel in varying[1:]:
        term.rows(sel, out=tmp)
        np.add(rr, tmp, out=rr)
    if base is not None:
        np.add(rr, base, out=rr)
    return rr, bufs

"""Interchangeable devices: device types, type-level device orders and their lazy expansion.

Two devices are interchangeable when exchanging them changes nothing an instance says: the
same cost model, memory and power, the bandwidth and latency matrices unchanged when their
rows and columns are swapped, the same links to an external source or sink, and neither is
the source or sink device. Swapping them in a plan (in every stage) then leaves every cost
of docs/model.md section 4 unchanged. Such devices form a *type* (a unit of one device).

Some fleets are symmetric only machine by machine: AutoDiCE's boards are each a CPU and a
GPU joined by a fast link, so one board's CPU cannot be swapped with another's alone, but
whole boards can. Devices left alone by the test above are grouped by their ``node``; two
nodes are interchangeable when swapping them device by device (matched by role: cost model,
memory and power, then index) is such a symmetry. A *unit type* is a class of
interchangeable units (single devices or whole nodes); the devices holding one role in the
units of a type form an *orbit*.

What the exact formulations use:

- ``type_orders``: the relaxation (``formulations.relaxation``) prices an option from
  per-device quantities that are equal within an orbit (compute, power, fastest incoming
  link), so it needs one option per sequence of orbits, not per device order: 8 identical
  devices and 8 parts give 1 order, not 40,320;
- ``Expander``: the stage graph (``formulations.stagegraph``) keeps real device ids, and
  from each node enumerates the device orders of a type-level option that a canonical plan
  can use there:

  * ``first-use`` (every objective, every cap): any plan can be relabelled, unit type by
    unit type, so that units are first used in index order (stages in order, parts in range
    order) with the same costs, since relabelling units never used before a stage leaves
    that stage's predecessors unchanged. A node carries how many units of each type were
    used so far; a stage may use those in any order, and new units only in index order;
  * ``free`` (latency and energy without memory caps): the cost of the rest of a plan
    depends only on who owns what at the boundary, so units that own nothing there are
    interchangeable from it on: a stage may use the owning units in any order, and the
    others only in index order. Not valid for period, memory or memory caps (sums per
    device along the whole plan);
  * ``canonical`` (the same objectives as ``free``, which it contains): two boundary states
    that differ only by exchanging interchangeable units have the same best completion, so
    they are one node. A state is relabelled canonically (``Expander.canonical``: units
    numbered in the order they first own something, tensors and regions in a fixed order)
    and an arc records the relabelling from its tail's frame to its head's, so that
    ``StageGraph.path_options`` turns a path back into real devices. Six identical devices
    that each own a slice of the last output are one node, not 720.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

from milp_planner.instance import Instance

REDUCTIONS = ("none", "first-use", "free", "canonical")


@dataclass(frozen=True)
class DeviceTypes:
    """The instance's unit types and orbits.

    ``units[u]`` lists the units of unit type ``u`` in index order, each a tuple of device
    ids by role; ``where[d]`` is device d's (unit type, unit index, role); ``orbit[d]`` its
    orbit id, and ``orbits[o]`` the devices of orbit ``o`` (one role of a unit type) in unit
    order. Orbits are numbered by their first device, so without symmetry orbit ids are
    device ids.
    """

    units: tuple[tuple[tuple[int, ...], ...], ...]
    where: tuple[tuple[int, int, int], ...]
    orbit: tuple[int, ...]
    orbits: tuple[tuple[int, ...], ...]

    @property
    def trivial(self) -> bool:
        """Every device is its own type: nothing to reduce."""
        return all(len(o) == 1 for o in self.orbits)

    def names(self, instance: Instance) -> list[list[str]]:
        """Device names of each orbit of more than one device (for messages and reports)."""
        return [[instance.devices[d].name for d in o] for o in self.orbits if len(o) > 1]


def trivial_types(n_dev: int) -> DeviceTypes:
    """Every device its own type (the reduction switched off)."""
    return DeviceTypes(tuple(((d,),) for d in range(n_dev)), tuple((d, 0, 0) for d in range(n_dev)),
                       tuple(range(n_dev)), tuple((d,) for d in range(n_dev)))


class _Symmetry:
    """Checks whether a permutation of the devices leaves the instance unchanged."""

    def __init__(self, instance: Instance):
        net = instance.network
        n = len(instance.devices)
        self.devices = instance.devices
        self.bw = np.array(net.bandwidth_Bps, dtype=float).reshape(n, n)
        self.lat = np.array(net.latency_s, dtype=float).reshape(n, n)
        np.fill_diagonal(self.bw, 0.0)
        np.fill_diagonal(self.lat, 0.0)
        self.ends = []  # per external endpoint: its per-device links
        self.fixed = set()
        for end in (net.source, net.sink):
            if end.external:
                self.ends.append((np.array(end.bandwidth_Bps, dtype=float), np.array(end.latency_s, dtype=float)))
            else:
                self.fixed.add(end.device)

    def same_device(self, a: int, b: int) -> bool:
        x, y = self.devices[a], self.devices[b]
        return x.compute == y.compute and x.memory_bytes == y.memory_bytes and x.power == y.power

    def key(self, d: int) -> tuple:
        """Invariants of device d under every symmetry (a cheap filter before ``holds``)."""
        dev = self.devices[d]
        others = [i for i in range(len(self.devices)) if i != d]
        return (repr(dev.compute), dev.memory_bytes, repr(dev.power),
                tuple(sorted(self.bw[d, others])), tuple(sorted(self.bw[others, d])),
                tuple(sorted(self.lat[d, others])), tuple(sorted(self.lat[others, d])),
                tuple((float(bw[d]), float(lat[d])) for bw, lat in self.ends))

    def holds(self, p: np.ndarray) -> bool:
        """Whether the device permutation ``p`` (device i becomes p[i]) is a symmetry."""
        if any(p[f] != f for f in self.fixed):
            return False
        moved = np.flatnonzero(p != np.arange(len(p)))
        if not all(self.same_device(int(i), int(p[i])) for i in moved):
            return False
        if not (np.array_equal(self.bw[np.ix_(p, p)], self.bw) and np.array_equal(self.lat[np.ix_(p, p)], self.lat)):
            return False
        return all(np.array_equal(bw[p], bw) and np.array_equal(lat[p], lat) for bw, lat in self.ends)

    def swap(self, xs, ys) -> np.ndarray:
        p = np.arange(len(self.devices))
        for x, y in zip(xs, ys):
            p[x], p[y] = y, x
        return p


def device_types(instance: Instance, enabled: bool = True) -> DeviceTypes:
    """The unit types and orbits of ``instance`` (all trivial when ``enabled`` is False)."""
    n = len(instance.devices)
    if not enabled or n < 2:
        return trivial_types(n)
    sym = _Symmetry(instance)
    # single devices: classes of devices any two of which can be swapped
    buckets: dict[tuple, list[list[int]]] = {}
    for d in range(n):
        if d in sym.fixed:
            continue
        classes = buckets.setdefault(sym.key(d), [])
        for cls in classes:
            if sym.holds(sym.swap([cls[0]], [d])):
                cls.append(d)
                break
        else:
            classes.append([d])
    unit_types: list[list[tuple[int, ...]]] = []
    alone = set(sym.fixed)
    for classes in buckets.values():
        for cls in classes:
            if len(cls) > 1:
                unit_types.append([(d,) for d in cls])
            else:
                alone.add(cls[0])
    # whole nodes of devices that are not interchangeable one by one
    by_node: dict[str, list[int]] = {}
    for d in sorted(alone):
        node = instance.devices[d].node
        by_node.setdefault(node if node else f"\0{d}", []).append(d)
    node_types: list[list[tuple[int, ...]]] = []
    for members in by_node.values():
        if len(members) > 1 and not sym.fixed.intersection(members):
            unit = tuple(sorted(members, key=lambda d: (sym.key(d)[:3], d)))
            for ut in node_types:
                other = ut[0]
                if (len(other) == len(unit) and all(sym.same_device(a, b) for a, b in zip(other, unit))
                        and sym.holds(sym.swap(other, unit))):
                    ut.append(unit)
                    break
            else:
                node_types.append([unit])
        else:
            node_types.extend([[(d,)] for d in members])
    unit_types.extend(node_types)
    unit_types.sort(key=lambda ut: min(min(u) for u in ut))
    where = [None] * n
    for t, ut in enumerate(unit_types):
        for i, unit in enumerate(ut):
            for r, d in enumerate(unit):
                where[d] = (t, i, r)
    roles = sorted({(t, r) for t, _, r in where}, key=lambda tr: unit_types[tr[0]][0][tr[1]])
    orbit_id = {tr: o for o, tr in enumerate(roles)}
    orbits = tuple(tuple(unit[r] for unit in unit_types[t]) for t, r in roles)
    return DeviceTypes(tuple(tuple(ut) for ut in unit_types), tuple(where),
                       tuple(orbit_id[(t, r)] for t, _, r in where), orbits)


def order_count(types: DeviceTypes, k: int) -> int:
    """How many sequences of k orbits use each orbit at most as often as it has devices."""
    ways = [1] + [0] * k  # ways[l]: sequences of length l over the orbits seen so far
    for members in types.orbits:
        new = [0] * (k + 1)
        for length, w in enumerate(ways):
            if w:
                for j in range(0, min(len(members), k - length) + 1):
                    new[length + j] += w * comb(length + j, j)
        ways = new
    return ways[k]


def type_orders(types: DeviceTypes, k: int):
    """One device tuple per sequence of k orbits (the i-th use of an orbit is its i-th device),
    in lexicographic order of the orbits: without symmetry, ``permutations(range(n), k)``."""
    used = [0] * len(types.orbits)
    seq: list[int] = []

    def rec():
        if len(seq) == k:
            yield tuple(seq)
            return
        for o, members in enumerate(types.orbits):
            if used[o] < len(members):
                seq.append(members[used[o]])
                used[o] += 1
                yield from rec()
                used[o] -= 1
                seq.pop()

    yield from rec()


def reduction_for(instance: Instance, objective: str, enabled: bool = True) -> str:
    """The strongest reduction valid for ``objective`` on ``instance`` (see the module)."""
    if not enabled:
        return "none"
    capped = instance.memory_capped
    if objective in ("latency", "energy") and not capped and getattr(instance.constraints, "period_s", None) is None:
        return "canonical"
    return "first-use"


class Expander:
    """The real device orders of a type-level option that a node lets a canonical plan use."""

    def __init__(self, types: DeviceTypes, reduction: str):
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown symmetry reduction {reduction!r}")
        self.types, self.reduction = types, reduction
        self.n_types = len(types.units)
        self.sizes = tuple(len(ut) for ut in types.units)
        self._cache: dict = {}

    def canonical(self, state: tuple) -> tuple[tuple, tuple[int, ...] | None]:
        """(the canonical form of ``state``, the relabelling to it: device -> device, None
        when it is the identity). Units of each type are renumbered in the order they first
        own something (tensors by name, regions in order, which no relabelling changes), the
        others after them in index order."""
        units, where = self.types.units, self.types.where
        order = [[] for _ in range(self.n_types)]
        seen = set()
        for _, lst in state:
            for o, _ in lst:
                if o >= 0:
                    t, i, _ = where[o]
                    if (t, i) not in seen:
                        seen.add((t, i))
                        order[t].append(i)
        perm = list(range(len(where)))
        moved = False
        for t, first in enumerate(order):
            if len(units[t]) == 1:
                continue
            rest = [i for i in range(len(units[t])) if (t, i) not in seen]
            for new, old in enumerate(first + rest):
                if new != old:
                    moved = True
                    for a, b in zip(units[t][old], units[t][new]):
                        perm[a] = b
        if not moved:
            return state, None
        canon = tuple((t, tuple(sorted((((perm[o] if o >= 0 else o), r) for o, r in lst),
                                       key=lambda x: (x[1].rows, x[1].chans, x[0]))))
                      for t, lst in state)
        return canon, tuple(perm)

    def start(self) -> tuple:
        """The usage key of the source node (``first-use``: no unit used yet)."""
        return tuple([0] * self.n_types) if self.reduction == "first-use" else ()

    def advance(self, used: tuple, devices) -> tuple:
        """The usage key after a stage on ``devices`` (``first-use`` only; else ``()``)."""
        if self.reduction != "first-use":
            return used
        out = list(used)
        for d in devices:
            t, i, _ = self.types.where[d]
            if i + 1 > out[t]:
                out[t] = i + 1
        return tuple(out)

    def context(self, used: tuple, owners: dict) -> tuple:
        """Per unit type: (units usable in any order, units usable only in index order)."""
        if self.reduction == "none":
            return tuple((tuple(range(s)), ()) for s in self.sizes)
        if self.reduction == "first-use":
            return tuple((tuple(range(c)), tuple(range(c, s))) for c, s in zip(used, self.sizes))
        held = [set() for _ in range(self.n_types)]
        for lst in owners.values():
            for o, region in lst:
                if o >= 0 and not region.empty:
                    t, i, _ = self.types.where[o]
                    held[t].add(i)
        return tuple((tuple(sorted(h)), tuple(i for i in range(s) if i not in h))
                     for h, s in zip(held, self.sizes))

    def expand(self, rep: tuple[int, ...], ctx: tuple) -> np.ndarray:
        """(orders, parts): the device orders with the orbits of ``rep`` allowed by ``ctx``."""
        key = (tuple(self.types.orbit[d] for d in rep), ctx)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        where, units = self.types.where, self.types.units
        roles = [(where[d][0], where[d][2]) for d in rep]
        k = len(rep)
        out: list[tuple[int, ...]] = []
        chosen: list[int] = []
        taken: set[int] = set()
        fresh = [0] * self.n_types  # units of each type introduced by this stage

        def rec(j):
            if j == k:
                out.append(tuple(chosen))
                return
            t, r = roles[j]
            held, pool = ctx[t]
            for i in held + pool[:fresh[t]]:
                d = units[t][i][r]
                if d not in taken:
                    chosen.append(d)
                    taken.add(d)
                    rec(j + 1)
                    taken.discard(d)
                    chosen.pop()
            if fresh[t] < len(pool):
                d = units[t][pool[fresh[t]]][r]
                fresh[t] += 1
                chosen.append(d)
                taken.add(d)
                rec(j + 1)
                taken.discard(d)
                chosen.pop()
                fresh[t] -= 1

        rec(0)
        arr = np.array(out, dtype=np.int64).reshape(len(out), k)
        self._cache[key] = arr
        return arr

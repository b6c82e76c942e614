"""Lower bounds on what is left of a plan, from a relaxation of the tensor layouts.

The exact state at a stage boundary is who owns which rows (or channels) of every live
tensor. The relaxation keeps only the *layout class* the last stage left: the regions of its
live exit tensors, without the devices that own them, and forgets older tensors. From a class,
a stage option's cost is bounded below by letting each receiving device claim, for each
tensor it reads, the one region that saves it the most (as if it owned it), receiving the
rest over its fastest incoming link with the smallest message latency; tensors outside the
class cost nothing. Every exact state of the class costs at least that much, so a backward
pass over classes gives, for every boundary and class, a lower bound on the cost to go
(``LayoutBounds.to_go``), and for every class and option a lower bound on the stage
(``LayoutBounds.floor``). ``formulations.stagegraph.build_stage_graph`` uses both to enumerate
only the stage arcs of plans that can be no worse than an upper bound.

The bounds are additive floors of the objective (``stagegraph.arc_floor``): the stage time
(latency), its energy, the mean device load (period) or the mean weight bytes (memory).

>>> from formulations.relaxation import layout_bounds               # doctest: +SKIP
>>> lb = layout_bounds(instance, "latency")                         # doctest: +SKIP
>>> lb.to_go[5]          # per class at boundary 5: a bound on the rest of the plan  # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from milp_planner.evaluator import Pricer, pricer
from milp_planner.graph import last_readers
from milp_planner.instance import Instance

from .options import StageGroup, stage_groups


@dataclass
class StageTable:
    """The options of stage ``first..last`` flattened: one column per (group, devices)."""

    groups: list[StageGroup]
    group: np.ndarray  # option -> index in groups
    perm: np.ndarray  # option -> index in that group's perms
    head: np.ndarray  # option -> class index at boundary last + 1
    floor0: np.ndarray  # option -> floor when nothing has to be received
    floor: np.ndarray | None = None  # (classes at first, options): floor from each class
    _flat: tuple | None = None

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
            for oi, (gi, p) in enumerate(zip(self.group, self.perm)):
                grp = self.groups[gi]
                k = len(grp.geos)
                devices[oi, :k] = grp.perms[p]
                comp[oi, :k] = grp.comp[p]
                mask[oi, :k] = 1.0
            needs = {}
            for gi, grp in enumerate(self.groups):
                for j, geo in enumerate(grp.geos):
                    for t, reg in geo.needs.items():
                        arr = needs.get(t)
                        if arr is None:
                            arr = needs[t] = np.zeros((len(self.groups), kmax, 4), dtype=np.int64)
                        if not reg.empty:
                            arr[gi, j] = (reg.rows[0], reg.rows[1], reg.chans[0], reg.chans[1])
            self._flat = (devices, comp, mask, needs)
        return self._flat


@dataclass
class LayoutBounds:
    objective: str
    n_layers: int
    classes: list[dict] = field(default_factory=list)  # per boundary: class key -> index
    tables: dict = field(default_factory=dict)  # (first, last) -> StageTable
    to_go: list[np.ndarray] = field(default_factory=list)  # per boundary: bound per class
    build_time_s: float = 0.0

    def head_bound(self, first: int, last: int) -> np.ndarray:
        """Per option of stage first..last: the bound on what is left after it."""
        t = self.tables[(first, last)]
        return self.to_go[last + 1][t.head]


def exit_class(group: StageGroup, last_read: dict[str, int]) -> tuple:
    """The layout class the group leaves: its live exit tensors' regions, devices dropped."""
    e = group.last
    tensors = sorted({t for geo in group.geos for t in geo.owns if last_read.get(t, -1) > e})
    return tuple((t, tuple(geo.owns[t] for geo in group.geos if t in geo.owns and not geo.owns[t].empty))
                 for t in tensors)


def layout_bounds(instance: Instance, objective: str, pr: Pricer | None = None,
                  max_options: int = 200_000, deadline: float | None = None) -> LayoutBounds:
    """The relaxation's classes, stage floors and cost-to-go bounds for ``objective``.

    Raises ``SpaceTooLarge`` when one stage has more than ``max_options`` options and
    ``TimeoutError`` past ``deadline`` (a ``time.perf_counter()`` value)."""
    t0 = time.perf_counter()
    pr = pr or pricer(instance)
    g = instance.graph
    n = len(g.layers)
    n_dev = len(instance.devices)
    fl = max(1, instance.search.fusion_limit)
    last_read = last_readers(instance.graph)
    lb = LayoutBounds(objective, n)
    lb.classes = [dict() for _ in range(n + 1)]
    lb.classes[0][()] = 0  # the source's state is priced exactly; its class is empty

    links = _incoming_links(instance)
    power = np.array([[float(d.power.compute_w), float(d.power.rx_w)] for d in instance.devices])
    shared = instance.network.medium == "shared"

    raw = {}
    for b in range(n):
        for e in range(b, min(n, b + fl)):
            if deadline is not None and time.perf_counter() > deadline:
                raise TimeoutError("the time limit ran out while pricing the stage options")
            groups = stage_groups(instance, pr, b, e, max_options)
            heads, gidx, pidx, f0 = [], [], [], []
            for gi, grp in enumerate(groups):
                key = exit_class(grp, last_read)
                ci = lb.classes[e + 1].setdefault(key, len(lb.classes[e + 1]))
                P = len(grp.perms)
                heads.append(np.full(P, ci))
                gidx.append(np.full(P, gi))
                pidx.append(np.arange(P))
                f0.append(_floor(objective, grp, None, power, n_dev, shared))
            raw[(b, e)] = StageTable(groups, np.concatenate(gidx), np.concatenate(pidx),
                                     np.concatenate(heads), np.concatenate(f0))
    lb.tables = raw

    for b in range(1, n):
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeoutError("the time limit ran out while bounding the plan space")
        keys = list(lb.classes[b])
        for e in range(b, min(n, b + fl)):
            tab = raw[(b, e)]
            tab.floor = np.concatenate([_floor(objective, grp, _received(pr, grp, keys, links), power, n_dev, shared)
                                        for grp in tab.groups], axis=1)

    lb.to_go = [None] * (n + 1)
    lb.to_go[n] = np.zeros(len(lb.classes[n]))
    for b in range(n - 1, -1, -1):
        best = np.full(len(lb.classes[b]), np.inf)
        for e in range(b, min(n, b + fl)):
            tab = raw[(b, e)]
            base = tab.floor if tab.floor is not None else tab.floor0[None, :]
            best = np.minimum(best, (base + lb.to_go[e + 1][tab.head][None, :]).min(axis=1))
        lb.to_go[b] = best
    lb.build_time_s = time.perf_counter() - t0
    return lb


def _incoming_links(instance: Instance):
    """Per device: the smallest seconds per byte and per message of any link into it."""
    net = instance.network
    n_dev = len(instance.devices)
    inv_bw = np.zeros(n_dev)
    lat = np.zeros(n_dev)
    for d in range(n_dev):
        senders = [s for s in range(n_dev) if s != d]
        if senders:
            inv_bw[d] = min(1.0 / net.bandwidth_Bps[s][d] for s in senders)
            lat[d] = min(net.latency_s[s][d] for s in senders)
    return inv_bw, lat


def _received(pr: Pricer, grp: StageGroup, keys: list[tuple], links) -> np.ndarray:
    """(classes, devices, parts): a lower bound on the seconds device d takes to receive what
    part j of ``grp`` reads, from each class (claiming the one region that saves it most)."""
    inv_bw, lat = links
    k = len(grp.geos)
    n_dev = len(inv_bw)
    out = np.zeros((len(keys), n_dev, k))
    tensors = sorted({t for geo in grp.geos for t in geo.needs})
    for t in tensors:
        rows = [ci for ci, key in enumerate(keys) if any(name == t for name, _ in key)]
        if not rows:
            continue
        regs = [next(r for name, r in keys[ci] if name == t) for ci in rows]
        kmax = max(len(r) for r in regs)
        own = np.zeros((len(rows), kmax, 4), dtype=np.int64)  # r0, r1, c0, c1 (padding is empty)
        for a, rr in enumerate(regs):
            for i, reg in enumerate(rr):
                own[a, i] = (reg.rows[0], reg.rows[1], reg.chans[0], reg.chans[1])
        need = np.zeros((k, 4), dtype=np.int64)
        for j, geo in enumerate(grp.geos):
            reg = geo.needs.get(t)
            if reg is not None and not reg.empty:
                need[j] = (reg.rows[0], reg.rows[1], reg.chans[0], reg.chans[1])
        nbytes = (box_cells(own[:, :, None, :], need[None, None, :, :]) * pr.unit_bytes(t)).astype(float)  # (classes, regions, parts)
        msgs = (nbytes > 0).astype(float)
        rest_b = nbytes.sum(axis=1, keepdims=True) - nbytes  # everything but the claimed region
        rest_m = msgs.sum(axis=1, keepdims=True) - msgs
        # (classes, regions, devices, parts) -> min over the claimed region
        t_recv = rest_b[:, :, None, :] * inv_bw[None, None, :, None] + rest_m[:, :, None, :] * lat[None, None, :, None]
        out[rows] += t_recv.min(axis=1)
    return out


def box_cells(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cells in the intersection of boxes (r0, r1, c0, c1) on the last axis, broadcast."""
    rows = np.clip(np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    cols = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 2], b[..., 2]), 0, None)
    return rows * cols


def _floor(objective: str, grp: StageGroup, recv: np.ndarray | None, power, n_dev: int, shared: bool) -> np.ndarray:
    """(classes, options) floors of the group's options (recv None: nothing received, 1 row)."""
    idx = np.array(grp.perms, dtype=np.int64)
    k = idx.shape[1]
    comp = grp.comp[None, :, :]
    if recv is None:
        rr = np.zeros_like(comp)
    else:
        rr = recv[:, idx, np.arange(k)[None, :]]  # (classes, options, parts)
    if objective == "latency":
        if shared:
            out = comp.max(axis=2) + rr.sum(axis=2)
        else:
            out = (comp + rr).max(axis=2)
    elif objective == "energy":
        out = (power[idx, 0][None] * comp).sum(axis=2) + (power[idx, 1][None] * rr).sum(axis=2)
    elif objective == "period":
        out = (comp + rr).sum(axis=2) / n_dev
    elif objective == "memory":
        out = np.full(rr.shape[:2], sum(grp.weights) / n_dev)
    else:
        raise ValueError(f"unknown objective {objective!r}")
    return out if recv is not None else out[0]

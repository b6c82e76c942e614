"""``price_stage`` for many options of one stage from one state at once, in numpy.

The exact engine prices every arc it keeps (``formulations.stagegraph``), and near an optimum
those are millions of options from a few thousand states (VGG16's 4 devices within 1 % of the
latency optimum: 1.48 M kept arcs from 4,031 nodes): ``price_stage``, a Python loop over parts,
tensors and owners, took half of that build. ``price_batch``
prices options that share the state ``owners`` (and the stage's last layer) with the same
arithmetic in the same order, vectorised over the options, so each float is the one
``price_stage`` returns (``tests/test_batch_pricing.py`` compares them bit for bit):

- a part's receive seconds accumulate message by message, tensor by tensor in the part's own
  order of ``needs``, owner by owner in the state's order, each message ``bytes / bandwidth +
  latency`` (``Network.transfer_time``, ``Endpoint.link_time``); options without a message
  there add ``0.0``, which changes no float;
- a device's energy accumulates in the order ``price_stage`` adds to it (per part: its compute,
  then per message the sender's transmit and the receiver's receive), and the stage's energy is
  Python's own ``sum`` of the per-device list, as there;
- weights and working sets are integers, exact in any order.

``price_stage`` stays the definition: this is the same sums for the case the engine meets a
million times. What it cannot repeat in order it refuses: ``layouts_of`` raises for parts that
read their tensors in different orders, and the engine prices those one by one.

>>> import numpy as np
>>> from milp_planner.cost.evaluator import initial_owners, pricer, price_stage
>>> from milp_planner.instance.reader import load_instance
>>> inst = load_instance("example:edge-3dev")
>>> pr = pricer(inst)
>>> geos = pr.geometry.parts(0, 0, "rows", [(0, 56), (56, 112)])
>>> owners = initial_owners(pr)
>>> comp = np.array([[pr.compute_time(0, geos[0]), pr.compute_time(1, geos[1])],
...                  [pr.compute_time(2, geos[0]), pr.compute_time(0, geos[1])]])
>>> layouts = layouts_of([geos], [[0, 0]], [[0, 0]])
>>> batch = price_batch(pr, owners, [0, 0], [[0, 1], [2, 0]], comp, layouts)
>>> one = price_stage(pr, owners, 0, (0, 1), geos, comp[0].tolist(), [0, 0], [0, 0], successor=False)
>>> batch.tau[0] == one.tau and batch.load[0].tolist() == one.load
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from milp_planner.cost.evaluator import EXTERNAL, Owners, Pricer
from milp_planner.space.geometry import PartGeometry


@dataclass(frozen=True)
class Layouts:
    """The device-free geometry of some layouts of one stage, as arrays, parts padded to the
    widest: the tensors the stage reads (in every part's order), per tensor the needed box of
    each part (tensors, layouts, parts, 4: r0, r1, c0, c1; empty: zeros), and per part whether
    it computes anything (``price_stage`` then adds the device's ``stage_overhead_s``), its
    weight bytes and the bytes it computes; ``widths``: the parts of each layout."""

    tensors: tuple[str, ...]
    needs: np.ndarray
    computes: np.ndarray  # (layouts, parts) bool
    weights: np.ndarray  # (layouts, parts) int64
    computed: np.ndarray  # (layouts, parts) int64
    widths: np.ndarray  # (layouts,) int64


def layouts_of(layouts: Sequence[Sequence[PartGeometry]], weights: Sequence[Sequence[int]],
               computed: Sequence[Sequence[int]]) -> Layouts:
    """``Layouts`` of the parts ``layouts[g]`` (their weight and computed bytes per part).
    Raises ``ValueError`` when two parts read their tensors in different orders:
    ``price_stage`` would sum their messages in another order than one batch can."""
    tensors = list(dict.fromkeys(t for geos in layouts for geo in geos for t in geo.needs))
    index = {t: i for i, t in enumerate(tensors)}
    kmax = max((len(geos) for geos in layouts), default=0)
    needs = np.zeros((len(tensors), len(layouts), kmax, 4), dtype=np.int64)
    computes = np.zeros((len(layouts), kmax), dtype=bool)
    wts = np.zeros((len(layouts), kmax), dtype=np.int64)
    comp = np.zeros((len(layouts), kmax), dtype=np.int64)
    for g, geos in enumerate(layouts):
        for j, geo in enumerate(geos):
            at = [index[t] for t in geo.needs]
            if at != sorted(at):
                raise ValueError(f"layout {g} part {j} reads {list(geo.needs)}, not in the order {tensors}")
            for t, reg in geo.needs.items():
                if not reg.empty:
                    needs[index[t], g, j] = (reg.rows[0], reg.rows[1], reg.chans[0], reg.chans[1])
            computes[g, j] = any(f > 0 for f in geo.fraction.values())
            wts[g, j], comp[g, j] = weights[g][j], computed[g][j]
    widths = np.array([len(geos) for geos in layouts], dtype=np.int64)
    return Layouts(tuple(tensors), needs, computes, wts, comp, widths)


@dataclass(frozen=True)
class BatchPrice:
    """``StagePrice``'s fields the engine keeps, one row per option: ``tau``, ``energy`` and
    ``transfer_s`` (options,), ``load`` (options, devices) float, ``weights`` and ``working``
    (options, devices) int64."""

    tau: np.ndarray
    energy: np.ndarray
    load: np.ndarray
    transfer_s: np.ndarray
    weights: np.ndarray
    working: np.ndarray


def price_batch(pr: Pricer, owners: Owners, layout: np.ndarray, devices: np.ndarray, comp: np.ndarray,
                layouts: Layouts) -> BatchPrice:
    """``price_stage(pr, owners, last, devices[i][:k], geos, comp[i][:k], weights, computed,
    successor=False)`` for every row ``i`` (see the module), where ``geos`` is layout
    ``layout[i]`` of ``layouts`` (with its ``k`` parts, their weights and computed bytes),
    ``devices`` (options, parts) the device of each part and ``comp`` (options, parts) its
    compute seconds there (padding past ``k`` is ignored). ``owners`` must hold every tensor
    of ``layouts.tensors``."""
    layout = np.asarray(layout, dtype=np.int64)
    devices = np.asarray(devices, dtype=np.int64)
    comp = np.asarray(comp, dtype=float)
    n, k = devices.shape
    n_dev = pr.n_dev
    power = np.array(pr.power, dtype=float).reshape(n_dev, 3)
    overhead = np.array(pr.stage_overhead, dtype=float)
    links = _Links.of(pr)
    units = [pr.unit_bytes(t) for t in layouts.tensors]
    owned = [[(o, np.array((r.rows[0], r.rows[1], r.chans[0], r.chans[1]), dtype=np.int64)) for o, r in owners[t]]
             for t in layouts.tensors]
    width = layouts.widths[layout]
    energy_dev = np.zeros((n, n_dev))
    load = np.zeros((n, n_dev))
    wts = np.zeros((n, n_dev), dtype=np.int64)
    working = np.tile(_owned(pr, owners, n_dev), (n, 1))  # what each device owns of the live tensors
    transfer_s = np.zeros(n)
    stage = np.full((n, k), -np.inf)  # recv + compute of each part (shared medium: compute)
    for j in range(k):
        rows = np.arange(n) if j == 0 else np.flatnonzero(width > j)
        if not len(rows):
            break
        d, g = devices[rows, j], layout[rows]
        c = comp[rows, j] + np.where(layouts.computes[g, j], overhead[d], 0.0)
        wts[rows, d] = layouts.weights[g, j]
        energy_dev[rows, d] += power[d, 0] * c
        r = np.zeros(len(rows))
        extra = np.zeros(len(rows), dtype=np.int64)
        for ti, u in enumerate(units):
            need = layouts.needs[ti, g, j]  # (rows, 4)
            need_cells = box_cells(need, need)
            own_mine = np.full(len(rows), -1, dtype=np.int64)  # cells of the need the device owns (-1: none)
            for o, box in owned[ti]:
                cells = box_cells(need, box)
                mine = d == o
                own_mine[mine] = cells[mine]
                msg = ~mine & (cells > 0)
                if not msg.any():
                    continue
                tt = np.where(msg, (cells * u) / links.bw[o][d] + links.lat[o][d], 0.0)
                r = r + tt
                if o != EXTERNAL:
                    energy_dev[rows, o] += power[o, 1] * tt
                energy_dev[rows, d] += power[d, 2] * tt
            extra += np.where(own_mine < 0, need_cells, need_cells - own_mine) * u
        transfer_s[rows] = transfer_s[rows] + r
        working[rows, d] += extra + layouts.computed[g, j]
        load[rows, d] = c + r
        stage[rows, j] = c if pr.shared else r + c
    tau = transfer_s + stage.max(axis=1) if pr.shared else stage.max(axis=1)
    energy = np.array([sum(e) for e in energy_dev.tolist()])  # Python's sum, as price_stage's
    return BatchPrice(tau, energy, load, transfer_s, wts, working)


def box_cells(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cells in the intersection of boxes (r0, r1, c0, c1) on the last axis, broadcast: the
    numpy ``intersect_cells`` (the relaxations use it too)."""
    rows = np.clip(np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    cols = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 2], b[..., 2]), 0, None)
    return rows * cols


def _owned(pr: Pricer, owners: Owners, n_dev: int) -> np.ndarray:
    out = np.zeros(n_dev, dtype=np.int64)
    for t, lst in owners.items():
        u = pr.unit_bytes(t)
        for o, region in lst:
            if o >= 0:
                out[o] += region.cells * u
    return out


@dataclass(frozen=True)
class _Links:
    """Bandwidth and latency from each sender (a device or ``EXTERNAL``) to every device; a
    device's own entry is 1 and 0 (never used: no message goes to its own sender)."""

    bw: dict
    lat: dict

    @staticmethod
    def of(pr: Pricer) -> "_Links":
        hit = pr.__dict__.get("_batch_links")
        if hit is None:
            net, n_dev = pr.net, pr.n_dev
            bw = {o: np.array([1.0 if o == d else float(net.bandwidth_Bps[o][d]) for d in range(n_dev)])
                  for o in range(n_dev)}
            lat = {o: np.array([0.0 if o == d else float(net.latency_s[o][d]) for d in range(n_dev)])
                   for o in range(n_dev)}
            if net.source.external:
                bw[EXTERNAL] = np.array([float(b) for b in net.source.bandwidth_Bps])
                lat[EXTERNAL] = np.array([float(s) for s in net.source.latency_s])
            hit = pr.__dict__["_batch_links"] = _Links(bw, lat)
        return hit

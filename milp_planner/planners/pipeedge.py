"""``pipeedge``: the best pipeline of whole-layer ranges, one device each (PipeEdge's DP).

Source: PipeEdge (Hu et al., DSD 2022; usc-isi/PipeEdge, ``src-native/schedule.cpp``). Its
partitioner cuts the layers (in order) into contiguous ranges, places each range whole on its
own device, and finds the best such pipeline by a dynamic program over (layers done, multiset
of device types used so far, type of the device that takes the next range), so identical
devices cost nothing extra: 16 devices of 4 types give 5^4 device multisets, not 16!.

What we keep: the pipeline space (contiguous ranges in the graph's layer order, each whole on
one device, every device used at most once) and the DP over (layers done, used multiset).

What differs:

- Device types are the orbits of ``formulations.symmetry.device_types`` (devices that the
  instance cannot tell apart; AutoDiCE's boards are matched role by role). The i-th use of an
  orbit is its i-th device, which is no loss for truly interchangeable devices; for whole
  boards (CPU + GPU) it pairs the i-th CPU with the i-th GPU. The DP state keeps the orbit of
  the *last* range's device, so with the counts the last device itself is known and the
  transfer into a range is priced on the real link (PipeEdge keeps the next type and a
  min-of-both-bandwidths link).
- Costs are the evaluator's (docs/model.md section 4), for the instance's objective: period
  (the largest device load, compute + receive), latency and energy (sums), memory (the largest
  device memory). A range of k layers is written as k single-layer stages on its device, which
  the evaluator prices like one fused stage for time and energy but with the smallest working
  sets, and which every search space holds. A range's memory (its weights plus its largest
  working set: what it owns of the live tensors, what it reads from others, what it computes)
  is computed exactly, so every memory cap is respected; PipeEdge's buffer model is replaced
  by the evaluator's.
- Approximations of the DP (the returned plan is always scored by the evaluator): a tensor
  produced before a range (a skip connection) is priced as coming from the previous range's
  device (``skips=previous``) or over the slowest link into the range's device (``skips=slowest``,
  the default); the gather at a sink *device* counts only as itself in the period (not added to the
  sink's own load); on a shared medium the period ignores the sum of all transfers.
- If no pipeline meets the memory caps, the DP is run again without them and its plan is
  returned (the evaluator reports it infeasible). The DP stops at the time limit with the best
  complete pipeline found so far (pipelines of fewer devices are completed first).

Options: ``types`` (group interchangeable devices; off: every device its own type, 2^n
multisets), ``max_devices`` (the most devices a pipeline uses; default all), ``skips`` (how skip
tensors are priced in the DP: ``slowest`` or ``previous``).
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from milp_planner.deadline import NEVER, Deadline
from milp_planner.cost.evaluator import pricer
from milp_planner.instance import Instance
from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import evaluate_tuples, per_layer, score
from milp_planner.space.geometry import full_region

INF = float("inf")
CANDIDATES = 6  # the DP's best pipelines the evaluator scores (the DP approximates some costs)
FULL_ELEMENTS = 8_000_000  # the most distinct range-cost matrices' elements held at once (64 MB)
BLOCK_ELEMENTS = 2_000_000  # the most candidate values one array operation of the DP handles
MAX_STATE_BYTES = 256 * 10**6  # the DP's table; past it the DP stops with the pipelines completed


@dataclass
class RangeTables:
    """Per layer range [i..j] (arrays indexed [i, j], j >= i), device independent unless said.

    ``comp[d]`` compute seconds on device d; ``prev_bytes``/``prev_msgs`` what the range reads
    of the output of layer i-1 (from the previous range's device), ``old_bytes``/``old_msgs``
    what it reads of tensors made before layer i-1 (skip connections: their sender is not
    known to the DP);
    ``src_bytes``/``src_msgs`` what it reads of the graph inputs; ``out_bytes``/``out_msgs``
    the graph outputs it makes (gathered at the sink); ``mem`` its device memory (weights +
    largest working set) on a device that is not the source, ``mem_src`` on the source device
    (which holds the graph inputs from the start, before its range too).
    """

    comp: dict[int, np.ndarray]
    prev_bytes: np.ndarray
    prev_msgs: np.ndarray
    old_bytes: np.ndarray
    old_msgs: np.ndarray
    src_bytes: np.ndarray
    src_msgs: np.ndarray
    out_bytes: np.ndarray
    out_msgs: np.ndarray
    mem: np.ndarray
    mem_src: np.ndarray


def range_tables(instance: Instance, devices: list[int]) -> RangeTables:
    """The ``RangeTables`` of ``instance`` (compute seconds for ``devices`` only), priced from the
    evaluator's ``Pricer`` and single-layer part geometries."""
    pr = pricer(instance)
    g = pr.graph
    n = len(g.layers)
    lr = pr.last_read
    parts = [pr.geometry.parts(l, l, "none", [None])[0] for l in range(n)]
    weights = np.array([sum(pr.weight_bytes(p, "none").values()) for p in parts], dtype=float)
    computed = np.array([pr.computed_bytes(p) for p in parts], dtype=float)
    # own[p, l]: bytes layer p owns while stage l runs (p < l <= its last reader)
    own = np.zeros((n, n + 1))
    for p, part in enumerate(parts):
        for t, region in part.owns.items():
            if not region.empty:
                own[p, p + 1:min(lr.get(t, -1), n) + 1] += region.cells * pr.unit_bytes(t)
    # owned_live[i, l] = sum over p in [i, l) of own[p, l]: a suffix sum over p
    owned_live = np.cumsum(own[::-1], axis=0)[::-1][:, :n]
    owned_live = np.vstack([owned_live, np.zeros((1, n))])
    # needs of layer l from before a range starting at i (producer < i): bytes, messages
    need_prev = np.zeros((n + 1, n))  # from layer i - 1
    msgs_prev = np.zeros((n + 1, n))
    need_old = np.zeros((n + 1, n))  # from layers before i - 1
    msgs_old = np.zeros((n + 1, n))
    need_src = np.zeros(n)
    msgs_src = np.zeros(n)
    src_owned = np.zeros(n)  # bytes of graph inputs the source owns while stage l runs
    for t in g.inputs:
        if lr.get(t, -1) >= 0:
            src_owned[:lr[t] + 1] += full_region(g, t).cells * pr.unit_bytes(t)
    for l, part in enumerate(parts):
        for t, need in part.needs.items():
            if need.empty:
                continue
            nb = need.cells * pr.unit_bytes(t)
            prod = g.producer(t)
            if prod is None:
                need_src[l] += nb
                msgs_src[l] += 1
            else:
                if prod + 1 <= l:
                    need_prev[prod + 1, l] += nb
                    msgs_prev[prod + 1, l] += 1
                need_old[prod + 2:l + 1, l] += nb
                msgs_old[prod + 2:l + 1, l] += 1
    out_b = np.zeros(n)
    out_m = np.zeros(n)
    for t in g.outputs:
        p = g.producer(t)
        if p is not None:
            out_b[p] += parts[p].owns[t].cells * pr.unit_bytes(t) if t in parts[p].owns else 0
            out_m[p] += 1
    tri = np.triu(np.ones((n, n), dtype=bool))

    def range_sum(per_layer_vals: np.ndarray) -> np.ndarray:
        """[i, j] -> sum of vals[l] for l in i..j (a 1-d array), or of vals[i, l] (2-d)."""
        if per_layer_vals.ndim == 1:
            c = np.concatenate([[0.0], np.cumsum(per_layer_vals)])
            out = c[None, 1:] - c[:n, None]
        else:
            out = np.cumsum(per_layer_vals[:n] * tri, axis=1)
        return np.where(tri, out, 0.0)

    ws = owned_live[:n] + need_prev[:n] + need_old[:n] + need_src[None, :] + computed[None, :]
    ws_src = owned_live[:n] + need_prev[:n] + need_old[:n] + src_owned[None, :] + computed[None, :]
    w_range = range_sum(weights)
    mem = np.where(tri, w_range + np.maximum.accumulate(np.where(tri, ws, 0.0), axis=1), INF)
    ws_src = np.maximum.accumulate(np.where(tri, ws_src, 0.0), axis=1)
    ws_src[1:] = np.maximum(ws_src[1:], src_owned[0])  # before its range the source holds the inputs
    mem_src = np.where(tri, w_range + ws_src, INF)
    comp = {}
    for d in devices:
        comp[d] = range_sum(np.array([pr.part_time(d, p) for p in parts]))
    return RangeTables(comp, range_sum(need_prev), range_sum(msgs_prev), range_sum(need_old), range_sum(msgs_old),
                       range_sum(need_src), range_sum(msgs_src),
                       range_sum(out_b), range_sum(out_m), mem, mem_src)


class _Costs:
    """Range costs [i, j] for pairs (previous range's device p, device d), for the objective.

    The distinct matrices are built once when they fit in ``FULL_ELEMENTS``, else each block
    on demand."""

    def __init__(self, instance: Instance, objective: str, tables: RangeTables, caps: bool, orbit: tuple[int, ...],
                 skips: str = "slowest"):
        self.obj = objective
        self.t = tables
        net = instance.network
        n_dev = len(instance.devices)
        n = tables.mem.shape[0]
        # row n_dev: "no previous device" (the first range), so index p + 1 ... kept as p = -1
        self.bw_inv = np.zeros((n_dev + 1, n_dev))
        self.lat = np.zeros((n_dev + 1, n_dev))
        for a in range(n_dev):
            for b in range(n_dev):
                if a != b:
                    self.bw_inv[a, b] = 1.0 / net.bandwidth_Bps[a][b]
                    self.lat[a, b] = net.latency_s[a][b]
        power = np.array([(float(d.power.compute_w), float(d.power.tx_w), float(d.power.rx_w))
                          for d in instance.devices]).reshape(n_dev, 3)
        self.cw, self.tx, self.rx = power[:, 0], power[:, 1], power[:, 2]
        self.tx_prev = np.append(self.tx, 0.0)  # index -1: no previous device
        # skip tensors: priced on d's slowest incoming link ("slowest") or as from the previous
        # range's device ("previous", like the output of layer i - 1)
        self.skips = skips
        self.old_lat = np.zeros(n_dev)
        self.old_inv = np.zeros(n_dev)
        if n_dev > 1:
            off = ~np.eye(n_dev, dtype=bool)
            self.old_lat = np.where(off, self.lat[:n_dev], -INF).max(axis=0)
            self.old_inv = np.where(off, self.bw_inv[:n_dev], -INF).max(axis=0)
        ends = [self._endpoint(net.source, d, True, power) for d in range(n_dev)]
        self.s_lat, self.s_inv, self.s_w = (np.array(x) for x in zip(*ends))
        ends = [self._endpoint(net.sink, d, False, power) for d in range(n_dev)]
        self.k_lat, self.k_inv, self.k_w = (np.array(x) for x in zip(*ends))
        self.is_src = np.array([not net.source.external and net.source.device == d for d in range(n_dev)])
        self.caps = np.array([float(d.memory_bytes) if (caps and instance.constraints.memory
                                                        and d.memory_bytes is not None) else INF
                              for d in instance.devices])
        self.comp = np.zeros((n_dev, n, n))
        for d, c in tables.comp.items():
            self.comp[d] = c
        # pairs that price alike share one matrix: the same orbit (interchangeable devices price
        # alike) and the same link (and sender's transmit power, for energy)
        P, D = np.meshgrid(np.arange(-1, n_dev), np.arange(n_dev), indexing="ij")
        P = np.where(P == D, -1, P)  # a device never follows itself: any key will do
        rows = np.stack([np.asarray(orbit, dtype=float)[D], self.lat[P, D], self.bw_inv[P, D],
                         self.tx_prev[P] if objective == "energy" else np.zeros(P.shape)], axis=-1).reshape(-1, 4)
        _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        self.idx = inverse.reshape(P.shape)  # [p + 1, d] -> its matrix in ``unique``
        reps = [(int(P.flat[i]), int(D.flat[i])) for i in first]
        self.unique = None  # the distinct matrices, when they fit
        if len(reps) * n * n <= FULL_ELEMENTS:
            self.unique = np.concatenate([self.pairs(np.array([p]), np.array([d]), 0)[0] for p, d in reps])

    def _endpoint(self, end, d: int, towards: bool, power) -> tuple[float, float, float]:
        """(seconds per message, seconds per byte, watts of the far end) of d's link to ``end``."""
        if end.external:
            return end.latency_s[d], 1.0 / end.bandwidth_Bps[d], 0.0
        e = end.device
        if e == d:
            return 0.0, 0.0, 0.0
        a, b = (e, d) if towards else (d, e)
        return float(self.lat[a, b]), float(self.bw_inv[a, b]), float(power[e][1] if towards else power[e][2])

    def pairs(self, prev: np.ndarray, nxt: np.ndarray, lo: int) -> np.ndarray:
        """(len(prev), len(nxt), n-lo, n-lo): costs of ranges i..j (i, j >= lo) on each device of
        ``nxt`` after a range on each device of ``prev`` (-1: none before)."""
        t = self.t
        sl = (slice(lo, None), slice(lo, None))
        P = np.asarray(prev)[:, None, None, None]
        D = np.asarray(nxt)[None, :, None, None]
        comp = self.comp[np.asarray(nxt)][:, sl[0], sl[1]][None]
        src_s = t.src_msgs[sl] * self.s_lat[D] + t.src_bytes[sl] * self.s_inv[D]
        prev_s = t.prev_msgs[sl] * self.lat[P, D] + t.prev_bytes[sl] * self.bw_inv[P, D]
        if self.skips == "previous":
            prev_s = prev_s + t.old_msgs[sl] * self.lat[P, D] + t.old_bytes[sl] * self.bw_inv[P, D]
        else:
            prev_s = prev_s + t.old_msgs[sl] * self.old_lat[D] + t.old_bytes[sl] * self.old_inv[D]
        gather_s = t.out_msgs[sl] * self.k_lat[D] + t.out_bytes[sl] * self.k_inv[D]
        mem = np.where(self.is_src[D], t.mem_src[sl], t.mem[sl])
        if self.obj == "period":
            cost = np.maximum(comp + src_s + prev_s, gather_s)
        elif self.obj == "latency":
            cost = comp + src_s + prev_s + gather_s
        elif self.obj == "energy":
            cost = (self.cw[D] * comp + (self.rx[D] + self.s_w[D]) * src_s + (self.rx[D] + self.tx_prev[P]) * prev_s
                    + (self.tx[D] + self.k_w[D]) * gather_s)
        else:  # memory
            cost = mem
        out = np.where(mem <= self.caps[D], cost, INF)  # mem is inf where j < i
        return np.broadcast_to(out, (P.shape[0], D.shape[1]) + out.shape[2:])

    def block(self, prev: list[int], nxt: list[int], lo: int) -> np.ndarray:
        """``pairs`` (from the distinct matrices when they are held)."""
        if self.unique is not None:
            return self.unique[:, lo:, lo:][self.idx[np.ix_(np.asarray(prev) + 1, np.asarray(nxt))]]
        return self.pairs(np.asarray(prev), np.asarray(nxt), lo)


@dataclass
class Pipeline:
    """A DP result: ranges (first, last, device) in order and the DP's own value."""

    ranges: list[tuple[int, int, int]]
    value: float
    complete: bool  # the DP ran to the end (False: the time limit stopped it)


def pipeline_dp(instance: Instance, objective: str, *, types: bool = True, max_devices: int | None = None,
                skips: str = "slowest", caps: bool = True, deadline: Deadline = NEVER,
                top: int = 1) -> list[Pipeline]:
    """The ``top`` best pipelines of whole-layer ranges by the DP's value (module docstring),
    each the best of its final state (device multiset, last orbit); [] if none meets the caps.

    ``deadline`` stops the DP between device multisets with
    the best pipeline completed so far (the single-device pipelines are always completed)."""
    g = instance.graph
    n = len(g.layers)
    n_dev = len(instance.devices)
    # imported here: the formulations package loads Pyomo (seconds), which the exact planners
    # that run this as their anytime start have loaded already
    from formulations.symmetry import device_types

    dt = device_types(instance, types)
    orbits = [list(o) for o in dt.orbits]
    k = len(orbits)
    sizes = [len(o) for o in orbits]
    limit = n_dev if max_devices is None else min(max_devices, n_dev)
    reps = sorted({d for o in orbits for d in o})
    tables = range_tables(instance, reps)
    costs = _Costs(instance, objective, tables, caps, dt.orbit, skips)
    minmax = objective in ("period", "memory")
    combine = np.maximum if minmax else np.add
    radix = [1] * k
    for o in range(1, k):
        radix[o] = radix[o - 1] * (sizes[o - 1] + 1)
    # V[c][i, o]: best value with layers 0..i-1 done, device multiset c, last range on orbit o
    # (its cnt[o]-th device); the path is recovered at the end by re-running the last minimum
    V: dict[int, np.ndarray] = {}
    levels: list[list[int]] = [[] for _ in range(limit + 1)]  # the multisets of each size, as met
    max_states = max(k + 1, MAX_STATE_BYTES // (8 * (n + 1) * k))

    def store(c: int, o: int, vals: np.ndarray, lo: int) -> None:
        """Rows j+1 for j = lo..n-1 of state (c, o) take ``vals`` where better."""
        if c not in V:
            V[c] = np.full((n + 1, k), INF)
            levels[sum(_counts(c, radix, sizes))].append(c)
        cur = V[c][1 + lo:, o]
        np.minimum(cur, vals, out=cur)

    for o in range(k):  # the first range: layers 0..j on the first device of orbit o
        store(radix[o], o, costs.block([-1], [orbits[o][0]], 0)[0, 0, 0], 0)
    complete = True
    for level in range(1, limit if n >= 2 else 1):
        for c in levels[level]:
            if deadline.passed() or len(V) >= max_states:
                complete = False  # stopped: the pipelines completed so far
                break
            cnt = _counts(c, radix, sizes)
            vc = V[c]
            lasts = [o for o in range(k) if cnt[o] > 0 and np.isfinite(vc[1:n, o]).any()]
            nexts = [o2 for o2 in range(k) if cnt[o2] < sizes[o2]]
            if not lasts or not nexts:
                continue
            lo = 1 + int(np.flatnonzero(np.isfinite(vc[1:n, lasts]).any(axis=1))[0])  # first row i reached
            m = n - lo
            prev = [orbits[o][cnt[o] - 1] for o in lasts]
            vals = vc[lo:n, lasts].T[:, None, :, None]
            step = max(1, BLOCK_ELEMENTS // (len(lasts) * m * m))
            for g in range(0, len(nexts), step):
                group = nexts[g:g + step]
                # cand[o, o2, i, j] = combine(V[i, o], cost of range i..j on o2's next device after o's last)
                block = costs.block(prev, [orbits[o2][cnt[o2]] for o2 in group], lo)
                vbest = combine(vals, block).min(axis=(0, 2))  # (len(group), m) over j = lo..n-1
                for x, o2 in enumerate(group):
                    store(c + radix[o2], o2, vbest[x], lo)
        if not complete:
            break
    finals = sorted((float(v[n, o]), c, o) for c, v in V.items() for o in range(k) if v[n, o] < INF)
    return [Pipeline(_path(c, o, V, costs, orbits, radix, sizes, combine), value, complete)
            for value, c, o in finals[:top]]


def _path(c: int, o: int, V: dict, costs: _Costs, orbits, radix, sizes, combine) -> list[tuple[int, int, int]]:
    """The ranges of the best pipeline of state (c, o) with every layer done: each step back
    re-runs the minimum that gave the state its value."""
    k = len(orbits)
    n = next(iter(V.values())).shape[0] - 1
    ranges = []
    j = n  # layers 0..j-1 done
    while True:
        cnt = _counts(c, radix, sizes)
        d = orbits[o][cnt[o] - 1]
        c_prev = c - radix[o]
        if c_prev == 0:
            ranges.append((0, j - 1, d))
            break
        cp = _counts(c_prev, radix, sizes)
        lasts = [o1 for o1 in range(k) if cp[o1] > 0]
        block = costs.block([orbits[o1][cp[o1] - 1] for o1 in lasts], [d], 1)[:, 0, :, j - 2]  # (L, i = 1..n-1)
        cand = combine(V[c_prev][1:n, lasts].T, block)
        li, ii = np.unravel_index(int(np.argmin(cand)), cand.shape)
        i = int(ii) + 1
        ranges.append((i, j - 1, d))
        c, o, j = c_prev, lasts[li], i
    ranges.reverse()
    return ranges


def _counts(c: int, radix: list[int], sizes: list[int]) -> list[int]:
    return [(c // r) % (s + 1) for r, s in zip(radix, sizes)]


class PipeEdgePlanner(Planner):
    name = "pipeedge"
    description = "DP over contiguous whole-layer ranges, one device each, device types as multisets (a pipeline)"
    source = "PipeEdge, Hu et al., DSD 2022 (usc-isi/PipeEdge, src-native/schedule.cpp)"
    option_specs = (
        Option("types", bool, True, "interchangeable devices are one type (the DP counts them, not orders them)"),
        Option("max_devices", int, None, "the most devices a pipeline uses (default: all)", ge=1, le=10**6),
        Option("skips", str, "slowest", "how the DP prices tensors made before the previous layer (skip "
               "connections): over the slowest link into the device, or as from the previous range's device",
               choices=("slowest", "previous")),
    )

    def search(self, instance: Instance, ctx: SolveContext):
        kw = dict(types=bool(self.options.get("types", True)), max_devices=self.options.get("max_devices"),
                  skips=self.options.get("skips", "slowest"), deadline=ctx.deadline)
        found = pipeline_dp(instance, ctx.objective, top=CANDIDATES, **kw)
        capped = bool(found)
        if not found:  # no pipeline meets the caps: the best ones without them (reported infeasible)
            found = pipeline_dp(instance, ctx.objective, caps=False, top=CANDIDATES, **kw)
        names = instance.device_names
        best = None
        for rank, pipe in enumerate(found):
            if rank and ctx.deadline.passed():
                break
            if best is not None and best[1].feasible and best[1].value(ctx.objective) <= pipe.value:
                break  # the DP ranks the rest no better (its costs are the evaluator's up to the approximations)
            stages = [s for first, last, d in pipe.ranges for s in per_layer(first, last, d)]
            plan, m = evaluate_tuples(instance, stages, self.name)
            if best is None or score(m, ctx.objective) < score(best[1], ctx.objective):
                best = (plan, m, pipe)
        plan, _, pipe = best
        plan.meta["ranges"] = [[first, last, names[d]] for first, last, d in pipe.ranges]
        info = {"dp_value": pipe.value, "dp_complete": pipe.complete, "devices_used": len(pipe.ranges),
                "caps_met_by_dp": capped, "candidates_scored": len(found)}
        status = "feasible" if pipe.complete else "timeout"
        return PlanResult(self.name, status, ctx.objective, plan=plan, info=info)

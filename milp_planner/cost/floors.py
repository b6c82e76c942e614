"""Problem-specific lower bounds valid for every plan of the space, and beyond it.

``lower_floor(instance, objective)`` returns a ``Floor`` (value, source). It does not depend on
the split families or ``fusion_limit``: it bounds every plan whose stages have at most
``max_parts`` parts and split only along ``axes``, whatever its cuts, fusion and devices (energy
and period: every plan, whatever its part counts). The exact planners report it when their own
proof is weaker (docs/exact.md).

Why the bounds hold (docs/model.md section 4):

- *Coverage.* Every plan computes, for each layer l, at least the rows the graph outputs need
  (``needed_rows``: walked back row by row from the outputs, each needed row of a reader adding
  the input rows it reads; ``m_l`` is their number over the layer's rows, 1 for almost every
  layer). A layer's parts compute fractions ``f_d`` with ``sum_d f_d >= m_l``: each part
  computes one interval, the intervals together hold every needed row, and halos only add rows
  (channel parts sum to 1). Counting the needed rows as a set matters where a reader skips rows
  (a 1x1 convolution of stride 2 reads every other row): the one interval a single part would
  compute covers the gaps, two parts need not (until issue #29 the floors counted that interval,
  and a random instance showed an energy floor 6 % above the optimum).
- *Per-device time.* For every cost model, the time of a fraction f > 0 of a layer is at least
  ``g(f) = o + a f``: ``linear`` and ``roofline`` are exactly of this form (the roofline's
  per-whole time does not depend on f); a ``table`` is piecewise linear through (0, 0), so
  ``t(f) >= f x min over its breakpoints in (0, 1] and f = 1 of t/f`` (t/f is monotone on each
  segment). Where a layer may be priced from two tables (rows, channels) or fall back to
  ``macs_per_s``, g is the minimum of the candidates. g is concave in f, so for weights
  ``w_d >= 0`` the least of ``sum_d w_d g_d(f_d)`` over ``sum_d f_d >= m`` is reached on one
  device: ``min_d w_d g_d(m)``. Communication is left out (it only adds), and so is each
  device's per-stage cost ``stage_overhead_s`` (charged by ``evaluator.price_stage``; it is
  >= 0 and only adds to a stage's compute, so every bound here stays a lower bound).
- *Latency.* A stage lasts at least every device's compute in it, so for any weights w of sum
  <= 1 over any ``max_parts`` devices (``topk(w) <= 1``), ``tau(s) >= sum_d w_d compute(s, d)``.
  Summed over stages: ``latency >= sum_l min_d w_d g_d(m_l) / topk(w)`` (**fluid**: the work
  spread over the devices at best). A layer no plan can split (no allowed axis splits it) sits in
  a one-part stage, whose time is that device's compute: it adds ``min_d g_d(m_l)`` instead
  (**compute-only**: communication free, the plan's structure kept). w is chosen by a small LP
  (HiGHS); the bound is then recomputed from w in plain arithmetic, so a solver
  tolerance can never make it invalid.
- *Period* ``>= sum_d w_d load_d`` for weights of sum 1, so the fluid sum without ``topk``; and
  at least the time of the largest layer no plan can split, on its fastest device.
- *Energy* ``>= sum_l min_d power_d g_d(m_l)``: compute energy only, each layer at the least
  energy per unit of work.
- *Flow* (energy and period, ``milp_planner.cost.flow``): an LP over the share of each layer
  every device computes, which also counts the transfers those shares force (the model input
  from the source, each tensor a device reads but did not compute, the gather); reported as
  ``flow`` when it beats the floors above. For the period, and for the energy under memory
  caps, the flow MIP (``milp_planner.cost.flow_mip``: each device's part of a layer discrete,
  the halo rows of row splits, the caps on the weights a device stores) follows within the
  same deadline, reported as ``flow-mip`` when higher.
- *Memory* (the largest device): the devices together store every weight of every computed layer
  (a channel part its share, rounded half up, so at least ``params - max_parts / 2`` elements),
  and during the stage that computes a layer l their working sets together hold at least its
  **live bytes** (``live_bytes``): the needed rows of l's output, of every earlier layer's output
  that a layer from l on still reads or that is a graph output (computed in that stage, or owned
  whole by the devices since an earlier one), and a device source's input until its last
  reader. A device's memory is its weights plus its largest working set, which is at least its
  working set in that stage, so the largest device holds at least (weights + the largest live
  bytes) / number of devices. A layer no plan splits along channels has all its weights on
  each device that computes part of it; when no plan splits it at all, one device also computes
  its whole needed output, and reads each input whole if the layer is not row-splittable
  (docs/model.md section 3, axis ``none``). A device source holds the model input.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

from milp_planner.deadline import NEVER, Deadline
from milp_planner.instance import Instance
from milp_planner.instance.devices import CostModel
from milp_planner.model.graph import Layer, input_rows, last_readers
from milp_planner.space.geometry import StageGeometry, full_region, tensor_grid

# Relative safety margin on float sums (the evaluator sums floats too).
_MARGIN = 1e-12


class Floor(NamedTuple):
    """A lower bound on an objective over every plan, and which argument gave it."""

    value: float
    source: str  # "fluid" | "compute-only" | "flow" | "flow-mip" | "weights" | "none"


class _Affine(NamedTuple):
    """``overhead + slope x f`` for f > 0: a lower bound on a layer's time of a fraction f."""

    overhead: float
    slope: float

    def at(self, f: float) -> float:
        return 0.0 if f <= 0 else max(self.overhead + self.slope * f, 0.0)


# the last few floors, by instance identity: weak references, since an instance carries its
# pricer's caches (hundreds of MB on large fleets) and must not outlive its solve
_RECENT: list[tuple["weakref.ref[Instance]", str, "Floor"]] = []
_RECENT_SIZE = 8


def lower_floor(instance: Instance, objective: str | None = None, deadline: Deadline = NEVER) -> Floor:
    """The best problem-specific lower bound on ``objective`` (default: the instance's) that
    holds for every plan of ``instance`` (see the module docstring for the proof). The last
    few are remembered per instance object (the exact planners ask before and after their
    search). ``deadline`` bounds the flow floor's LP: past
    it that floor is left out (and the result not remembered)."""
    objective = objective or instance.objective
    _RECENT[:] = [entry for entry in _RECENT if entry[0]() is not None]
    for ref, obj, floor in _RECENT:
        if ref() is instance and obj == objective:
            return floor
    complete = [True]
    floor = _lower_floor(instance, objective, deadline, complete)
    if complete[0]:
        _RECENT.append((weakref.ref(instance), objective, floor))
        del _RECENT[:-_RECENT_SIZE]
    return floor


def _lower_floor(instance: Instance, objective: str, deadline: Deadline, complete: list[bool]) -> Floor:
    if objective == "memory":
        return Floor(float(_memory_floor(instance)), "weights")
    cover = _coverage(instance)
    times = _time_floors(instance)
    layers = [l for l in instance.graph.layers if cover[l.id] > 0]
    cost = {(d, l.id): times[d][l.id].at(cover[l.id]) for d in range(len(instance.devices)) for l in layers}
    n_dev = len(instance.devices)
    if objective == "energy":
        power = [float(d.power.compute_w) for d in instance.devices]
        value = sum(min(power[d] * cost[d, l.id] for d in range(n_dev)) for l in layers)
        return _with_flow(instance, objective, Floor(_safe(value), "compute-only"), deadline, complete)
    unsplit = [l for l in layers if not _splittable(instance, l)]
    whole_cost = [min(cost[d, l.id] for d in range(n_dev)) for l in unsplit]
    if objective == "period":
        fluid = _fluid(cost, [l.id for l in layers], n_dev, n_dev)
        biggest = max(whole_cost, default=0.0)
        floor = Floor(_safe(biggest), "compute-only") if biggest > fluid else Floor(_safe(fluid), "fluid")
        return _with_flow(instance, objective, floor, deadline, complete)
    if objective != "latency":
        raise ValueError(f"unknown objective {objective!r}")
    k = max(1, min(instance.search.max_parts, n_dev))
    fluid = _fluid(cost, [l.id for l in layers], n_dev, k)
    split_ids = [l.id for l in layers if _splittable(instance, l)]
    compute_only = sum(whole_cost) + _fluid(cost, split_ids, n_dev, k)
    if compute_only > fluid:
        return Floor(_safe(compute_only), "compute-only")
    return Floor(_safe(fluid), "fluid")


def _with_flow(instance: Instance, objective: str, floor: Floor, deadline: Deadline,
               complete: list[bool]) -> Floor:
    """``floor``, or the flow floor (``milp_planner.cost.flow``: the transfers the layer graph
    forces, counted) when that is higher; ``complete[0]`` becomes False when the flow floor's LP
    was not solved by ``deadline``."""
    from milp_planner.cost.flow import flow_floor

    flow = flow_floor(instance, objective, deadline=deadline)
    if flow is None and not deadline.never:
        complete[0] = False
    if flow is not None and flow.value > floor.value:
        floor = Floor(flow.value, "flow")
    capped = instance.memory_capped
    if flow is not None and (objective == "period" or capped):
        from milp_planner.cost.flow_mip import mip_floor

        mip = mip_floor(instance, objective, deadline=deadline)  # its dual bound when stopped: still proven
        if mip is not None and mip.value > floor.value:
            floor = Floor(mip.value, "flow-mip")
    return floor


def fluid_weights(instance: Instance) -> list[float] | None:
    """Per device, the weights (``>= 0``, summing to 1) of the period's fluid bound: the LP's
    (``_fluid_lp`` with every device counted), else ``1 / (time of the whole model)``; None
    when there is nothing to weigh. A starting point for weighted period floors
    (``formulations.relaxation``): any such weights give ``period >= sum_d w_d load_d``."""
    n_dev = len(instance.devices)
    cover = _coverage(instance)
    layers = [l.id for l in instance.graph.layers if cover[l.id] > 0]
    if not layers or n_dev == 0:
        return None
    times = _time_floors(instance)
    cost = {(d, l): times[d][l].at(cover[l]) for d in range(n_dev) for l in layers}
    w = _fluid_lp(cost, layers, n_dev, n_dev)
    if w is None or sum(max(x, 0.0) for x in w) <= 0:
        totals = [sum(cost[d, l] for l in layers) for d in range(n_dev)]
        if not all(t > 0 for t in totals):
            return None
        w = [1.0 / t for t in totals]
    w = [max(x, 0.0) for x in w]
    total = sum(w)
    return [x / total for x in w]


def _safe(value: float) -> float:
    return max(0.0, value * (1 - _MARGIN))


def _splittable(instance: Instance, layer: Layer) -> bool:
    """Whether any plan may split ``layer`` over several parts (conservative: True if unsure)."""
    s = instance.search
    if min(s.max_parts, len(instance.devices)) < 2:
        return False
    return ("rows" in s.axes and layer.row_splittable) or ("channels" in s.axes and layer.channel_splittable)


def _coverage(instance: Instance) -> dict[int, float]:
    """m_l: the share of each layer's output every plan computes (by some part)."""
    g = instance.graph
    return {l.id: needed_rows(g)[l.id] / max(1, l.rows) for l in g.layers}


def needed_rows(graph) -> dict[int, int]:
    """Per layer, how many rows of its output the graph outputs need, counted as a set.

    A part computes one interval of each layer, so a plan's parts together compute at least
    every needed row once, but not the gaps between them: a reader with a stride above its
    kernel span (a 1x1 convolution of stride 2) needs every other row, and two parts that each
    compute the rows below their own readers' needs skip the rows between. So the needed rows
    are walked row by row (the interval ``input_rows`` of each needed output row, unioned), not
    as the one interval the whole-stage geometry computes. Rows are at most a few thousand."""
    return {lid: len(rows) for lid, rows in needed_row_sets(graph).items()}


def needed_row_sets(graph) -> dict[int, frozenset[int]]:
    """Per layer, the rows of its output the graph outputs need (``needed_rows`` counts them)."""
    key = id(graph)
    hit = _NEEDED.get(key)
    if hit is not None and hit[0]() is graph:
        return hit[1]
    need: dict[int, set[int]] = {}
    outputs = set(graph.outputs)
    for layer in reversed(graph.layers):
        rows = set(range(layer.rows)) if layer.output in outputs else set()
        for c in graph.consumers(layer.output):
            reader = graph.layers[c]
            wanted = need.get(c)
            if not wanted:
                continue
            if not reader.row_splittable:
                rows = set(range(layer.rows))
                break
            for r in wanted:
                a, b = input_rows(reader.rowdep, (r, r + 1), layer.rows)
                rows.update(range(a, b))
        need[layer.id] = rows
    out = {lid: frozenset(rows) for lid, rows in need.items()}
    _NEEDED.clear()
    _NEEDED[key] = (weakref.ref(graph), out)
    return out


_NEEDED: dict[int, tuple] = {}  # the last graph's needed rows (its identity, held weakly, checked)


def rows_read(graph, layer, tensor: str) -> int:
    """How many rows of ``tensor`` (an input of ``layer``) any part computing all of the
    layer's needed rows reads, at least (every row when the layer is not row-splittable)."""
    h_in = graph.tensor_rows(tensor)
    if not layer.row_splittable:
        return h_in
    read: set[int] = set()
    for r in needed_row_sets(graph)[layer.id]:
        a, b = input_rows(layer.rowdep, (r, r + 1), h_in)
        read.update(range(a, b))
    return len(read)


def _time_floors(instance: Instance) -> list[dict[int, _Affine]]:
    """Per device and layer, an affine lower bound on the time of a fraction (see docstring)."""
    g = instance.graph
    dt = instance.dtype_bytes
    out = []
    for dev in instance.devices:
        per = {}
        for layer in g.layers:
            io = (sum(g.elements(t) for t in layer.inputs) + g.elements(layer.output)) * dt
            per[layer.id] = _layer_floor(dev.compute, layer, io, layer.params * dt)
        out.append(per)
    return out


def _layer_floor(model: CostModel, layer: Layer, io_bytes: int, weight_bytes: int) -> _Affine:
    candidates = []
    fallback = False
    for axis in ("rows", "channels"):
        points = model.points(layer.name, axis) if model.kind == "table" else None
        if points is None:
            fallback = True
        else:
            candidates.append(_Affine(0.0, _table_slope(points)))
    if fallback:
        if model.macs_per_s is None:
            candidates.append(_Affine(0.0, 0.0))  # unpriceable: the evaluator raises; bound 0
        else:
            per_whole = float(layer.work) / float(model.macs_per_s)
            if model.kind == "roofline" and model.mem_bytes_per_s:
                per_whole = max(per_whole, float(io_bytes + weight_bytes) / float(model.mem_bytes_per_s))
            candidates.append(_Affine(max(float(model.overhead_s), 0.0), per_whole))
    # the pointwise minimum of the candidates, bounded below by an affine function: keep the
    # smaller overhead and the smaller slope (valid for every f in (0, 1])
    return _Affine(min(c.overhead for c in candidates), min(c.slope for c in candidates))


def _table_slope(points) -> float:
    """min over f in (0, 1] of t(f) / f for a table interpolated through (0, 0)."""
    from milp_planner.instance.devices import _interpolate

    fs = [float(f) for f, _ in points if 0 < float(f) <= 1] + [1.0]
    best = min(float(_interpolate(points, f, float)) / f for f in fs)
    return max(best, 0.0)


def _fluid(cost: dict, layer_ids: list[int], n_dev: int, k: int) -> float:
    """max over weights w >= 0 of sum_l min_d w_d cost[d, l] / (sum of the k largest w_d)."""
    if not layer_ids or n_dev == 0:
        return 0.0
    candidates = [[1.0] * n_dev]
    totals = [sum(cost[d, l] for l in layer_ids) for d in range(n_dev)]
    if all(t > 0 for t in totals):
        candidates.append([1.0 / t for t in totals])
    lp = _fluid_lp(cost, layer_ids, n_dev, k)
    if lp is not None:
        candidates.append(lp)
    return max(_fluid_value(cost, layer_ids, w, k) for w in candidates)


def _fluid_value(cost, layer_ids, w, k) -> float:
    w = [max(x, 0.0) for x in w]
    top = sum(sorted(w, reverse=True)[:k])
    if top <= 0:
        return 0.0
    return sum(min(w[d] * cost[d, l] for d in range(len(w))) for l in layer_ids) / top


def _fluid_lp(cost, layer_ids, n_dev, k):
    """The weights maximising the fluid bound (an LP solved by HiGHS), or None if it fails.

    Variables w (devices), z (layers), t, u (devices): max sum z_l subject to
    z_l <= cost[d, l] w_d, and k t + sum u_d <= 1 with u_d >= w_d - t (the k largest w sum to
    at most 1). Only the weights are used; the bound is recomputed from them."""
    try:
        import highspy
        import numpy as np
    except ImportError:  # pragma: no cover - HiGHS is a dependency of the solvers
        return None
    n_l = len(layer_ids)
    nv = 2 * n_dev + n_l + 1
    it = n_dev + n_l
    rows, cols, vals = [], [], []
    r = 0
    for j, l in enumerate(layer_ids):  # z_l - cost w_d <= 0
        for d in range(n_dev):
            rows += [r, r]
            cols += [n_dev + j, d]
            vals += [1.0, -cost[d, l]]
            r += 1
    for d in range(n_dev):  # w_d - t - u_d <= 0
        rows += [r, r, r]
        cols += [d, it, it + 1 + d]
        vals += [1.0, -1.0, -1.0]
        r += 1
    rows += [r] * (n_dev + 1)  # k t + sum u <= 1
    cols += [it] + [it + 1 + d for d in range(n_dev)]
    vals += [float(k)] + [1.0] * n_dev
    n_rows = r + 1
    rows_a, cols_a, vals_a = np.array(rows), np.array(cols), np.array(vals, dtype=float)
    scale = max(float(np.max(np.abs(vals_a))), 1e-300)
    vals_a = np.where(rows_a < n_l * n_dev, vals_a / scale, vals_a)  # costs near 1 (z scaled alike)
    order = np.lexsort((rows_a, cols_a))
    rows_a, cols_a, vals_a = rows_a[order], cols_a[order], vals_a[order]
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = nv, n_rows
    cost_vec = np.zeros(nv)
    cost_vec[n_dev:n_dev + n_l] = -1.0
    lp.col_cost_ = cost_vec
    lp.col_lower_ = np.zeros(nv)
    lp.col_upper_ = np.full(nv, inf)
    upper = np.zeros(n_rows)
    upper[-1] = 1.0
    lp.row_lower_, lp.row_upper_ = np.full(n_rows, -inf), upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.searchsorted(cols_a, np.arange(nv + 1))
    lp.a_matrix_.index_, lp.a_matrix_.value_ = rows_a, vals_a
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", 5.0)
    try:
        h.passModel(lp)
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        x = list(h.getSolution().col_value)
    except Exception:  # noqa: BLE001 - a failed LP only loses a candidate
        return None
    finally:
        h.resetGlobalScheduler(True)  # as formulations.caps: a later solve may use other threads
    return [float(v) for v in x[:n_dev]]


def _memory_floor(instance: Instance) -> int:
    """The ``weights`` floor (see the module docstring, *Memory*), in bytes."""
    g = instance.graph
    if not g.layers:
        return 0
    dt = instance.dtype_bytes
    n_dev = len(instance.devices)
    s = instance.search
    k = max(1, min(s.max_parts, n_dev))
    part = StageGeometry(g).parts(0, len(g.layers) - 1, "none", [None])[0]
    weights, largest_whole = 0, 0
    for layer in g.layers:
        if part.fraction.get(layer.id, 0) <= 0:
            continue
        channel_split = k >= 2 and "channels" in s.axes and layer.channel_splittable
        if channel_split:
            elements = max(0, -(-(2 * layer.params - k) // 2))  # ceil(params - k / 2)
        else:
            elements = layer.params
            # every part of the layer stores all of it; a layer no plan splits is one part,
            # which also computes all of its needed output (and reads its inputs whole when it
            # is not row-splittable)
            whole = layer.params * dt
            if not _splittable(instance, layer):
                whole += _computed_bytes(g, part, layer.id, dt)
                if not layer.row_splittable:
                    whole += sum(full_region(g, t).cells * _cell_elements(g, t) * dt
                                 for t in dict.fromkeys(layer.inputs))
            largest_whole = max(largest_whole, whole)
        weights += elements * dt
    spread = -(-(weights + max(live_bytes(instance), default=0)) // n_dev)
    source = 0
    net = instance.network
    if not net.source.external:
        for t in g.inputs:
            if any(t in l.inputs for l in g.layers):
                source += full_region(g, t).cells * _cell_elements(g, t) * dt
    return max(spread, largest_whole, source)


def live_bytes(instance: Instance) -> list[int]:
    """Per layer l: bytes that the working sets of all devices together hold, at least, during
    the stage that computes l (the *liveness* term of the memory floor).

    That stage's parts compute at least the needed rows of l and of every layer of the stage
    (coverage), and every tensor produced by an earlier stage that this stage or a later one
    reads, or that is a graph output, is owned whole by the devices (exit tensors are cut into
    parts that cover them) and counted in its owners' working sets. So the sum over the devices
    is at least: l's needed output, plus the needed output of every earlier layer whose output a
    layer from l on reads (or which is a graph output), plus, with a device source, every graph
    input a layer from l on reads (the source owns it until its last reader)."""
    g = instance.graph
    if not g.layers:
        return []
    dt = instance.dtype_bytes
    last = last_readers(g)
    produced = {layer.output: layer.id for layer in g.layers}
    needed = needed_rows(g)
    out = [needed[layer.id] * tensor_grid(g, layer.output)[1] * _cell_elements(g, layer.output) * dt
           for layer in g.layers]
    inputs = []
    if not instance.network.source.external:
        inputs = [(t, full_region(g, t).cells * _cell_elements(g, t) * dt) for t in g.inputs if last.get(t, -1) >= 0]
    live = []
    for layer in g.layers:
        total = out[layer.id]
        for t, p in produced.items():
            if p < layer.id and last.get(t, -1) >= layer.id:
                total += out[p]
        total += sum(b for t, b in inputs if last[t] >= layer.id)
        live.append(total)
    return live


def _computed_bytes(graph, part, lid: int, dt: int) -> int:
    region = part.computed.get(lid)
    if region is None:
        return 0
    return region.cells * _cell_elements(graph, graph.layers[lid].output) * dt


def _cell_elements(graph, tensor: str) -> int:
    from milp_planner.space.geometry import tensor_grid

    return tensor_grid(graph, tensor)[2]

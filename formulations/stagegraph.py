"""The plan space as a layered DAG: the structure every exact formulation exploits.

A plan is a path. Node ``(b, state)`` is a stage boundary (before layer ``b``) with ``state``
the ownership of every tensor live across it (who owns which rows or channels). An arc is
one stage option (layers ``b..e``, axis, cuts, devices) leaving that node; it ends at
``(e + 1, state')``. Every cost of MODEL.md section 4 splits over this path:

- per arc: the stage's ``tau`` (switched or shared), per-device compute and receive time,
  energy, per-device weight bytes (summed along the path) and working set (maxed along it);
- per terminal node: the gather of the graph outputs at the sink.

So latency and energy are shortest paths (the DP), and period, memory and caps are a path
flow with side constraints (the MILP and CP-SAT models). Arc costs come from
``milp_planner.evaluator.Pricer``, the code the evaluator itself uses.

>>> from formulations.stagegraph import build_stage_graph        # doctest: +SKIP
>>> sg = build_stage_graph(instance)                            # doctest: +SKIP
>>> len(sg.arcs), sg.n_nodes                                    # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import permutations

from milp_planner.errors import PlannerError
from milp_planner.evaluator import EXTERNAL, Pricer, pricer
from milp_planner.geometry import full_region, intersect_cells, union_cells
from milp_planner.instance import Instance
from milp_planner.plan import Part, Plan, Stage
from milp_planner.space import cut_vectors, ranges_from_cuts, stage_extent


@dataclass(frozen=True)
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


@dataclass
class Arc:
    tail: int  # node id
    head: int  # node id
    option: StageOption
    tau: float  # stage time (latency contribution)
    energy: float  # compute + transfer energy of the stage, J
    load: tuple[float, ...]  # per device compute + receive, s (period)
    transfer_s: float  # sum of all transfer times of the stage (shared-medium period)
    weights: tuple[int, ...]  # per device weight bytes of the layers it computes here
    working: tuple[int, ...]  # per device working set during this stage, bytes


@dataclass
class StageGraph:
    instance: Instance
    nodes: list[tuple[int, tuple]]  # node id -> (boundary, state)
    arcs: list[Arc]
    source: int  # node id of (0, initial state)
    terminals: dict[int, "Terminal"]  # node id at boundary n -> gather costs
    out_arcs: list[list[int]] = field(default_factory=list)
    in_arcs: list[list[int]] = field(default_factory=list)
    build_time_s: float = 0.0

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    def plan_from_arcs(self, arc_ids) -> Plan:
        names = self.instance.device_names
        arcs = sorted((self.arcs[a] for a in arc_ids), key=lambda a: a.option.first)
        return Plan(self.instance.name, [a.option.to_stage(names) for a in arcs])

    def path_value(self, arc_ids, objective: str) -> float:
        """The objective of a source-to-terminal path, computed from arc data (for checks)."""
        arcs = [self.arcs[a] for a in arc_ids]
        term = self.terminals[arcs[-1].head]
        n_dev = len(self.instance.devices)
        if objective == "latency":
            return sum(a.tau for a in arcs) + term.gather_s
        if objective == "energy":
            return sum(a.energy for a in arcs) + term.energy
        if objective == "period":
            loads = [sum(a.load[d] for a in arcs) + term.load[d] for d in range(n_dev)]
            p = max(loads)
            if self.instance.network.medium == "shared":
                p = max(p, sum(a.transfer_s for a in arcs) + term.gather_s)
            return p
        return float(max(sum(a.weights[d] for a in arcs) + max(a.working[d] for a in arcs)
                         for d in range(n_dev)))


@dataclass
class Terminal:
    gather_s: float
    energy: float
    load: tuple[float, ...]  # per device: the gather counted as the sink device's receive


def stage_options(instance: Instance, first: int, last: int) -> list[StageOption]:
    """Every stage option on layers first..last inside the instance's search space."""
    g = instance.graph
    sp = instance.search
    n_dev = len(instance.devices)
    devs = range(n_dev)
    out = [StageOption(first, last, "none", (None,), (d,)) for d in devs]
    kmax = min(sp.max_parts, n_dev)
    axes = []
    if "rows" in sp.axes and all(g.layers[i].row_splittable for i in range(first, last + 1)):
        axes.append("rows")
    if "channels" in sp.axes and first == last and g.layers[first].channel_splittable:
        axes.append("channels")
    for axis in axes:
        n = stage_extent(instance, last, axis)
        for k in range(2, kmax + 1):
            for cuts in cut_vectors(instance, n, k):
                ranges = tuple(ranges_from_cuts(cuts, n))
                for assign in permutations(devs, k):
                    out.append(StageOption(first, last, axis, ranges, assign))
    return out


def build_stage_graph(instance: Instance, max_arcs: int = 3_000_000, progress=None,
                      deadline: float | None = None) -> StageGraph:
    """Enumerate the whole plan space of ``instance`` as a ``StageGraph``.

    Raises ``PlannerError`` when the graph would exceed ``max_arcs`` (the space is too large
    to enumerate; shrink ``search`` or use a heuristic planner).
    """
    t0 = time.perf_counter()
    pr = pricer(instance)
    g = instance.graph
    n = len(g.layers)
    n_dev = len(instance.devices)
    fl = max(1, instance.search.fusion_limit)
    net = instance.network
    power = [(float(d.power.compute_w), float(d.power.tx_w), float(d.power.rx_w)) for d in instance.devices]

    # the last layer reading each tensor (graph outputs: forever)
    last_read: dict[str, int] = {}
    for layer in g.layers:
        for t in layer.inputs:
            last_read[t] = max(last_read.get(t, -1), layer.id)
    for t in g.outputs:
        last_read[t] = n

    src = EXTERNAL if net.source.external else net.source.device
    init = tuple(sorted((t, ((src, full_region(g, t)),)) for t in g.inputs if last_read.get(t, -1) >= 0))
    node_id: dict[tuple, int] = {}
    nodes: list[tuple[int, tuple]] = []

    def node(b, state):
        key = (b, state)
        i = node_id.get(key)
        if i is None:
            i = node_id[key] = len(nodes)
            nodes.append(key)
        return i

    source = node(0, init)
    frontier: dict[int, set[int]] = {0: {source}}
    arcs: list[Arc] = []
    options_cache: dict[tuple[int, int], list] = {}

    for b in range(n):
        for nid in sorted(frontier.get(b, ())):
            _, state = nodes[nid]
            owners = dict(state)
            for e in range(b, min(n, b + fl)):
                key = (b, e)
                if key not in options_cache:
                    options_cache[key] = _priced_options(instance, pr, b, e)
                for opt, geos, comp, wts, comp_bytes in options_cache[key]:
                    arc, new_state = _arc(pr, instance, opt, geos, comp, wts, comp_bytes, owners,
                                          last_read, power, n_dev)
                    head = node(e + 1, new_state)
                    frontier.setdefault(e + 1, set()).add(head)
                    arc.tail, arc.head = nid, head
                    arcs.append(arc)
                    if len(arcs) > max_arcs:
                        raise PlannerError(
                            f"{instance.name}: the plan space has more than {max_arcs} stage arcs; "
                            "reduce search.fusion_limit, max_parts or splits, or use a heuristic planner")
            if deadline is not None and time.perf_counter() > deadline:
                raise TimeoutError("stage graph enumeration exceeded the time limit")
        if progress is not None:
            progress(phase=f"space: layer {b + 1}/{n}", arcs=len(arcs))

    terminals = {}
    sink = EXTERNAL if net.sink.external else net.sink.device
    for nid in frontier.get(n, ()):
        _, state = nodes[nid]
        gs, en = 0.0, 0.0
        owners = dict(state)
        for t in g.outputs:
            for o, region in owners.get(t, ()):
                if o == sink or o == EXTERNAL:
                    continue
                nb = pr.region_bytes(t, region.cells)
                if nb <= 0:
                    continue
                tt = pr.link_time(o, sink, nb)
                gs += tt
                en += power[o][1] * tt + (power[sink][2] * tt if sink != EXTERNAL else 0.0)
        load = [0.0] * n_dev
        if sink != EXTERNAL:
            load[sink] = gs
        terminals[nid] = Terminal(gs, en, tuple(load))

    sg = StageGraph(instance, nodes, arcs, source, terminals)
    sg.out_arcs = [[] for _ in nodes]
    sg.in_arcs = [[] for _ in nodes]
    for i, a in enumerate(arcs):
        sg.out_arcs[a.tail].append(i)
        sg.in_arcs[a.head].append(i)
    sg.build_time_s = time.perf_counter() - t0
    return sg


def _priced_options(instance, pr: Pricer, b: int, e: int):
    """Options of stage b..e with their device-free geometry and per-part device costs."""
    out = []
    for opt in stage_options(instance, b, e):
        geos = pr.geometry.parts(b, e, opt.axis, list(opt.ranges))
        comp = tuple(pr.compute_time(d, part) for d, part in zip(opt.devices, geos))
        wts = tuple(sum(pr.weight_bytes(part, opt.axis).values()) for part in geos)
        comp_bytes = tuple(pr.computed_bytes(part) for part in geos)
        out.append((opt, geos, comp, wts, comp_bytes))
    return out


def _arc(pr: Pricer, instance, opt: StageOption, geos, comp, wts, comp_bytes, owners, last_read,
         power, n_dev):
    """Price one option from one state; return the arc (tail/head unset) and the next state."""
    net = instance.network
    recv = [0.0] * n_dev
    compute = [0.0] * n_dev
    energy = 0.0
    transfer_s = 0.0
    weights = [0] * n_dev
    working = [0] * n_dev
    has_part = [False] * n_dev
    for d, part, c, w, cb in zip(opt.devices, geos, comp, wts, comp_bytes):
        has_part[d] = True
        compute[d] = c
        weights[d] = w
        energy += power[d][0] * c
        ws = cb
        for t, need in part.needs.items():
            own_mine = None
            for o, region in owners.get(t, ()):
                if o == d:
                    own_mine = region
                    continue
                if need.empty:
                    continue
                cells = intersect_cells(need, region)
                if cells <= 0:
                    continue
                nb = pr.region_bytes(t, cells)
                tt = pr.link_time(o, d, nb)
                recv[d] += tt
                transfer_s += tt
                energy += (power[o][1] if o != EXTERNAL else 0.0) * tt + power[d][2] * tt
            cells = union_cells(need, own_mine) if own_mine is not None else need.cells
            ws += pr.region_bytes(t, cells)
        # owned live tensors this part does not read
        for t, lst in owners.items():
            if t in part.needs:
                continue
            for o, region in lst:
                if o == d:
                    ws += pr.region_bytes(t, region.cells)
        working[d] = ws
    for d in range(n_dev):
        if has_part[d]:
            continue
        ws = 0
        for t, lst in owners.items():
            for o, region in lst:
                if o == d:
                    ws += pr.region_bytes(t, region.cells)
        working[d] = ws
    if net.medium == "shared":
        tau = transfer_s + max(compute[d] for d in opt.devices)
    else:
        tau = max(recv[d] + compute[d] for d in opt.devices)
    load = tuple(compute[d] + recv[d] for d in range(n_dev))

    e = opt.last
    new = {t: lst for t, lst in owners.items() if last_read.get(t, -1) > e}
    for d, part in zip(opt.devices, geos):
        for t, region in part.owns.items():
            if last_read.get(t, -1) > e and not region.empty:
                new.setdefault(t, ())
                new[t] = new[t] + ((d, region),)
    state = tuple(sorted((t, tuple(sorted(lst, key=lambda x: (x[1].rows, x[1].chans, x[0]))))
                         for t, lst in new.items()))
    arc = Arc(-1, -1, opt, tau, energy, load, transfer_s, tuple(weights), tuple(working))
    return arc, state

"""The evaluator: the one definition of every cost (docs/model.md section 4).

``evaluate(plan, instance)`` returns ``Metrics``: latency (switched or shared medium), energy
in total and per device, period and throughput, per-device memory, feasibility and a
per-stage breakdown. Every planner and every exact formulation is judged by this function.

A stage's cost is assembled in one place, ``price_stage`` (and the final gather in
``price_gather``), the per-stage fixed cost ``stage_overhead_s`` of a device included: the
evaluator prices every stage through it, and so do the exact engine's
arcs (``formulations.stagegraph``), the heuristics' simulator (``planners.common.Sim``) and
DistrEdge, each passing in what it has precomputed (compute seconds, weight and computed
bytes per part). ``Pricer`` holds the cached per-instance numbers under them. The stage graph
prices many options of one stage from one state at once with ``milp_planner.cost.batch``,
this function's sums in its order, vectorised (tests/test_batch_pricing.py: the same floats).

Decisions where docs/model.md leaves room (also in docs/cost-model.md):
- A part's need of an external tensor read by several layers of its stage is the one interval
  covering all of them (as for computed rows).
- A layer that is not row-splittable inside an ``axis: none`` stage is computed whole if any
  of its rows are needed.
- A channel part stores ``round(params x share)`` weight elements (round half up).
- A device that computes nothing in a stage has compute 0 there; a device with no part
  receives nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping, Sequence

from milp_planner.instance.devices import layer_time
from milp_planner.model.graph import last_readers
from milp_planner.space.geometry import (
    PartGeometry,
    Region,
    full_region,
    intersect_cells,
    stage_geometry,
    tensor_grid,
)
from milp_planner.instance import Instance
from milp_planner.space.plan import Plan, check_plan

EXTERNAL = -1  # the external source or sink node


@dataclass
class Transfer:
    tensor: str
    src: int  # device index, or EXTERNAL for an external source
    dst: int  # device index, or EXTERNAL for an external sink
    bytes: int
    time_s: float


@dataclass
class StageCost:
    first: int
    last: int
    axis: str
    parts: list[tuple[int, tuple[int, int] | None]]  # (device, range)
    compute_s: dict[int, float]
    recv_s: dict[int, float]
    bytes_in: dict[int, int]
    transfers: list[Transfer]
    tau_s: float
    working_set: dict[int, int]


@dataclass
class Metrics:
    latency_s: float
    energy_j: float
    energy_per_device_j: dict[str, float]
    period_s: float
    memory_bytes: dict[str, int]
    feasible: bool
    violations: list[str]
    in_space: bool
    space_reasons: list[str]
    stages: list[StageCost]
    gather: list[Transfer]
    gather_s: float
    lower_bound_s: float
    device_names: list[str] = field(default_factory=list)

    @property
    def throughput_ips(self) -> float:
        return 1.0 / self.period_s if self.period_s > 0 else float("inf")

    @property
    def max_memory_bytes(self) -> int:
        return max(self.memory_bytes.values()) if self.memory_bytes else 0

    def value(self, objective: str) -> float:
        """The value of ``objective`` (latency | energy | period | memory) for this plan."""
        return {
            "latency": self.latency_s,
            "energy": self.energy_j,
            "period": self.period_s,
            "memory": float(self.max_memory_bytes),
        }[objective]

    def to_dict(self) -> dict:
        names = self.device_names

        def name(i):
            return "external" if i == EXTERNAL else names[i]

        def tr(t: Transfer):
            return {"tensor": t.tensor, "from": name(t.src), "to": name(t.dst), "bytes": t.bytes, "time_s": t.time_s}

        stages = []
        for s in self.stages:
            stages.append({
                "first": s.first,
                "last": s.last,
                "axis": s.axis,
                "tau_s": s.tau_s,
                "parts": [
                    {
                        "device": names[d],
                        "range": list(r) if r is not None else None,
                        "compute_s": s.compute_s.get(d, 0.0),
                        "recv_s": s.recv_s.get(d, 0.0),
                        "bytes_in": s.bytes_in.get(d, 0),
                    }
                    for d, r in s.parts
                ],
                "transfers": [tr(t) for t in s.transfers],
            })
        return {
            "latency_s": self.latency_s,
            "energy_j": self.energy_j,
            "energy_per_device_j": self.energy_per_device_j,
            "period_s": self.period_s,
            "throughput_ips": self.throughput_ips,
            "memory_bytes": self.memory_bytes,
            "max_memory_bytes": self.max_memory_bytes,
            "feasible": self.feasible,
            "violations": self.violations,
            "in_space": self.in_space,
            "space_reasons": self.space_reasons,
            "lower_bound_s": self.lower_bound_s,
            "gather_s": self.gather_s,
            "gather": [tr(t) for t in self.gather],
            "stages": stages,
        }


class Pricer:
    """Prices geometry on one instance: compute times, transfer times, bytes. Cached.

    The evaluator and the exact formulations share it, so they compute the same numbers.
    """

    def __init__(self, instance: Instance):
        self.instance = instance
        self.graph = instance.graph
        self.geometry = stage_geometry(instance.graph)  # shared by the pricers of one graph (sub-fleets)
        self.net = instance.network
        self.n_dev = len(instance.devices)
        self._time: dict = {}
        self._part_time: dict = {}
        self._lower_bound: float | None = None
        self._io = {}
        g = self.graph
        dt = instance.dtype_bytes
        for layer in g.layers:
            io = sum(g.elements(t) for t in layer.inputs) + g.elements(layer.output)
            self._io[layer.id] = (io * dt, layer.params * dt)
        self._unit = {}
        net = instance.network
        #: seconds charged once to each device for each stage in which it computes a part
        self.stage_overhead = tuple(float(d.compute.stage_overhead_s) for d in instance.devices)
        #: (compute, tx, rx) watts of each device, as floats
        self.power = tuple((float(d.power.compute_w), float(d.power.tx_w), float(d.power.rx_w))
                           for d in instance.devices)
        #: the last layer reading each tensor (graph outputs: the number of layers)
        self.last_read = last_readers(g)
        self.shared = net.medium == "shared"
        self.source = EXTERNAL if net.source.external else net.source.device
        self.sink = EXTERNAL if net.sink.external else net.sink.device

    def unit_bytes(self, tensor: str) -> int:
        """Bytes of one (row, channel) cell of ``tensor``."""
        u = self._unit.get(tensor)
        if u is None:
            u = self._unit[tensor] = tensor_grid(self.graph, tensor)[2] * self.instance.dtype_bytes
        return u

    def layer_time(self, d: int, lid: int, fraction: Fraction, axis: str = "rows") -> float:
        key = (d, lid, fraction, axis)
        t = self._time.get(key)
        if t is None:
            io, wb = self._io[lid]
            t = float(layer_time(self.instance.devices[d].compute, self.graph.layers[lid], float(fraction), io, wb,
                                 axis))
            self._time[key] = t
        return t

    def compute_time(self, d: int, part: PartGeometry) -> float:
        """Seconds device ``d`` spends computing ``part`` (overheads of touched layers included)."""
        return sum(self.layer_time(d, lid, f, part.axis) for lid, f in part.fraction.items())

    def part_time(self, d: int, part: PartGeometry) -> float:
        """``compute_time``, remembered per part: for callers that price the same parts again
        and again (the evaluator, the heuristics' searches); the exact engine precomputes its own."""
        key = (id(part), d)
        hit = self._part_time.get(key)
        if hit is not None and hit[0] is part:  # the part is held in the value, so its id is not reused
            return hit[1]
        t = self.compute_time(d, part)
        self._part_time[key] = (part, t)
        return t

    def weight_bytes(self, part: PartGeometry, axis: str) -> dict[int, int]:
        """Weight bytes per layer the part touches (a channel part: its share, round half up)."""
        out = {}
        dt = self.instance.dtype_bytes
        for lid, f in part.fraction.items():
            params = self.graph.layers[lid].params
            if axis == "channels":
                q = params * f
                params = (2 * q.numerator + q.denominator) // (2 * q.denominator)
            out[lid] = params * dt
        return out

    def region_bytes(self, tensor: str, cells: int) -> int:
        return cells * self.unit_bytes(tensor)

    def link_time(self, src: int, dst: int, nbytes: int) -> float:
        """One message of ``nbytes`` from ``src`` to ``dst`` (either may be EXTERNAL)."""
        if nbytes <= 0:
            return 0.0
        if src == EXTERNAL:
            return self.net.source.link_time(dst, nbytes)
        if dst == EXTERNAL:
            return self.net.sink.link_time(src, nbytes)
        return self.net.transfer_time(src, dst, nbytes)

    def computed_bytes(self, part: PartGeometry) -> int:
        g = self.graph
        return sum(r.cells * self.unit_bytes(g.layers[lid].output) for lid, r in part.computed.items())


def _pricer(instance: Instance) -> Pricer:
    # keyed by the objects themselves (not their ids, which Python reuses after collection)
    key = (instance.graph, instance.devices, instance.network, instance.dtype_bytes)
    p = getattr(instance, "_pricer", None)
    if p is None or any(a is not b for a, b in zip(p[0][:3], key[:3])) or p[0][3] != key[3]:
        instance._pricer = (key, Pricer(instance))
    return instance._pricer[1]


def pricer(instance: Instance) -> Pricer:
    """The cached ``Pricer`` of ``instance``."""
    return _pricer(instance)


Owners = Mapping[str, Sequence[tuple[int, Region]]]
"""Ownership state: tensor -> (device or ``EXTERNAL``, region it owns), for every live tensor."""


@dataclass(slots=True)
class StagePrice:
    """Every cost of one stage priced from one ownership state (docs/model.md section 4).

    Per-device lists are indexed by device. A device without a part computes and receives
    nothing and stores no weights; its working set is what it owns of the live tensors."""

    tau: float  # stage time: switched max_d(recv + compute); shared sum(messages) + max_d(compute)
    energy: float  # J: compute, send and receive energy of the stage (sum of ``energy_dev``)
    energy_dev: list[float]  # J per device (an external source draws none)
    compute: list[float]  # s per device
    recv: list[float]  # s per device: the sum of its incoming messages
    bytes_in: list[int]  # bytes each device receives
    transfer_s: float  # the sum of every message's seconds (what a shared medium carries)
    weights: list[int] | None  # weight bytes of the layers each device computes here (None: not asked)
    working: list[int] | None  # working set of each device during the stage (None: not asked)
    owners: dict[str, tuple[tuple[int, Region], ...]] | None  # the next state (None: not asked)
    transfers: list[Transfer] | None  # every message in the evaluator's order (None: not asked)

    @property
    def load(self) -> list[float]:
        """Compute + receive seconds of each device (its share of the period)."""
        return [c + r for c, r in zip(self.compute, self.recv)]


@dataclass(slots=True)
class GatherPrice:
    """The final gather of the graph outputs at the sink (docs/model.md section 4)."""

    seconds: float  # the sum of the gather's messages (latency's last term)
    energy: float  # J, the sum of ``energy_dev``
    energy_dev: list[float]  # J per device: senders' transmit, the sink's receive
    load: list[float]  # s per device: the gather counted as the sink device's receive (period)
    transfers: list[Transfer] | None  # every message (None: not asked)


def initial_owners(pr: Pricer) -> dict[str, tuple[tuple[int, Region], ...]]:
    """The ownership state before the first stage: the source owns every graph input that is read."""
    g, lr = pr.graph, pr.last_read
    return {t: ((pr.source, full_region(g, t)),) for t in g.inputs if lr.get(t, -1) >= 0}


def price_stage(pr: Pricer, owners: Owners, last: int, devices: Sequence[int], geos: Sequence[PartGeometry],
                comp: Sequence[float] | None = None, weights: Sequence[int] | None = None,
                computed: Sequence[int] | None = None, *, memory: bool = True,
                detail: bool = False, successor: bool = True) -> StagePrice:
    """Price one stage ending at layer ``last`` from the ownership state ``owners``.

    This is the one place a stage's cost is assembled: the evaluator, the exact engine's arcs,
    the heuristics' ``Sim`` and DistrEdge all call it. ``devices[i]`` computes part
    ``geos[i]`` (from ``pr.geometry.parts``). What a caller has precomputed per part is
    passed in: ``comp`` (compute seconds on its device, ``pr.compute_time``), ``weights``
    (weight bytes, ``pr.weight_bytes`` summed) and ``computed`` (``pr.computed_bytes``); left
    ``None`` they are computed here; either way each device's ``stage_overhead_s`` is added
    here, once, when its part computes anything (lower bounds elsewhere may leave it out: it
    only adds cost). ``owners`` must hold only tensors live at the stage (a
    previous ``StagePrice.owners`` or ``initial_owners``). ``memory=False`` skips the weights
    and working sets (latency, energy and period do not need them); ``detail=True`` lists every
    message; ``successor=False`` leaves the next state out (``owners`` None: a caller that has it).
    """
    n_dev = pr.n_dev
    power = pr.power
    link_time = pr.link_time
    units = pr._unit
    compute = [0.0] * n_dev
    recv = [0.0] * n_dev
    bytes_in = [0] * n_dev
    energy_dev = [0.0] * n_dev
    wts = [0] * n_dev if memory else None
    transfers: list[Transfer] | None = [] if detail else None
    transfer_s = 0.0
    ws: list[int] | None = None
    if memory:
        # what each device owns of the live tensors; a part's working set adds what it reads and
        # computes, and counts a read tensor once as the union of its need and what it owns
        ws = [0] * n_dev
        for t, lst in owners.items():
            u = units.get(t) or pr.unit_bytes(t)
            for o, region in lst:
                if o >= 0:
                    ws[o] += region.cells * u
    stage_overhead = pr.stage_overhead
    for i, d in enumerate(devices):
        part = geos[i]
        c = comp[i] if comp is not None else pr.part_time(d, part)
        if stage_overhead[d] and any(f > 0 for f in part.fraction.values()):
            c += stage_overhead[d]  # once per stage in which d computes a part (docs/model.md section 4)
        compute[d] = c
        if wts is not None:
            wts[d] = weights[i] if weights is not None else sum(pr.weight_bytes(part, part.axis).values())
        energy_dev[d] += power[d][0] * c
        rx = power[d][2]
        r = 0.0
        b_in = 0
        extra = 0
        for t, need in part.needs.items():
            u = units.get(t) or pr.unit_bytes(t)
            own_mine = None
            for o, region in owners[t]:
                if o == d:
                    own_mine = region
                    continue
                if need.empty:
                    continue
                cells = intersect_cells(need, region)
                if cells <= 0:
                    continue
                nb = cells * u
                tt = link_time(o, d, nb)
                r += tt
                b_in += nb
                if o != EXTERNAL:
                    energy_dev[o] += power[o][1] * tt
                energy_dev[d] += rx * tt
                if transfers is not None:
                    transfers.append(Transfer(t, o, d, nb, tt))
            if ws is not None:
                extra += (need.cells if own_mine is None else need.cells - intersect_cells(need, own_mine)) * u
        recv[d] = r
        bytes_in[d] = b_in
        transfer_s += r
        if ws is not None:
            ws[d] += extra + (computed[i] if computed is not None else pr.computed_bytes(part))
    if pr.shared:
        tau = transfer_s + max(compute[d] for d in devices)
    else:
        tau = max(recv[d] + compute[d] for d in devices)

    return StagePrice(tau, sum(energy_dev), energy_dev, compute, recv, bytes_in, transfer_s, wts, ws,
                      next_owners(pr, owners, last, devices, geos) if successor else None, transfers)


def next_owners(pr: Pricer, owners: Owners, last: int, devices: Sequence[int],
                geos: Sequence[PartGeometry]) -> dict[str, tuple[tuple[int, Region], ...]]:
    """The ownership state after a stage ending at ``last`` (``StagePrice.owners``): the tensors
    still live, each owned as before or, when the stage writes it, by the parts that own it."""
    lr = pr.last_read
    new = {t: lst for t, lst in owners.items() if lr.get(t, -1) > last}
    for d, part in zip(devices, geos):
        for t, region in part.owns.items():
            if not region.empty and lr.get(t, -1) > last:
                new[t] = new.get(t, ()) + ((d, region),)
    return new


def price_gather(pr: Pricer, owners: Owners, *, detail: bool = False) -> GatherPrice:
    """Price sending every graph output's owned regions to the sink (after the last stage)."""
    n_dev = pr.n_dev
    sink, power = pr.sink, pr.power
    energy_dev = [0.0] * n_dev
    transfers: list[Transfer] | None = [] if detail else None
    secs = 0.0
    for t in pr.graph.outputs:
        for o, region in owners.get(t, ()):
            if o == sink or o == EXTERNAL:
                continue
            nb = pr.region_bytes(t, region.cells)
            if nb <= 0:
                continue
            tt = pr.link_time(o, sink, nb)
            secs += tt
            energy_dev[o] += power[o][1] * tt
            if sink != EXTERNAL:
                energy_dev[sink] += power[sink][2] * tt
            if transfers is not None:
                transfers.append(Transfer(t, o, sink, nb, tt))
    load = [0.0] * n_dev
    if sink != EXTERNAL:
        load[sink] = secs
    return GatherPrice(secs, sum(energy_dev), energy_dev, load, transfers)


def normalized_stages(plan: Plan, instance: Instance):
    """(first, last, axis, [(device index, range)]) per stage; one-part stages become ``none``."""
    out = []
    for s in plan.stages:
        axis = s.axis if len(s.parts) > 1 else "none"
        parts = [(instance.device_index(p.device), p.range if axis != "none" else None) for p in s.parts]
        if axis != "none":
            parts.sort(key=lambda x: x[1])
        out.append((s.first, s.last, axis, parts))
    return out


def evaluate(plan: Plan, instance: Instance, check: bool = True) -> Metrics:
    """Every cost of ``plan`` on ``instance`` (raises ``PlannerError`` if the plan is broken)."""
    if check:
        check_plan(plan, instance)
    from milp_planner.space.cuts import out_of_space

    reasons = out_of_space(plan, instance)
    return evaluate_stages(normalized_stages(plan, instance), instance, reasons)


#: a latency, energy or period within this relative slack above its cap meets it (a plan exactly
#: at a cap, up to the floating-point sums, is feasible; docs/model.md section 4)
CAP_SLACK = 1e-9
#: relative: how far a search's own float sum of a plan may lie from the evaluator's
SUM_NOISE = 1e-12


def within_cap(value: float, cap) -> bool:
    """Whether ``value`` meets ``cap`` (the evaluator's rule)."""
    return value <= float(cap) * (1 + CAP_SLACK)


def cap_limit(cap) -> float:
    """The largest sum a search may accept under ``cap``: the evaluator's limit, widened by the
    noise of a float sum taken in another order (never by an absolute amount: a millijoule plan
    is told apart from its cap as finely as a joule one)."""
    return float(cap) * (1 + CAP_SLACK) * (1 + SUM_NOISE)


def evaluate_stages(stages, instance: Instance, space_reasons=()) -> Metrics:
    """Evaluate already normalized stages (see ``normalized_stages``); no structural checks."""
    pr = _pricer(instance)
    geo, net = pr.geometry, instance.network
    n_dev = len(instance.devices)
    devs = range(n_dev)

    owners = initial_owners(pr)
    stage_costs: list[StageCost] = []
    weights = [0] * n_dev  # weight bytes of every layer a device computes (each layer is in one stage)
    ws_max = [0] * n_dev
    energy_dev = [0.0] * n_dev
    load = [0.0] * n_dev  # per-device compute + receive, for the period
    all_transfer_s = 0.0

    for first, last, axis, parts in stages:
        devices = [d for d, _ in parts]
        sp = price_stage(pr, owners, last, devices, geo.parts(first, last, axis, [r for _, r in parts]),
                         detail=True)
        for d in devs:
            weights[d] += sp.weights[d]
            ws_max[d] = max(ws_max[d], sp.working[d])
            energy_dev[d] += sp.energy_dev[d]
            load[d] += sp.compute[d] + sp.recv[d]
        all_transfer_s += sp.transfer_s
        stage_costs.append(StageCost(first, last, axis, list(parts), {d: sp.compute[d] for d in devices},
                                     {d: sp.recv[d] for d in devices}, {d: sp.bytes_in[d] for d in devices},
                                     sp.transfers, sp.tau, dict(enumerate(sp.working))))
        owners = sp.owners

    # Gather the graph outputs at the sink.
    gp = price_gather(pr, owners, detail=True)
    gather, gather_s = gp.transfers, gp.seconds
    for d in devs:
        energy_dev[d] += gp.energy_dev[d]
        load[d] += gp.load[d]
    all_transfer_s += gather_s

    latency = sum(s.tau_s for s in stage_costs) + gather_s
    period = max(load) if load else 0.0
    if net.medium == "shared":
        period = max(period, all_transfer_s)

    names = instance.device_names
    memory = {names[d]: weights[d] + ws_max[d] for d in devs}
    energy_per_device = {names[d]: energy_dev[d] for d in devs}
    energy = sum(energy_dev)

    violations = []
    c = instance.constraints
    if c.memory:
        for d, dev in enumerate(instance.devices):
            if dev.memory_bytes is not None and memory[dev.name] > dev.memory_bytes:
                violations.append(
                    f"memory of {dev.name}: {memory[dev.name]} bytes exceed its {dev.memory_bytes} bytes")
    if c.latency_s is not None and not within_cap(latency, c.latency_s):
        violations.append(f"latency {latency * 1e3:.6g} ms exceeds the cap {float(c.latency_s) * 1e3:.6g} ms")
    if c.energy_j is not None and not within_cap(energy, c.energy_j):
        violations.append(f"energy {energy:.6g} J exceeds the cap {float(c.energy_j):.6g} J")
    if c.period_s is not None and not within_cap(period, c.period_s):
        violations.append(f"period {period * 1e3:.6g} ms exceeds the cap {float(c.period_s) * 1e3:.6g} ms")

    return Metrics(
        latency_s=latency,
        energy_j=energy,
        energy_per_device_j=energy_per_device,
        period_s=period,
        memory_bytes=memory,
        feasible=not violations,
        violations=violations,
        in_space=not space_reasons,
        space_reasons=list(space_reasons),
        stages=stage_costs,
        gather=gather,
        gather_s=gather_s,
        lower_bound_s=lower_bound_latency(instance),
        device_names=names,
    )


def lower_bound_latency(instance: Instance) -> float:
    """Latency no plan can beat: the latency floor of ``milp_planner.cost.floors`` (the work
    spread at best over the devices, communication free; valid for every cost model)."""
    from milp_planner.cost.floors import lower_floor  # it imports the layers the evaluator prices

    pr = _pricer(instance)
    if pr._lower_bound is None:
        pr._lower_bound = lower_floor(instance, "latency").value
    return pr._lower_bound


@dataclass(frozen=True)
class Message:
    """One message the evaluator counts: ``stage`` is the stage index, or the number of stages
    for the final gather at the sink; ``src``/``dst`` are device indices or ``EXTERNAL``."""

    stage: int
    tensor: str
    src: int
    dst: int
    bytes: int
    time_s: float


def messages(plan: Plan, instance: Instance) -> list[Message]:
    """Every message ``evaluate`` prices, in its order (stage by stage, then the gather).

    Read off the same ``Metrics`` the costs come from, so the list and the prices cannot
    diverge: one message per tensor per device pair with bytes > 0 (docs/model.md section 4).
    """
    m = evaluate(plan, instance)
    out = [Message(si, t.tensor, t.src, t.dst, t.bytes, t.time_s)
           for si, s in enumerate(m.stages) for t in s.transfers]
    out += [Message(len(m.stages), t.tensor, t.src, t.dst, t.bytes, t.time_s) for t in m.gather]
    return out

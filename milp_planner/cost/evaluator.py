"""The evaluator: the one definition of every cost (docs/model.md section 4).

``evaluate(plan, instance)`` returns ``Metrics``: latency (switched or shared medium), energy
in total and per device, period and throughput, per-device memory, feasibility and a
per-stage breakdown. Every planner and every exact formulation is judged by this function,
and the formulations price their choices through ``Pricer``, the same code it uses.

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

from milp_planner.instance.devices import layer_time
from milp_planner.space.geometry import (
    PartGeometry,
    Region,
    StageGeometry,
    full_region,
    intersect_cells,
    tensor_grid,
    union_cells,
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
        self.geometry = StageGeometry(instance.graph)
        self.net = instance.network
        self.n_dev = len(instance.devices)
        self._time: dict = {}
        self._io = {}
        g = self.graph
        dt = instance.dtype_bytes
        for layer in g.layers:
            io = sum(g.elements(t) for t in layer.inputs) + g.elements(layer.output)
            self._io[layer.id] = (io * dt, layer.params * dt)
        self._unit = {}

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


def evaluate_stages(stages, instance: Instance, space_reasons=()) -> Metrics:
    """Evaluate already normalized stages (see ``normalized_stages``); no structural checks."""
    pr = _pricer(instance)
    g, geo, net = instance.graph, pr.geometry, instance.network
    n_dev = len(instance.devices)
    devs = range(n_dev)

    # Which stage reads each tensor last; graph outputs stay live to the end.
    last_reader: dict[str, int] = {}
    stage_of = {}
    for si, (first, last, _, _) in enumerate(stages):
        for lid in range(first, last + 1):
            stage_of[lid] = si
    for layer in g.layers:
        for t in layer.inputs:
            last_reader[t] = max(last_reader.get(t, -1), stage_of[layer.id])
    for t in g.outputs:
        last_reader[t] = len(stages)

    owners: dict[str, list[tuple[int, Region]]] = {}
    src = net.source.device if not net.source.external else EXTERNAL
    for t in g.inputs:
        owners[t] = [(src, full_region(g, t))]

    stage_costs: list[StageCost] = []
    weights: list[dict[int, int]] = [dict() for _ in devs]
    ws_max = [0] * n_dev
    energy_dev = [0.0] * n_dev
    load = [0.0] * n_dev  # per-device compute + receive, for the period
    all_transfer_s = 0.0
    pw = [(float(d.power.compute_w), float(d.power.tx_w), float(d.power.rx_w)) for d in instance.devices]

    for si, (first, last, axis, parts) in enumerate(stages):
        geos = geo.parts(first, last, axis, [r for _, r in parts])
        compute, recv, bytes_in, transfers = {}, {}, {}, []
        reads: dict[int, dict[str, Region]] = {}
        for (d, _), part in zip(parts, geos):
            compute[d] = pr.compute_time(d, part)
            for lid, wb in pr.weight_bytes(part, axis).items():
                weights[d][lid] = max(weights[d].get(lid, 0), wb)
            r_s, b_in = 0.0, 0
            for t, need in part.needs.items():
                if need.empty:
                    continue
                for o, region in owners[t]:
                    if o == d:
                        continue
                    cells = intersect_cells(need, region)
                    if cells <= 0:
                        continue
                    nb = pr.region_bytes(t, cells)
                    tt = pr.link_time(o, d, nb)
                    transfers.append(Transfer(t, o, d, nb, tt))
                    r_s += tt
                    b_in += nb
            recv[d], bytes_in[d] = r_s, b_in
            reads[d] = part.needs
        stage_transfer_s = sum(t.time_s for t in transfers)
        if net.medium == "shared":
            tau = stage_transfer_s + max(compute.values())
        else:
            tau = max(recv[d] + compute[d] for d in compute)
        all_transfer_s += stage_transfer_s
        for t in transfers:
            if t.src != EXTERNAL:
                energy_dev[t.src] += pw[t.src][1] * t.time_s
            energy_dev[t.dst] += pw[t.dst][2] * t.time_s
        for d in compute:
            energy_dev[d] += pw[d][0] * compute[d]
            load[d] += compute[d] + recv[d]

        # Working set of every device during this stage.
        ws = {}
        computed = {d: pr.computed_bytes(part) for (d, _), part in zip(parts, geos)}
        for d in devs:
            total = computed.get(d, 0)
            mine = reads.get(d, {})
            seen = set()
            for t, need in mine.items():
                seen.add(t)
                own = _owned(owners.get(t, ()), d)
                cells = union_cells(need, own) if own is not None and last_reader.get(t, -1) >= si else need.cells
                total += pr.region_bytes(t, cells)
            for t, lst in owners.items():
                if t in seen or last_reader.get(t, -1) < si:
                    continue
                own = _owned(lst, d)
                if own is not None:
                    total += pr.region_bytes(t, own.cells)
            ws[d] = total
            ws_max[d] = max(ws_max[d], total)

        for (d, _), part in zip(parts, geos):
            for t, region in part.owns.items():
                if not region.empty:
                    owners.setdefault(t, []).append((d, region))
        stage_costs.append(StageCost(first, last, axis, list(parts), compute, recv, bytes_in, transfers, tau, ws))

    # Gather the graph outputs at the sink.
    sink = net.sink.device if not net.sink.external else EXTERNAL
    gather: list[Transfer] = []
    for t in g.outputs:
        for o, region in owners.get(t, ()):
            if o == sink or o == EXTERNAL:
                continue
            nb = pr.region_bytes(t, region.cells)
            if nb > 0:
                gather.append(Transfer(t, o, sink, nb, pr.link_time(o, sink, nb)))
    gather_s = sum(t.time_s for t in gather)
    for t in gather:
        energy_dev[t.src] += pw[t.src][1] * t.time_s
        if sink != EXTERNAL:
            energy_dev[sink] += pw[sink][2] * t.time_s
    all_transfer_s += gather_s
    if sink != EXTERNAL:
        load[sink] += gather_s

    latency = sum(s.tau_s for s in stage_costs) + gather_s
    period = max(load) if load else 0.0
    if net.medium == "shared":
        period = max(period, all_transfer_s)

    names = instance.device_names
    memory = {names[d]: sum(weights[d].values()) + ws_max[d] for d in devs}
    energy_per_device = {names[d]: energy_dev[d] for d in devs}
    energy = sum(energy_dev)

    violations = []
    c = instance.constraints
    if c.memory:
        for d, dev in enumerate(instance.devices):
            if dev.memory_bytes is not None and memory[dev.name] > dev.memory_bytes:
                violations.append(
                    f"memory of {dev.name}: {memory[dev.name]} bytes exceed its {dev.memory_bytes} bytes")
    if c.latency_s is not None and latency > float(c.latency_s) * (1 + 1e-9):
        violations.append(f"latency {latency * 1e3:.6g} ms exceeds the cap {float(c.latency_s) * 1e3:.6g} ms")
    if c.energy_j is not None and energy > float(c.energy_j) * (1 + 1e-9):
        violations.append(f"energy {energy:.6g} J exceeds the cap {float(c.energy_j):.6g} J")
    if c.period_s is not None and period > float(c.period_s) * (1 + 1e-9):
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


def _owned(owner_list, d: int) -> Region | None:
    for o, region in owner_list:
        if o == d:
            return region
    return None


def lower_bound_latency(instance: Instance) -> float:
    """Latency no plan can beat: the work spread perfectly over all devices, communication free.

    Each device d alone needs T_d for the whole model (per-layer overheads left out, which
    keeps the bound valid for any split); the best perfectly divisible schedule then takes
    1 / sum_d (1 / T_d).
    """
    pr = _pricer(instance)
    rate = 0.0
    for d, dev in enumerate(instance.devices):
        total = 0.0
        for layer in instance.graph.layers:
            t_full = pr.layer_time(d, layer.id, Fraction(1))
            tables = [dev.compute.points(layer.name, ax) for ax in ("rows", "channels")]
            if dev.compute.kind != "table" or tables[0] is None:
                t_full -= float(dev.compute.overhead_s)
            else:
                # slope bound for measured tables: smallest time per unit of fraction, either axis
                t_full = min(float(t) / float(f) for pts in tables for f, t in pts if f > 0)
            total += max(t_full, 0.0)
        if total > 0:
            rate += 1.0 / total
        else:
            return 0.0
    return 1.0 / rate if rate > 0 else 0.0


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

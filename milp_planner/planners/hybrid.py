"""``hybrid``: a pipeline of device groups, every layer of a group's range split within the group.

The structure of Alpa's inter-/intra-operator planner, DistrEdge and HiDP: the layers (in graph
order) are cut into contiguous ranges, each range runs on its own group of devices (groups
disjoint, at most ``max_parts`` devices), and inside a range every stage is split over the
group's devices (data parallelism inside a group, pipeline parallelism between groups). A group
of one device is PipeEdge's case.

The search is a dynamic program per *device order* (a sequence of all devices):

- groups are contiguous segments of the order, in pipeline order. The orders (``device_orders``):
  by speed (fastest first: interchangeable devices, ``formulations/symmetry.py``'s types, are
  adjacent, so a segment is "some devices of a type", as PipeEdge's multisets); the source
  device first, then by speed; and, when devices name their machine (``Device.node``), machine
  by machine, the source's machine first, fastest unit first (a group may be a board's CPU and
  GPU or several boards). The DP may leave unused (skip) any device of the machine order and the
  source in the source-first order; none in the speed order (unused devices are the slowest);
- a range's stages: runs of at most ``fusion`` row-splittable layers split by rows (each group's
  sweep tries 1 and ``fusion_limit``; one device: single layers); a layer that cannot be
  row-split is split by channels where it and the space allow it, else whole on the group's
  fastest device. Cuts come from the instance's split families (``space/cuts.py``):
  ``capacity`` when listed and the group's speeds differ, else ``equal``; with only ``any`` the
  capacity cuts, with only ``grid:G`` the capacity cuts snapped to the grid. So every plan is in
  the space (a layer extent smaller than the group uses the group's fastest devices);
- the DP state is (layers done, position in the order), and it keeps for each state one
  ``Label``: the best partial plan reaching it, with its real ownership of the live tensors,
  per-device loads (compute + receive), latency, energy and memory (weights + largest working
  set). A group's stages are priced by the evaluator's own ``price_stage`` from that ownership,
  so skip connections and branches (ResNet, GoogLeNet, DenseNet) cost what the evaluator says,
  and a label's value is exactly the evaluator's for its partial plan (the gather at the sink is
  added at the end). The objective's value of a label: the largest device load (period; on a
  shared medium also the sum of all transfers), the sum of stage times (latency) or energies
  (energy), the largest device memory (memory).

Approximations (every returned plan is scored by ``evaluate``):

- one label per state (the best by the objective, then by total load): a partial plan that is
  worse now but leaves a cheaper ownership for the next group is dropped; so is a label when a
  label with more layers done and no more devices used is no worse (``_ahead``);
- only the orders above are segmented;
- groups of two or more devices start and end their ranges only where the fewest tensors are live
  (``range_ends``: between ResNet blocks, everywhere on a chain; topped up to ``MIN_RANGE_ENDS``
  by the fewest live bytes); single devices anywhere (PipeEdge's cuts inside blocks);
- a remaining-work bound (``_Pricing.rest_bound``: linear in the layers' work share, times
  ``REST_SLACK``) prunes states and sweeps that cannot beat the best plan.

Passes: the fastest device alone (always, milliseconds), then one DP per device order. For the
period, every order is first run under a target that grows by ``TARGET_STEP`` from the ideal
period (all devices' rates summed) until some order meets it (``_levels``: the sweeps of a tight
target stop early, so the levels that fail cost little), with groups of one device only (cheap
sweeps: a pipeline plan early), then with groups under that plan's value. The other objectives
prune at the best plan's value (pipelines first when the fastest device alone breaks a memory
cap and so gives no bound). A group's sweep over range ends stops once its value reaches
the bound (all four values only grow along a plan). With memory caps, labels that break a cap
are dropped (memory is not tracked when no plan can break a cap, ``memory_ceiling``); if no plan
meets the caps, the DP is run again without them and its plan is returned (reported
infeasible). At ``ctx.deadline`` the best complete plan so far is returned, status ``timeout``.

Options: ``fusions`` (which stage lengths to try: ``both`` = 1 and ``fusion_limit``, ``single``,
``fused``), ``orders`` (``all``, ``speed``, or ``auto``: all for the period, speed for the other
objectives, whose sums prune less and rarely gain from the other orders), ``max_group`` (the most
devices in a group; default and at most ``max_parts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from milp_planner.deadline import NEVER, Deadline, DeadlinePassed
from formulations.stagegraph import memory_ceiling
from milp_planner.cost.evaluator import Metrics, StagePrice, price_gather, price_stage, pricer
from milp_planner.instance import Instance
from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import Sim, StageT, evaluate_tuples, fastest_device, norm_stage, per_layer, score
from milp_planner.space.plan import Plan
from milp_planner.space.cuts import (
    capacity_cuts,
    equal_cuts,
    grid_points,
    ranges_from_cuts,
    snap_to_points,
    speeds,
    stage_extent,
)

INF = float("inf")
PRICE_CACHE = 200_000  # stage prices remembered (each holds an ownership map)
#: a range end is kept where the fewest tensors are live; if that leaves fewer than this many,
#: the ends with the fewest live bytes are added (DenseNet's dense blocks)
MIN_RANGE_ENDS = 24
#: the remaining-work bound prunes a state only when it is this far above the incumbent: the
#: bound is linear in the layers' work share and ignores overheads and transfers
REST_SLACK = 0.9
#: the period target grows by this factor per level (from the ideal period), at most this many levels
TARGET_STEP = 1.25
MAX_LEVELS = 12


@dataclass(frozen=True)
class DeviceOrder:
    """A sequence of devices whose contiguous segments are the candidate groups."""

    name: str
    devices: tuple[int, ...]
    skippable: frozenset = frozenset()  # positions the DP may leave unused before using later ones


@dataclass
class Label:
    """The best partial plan reaching a DP state: what it costs so far and what it leaves."""

    value: float  # the objective's value of the partial plan (gather not yet added)
    tie: float  # tie-break: total load (period) or latency
    owners: dict  # ownership of the tensors live at the boundary
    loads: tuple[float, ...]  # per device: compute + receive seconds
    latency: float
    energy: float
    transfer_s: float  # every message's seconds (a shared medium's period)
    weights: tuple[int, ...] | None  # per device weight bytes (None: memory not tracked)
    working: tuple[int, ...] | None  # per device largest working set
    back: Label | None = None  # the label before the last group
    stages: tuple = field(default=())  # the last group's stages
    group: tuple[int, ...] = ()


@dataclass
class GroupPlan:
    """A complete DP result: its stages, groups and the value the DP computed."""

    stages: list[StageT]
    groups: list[tuple[int, int, tuple[int, ...]]]  # (first layer, last layer, devices)
    value: float
    order: str


class _Pricing:
    """The instance facts the DP needs: pricer, speeds, stage builder, caps."""

    def __init__(self, instance: Instance, objective: str, caps: bool):
        self.instance = instance
        self.obj = objective
        self.sim = Sim(instance)
        self.pr = pricer(instance)
        self.geo = self.pr.geometry
        self.g = instance.graph
        self.n = len(self.g.layers)
        self.n_dev = len(instance.devices)
        self.spd = speeds(instance)
        sp = instance.search
        self.splits = sp.splits
        self.axes = sp.axes
        self.max_parts = max(1, sp.max_parts)
        self.shared = instance.network.medium == "shared"
        self.caps = None
        if caps and instance.memory_capped:
            self.caps = tuple(INF if d.memory_bytes is None else float(d.memory_bytes) for d in instance.devices)
            if min(self.caps) >= memory_ceiling(instance, self.pr):
                self.caps = None  # no plan can break a cap: the DP need not track memory
        self.track_memory = self.caps is not None or objective == "memory"
        self._stage_cache: dict = {}
        self._price_cache: dict = {}
        self._cuts_cache: dict = {}
        self.row_ok = [layer.row_splittable and "rows" in self.axes for layer in self.g.layers]
        self.cut_ok = range_ends(self.sim)
        # remaining work: share of the model's time (on each device alone) in layers i..n-1
        whole = [self.geo.parts(l, l, "none", [None])[0] for l in range(self.n)]
        t = [[self.pr.part_time(d, whole[l]) for l in range(self.n)] for d in range(self.n_dev)]
        tot = [max(sum(row), 1e-300) for row in t]
        self.rate = [1.0 / x for x in tot]  # whole models per second
        self.joules = [float(instance.devices[d].power.compute_w) * tot[d] for d in range(self.n_dev)]
        share = [min(t[d][l] / tot[d] for d in range(self.n_dev)) for l in range(self.n)]
        self.rest = [0.0] * (self.n + 1)
        for l in range(self.n - 1, -1, -1):
            self.rest[l] = self.rest[l + 1] + share[l]

    # -- stages -------------------------------------------------------------------------

    def cuts(self, n: int, devices: Sequence[int]) -> tuple[int, ...] | None:
        """Cut vector for ``len(devices)`` parts of ``n`` from the split families (module doc)."""
        spd = [self.spd[d] for d in devices]
        key = (n, tuple(spd))
        if key not in self._cuts_cache:
            self._cuts_cache[key] = self._cuts(n, spd)
        return self._cuts_cache[key]

    def _cuts(self, n: int, spd: list) -> tuple[int, ...] | None:
        k = len(spd)
        splits = self.splits
        mixed = len(set(spd)) > 1
        options = []
        if "capacity" in splits and mixed:
            options.append(capacity_cuts(n, spd))
        if "equal" in splits:
            options.append(equal_cuts(n, k))
        if "capacity" in splits and not mixed:
            options.append(capacity_cuts(n, spd))
        if "any" in splits:
            options.append(capacity_cuts(n, spd))
        for fam in splits:
            if fam.startswith("grid:"):
                snapped = snap_to_points(list(grid_points(n, int(fam.split(":", 1)[1]))), capacity_cuts(n, spd))
                if snapped is not None:
                    options.append(snapped)
        for c in options:
            pts = (0, *c, n)
            if all(pts[i] < pts[i + 1] for i in range(len(pts) - 1)):
                return tuple(c)
        return None

    def stage(self, first: int, last: int, group: tuple[int, ...]) -> StageT:
        """Layers first..last on ``group`` (fastest first): split by rows, channels or whole."""
        key = (first, last, group)
        hit = self._stage_cache.get(key)
        if hit is not None:
            return hit
        g = self.g
        out = None
        k_max = min(len(group), self.max_parts)
        if k_max >= 2:
            if "rows" in self.axes and all(g.layers[x].row_splittable for x in range(first, last + 1)):
                out = self._split(first, last, "rows", group, k_max)
            if out is None and first == last and "channels" in self.axes and g.layers[last].channel_splittable:
                out = self._split(first, last, "channels", group, k_max)
        if out is None:
            best = max(group, key=lambda d: (self.spd[d], -d))
            out = (first, last, "none", ((best, None),))
        self._stage_cache[key] = out
        return out

    def _split(self, first: int, last: int, axis: str, group, k_max: int) -> StageT | None:
        n = stage_extent(self.instance, last, axis)
        k = min(k_max, n)
        while k >= 2:
            devs = group[:k]
            c = self.cuts(n, devs)
            if c is not None:
                return norm_stage(first, last, axis, list(zip(devs, ranges_from_cuts(c, n))))
            k -= 1
        return None

    def chunks(self, first: int, fusion: int):
        """Yield (chunk start, j, closes) walking right from ``first``: the range first..j ends
        with the stage chunk start..j; ``closes`` when layer j + 1 starts a new stage (runs of at
        most ``fusion`` row-splittable layers; any other layer is a stage of its own)."""
        ok = self.row_ok
        cs = first
        for j in range(first, self.n):
            closes = not ok[j] or j - cs + 1 >= fusion or (j + 1 < self.n and not ok[j + 1])
            yield cs, j, closes
            if closes:
                cs = j + 1

    # -- labels -------------------------------------------------------------------------

    def price(self, owners: dict, st: StageT) -> StagePrice:
        """``price_stage`` of ``st`` from ``owners``, remembered: the sweeps of one group from
        different range starts price the same stages from the same ownership again and again."""
        first, last, axis, parts = st
        key = (st, self.sim.key(owners, first))
        hit = self._price_cache.get(key)
        if hit is None:
            if len(self._price_cache) >= PRICE_CACHE:
                self._price_cache.clear()
            hit = self._price_cache[key] = price_stage(
                self.pr, owners, last, [d for d, _ in parts], self.geo.parts(first, last, axis, [r for _, r in parts]),
                memory=self.track_memory)
        return hit

    def rest_bound(self, i: int, devices: Sequence[int]) -> float:
        """A rough lower bound on what layers i..n-1 add on ``devices``, times ``REST_SLACK``.
        Layer l takes at least ``share[l] / rate[d]`` seconds on device d alone (its least share
        of a device's whole-model time), so split over a set it takes at least ``share[l]`` over
        the set's summed rates: for period over all ``devices``, for latency over the
        ``max_parts`` fastest; energy is at least ``share[l]`` times the least joules per model
        (compute watts / rate). Memory: 0. (Fixed overheads and transfers only add.)"""
        return self.rest_from(i, self.rest_factor(devices))

    def rest_factor(self, devices: Sequence[int]) -> float:
        """What ``rest_bound`` multiplies the work share by for ``devices``."""
        if self.obj == "memory":
            return 0.0
        if not devices:
            return INF
        if self.obj == "energy":
            return REST_SLACK * min(self.joules[d] for d in devices)
        rates = [self.rate[d] for d in devices]
        if self.obj == "latency" and len(rates) > self.max_parts:
            rates = sorted(rates, reverse=True)[:self.max_parts]
        total = sum(rates)
        return INF if total <= 0 else REST_SLACK / total

    def rest_from(self, i: int, factor: float) -> float:
        """``rest_bound`` of layers i..n-1 from a ``rest_factor``."""
        return 0.0 if i >= self.n or factor == 0 else self.rest[i] * factor

    def combine(self, value: float, rest: float) -> float:
        """The objective's value of a partial plan worth ``value`` followed by ``rest``."""
        return max(value, rest) if self.obj in ("period", "memory") else value + rest

    def start_label(self) -> Label:
        mem = self.track_memory
        zeros = tuple([0] * self.n_dev) if mem else None
        return Label(0.0, 0.0, self.sim.initial(), tuple([0.0] * self.n_dev), 0.0, 0.0, 0.0, zeros, zeros)

    def value(self, loads, latency, energy, transfer_s, weights, working) -> float:
        if self.obj == "period":
            v = max(loads)
            return max(v, transfer_s) if self.shared else v
        if self.obj == "latency":
            return latency
        if self.obj == "energy":
            return energy
        return max(w + s for w, s in zip(weights, working))

    def finish(self, lab: Label) -> float:
        """The objective's value of a complete plan: ``lab`` plus the gather at the sink."""
        gp = price_gather(self.pr, lab.owners)
        loads = [a + b for a, b in zip(lab.loads, gp.load)]
        return self.value(loads, lab.latency + gp.seconds, lab.energy + gp.energy, lab.transfer_s + gp.seconds,
                          lab.weights, lab.working)


def range_ends(sim: Sim) -> list[bool]:
    """``ok[b]``: a group's range may end before layer b (b = 1..n-1; 0 and n always). Ranges end
    where the fewest tensors are live (a chain: everywhere; ResNet: between blocks), topped up
    to ``MIN_RANGE_ENDS`` by the fewest live bytes, so the DP has fewer states on deep models."""
    n = len(sim.live) - 1
    ok = [True] * (n + 1)
    if n < 3:
        return ok
    count = {b: len(sim.live[b]) for b in range(1, n)}
    size = {b: sum(sim.g.elements(t) for t in sim.live[b]) for b in range(1, n)}
    fewest = min(count.values())
    keep = {b for b in count if count[b] == fewest}
    if len(keep) < MIN_RANGE_ENDS:
        for b in sorted(count, key=lambda b: (size[b], b)):
            if len(keep) >= MIN_RANGE_ENDS:
                break
            keep.add(b)
    for b in range(1, n):
        ok[b] = b in keep
    return ok


def device_orders(instance: Instance, which: str = "all") -> list[DeviceOrder]:
    """The device orders the DP segments (module docstring), distinct, speed first."""
    spd = speeds(instance)
    n = len(instance.devices)
    by_speed = tuple(sorted(range(n), key=lambda d: (-spd[d], d)))
    out = [DeviceOrder("speed", by_speed)]  # skipping a faster device for a slower one never pays
    if which == "all":
        src = instance.network.source
        if not src.external:
            s = src.device
            out.append(DeviceOrder("source-first", (s,) + tuple(d for d in by_speed if d != s), frozenset({0})))
        nodes: dict[str, list[int]] = {}
        for d in range(n):
            node = instance.devices[d].node
            nodes.setdefault(node if node else f"\0{d}", []).append(d)
        if any(len(m) > 1 for m in nodes.values()):
            first_node = None if src.external else (instance.devices[src.device].node or f"\0{src.device}")
            keys = sorted(nodes, key=lambda k: (k != first_node, -max(spd[d] for d in nodes[k]), min(nodes[k])))
            seq = tuple(d for k in keys for d in sorted(nodes[k], key=lambda d: (-spd[d], d)))
            out.append(DeviceOrder("node", seq, frozenset(range(len(seq)))))
    seen, uniq = set(), []
    for o in out:
        if o.devices not in seen:
            seen.add(o.devices)
            uniq.append(o)
    return uniq


def group_dp(p: _Pricing, order: DeviceOrder, fusions: Sequence[int], bound: float = INF,
             max_group: int | None = None, deadline: Deadline = NEVER) -> GroupPlan | None:
    """The best pipeline of groups (contiguous segments of ``order``) by the DP of the module
    docstring; None if none is below ``bound``. Raises ``DeadlinePassed`` past ``deadline``."""
    seq = order.devices
    D = len(seq)
    n = p.n
    K = min(p.max_parts, D) if max_group is None else min(max_group, p.max_parts, D)
    table: list[list[Label | None]] = [[None] * (D + 1) for _ in range(n + 1)]
    table[0][0] = p.start_label()

    def better(a: Label, b: Label | None) -> bool:
        return b is None or (a.value, a.tie) < (b.value, b.tie)

    factor = [p.rest_factor(seq[u:]) for u in range(D + 1)]  # the devices from position u on
    for i in range(n):
        if not any(table[i]):
            continue
        ahead = _ahead(table, i, order)
        for u in range(D + 1):
            lab = table[i][u]
            if lab is None:
                continue
            if u < D and u in order.skippable and better(lab, table[i][u + 1]):
                table[i][u + 1] = lab  # device seq[u] left unused
            if p.combine(lab.value, p.rest_from(i, factor[u])) >= bound or ahead[u] <= lab.value:
                continue
            for k in range(1, min(K if p.cut_ok[i] else 1, D - u) + 1):
                deadline.check("hybrid group DP")
                group = tuple(sorted(seq[u:u + k], key=lambda d: (-p.spd[d], d)))
                for fusion in (fusions if k > 1 else (1,)):  # one device: per-layer stages, the least memory
                    _sweep(p, table, lab, i, u + k, group, fusion, bound, factor[u], factor[u + k])
    best, best_v = None, bound
    for u in range(D + 1):
        lab = table[n][u]
        if lab is None:
            continue
        v = p.finish(lab)
        if v < best_v:
            best, best_v = lab, v
    if best is None:
        return None
    stages, groups = [], []
    lab = best
    while lab is not None and lab.back is not None:
        stages[:0] = list(lab.stages)
        groups.insert(0, (lab.stages[0][0], lab.stages[-1][1], lab.group))
        lab = lab.back
    return GroupPlan(stages, groups, best_v, order.name)


def _ahead(table, i: int, order: DeviceOrder) -> list[float]:
    """``ahead[u]``: the best value of a label with more layers done and no more devices used
    (the same position, or an earlier one where the devices between may be skipped). A label
    at (i, u) no better than it is dominated: the other can do what it can, with fewer layers.
    (Heuristic only in that ownership at the two boundaries differs.)"""
    D = len(order.devices)
    out = [INF] * (D + 1)
    for row in table[i + 1:]:
        for u, lab in enumerate(row):
            if lab is not None and lab.value < out[u]:
                out[u] = lab.value
    for u in range(1, D + 1):
        if u - 1 in order.skippable and out[u - 1] < out[u]:
            out[u] = out[u - 1]
    return out


def _sweep(p: _Pricing, table, lab: Label, i: int, u2: int, group: tuple[int, ...], fusion: int,
           bound: float, with_group: float, after: float) -> None:
    """Ranges i..j on ``group`` for every j, each offered to state (j + 1, u2). ``with_group`` and
    ``after``: the ``rest_factor`` of the group and the devices after it, and of those after it."""
    mem = p.track_memory
    n_dev = p.n_dev
    # committed: the state after the stages already closed in this range
    c_owners, c_loads, c_lat, c_en, c_tr = lab.owners, list(lab.loads), lab.latency, lab.energy, lab.transfer_s
    c_w = list(lab.weights) if mem else None
    c_ws = list(lab.working) if mem else None
    c_stages: list[StageT] = []
    for cs, j, commit in p.chunks(i, fusion):
        st = p.stage(cs, j, group)
        first, last, axis, parts = st
        devs = [d for d, _ in parts]
        sp = p.price(c_owners, st)
        loads = list(c_loads)
        for d in devs:
            loads[d] += sp.compute[d] + sp.recv[d]
        lat, en, tr = c_lat + sp.tau, c_en + sp.energy, c_tr + sp.transfer_s
        w = ws = None
        if mem:
            w = list(c_w)
            for d in devs:
                w[d] += sp.weights[d]
            ws = [max(a, b) for a, b in zip(c_ws, sp.working)]
            if p.caps is not None and any(w[d] + ws[d] > p.caps[d] for d in range(n_dev)):
                return  # weights and working sets only grow along the range
        v = p.value(loads, lat, en, tr, w, ws)
        if v >= bound or (p.obj in ("latency", "energy") and v + p.rest_from(j + 1, with_group) >= bound):
            return  # the values only grow with j (the sums: with what the rest of the model adds)
        stages = tuple(c_stages) + (st,)
        tie = sum(loads) if p.obj == "period" else lat
        cur = table[j + 1][u2]
        if (len(group) > 1 and not p.cut_ok[j + 1]) or p.combine(v, p.rest_from(j + 1, after)) >= bound:
            pass  # not a range end, or the devices left cannot finish in time
        elif cur is None or (v, tie) < (cur.value, cur.tie):
            table[j + 1][u2] = Label(v, tie, sp.owners, tuple(loads), lat, en, tr,
                                     tuple(w) if mem else None, tuple(ws) if mem else None,
                                     back=lab, stages=stages, group=group)
        if commit:
            c_owners, c_loads, c_lat, c_en, c_tr = sp.owners, loads, lat, en, tr
            c_w, c_ws = w, ws
            c_stages.append(st)


def fastest_alone(p: _Pricing) -> list[StageT]:
    """Every layer on the fastest device (the pass that always completes)."""
    return per_layer(0, p.n - 1, fastest_device(p.instance))


class HybridPlanner(Planner):
    name = "hybrid"
    description = "DP over pipelines of device groups, each layer of a group's range split within the group"
    source = "this project (the structure of Alpa's inter-/intra-op planner, DistrEdge and HiDP)"
    option_specs = (
        Option("fusions", str, "both", "stage lengths to try: 1 and fusion_limit, 1 only, or fusion_limit only",
               choices=("both", "single", "fused")),
        Option("orders", str, "auto", "device orders to segment: all (speed, source first, machine by machine), "
               "speed only, or auto (all for the period, speed for the other objectives)",
               choices=("auto", "all", "speed")),
        Option("max_group", int, None, "the most devices in a group (default and at most: max_parts)", ge=1,
               le=10**6),
    )

    def search(self, instance: Instance, ctx: SolveContext):
        obj = ctx.objective
        deadline = ctx.deadline
        found = self._run(instance, obj, deadline, caps=True)
        capped = found.met_caps
        if not capped:
            again = self._run(instance, obj, deadline, caps=False)
            if again.best is not None and (found.best is None
                                           or score(again.best.metrics, obj) < score(found.best.metrics, obj)):
                found = again
        plan, gp = found.best.plan, found.best.group_plan
        names = instance.device_names
        if gp is not None:
            plan.meta["groups"] = [[a, b, [names[d] for d in devs]] for a, b, devs in gp.groups]
        info = {"passes": found.passes, "dp_runs": found.runs, "dp_value": gp.value if gp else None,
                "order": gp.order if gp else "fastest-alone",
                "groups": len(gp.groups) if gp else 1}
        status = "timeout" if found.timed_out else "feasible"
        return PlanResult(self.name, status, obj, plan=plan, info=info)

    def _run(self, instance: Instance, obj: str, deadline: Deadline, caps: bool) -> "_Found":
        p = _Pricing(instance, obj, caps)
        found = _Found()
        plan, m = evaluate_tuples(instance, fastest_alone(p), self.name)
        found.offer(plan, m, None, obj)
        fl = max(1, instance.search.fusion_limit)
        fus = {"both": [1, fl], "single": [1], "fused": [fl]}[self.options.get("fusions", "both")]
        fus = list(dict.fromkeys(fus))  # each group's sweep tries every stage length
        which = self.options.get("orders", "auto")
        if which == "auto":  # the other orders rarely pay off the objective sums' weaker pruning
            which = "all" if obj == "period" else "speed"
        passes = device_orders(instance, which)
        found.passes = len(passes)
        max_group = self.options.get("max_group")
        targets = [INF]
        if obj == "period":
            ideal = p.rest_bound(0, range(p.n_dev)) / REST_SLACK
            targets = [ideal * TARGET_STEP ** t for t in range(1, MAX_LEVELS)] + [INF]
        try:
            if (obj == "period" or not found.met_caps) and (max_group is None or max_group > 1):
                # pipelines first (groups of one device: cheap sweeps), for a plan early and a
                # bound that prunes the groups' sweeps from the start (for the sums: when the
                # fastest device alone breaks a cap and gives no bound)
                self._levels(instance, p, passes, (1,), 1, targets, found, deadline)
                targets = [INF]
            self._levels(instance, p, passes, fus, max_group, targets, found, deadline)
        except DeadlinePassed:
            found.timed_out = True
        return found

    def _levels(self, instance: Instance, p: _Pricing, passes, fus, max_group, targets, found: "_Found",
                deadline: Deadline) -> None:
        """Every pass under each target in turn (past the incumbent's value: under that value)
        until one gives a plan below the target. With targets growing from the ideal period the
        sweeps of a tight target stop early, so the levels that fail cost little; after the
        level that gave a plan, every pass has been run under the incumbent's value."""
        obj = p.obj
        for target in targets:
            if target >= found.bound(obj):
                target = INF
            for order in passes:
                gp = group_dp(p, order, fus, min(target, found.bound(obj)), max_group, deadline)
                found.runs += 1
                if gp is not None:
                    plan, m = evaluate_tuples(instance, gp.stages, self.name)
                    found.offer(plan, m, gp, obj)
            if found.bound(obj) < target:
                return


@dataclass
class _Candidate:
    """A scored plan and the DP result it came from (None: every layer on the fastest device)."""

    plan: Plan
    metrics: Metrics
    group_plan: GroupPlan | None


@dataclass
class _Found:
    """The best plan of a run and what the run did."""

    best: _Candidate | None = None
    passes: int = 0  # device orders
    runs: int = 0  # DP runs completed (a period pass runs once per target level)
    timed_out: bool = False

    @property
    def met_caps(self) -> bool:
        return self.best is not None and self.best.metrics.feasible

    def offer(self, plan, m, gp, obj: str) -> None:
        if self.best is None or score(m, obj) < score(self.best.metrics, obj):
            self.best = _Candidate(plan, m, gp)

    def bound(self, obj: str) -> float:
        """Prune at the best feasible plan's value (a little above: the DP's sums may round
        differently from the evaluator's)."""
        if self.best is None or not self.best.metrics.feasible:
            return INF
        return self.best.metrics.value(obj) * (1 + 1e-9)

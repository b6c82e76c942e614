"""The plan space as a layered DAG: the structure every exact formulation exploits.

A plan is a path. Node ``(b, state)`` is a stage boundary (before layer ``b``) with ``state``
the ownership of every tensor live across it (who owns which rows or channels). An arc is
one stage option (layers ``b..e``, axis, cuts, devices) leaving that node; it ends at
``(e + 1, state')``. Every cost of docs/model.md section 4 splits over this path:

- per arc: the stage's ``tau`` (switched or shared), per-device compute and receive time,
  energy, per-device weight bytes (summed along the path) and working set (maxed along it);
- per terminal node: the gather of the graph outputs at the sink.

So latency and energy are shortest paths (the DP), and period, memory and caps are a path
flow with side constraints (the MILP and CP-SAT models). Arc costs come from
``milp_planner.cost.evaluator.price_stage``, the function the evaluator itself prices every
stage with (``price_gather`` for the terminal gather).

>>> from formulations.stagegraph import build_stage_graph        # doctest: +SKIP
>>> sg = build_stage_graph(instance)                            # doctest: +SKIP
>>> len(sg.arcs), sg.n_nodes                                    # doctest: +SKIP
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from milp_planner.cost.batch import box_cells, layouts_of, price_batch
from milp_planner.cost.evaluator import EXTERNAL, Pricer, cap_limit, next_owners, price_gather, price_stage, pricer
from milp_planner.model.graph import last_readers
from milp_planner.space.geometry import full_region
from milp_planner.instance import Instance
from milp_planner.space.plan import Plan

from formulations.budget import check_memory
from formulations.dominance import undominated
from formulations.options import SpaceTooLarge, StageOption, stage_options
from formulations.relaxation import CHECK_EVERY, LayoutBounds, StageTable, layout_bounds, rest_after
from formulations.symmetry import REDUCTIONS, Expander, trivial_types
from formulations.tolerance import FLOOR_MARGIN, loose

if TYPE_CHECKING:
    from formulations.flow_togo import FlowToGo


@dataclass(slots=True)
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
    # the ``canonical`` reduction: device d of the tail's frame is device relabel[d] of the
    # head's (None: the same frame); see ``StageGraph.path_options``
    relabel: tuple[int, ...] | None = None


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
    objective: str = "latency"  # the objective ``upper`` and ``to_go`` are in
    upper: float | None = None  # every plan whose floor is at most this is in the graph (None: all)
    bounds: LayoutBounds | None = None  # the relaxation it was enumerated with
    lower: float | None = None  # a proven lower bound of ``objective`` over the whole space
    complete: bool = True  # holds every plan of the space no worse than its best feasible plan
    outside: float = math.inf  # every plan not in the graph has a floor at least this (or breaks a cap)
    forward_arcs: int = 0  # arcs the forward pass kept, before the backward pass
    cap_pruned: int = 0  # options the caps' per-device floors left out (``_CapFloors``)

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    def index_arcs(self) -> "StageGraph":
        """Fill ``out_arcs`` and ``in_arcs`` (arc ids per node) from ``arcs``; returns the graph."""
        self.out_arcs = [[] for _ in self.nodes]
        self.in_arcs = [[] for _ in self.nodes]
        for i, a in enumerate(self.arcs):
            self.out_arcs[a.tail].append(i)
            self.in_arcs[a.head].append(i)
        return self

    def path_options(self, arc_ids) -> list[StageOption]:
        """The stage options of a source-to-terminal path in layer order, on real devices.

        Under the ``canonical`` reduction an arc's devices are in its tail's frame (its state
        relabelled canonically); the frames are composed along the path back to the source's,
        which is the instance's own."""
        arcs = sorted((self.arcs[a] for a in arc_ids), key=lambda a: a.option.first)
        real = list(range(len(self.instance.devices)))  # device of the current frame -> real device
        out = []
        for a in arcs:
            o = a.option
            out.append(o if real == sorted(real) else replace(o, devices=tuple(real[d] for d in o.devices)))
            if a.relabel is not None:
                back = [0] * len(real)
                for d, h in enumerate(a.relabel):
                    back[h] = d
                real = [real[back[h]] for h in range(len(real))]
        return out

    def plan_from_arcs(self, arc_ids) -> Plan:
        names = self.instance.device_names
        return Plan(self.instance.name, [o.to_stage(names) for o in self.path_options(arc_ids)])

    def path_value(self, arc_ids, objective: str) -> float:
        """The objective of a source-to-terminal path, computed from arc data (for checks)."""
        arcs = [self.arcs[a] for a in arc_ids]
        term = self.terminals[arcs[-1].head]
        n_dev = len(self.instance.devices)
        if objective in ("period", "memory") and any(a.relabel is not None for a in arcs):
            raise ValueError(f"a graph of the canonical reduction holds no per-device {objective}")
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
    """The costs of a terminal node: the gather of the graph outputs at the sink."""

    gather_s: float
    energy: float
    load: tuple[float, ...]  # per device: the gather counted as the sink device's receive


def _terminal(pr: Pricer, owners) -> Terminal:
    gp = price_gather(pr, owners)
    return Terminal(gp.seconds, gp.energy, tuple(gp.load))


FLOORED = ("latency", "energy", "period", "memory")


def arc_floor(arc: "Arc", objective: str, n_dev: int) -> float:
    """An additive lower bound of ``objective`` over a path: the arc's share of it.

    Latency and energy are additive, so this is the arc's exact cost. Period is at least the
    mean device load, memory at least the mean weight bytes per device.
    """
    if objective == "latency":
        return arc.tau
    if objective == "energy":
        return arc.energy
    if objective == "period":
        return sum(arc.load) / n_dev
    return sum(arc.weights) / n_dev


def terminal_floor(term: "Terminal", objective: str, n_dev: int) -> float:
    if objective == "latency":
        return term.gather_s
    if objective == "energy":
        return term.energy
    if objective == "period":
        return sum(term.load) / n_dev
    return 0.0


def build_stage_graph(instance: Instance, max_arcs: int = 3_000_000, progress=None,
                      deadline: Deadline = NEVER, *, objective: str = "latency",
                      upper: float | None = None, drop_overflow: bool = False,
                      bounds: LayoutBounds | None = None, memo: dict | None = None,
                      reduction: str = "first-use", to_go: "FlowToGo | None" = None) -> StageGraph:
    """The plan space of ``instance`` as a ``StageGraph``.

    Without ``upper`` the whole space is enumerated. With ``upper`` (a value of ``objective``
    that some plan achieves, or any guess) only the arcs of paths whose additive floor
    (``arc_floor``: the cost itself for latency and energy) is at most ``upper`` are kept:
    every plan no worse than ``upper`` is still in the graph, so an optimum found in it is
    an optimum of the space once it is at most ``upper``. The enumeration is a forward pass
    that prunes with the exact best prefix and the layout relaxation's bounds
    (``formulations.relaxation``: a floor for each stage option from the state's class and a
    bound on what is left after it), then a backward pass that prunes with the exact best
    suffix. ``drop_overflow`` leaves out arcs that alone overflow a device's memory cap (no
    feasible plan contains them). ``memo``: a dict kept across calls on the same instance,
    objective and ``bounds`` (the rounds of the exact planners), which remembers every priced
    arc so that a round with a larger ``upper`` prices only the new ones.

    ``reduction`` (``formulations.symmetry``): how interchangeable devices are told apart.
    ``first-use`` (the default, valid for every objective and cap) keeps the plans whose units
    of each type are first used in index order; ``free`` (valid only when the solved objective
    is latency or energy and no memory cap applies: ``symmetry.reduction_for``) the plans
    whose stages take the devices owning nothing in index order; ``none`` every device order.
    ``canonical`` (valid where ``free`` is) also merges the states that differ only by
    exchanging interchangeable devices; its arcs' devices are in their tail's frame
    (``StageGraph.path_options`` gives the real ones), and per-device arc data (loads, memory)
    are not comparable across arcs. Every plan of the space has a plan of the graph with the
    same costs (it differs only by exchanging interchangeable devices).

    ``to_go`` (energy only; ``formulations.flow_togo``): a second floor on what is left after
    an arc, from its head's exact state (the flow LP's duals); an arc whose prefix, cost and
    that floor exceed ``upper`` is left out like one the relaxation prunes. ``memo`` must then
    come from calls with the same ``to_go``.

    Raises ``SpaceTooLarge`` (a ``PlannerError``) when the graph would exceed ``max_arcs`` (the space is too large
    to enumerate; shrink ``search`` or give a tighter ``upper``).
    """
    with gc_paused():
        return _build_stage_graph(instance, max_arcs, progress, deadline, objective=objective, upper=upper,
                                  drop_overflow=drop_overflow, bounds=bounds, memo=memo, reduction=reduction,
                                  to_go=to_go)


@contextmanager
def gc_paused():
    """Python's cyclic garbage collector paused (and restored as it was). The enumeration
    allocates millions of containers (states, pending arcs, the memo) and no reference cycles;
    each full collection traverses all of them and cannot be interrupted: on
    ``fleet/vgg16-4dev-uncapped.yaml`` period (60 s) 28 of them took 25 s, up to 3.7 s each,
    and ran the solve past its time limit. Reference counting still frees everything."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # the millions of objects allocated meanwhile sit in the youngest generation: the
            # next collections would traverse them all at once (4.6 s, then 6.9 s on
            # ``coopai/vgg16-rpi4-6.yaml`` period, past the time limit). Moved to the oldest
            # generation (freeze, then unfreeze), they wait for its next full collection.
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def _build_stage_graph(instance: Instance, max_arcs: int, progress, deadline: Deadline, *, objective: str,
                       upper: float | None, drop_overflow: bool, bounds: LayoutBounds | None, memo: dict | None,
                       reduction: str, to_go: "FlowToGo | None" = None) -> StageGraph:
    """The forward pass boundary by boundary (cheapest prefix first), then the arcs kept priced
    and the backward pass (``_Enumeration``)."""
    t0 = time.perf_counter()
    en = _Enumeration(instance, max_arcs, deadline, objective, upper, drop_overflow, bounds, memo, reduction, to_go)
    for b in range(en.n):
        for nid in sorted(en.frontier.get(b, ()), key=en.prefix.__getitem__):
            en.expand(nid, b)
            en.check()
        if progress is not None:
            progress(phase=f"enumerating the plan graph, layer {b + 1} of {en.n}", arcs=len(en.pending))
    sg = en.finish()
    sg.build_time_s = time.perf_counter() - t0
    return sg


class _Enumeration:
    """The state of one enumeration of the stage graph (``build_stage_graph``).

    Arcs are found with the vectorised floors (``_ExactFloors``: the evaluator's sums, lowered
    by a relative 1e-9) and their head states (``next_owners``); only the arcs that survive the
    backward pass on those floors are priced with ``price_stage`` and checked against the
    memory caps (``finish``). The exact costs then decide (a second backward pass). Every path
    within ``slack`` survives both: its arcs' floors are at most their costs. ``outside`` is
    the least floor of a partial plan left out."""

    def __init__(self, instance: Instance, max_arcs: int, deadline: Deadline, objective: str, upper: float | None,
                 drop_overflow: bool, bounds: LayoutBounds | None, memo: dict | None, reduction: str,
                 to_go: "FlowToGo | None"):
        if objective not in FLOORED:
            raise ValueError(f"unknown objective {objective!r}")
        if to_go is not None and objective != "energy":
            raise ValueError("the flow LP's floor after an arc bounds energy only")
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown symmetry reduction {reduction!r}")
        self.instance, self.max_arcs, self.deadline, self.objective = instance, max_arcs, deadline, objective
        self.upper = upper
        self.pr = pr = pricer(instance)
        g = instance.graph
        self.n, self.n_dev = len(g.layers), len(instance.devices)
        self.fl = max(1, instance.search.fusion_limit)
        self.caps = [dev.memory_bytes if (drop_overflow and instance.constraints.memory) else None
                     for dev in instance.devices]
        self.bounded = bounded = upper is not None and math.isfinite(upper)
        self.slack = slack = loose(upper) if bounded else math.inf
        if bounds is None or bounds.objective != objective:
            bounds = layout_bounds(instance, objective, pr, deadline=deadline, symmetry=reduction != "none",
                                   drop_overflow=drop_overflow)
        self.bounds = bounds
        self.to_go = to_go if bounded else None
        self.last_read = last_readers(g)
        types = bounds.types if bounds.types is not None else trivial_types(self.n_dev)
        self.expander = Expander(types, "none" if types.trivial else reduction)
        self.exact = _ExactFloors(instance, pr, objective, types)
        self.canonical = self.expander.reduction == "canonical"
        # a plan of period (peak memory) at most ``slack`` loads (fills) no device beyond it: the
        # objective's own bound is a cap, and its per-device labels prune what the mean floor keeps
        self.own_cap = slack if bounded and objective in SELF_CAPPED else None
        self.capf = capf = None if self.canonical else _CapFloors.of(instance, pr, caps=drop_overflow,
                                                                     objective=objective, own_cap=self.own_cap)
        if capf is not None and capf.load:
            self.exact.loads = True
        self.weighted = _WeightedCap.of(bounds, self.own_cap) if capf is not None and objective == "period" else None

        self.node_id: dict[tuple, int] = {}
        self.nodes: list[tuple[int, tuple]] = []
        self.node_used: list[tuple] = []  # per node: the units of each type used so far (first-use reduction)
        self.node_sid: list[int] = []  # per node: its state's id
        self.prefix: list[float] = []
        self.sums: list = []  # per node: labels of its prefixes' floor and capped sums (``_CapFloors``)
        self.memo = memo = {} if memo is None else memo
        # states are interned (``_Interned``: one id per distinct state, kept with the memo across
        # rounds), so that a node is found by ints, not by hashing a nested tuple per option
        self.interned = memo.setdefault(_INTERNED, _Interned())

        net = instance.network
        src = EXTERNAL if net.source.external else net.source.device
        init = tuple(sorted((t, ((src, full_region(g, t)),)) for t in g.inputs if self.last_read.get(t, -1) >= 0))
        self.source = self.node(0, self.interned.id(init), self.expander.start())
        self.prefix[self.source] = 0.0
        if capf is not None:
            self.sums[self.source] = [np.zeros((1, 1 + capf.width))]
        self.outside = math.inf
        self.frontier: dict[int, set[int]] = {0: {self.source}}
        self.pending: list[_Pending] = []
        self.floors: list[float] = []
        self.seen = 0  # options looked at: the deadline is checked every CHECK_EVERY of them
        self.layouts: dict = {}  # id(table) -> (table, its ``Layouts`` or None): ``_price_stage_batch``

    def node(self, b: int, sid: int, used: tuple) -> int:
        """The node of boundary ``b``, state ``sid`` and units ``used`` (made on first use)."""
        key = (b, sid, used)
        i = self.node_id.get(key)
        if i is None:
            i = self.node_id[key] = len(self.nodes)
            self.nodes.append((b, self.interned.states[sid]))
            self.node_sid.append(sid)
            self.node_used.append(used)
            self.prefix.append(math.inf)
            self.sums.append(None)
        return i

    def check(self) -> None:
        self.deadline.check("stage graph enumeration exceeded the time limit")
        check_memory()

    def expand(self, nid: int, b: int) -> None:
        """The arcs of the stages starting at boundary ``b`` from node ``nid`` whose floor fits."""
        bounds, slack = self.bounds, self.slack
        _, state = self.nodes[nid]
        used = self.node_used[nid]
        owners = dict(state)
        # per end layer: the options near enough (they depend on the units used so far);
        # per (end, option, devices): [head state, relabel, priced arc or None], shared by
        # the nodes of one state (the units used change which options a node may take,
        # not where an option leads nor what it costs)
        nears = self.memo.setdefault((b, state, used), {})
        known = self.memo.setdefault((_PRICED, b, self.node_sid[nid]), {})
        ctx = None
        gs = self.prefix[nid]
        ci = -1  # the node's class in the relaxation (None: not reached by it)
        for e in range(b, min(self.n, b + self.fl)):
            self.check()  # one node's stages can hold many thousand options on wide DAGs
            tab = bounds.tables[(b, e)]
            need = slack - gs  # the options whose floor with what is left fits
            near = nears.get(e)
            if near is None or need > near.thr or (self.capf is not None and self.capf.load and near.loads is None):
                if ci == -1:
                    ci = _class_of(bounds, b, owners)
                if ci is not None and self.bounded:
                    # the relaxation's least floor plus bound after over the whole stage: when
                    # it exceeds ``need`` by 1 % of the bound no option of the stage fits, nor
                    # moves ``outside`` (just above ``slack`` as a rule), and pricing them is moot
                    least = _stage_bound(bounds, tab, e, ci)
                    if least > need + 0.01 * slack:
                        self.outside = min(self.outside, gs + least)
                        continue
                if ctx is None:
                    ctx = self.expander.context(used, owners)
                near = self._near(tab, e, ci, owners, ctx, need)
                if self.bounded:
                    nears[e] = near
            k = int(np.searchsorted(near.vals, need, side="right"))
            if k < len(near.vals) or math.isfinite(near.beyond):
                self.outside = min(self.outside, gs + (float(near.vals[k]) if k < len(near.vals) else near.beyond))
            if self.capf is None:
                sel, rows = slice(0, k), None
            else:
                if ci == -1 and self.weighted is not None:
                    ci = _class_of(bounds, b, owners)
                sel, rows = self._within_caps(nid, near, tab, k, e, ci)
            # the head of an option (an index into this (b, e) table) depends on the tail only
            # through what outlives the stage (``next_owners``): on a chain nothing, so heads
            # are shared by every tail at boundary b
            surv = self.interned.id(tuple(item for item in state if self.last_read.get(item[0], -1) > e))
            self._add_arcs(nid, b, e, tab, near, sel, rows, owners, used, surv, known, gs)

    def _near(self, tab: StageTable, e: int, ci, owners: dict, ctx, need: float):
        """The options of the stage (``tab``, ending at layer ``e``) a bound up to 1 % larger
        would look at, sorted by floor (kept for later rounds). Under a period cap 0.1 %: the
        labels, not the bound, limit the graph, and the options a loose bound lets in, each with
        its part loads, are many (VGG-19 on 4 boards under period <= 39.25 ms held 5 GB of them
        at 1 %)."""
        fetch = 0.001 if self.capf is not None and self.capf.load else 0.01
        thr = need + fetch * self.slack if self.bounded else math.inf
        return _near_options(self.exact, self.expander, _after(self.bounds, tab, e, ci), tab, owners, ctx, thr,
                             self.check, self.capf, self.to_go)

    def _within_caps(self, nid: int, near, tab: StageTable, k: int, e: int, ci):
        """(the options among the first ``k`` that some plan within the caps and ``slack``
        takes, the labels each gives its head); the others are left out (``_CapFloors``)."""
        capf, slack = self.capf, self.slack
        here = self.sums[nid] = capf.labels(self.sums[nid], slack)
        adds, needs = capf.steps(near, tab, k)
        capfit = ((here[None, :, 1:] + (adds + needs)[:, None, :]) <= capf.limit).all(axis=2)  # (options, labels)
        if self.weighted is not None:  # period: the weighted load of prefix, option and rest
            capfit &= self.weighted.fit(here, adds, near.src[:k], self.bounds, tab, e, ci)
        cost = here[None, :, 0] + near.vals[:k, None]
        fits = capfit & (cost <= slack)
        over = capfit & ~fits
        if over.any():  # within the caps but beyond the bound: a floor of what is left out
            self.outside = min(self.outside, float(cost[over].min()))
        sel = np.flatnonzero(fits.any(axis=1))
        capf.pruned += k - len(sel)
        if self.own_cap is not None and not capfit.all():
            # left out by the objective's own cap: those plans exceed ``slack``
            self.outside = min(self.outside, slack)
        step = np.column_stack([near.floor[sel], adds[sel]])
        return sel, [here[fits[i]] + step[j] for j, i in enumerate(sel.tolist())]

    def _add_arcs(self, nid: int, b: int, e: int, tab: StageTable, near, sel, rows, owners: dict, used: tuple,
                  surv: int, known: dict, gs: float) -> None:
        """The pending arcs of the options ``sel`` from node ``nid`` (the hot loop: locals only)."""
        interned, expander, prefix, sums, pending, floors = (self.interned, self.expander, self.prefix, self.sums,
                                                             self.pending, self.floors)
        node, capf, max_arcs = self.node, self.capf, self.max_arcs
        src_sel = near.src[sel]
        widths = tab.widths[tab.group[src_sel]].tolist()  # parts of each option
        frontier_next = self.frontier.setdefault(e + 1, set())
        orders = self.interned.values["devices"]
        seen = self.seen
        for j, (oi, devs, f, k_) in enumerate(zip(src_sel.tolist(), near.devices[sel].tolist(),
                                                  near.floor[sel].tolist(), widths)):
            seen += 1
            if seen % CHECK_EVERY == 0:
                self.check()
            devs = tuple(devs[:k_])
            devs = orders.setdefault(devs, devs)  # one object per device order (held by many arcs)
            hit = known.get((e, oi, devs))
            if hit is None:
                to = interned.heads.get((surv, b, e, oi, devs))
                if to is None:
                    grp = tab.groups[tab.group[oi]]
                    new_state = _state_key(next_owners(self.pr, owners, grp.last, devs, grp.geos))
                    relabel = None
                    if self.canonical:
                        new_state, relabel = expander.canonical(new_state)
                    to = interned.heads[(surv, b, e, oi, devs)] = (interned.id(new_state), relabel)
                hit = known[(e, oi, devs)] = [to[0], to[1], None]
            head = node(e + 1, hit[0], expander.advance(used, devs))
            if gs + f < prefix[head]:
                prefix[head] = gs + f
            if rows is not None:
                got = sums[head]
                if got is None:
                    sums[head] = [rows[j]]
                else:
                    got.append(rows[j])
                    if len(got) >= 4 * LABELS:
                        sums[head] = [capf.labels(got, self.slack)]
            frontier_next.add(head)
            pending.append(_Pending(nid, head, tab, oi, devs, owners, hit))
            floors.append(f)
            if len(pending) > max_arcs:
                raise SpaceTooLarge(
                    f"{self.instance.name}: the plan space has more than {max_arcs} stage arcs"
                    + (f" within {self.upper:.6g} ({self.objective})" if self.bounded else "")
                    + "; reduce search.fusion_limit, max_parts or splits, or use a heuristic planner")
        self.seen = seen

    def finish(self) -> StageGraph:
        """Price the arcs the backward pass on the floors keeps (dropping those that alone
        overflow a memory cap), prune backward on the exact costs, and make the graph."""
        objective, n_dev, slack, pending, caps = self.objective, self.n_dev, self.slack, self.pending, self.caps
        nodes, source = self.nodes, self.source
        terminals = {nid: _terminal(self.pr, dict(nodes[nid][1])) for nid in self.frontier.get(self.n, ())}
        n_before = len(pending)
        kept = (_within(nodes, pending, self.floors, source, terminals, objective, n_dev, slack)[0] if self.bounded
                else list(range(len(pending))))
        check_caps = any(c is not None for c in caps)
        self._price_batches(kept)
        arcs: list[Arc] = []
        for i in kept:
            if self.seen % CHECK_EVERY == 0:
                self.check()
            self.seen += 1
            p = pending[i]
            arc = _priced(self.pr, p.tab, p.oi, p.devs, p.owners, p.hit, self.interned)
            if check_caps and any(c is not None and arc.weights[d] + arc.working[d] > c for d, c in enumerate(caps)):
                continue
            arcs.append(Arc(p.tail, p.head, arc.option, arc.tau, arc.energy, arc.load, arc.transfer_s, arc.weights,
                            arc.working, p.hit[1]))
        floors = [arc_floor(a, objective, n_dev) for a in arcs]
        overflowed = len(arcs) < len(kept)
        self.pending = pending = None
        outside = self.outside
        if self.bounded or overflowed:  # (the whole space with caps: drop what only overflowing arcs reach)
            nodes, arcs, source, terminals, cut = _prune_backward(nodes, arcs, floors, source, terminals,
                                                                 objective, n_dev, slack)
            if self.bounded and (cut or len(kept) < n_before):
                outside = min(outside, slack)
        sg = StageGraph(self.instance, nodes, arcs, source, terminals)
        sg.bounds = self.bounds
        sg.upper = self.upper if self.bounded else None
        sg.objective = objective
        sg.outside = outside  # inf: nothing was left out, the graph is the whole (feasible) space
        sg.forward_arcs = n_before
        sg.cap_pruned = self.capf.pruned if self.capf is not None else 0
        return sg.index_arcs()

    def _price_batches(self, kept: list[int]) -> None:
        """Price the kept arcs not priced yet, the options of one stage from one state at once
        (``milp_planner.cost.batch.price_batch``, the same floats as ``price_stage``) when they
        are at least ``BATCH_MIN``; ``finish`` prices the rest one by one (``_priced``)."""
        pending, node_sid, nodes = self.pending, self.node_sid, self.nodes
        buckets: dict[tuple, dict] = {}
        for i in kept:
            p = pending[i]
            if p.hit[2] is None:
                buckets.setdefault((nodes[p.tail][0], node_sid[p.tail], id(p.tab)), {})[id(p.hit)] = p
        for bucket in buckets.values():
            if len(bucket) >= BATCH_MIN:
                self.check()
                _price_stage_batch(self.pr, list(bucket.values()), self.interned, self.layouts)


#: fewest options of one stage from one state priced at once (fewer: one by one, where the
#: numpy calls per part, tensor and owner would cost more than they save)
BATCH_MIN = 8


def _price_stage_batch(pr: Pricer, items: list, interned: "_Interned", cache: dict) -> None:
    """Set ``hit[2]`` of the pending arcs ``items`` (one state, one stage table) to their
    priced arcs (``price_batch``); nothing when the stage's parts read their tensors in
    different orders (``_priced`` prices them one by one then)."""
    tab = items[0].tab
    hit = cache.get(id(tab))
    if hit is None or hit[0] is not tab:
        try:
            layouts = layouts_of([grp.geos for grp in tab.groups], [grp.weights for grp in tab.groups],
                                 [grp.computed for grp in tab.groups])
        except ValueError:
            layouts = None
        hit = cache[id(tab)] = (tab, layouts)
    layouts = hit[1]
    if layouts is None:
        return
    oi = np.array([p.oi for p in items], dtype=np.int64)
    group = tab.group[oi]
    comp = tab.flat()[1][oi]
    kmax = comp.shape[1]
    devs = np.zeros((len(items), kmax), dtype=np.int64)
    for row, p in enumerate(items):
        devs[row, :len(p.devs)] = p.devs
    bp = price_batch(pr, items[0].owners, group, devs, comp, layouts)
    options, same, groups = interned.values["option"], interned.same, tab.groups
    for p, gi, tau, energy, load, tr, wts, work in zip(
            items, group.tolist(), bp.tau.tolist(), bp.energy.tolist(), bp.load.tolist(), bp.transfer_s.tolist(),
            bp.weights.tolist(), bp.working.tolist()):
        grp = groups[gi]
        key = (grp.first, grp.last, grp.axis, grp.ranges, p.devs)
        opt = options.get(key)
        if opt is None:
            opt = options[key] = StageOption(*key)
        p.hit[2] = Arc(-1, -1, opt, tau, energy, same("load", tuple(load)), tr, same("weights", tuple(wts)),
                       same("working", tuple(work)))


_INTERNED = "interned states"  # the memo's entry holding the ``_Interned`` table
_PRICED = "priced"  # the memo's entries (_PRICED, boundary, state id): the arcs from that state


class _Interned:
    """Ownership states (``_state_key`` tuples) numbered once each, and the heads of options:
    (surviving part's id, first layer, end layer, option, devices) -> (head state's id,
    relabelling); an option is an index into the table of its (first, end) stage. Also one
    shared object per distinct stage option and per distinct per-device tuple of the priced
    arcs (``same``): an option is priced once per tail state, and on VGG16's 4 devices 1.48 M
    arcs held 4,176 distinct options and 847 distinct weight tuples."""

    def __init__(self):
        self.ids: dict[tuple, int] = {}
        self.states: list[tuple] = []
        self.heads: dict[tuple, tuple[int, tuple | None]] = {}
        # per kind of value apart: (0, 532) == (0.0, 532.0), and an integer tuple (weights,
        # working bytes: CP-SAT's coefficients) must not become the float one (loads)
        self.values: dict[str, dict] = {"option": {}, "load": {}, "weights": {}, "working": {}, "devices": {}}

    def same(self, kind: str, value):
        """The first object of ``kind`` equal to ``value`` seen (``value`` itself the first time)."""
        return self.values[kind].setdefault(value, value)

    def id(self, state: tuple) -> int:
        i = self.ids.get(state)
        if i is None:
            i = self.ids[state] = len(self.states)
            self.states.append(state)
        return i


class _Pending(NamedTuple):
    """An arc found by the forward pass, priced only if the backward pass keeps it."""

    tail: int
    head: int
    tab: StageTable
    oi: int  # the option's index in the stage's table
    devs: tuple[int, ...]
    owners: dict  # the tail's state
    hit: list  # the memo's [head state, relabel, priced arc or None]


def _state_key(owners: dict) -> tuple:
    """An ownership state in its canonical form (tensors by name, owners by region then device)."""
    return tuple(sorted((t, tuple(sorted(lst, key=_owner_key)) if len(lst) > 1 else lst)
                        for t, lst in owners.items()))


def _priced(pr: Pricer, tab: StageTable, oi: int, devs: tuple, owners: dict, hit: list, interned: _Interned) -> "Arc":
    """The arc of option ``oi`` of ``tab`` on ``devs`` from ``owners``, priced once (``hit[2]``),
    its option and per-device tuples shared with the equal ones of other arcs."""
    if hit[2] is None:
        grp = tab.groups[tab.group[oi]]
        key = (grp.first, grp.last, grp.axis, grp.ranges, devs)
        options = interned.values["option"]
        opt = options.get(key)
        if opt is None:
            opt = options[key] = StageOption(*key)
        arc = _arc(pr, opt, grp.geos, grp.comp[tab.perm[oi]].tolist(), grp.weights, grp.computed, owners)
        same = interned.same
        arc.load, arc.weights, arc.working = same("load", arc.load), same("weights", arc.weights), same(
            "working", arc.working)
        hit[2] = arc
    return hit[2]


def _within(nodes, pending, floors, source, terminals, objective, n_dev, slack):
    """(indices of the arcs on a source-to-terminal path whose floor is within ``slack``, the
    best prefix and the best suffix of every node)."""
    pre = [math.inf] * len(nodes)
    suf = [math.inf] * len(nodes)
    pre[source] = 0.0
    for nid, term in terminals.items():
        suf[nid] = terminal_floor(term, objective, n_dev)
    by_tail = sorted(range(len(pending)), key=lambda i: nodes[pending[i].tail][0])
    for i in by_tail:  # forward pass is in boundary order: tails before heads
        p = pending[i]
        c = pre[p.tail] + floors[i]
        if c < pre[p.head]:
            pre[p.head] = c
    for i in reversed(by_tail):
        p = pending[i]
        c = floors[i] + suf[p.head]
        if c < suf[p.tail]:
            suf[p.tail] = c
    return [i for i, p in enumerate(pending) if pre[p.tail] + floors[i] + suf[p.head] <= slack], pre, suf


def _prune_backward(nodes, arcs, floors, source, terminals, objective, n_dev, slack):
    """Keep the arcs on a path whose floor is within ``slack``; renumber the nodes. Returns
    (nodes, arcs, source, terminals, whether an arc on a path of finite floor was left out)."""
    kept, pre, suf = _within(nodes, arcs, floors, source, terminals, objective, n_dev, slack)
    # an arc left out on a path of finite cost: what it leaves out costs more than ``slack``
    cut = any(math.isfinite(pre[a.tail] + floors[i] + suf[a.head]) for i, a in enumerate(arcs)
              if pre[a.tail] + floors[i] + suf[a.head] > slack)
    used = {source}
    for i in kept:
        used.add(arcs[i].tail)
        used.add(arcs[i].head)
    remap = {old: new for new, old in enumerate(sorted(used))}
    new_nodes = [nodes[old] for old in sorted(used)]
    new_arcs = []
    for i in kept:
        a = arcs[i]
        a.tail, a.head = remap[a.tail], remap[a.head]
        new_arcs.append(a)
    new_terms = {remap[nid]: t for nid, t in terminals.items() if nid in remap and pre[nid] + suf[nid] <= slack}
    return new_nodes, new_arcs, remap[source], new_terms, cut


def _class_of(bounds: LayoutBounds, b: int, owners: dict) -> int | None:
    """The relaxation's class at boundary ``b`` of the exact state ``owners`` (None: not reached)."""
    key = bounds.state_class(owners)
    return None if key is None else bounds.classes[b].get(key)


def _stage_bound(bounds: LayoutBounds, tab: StageTable, e: int, ci: int) -> float:
    """A lower bound on floor plus bound after of every option of stage ``tab`` (ending at
    ``e``) from any state of class ``ci``: the relaxation's least floor per exit from the
    class's read layouts plus the cost to go of the class each exit leads to."""
    rest = bounds.to_go[e + 1][tab.merged[:, tab.carry_of[ci]]]
    return float((tab.best[tab.read_of[ci]] + rest).min())


class _Near(NamedTuple):
    """The options of one stage from one node whose floor is within ``thr``, sorted by floor."""

    vals: np.ndarray  # floor of the option plus the bound after it
    src: np.ndarray  # the option's index in the stage's table (its type-level order)
    devices: np.ndarray  # (options, parts): its real devices
    after: np.ndarray  # the bound on what is left after it
    floor: np.ndarray  # the option's own floor (``arc_floor`` lowered by a relative 1e-9)
    thr: float
    beyond: float  # a lower bound on ``vals`` of every option left out
    # the capped sums (``_CapFloors``, under a period cap)
    loads: np.ndarray | None = None  # (options, parts): each part's load (compute + receive), lowered


def _after(bounds: LayoutBounds, tab: StageTable, e: int, ci: int | None) -> np.ndarray:
    """``bounds.after`` for a state of class ``ci`` (None: a class the relaxation did not
    reach, bounded by 0)."""
    if ci is None:
        bounds.misses += 1
        return np.zeros(len(tab.heads))
    return rest_after(bounds.to_go, tab, e, ci)


def _near_options(exact: "_ExactFloors", expander: Expander, after_t: np.ndarray, tab: StageTable,
                  owners: dict, ctx: tuple, thr: float, check=None, capf: "_CapFloors | None" = None,
                  to_go: "FlowToGo | None" = None) -> _Near:
    """The device orders of the stage ``tab`` that the node allows (``expander``, context
    ``ctx``) with floor plus bound after (``after_t``, per option) at most ``thr``. Type-level orders are filtered first with a
    floor that lets each part take the cheapest device of its orbit; only those left are
    expanded into real device orders and priced exactly (vectorised). ``check()``, if given,
    is called every few dozen expansions (it raises at the deadline). ``to_go`` (energy): the
    bound after an option is also at least the flow LP's floor from its head's exact state
    (``FlowToGo.after_options``; at the type level, each part at the most its orbit holds)."""
    devices, comp, mask, _ = tab.flat()
    recv, energy = exact.received(tab, owners)
    if expander.types.trivial:  # no expansion: the table is the space
        f = exact.option_floors(tab, recv, energy, tab.group, devices, devices, comp, mask) * (1 - FLOOR_MARGIN)
        if to_go is not None:
            after_t = np.maximum(after_t, to_go.after_options(tab, owners, devices, tab.group))
        v = f + after_t
        idx = np.flatnonzero(v <= thr)
        idx = idx[np.argsort(v[idx], kind="stable")]
        rest = v[v > thr]
        near = _Near(v[idx], idx, devices[idx], after_t[idx], f[idx], thr,
                     float(rest.min()) if len(rest) else math.inf)
        return near if capf is None else capf.fill(near, exact, tab, recv, tab.group[idx], comp[idx], mask[idx])
    orbit = exact.orbit_of
    typed_after = after_t
    if to_go is not None:
        typed_after = np.maximum(after_t, to_go.after_options(tab, owners, devices, tab.group, exact.orbit_members))
    lb = exact.option_floors(tab, exact.orbit_min(recv), exact.orbit_min(energy), tab.group, orbit[devices],
                             devices, comp, mask) * (1 - FLOOR_MARGIN) + typed_after
    cand = np.flatnonzero(lb <= thr)
    rest = lb[lb > thr]
    beyond = float(rest.min()) if len(rest) else math.inf
    # options with the same part count and order index share their orbits: expand once
    kparts = mask.sum(axis=1).astype(np.int64)[cand]
    key = tab.perm[cand] * (devices.shape[1] + 1) + kparts
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    bounds_at = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    srcs, devs = [], []
    for u in range(len(uniq)):
        if check is not None and u % 64 == 63:
            check()
        members = cand[order[bounds_at[u]:bounds_at[u + 1]]]
        oi = int(cand[first[u]])
        rep = tuple(devices[oi, :kparts[first[u]]].tolist())
        orders = expander.expand(rep, ctx)  # (X, k)
        if not len(orders):
            continue
        pad = np.zeros((len(orders), devices.shape[1]), dtype=np.int64)
        pad[:, :orders.shape[1]] = orders
        srcs.append(np.repeat(members, len(orders)))
        devs.append(np.tile(pad, (len(members), 1)))
    if not srcs:
        empty = np.zeros(0, dtype=np.int64)
        near = _Near(np.zeros(0), empty, np.zeros((0, devices.shape[1]), dtype=np.int64), np.zeros(0), np.zeros(0),
                     thr, beyond)
        return near if capf is None or not capf.load else near._replace(loads=np.zeros((0, devices.shape[1])))
    src = np.concatenate(srcs)
    dev = np.concatenate(devs)
    after_src = after_t[src]
    if exact.objective == "memory":  # the floor does not depend on the devices
        f = lb[src] - after_src
        v = lb[src]
    else:
        f = exact.option_floors(tab, recv, energy, tab.group[src], dev, dev, comp[src], mask[src]) * (1 - FLOOR_MARGIN)
        if to_go is not None:
            after_src = np.maximum(after_src, to_go.after_options(tab, owners, dev, tab.group[src]))
        v = f + after_src
    keep = np.flatnonzero(v <= thr)
    keep = keep[np.argsort(v[keep], kind="stable")]
    rest = v[v > thr]
    if len(rest):
        beyond = min(beyond, float(rest.min()))
    near = _Near(v[keep], src[keep], dev[keep], after_src[keep], f[keep], thr, beyond)
    if capf is None:
        return near
    s_ = src[keep]
    return capf.fill(near, exact, tab, recv, tab.group[s_], comp[s_], mask[s_])


class _ExactFloors:
    """``arc_floor`` of every option of a stage from one exact state, vectorised.

    The same sums as ``_arc`` in numpy: used to select which options to price with ``_arc``
    (whose value decides), so it needs to agree with it only up to rounding."""

    def __init__(self, instance: Instance, pr: Pricer, objective: str, types=None):
        net = instance.network
        n_dev = len(instance.devices)
        self.pr, self.objective, self.n_dev = pr, objective, n_dev
        self.loads = False  # receive seconds wanted under a memory objective too (a period cap)
        self.shared = net.medium == "shared"
        self.pc = np.array([float(d.power.compute_w) for d in instance.devices])
        self.rx = np.array([float(d.power.rx_w) for d in instance.devices])
        self.tx = {o: float(instance.devices[o].power.tx_w) for o in range(n_dev)}
        self.tx[EXTERNAL] = 0.0
        self.inv_bw, self.lat = {}, {}
        for o in range(n_dev):  # seconds per byte and per message from o to each device
            self.inv_bw[o] = np.array([0.0 if o == d else 1.0 / net.bandwidth_Bps[o][d] for d in range(n_dev)])
            self.lat[o] = np.array([0.0 if o == d else net.latency_s[o][d] for d in range(n_dev)])
        if net.source.external:
            self.inv_bw[EXTERNAL] = np.array([1.0 / b for b in net.source.bandwidth_Bps])
            self.lat[EXTERNAL] = np.array(net.source.latency_s, dtype=float)
        self.wsum = {}
        self.flat_index: dict = {}  # id(table) -> (table, flat index of its options' parts, width)
        types = types if types is not None else trivial_types(n_dev)
        self.orbit_of = np.array(types.orbit, dtype=np.int64)
        self.orbits = [list(o) for o in types.orbits]
        # device -> the devices of its orbit (padded by repeating the first)
        width = max(len(o) for o in self.orbits)
        self.orbit_members = np.array([list(o) + [o[0]] * (width - len(o))
                                       for o in (types.orbits[types.orbit[d]] for d in range(n_dev))], dtype=np.int64)

    def orbit_min(self, per_device: np.ndarray | None) -> np.ndarray | None:
        """(..., devices) -> (..., orbits): the least value over each orbit's devices."""
        if per_device is None:
            return None
        return np.stack([per_device[..., o].min(axis=-1) for o in self.orbits], axis=-1)

    def received(self, tab, owners):
        """(receive seconds, receive energy or None), each (groups, parts, devices): what part j
        of group g would take to receive on device d from the state ``owners``."""
        if self.objective == "memory" and not self.loads:
            return None, None
        devices, comp, mask, needs = tab.flat()
        n_g, kmax = len(tab.groups), comp.shape[1]
        recv = np.zeros((n_g, kmax, self.n_dev))
        energy = np.zeros((n_g, kmax, self.n_dev)) if self.objective == "energy" else None
        for t, need in needs.items():
            lst = owners.get(t)
            if not lst:
                continue
            ids = [o for o, _ in lst]
            own = np.array([(r.rows[0], r.rows[1], r.chans[0], r.chans[1]) for _, r in lst], dtype=np.int64)
            nbytes = (box_cells(need[:, :, None, :], own[None, None, :, :])
                      * self.pr.unit_bytes(t)).astype(float)  # (groups, parts, owners)
            msgs = (nbytes > 0).astype(float)
            inv_bw = np.array([self.inv_bw[o] for o in ids])  # (owners, devices)
            lat = np.array([self.lat[o] for o in ids])
            # sums over the owners as products (the same sums up to rounding; the floors are
            # lowered by a relative 1e-9 where they prune, and only select options to price)
            recv += nbytes @ inv_bw + msgs @ lat
            if energy is not None:
                price = np.array([self.tx[o] for o in ids])[:, None] + self.rx[None, :]  # J per second
                energy += nbytes @ (inv_bw * price) + msgs @ (lat * price)
        return recv, energy

    def _flat_index(self, tab, group, kmax: int, width: int) -> np.ndarray:
        """(options, parts): the flat index of (group, part, 0) in a (groups, parts, width)
        array; remembered for the whole table's options (``group is tab.group``)."""
        whole = group is tab.group
        if whole:
            hit = self.flat_index.get(id(tab))
            if hit is not None and hit[0] is tab and hit[1].shape[1] == kmax and hit[2] == width:
                return hit[1]
        out = (group[:, None] * kmax + np.arange(kmax)[None, :]) * width
        if whole:
            self.flat_index[id(tab)] = (tab, out, width)
        return out

    def option_floors(self, tab, recv, energy, group, index, devices, comp, mask) -> np.ndarray:
        """The floors of options (``group``, ``devices``, ``comp``, ``mask`` per option), their
        receive terms read from ``recv``/``energy`` at ``index`` (devices, or their orbits)."""
        if self.objective == "memory":
            w = self.wsum.get(id(tab))
            if w is None:
                w = self.wsum[id(tab)] = np.array([sum(grp.weights) / self.n_dev for grp in tab.groups])
            return w[group]
        flat = self._flat_index(tab, group, comp.shape[1], recv.shape[2]) + index  # into recv[g, j, index]
        r = recv.reshape(-1)[flat] * mask  # (options, parts)
        if self.objective == "latency":
            if self.shared:
                return r.sum(axis=1) + comp.max(axis=1)
            return (comp + r).max(axis=1)
        if self.objective == "energy":
            en = energy.reshape(-1)[flat] * mask
            return (self.pc[devices] * comp * mask).sum(axis=1) + en.sum(axis=1)
        return (comp + r).sum(axis=1) / self.n_dev


LABELS = 16  # most labels a node keeps (``_CapFloors``)
#: objectives whose bound caps every device's own sum (``_CapFloors``)
SELF_CAPPED = ("period", "memory")


def memory_ceiling(instance: Instance, pr: Pricer) -> int:
    """More memory than any device can need in any plan: every layer's weights (a device holds at
    most one part of a stage) plus three times every tensor (its working set in a stage holds
    what it owns of the live tensors, what it reads beyond its own region, and what it computes)."""
    g = instance.graph
    weights = sum(layer.params for layer in g.layers) * instance.dtype_bytes
    names = set(g.inputs) | {layer.output for layer in g.layers}
    tensors = sum(pr.unit_bytes(t) * full_region(g, t).cells for t in names)
    return weights + 3 * tensors


class _CapFloors:
    """Floors of the per-device sums the instance's caps limit, to leave out during the
    enumeration the arcs that no plan within the caps can take.

    A period cap limits every device's load (compute + receive seconds) summed over the plan's
    stages; a memory cap every device's weights summed over them plus its largest working set.
    Each node keeps labels: vectors (the prefix's floor of the objective, then these sums, one
    per device and cap) such that every path enumerated to the node is at least one label in
    every entry: the undominated vectors of its prefixes, at most ``LABELS`` of them (beyond
    that, the rest are merged into their least per entry, a lower bound of each). An option
    from the node whose parts add ``adds`` (their loads lowered by a relative 1e-9, their
    weights) and need ``needs`` beside them in the stage (the working set of a part: at least
    what it reads and computes, ``relaxation.part_need``) fits a label when ``label + adds +
    needs`` is within every device's cap (the evaluator's slack kept) and the label's floor plus
    the option's floor and bound after is within the enumeration's bound. An option that fits
    no label is left out: every path through it breaks a cap (the suffix adds nothing
    negative) or the bound (then its least floor over the labels within the caps joins
    ``outside``). Its head gets ``label + (floor, adds)`` for the labels it fits. Every plan
    within the caps and the bound keeps all its arcs (by induction over the boundaries: its
    prefix is at least some label of the node, which its next arc fits). Pricing the objective
    and the capped sums together is what prunes: the cheap prefixes load one device, the
    prefixes that spread the load pay for the transfers. Not for the ``canonical``
    reduction, whose per-device data are in each arc's own frame. A shared medium's summed
    transfers are not counted (a weaker floor, still a proof)."""

    def __init__(self, instance: Instance, pr: Pricer, load_cap: float | None, mem_caps: list | None):
        self.n_dev = n = len(instance.devices)
        self.pr = pr
        self.load = load_cap is not None
        self.memory = mem_caps is not None
        limits = []
        if self.load:
            limits += [cap_limit(load_cap)] * n
        self.mem_at = len(limits)
        if self.memory:
            limits += [math.inf if c is None else float(c) for c in mem_caps]
        self.limit = np.array(limits)
        self.width = len(limits)
        self.parts: dict = {}  # id(table) -> (table, weights, working floors), each (groups, parts)
        self.pruned = 0  # arcs left out

    @staticmethod
    def of(instance: Instance, pr: Pricer, caps: bool = True, objective: str | None = None,
           own_cap: float | None = None) -> "_CapFloors | None":
        """The instance's caps (``caps``), each tightened by ``own_cap`` when the objective
        (period: every device's load; memory: every device's memory) is bounded by it."""
        c = instance.constraints
        load_cap = None if c.period_s is None or not caps else float(c.period_s)
        mem = [d.memory_bytes for d in instance.devices] if c.memory and caps else None
        if own_cap is not None and objective == "period":
            load_cap = own_cap if load_cap is None else min(load_cap, own_cap)
        elif own_cap is not None and objective == "memory":
            mem = [own_cap if m is None else min(m, own_cap) for m in (mem or [None] * len(instance.devices))]
        if mem is not None and all(m is None or m >= memory_ceiling(instance, pr) for m in mem):
            mem = None  # no plan can reach the caps (VGG-19's 8 GB boards)
        if load_cap is None and mem is None:
            return None
        return _CapFloors(instance, pr, load_cap, mem)

    def labels(self, parts, bound: float) -> np.ndarray:
        """The labels of ``parts`` (a list of label arrays): the undominated rows, at most
        ``LABELS`` (the rows past the ``LABELS - 1`` of least total, each entry relative to its
        limit, merged into their least per entry). ``bound``: the objective's (its scale)."""
        if isinstance(parts, np.ndarray):  # (labels already)
            return parts
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if len(rows) <= 1:
            return rows
        # undominated keeps equal rows once and returns lexicographic order (``np.unique``'s,
        # which this called first: 5 of 60 s on a period solve of 6 Pis, for nothing)
        rows = rows[undominated(rows[:, 0], rows[:, 1:])]
        if len(rows) > LABELS:
            lim = np.concatenate([[bound], self.limit])
            scale = np.where(np.isfinite(lim) & (lim > 0), lim, 1.0)
            order = np.argsort((rows / scale).sum(axis=1), kind="stable")
            rest = rows[order[LABELS - 1:]].min(axis=0)
            rows = np.vstack([rows[order[:LABELS - 1]], rest[None, :]])
        return rows

    def _part_table(self, tab: StageTable, kmax: int):
        hit = self.parts.get(id(tab))
        if hit is None or hit[0] is not tab:
            W = np.zeros((len(tab.groups), kmax))
            N = np.zeros((len(tab.groups), kmax))
            for gi, grp in enumerate(tab.groups):
                for j, geo in enumerate(grp.geos):
                    W[gi, j] = grp.weights[j]
                    N[gi, j] = grp.computed[j] + sum(r.cells * self.pr.unit_bytes(t) for t, r in geo.needs.items())
            hit = self.parts[id(tab)] = (tab, W, N)
        return hit[1], hit[2]

    def fill(self, near: _Near, exact: "_ExactFloors", tab: StageTable, recv, group, comp, mask) -> _Near:
        """``near`` with its options' part loads (``group``, ``comp``, ``mask``: per option, as
        ``near.devices``; ``recv``: ``_ExactFloors.received`` from the node), under a period cap."""
        if not self.load:
            return near
        kmax = comp.shape[1]
        flat = exact._flat_index(tab, group, kmax, recv.shape[2]) + near.devices[:, :kmax]
        return near._replace(loads=(comp + recv.reshape(-1)[flat]) * mask * (1 - FLOOR_MARGIN))

    def steps(self, near: _Near, tab: StageTable, k: int):
        """(adds, needs), each (options, width), of the first ``k`` options of ``near``."""
        adds = np.zeros((k, self.width))
        needs = np.zeros((k, self.width))
        if not k:
            return adds, needs
        devs = near.devices[:k]
        kmax = devs.shape[1]
        rows = np.repeat(np.arange(k), kmax).reshape(k, kmax)
        if self.load:
            np.add.at(adds, (rows, devs), near.loads[:k])
        if self.memory:
            W, N = self._part_table(tab, kmax)
            group = tab.group[near.src[:k]]
            # (a padding part is device 0 with 0 bytes: it adds nothing)
            np.add.at(adds, (rows, self.mem_at + devs), W[group])
            np.maximum.at(needs, (rows, self.mem_at + devs), N[group])
        return adds, needs


class _WeightedCap:
    """The period's own bound ``T`` through the relaxation's device weights ``w`` (normalised to
    sum 1; ``relaxation``, weighted period floors). A plan of period at most ``T`` loads every
    device at most ``T``, so ``sum_d w_d (prefix_d + option_d + rest_d) <= T``; the weighted
    bound on the rest from the option's head class (``LayoutBounds.weighted_to_go``) is at most
    ``sum_d w_d rest_d``, and a label's loads are at most the prefix's. An option with no label
    meeting that is taken by no plan of period at most ``T``."""

    def __init__(self, w: np.ndarray, to_go: list, limit: float):
        self.w, self.to_go, self.limit = w, to_go, limit
        self.after: dict = {}  # (id(table), class) -> (table, weighted bound after each option)

    @staticmethod
    def of(bounds: LayoutBounds, own_cap: float | None) -> "_WeightedCap | None":
        if own_cap is None or bounds.weights is None or not bounds.weighted_to_go:
            return None
        w = np.clip(np.asarray(bounds.weights, dtype=float), 0.0, None)
        return _WeightedCap(w / w.sum(), bounds.weighted_to_go, cap_limit(own_cap))

    def fit(self, here: np.ndarray, adds: np.ndarray, src: np.ndarray, bounds: LayoutBounds,
            tab: StageTable, e: int, ci: int | None) -> np.ndarray:
        """(options, labels): whether each option (``adds``: its per-device loads first) meets
        the weighted bound from each label (``here``: floor, then per-device loads)."""
        n = len(self.w)
        if ci is None:  # a class the relaxation did not reach: the rest bounded by 0
            rest = np.zeros(len(src))
        else:
            hit = self.after.get((id(tab), ci))
            if hit is None or hit[0] is not tab:
                hit = self.after[(id(tab), ci)] = (tab, rest_after(self.to_go, tab, e, ci))
            rest = hit[1][src]
        prefix = here[:, 1:1 + n] @ self.w  # (labels,)
        step = adds[:, :n] @ self.w + rest  # (options,)
        return (prefix[None, :] + step[:, None]) * (1 - FLOOR_MARGIN) <= self.limit


def _arc(pr: Pricer, opt: StageOption, geos, comp, weights, computed, owners) -> Arc:
    """Price one option from one state (``price_stage``, with the group's precomputed compute
    seconds, weight and computed bytes per part); the arc's tail and head are unset."""
    sp = price_stage(pr, owners, opt.last, opt.devices, geos, comp, weights, computed, successor=False)
    return Arc(-1, -1, opt, sp.tau, sp.energy, tuple(sp.load), sp.transfer_s, tuple(sp.weights),
               tuple(sp.working))


def _owner_key(owner):
    return owner[1].rows, owner[1].chans, owner[0]

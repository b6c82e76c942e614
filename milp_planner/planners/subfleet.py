"""Better plans from restricted spaces: exact searches over sub-fleets and smaller spaces.

Every plan of a sub-fleet (``milp_planner.instance.restrict``) is a plan of the fleet, and
every plan of a space with fewer parts per stage or shorter fused stages is a plan of the
instance's space. The exact search certifies these restricted spaces much faster than the
whole one, so ``dp``, ``milp`` and ``cpsat`` use them in two places (docs/exact.md, "Anytime"):

- the **ladder** (before the full search, within ``LADDER_SHARE`` of the time limit): the
  sub-fleets of the source/sink devices plus the 1, 2, 3, ... best other devices
  (``fleet_order``). First the fast baselines run on every rung (``rung_starts``: a plan a
  baseline finds on a sub-fleet is often better than what it finds on the whole fleet, and
  is a plan of the fleet); then each rung is solved exactly within what is left of that
  share, until one does not settle (certify its optimum, or prove it cannot beat the best
  plan known). Its best plan joins the anytime start, so a fleet never returns a worse plan
  than a smaller one whose search settles within the share, nor than the fast baselines'
  best on one of its rungs.
- the **improvement loop** (after the full search stopped early: refused, label budget,
  coarse relaxation only, or any other stop with time left): the incumbent's devices (alone,
  then with one more device each time, one of each class of interchangeable additions), the
  ladder's unsettled rungs (every rung when the ladder did not run), then the sub-fleets and
  the whole fleet with at most 2 parts per stage and, last, without fusion. Each restricted
  search gets at most half the time left.

Each search is the planner's own rounds (``ExactPlanner.explore``) with the best value known
as the incumbent, so it enumerates only plans that beat it. Its plan is scored again by the
evaluator on the **whole** instance and kept only if it is in the instance's space, meets
the caps and beats the best plan known: nothing of a restricted search is trusted. The bound
of the result stays the one proven for the whole space.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import NamedTuple

from milp_planner.deadline import NEVER, Deadline
from formulations.budget import MemoryBudgetExceeded
from formulations.certificate import MemoryStop, SearchStopped
from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.instance.restrict import endpoint_devices, restrict_devices
from milp_planner.space.cuts import speeds
from milp_planner.space.plan import Plan

#: of the time limit: the ladder before the full search (the full relaxation gets its time back,
#: ``RoundSettings.relaxation_credit``: with 25 % it lost the bound of resnet101 on 8 boards)
LADDER_SHARE = 0.15
#: of the time limit, before the ladder's share: the fast baselines on every rung's sub-fleet
#: (``rung_starts``; not taken from the ladder's share, whose exact rungs are often cut short)
RUNG_STARTS_SHARE = 0.05
MIN_RUNG_START_S = 0.2  # a rung's baselines are not started with less time than this
LADDER_MIN_LIMIT_S = 5.0  # no ladder under a shorter time limit (the start and the search need it)
NO_LIMIT_IMPROVE_S = 30.0  # the improvement loop's seconds without a time limit
MIN_TRY_S = 0.3  # a restricted search is not started with less time than this
#: latency and energy over at most this many stage options (type orders, summed over the
#: stages) are certified by the full search within seconds: the ladder is skipped there
#: (``ladder_pays``)
SMALL_SPACE_OPTIONS = 120_000
#: ... unless memory caps are set on a fleet of more than this many devices: the caps' label
#: searches make the full search slow there (ResNet-50 on 8 devices of 2 types, energy: the rounds
#: took the whole minute and returned pipeedge's 476.0 mJ; the ladder's 3-Nano rung certifies
#: 473.3 mJ in 2.6 s)
SMALL_CAPPED_FLEET = 4
#: ... and never over a space of at most this many stage options on at most ``TINY_FLEET``
#: devices, whatever the objective: the full search certifies those in about a second, and on
#: ``examples/tiny-residual-3dev.yaml`` (165 options) the ladder took 0.3-0.4 of the period's
#: 1.4 s (on more devices a small space can still be slow to certify: VGG16 on 6 identical
#: devices, 412 options, where polish improves the period's plan)
TINY_SPACE_OPTIONS = 1_000
TINY_FLEET = 3
BETTER = 1e-9  # relative: a plan must beat the best known by this much to replace it


@dataclass(frozen=True)
class Restriction:
    """A restricted space: the devices kept (names, in the instance's order) and the search
    space's parts per stage and fusion limit (at most the instance's)."""

    devices: tuple[str, ...]
    max_parts: int
    fusion_limit: int
    label: str

    @property
    def key(self) -> tuple:
        """What the restricted space is, whatever its label."""
        return frozenset(self.devices), self.max_parts, self.fusion_limit

    def instance(self, instance: Instance) -> Instance:
        """The restricted instance (raises ``PlannerError`` if it drops the source/sink)."""
        sub = restrict_devices(instance, self.devices) if len(self.devices) < len(instance.devices) else instance
        sp = instance.search
        if self.max_parts != sp.max_parts or self.fusion_limit != sp.fusion_limit:
            sub = replace(sub, search=replace(sp, max_parts=self.max_parts, fusion_limit=self.fusion_limit))
        return sub


@dataclass
class Found:
    """A plan of the instance's space from a restricted search, as the evaluator scores it on
    the whole instance."""

    plan: Plan
    value: float
    source: str  # the restriction's label


@dataclass
class Tried:
    """One restricted search: what it gave and whether it settled (certified its optimum,
    proved it cannot beat the best known, or proved it infeasible)."""

    label: str
    outcome: str
    settled: bool
    seconds: float
    key: tuple = ()  # the restriction's key

    def to_dict(self) -> dict:
        return {"space": self.label, "outcome": self.outcome, "settled": self.settled,
                "seconds": round(self.seconds, 3)}


@dataclass
class ImproveReport:
    """The restricted searches of one phase (``ladder`` or ``improve``) and their best plan."""

    phase: str
    best: Found | None = None
    tried: list[Tried] = field(default_factory=list)
    seconds: float = 0.0

    def info(self) -> dict:
        return {"best": self.best.value if self.best else None, "from": self.best.source if self.best else None,
                "tried": [t.to_dict() for t in self.tried], "seconds": round(self.seconds, 3)}


def fleet_order(instance: Instance, objective: str) -> list[int]:
    """The devices in the order the ladder adds them: the source/sink devices first, then the
    others by their time for the whole model alone (energy: its energy), fastest first; ties go
    to the device with the most bandwidth to those already chosen, then to the lower index."""
    spd = speeds(instance)
    chosen = list(endpoint_devices(instance))
    rest = [d for d in range(len(instance.devices)) if d not in chosen]
    bw = instance.network.bandwidth_Bps

    def cost(d: int) -> Fraction:
        if objective == "energy":
            return Fraction(instance.devices[d].power.compute_w) / spd[d]
        return 1 / spd[d]

    while rest:
        best = min(rest, key=lambda d: (cost(d), -sum(bw[c][d] + bw[d][c] for c in chosen), d))
        chosen.append(best)
        rest.remove(best)
    return chosen


def machines(instance: Instance, objective: str) -> list[list[int]]:
    """The devices grouped by machine (``Device.node``; a device without one is its own), the
    machines in the order of their first device in ``fleet_order``."""
    groups: dict[str, list[int]] = {}
    for d in fleet_order(instance, objective):
        node = instance.devices[d].node
        groups.setdefault(node if node else f"#{d}", []).append(d)
    return list(groups.values())


def ladder(instance: Instance, objective: str) -> list[Restriction]:
    """The sub-fleets of the ladder (smallest first), none of them the whole fleet: the
    machines (``machines``) of the source/sink devices plus the 1, 2, ... first other
    machines; a machine's units join together (they share its fast internal links)."""
    names = instance.device_names
    sp = instance.search
    groups = machines(instance, objective)
    ends = set(endpoint_devices(instance))
    first = max(1, sum(1 for g in groups if ends & set(g)))
    out = []
    for k in range(first, len(groups)):
        devices = sorted(d for g in groups[:k] for d in g)
        if len(devices) < 2:
            continue
        keep = tuple(names[d] for d in devices)
        what = f"{k} machine{'s' if k > 1 else ''}" if any(len(g) > 1 for g in groups) else f"{len(keep)} devices"
        out.append(Restriction(keep, sp.max_parts, sp.fusion_limit, f"sub-fleet of {what}: {'+'.join(keep)}"))
    return out


class SpaceSize(NamedTuple):
    """How many stage options a space has, counted as the relaxation's tables list them (one
    device order per sequence of device types, ``formulations.options``)."""

    total: int  # summed over every stage (a lower count once past ``stop_above``)
    largest: int  # of the largest stage counted


def space_size(instance: Instance, symmetry: bool = True, stop_above: int | None = None,
               deadline: Deadline = NEVER) -> SpaceSize:
    """The instance's ``SpaceSize``; counting stops once the total is above ``stop_above``.
    Only cut vectors are listed (cached for the relaxation), no geometry; ``TimeoutError`` past
    ``deadline`` (16 devices' capacity cuts take seconds)."""
    from formulations.symmetry import device_types, order_count
    from milp_planner.space.cuts import cut_vectors, stage_extent

    g, sp = instance.graph, instance.search
    n, fl = len(g.layers), max(1, sp.fusion_limit)
    types = device_types(instance, symmetry)
    kmax = min(sp.max_parts, len(instance.devices))
    orders = [order_count(types, k) for k in range(kmax + 1)]
    per_axis: dict[tuple[str, int], int] = {}  # (axis, extent) -> options of its splits
    total = largest = 0
    for b in range(n):
        rows_ok = "rows" in sp.axes
        for e in range(b, min(n, b + fl)):
            rows_ok = rows_ok and g.layers[e].row_splittable
            axes = ["rows"] if rows_ok else []
            if "channels" in sp.axes and b == e and g.layers[b].channel_splittable:
                axes.append("channels")
            stage = orders[1]  # the stage on one device
            for axis in axes:
                key = (axis, stage_extent(instance, e, axis))
                if key not in per_axis:
                    count = 0
                    for k in range(2, kmax + 1):  # (the larger k, the more cut vectors to list)
                        count += len(cut_vectors(instance, key[1], k, deadline)) * orders[k]
                        if stop_above is not None and total + stage + count > stop_above:
                            return SpaceSize(total + stage + count, max(largest, stage + count))
                    per_axis[key] = count
                stage += per_axis[key]
            total += stage
            largest = max(largest, stage)
            if stop_above is not None and total > stop_above:
                return SpaceSize(total, largest)
    return SpaceSize(total, largest)


def ladder_pays(instance: Instance, objective: str, max_options: int, symmetry: bool = True,
                deadline: Deadline = NEVER) -> bool:
    """Whether the ladder may pay before the full search. Not for latency and energy over a
    small space (at most ``SMALL_SPACE_OPTIONS`` stage options, no stage over ``max_options``):
    the full search certifies those within seconds (VGG16 on 4 devices, 104,008 options: about
    3 s, of which the ladder's two rungs took 0.6 to 0.9 s and never found a better plan), and
    should it stop early, the improvement loop still tries every rung. The ladder found better
    plans on larger spaces: AutoDiCE's VGG-19 on 4 and 8 boards (about 176,000 options), 8 and
    16 distinct devices (millions). Always with memory caps on more than ``SMALL_CAPPED_FLEET``
    devices. Never, for any objective, over a space of at most ``TINY_SPACE_OPTIONS`` options on at
    most ``TINY_FLEET`` devices. Past ``deadline`` the space counts as not small."""
    if len(instance.devices) <= TINY_FLEET and small_space(instance, max_options, symmetry,
                                                           at_most=TINY_SPACE_OPTIONS, deadline=deadline):
        return False
    if objective not in ("latency", "energy"):
        return True
    if instance.memory_capped and len(instance.devices) > SMALL_CAPPED_FLEET:
        return True
    return not small_space(instance, max_options, symmetry, deadline=deadline)


def small_space(instance: Instance, max_options: int, symmetry: bool = True, at_most: int | None = None,
                deadline: Deadline = NEVER) -> bool:
    """At most ``at_most`` (default ``SMALL_SPACE_OPTIONS``) stage options in all
    (``space_size``) and no stage over ``max_options``."""
    if at_most is None:
        at_most = SMALL_SPACE_OPTIONS
    try:
        size = space_size(instance, symmetry, stop_above=at_most, deadline=deadline)
    except (PlannerError, TimeoutError):  # a split family too large to list, or no time to: not small
        return False
    return size.total <= at_most and size.largest <= max_options


def neighbourhoods(instance: Instance, objective: str, incumbent: Plan | None,
                   unsettled: list[Restriction], settled: set | frozenset = frozenset()) -> list[Restriction]:
    """The improvement loop's restricted spaces, in order (see the module docstring), without
    the whole space and without those in ``settled`` (keys of ``Restriction.key``)."""
    sp = instance.search
    names = instance.device_names
    order = fleet_order(instance, objective)
    out: list[Restriction] = []
    if incumbent is not None:
        used = {p.device for s in incumbent.stages for p in s.parts} | {names[d] for d in endpoint_devices(instance)}
        base = [d for d in order if names[d] in used]
        if len(base) < len(names):
            out.append(_sub(names, base, sp.max_parts, sp.fusion_limit, "the incumbent's devices"))
        added = set()
        for d in order:
            if names[d] not in used and _twin_key(instance, base, d) not in added:
                added.add(_twin_key(instance, base, d))
                out.append(_sub(names, base + [d], sp.max_parts, sp.fusion_limit,
                                f"the incumbent's devices and {names[d]}"))
    out += unsettled
    smaller = []
    if sp.max_parts > 2:
        smaller.append((2, sp.fusion_limit, "at most 2 parts per stage"))
    if sp.fusion_limit > 1:
        smaller.append((min(sp.max_parts, 2), 1, f"{'at most 2 parts per stage, ' if sp.max_parts > 1 else ''}"
                                                  "no fusion"))
    for mp, fl, what in smaller:
        for r in ladder(instance, objective):
            out.append(Restriction(r.devices, mp, fl, f"{r.label}, {what}"))
        out.append(Restriction(tuple(names), mp, fl, f"the whole fleet, {what}"))
    whole = Restriction(tuple(names), sp.max_parts, sp.fusion_limit, "").key
    seen, unique = set(settled) | {whole}, []
    for r in out:
        if r.key not in seen:
            seen.add(r.key)
            unique.append(r)
    return unique


def _twin_key(instance: Instance, base: list[int], d: int) -> tuple:
    """Devices with equal keys are interchangeable once added to ``base``: the same cost model,
    memory and power, the same links to and from the devices of ``base`` and the endpoints, and
    the same machine relation to them (sub-fleets that differ only by which twin they add hold
    the same plans up to renaming)."""
    dev, net = instance.devices[d], instance.network
    ends = tuple((e.bandwidth_Bps[d], e.latency_s[d]) for e in (net.source, net.sink) if e.external)
    links = tuple((net.bandwidth_Bps[b][d], net.bandwidth_Bps[d][b], net.latency_s[b][d], net.latency_s[d][b])
                  for b in base)
    same_node = tuple(bool(dev.node) and instance.devices[b].node == dev.node for b in base)
    return repr(dev.compute), dev.memory_bytes, repr(dev.power), dev.profile, links, ends, same_node


def _sub(names, devices, max_parts, fusion_limit, what) -> Restriction:
    keep = tuple(names[d] for d in sorted(devices))
    return Restriction(keep, max_parts, fusion_limit, f"{what} ({'+'.join(keep)})")


def rung_starts(instance: Instance, objective: str, rungs: list[Restriction], best_value: float | None,
                deadline: Deadline, seed: int = 0) -> ImproveReport:
    """The fast baselines of the anytime start (``anytime_start.run_start``) on each rung's
    sub-fleet in turn, smallest first, until ``deadline``; each rung gets an equal share of the
    time left. A plan is kept when the evaluator on the whole ``instance`` finds it in the
    space, within the caps and better than ``best_value``.
    The baselines' plans on a fleet do not dominate those on its sub-fleets: on AutoDiCE's
    VGG-19, coopai's plan projected into the space of 4 boards has a latency of 36.44 ms, and
    on 8 boards (whose space holds that plan) 37.74 ms."""
    from milp_planner.planners.anytime_start import run_start

    t0 = time.perf_counter()
    rep = ImproveReport("rung starts")
    for i, r in enumerate(rungs):
        share = deadline.left() / (len(rungs) - i)
        if share < MIN_RUNG_START_S:
            break
        started = time.perf_counter()
        try:
            # time_limit=share: no patience past the share when no baseline's plan is usable
            start = run_start(r.instance(instance), objective, share, seed=seed, time_limit=share)
        except PlannerError as err:
            rep.tried.append(Tried(r.label, f"no plan: {str(err).splitlines()[0][:160]}", False,
                                   time.perf_counter() - started, r.key))
            continue
        outcome = "no usable plan"
        if start.start is not None:
            plan = Plan(instance.name, list(start.start.plan.stages), meta=dict(start.start.plan.meta))
            m = evaluate(plan, instance)
            if m.in_space and m.feasible:
                value = m.value(objective)
                outcome = f"{value:.6g} ({start.start.baseline})"
                if best_value is None or value < best_value * (1 - BETTER):
                    best_value = value
                    rep.best = Found(plan, value, f"{start.start.baseline} on the {r.label}")
        rep.tried.append(Tried(r.label, outcome, False, time.perf_counter() - started, r.key))
    rep.seconds = time.perf_counter() - t0
    return rep


def search_restricted(planner, instance: Instance, ctx, restrictions, best_value: float | None, deadline: Deadline,
                      phase: str, per_try: float = 0.5, stop_unsettled: bool = False) -> ImproveReport:
    """Run ``planner``'s exact rounds over each restricted space in turn until ``deadline``:
    each gets at most ``per_try`` of the time left. A plan is kept when the evaluator on the
    whole ``instance`` finds it in the space, within the caps and better than ``best_value``
    (None: any). ``stop_unsettled``: stop at the first search that
    does not settle (the ladder: larger sub-fleets are harder)."""
    from milp_planner.planners.base import SolveContext

    t0 = time.perf_counter()
    rep = ImproveReport(phase)
    obj = ctx.objective
    for r in restrictions:
        left = deadline.left()
        if left < MIN_TRY_S:
            break
        share = max(MIN_TRY_S, per_try * left)
        ctx.report(phase=f"{phase}: {r.label}", incumbent=best_value, force=True)
        started = time.perf_counter()
        sub_ctx = SolveContext(obj, share, ctx.threads, ctx.seed, None)
        try:
            sub = r.instance(instance)
            ex = planner.explore(sub, sub_ctx, incumbent=best_value)
        except MemoryBudgetExceeded:
            rep.tried.append(Tried(r.label, "the memory budget stopped it", False, time.perf_counter() - started,
                                   r.key))
            break
        except (SearchStopped, PlannerError, TimeoutError) as err:
            why = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
            rep.tried.append(Tried(r.label, f"no plan: {why}", False, time.perf_counter() - started, r.key))
            if stop_unsettled or isinstance(err, MemoryStop):
                break
            continue
        proven = ex.lower is not None and best_value is not None and ex.lower >= best_value * (1 - 1e-7)
        settled = ex.certified or ex.infeasible or proven
        outcome = "infeasible" if ex.infeasible else ("nothing better" if proven and not ex.certified else "")
        if ex.found is not None and ex.found.arcs:
            plan = ex.graph.plan_from_arcs(ex.found.arcs)
            plan.instance = instance.name
            m = evaluate(plan, instance)
            if not (m.in_space and m.feasible):  # cannot be for a subset of the space: never trusted
                why = "; ".join(m.space_reasons or m.violations)
                outcome = f"its plan is not usable on the whole instance: {why}"[:240]
            else:
                value = m.value(obj)
                outcome = f"{value:.6g}" + (" (certified)" if ex.certified else "")
                if best_value is None or value < best_value * (1 - BETTER):
                    best_value = value
                    rep.best = Found(plan, value, r.label)
                    ctx.report(phase=f"{phase}: {r.label}", incumbent=value, force=True)
        rep.tried.append(Tried(r.label, outcome or ("stopped" if not settled else "settled"), settled,
                               time.perf_counter() - started, r.key))
        if ex.memory_out or (stop_unsettled and not settled):  # (the next search would hit the budget too)
            break
    rep.seconds = time.perf_counter() - t0
    return rep

"""The anytime start of the exact planners: the best plan of the fast baselines, in the space.

``dp``, ``milp`` and ``cpsat`` first run ``START_BASELINES`` within a small share of the time
limit (``start_budget``; longer while none has given a usable plan, ``start_patience``). A baseline plan outside the instance's space is projected into it
(``project``): stages longer than ``fusion_limit`` are cut into runs of at most that many
layers, a split along an axis the space (or a layer) does not allow becomes one part on the
device with the largest part, parts beyond ``max_parts`` are dropped (the largest are kept),
and the cuts snap to the nearest cut vector of the split families (least total distance in
rows or channels). The projected plan is evaluated again and kept only if it is in the space
and meets the caps. The best such plan is the rounds' incumbent (docs/exact.md, "Anytime").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from milp_planner.deadline import NEVER, Deadline
from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.space.cuts import nearest_cuts, ranges_from_cuts, stage_extent
from milp_planner.space.plan import Part, Plan, Stage

#: the fast baselines, cheapest and most often best first (measured: each well under a second
#: on VGG16 with 7 devices; hidp and deeperthings take longer on 16 devices). ``modnn`` and
#: ``coedge`` come first after offload: a few milliseconds each (3 ms on a 6-layer chain over 16
#: devices, 30 ms on ResNet50 over 16 devices of 4 types), and their splits over every device
#: often fit memory caps that the other plans break. ``pipeedge`` next: its pipelines respect
#: the memory caps, which often no other baseline meets on typed fleets (about 0.1-0.3 s on
#: ResNet50 with 16 devices of 4 types), but its DP over device multisets takes 0.66 s on that
#: 16-device chain: run second, it spent a 0.5 s start alone and the exact planner returned the
#: one-device plan (3.98 s, against modnn's 1.31 s) at every limit up to 2.5 s.
#: ``hybrid`` comes after the cheap ones, except for the period (``start_order``): its groups
#: give the best period plans by far on fleets of 5-16 devices (VGG-19 on 8 Xavier NX boards:
#: 13.0 ms against pipeedge's 20.95), in 0.2-0.9 s on VGG and 1.5-3 s on ResNet-101 and
#: DenseNet-121 with 16 units, where it takes what is left of the start and returns its best
#: plan at the limit; for latency it is sometimes the best (VGG-19 on 8 boards: 38.0 ms against
#: coedge's 44.2) but as slow, so it must not starve coedge and coopai.
START_BASELINES = ("offload", "modnn", "coedge", "pipeedge", "hybrid", "coopai", "aofl", "neurosurgeon",
                   "deeperthings", "hidp")
#: baselines run right after pipeedge for an objective
EARLY_BASELINES = {"period": ("hybrid",)}
#: baselines run after ``coopai`` on fleets of at most ``SMALL_FLEET`` devices (latency, energy,
#: memory), where coopai is fast and hybrid is not: on DenseNet-121 over 4 devices hybrid took the
#: last second of the start (1.64 J), so coopai's plan (0.7019 J, which the flow floor proves
#: optimal) was never run and the energy row lost its certificate
LATE_ON_SMALL_FLEETS = ("hybrid",)
MAX_START_S = 2.0  # the start never takes more (plus one baseline's overrun), once it has a plan
#: on fleets of more than ``SMALL_FLEET`` devices the cap grows by this much per device (16 devices:
#: 5 s): hybrid's DP on ResNet-50 over 16 devices takes 1.5-2.5 s, and cut short by a 2 s start on a
#: loaded machine it gave 57.28 ms instead of 43.27 ms (latency)
PER_DEVICE_START_S = 0.25
SMALL_FLEET = 4
NO_LIMIT_START_S = 2.0  # its budget without a time limit
MIN_SHARE_S = 0.02  # a baseline is not started with less time than this left
PROJECT_S = 0.3  # a projection may overrun the start by this much (listing the cut vectors)
#: with no usable plan at the end of its budget, the start goes on with the next baselines, up
#: to this many seconds more and at most ``PATIENT_SHARE`` of the time limit in all
PATIENCE_S = 8.0
PATIENT_SHARE = 0.8


def start_order(objective: str, n_devices: int = 0) -> tuple[str, ...]:
    """``START_BASELINES`` in the order the start runs them for ``objective``: those of
    ``EARLY_BASELINES[objective]`` moved right after pipeedge; else, on fleets of at most
    ``SMALL_FLEET`` devices (``n_devices``), those of ``LATE_ON_SMALL_FLEETS`` moved after coopai."""
    early = EARLY_BASELINES.get(objective, ())
    rest = tuple(b for b in START_BASELINES if b not in early)
    at = rest.index("pipeedge") + 1
    order = rest[:at] + early + rest[at:]
    if early or n_devices > SMALL_FLEET:
        return order
    late = tuple(b for b in LATE_ON_SMALL_FLEETS if b in order)
    order = tuple(b for b in order if b not in late)
    at = order.index("coopai") + 1
    return order[:at] + late + order[at:]


def start_budget(time_limit: float | None, n_devices: int = 0) -> float:
    """Seconds the baselines may take: 10 % of the limit, at least 0.5 s (or the whole limit
    when shorter), at most ``MAX_START_S`` plus ``PER_DEVICE_START_S`` per device beyond
    ``SMALL_FLEET`` (``n_devices``)."""
    if time_limit is None:
        return NO_LIMIT_START_S
    cap = MAX_START_S + PER_DEVICE_START_S * max(0, n_devices - SMALL_FLEET)
    return max(0.0, min(cap, time_limit, max(0.1 * time_limit, 0.5)))


@dataclass
class Start:
    """The incumbent the exact search starts from."""

    plan: Plan
    value: float  # the evaluator's objective
    baseline: str  # the baseline that gave it
    projected: bool  # its plan was outside the space and was projected into it


@dataclass
class StartReport:
    """What the anytime start did: the incumbent (None: no baseline plan fits), each
    baseline's outcome, the seconds spent."""

    start: Start | None
    outcomes: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    values: dict[str, float] = field(default_factory=dict)  # the usable plans' objectives
    plans: dict[str, Plan] = field(default_factory=dict)  # the usable plans (in the space, within the caps)
    memory_search: dict | None = None  # the memory objective's restricted searches (planners.exact)
    polish: dict | None = None  # the combination of the plans' layouts (planners.exact, milp_planner.engine.polish)
    aside: Start | None = None  # a better plan not given to the rounds as their incumbent (planners.exact)

    def ranked_plans(self) -> list[Plan]:
        """The incumbent's plan, then every usable baseline plan, best first."""
        out = [self.start.plan] if self.start is not None else []
        out += [self.plans[n] for n in sorted(self.plans, key=lambda n: self.values[n])
                if self.start is None or self.plans[n] is not self.start.plan]
        return out

    def info(self) -> dict:
        """For ``PlanResult.info["anytime"]``."""
        s = self.start
        out = {"start": s.baseline if s else None, "start_value": s.value if s else None,
               "projected": s.projected if s else None, "baselines": dict(self.outcomes),
               "values": dict(self.values), "seconds": self.seconds}
        if self.memory_search is not None:
            out["memory_search"] = self.memory_search
        if self.polish is not None:
            out["polish"] = self.polish
        return out


def start_patience(budget: float, time_limit: float | None) -> float:
    """Seconds past ``budget`` the start may go on while no baseline has given a usable plan
    (the rounds rarely find one sooner where every fast baseline's plan breaks a cap)."""
    extra = PATIENCE_S if time_limit is None else min(PATIENCE_S, PATIENT_SHARE * time_limit - budget)
    return max(0.0, extra)


def run_start(instance: Instance, objective: str, budget: float, seed: int = 0,
              time_limit: float | None = None) -> StartReport:
    """Run the fast baselines (``start_order(objective, devices)``) within ``budget`` seconds and keep the
    best plan of the space (projected into it where needed) that meets the caps. Each baseline gets the time left as
    its limit; one is not started with less than ``MIN_SHARE_S`` left. While no plan is usable,
    the start goes on for ``start_patience(budget, time_limit)`` more seconds (``time_limit``:
    the exact planner's, None without one)."""
    from milp_planner.planners import get_planner

    t0 = time.perf_counter()
    best: Start | None = None
    outcomes: dict[str, str] = {}
    values: dict[str, float] = {}
    plans: dict[str, Plan] = {}
    end = Deadline.after(budget)
    patient = Deadline.after(budget + start_patience(budget, time_limit))  # while no plan is usable
    for name in start_order(objective, len(instance.devices)):
        stop = patient if best is None else end
        left = stop.left()
        if left < MIN_SHARE_S:
            outcomes[name] = "not run: the start's time was spent"
            continue
        try:
            res = get_planner(name).solve(instance, objective=objective, time_limit=left, seed=seed)
        except Exception as err:  # noqa: BLE001 - a baseline that fails only loses a candidate
            outcomes[name] = f"failed: {str(err).splitlines()[0][:160] if str(err) else type(err).__name__}"
            continue
        if res.plan is None or res.metrics is None:
            outcomes[name] = f"no plan ({res.status})"
            continue
        plan, m, projected = res.plan, res.metrics, False
        if not m.in_space:
            try:
                plan = project(res.plan, instance, deadline=stop.at_least(PROJECT_S))
                m = evaluate(plan, instance)
            except PlannerError as err:
                outcomes[name] = f"outside the space, projection failed: {err}"
                continue
            projected = True
        if not m.in_space or not m.feasible:
            why = "; ".join(m.space_reasons or m.violations)
            outcomes[name] = f"{'projected plan ' if projected else ''}not usable: {why}"[:240]
            continue
        value = values[name] = m.value(objective)
        plans[name] = plan
        outcomes[name] = f"{value:.6g}" + (" (projected into the space)" if projected else "")
        if best is None or value < best.value:
            best = Start(plan, value, name, projected)
    return StartReport(best, outcomes, time.perf_counter() - t0, values, plans)


def project(plan: Plan, instance: Instance, deadline: Deadline = NEVER) -> Plan:
    """``plan`` moved into the instance's space (see the module docstring); raises
    ``PlannerError`` if a stage cannot be or past ``deadline`` (checked
    between stages)."""
    fl = max(1, instance.search.fusion_limit)
    stages = []
    for s in plan.stages:
        if deadline.passed():
            raise PlannerError("the start's time ran out while projecting")
        for first in range(s.first, s.last + 1, fl):
            stages.append(_project_stage(instance, s, first, min(s.last, first + fl - 1)))
    return Plan(instance.name, stages, meta=dict(plan.meta, projected_from=plan.meta.get("planner")))


def _size(p: Part) -> int:
    return p.range[1] - p.range[0] if p.range is not None else 0


def _project_stage(instance: Instance, s: Stage, first: int, last: int) -> Stage:
    sp = instance.search
    g = instance.graph
    if len(s.parts) == 1 or s.axis == "none":
        return Stage(first, last, "none", (Part(s.parts[0].device),))
    biggest = max(s.parts, key=_size)
    whole = Stage(first, last, "none", (Part(biggest.device),))
    k_max = min(sp.max_parts, len(instance.devices))
    axis = s.axis
    if axis == "rows":
        ok = all(g.layers[i].row_splittable for i in range(first, last + 1))
    else:
        ok = first == last and g.layers[first].channel_splittable
    if axis not in sp.axes or not ok or k_max < 2:
        return whole
    keep = sorted(sorted(s.parts, key=_size, reverse=True)[:k_max], key=lambda p: p.range[0])
    n = stage_extent(instance, last, axis)
    while len(keep) >= 2:
        cuts = nearest_cuts(instance, n, [_size(p) for p in keep])
        if cuts is not None:
            parts = tuple(Part(p.device, r) for p, r in zip(keep, ranges_from_cuts(cuts, n)))
            return Stage(first, last, axis, parts)
        smallest = min(keep, key=_size)
        keep = [p for p in keep if p is not smallest]
    return whole

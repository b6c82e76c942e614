"""Shared plan-construction and search helpers for the heuristic and search baselines.

Stages are handled as light tuples ``(first, last, axis, [(device index, range), ...])``, the
evaluator's normalized form (``evaluator.normalized_stages``): a one-part stage is written
with axis ``none`` and range ``None``. ``to_plan`` turns a list of them into a ``Plan``.

The pieces:
  * splitting: ``proportional_counts`` (largest remainder, no empty part), ``split_stage``,
    ``equal_ranges`` / ``capacity_ranges`` (the docs/model.md split families, so a plan built with
    them is inside the search space when the family is listed);
  * device facts: ``rates`` (effective linear MAC/s), ``speed_weights`` (the capacity speeds),
    ``fastest_device``, ``mean_in_bandwidth``;
  * scoring: ``evaluate_tuples``, ``score`` (feasible first, then the objective), ``best_of``;
  * ``Sim``: prices one stage at a time given who owns which rows, through the evaluator's own
    ``price_stage`` (so latency and energy are the evaluator's; memory is left to it);
  * ``stage_dp``: a dynamic program over stage boundaries whose state is the ownership of the
    tensors live at the boundary. Over any candidate set of stages it is exact for latency and
    energy, because a stage's cost depends only on who owns what it reads.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from milp_planner.deadline import NEVER, Deadline
from milp_planner.cost.evaluator import (
    EXTERNAL,
    Metrics,
    StagePrice,
    evaluate,
    initial_owners,
    price_gather,
    price_stage,
    pricer,
)
from milp_planner.model.graph import last_readers
from milp_planner.instance import Instance
from milp_planner.space.plan import Part, Plan, Stage
from milp_planner.space.cuts import (
    capacity_cuts,
    equal_cuts,
    ranges_from_cuts,
    speeds,
    whole_model_time,
)

StageT = tuple  # (first, last, axis, [(device index, range | None), ...])


# ---------------------------------------------------------------------------------------
# Building stages and plans


def norm_stage(first: int, last: int, axis: str, parts: Sequence[tuple[int, tuple[int, int] | None]]) -> StageT:
    """Normalize: drop empty parts, one part -> axis none without range, parts sorted by range."""
    parts = [(d, r) for d, r in parts if r is None or r[0] < r[1]]
    if not parts:
        raise ValueError(f"stage {first}-{last} has no part")
    if len(parts) == 1 or axis == "none":
        if len(parts) != 1:
            raise ValueError(f"stage {first}-{last}: axis none takes one part")
        return (first, last, "none", ((parts[0][0], None),))
    return (first, last, axis, tuple(sorted(parts, key=lambda p: p[1])))


def single(first: int, last: int, d: int) -> StageT:
    """Layers first..last whole on device ``d``."""
    return (first, last, "none", ((d, None),))


def per_layer(first: int, last: int, d: int) -> list[StageT]:
    """Layers first..last on device ``d``, one stage per layer (smallest working sets)."""
    return [single(i, i, d) for i in range(first, last + 1)]


def chunks(first: int, last: int, size: int) -> list[tuple[int, int]]:
    """Consecutive (first, last) blocks of at most ``size`` layers covering first..last."""
    out, i = [], first
    while i <= last:
        j = min(last, i + size - 1)
        out.append((i, j))
        i = j + 1
    return out


def to_plan(instance: Instance, stages: Iterable[StageT], planner: str = "", **meta) -> Plan:
    names = instance.device_names
    out = []
    for first, last, axis, parts in stages:
        if axis == "none" or len(parts) == 1:
            out.append(Stage(first, last, "none", (Part(names[parts[0][0]]),)))
        else:
            out.append(Stage(first, last, axis, tuple(Part(names[d], tuple(r)) for d, r in parts)))
    m = {"planner": planner} if planner else {}
    m.update(meta)
    return Plan(instance.name, out, m)


def from_plan(instance: Instance, plan: Plan) -> list[StageT]:
    """The normalized stage tuples of ``plan``."""
    out = []
    for s in plan.stages:
        parts = [(instance.device_index(p.device), p.range) for p in s.parts]
        out.append(norm_stage(s.first, s.last, s.axis if len(parts) > 1 else "none", parts))
    return out


# ---------------------------------------------------------------------------------------
# Splitting


def proportional_counts(n: int, weights: Sequence[float]) -> list[int]:
    """Split ``n`` units in proportion to ``weights`` by largest remainder.

    Every positive weight gets at least one unit when ``n`` allows it; with fewer units than
    positive weights the largest weights get one unit each. Ties go to the lower index.
    """
    k = len(weights)
    pos = [i for i in range(k) if weights[i] > 0]
    counts = [0] * k
    if n <= 0 or not pos:
        return counts
    if n <= len(pos):
        for i in sorted(pos, key=lambda i: (-weights[i], i))[:n]:
            counts[i] = 1
        return counts
    # one unit each, the rest by largest remainder
    total = float(sum(weights[i] for i in pos))
    rest = n - len(pos)
    quotas = {i: rest * float(weights[i]) / total for i in pos}
    for i in pos:
        counts[i] = 1 + int(quotas[i])
    left = n - sum(counts)
    order = sorted(pos, key=lambda i: (-(quotas[i] - int(quotas[i])), i))
    for i in order[:left]:
        counts[i] += 1
    return counts


def ranges_from_counts(counts: Sequence[int]) -> list[tuple[int, tuple[int, int]]]:
    """(index, (a, b)) for every non-zero count, consecutive in index order."""
    out, a = [], 0
    for i, c in enumerate(counts):
        if c > 0:
            out.append((i, (a, a + c)))
            a += c
    return out


def split_stage(first: int, last: int, axis: str, n: int, devices: Sequence[int],
                weights: Sequence[float]) -> StageT:
    """A stage whose ``n`` rows/channels are split among ``devices`` in proportion to ``weights``
    (in the order given; devices whose share rounds to nothing are left out)."""
    counts = proportional_counts(n, weights)
    parts = [(devices[i], r) for i, r in ranges_from_counts(counts)]
    return norm_stage(first, last, axis, parts)


def equal_ranges(n: int, k: int) -> list[tuple[int, int]]:
    """The ``equal`` family: k parts, cut i = round(i x n / k) (docs/model.md section 5)."""
    return ranges_from_cuts(equal_cuts(n, k), n)


def capacity_ranges(instance: Instance, n: int, devices: Sequence[int]) -> list[tuple[int, int]] | None:
    """The ``capacity`` family for ``devices`` in the order given; None if a part would be empty."""
    spd = speeds(instance)
    cuts = capacity_cuts(n, [spd[d] for d in devices])
    pts = (0, *cuts, n)
    if any(pts[i] >= pts[i + 1] for i in range(len(pts) - 1)):
        return None
    return ranges_from_cuts(cuts, n)


def row_splittable(instance: Instance, first: int, last: int) -> bool:
    g = instance.graph
    return all(g.layers[i].row_splittable for i in range(first, last + 1))


def extent(instance: Instance, last: int, axis: str = "rows") -> int:
    layer = instance.graph.layers[last]
    return layer.channels if axis == "channels" else layer.rows


# ---------------------------------------------------------------------------------------
# Device facts


def speed_weights(instance: Instance) -> list[float]:
    """Capacity speed of each device (1 / its whole-model time), as floats."""
    return [float(s) for s in speeds(instance)]


def rates(instance: Instance) -> list[float]:
    """Effective linear rate of each device: the model's MACs + ops / its whole-model time.

    For ``linear`` devices without overhead this is ``macs_per_s``; for the others it is the
    one number a paper's "computing capability" stands for.
    """
    work = sum(layer.work for layer in instance.graph.layers)
    out = []
    for d in range(len(instance.devices)):
        t = float(whole_model_time(instance, d))
        out.append(work / t if t > 0 else 1e30)
    return out


def fastest_device(instance: Instance) -> int:
    spd = speeds(instance)
    return max(range(len(spd)), key=lambda d: (spd[d], -d))


def bandwidth(instance: Instance, src: int, dst: int) -> float:
    """Bytes/s from ``src`` to ``dst`` (EXTERNAL allowed on either side); inf to itself."""
    net = instance.network
    if src == dst:
        return float("inf")
    if src == EXTERNAL:
        return net.source.bandwidth_Bps[dst]
    if dst == EXTERNAL:
        return net.sink.bandwidth_Bps[src]
    return net.bandwidth_Bps[src][dst]


def mean_in_bandwidth(instance: Instance, d: int, among: Sequence[int] | None = None) -> float:
    """Mean bandwidth (bytes/s) into device ``d`` from the other devices (``among``, default all)."""
    among = [e for e in (among if among is not None else range(len(instance.devices))) if e != d]
    if not among:
        return float("inf")
    return sum(instance.network.bandwidth_Bps[e][d] for e in among) / len(among)


def source_device(instance: Instance) -> int:
    """The device holding the model input (EXTERNAL for an external source)."""
    s = instance.network.source
    return EXTERNAL if s.external else s.device


# ---------------------------------------------------------------------------------------
# Scoring


def evaluate_tuples(instance: Instance, stages: Sequence[StageT], planner: str = "") -> tuple[Plan, Metrics]:
    plan = to_plan(instance, stages, planner)
    return plan, evaluate(plan, instance)


def score(metrics: Metrics, objective: str) -> tuple[int, float]:
    """Sort key: feasible plans first, then the objective's value."""
    return (0 if metrics.feasible else 1, metrics.value(objective))


def best_of(instance: Instance, candidates: Iterable[Sequence[StageT]], objective: str,
            planner: str = "", deadline: Deadline = NEVER) -> tuple[Plan, Metrics, list[StageT]]:
    """The candidate stage list with the best ``score`` (the first on ties); past ``deadline``
    the best of those scored so far."""
    best = None
    for stages in candidates:
        if best is not None and deadline.passed():
            break
        plan, m = evaluate_tuples(instance, stages, planner)
        if best is None or score(m, objective) < score(best[1], objective):
            best = (plan, m, list(stages))
    if best is None:
        raise ValueError("no candidate plan")
    return best


# ---------------------------------------------------------------------------------------
# Incremental latency / energy (the evaluator's bookkeeping, one stage at a time)


class Sim:
    """Price stages one at a time given who owns which region of every live tensor.

    ``owners`` maps tensor -> tuple of (device, Region) for the tensors live at a boundary;
    ``initial()`` holds the model inputs. ``price(owners, st)`` is the evaluator's
    ``price_stage`` of one stage tuple (a ``StagePrice``; its ``owners`` is the state after the
    stage), ``stage(owners, st)`` its (tau_s, energy_j, owners after) and ``gather(owners)``
    the final gather (``price_gather``). Summing ``tau`` over the stages plus ``gather`` gives
    ``evaluate(...).latency_s``; summing energies gives ``energy_j`` (to float rounding).
    Weights and working sets are not priced (``memory=False``): memory is left to the evaluator.
    """

    def __init__(self, instance: Instance):
        self.instance = instance
        self.pr = pricer(instance)
        self.geo = self.pr.geometry
        self.g = instance.graph
        g = self.g
        n = len(g.layers)
        # live[b]: tensors needed at or after boundary b (before layer b), in a fixed order
        last_use = last_readers(g)
        produced_at = {t: -1 for t in g.inputs}
        for layer in g.layers:
            produced_at[layer.output] = layer.id
        order = list(g.inputs) + [layer.output for layer in g.layers]
        self.live = []
        for b in range(n + 1):
            self.live.append(tuple(t for t in order if produced_at[t] < b and last_use.get(t, -1) >= b))

    def initial(self) -> dict:
        return initial_owners(self.pr)

    def key(self, owners: dict, boundary: int) -> tuple:
        return tuple(owners.get(t) for t in self.live[boundary])

    def price(self, owners: dict, st: StageT) -> StagePrice:
        """Every latency, energy and period cost of stage ``st`` from ``owners``."""
        first, last, axis, parts = st
        geos = self.geo.parts(first, last, axis, [r for _, r in parts])
        return price_stage(self.pr, owners, last, [d for d, _ in parts], geos, memory=False)

    def stage(self, owners: dict, st: StageT) -> tuple[float, float, dict]:
        sp = self.price(owners, st)
        return sp.tau, sp.energy, sp.owners

    def gather(self, owners: dict) -> tuple[float, float]:
        """(seconds, joules) of sending every graph output's owned regions to the sink."""
        gp = price_gather(self.pr, owners)
        return gp.seconds, gp.energy

    def run(self, stages: Sequence[StageT]) -> tuple[float, float]:
        """(latency, energy) of a complete stage list."""
        owners = self.initial()
        lat = en = 0.0
        for st in stages:
            tau, e, owners = self.stage(owners, st)
            lat += tau
            en += e
        gs, ge = self.gather(owners)
        return lat + gs, en + ge


def stage_dp(instance: Instance, candidates: Callable[[int], Iterable[StageT]], objective: str = "latency",
             beam: int | None = None, sim: Sim | None = None, ctx=None, start: int = 0, stop: int | None = None,
             owners: dict | None = None) -> tuple[list[StageT], float]:
    """Best stage list built from ``candidates(first)`` (stages starting at layer ``first``).

    The DP state at a boundary is the ownership of every tensor live there, so the result is
    exact for ``latency`` and ``energy`` over the candidate set (any other objective is
    optimized as latency). ``beam`` keeps only that many cheapest states per boundary
    (heuristic; None = exact). Returns (stages, value of the DP objective).

    ``start``, ``stop`` and ``owners`` restrict the DP to layers start..stop-1 starting from the
    ownership map ``owners`` (default: the whole model from the model input); candidates must
    not end after ``stop - 1``. Without the whole model there is no final gather, and the
    cheapest stage list is returned whatever ownership it leaves behind.
    """
    sim = sim or Sim(instance)
    deadline = NEVER if ctx is None else ctx.deadline
    late = False  # past the deadline: one state per boundary (greedy) from here on
    # further past it (a share of the limit's 5 % slack): only the first candidate of each
    # boundary, so that finishing the plan costs one stage price per layer at most
    hurry_at = NEVER if ctx is None else deadline.shifted(min(1.0, 0.02 * (ctx.time_limit or 0.0)))
    use_energy = objective == "energy"
    n_layers = len(instance.graph.layers)
    n = n_layers if stop is None else stop
    # states[b]: key -> (cost, owners, back pointer (prev boundary, prev key), stage)
    states: list[dict] = [dict() for _ in range(n + 1)]
    init = sim.initial() if owners is None else owners
    states[start][sim.key(init, start)] = (0.0, init, None, None)
    for b in range(start, n):
        layer_states = states[b]
        if not layer_states:
            continue
        late = late or deadline.passed()
        width = 1 if late else beam
        if width is not None and len(layer_states) > width:
            keep = sorted(layer_states.items(), key=lambda kv: kv[1][0])[:width]
            layer_states = states[b] = dict(keep)
        cands = list(candidates(b))
        if hurry_at.passed():
            cands = cands[:1]
        for i, (key, (cost, own, _, _)) in enumerate(list(layer_states.items())):
            if i and deadline.passed():
                late = True  # the states expanded so far carry the plan to the end
                break
            for st in cands:
                tau, e, new = sim.stage(own, st)
                c = cost + (e if use_energy else tau)
                nb = st[1] + 1
                k2 = sim.key(new, nb)
                old = states[nb].get(k2)
                if old is None or c < old[0] - 1e-15:
                    states[nb][k2] = (c, new, (b, key), st)
        if ctx is not None and b % 8 == 0:
            ctx.report(phase=f"dp layer {b}/{n}")
        states[b] = {k: (v[0], None, v[2], v[3]) for k, v in layer_states.items()}  # free owners
    best_key, best_val = None, float("inf")
    for key, (cost, own, _, _) in states[n].items():
        gs, ge = sim.gather(own) if n == n_layers else (0.0, 0.0)
        v = cost + (ge if use_energy else gs)
        if v < best_val - 1e-15:
            best_key, best_val = key, v
    if best_key is None:
        raise ValueError("the candidate stages do not cover the model")
    out = []
    b, key = n, best_key
    while True:
        _, _, back, st = states[b][key]
        if back is None:
            break
        out.append(st)
        b, key = back
    out.reverse()
    return out, best_val


def owner_of_most(instance: Instance, owners: dict, lid: int) -> int:
    """The device owning the most bytes of layer ``lid``'s inputs (ties: the faster device).

    ``owners`` is a ``Sim`` ownership map; an external source counts for nobody.
    """
    pr = pricer(instance)
    spd = speeds(instance)
    held = [0] * len(instance.devices)
    for t in instance.graph.layers[lid].inputs:
        for o, region in owners.get(t, ()):
            if o != EXTERNAL:
                held[o] += pr.region_bytes(t, region.cells)
    return max(range(len(held)), key=lambda d: (held[d], spd[d], -d))


def build_with_owners(instance: Instance, make: Callable[[int, dict], StageT], sim: Sim | None = None) -> list[StageT]:
    """Stages built left to right: ``make(first, owners)`` returns the stage starting at ``first``
    given the current ownership map (for placement rules that look at who holds the input)."""
    sim = sim or Sim(instance)
    owners = sim.initial()
    out, i, n = [], 0, len(instance.graph.layers)
    while i < n:
        st = make(i, owners)
        _, _, owners = sim.stage(owners, st)
        out.append(st)
        i = st[1] + 1
    return out

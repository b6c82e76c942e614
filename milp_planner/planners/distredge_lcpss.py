"""``distredge-lcpss``: DistrEdge's LC-PSS partitioner with a search-based layer-volume splitter.

Source: DistrEdge, Hou et al., IPDPS 2022, Algorithm 1 (Layer Configuration based Partition
Scheme Search, LC-PSS) and Section IV-C (the layer-volume splitter). DistrEdge's splitter is a
DDPG agent (OSDS, Algorithm 2), implemented separately; this planner keeps LC-PSS and replaces
the agent by a seeded local search over the same action space, judged by the evaluator.

LC-PSS (``lcpss_volumes``, reusable): the score of a partition scheme R_p is
C_p = alpha * T + (1 - alpha) * O averaged over ``n_random`` random split decisions, and
partition locations are added greedily, every interval of the current scheme getting its best
new location in each round, until no round adds one (Algorithm 1). Our choices:
  * a random split decision is, for every layer, |D| - 1 uniform fractions in [0, 1] (sorted);
    a volume ending at layer L with height H is cut at round(H * u) (parts may be empty, as
    DistrEdge allows); part i goes to the i-th device (instance order), as in DistrEdge;
  * O = the MACs + ops actually computed, halo recomputation included (from the stage
    geometry), divided by the model's MACs + ops; T = the bytes of every input region a part
    needs that its own device does not own (from the previous volumes under the same random
    decision; the model input comes from the requester, so all of it counts), divided by the
    bytes of every tensor of the model. The paper does not say how O and T are made comparable;
    without a normalization the operation count would swamp T at any alpha < 1;
  * layers that cannot be row-split (FC, Flatten, global pooling) are fixed volumes of their
    own (DistrEdge distributes the convolutional and pooling layers only); for scoring they are
    owned by the first device.

Splitter (our stand-in for OSDS): actions are DistrEdge's, |D| - 1 sorted cut coordinates in
[0, H] on the last layer of each volume, split-part i on device i; a layer that cannot be
row-split runs whole on the device with the largest split-part of the previous volume (as
DistrEdge runs the final FC layers). Start from the better of speed-proportional and equal
cuts; then ``evals`` (option, default 300) single-cut moves (half small steps, half uniform
jumps), each kept if the evaluator's ``ctx.objective`` (feasible first) does not get worse.
``alpha`` and ``n_random`` are options too. Fusion limit and max_parts are not consulted. With a
``ctx.time_limit``, LC-PSS stops after half of it (inside a round, keeping the last round
completed) and the split search at it.
"""

from __future__ import annotations


import numpy as np

from milp_planner.deadline import NEVER, Deadline, DeadlinePassed
from milp_planner.cost.evaluator import pricer
from milp_planner.space.geometry import intersect_cells
from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import (
    evaluate_tuples,
    norm_stage,
    proportional_counts,
    score,
    single,
    speed_weights,
)


def _forced(instance) -> list[int]:
    """Partition locations forced by layers that cannot be row-split (start and end of each)."""
    g = instance.graph
    pts = {0, len(g.layers)}
    for layer in g.layers:
        if not layer.row_splittable:
            pts.add(layer.id)
            pts.add(layer.id + 1)
    return sorted(pts)


class _Scorer:
    """Average LC-PSS score of partition schemes under a fixed set of random split decisions.

    With a ``deadline``, computing a new volume past it raises
    ``DeadlinePassed``: one score of a long volume can take seconds on a large model.
    """

    def __init__(self, instance, rng: np.random.Generator, alpha: float, n_random: int,
                 deadline: Deadline = NEVER):
        self.deadline = deadline
        self.inst = instance
        self.g = instance.graph
        self.pr = pricer(instance)
        self.geo = self.pr.geometry
        self.alpha = alpha
        n, n_dev = len(self.g.layers), len(instance.devices)
        self.n_dev = n_dev
        u = np.sort(rng.random((n_random, n, max(0, n_dev - 1))), axis=2)
        self.u = u
        self.n_random = n_random
        self.o_total = float(sum(layer.work for layer in self.g.layers)) or 1.0
        elements = sum(self.g.elements(t) for t in self.g.inputs) + sum(self.g.elements(x.output) for x in self.g.layers)
        self.t_total = float(elements * instance.dtype_bytes) or 1.0
        self.work_per_row = [layer.work / layer.rows for layer in self.g.layers]
        self._vol: dict = {}
        self._memo: dict = {}

    def _ranges(self, last: int, r: int):
        h = self.g.layers[last].rows
        cuts = [int(x) for x in np.floor(h * self.u[r, last] + 0.5)]
        pts = [0, *cuts, h]
        return tuple((pts[i], pts[i + 1]) for i in range(self.n_dev))

    def _volume(self, first: int, last: int, r: int):
        key = (first, last, r)
        hit = self._vol.get(key)
        if hit is None:
            self.deadline.check("LC-PSS")
            layer = self.g.layers[last]
            if not layer.row_splittable:
                geos = self.geo.parts(first, last, "none", [None])
                devs = [0]
            else:
                rngs = self._ranges(last, r)
                devs = [d for d in range(self.n_dev) if rngs[d][0] < rngs[d][1]]
                geos = self.geo.parts(first, last, "rows", [rngs[d] for d in devs])
            wh = self.work_per_row
            ops = 0.0
            for part in geos:
                for lid, region in part.computed.items():
                    ops += wh[lid] * (region.rows[1] - region.rows[0])
            hit = self._vol[key] = (devs, geos, ops)
        return hit

    def _ops(self, vol) -> float:
        key = ("o", vol)
        hit = self._memo.get(key)
        if hit is None:
            total = sum(self._volume(vol[0], vol[1], r)[2] for r in range(self.n_random))
            hit = self._memo[key] = total / self.n_random
        return hit

    def _trans(self, vol, producers: tuple) -> float:
        """Mean bytes the parts of ``vol`` need from other devices, given the producing volume of
        each of its input tensors (None: the model input, held by the requester)."""
        key = ("t", vol, producers)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        prod = dict(producers)
        pr = self.pr
        total = 0
        for r in range(self.n_random):
            devs, geos, _ = self._volume(vol[0], vol[1], r)
            for d, part in zip(devs, geos):
                for t, need in part.needs.items():
                    cells = need.cells
                    if cells == 0:
                        continue
                    own = 0
                    u = prod.get(t)
                    if u is not None:
                        udevs, ugeos, _ = self._volume(u[0], u[1], r)
                        for ud, upart in zip(udevs, ugeos):
                            if ud == d:
                                region = upart.owns.get(t)
                                if region is not None:
                                    own = intersect_cells(need, region)
                    total += pr.region_bytes(t, cells - own)
        hit = self._memo[key] = total / self.n_random
        return hit

    def score(self, points) -> float:
        """Mean C_p of the partition scheme ``points`` (sorted partition locations, 0 and L included)."""
        key = tuple(points)
        if key in self._memo:
            return self._memo[key]
        vols = [(points[i], points[i + 1] - 1) for i in range(len(points) - 1)]
        where = {}
        for v in vols:
            for lid in range(v[0], v[1] + 1):
                where[self.g.layers[lid].output] = v
        o = t = 0.0
        for v in vols:
            o += self._ops(v)
            ins = self.geo.input_tensors(v[0], v[1])
            t += self._trans(v, tuple((x, where.get(x)) for x in ins))
        val = self.alpha * t / self.t_total + (1 - self.alpha) * o / self.o_total
        self._memo[key] = val
        return val


def lcpss_volumes(instance, rng: np.random.Generator, alpha: float = 0.75, n_random: int = 100,
                  deadline: Deadline = NEVER) -> list[tuple[int, int]]:
    """DistrEdge's LC-PSS (Algorithm 1): the layer-volumes as (first, last) layer ids, in order.

    ``rng`` draws the ``n_random`` random split decisions; layers that cannot be row-split are
    volumes of their own. Deterministic for a given generator state. ``deadline`` stops the
    search where it is: the scheme of the last round
    completed is returned (the forced locations alone if the first round did not complete).
    """
    sc = _Scorer(instance, rng, alpha, n_random, deadline)
    rp = _forced(instance)
    try:
        while not deadline.passed():
            new = set(rp)
            for i in range(len(rp) - 1):
                a, b = rp[i], rp[i + 1]
                if b - a < 2:  # a single layer: nothing to partition
                    continue
                best_c, best_j = float("inf"), None
                for j in range(a, b + 1):  # j = a or b: no new location
                    cand = sorted(set(rp) | {j})
                    c = sc.score(cand)
                    if c < best_c - 1e-15:
                        best_c, best_j = c, j
                if best_j is not None:
                    new.add(best_j)
            if len(new) == len(rp):
                break
            rp = sorted(new)
    except DeadlinePassed:
        pass
    return [(rp[i], rp[i + 1] - 1) for i in range(len(rp) - 1)]


class DistrEdgeLCPSSPlanner(Planner):
    name = "distredge-lcpss"
    description = "DistrEdge's LC-PSS layer-volumes, split-parts found by a seeded local search"
    source = "DistrEdge, Hou et al., IPDPS 2022 (LC-PSS, Algorithm 1; search splitter in place of DDPG)"
    seeded = True

    option_specs = (
        Option("alpha", float, 0.75, "LC-PSS alpha", ge=0, le=1),
        Option("n_random", int, 100, "LC-PSS random splits", ge=1, le=10**6),
        Option("evals", int, 300, "local-search evaluations", ge=1, le=10**7),
    )

    def search(self, instance, ctx: SolveContext):
        g = instance.graph
        rng = np.random.default_rng(ctx.seed)
        alpha = float(self.options.get("alpha", 0.75))
        n_random = int(self.options.get("n_random", 100))
        evals = int(self.options.get("evals", 300))
        deadline = ctx.part_of_limit(0.5)
        vols = lcpss_volumes(instance, rng, alpha, n_random, deadline)
        ctx.report(phase=f"LC-PSS: {len(vols)} layer-volumes")
        n_dev = len(instance.devices)
        splittable = [g.layers[last].row_splittable for _, last in vols]

        def build(cuts):
            out, prev_big = [], 0
            for v, (first, last) in enumerate(vols):
                if not splittable[v]:
                    out.append(single(first, last, prev_big))
                    continue
                h = g.layers[last].rows
                pts = [0, *cuts[v], h]
                parts = [(d, (pts[d], pts[d + 1])) for d in range(n_dev) if pts[d] < pts[d + 1]]
                st = norm_stage(first, last, "rows", parts)
                prev_big = max(st[3], key=lambda p: ((p[1][1] - p[1][0]) if p[1] else 1, -p[0]))[0]
                out.append(st)
            return out

        def from_weights(w):
            cuts = []
            for first, last in vols:
                h = g.layers[last].rows
                counts = proportional_counts(h, w)
                cuts.append([int(c) for c in np.cumsum(counts)[:-1]])
            return cuts

        def run(cuts):
            plan, m = evaluate_tuples(instance, build(cuts), self.name)
            return plan, m, score(m, ctx.objective)

        best_cuts, best = None, None
        for w in (speed_weights(instance), [1.0] * n_dev):
            cuts = from_weights(w)
            res = run(cuts)
            if best is None or res[2] < best[2]:
                best_cuts, best = cuts, res
        movable = [v for v in range(len(vols)) if splittable[v] and n_dev > 1]
        done = 0
        for it in range(evals if movable else 0):
            if ctx.time_limit is not None and ctx.elapsed() > ctx.time_limit:
                break
            v = movable[int(rng.integers(len(movable)))]
            h = g.layers[vols[v][1]].rows
            c = int(rng.integers(n_dev - 1))
            cuts = [list(x) for x in best_cuts]
            if rng.random() < 0.5:
                step = int(rng.integers(1, max(1, h // 8) + 1)) * (1 if rng.random() < 0.5 else -1)
                cuts[v][c] = min(h, max(0, cuts[v][c] + step))
            else:
                cuts[v][c] = int(rng.integers(0, h + 1))
            cuts[v] = sorted(cuts[v])
            res = run(cuts)
            done += 1
            if res[2] <= best[2]:
                if res[2] < best[2]:
                    ctx.report(incumbent=res[1].value(ctx.objective), phase=f"split search {it + 1}/{evals}")
                best_cuts, best = cuts, res
        plan = best[0]
        plan.meta["volumes"] = [list(v) for v in vols]
        status = "timeout" if movable and done < evals else "feasible"
        return PlanResult(self.name, status, ctx.objective, plan=plan,
                          info={"volumes": [list(v) for v in vols], "evaluations": done})

"""``random``: seeded random search over the instance's plan space.

Source: the usual random-search baseline of design-space exploration (e.g. the comparison
point of AutoDiCE's GA, IEEE IoT-J 2023); here it samples exactly the space the exact
planners certify (docs/model.md section 5).

A sample is built left to right: a stage length uniform in 1..fusion_limit; a number of parts
uniform in 1..max_parts (1 when no listed axis applies to the stage); for more than one part an
axis uniform among the listed axes that apply (``rows`` when every layer of the stage is
row-splittable, ``channels`` for a single channel-splittable layer), a cut vector uniform
among ``space.cut_vectors`` and distinct devices in a uniform random order; a single part
goes to a uniformly chosen device. Every sample is therefore inside the space.
``samples`` (default 200) plans are drawn with ``numpy.random.default_rng(ctx.seed)`` and the
best one by ``ctx.objective`` (feasible first) is returned; ``ctx.time_limit`` stops early.
"""

from __future__ import annotations

import numpy as np

from milp_planner.space.cuts import cut_vectors, ranges_from_cuts, stage_extent
from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import evaluate_tuples, norm_stage, score, single


def random_stages(instance, rng: np.random.Generator) -> list:
    g = instance.graph
    sp = instance.search
    n, n_dev = len(g.layers), len(instance.devices)
    max_parts = max(1, min(sp.max_parts, n_dev))
    out, i = [], 0
    while i < n:
        length = int(rng.integers(1, min(sp.fusion_limit, n - i) + 1))
        first, last = i, i + length - 1
        axes = []
        if "rows" in sp.axes and all(g.layers[j].row_splittable for j in range(first, last + 1)) \
                and g.layers[last].rows >= 2:
            axes.append("rows")
        if "channels" in sp.axes and length == 1 and g.layers[last].channel_splittable \
                and g.layers[last].channels >= 2:
            axes.append("channels")
        k = int(rng.integers(1, max_parts + 1)) if axes else 1
        stage = None
        if k > 1:
            axis = axes[int(rng.integers(len(axes)))]
            size = stage_extent(instance, last, axis)
            cvs = cut_vectors(instance, size, k)
            if cvs:
                cuts = cvs[int(rng.integers(len(cvs)))]
                devs = rng.permutation(n_dev)[:k]
                parts = [(int(d), r) for d, r in zip(devs, ranges_from_cuts(cuts, size))]
                stage = norm_stage(first, last, axis, parts)
        if stage is None:
            stage = single(first, last, int(rng.integers(n_dev)))
        out.append(stage)
        i = last + 1
    return out


class RandomSearchPlanner(Planner):
    name = "random"
    description = "best of N seeded random plans drawn from the instance's plan space"
    source = "random-search baseline over the docs/model.md plan space (cf. AutoDiCE, IEEE IoT-J 2023)"
    seeded = True

    option_specs = (
        Option("samples", int, 200, "random plans drawn", ge=1, le=10**7),
    )

    def search(self, instance, ctx: SolveContext):
        n_samples = int(self.options.get("samples", 200))
        rng = np.random.default_rng(ctx.seed)
        best = None
        drawn = 0
        for s in range(n_samples):
            if s > 0 and ctx.time_limit is not None and ctx.elapsed() > ctx.time_limit:
                break
            stages = random_stages(instance, rng)
            plan, m = evaluate_tuples(instance, stages, self.name)
            drawn += 1
            if best is None or score(m, ctx.objective) < score(best[1], ctx.objective):
                best = (plan, m)
                ctx.report(incumbent=m.value(ctx.objective), phase=f"sample {s + 1}/{n_samples}")
        status = "feasible" if drawn == n_samples else "timeout"
        plan = best[0]
        plan.meta["samples"] = drawn
        return PlanResult(self.name, status, ctx.objective, plan=plan, info={"samples": drawn})

"""``coopai``: CoopAI's dynamic program over layer-fusion decisions.

Source: CoopAI (the state-of-the-art baseline that DIAPASON, DATE 2024, compares against:
"a work that implements comparable partition and fusion methods to the ones modelled by
DIAPASON", solved with dynamic programming, with a linear latency model of the Raspberry Pi).
We only have DIAPASON's description, so this is a reconstruction with DIAPASON's own
partition opportunities as the menu:

  * for every layer, either no partition (the layer whole on one device) or a partition of
    its output rows over all devices; a partitioned layer may be fused with up to
    ``fusion_limit - 1`` following layers (a fused chain keeps each slice on the same device,
    so nothing is exchanged inside the chain); an unpartitioned chain of up to
    ``fusion_limit`` layers on one device is a candidate too;
  * the partition cuts rows in proportion to device speed (docs/model.md ``capacity`` family, devices
    in instance order) when the instance lists ``capacity`` among its splits, else equally (the
    ``equal`` family, which is what CoopAI's homogeneous Raspberry Pi setting amounts to, and
    DIAPASON's default ``parttype``); option ``split: equal|capacity`` forces one; if a part
    would be empty the slowest devices are dropped until none is;
  * layers that cannot be row-split are only candidates whole on one device;
  * the DP (``common.stage_dp``) picks the fusion and partition decisions minimizing latency
    (or energy when that is the objective) exactly over this menu, pricing every choice with
    the evaluator's own cost model instead of CoopAI's analytical model.
"""

from __future__ import annotations

from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import (
    capacity_ranges,
    equal_ranges,
    norm_stage,
    row_splittable,
    single,
    speed_weights,
    stage_dp,
    to_plan,
)


def partitioned(instance, first: int, last: int, mode: str = "capacity"):
    """Rows of layers first..last over all devices (capacity or equal cuts), or None."""
    n = instance.graph.layers[last].rows
    spd = speed_weights(instance)
    devs = list(range(len(instance.devices)))
    by_speed = sorted(devs, key=lambda d: (-spd[d], d))
    k = min(len(devs), n)
    while k >= 2:
        use = sorted(by_speed[:k])  # keep instance order among the k fastest
        rng = equal_ranges(n, k) if mode == "equal" else capacity_ranges(instance, n, use)
        if rng is not None and all(a < b for a, b in rng):
            return norm_stage(first, last, "rows", list(zip(use, rng)))
        k -= 1
    return None


class CoopAIPlanner(Planner):
    name = "coopai"
    description = "DP over fusion and partition decisions (partition over all devices or none)"
    source = "CoopAI, as described and compared against in DIAPASON (DATE 2024)"

    option_specs = (
        Option("split", str, None, "equal or capacity (default: capacity if the instance allows it)",
               choices=("equal", "capacity")),
        Option("beam", int, 256, "stage-DP beam width", ge=1, le=10**6),
    )

    def search(self, instance, ctx: SolveContext):
        g = instance.graph
        n = len(g.layers)
        fl = max(1, instance.search.fusion_limit)
        mode = self.options.get("split", "capacity" if "capacity" in instance.search.splits else "equal")
        n_dev = len(instance.devices)
        cache = {}

        def candidates(i):
            if i in cache:
                return cache[i]
            out = []
            for ln in range(1, min(fl, n - i) + 1):
                last = i + ln - 1
                out.extend(single(i, last, d) for d in range(n_dev))
                if row_splittable(instance, i, last):
                    st = partitioned(instance, i, last, mode)
                    if st is not None:
                        out.append(st)
            cache[i] = out
            return out

        objective = "energy" if ctx.objective == "energy" else "latency"
        stages, value = stage_dp(instance, candidates, objective, beam=self.options.get("beam", 256), ctx=ctx)
        return PlanResult(self.name, "feasible", ctx.objective, plan=to_plan(instance, stages, self.name),
                          info={"dp_objective": objective, "dp_value": value})

"""``aofl``: fused layer-volumes split with a linear compute + bandwidth ratio.

Source: AOFL, Zhou et al., "Adaptive parallel execution of deep neural networks on
heterogeneous edge devices", SEC 2019, as characterised by DistrEdge (IPDPS 2022): layers are
fused into several layer-volumes, each split along the height among the devices with a ratio
computed from linear models of the devices' computing speed and their network throughput, and
the fusion points are found by (brute-force) search.

Our reading and choices:
  * ratio for a volume of layers a..b: device i gets rows in proportion to
    1 / (W / r_i + I / B_i), its linear time per unit share, where W is the volume's MACs + ops,
    r_i the device's effective rate (``common.rates``), I the bytes of the volume's inputs and
    B_i the bandwidth into i (from the source for the first volume, else the mean over the
    other devices); rows by largest remainder over all devices, so no part is empty;
  * layers that cannot be row-split (Flatten, FC, global pooling) run whole on one device;
  * the fusion points are searched exactly over this menu by the boundary DP
    (``common.stage_dp``, the same optimum as AOFL's brute force, in polynomial time), with
    volumes of at most ``max_fuse`` layers (option, default 8) and each candidate priced by the
    evaluator's cost model (AOFL's profiled linear models coincide with ours for linear
    devices). The DP minimizes latency (energy when that is the objective). ``fusion_limit`` is
    not consulted, so plans can be out of the search space.
"""

from __future__ import annotations

from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import (
    bandwidth,
    mean_in_bandwidth,
    rates,
    row_splittable,
    single,
    source_device,
    split_stage,
    stage_dp,
    to_plan,
)


def aofl_weights(instance, first: int, last: int, rate=None) -> list[float]:
    """AOFL's linear ratio (unnormalized) of every device for the volume first..last."""
    g = instance.graph
    rate = rate or rates(instance)
    work = sum(g.layers[i].work for i in range(first, last + 1))
    ins = []
    for i in range(first, last + 1):
        for t in g.layers[i].inputs:
            p = g.producer(t)
            if (p is None or p < first) and t not in ins:
                ins.append(t)
    nbytes = sum(g.elements(t) for t in ins) * instance.dtype_bytes
    reads_input = any(g.producer(t) is None for t in ins)
    src = source_device(instance)
    out = []
    for d in range(len(instance.devices)):
        if reads_input:
            bw = bandwidth(instance, src, d) if src != d else float("inf")
        else:
            bw = mean_in_bandwidth(instance, d)
        t = work / rate[d] + (nbytes / bw if bw != float("inf") else 0.0)
        out.append(1.0 / t if t > 0 else 1e30)
    return out


class AOFLPlanner(Planner):
    name = "aofl"
    description = "fused layer-volumes split by a linear speed-and-bandwidth ratio; DP over fusion points"
    source = "AOFL, Zhou et al., SEC 2019 (as characterised in DistrEdge, IPDPS 2022)"

    option_specs = (
        Option("max_fuse", int, 8, "most layers fused into one stage", ge=1, le=10**4),
        Option("beam", int, 256, "stage-DP beam width", ge=1, le=10**6),
    )

    def search(self, instance, ctx: SolveContext):
        g = instance.graph
        n = len(g.layers)
        max_fuse = int(self.options.get("max_fuse", 8))
        n_dev = len(instance.devices)
        devs = list(range(n_dev))
        rate = rates(instance)
        cache = {}

        def candidates(i):
            if i in cache:
                return cache[i]
            out = []
            if not g.layers[i].row_splittable:
                out = [single(i, i, d) for d in devs]
            else:
                for ln in range(1, min(max_fuse, n - i) + 1):
                    last = i + ln - 1
                    if not row_splittable(instance, i, last):
                        break
                    w = aofl_weights(instance, i, last, rate)
                    out.append(split_stage(i, last, "rows", g.layers[last].rows, devs, w))
            cache[i] = out
            return out

        objective = "energy" if ctx.objective == "energy" else "latency"
        stages, value = stage_dp(instance, candidates, objective, beam=self.options.get("beam", 256), ctx=ctx)
        return PlanResult(self.name, "feasible", ctx.objective, plan=to_plan(instance, stages, self.name),
                          info={"dp_objective": objective, "dp_value": value})

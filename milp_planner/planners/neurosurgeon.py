"""``neurosurgeon``: the best sequential split into consecutive single-device stages.

Source: Neurosurgeon, Kang et al., ASPLOS 2017 (one split point between a mobile device and
the cloud, chosen by evaluating every layer boundary), generalised here, as pipeline-style
papers do (e.g. the sequential partitioning surveyed in DIAPASON, DATE 2024), to any number of
devices and split points: no intra-layer split, every stage is whole layers on one device.

The search is a dynamic program over layer boundaries (``common.stage_dp``). Candidates at
layer i: layers i..i+l-1 (l <= fusion_limit) whole on any one device. The DP state is the
owner of every tensor live at the boundary (for a chain, the device holding the last output;
for residual networks also the owners of the skip tensors), so the result is exact over that
restricted space for ``latency`` and ``energy``, and every plan it returns is in the search
space. Neurosurgeon ignores memory and the DP does too (an infeasible optimum is reported as
such). For ``period`` and ``memory``, which are not sums over stages, the DP minimizes latency
(documented simplification).
"""

from __future__ import annotations

from milp_planner.planners.base import Planner, PlanResult, SolveContext
from milp_planner.planners.common import single, stage_dp, to_plan


class NeurosurgeonPlanner(Planner):
    name = "neurosurgeon"
    description = "DP over layers and devices: best split into consecutive single-device stages"
    source = "Neurosurgeon, Kang et al., ASPLOS 2017 (generalised to several devices)"

    def search(self, instance, ctx: SolveContext):
        n = len(instance.graph.layers)
        fl = max(1, instance.search.fusion_limit)
        n_dev = len(instance.devices)

        def candidates(i):
            return [single(i, i + ln - 1, d) for ln in range(1, min(fl, n - i) + 1) for d in range(n_dev)]

        objective = ctx.objective if ctx.objective in ("latency", "energy") else "latency"
        stages, value = stage_dp(instance, candidates, objective, ctx=ctx)
        plan = to_plan(instance, stages, self.name)
        return PlanResult(self.name, "feasible", ctx.objective, plan=plan,
                          info={"dp_objective": objective, "dp_value": value})

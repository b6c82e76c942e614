"""``offload``: the whole network on the single best device.

Source: the *Offload* baseline of DistrEdge (Hou et al., IPDPS 2022), which runs the whole
CNN on "the service provider with the best computing hardware".

Our choice: "best" is decided by the evaluator, not by hardware specs: every device is tried
and the plan with the best ``ctx.objective`` wins (feasible plans first; ties go to the device
listed first). The layers are written as one single-device stage per layer, which the
evaluator prices exactly like one long stage for latency and energy (a device never sends to
itself) but with the smallest working sets, and which is inside every search space.
"""

from __future__ import annotations

from milp_planner.planners.base import Planner, PlanResult, SolveContext
from milp_planner.planners.common import best_of, per_layer


class OffloadPlanner(Planner):
    name = "offload"
    description = "whole network on the one device that is best for the objective"
    source = "Offload baseline, as in DistrEdge (Hou et al., IPDPS 2022)"

    def search(self, instance, ctx: SolveContext):
        n = len(instance.graph.layers)
        cands = [per_layer(0, n - 1, d) for d in range(len(instance.devices))]
        plan, metrics, stages = best_of(instance, cands, ctx.objective, self.name, deadline=ctx.deadline)
        plan.meta["device"] = instance.device_names[stages[0][3][0][0]]
        return PlanResult(self.name, "feasible", ctx.objective, plan=plan)

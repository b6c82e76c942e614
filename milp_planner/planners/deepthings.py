"""``deepthings`` and ``deeperthings``: equal Fused Tile Partitioning of fused layer blocks.

Sources: DeepThings, Zhao et al., IEEE TCAD 2018, and DeeperThings, Stahl et al., IJPP 2021,
as characterised by DistrEdge (IPDPS 2022): "equal-split, one fused-layers" and "equal-split,
multiple fused-layers"; both assume homogeneous devices and ignore the network.

``deepthings``: the first ``depth`` layers (all row-splittable) form one fused block whose
output rows are split equally among all devices (docs/model.md ``equal`` cuts, devices in instance
order; with fewer rows than devices, fewer parts); every later layer runs on one device (one
stage per layer). DeepThings tiles a 2-D grid (FTP); our plans cut rows only, so the tiles are
horizontal strips. DeepThings' fused depth and gateway device are configuration choices of the
deployment: options ``depth`` and ``device`` fix them; by default both are chosen by the
evaluator for ``ctx.objective`` (depth 1 .. the longest row-splittable prefix, any device).

``deeperthings``: every maximal run of row-splittable layers is cut into consecutive fused
blocks of ``block_layers`` layers, each split equally among all devices; fully connected layers
(channel-splittable, not row-splittable) are split equally by output neurons, as DeeperThings
distributes FC weights; any other layer (Flatten, global pooling, ...) runs whole on the device
owning most of its input (ties: the faster device). ``block_layers`` (option) is by default the
best of 1..8 for ``ctx.objective`` by the evaluator (one length for the whole network).
Neither planner consults ``fusion_limit`` or ``max_parts``; their plans can be out of space.
"""

from __future__ import annotations

from milp_planner.errors import PlannerError
from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import (
    best_of,
    build_with_owners,
    equal_ranges,
    norm_stage,
    owner_of_most,
    per_layer,
)


def equal_stage(instance, first: int, last: int, axis: str = "rows"):
    layer = instance.graph.layers[last]
    n = layer.channels if axis == "channels" else layer.rows
    k = min(len(instance.devices), n)
    return norm_stage(first, last, axis, list(zip(range(k), equal_ranges(n, k))))


def deepthings_stages(instance, depth: int, device: int) -> list:
    n = len(instance.graph.layers)
    out = [equal_stage(instance, 0, depth - 1)]
    if depth < n:
        out.extend(per_layer(depth, n - 1, device))
    return out


def deeperthings_stages(instance, block: int) -> list:
    g = instance.graph
    n = len(g.layers)

    def make(i, owners):
        layer = g.layers[i]
        if layer.row_splittable:
            last = i
            while last + 1 < n and last + 1 - i < block and g.layers[last + 1].row_splittable:
                last += 1
            return equal_stage(instance, i, last)
        if layer.channel_splittable and layer.channels > 1:
            return equal_stage(instance, i, i, "channels")
        d = owner_of_most(instance, owners, i)
        return (i, i, "none", ((d, None),))

    return build_with_owners(instance, make)


class DeepThingsPlanner(Planner):
    name = "deepthings"
    description = "one fused block of the first layers split equally by rows, the rest on one device"
    source = "DeepThings, Zhao et al., IEEE TCAD 2018 (as characterised in DistrEdge, IPDPS 2022)"

    option_specs = (
        Option("device", str, None, "the device running the rest (default: the best one)"),
        Option("depth", int, None, "layers in the fused block (default: the best)", ge=1, le=10**6),
    )

    def search(self, instance, ctx: SolveContext):
        g = instance.graph
        n = len(g.layers)
        prefix = 0
        while prefix < n and g.layers[prefix].row_splittable:
            prefix += 1
        devs = range(len(instance.devices))
        if "device" in self.options:
            name = self.options["device"]
            if name not in instance.device_names:
                raise PlannerError(f"planner 'deepthings': option device: no device named {name!r} "
                                   f"(devices: {', '.join(instance.device_names)})")
            devs = [instance.device_index(name)]
        if prefix == 0:  # nothing to fuse: the whole model on one device
            cands = [per_layer(0, n - 1, d) for d in devs]
        else:
            depths = [int(self.options["depth"])] if "depth" in self.options else range(1, prefix + 1)
            depths = [min(max(1, dd), prefix) for dd in depths]
            cands = (deepthings_stages(instance, dd, d) for dd in depths for d in devs)
        plan, m, stages = best_of(instance, cands, ctx.objective, self.name, deadline=ctx.deadline)
        plan.meta["depth"] = stages[0][1] + 1 if prefix else 0
        return PlanResult(self.name, "feasible", ctx.objective, plan=plan)


class DeeperThingsPlanner(Planner):
    name = "deeperthings"
    description = "several fused blocks, each split equally; FC layers split equally by neurons"
    source = "DeeperThings, Stahl et al., IJPP 2021 (as characterised in DistrEdge, IPDPS 2022)"

    option_specs = (
        Option("block_layers", int, None, "layers per fused block (default: the best of 1-8)", ge=1, le=10**6),
    )

    def search(self, instance, ctx: SolveContext):
        blocks = [int(self.options["block_layers"])] if "block_layers" in self.options else range(1, 9)
        cands = (deeperthings_stages(instance, max(1, b)) for b in blocks)
        plan, m, stages = best_of(instance, cands, ctx.objective, self.name, deadline=ctx.deadline)
        return PlanResult(self.name, "feasible", ctx.objective, plan=plan)

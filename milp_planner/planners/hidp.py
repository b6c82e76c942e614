"""``hidp``: HiDP's hierarchical partitioning (global across nodes, then local inside a node).

Source: HiDP, Taufique et al., "Hierarchical DNN Partitioning for Distributed Inference on
Heterogeneous Edge Platforms", 2024 (arXiv; Algorithm 1). A node is a machine; its processing
units (a Jetson's CPU and GPU) are the instance's devices sharing ``Device.node`` (a device
without a node is a node of its own).

Global level (Algorithm 1, lines 4-6): every node is one virtual device whose computation rate
is the sum of its units' rates (HiDP eq. 2; rates from ``common.rates``, a linear model with the
smallest per-layer overhead of its units; a one-unit node keeps its unit's own cost model) and
whose link to another node is the best link between their units. HiDP computes the latency of the best
*model* partitioning (consecutive blocks of whole layers, one node each, pipeline style) and
of the best *data* partitioning (the layers' rows split across sigma parallel nodes, for every
sigma from 2 to the number of nodes, in proportion to the nodes' rates; layers that cannot be
row-split run whole on one node) and keeps the faster mode. Both are found by a DP over layer
blocks (``common.stage_dp``; blocks of at most ``fusion_limit`` layers), as HiDP's DP over
blocks, priced by the evaluator's cost model on the virtual nodes.

Local level (lines 8-10): each node's share of every global stage is mapped onto its units, in
order, keeping the option with the lowest latency given what the units already hold (the
evaluator's model on the real devices): local data partitioning (the share's rows, or a
single FC layer's output channels, split over the 2..all fastest units in proportion to their
rates), local model partitioning (for a one-node stage: the best split of its layers into
consecutive single-unit stages, by the same DP), or the whole share on one unit.

Simplifications: HiDP's run-time scheduler, availability probing and pseudo-packet rate
estimation are replaced by the instance's numbers; HiDP minimizes latency, and so do all of
its decisions here, whatever ``ctx.objective`` (the evaluator still reports the objective).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

from milp_planner.instance.devices import CostModel, Device
from milp_planner.instance import Constraints, Instance, SearchSpace
from milp_planner.instance.network import Endpoint, Network
from milp_planner.planners.base import Planner, PlanResult, SolveContext
from milp_planner.planners.common import (
    Sim,
    norm_stage,
    proportional_counts,
    rates,
    row_splittable,
    single,
    split_stage,
    stage_dp,
    to_plan,
)


def node_groups(instance) -> list[list[int]]:
    """Device indices grouped by node, nodes in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for d, dev in enumerate(instance.devices):
        groups.setdefault(dev.node or f"\0{dev.name}", []).append(d)
    return list(groups.values())


def virtual_instance(instance, groups) -> Instance:
    """One linear virtual device per node (summed rates, best links between nodes)."""
    rate = rates(instance)
    net = instance.network
    devices = []
    for j, grp in enumerate(groups):
        if len(grp) == 1:  # a one-unit node keeps its unit's own cost model
            dev = instance.devices[grp[0]]
            devices.append(Device(name=f"node{j}", compute=dev.compute, power=dev.power))
            continue
        oh = min(float(instance.devices[d].compute.overhead_s) for d in grp)
        cm = CostModel("linear", macs_per_s=Fraction(sum(rate[d] for d in grp)), overhead_s=Fraction(oh))
        devices.append(Device(name=f"node{j}", compute=cm, power=instance.devices[grp[0]].power))
    G = len(groups)
    bw = [[float("inf") if j == k else max(net.bandwidth_Bps[d][e] for d in groups[j] for e in groups[k])
           for k in range(G)] for j in range(G)]
    lat = [[0.0 if j == k else min(net.latency_s[d][e] for d in groups[j] for e in groups[k])
            for k in range(G)] for j in range(G)]
    where = {d: j for j, grp in enumerate(groups) for d in grp}

    def endpoint(ep: Endpoint) -> Endpoint:
        if not ep.external:
            return Endpoint(device=where[ep.device])
        return Endpoint(device=None,
                        bandwidth_Bps=tuple(max(ep.bandwidth_Bps[d] for d in grp) for grp in groups),
                        latency_s=tuple(min(ep.latency_s[d] for d in grp) for grp in groups))

    vnet = Network(tuple(map(tuple, bw)), tuple(map(tuple, lat)), net.medium, endpoint(net.source), endpoint(net.sink))
    sp = instance.search
    return Instance(name=f"{instance.name}-nodes", graph=instance.graph, devices=tuple(devices), network=vnet,
                    search=SearchSpace(sp.fusion_limit, G, sp.splits, sp.axes), objective="latency",
                    constraints=Constraints(memory=False), dtype_bytes=instance.dtype_bytes)


def global_plan(vinst, ctx=None) -> tuple[list, float, str]:
    """(virtual stages, modelled latency, mode) of HiDP's global level."""
    g = vinst.graph
    n = len(g.layers)
    fl = max(1, vinst.search.fusion_limit)
    G = len(vinst.devices)
    sim = Sim(vinst)
    lam = rates(vinst)

    def model_cands(i):
        return [single(i, i + ln - 1, j) for ln in range(1, min(fl, n - i) + 1) for j in range(G)]

    best = stage_dp(vinst, model_cands, "latency", sim=sim, ctx=ctx) + ("model",)
    by_rate = sorted(range(G), key=lambda j: (-lam[j], j))
    for sigma in range(2, G + 1):
        if ctx is not None and ctx.deadline.passed():
            break  # out of time: the best global plan so far
        nodes = sorted(by_rate[:sigma])
        w = [lam[j] for j in nodes]

        def data_cands(i, nodes=nodes, w=w):
            if not g.layers[i].row_splittable:
                return [single(i, i, j) for j in range(G)]
            out = []
            for ln in range(1, min(fl, n - i) + 1):
                last = i + ln - 1
                if not row_splittable(vinst, i, last):
                    break
                out.append(split_stage(i, last, "rows", g.layers[last].rows, nodes, w))
            return out

        res = stage_dp(vinst, data_cands, "latency", beam=256, sim=sim, ctx=ctx) + (f"data:{sigma}",)
        if res[1] < best[1] - 1e-15:
            best = res
    return best


def _local_options(instance, st, groups, rate):
    """Real-device alternatives (each a list of stages) for one virtual stage."""
    g = instance.graph
    first, last, axis, parts = st
    per_node = []
    for j, rng in parts:
        units = sorted(groups[j], key=lambda d: (-rate[d], d))
        opts = [("unit", u) for u in units]
        for k in range(2, len(units) + 1):
            opts.insert(k - 2, ("data", sorted(units[:k])))
        per_node.append((j, rng, opts))
    out = []
    one_part = len(parts) == 1
    if one_part:
        sub_axis = "rows" if row_splittable(instance, first, last) and g.layers[last].rows >= 2 else (
            "channels" if first == last and g.layers[last].channel_splittable and g.layers[last].channels >= 2
            else None)
    else:
        sub_axis = axis
    for combo in itertools.product(*[opts for _, _, opts in per_node]):
        sub_parts, ok = [], True
        for (j, rng, _), (kind, what) in zip(per_node, combo):
            if kind == "unit":
                sub_parts.append((what, rng))
                continue
            if sub_axis is None:
                ok = False
                break
            if rng is None:
                rng = (0, g.layers[last].channels if sub_axis == "channels" else g.layers[last].rows)
            a, b = rng
            counts = proportional_counts(b - a, [rate[u] for u in what])
            for u, c in zip(what, counts):
                if c > 0:
                    sub_parts.append((u, (a, a + c)))
                    a += c
        if not ok:
            continue
        if len(sub_parts) == 1:
            out.append([single(first, last, sub_parts[0][0])])
        else:
            out.append([norm_stage(first, last, sub_axis if one_part else axis, sub_parts)])
    return out


def local_plan(instance, vstages, groups, ctx=None) -> list:
    sim = Sim(instance)
    rate = rates(instance)
    fl = max(1, instance.search.fusion_limit)
    owners = sim.initial()
    out = []
    for st in vstages:
        first, last, _, parts = st
        options = _local_options(instance, st, groups, rate)
        if len(parts) == 1 and len(groups[parts[0][0]]) > 1 and last > first:
            units = groups[parts[0][0]]

            def cands(i, units=units, last=last):
                return [single(i, i + ln - 1, u) for ln in range(1, min(fl, last + 1 - i) + 1) for u in units]

            stages, _ = stage_dp(instance, cands, "latency", sim=sim, start=first, stop=last + 1, owners=owners,
                                 ctx=ctx)
            options.append(stages)
        best = None
        for opt in options:
            own, t = owners, 0.0
            for sub in opt:
                tau, _, own = sim.stage(own, sub)
                t += tau
            if best is None or t < best[0] - 1e-15:
                best = (t, opt, own)
        out.extend(best[1])
        owners = best[2]
    return out


class HiDPPlanner(Planner):
    name = "hidp"
    description = "hierarchical: global DP picks model vs data partitioning over nodes, then a local split per node"
    source = "HiDP, Taufique et al., 2024 (Hierarchical DNN Partitioning on heterogeneous edge platforms)"

    def search(self, instance, ctx: SolveContext):
        groups = node_groups(instance)
        vinst = virtual_instance(instance, groups)
        vstages, vvalue, mode = global_plan(vinst, ctx)
        ctx.report(phase=f"global: {mode}")
        stages = local_plan(instance, vstages, groups, ctx)
        plan = to_plan(instance, stages, self.name)
        plan.meta["global_mode"] = mode
        return PlanResult(self.name, "feasible", ctx.objective, plan=plan,
                          info={"global_mode": mode, "global_latency_s": vvalue,
                                "nodes": [[instance.device_names[d] for d in grp] for grp in groups]})

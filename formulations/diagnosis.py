"""Why no plan of the space is feasible, in terms a user can act on: the layer that fits on no
device, the memory factor by which the least demanding plan exceeds the caps, or the latency
and energy caps against the fastest and least-energy plans."""

from __future__ import annotations

from dataclasses import replace

from milp_planner.deadline import NEVER, Deadline
from formulations.dp import shortest_path
from formulations.stagegraph import StageGraph, build_stage_graph

from milp_planner.errors import PlannerError


def explain_infeasible(sg: StageGraph, deadline: Deadline = NEVER) -> str:
    """Why no plan of the space is feasible, in terms a user can act on; it stops looking
    (and says less) past ``deadline``."""
    inst = sg.instance
    whole = sg.upper is None
    if sg.upper is not None or any(c is not None for c in (d.memory_bytes for d in inst.devices)):
        try:  # the whole space, arcs that overflow a cap included: they say what would fit
            sg, whole = build_stage_graph(inst, max_arcs=1_000_000, deadline=deadline), True
        except (PlannerError, TimeoutError):
            pass
    if not whole or not sg.terminals:
        return ("no plan of the space meets the caps (the time left did not allow listing the whole space "
                "to say which cap binds)")
    msgs = []
    n_layers = len(inst.graph.layers)
    caps = [dev.memory_bytes if inst.constraints.memory else None for dev in inst.devices]
    if any(c is not None for c in caps):
        # a layer no stage option can hold within every participant's memory
        for lid in range(n_layers):
            best = None
            for arc in sg.arcs:
                o = arc.option
                if not o.first <= lid <= o.last:
                    continue
                over = max((arc.weights[d] + arc.working[d]) / caps[d] if caps[d] else 0.0 for d in o.devices)
                if best is None or over < best[0]:
                    best = (over, arc)
            if best is not None and best[0] > 1.0:
                arc = best[1]
                d = max(arc.option.devices, key=lambda d: (arc.weights[d] + arc.working[d]) / caps[d] if caps[d] else 0)
                need = arc.weights[d] + arc.working[d]
                layer = inst.graph.layers[lid]
                msgs.append(f"layer {lid} ({layer.name}) fits on no device: its least demanding placement needs "
                            f"{need / 1e6:.3f} MB on {inst.devices[d].name}, which has {caps[d] / 1e6:.3f} MB")
                break
        if not msgs:
            ratio, need = least_memory(sg, deadline)
            if ratio is not None and ratio > 1.0:
                parts = ", ".join(f"{inst.devices[d].name} {b / 1e6:.3f} MB (has {caps[d] / 1e6:.3f} MB)"
                                  for d, b in need.items() if caps[d] and b > caps[d])
                msgs.append(f"memory is too small: the plan needing the least memory (relative to the caps) "
                            f"exceeds them by a factor {ratio:.4f}; it needs {parts}")
    if inst.constraints.latency_s is not None:
        arcs, v = shortest_path(sg, "latency")
        if v > float(inst.constraints.latency_s):
            msgs.append(f"the fastest plan of the space takes {v * 1e3:.6g} ms, above the latency cap "
                        f"{float(inst.constraints.latency_s) * 1e3:.6g} ms")
    if inst.constraints.energy_j is not None:
        arcs, v = shortest_path(sg, "energy")
        if v > float(inst.constraints.energy_j):
            msgs.append(f"the least-energy plan of the space needs {v:.6g} J, above the energy cap "
                        f"{float(inst.constraints.energy_j):.6g} J")
    if not msgs:
        msgs.append("no plan satisfies all caps together (each cap alone can be met); relax one of them")
    return "; ".join(msgs)


def least_memory(sg: StageGraph, deadline: Deadline = NEVER):
    """Smallest factor s such that some plan fits every device in s x its cap, and that plan's needs."""
    from ortools.sat.python import cp_model

    from formulations.cpsat import build_cpsat

    inst = sg.instance
    caps = {d: dev.memory_bytes for d, dev in enumerate(inst.devices) if dev.memory_bytes}
    if not caps:
        return None, {}
    saved = inst.constraints
    inst.constraints = replace(saved, memory=False, latency_s=None, energy_j=None, period_s=None)
    try:
        cm = build_cpsat(sg, "latency")
    finally:
        inst.constraints = saved
    m = cm.model
    scale = 1000  # the factor in thousandths, up to 1000x the caps
    ratio = m.NewIntVar(0, 10**6, "ratio")
    for d, cap in caps.items():
        m.Add(cm.memory[d] * scale <= ratio * cap)
    m.Minimize(ratio)
    solver = cp_model.CpSolver()
    left = 20.0 if deadline.never else deadline.left()
    if left <= 0:
        return None, {}
    solver.parameters.max_time_in_seconds = min(20.0, left)
    solver.parameters.num_workers = 1
    st = solver.Solve(m)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, {}
    return solver.Value(ratio) / scale, {d: solver.Value(cm.memory[d]) for d in caps}

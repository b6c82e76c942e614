"""Terminal rendering of metrics, plans and solve results (rich).

Every name from an input file (instance, devices, layers, tensors) and every message is
escaped before rich reads markup: a device called ``pi5[/b]`` or ``xavier[gpu]`` prints as is.
"""

from __future__ import annotations

import sys
import textwrap
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape as _rich_escape
from rich.table import Table

from milp_planner.cost.evaluator import EXTERNAL, Metrics
from milp_planner.instance import Instance
from milp_planner.space.plan import Plan


def escape(text) -> str:
    """Text from an input as it is on the terminal: no rich markup, no control characters
    (an escape sequence in an ONNX layer name is shown as ``\\x1b``, not run)."""
    from milp_planner.io import printable

    return _rich_escape(printable(text))


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if abs(x) < 1e-3:
        return f"{x * 1e6:.3f} us"
    if abs(x) < 1:
        return f"{x * 1e3:.3f} ms"
    return f"{x:.4f} s"


def fmt_bytes(b: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(b) < 1000 or unit == "GB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.2f} {unit}"
        b /= 1000
    return str(b)


def render_metrics(m: Metrics, inst: Instance) -> None:
    c = _console()
    c.print(f"[bold]{escape(inst.name)}[/bold]: {len(m.stages)} stages on {len(inst.devices)} devices, "
            f"medium {inst.network.medium}")
    c.print(f"latency   {fmt_s(m.latency_s)}   (lower bound {fmt_s(m.lower_bound_s)}, gather {fmt_s(m.gather_s)})")
    c.print(f"energy    {m.energy_j:.6g} J")
    c.print(f"period    {fmt_s(m.period_s)}   throughput {m.throughput_ips:.4g} inferences/s")
    t = Table(title="per device")
    for col in ("device", "memory", "capacity", "energy (J)"):
        t.add_column(col, justify="right" if col != "device" else "left")
    for dev in inst.devices:
        cap = fmt_bytes(dev.memory_bytes) if dev.memory_bytes is not None else "unbounded"
        t.add_row(escape(dev.name), fmt_bytes(m.memory_bytes[dev.name]), cap, f"{m.energy_per_device_j[dev.name]:.6g}")
    c.print(t)
    st = Table(title="stages")
    for col in ("#", "layers", "axis", "tau", "device", "range", "compute", "receive", "bytes in"):
        st.add_column(col)
    for i, s in enumerate(m.stages):
        for j, (d, r) in enumerate(s.parts):
            st.add_row(str(i) if j == 0 else "", f"{s.first}-{s.last}" if j == 0 else "", s.axis if j == 0 else "",
                       fmt_s(s.tau_s) if j == 0 else "", escape(inst.devices[d].name),
                       escape(f"[{r[0]}, {r[1]})") if r else "all", fmt_s(s.compute_s.get(d, 0.0)),
                       fmt_s(s.recv_s.get(d, 0.0)), fmt_bytes(s.bytes_in.get(d, 0)))
    c.print(st)
    c.print(f"in space: {'yes' if m.in_space else 'no'}")
    for r in m.space_reasons:
        c.print(f"  - {escape(str(r))}")
    c.print(f"feasible: {'yes' if m.feasible else 'NO'}")
    for v in m.violations:
        c.print(f"  - {escape(str(v))}")


def render_plan(plan: Plan, inst: Instance, m: Metrics | None = None) -> None:
    """Stage by stage: which device computes which rows (or channels) of which layer."""
    from milp_planner.cost.evaluator import normalized_stages, pricer

    c = _console()
    pr = pricer(inst)
    g = inst.graph
    c.print(f"[bold]plan for {escape(inst.name)}[/bold] ({len(plan.stages)} stages)")
    for i, (first, last, axis, parts) in enumerate(normalized_stages(plan, inst)):
        geos = pr.geometry.parts(first, last, axis, [r for _, r in parts])
        head = f"stage {i}: layers {first}-{last}, axis {axis}"
        if m is not None:
            head += f", tau {fmt_s(m.stages[i].tau_s)}"
        c.print(f"[bold cyan]{head}[/bold cyan]")
        t = Table(show_header=True, box=None, pad_edge=False)
        t.add_column("layer")
        t.add_column("op")
        t.add_column("H" if axis != "channels" else "C", justify="right")
        for d, _ in parts:
            t.add_column(escape(inst.devices[d].name))
        for lid in range(first, last + 1):
            layer = g.layers[lid]
            cells = []
            for part in geos:
                reg = part.computed.get(lid)
                if reg is None:
                    cells.append("-")
                else:
                    iv = reg.chans if axis == "channels" else reg.rows
                    owned = part.owns.get(layer.output)
                    own = ""
                    if owned is not None and axis != "channels" and owned.rows != iv and not owned.empty:
                        own = f" owns {owned.rows[0]}:{owned.rows[1]}"
                    cells.append(f"{iv[0]}:{iv[1]}{own}")
            extent = layer.channels if axis == "channels" else layer.rows
            t.add_row(escape(f"{lid} {layer.name}"), escape(layer.op), str(extent), *cells)
        c.print(t)
        if m is not None:
            for tr in m.stages[i].transfers:
                src = "source" if tr.src == EXTERNAL else inst.devices[tr.src].name
                c.print(escape(f"    {src} -> {inst.devices[tr.dst].name}: {tr.tensor} {fmt_bytes(tr.bytes)} "
                               f"({fmt_s(tr.time_s)})"))
    if m is not None and m.gather:
        c.print("[bold cyan]gather[/bold cyan]")
        for tr in m.gather:
            dst = "sink" if tr.dst == EXTERNAL else inst.devices[tr.dst].name
            c.print(escape(f"    {inst.devices[tr.src].name} -> {dst}: {tr.tensor} {fmt_bytes(tr.bytes)} "
                           f"({fmt_s(tr.time_s)})"))


def fmt_objective(objective: str, x: float | None) -> str:
    """``x`` in the unit of ``objective`` (latency and period in s/ms/us, energy in J, memory in bytes)."""
    if x is None:
        return "-"
    if objective in ("latency", "period"):
        return fmt_s(x)
    if objective == "energy":
        return f"{x:.6g} J"
    return fmt_bytes(x)


# what each exact planner solves in the last round's stage graph (docs/exact.md)
_GRAPH_SOLVERS = {"milp": "MILP (Pyomo + HiGHS)", "cpsat": "CP-SAT", "dp": "shortest path (DP)"}


#: what each ``bound_source`` code means (docs/exact.md, "The bound and its source")
FLOOR_TEXT = {
    "fluid": "fluid floor: each layer's work spread over all devices at best, communication free",
    "compute-only": "compute-only floor: the fluid floor, with every layer no plan can split whole on its "
                    "fastest device (energy: each layer at its least energy), communication free",
    "flow": "flow floor: an LP over the share of each layer every device computes, with the transfers "
            "those shares force (the input from the source, tensors read but not computed, the gather)",
    "flow-mip": "flow MIP: the flow floor with each device's part of a layer discrete (its overhead paid "
                "whole, at most max_parts parts, whole inputs read whole, receives from outside a "
                "device's link group at those links)",
    "weights": "memory floor: every weight and every needed output row stored somewhere, spread evenly",
    "coarse": "coarse layout relaxation: the newest tensor's layout only (other tensors read free), "
              "devices merged into fewer types when they have too many orders",
}


def bound_source(result) -> str | None:
    """Where ``result.bound`` comes from, as a short code (``solve --json`` prints it):
    ``certified``, ``rounds``, ``coarse``, ``fluid``, ``compute-only``, ``flow``, ``flow-mip``, ``weights`` (exact planners, decided
    by ``milp_planner.certificate.certify``), ``enumeration`` (bruteforce), ``lp-relaxation``
    (lp-round), ``none``; None for planners that prove nothing."""
    code = getattr(result, "bound_source", None)
    if result.bound is None and code in (None, "none"):
        exact = result.planner in ("dp", "milp", "cpsat", "bruteforce")
        return "none" if exact else None
    return code


def bound_source_text(result) -> str | None:
    """``bound_source`` in words, for the terminal (with the period's threshold probes when
    they raised the relaxation's bound, ``formulations.threshold``)."""
    text = _bound_source_words(result)
    th = (result.info or {}).get("threshold") or {}
    if text and th.get("raised") and bound_source(result) in ("rounds", "coarse"):
        refuted = sum(1 for p in th.get("probes", []) if p.get("refuted"))
        text += (f"; the relaxation's bound raised to {fmt_s(th['lower'])} by threshold probes "
                 f"({refuted} of {len(th.get('probes', []))} refuted)")
    return text


def _bound_source_words(result) -> str | None:
    code = bound_source(result)
    info = result.info or {}
    if code is None or (result.bound is None and code == "none"):
        return None
    if code in ("certified", "rounds") and result.planner in _GRAPH_SOLVERS and "rounds" in info:
        rounds = info["rounds"]
        return (f"{code}: layout relaxation + {rounds} round{'s' if rounds != 1 else ''} of bounded enumeration; "
                f"{_GRAPH_SOLVERS[result.planner]} over the last round's {info.get('stage_arcs', 0):,} stage options")
    if code in FLOOR_TEXT:
        return f"{code}: {FLOOR_TEXT[code]}"
    if code == "enumeration" and "plans" in info:
        return f"every plan of the space evaluated ({info['plans']:,} plans)"
    if code == "lp-relaxation":
        return "LP relaxation of the MILP (HiGHS)"
    return code


def _space_text(space: dict) -> str:
    if not space:
        return "-"
    return (f"stages of <= {space.get('fusion_limit')} layers, <= {space.get('max_parts')} parts, "
            f"splits {', '.join(space.get('splits', []))}, axes {', '.join(space.get('axes', []))}")


def render_stage_table(plan: Plan, inst: Instance, m: Metrics) -> None:
    """Stage by stage: its layers, axis, which device computes which rows or channels of the
    stage's last layer (halo rows not shown; ``show`` lists them layer by layer), its time."""
    from milp_planner.cost.evaluator import normalized_stages

    c = _console()
    g = inst.graph
    stages = normalized_stages(plan, inst)
    n_split = sum(1 for _, _, axis, _ in stages if axis != "none")
    n_fused = sum(1 for first, last, _, _ in stages if last > first)
    c.print(f"[bold]plan[/bold]: {len(stages)} stages over {len(g.layers)} layers; "
            f"{n_split} split across devices, {n_fused} fuse 2 or more layers")
    t = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    for col, just in (("#", "right"), ("layers", "left"), ("axis", "left"), ("device", "left"),
                      ("computes", "left"), ("tau", "right")):
        t.add_column(col, justify=just)
    for i, (first, last, axis, parts) in enumerate(stages):
        if first == last:
            layers = f"{first} {g.layers[first].name}"
        else:
            layers = f"{first}-{last} {g.layers[first].name}..{g.layers[last].name}"
        for j, (d, r) in enumerate(parts):
            what = "all" if axis == "none" else f"{'rows' if axis == 'rows' else 'channels'} {r[0]}:{r[1]}"
            t.add_row(str(i) if j == 0 else "", escape(layers) if j == 0 else "", axis if j == 0 else "",
                      escape(inst.devices[d].name), what, fmt_s(m.stages[i].tau_s) if j == 0 else "")
    c.print(t)
    if m.gather_s:
        c.print(f"  + gather of the outputs at the sink: {fmt_s(m.gather_s)}")


def render_devices(m: Metrics, inst: Instance) -> None:
    """Per device: its profile, how many stages it computes in, memory against capacity, energy."""
    c = _console()
    busy = {d: 0 for d in range(len(inst.devices))}
    for s in m.stages:
        for d, _ in s.parts:
            busy[d] += 1
    t = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    for col, just in (("device", "left"), ("profile", "left"), ("stages", "right"), ("memory", "right"),
                      ("capacity", "right"), ("energy", "right")):
        t.add_column(col, justify=just)
    for d, dev in enumerate(inst.devices):
        cap = fmt_bytes(dev.memory_bytes) if dev.memory_bytes is not None else "unbounded"
        t.add_row(escape(dev.name), escape(dev.profile or "-"), str(busy[d]), fmt_bytes(m.memory_bytes[dev.name]),
                  cap, f"{m.energy_per_device_j[dev.name]:.4g} J")
    c.print(t)


def render_certificate(result, inst: Instance) -> None:
    """Status, the objective in its unit, the proven bound and its source, gap, space, time."""
    c = _console()
    obj = result.objective
    rows = [("status", result.status),
            (obj, fmt_objective(obj, result.value) + ("" if result.metrics is None or result.metrics.feasible
                                                      else "  (breaks a cap)")),
            ("bound", fmt_objective(obj, result.bound)),
            ("gap", "-" if result.gap is None else f"{result.gap * 100:.4f} %")]
    src = bound_source_text(result)
    if src:
        rows.append(("bound from", src))
    rows.append(("space", _space_text(result.space)))
    rows.append(("time", f"{result.solve_time_s:.2f} s"))
    from milp_planner.errors import PlannerError
    from milp_planner.planners import planner_class

    try:
        exact = planner_class(result.planner).exact
    except PlannerError:
        exact = result.bound is not None
    title = "certificate" if exact else "result (no proof: not an exact planner)"
    c.print(f"[bold]{title}[/bold] ({escape(result.planner)})")
    width = max(len(k) for k, _ in rows)
    indent = " " * (width + 4)
    for k, v in rows:  # values wrap under themselves
        lines = textwrap.wrap(v, width=max(20, c.width - len(indent))) or [""]
        c.print(f"  [bold]{k.ljust(width)}[/bold]  " + f"\n{indent}".join(escape(x) for x in lines))
    if result.message:
        c.print(f"  {escape(result.message)}")


def render_baselines(baselines, result, time_limit: float | None) -> None:
    """Each baseline's objective and its gap to a proven value that holds for its plan (never
    negative), with what that value is; a plan outside the space that beats the in-space result
    says so. After a heuristic (no bound), the plain difference to its plan."""
    if not baselines:
        return
    c = _console()
    proven = result.status == "optimal" or result.bound is not None
    ref = ("the certified optimum" if result.status == "optimal" else
           "the proven bound" if result.bound is not None else f"{escape(result.planner)}'s plan")
    limit = "" if time_limit is None else f", {time_limit:g} s each"
    c.print(f"[bold]baselines[/bold] (same instance and evaluator{limit}; vs {ref}"
            + (" or a bound for the plan)" if proven else ")"))
    t = Table(box=None, pad_edge=False, show_header=False)
    for just in ("left", "right", "right", "left"):
        t.add_column(justify=just)
    for b in baselines:
        notes = []
        if b.reference is not None:
            vs = f"{b.vs_reference * 100:+.1f} %"
            notes.append(f"vs {b.reference.kind}")
        elif b.vs_in_space is not None and not proven:
            vs = f"{b.vs_in_space * 100:+.1f} %"
        else:
            vs = "-"
            if b.value is not None:
                notes.append("no bound holds for it")
        if b.status not in ("feasible", "optimal"):
            notes.append(b.status + (f": {b.message}" if b.message else ""))
        if b.feasible is False:
            notes.append("breaks a cap")
        if b.in_space is False:
            beat = proven and b.vs_in_space is not None and b.vs_in_space < 0
            notes.append("outside the search space" + (f", {-b.vs_in_space * 100:.1f} % below {ref}" if beat else ""))
        t.add_row(f"  {escape(b.planner)}", fmt_objective(result.objective, b.value), vs, escape("; ".join(notes)))
    c.print(t)
    c.print("  [dim]sources: milp-planner planners; docs/planners.md; references: docs/reports.md[/dim]")


def render_result(result, inst: Instance, baselines=(), detail: bool = False,
                  baseline_time_limit: float | None = None) -> None:
    """The human output of ``solve``: the plan, the devices, the certificate, the baselines.

    ``detail``: also every layer's rows (halos included), the transfers and the full metrics,
    as ``show`` and ``evaluate`` print them.
    """
    c = _console()
    g = inst.graph
    c.print(f"[bold]{escape(result.planner)}[/bold] on [bold]{escape(inst.name)}[/bold]: "
            f"{escape(inst.model or g.name)} ({len(g.layers)} layers) on {len(inst.devices)} devices, "
            f"objective {result.objective}")
    if result.plan is not None and result.metrics is not None:
        if detail:
            render_plan(result.plan, inst, result.metrics)
            render_metrics(result.metrics, inst)
        else:
            render_stage_table(result.plan, inst, result.metrics)
            render_devices(result.metrics, inst)
    render_certificate(result, inst)
    render_baselines(baselines, result, baseline_time_limit)


@contextmanager
def progress_printer(enabled: bool = True):
    """A callback printing solver progress lines (incumbent, bound, gap, elapsed) to stderr."""
    if not enabled:
        yield None
        return
    from milp_planner.report.progress import format_progress

    last = [0.0]

    def report(info: dict) -> None:
        el = info.get("elapsed", 0.0)
        if el - last[0] < 1.0 and not info.get("force"):
            return
        last[0] = el
        print(format_progress(info), file=sys.stderr, flush=True)

    yield report

"""Terminal rendering of metrics, plans and solve results (rich)."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.console import Console
from rich.table import Table

from milp_planner.cost.evaluator import EXTERNAL, Metrics
from milp_planner.instance import Instance
from milp_planner.space.plan import Plan


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
    c.print(f"[bold]{inst.name}[/bold]: {len(m.stages)} stages on {len(inst.devices)} devices, "
            f"medium {inst.network.medium}")
    c.print(f"latency   {fmt_s(m.latency_s)}   (lower bound {fmt_s(m.lower_bound_s)}, gather {fmt_s(m.gather_s)})")
    c.print(f"energy    {m.energy_j:.6g} J")
    c.print(f"period    {fmt_s(m.period_s)}   throughput {m.throughput_ips:.4g} inferences/s")
    t = Table(title="per device")
    for col in ("device", "memory", "capacity", "energy (J)"):
        t.add_column(col, justify="right" if col != "device" else "left")
    for dev in inst.devices:
        cap = fmt_bytes(dev.memory_bytes) if dev.memory_bytes is not None else "unbounded"
        t.add_row(dev.name, fmt_bytes(m.memory_bytes[dev.name]), cap, f"{m.energy_per_device_j[dev.name]:.6g}")
    c.print(t)
    st = Table(title="stages")
    for col in ("#", "layers", "axis", "tau", "device", "range", "compute", "receive", "bytes in"):
        st.add_column(col)
    for i, s in enumerate(m.stages):
        for j, (d, r) in enumerate(s.parts):
            st.add_row(str(i) if j == 0 else "", f"{s.first}-{s.last}" if j == 0 else "", s.axis if j == 0 else "",
                       fmt_s(s.tau_s) if j == 0 else "", inst.devices[d].name,
                       f"[{r[0]}, {r[1]})" if r else "all", fmt_s(s.compute_s.get(d, 0.0)),
                       fmt_s(s.recv_s.get(d, 0.0)), fmt_bytes(s.bytes_in.get(d, 0)))
    c.print(st)
    c.print(f"in space: {'yes' if m.in_space else 'no'}")
    for r in m.space_reasons:
        c.print(f"  - {r}")
    c.print(f"feasible: {'yes' if m.feasible else 'NO'}")
    for v in m.violations:
        c.print(f"  - {v}")


def render_plan(plan: Plan, inst: Instance, m: Metrics | None = None) -> None:
    """Stage by stage: which device computes which rows (or channels) of which layer."""
    from milp_planner.cost.evaluator import normalized_stages, pricer

    c = _console()
    pr = pricer(inst)
    g = inst.graph
    c.print(f"[bold]plan for {inst.name}[/bold] ({len(plan.stages)} stages)")
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
            t.add_column(inst.devices[d].name)
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
            t.add_row(f"{lid} {layer.name}", layer.op, str(extent), *cells)
        c.print(t)
        if m is not None:
            for tr in m.stages[i].transfers:
                src = "source" if tr.src == EXTERNAL else inst.devices[tr.src].name
                c.print(f"    {src} -> {inst.devices[tr.dst].name}: {tr.tensor} {fmt_bytes(tr.bytes)} ({fmt_s(tr.time_s)})")
    if m is not None and m.gather:
        c.print("[bold cyan]gather[/bold cyan]")
        for tr in m.gather:
            dst = "sink" if tr.dst == EXTERNAL else inst.devices[tr.dst].name
            c.print(f"    {inst.devices[tr.src].name} -> {dst}: {tr.tensor} {fmt_bytes(tr.bytes)} ({fmt_s(tr.time_s)})")


def render_result(result, inst: Instance) -> None:
    c = _console()
    unit = {"latency": fmt_s, "period": fmt_s, "energy": lambda x: f"{x:.6g} J" if x is not None else "-",
            "memory": lambda x: fmt_bytes(x) if x is not None else "-"}[result.objective]
    c.print(f"[bold]{result.planner}[/bold] on {inst.name}: status [bold]{result.status}[/bold]")
    c.print(f"objective ({result.objective}) {unit(result.value)}   bound {unit(result.bound)}   "
            f"gap {'-' if result.gap is None else f'{result.gap * 100:.4f} %'}   time {result.solve_time_s:.2f} s")
    if result.message:
        c.print(result.message)
    if result.plan is not None and result.metrics is not None:
        render_plan(result.plan, inst, result.metrics)
        render_metrics(result.metrics, inst)


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

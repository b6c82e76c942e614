"""The report's figures (matplotlib, Agg; no pyplot state): PNG bytes.

- ``gap_plot``: mean gap per planner and instance, whiskers from the smallest to the largest
  gap over seeds;
- ``time_quality_plot``: runtime (log) against gap, one point per run;
- ``plan_chart``: the best plan of an instance: layers across, output rows (or channels)
  down, one column slice per part, coloured by device; the halo rows a part computes twice
  show as overlaps between neighbouring slices;
- ``gantt``: per device and stage, the receive bar then the compute bar (evaluator times),
  then the gather of the outputs.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg", force=False)

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from milp_planner.report.results import Cell, InstanceSummary

DPI = 100
DEVICE_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                 "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf")
PLANNER_MARKERS = "osD^v<>pP*Xh"


def device_color(i: int) -> str:
    return DEVICE_COLORS[i % len(DEVICE_COLORS)]


def planner_color(i: int, n: int = 10):
    """Distinct colours for up to 20 planners (tab10, then tab20), cycling beyond."""
    if n <= 10:
        return matplotlib.colormaps["tab10"](i % 10)
    return matplotlib.colormaps["tab20"](i % 20)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


def _short(name: str, n: int = 28) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def gap_plot(instances: list[InstanceSummary], planners: list[str], cells: dict[tuple[str, str], Cell]) -> bytes:
    n_i, n_p = len(instances), max(1, len(planners))
    fig = Figure(figsize=(min(16, max(6.5, 1.2 + n_i * (0.5 + 0.28 * n_p))), 4.2))
    ax = fig.add_subplot()
    width = 0.8 / n_p
    any_bar = False
    for j, p in enumerate(planners):
        xs, ys, lo, hi = [], [], [], []
        for i, inst in enumerate(instances):
            c = cells.get((inst.file, p))
            if c is None or not c.gaps:
                continue
            m = c.gap_mean * 100
            xs.append(i - 0.4 + width * (j + 0.5))
            ys.append(m)
            lo.append(max(0.0, m - min(c.gaps) * 100))
            hi.append(max(0.0, max(c.gaps) * 100 - m))
        if xs:
            any_bar = True
            ax.bar(xs, ys, width * 0.92, label=p, color=planner_color(j, len(planners)), yerr=[lo, hi], capsize=2,
                   error_kw={"elinewidth": 0.8})
            zeros = [x for x, y in zip(xs, ys) if y == 0]
            if zeros:  # a zero gap has no bar: mark it on the axis
                ax.plot(zeros, [0] * len(zeros), linestyle="none", marker="D", color=planner_color(j, len(planners)),
                        markeredgecolor="black", markersize=6, clip_on=False, zorder=5)
    ax.set_xticks(range(n_i))
    ax.set_xticklabels([_short(s.name) + ("" if s.proven else " *") for s in instances],
                       rotation=20 if n_i > 3 else 0, ha="right" if n_i > 3 else "center")
    ax.set_ylabel("gap (%)")
    ax.set_xlim(-0.6, n_i - 0.4)
    lowest = min([min(c.gaps) for c in cells.values() if c.gaps] + [0.0]) * 100
    ax.set_ylim(bottom=min(0.0, lowest * 1.15))
    if lowest < 0:
        ax.axhline(0, color="black", linewidth=0.8)
    ax.set_title("Gap to the best proven bound (* no bound: gap to the best plan found)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if any_bar:
        ax.legend(fontsize=8, ncols=min(len(planners), 6), loc="upper left", bbox_to_anchor=(0, -0.18 if n_i > 3 else -0.1),
                  frameon=False)
    else:
        ax.text(0.5, 0.5, "no gaps: no run returned a plan", transform=ax.transAxes, ha="center")
    return _png(fig)


def time_quality_plot(rows: list[dict], instances: list[InstanceSummary], planners: list[str]) -> bytes:
    proven = {s.file: s.proven for s in instances}
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    plotted = False
    for j, p in enumerate(planners):
        xs, ys = [], []
        for r in rows:
            if r["planner"] != p:
                continue
            gap = r["gap"] if proven.get(r["instance_file"]) else r["gap_to_best_known"]
            if gap is None or not r["runtime_s"]:
                continue
            xs.append(max(r["runtime_s"], 1e-4))
            ys.append(gap * 100)
        if xs:
            plotted = True
            ax.scatter(xs, ys, label=p, color=planner_color(j, len(planners)), marker=PLANNER_MARKERS[j % len(PLANNER_MARKERS)],
                       alpha=0.8, edgecolors="black", linewidths=0.4, s=36)
    ax.set_xscale("log")
    ax.set_xlabel("runtime (s, log scale)")
    ax.set_ylabel("gap (%)")
    ax.set_title("Time against quality (one point per run)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if plotted:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    else:
        ax.text(0.5, 0.5, "no run returned a plan", transform=ax.transAxes, ha="center")
    return _png(fig)


def plan_chart(plan_dict: dict, instance, title: str = "") -> bytes:
    """Which device computes which rows (or channels) of which layer."""
    from milp_planner.cost.evaluator import normalized_stages, pricer
    from milp_planner.space.plan import Plan

    plan = Plan.from_dict(plan_dict)
    g = instance.graph
    n = len(g.layers)
    stages = normalized_stages(plan, instance)
    geo = pricer(instance).geometry
    fig = Figure(figsize=(min(18, max(7, 2.5 + 0.32 * n)), 4.6))
    ax = fig.add_subplot()
    used = set()
    many = len(stages) > MANY_STAGES
    width, edge = (0.84, 0.4) if n <= 80 else (1.0, 0.0)
    groups = _stage_groups(stages)
    for si, (first, last, axis, parts) in enumerate(stages):
        geos = geo.parts(first, last, axis, [r for _, r in parts])
        k = len(parts)
        for lid in range(first, last + 1):
            layer = g.layers[lid]
            extent = layer.channels if axis == "channels" else layer.rows
            extent = max(1, extent)
            for j, ((d, _), part) in enumerate(zip(parts, geos)):
                reg = part.computed.get(lid)
                if reg is None:
                    continue
                a, b = reg.chans if axis == "channels" else reg.rows
                if b <= a:
                    continue
                used.add(d)
                # one slice per part; past 80 layers slices would be hairlines: full width
                # (then a halo shared by two parts shows in the colour of the later part)
                sub = k if n <= 80 else 1
                x0 = lid - width / 2 + width * (j % sub) / sub
                ax.add_patch(Rectangle((x0, a / extent), width / sub, (b - a) / extent, facecolor=device_color(d),
                                       edgecolor="white", linewidth=edge, hatch="///" if axis == "channels" else None))
    # Stage boundaries and labels; with many stages, runs of stages on the same devices and
    # axis are drawn as one group ("S3-S40"), so that the picture stays readable.
    for g0, g1 in groups if many else [(i, i) for i in range(len(stages))]:
        first, last = stages[g0][0], stages[g1][1]
        if g0:
            ax.axvline(first - 0.5, color="black", linewidth=0.9, linestyle="--")
        if (last - first + 1) < 0.03 * n and many:
            continue
        axis = stages[g0][2]
        label = f"S{g0}" if g0 == g1 else f"S{g0}-S{g1}"
        if axis != "none" and (last > first or many):
            label += f" ({axis})"
        ax.text((first + last) / 2, -0.03, label, ha="center", va="bottom", fontsize=7)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylim(1.0, -0.12)  # row 0 at the top, as in an image
    ax.set_ylabel("share of the layer's output rows\n(channels in hatched stages)")
    step = max(1, n // 40)
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks)
    if n <= 40:
        ax.set_xticklabels([f"{i} {g.layers[i].op}" for i in ticks], rotation=60, ha="right", fontsize=7)
    else:
        ax.set_xticklabels([str(i) for i in ticks], fontsize=7)
    ax.set_xlabel("layer")
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_yticklabels(["0", "¼", "½", "¾", "1"])
    ax.set_title(title or "Best plan: which device computes which rows of which layer", fontsize=10)
    handles = [Patch(facecolor=device_color(i), label=instance.devices[i].name) for i in sorted(used)]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, title="device",
              title_fontsize=8)
    return _png(fig)


MANY_STAGES = 24


def _stage_groups(stages) -> list[tuple[int, int]]:
    """Runs of consecutive stages with the same axis and devices: (first stage, last stage)."""
    groups: list[tuple[int, int]] = []
    sig = None
    for i, (_, _, axis, parts) in enumerate(stages):
        s = (axis, tuple(d for d, _ in parts))
        if groups and s == sig:
            groups[-1] = (groups[-1][0], i)
        else:
            groups.append((i, i))
        sig = s
    return groups


def _time_unit(total: float) -> tuple[float, str]:
    if total >= 1:
        return 1.0, "s"
    if total >= 1e-3:
        return 1e3, "ms"
    return 1e6, "us"


def gantt(metrics: dict, instance, title: str = "") -> bytes:
    """Per device: receive, then compute, stage after stage (Metrics.stages), then the gather."""
    names = list(instance.device_names)
    index = {nm: i for i, nm in enumerate(names)}
    rows = list(names)
    shared = instance.network.medium == "shared"
    total = max(metrics.get("latency_s") or 0.0, 1e-12)
    scale, unit = _time_unit(total)
    fig = Figure(figsize=(10, 1.6 + 0.45 * len(rows)))
    ax = fig.add_subplot()
    t0 = 0.0
    h = 0.6
    stage_list = metrics.get("stages", [])
    many = len(stage_list) > MANY_STAGES
    lw = 0.0 if many else 0.3
    sigs = [(st.get("axis"), tuple(p["device"] for p in st["parts"])) for st in stage_list]
    group_start = 0
    for si, st in enumerate(stage_list):
        if shared:
            t = t0
            for tr in st.get("transfers", []):
                d = index.get(tr["to"])
                if d is not None and tr["time_s"] > 0:
                    ax.barh(d, tr["time_s"] * scale, left=t * scale, height=h, color=device_color(d), alpha=0.35,
                            hatch="...", edgecolor="black", linewidth=lw)
                t += tr["time_s"]
            start_compute = {p["device"]: t for p in st["parts"]}
        else:
            start_compute = {}
            for p in st["parts"]:
                d = index[p["device"]]
                if p["recv_s"] > 0:
                    ax.barh(d, p["recv_s"] * scale, left=t0 * scale, height=h, color=device_color(d), alpha=0.35,
                            hatch="...", edgecolor="black", linewidth=lw)
                start_compute[p["device"]] = t0 + p["recv_s"]
        for p in st["parts"]:
            d = index[p["device"]]
            if p["compute_s"] > 0:
                ax.barh(d, p["compute_s"] * scale, left=start_compute[p["device"]] * scale, height=h,
                        color=device_color(d), edgecolor="black", linewidth=lw)
        new_group = not many or si == 0 or sigs[si] != sigs[si - 1]
        if si and new_group:
            ax.axvline(t0 * scale, color="grey", linewidth=0.7, linestyle=":")
        if new_group:
            group_start, group_t0 = si, t0
        tau = st.get("tau_s", 0.0)
        t0 += tau
        last_of_group = si + 1 == len(stage_list) or not many or sigs[si + 1] != sigs[si]
        if last_of_group and (t0 - group_t0) > 0.03 * total:  # label the groups wide enough to hold one
            label = f"S{si}" if group_start == si else f"S{group_start}-S{si}"
            ax.text((group_t0 + t0) / 2 * scale, -0.62, label, ha="center", va="center", fontsize=7)
    gather = metrics.get("gather", [])
    if gather:
        ax.axvline(t0 * scale, color="grey", linewidth=0.7, linestyle=":")
        t = t0
        for tr in gather:
            d = index.get(tr["from"])
            if d is not None and tr["time_s"] > 0:
                ax.barh(d, tr["time_s"] * scale, left=t * scale, height=h, color="white", hatch="xxx",
                        edgecolor=device_color(d), linewidth=0.6)
            t += tr["time_s"]
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -0.85)
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(left=0)
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(facecolor="#bbbbbb", alpha=0.5, hatch="...", edgecolor="black", label="receive"),
               Patch(facecolor="#555555", label="compute"),
               Patch(facecolor="white", hatch="xxx", edgecolor="#555555", label="gather (send outputs)")]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    medium = "shared medium: transfers one after another, then compute" if shared else "switched: each device receives, then computes"
    ax.set_title(title or f"Timeline of the best plan ({medium})", fontsize=10)
    return _png(fig)

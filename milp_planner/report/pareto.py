"""A Pareto front (``formulations.pareto.ParetoFront``) as files and as a terminal table.

``write_front(front, folder)`` writes ``front.csv`` (one row per point: the objective values,
the evaluator's metrics, status, bound), ``front.json`` (the ``pareto --json`` structure) and
``front.png`` (matplotlib: the 2-D front with its bound set, or pairwise panels for three
objectives), all three made before the folder is written, as a whole.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from milp_planner.io import csv_cell, dumps_json

UNITS = {"latency": ("latency (ms)", 1e3), "energy": ("energy (J)", 1.0), "memory": ("max memory (MB)", 1e-6),
         "period": ("period (ms)", 1e3)}


def front_csv(front) -> str:
    """One row per point: objectives, the evaluator's metrics, status, minimised objective and bound."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["point", *front.objectives, "latency_s", "energy_j", "period_s", "max_memory_bytes", "status",
                "minimised", "bound"])
    for i, p in enumerate(front.points):
        m = p.metrics
        w.writerow([csv_cell(x) for x in (
            i, *(repr(p.values[o]) for o in front.objectives), repr(m.latency_s), repr(m.energy_j),
            repr(m.period_s), m.max_memory_bytes, p.status, p.minimised, "" if p.bound is None else repr(p.bound))])
    return buf.getvalue()


def plot_front(front) -> bytes:
    """The 2-D front (points and, when not certified, the bound set as a staircase), or the
    three pairwise projections of a three-objective front, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    objs = front.objectives
    pairs = [(0, 1)] if len(objs) == 2 else [(0, 1), (0, 2), (1, 2)]
    fig, axes = plt.subplots(1, len(pairs), figsize=(5 * len(pairs), 4), squeeze=False)
    for ax, (i, j) in zip(axes[0], pairs):
        xo, yo = objs[i], objs[j]
        (xl, xs), (yl, ys) = UNITS[xo], UNITS[yo]
        pts = sorted((p.values[xo] * xs, p.values[yo] * ys) for p in front.points)
        if pts:
            ax.scatter(*zip(*pts), color="C0", zorder=3, label="front (certified)" if front.certified else "points found")
            if len(objs) == 2:
                ax.step(*zip(*pts), where="post", color="C0", alpha=0.5)
        if front.bound_set and len(objs) == 2:
            bs = sorted((b[xo] * xs, b[yo] * ys) for b in front.bound_set)
            ax.scatter(*zip(*bs), marker="x", color="C3", label="lower bound set")
            ax.step(*zip(*bs), where="post", color="C3", alpha=0.5, linestyle="--")
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    status = "certified" if front.certified else "not certified"
    fig.suptitle(f"{front.instance}: {' x '.join(objs)} ({len(front.points)} points, {status})", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_front(front, folder, inputs=()) -> list[Path]:
    """Write ``front.csv``, ``front.json`` and ``front.png`` into ``folder``; their paths.

    The three are made in memory first, then the folder is written as a whole
    (``milp_planner.io.OutputDir``: new, empty or written by ``pareto`` before, never holding
    an input; swapped in at once): a failure leaves it as it was.
    """
    from milp_planner.io import OutputDir

    files = {"front.csv": front_csv(front), "front.json": dumps_json(front.to_dict()) + "\n",
             "front.png": plot_front(front)}
    with OutputDir(folder, "pareto", inputs) as out:
        return [out.write(name, data) for name, data in files.items()]


def render_front(front) -> None:
    """The front as a table on the terminal, with the certificate and hypervolume."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Pareto front of {front.instance}: {' x '.join(front.objectives)}")
    t.add_column("#", justify="right")
    for o in front.objectives:
        t.add_column(UNITS[o][0], justify="right")
    t.add_column("status")
    t.add_column("bound", justify="right")
    for i, p in enumerate(front.points):
        xs = UNITS[p.minimised][1]
        t.add_row(str(i), *(f"{p.values[o] * UNITS[o][1]:.6g}" for o in front.objectives), p.status,
                  "-" if p.bound is None else f"{p.bound * xs:.6g} ({p.minimised})")
    c = Console()
    c.print(t)
    ref = ", ".join(f"{r:.6g}" for r in front.reference) if front.reference else "-"
    hv = "-" if front.hypervolume is None else f"{front.hypervolume:.6g}"
    c.print(f"certified: {'yes' if front.certified else 'no'}; hypervolume {hv} (reference point {ref}, "
            f"SI units); {front.solves} solves in {front.elapsed_s:.1f} s")
    if not front.certified:
        gap = front.hypervolume_gap
        c.print(f"not certified: {front.message or 'stopped early'}"
                + ("" if gap is None else f"; bound set of {len(front.bound_set or [])} points, hypervolume gap "
                   f"{gap * 100:.3g} %"))

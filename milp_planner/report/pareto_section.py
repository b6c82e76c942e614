"""The report's Pareto section: NSGA-II's set against the certified (or bounded) front.

For each requested instance and objective set (``--pareto [INSTANCE=]OBJ,OBJ[,OBJ]``):

- the ε-constraint front of ``milp_planner.pareto`` (``milp``) within the section's time limit;
- the ``autodice`` planner's (NSGA-II) Pareto set, every plan re-scored by the evaluator on the
  same objectives (feasible plans only), reduced to its non-dominated vectors;
- one reference point for all the hypervolumes: the nadir of the union of the two sets x 1.1;
- the hypervolume ratio NSGA-II / front and, when the front is not certified, NSGA-II / lower
  bound set (a proven lower bound on NSGA-II's fraction of the true front's hypervolume).

``compare(instance, objectives, time_limit)`` returns a ``ParetoComparison``;
``pareto_blocks(comparisons)`` the report blocks (a table, one figure per instance).
The section's runs happen in the report's own process after the planner runs and are not cached.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from milp_planner.errors import PlannerError

NADIR_FACTOR = 1.1


@dataclass(frozen=True)
class ParetoRequest:
    """One ``--pareto`` item: the objectives, and the instance it names (None: every instance)."""

    objectives: tuple[str, ...]
    instance: str | None = None

    def matches(self, instance) -> bool:
        """The request names this instance: by name, file stem, file name or path (or names none)."""
        if self.instance is None:
            return True
        path = Path(instance.path) if instance.path is not None else None
        keys = {instance.name}
        if path is not None:
            keys |= {path.stem, path.name, str(path)}
        return self.instance in keys or (path is not None and Path(self.instance).resolve() == path.resolve())


def parse_pareto_spec(text: str) -> ParetoRequest:
    """``[INSTANCE=]OBJ,OBJ[,OBJ]`` -> ``ParetoRequest`` (objectives checked)."""
    from formulations.pareto import check_objectives

    inst, _, objs = text.rpartition("=")
    objectives = [o.strip() for o in objs.split(",") if o.strip()]
    try:
        check_objectives(objectives)
    except PlannerError as e:
        raise PlannerError(f"--pareto {text!r}: {str(e).removeprefix('--objectives: ')}") from None
    return ParetoRequest(tuple(objectives), inst.strip() or None)


@dataclass
class ParetoComparison:
    """A front and NSGA-II's set on one instance, with hypervolumes on one reference point."""

    instance: str
    objectives: list[str]
    front: object  # formulations.pareto.ParetoFront
    nsga: list[tuple[float, ...]]  # NSGA-II's non-dominated vectors (evaluator, feasible plans)
    nsga_time_s: float
    nsga_status: str
    reference: list[float] | None = None
    front_hv: float | None = None
    bound_hv: float | None = None
    nsga_hv: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        """HV(NSGA-II) / HV(front points)."""
        if self.nsga_hv is None or not self.front_hv:
            return None
        return self.nsga_hv / self.front_hv

    @property
    def ratio_lower(self) -> float | None:
        """HV(NSGA-II) / HV(front): exact when certified, else HV(NSGA-II) / HV(lower bound set),
        which no true front can go below (its hypervolume is at most the bound set's)."""
        if self.front.certified:
            return self.ratio
        if self.nsga_hv is None or not self.bound_hv:
            return None
        return self.nsga_hv / self.bound_hv

    def to_dict(self) -> dict:
        return {"instance": self.instance, "objectives": self.objectives, "certified": self.front.certified,
                "front": [list(v) for v in self.front.vectors()], "nsga": [list(v) for v in self.nsga],
                "reference_point": self.reference, "front_hypervolume": self.front_hv,
                "bound_hypervolume": self.bound_hv, "nsga_hypervolume": self.nsga_hv, "ratio": self.ratio,
                "ratio_lower": self.ratio_lower, "front_elapsed_s": self.front.elapsed_s,
                "nsga_time_s": self.nsga_time_s, "message": self.front.message, "notes": self.notes}


def non_dominated_vectors(vectors) -> list[tuple[float, ...]]:
    vecs = sorted(set(vectors))
    return [v for v in vecs if not any(w != v and all(a <= b for a, b in zip(w, v)) for w in vecs)]


def nsga_set(instance, objectives, time_limit: float | None, seed: int = 0):
    """NSGA-II's (``autodice``) Pareto set re-scored by the evaluator on ``objectives``:
    (non-dominated vectors of its feasible plans, seconds, the planner's status)."""
    import time

    from milp_planner.cost.evaluator import evaluate
    from milp_planner.planners import get_planner
    from milp_planner.space.plan import Plan

    t0 = time.perf_counter()
    res = get_planner("autodice").solve(instance, objective=objectives[0], time_limit=time_limit, seed=seed)
    vecs = []
    for entry in res.info.get("pareto", []):
        m = evaluate(Plan.from_dict(entry["plan"]), instance)
        if m.feasible:
            vecs.append(tuple(m.value(o) for o in objectives))
    return non_dominated_vectors(vecs), time.perf_counter() - t0, res.status


def compare(instance, objectives, time_limit: float | None = None, *, nsga_time_limit: float | None = None,
            planner: str = "milp", seed: int = 0) -> ParetoComparison:
    """The front (``planner``, ``time_limit`` for the whole front) and NSGA-II's set
    (``nsga_time_limit``, default the same) on one reference point (module doc)."""
    from formulations.pareto import hypervolume
    from milp_planner.pareto import pareto_front

    objs = list(objectives)
    front = pareto_front(instance, objs, planner=planner, time_limit=time_limit)
    nsga, nsga_s, nsga_status = nsga_set(instance, objs, time_limit if nsga_time_limit is None else nsga_time_limit,
                                         seed)
    cmp = ParetoComparison(instance.name, objs, front, nsga, nsga_s, nsga_status)
    both = front.vectors() + nsga
    if both:
        cmp.reference = [NADIR_FACTOR * max(v[i] for v in both) or 1e-12 for i in range(len(objs))]
        cmp.front_hv = hypervolume(front.vectors(), cmp.reference)
        cmp.nsga_hv = hypervolume(nsga, cmp.reference)
        if front.bound_set:
            cmp.bound_hv = hypervolume([tuple(b[o] for o in objs) for b in front.bound_set], cmp.reference)
    if not nsga:
        cmp.notes.append("NSGA-II returned no feasible plan")
    if not front.points:
        cmp.notes.append("the front has no point yet (" + (front.message or "none found") + ")")
    return cmp


def run_requests(instances, requests: list[ParetoRequest], time_limit: float | None, seed: int = 0,
                 on_done=None) -> list[ParetoComparison]:
    """Every (instance, objectives) pair the requests name, in instance order, each once."""
    out, seen = [], set()
    for inst in instances:
        for req in requests:
            key = (id(inst), req.objectives)
            if key in seen or not req.matches(inst):
                continue
            seen.add(key)
            out.append(compare(inst, req.objectives, time_limit, seed=seed))
            if on_done is not None:
                on_done(out[-1])
    return out


def check_requests(instances, requests: list[ParetoRequest]) -> None:
    """A request naming no instance of the report is an error (one line)."""
    for req in requests:
        if req.instance is not None and not any(req.matches(i) for i in instances):
            names = ", ".join(i.name for i in instances)
            raise PlannerError(f"--pareto {req.instance}={','.join(req.objectives)}: no such instance in the "
                               f"report (instances: {names})")


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def comparison_figure(cmp: ParetoComparison) -> bytes:
    """NSGA-II's set against the front (and its bound set): one panel for two objectives,
    the three pairwise projections for three."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from milp_planner.report.pareto import UNITS

    objs = cmp.objectives
    pairs = [(0, 1)] if len(objs) == 2 else [(0, 1), (0, 2), (1, 2)]
    fig, axes = plt.subplots(1, len(pairs), figsize=(5 * len(pairs), 4), squeeze=False)
    label = "certified front" if cmp.front.certified else "front points (not certified)"
    for ax, (i, j) in zip(axes[0], pairs):
        (xl, xs), (yl, ys) = UNITS[objs[i]], UNITS[objs[j]]
        pts = sorted((v[i] * xs, v[j] * ys) for v in cmp.front.vectors())
        if pts:
            ax.scatter(*zip(*pts), color="C0", zorder=3, label=label)
            if len(objs) == 2:
                ax.step(*zip(*pts), where="post", color="C0", alpha=0.5)
        if cmp.front.bound_set and len(objs) == 2:
            bs = sorted((b[objs[i]] * xs, b[objs[j]] * ys) for b in cmp.front.bound_set)
            ax.scatter(*zip(*bs), marker="x", color="C3", label="lower bound set")
            ax.step(*zip(*bs), where="post", color="C3", alpha=0.5, linestyle="--")
        ns = sorted((v[i] * xs, v[j] * ys) for v in cmp.nsga)
        if ns:
            ax.scatter(*zip(*ns), marker="^", color="C1", zorder=4, label="NSGA-II (autodice)")
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{cmp.instance}: {' x '.join(objs)}; HV(NSGA-II) / HV(front) = {_fmt_ratio(cmp.ratio)}",
                 fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def pareto_blocks(comparisons: list[ParetoComparison]) -> list:
    """The section's blocks for ``report.md`` / ``report.html``."""
    from milp_planner.report.document import Bullets, Heading, Image, Para, Table, slug

    if not comparisons:
        return []
    blocks = [Heading(2, "Pareto fronts against NSGA-II", "pareto"),
              Para("Per instance: the ε-constraint front over the exact MILP (certified when proven complete; "
                   "otherwise the points found and a proven lower bound set) and the autodice planner's NSGA-II "
                   "Pareto set, re-scored by the evaluator. All hypervolumes use one reference point, the nadir of "
                   "both sets x 1.1 (SI units: s, J, bytes). HV ratio = HV(NSGA-II) / HV(front); on a front that "
                   "is not certified, the ratio to the bound set is a proven lower bound on NSGA-II's share of the "
                   "true front's hypervolume, and the ratio to the points found an upper one.")]
    rows = []
    for c in comparisons:
        f = c.front
        gap = "0" if f.certified else ("-" if f.hypervolume_gap is None else f"{f.hypervolume_gap * 100:.3g} %")
        rows.append([c.instance, " x ".join(c.objectives), "certified" if f.certified else "bounded",
                     str(len(f.points)), f"{f.elapsed_s:.1f}", gap, str(len(c.nsga)), f"{c.nsga_time_s:.1f}",
                     _fmt_ratio(c.ratio), "=" if f.certified else _fmt_ratio(c.ratio_lower)])
    blocks.append(Table(["instance", "objectives", "front", "points", "front time (s)", "HV gap", "NSGA-II points",
                         "NSGA-II time (s)", "HV ratio", "HV ratio >= (proven)"], rows, numeric_from=3))
    for k, c in enumerate(comparisons):
        objs = c.objectives
        blocks.append(Heading(3, f"{c.instance}: {' x '.join(objs)}", f"pareto-{k}"))
        ref = "-" if c.reference is None else ", ".join(f"{r:.6g}" for r in c.reference)
        facts = [f"reference point: {ref}",
                 f"front: {len(c.front.points)} points, {'certified' if c.front.certified else 'not certified'}"
                 + ("" if c.front.certified else f" ({c.front.message or 'stopped early'})")
                 + f", {c.front.solves} solves in {c.front.elapsed_s:.1f} s",
                 f"NSGA-II: {len(c.nsga)} non-dominated feasible plans in {c.nsga_time_s:.1f} s ({c.nsga_status})",
                 *c.notes]
        blocks.append(Bullets(facts))
        try:
            blocks.append(Image(f"pareto-{k:02d}-{slug(c.instance)}.png",
                                f"{c.instance}: NSGA-II against the front ({' x '.join(objs)})", comparison_figure(c)))
        except Exception as e:  # a figure must not sink the report
            blocks.append(Para(f"(figure not drawn: {type(e).__name__}: {e})", muted=True))
    return blocks


def insert_blocks(doc, blocks: list) -> None:
    """Put the section before "Runs that failed" (or at the end)."""
    from milp_planner.report.document import Heading

    at = next((i for i, b in enumerate(doc.blocks) if isinstance(b, Heading) and b.anchor == "failures"),
              len(doc.blocks))
    doc.blocks[at:at] = blocks

"""Pareto fronts (``milp_planner.pareto``) on the AutoDiCE and DIAPASON instances, against NSGA-II.

Per case: the ε-constraint front with ``milp`` within ``--time-limit`` seconds (certified, or the
points found with their lower bound set and hypervolume gap), and the hypervolume of the
``autodice`` planner's (NSGA-II) Pareto set, re-scored by the evaluator, as a fraction of the
front's, both with one reference point: the nadir of the union of the two sets x 1.1. AutoDiCE optimises period,
max memory per device and energy: those instances run the three together, energy first (the
ε-steps minimise the first objective, and an additive one is far cheaper; ``--objectives`` runs
another set, e.g. a pair). Writes ``benchmarks/results/pareto[-TAG].json`` and ``pareto[-TAG]-table.md``.
One file per case: the tag names the case (``benchmarks/results/pareto.md`` lists each case's command), a
rerun overwrites it and older runs stay in git. For example:

    python benchmarks/bench_pareto.py --time-limit 600 --nsga-time-limit 15 --only vgg19 --objectives energy,memory --tag autodice-energy-memory-vgg19
    python benchmarks/bench_pareto.py --time-limit 600 --nsga-time-limit 15 --only vgg19 --objectives energy,period --tag autodice-energy-period-vgg19
    python benchmarks/bench_pareto.py --time-limit 600 --nsga-time-limit 15 --only vgg19 --tag autodice-energy-period-memory-vgg19
    python benchmarks/bench_pareto.py --time-limit 600 --nsga-time-limit 15 --only diapason --tag diapason
    python benchmarks/bench_pareto.py --rescore benchmarks/results/pareto-diapason.json   # tables from the stored steps
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
CASES = ([(f"instances/autodice/{m}-xaviernx-4.yaml", ["energy", "period", "memory"]) for m in ("vgg19", "resnet101",
                                                                                      "densenet121")]
         + [(str(p.relative_to(ROOT)), ["latency", "energy"]) for p in sorted((ROOT / "instances/diapason").glob("*.yaml"))])


def run_case(path: str, objectives: list[str], time_limit: float, nsga_limit: float,
             options: dict | None = None) -> dict:
    from formulations.pareto import hypervolume
    from milp_planner.cost.evaluator import evaluate
    from milp_planner.instance import load_instance
    from milp_planner.pareto import pareto_front
    from milp_planner.planners import get_planner
    from milp_planner.space.plan import Plan

    inst = load_instance(ROOT / path)
    t0 = time.perf_counter()
    front = pareto_front(inst, objectives, time_limit=time_limit, planner_options=options)
    row = {"instance": path, "objectives": objectives, "time_s": time.perf_counter() - t0,
           "certified": front.certified, "points": len(front.points), "solves": front.solves,
           "hypervolume": front.hypervolume, "reference": front.reference,
           "bound_hypervolume": front.bound_hypervolume, "hypervolume_gap": front.hypervolume_gap,
           "message": front.message, "front": [p.values for p in front.points], "bound_set": front.bound_set,
           "steps": front.to_dict()["steps"], "point_status": [p.status for p in front.points]}
    t1 = time.perf_counter()
    res = get_planner("autodice").solve(inst, objective=objectives[0], time_limit=nsga_limit)
    vecs = []
    for entry in res.info.get("pareto", []):
        m = evaluate(Plan.from_dict(entry["plan"]), inst)
        if m.feasible:
            vecs.append(tuple(m.value(o) for o in objectives))
    vecs = sorted(set(vecs))
    nd = [v for v in vecs if not any(w != v and all(a <= b for a, b in zip(w, v)) for w in vecs)]
    row["nsga_time_s"] = time.perf_counter() - t1
    row["nsga_points"] = len(nd)
    row["nsga_front"] = nd
    # one reference point for both sets: the nadir of their union x 1.1
    both = front.vectors() + nd
    ref = [1.1 * max(v[i] for v in both) for i in range(len(objectives))] if both else None
    row["comparison_reference"] = ref
    row["front_hypervolume_vs_nsga_ref"] = hypervolume(front.vectors(), ref) if ref else None
    row["nsga_hypervolume"] = hypervolume(nd, ref) if ref else None
    row["nsga_fraction"] = (row["nsga_hypervolume"] / row["front_hypervolume_vs_nsga_ref"]
                            if row["front_hypervolume_vs_nsga_ref"] and row["nsga_hypervolume"] is not None else None)
    return row


def rescore(row: dict) -> dict:
    """Recompute, from a row's stored points and ε-steps, its lower bound set, hypervolumes, gap
    and NSGA-II ratios with the current code (``lower_bound_set``), so that a long run's numbers
    follow the code without solving again."""
    from formulations.pareto import BoundStep, hypervolume, lower_bound_set, reference_point

    if "error" in row:
        return row
    objs = row["objectives"]
    front = [tuple(p[o] for o in objs) for p in row["front"]]
    steps = [BoundStep(s["caps"], s["minimised"], s["bound"], s["status"]) for s in row.get("steps", [])]
    row["reference"] = reference_point(front)
    row["hypervolume"] = hypervolume(front, row["reference"]) if row["reference"] else None
    if not row["certified"]:
        if "steps" in row:  # rows of older runs keep the bound set they stored
            row["bound_set"] = lower_bound_set(steps, objs)
        bs = [tuple(b[o] for o in objs) for b in row["bound_set"]]
        row["bound_hypervolume"] = hypervolume(bs, row["reference"]) if row["reference"] and bs else None
        row["hypervolume_gap"] = (max(0.0, 1 - row["hypervolume"] / row["bound_hypervolume"])
                                  if row["bound_hypervolume"] else None)
    else:
        row["bound_set"], row["bound_hypervolume"], row["hypervolume_gap"] = None, None, 0.0
    nd = [tuple(v) for v in row.get("nsga_front", [])]
    both = front + nd
    ref = [1.1 * max(v[i] for v in both) for i in range(len(objs))] if both else None
    row["comparison_reference"] = ref
    row["front_hypervolume_vs_nsga_ref"] = hypervolume(front, ref) if ref else None
    row["nsga_hypervolume"] = hypervolume(nd, ref) if ref else None
    row["nsga_fraction"] = (row["nsga_hypervolume"] / row["front_hypervolume_vs_nsga_ref"]
                            if row["front_hypervolume_vs_nsga_ref"] and row["nsga_hypervolume"] is not None else None)
    bound_hv = (hypervolume([tuple(b[o] for o in objs) for b in row["bound_set"]], ref)
                if ref and row["bound_set"] else None)
    row["nsga_fraction_proven"] = (row["nsga_fraction"] if row["certified"] else
                                   (row["nsga_hypervolume"] / bound_hv if bound_hv else None))
    return row


def table(rows: list[dict]) -> str:
    out = ["| instance | objectives | front | points | time (s) | HV gap | NSGA-II points | NSGA-II HV / front HV "
           "| proven >= |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['instance']} | {' x '.join(r['objectives'])} | error: {r['error'][:80]} | | | | | | |")
            continue
        gap = "0" if r["certified"] else ("-" if r["hypervolume_gap"] is None else f"{r['hypervolume_gap'] * 100:.3g} %")
        frac = "-" if r["nsga_fraction"] is None else f"{r['nsga_fraction']:.3f}"
        proven = r.get("nsga_fraction_proven")
        proven = "=" if r["certified"] else ("-" if proven is None else f"{proven:.3f}")
        out.append(f"| {Path(r['instance']).stem} | {' x '.join(r['objectives'])} | "
                   f"{'certified' if r['certified'] else 'bounded'} | {r['points']} | {r['time_s']:.1f} | {gap} | "
                   f"{r['nsga_points']} | {frac} | {proven} |")
    return "\n".join(out) + "\n"


def code_commit() -> str | None:
    """The checkout's commit (with "+dirty" when files differ from it), or None outside git."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=90.0, help="seconds per front")
    ap.add_argument("--nsga-time-limit", type=float, default=20.0, help="seconds for the autodice planner")
    ap.add_argument("--only", help="substring of the instance paths to run")
    ap.add_argument("--objectives", help="comma-separated objectives instead of each case's own")
    ap.add_argument("--tag", default="", help="suffix of the result files (pareto-TAG.json, pareto-TAG-table.md)")
    ap.add_argument("--option", "-O", action="append", default=[], metavar="KEY=VALUE",
                    help="option of the ε-steps' planner (milp), e.g. anytime=true (repeatable)")
    ap.add_argument("--rescore", metavar="JSON", help="recompute bound sets and ratios of a results file, no solving")
    args = ap.parse_args()
    if args.rescore:
        path = Path(args.rescore)
        data = json.loads(path.read_text())
        data["rows"] = [rescore(r) for r in data["rows"]]
        path.write_text(json.dumps(data, indent=1))
        path.with_name(path.stem + "-table.md").write_text(table(data["rows"]))
        print(table(data["rows"]))
        return
    from milp_planner.planners.base import parse_option_text

    options = {}
    for kv in args.option:
        if "=" not in kv:
            ap.error(f"--option {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        options[k] = parse_option_text(v)
    rows = []
    commit, load_at_start = code_commit(), os.getloadavg()
    for path, objs in CASES:
        if args.only and args.only not in path:
            continue
        if args.objectives:
            objs = args.objectives.split(",")
        print(f"{path} {','.join(objs)} ...", file=sys.stderr, flush=True)
        try:
            row = rescore(run_case(path, objs, args.time_limit, args.nsga_time_limit, options))
        except Exception as e:  # noqa: BLE001 - a failed case is a row, not a crash
            row = {"instance": path, "objectives": objs, "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
        RESULTS.mkdir(exist_ok=True)
        meta = {"time_limit_s": args.time_limit, "options": args.option, "nsga_time_limit_s": args.nsga_time_limit,
                "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                "load_average": os.getloadavg(), "commit": commit, "load_average_at_start": load_at_start}
        stem = "pareto" + (f"-{args.tag}" if args.tag else "")
        (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        (RESULTS / f"{stem}-table.md").write_text(table(rows))


if __name__ == "__main__":
    main()

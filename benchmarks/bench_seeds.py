"""The seed papers' headline comparisons, reproduced on our evaluator (issue #7).

Three groups of instances from ``instances/`` (see instances/README.md), each run with the
planners of its paper and with the exact planners beside them:

- ``coopai``: DIAPASON (DATE 2024) Sec. V-B / Fig. 7. VGG16 on 2..7 Raspberry Pi 3 and Pi 4.
  DIAPASON, MoDNN and CoopAI, plus ``dp`` and ``milp``. Mean speed-ups of DIAPASON over MoDNN
  and CoopAI, next to the paper's 20 % / 7 % (RPi 3) and 44 % / 12 % (RPi 4).
- ``distredge``: DistrEdge (IPDPS 2022) Figs. 7-9. VGG16 on the DA-DC, NA-ND and LA-LD
  groups. DistrEdge (DDPG) and its LC-PSS variant against CoEdge, MoDNN, DeepThings,
  DeeperThings, AOFL and Offload, plus ``dp``. Speed-ups (latency ratios) over AOFL and over
  the best baseline, next to the paper's ranges.
- ``autodice``: AutoDiCE (IEEE IoT-J 2023) Sec. V-B/C. VGG-19, ResNet-101, DenseNet-121 on
  4..8 Jetson Xavier NX boards. AutoDiCE's NSGA-II Pareto sets (throughput, max memory and
  max energy per device) against the exact latency optimum, a single-PE reference (Offload),
  and the paper's Table II and Fig. 7 figures.

Everything runs through the report machinery (``milp_planner.report.runner``: one task per
instance, planner and seed, in child processes with enforced deadlines; ``results``: rows and
gaps to the best proven bound). Every run is cached by content in ``--cache`` (default
``benchmarks/results/seeds/.cache/runs``; it is matched by the ``.cache/`` line of .gitignore and
is not committed), so a rerun only redraws the documents, and the exact columns can be re-run
alone once the exact planners scale further::

    python benchmarks/bench_seeds.py              # everything: the recorded budget, about 45 min on 2 shared cores
    python benchmarks/bench_seeds.py --groups coopai --repeats 3
    python benchmarks/bench_seeds.py --planners dp,milp --refresh dp,milp --exact-time-limit 300

``--planners`` chooses which variants *run*; the documents always show every variant of the
chosen groups that has a record in the cache (so the command above redraws the tables with
the cached heuristics and the new exact runs). ``--refresh`` deletes the cached records of the
named variants first: the cache key holds the milp-planner version but not the code, so after
changing a planner (same version) its old records must be refreshed by hand.

Every group also runs ``dp-any``: ``dp`` on copies of its instances with every integer cut
(splits ``any``). A baseline whose plan leaves the instance's space is measured against a proven
value that holds for its plan (``seeds_refs``: the ``dp-any`` optimum or bound when it covers the
plan, else the floor of ``milp_planner.cost.floors``), never against the in-space optimum, so no gap
is negative. ``--keep-groups-from SEEDS_JSON`` adds the groups this invocation does not run, as a
recorded seeds.json holds them (seeds.md says which and from when)::

    python benchmarks/bench_seeds.py --groups coopai,distredge --keep-groups-from benchmarks/results/seeds/seeds.json

Outputs in ``--out`` (default ``benchmarks/results/seeds``): ``results.csv`` (the report's columns
plus ``group`` and ``variant``), ``seeds.json`` (rows, analysis, AutoDiCE Pareto sets, machine,
command) and ``seeds.md`` (tables, speed-ups against the papers' claims, notes).
``--render-only [SEEDS_JSON]`` runs nothing and reads no cache: it redraws ``seeds.md`` in
``--out`` from a recorded ``seeds.json`` (default: the one in ``--out``)::

    python benchmarks/bench_seeds.py --render-only

The modules beside this one: ``seeds_setup`` (groups, variants, the papers' claims),
``seeds_refs`` (the references of plans outside the space), ``seeds_tables`` (the groups' tables
and figures), ``seeds_report`` (seeds.md, results.csv).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from milp_planner.io import write_atomic  # noqa: E402
from seeds_report import markdown, public_row, write_csv  # noqa: E402
from seeds_setup import GROUPS, Variant, any_cuts_copy, is_exact, objective_copy  # noqa: E402
from seeds_refs import attach_references, in_space_references  # noqa: E402
from seeds_tables import (Cells, analyse_autodice, analyse_coopai, analyse_distredge, autodice_files,  # noqa: E402
                          pareto_entries)

OUT = ROOT / "benchmarks" / "results" / "seeds"


@dataclass
class Job:
    group: str
    variant: Variant
    task: object  # runner.Task
    run: bool
    base: Path  # the instance file in instances/ the task's (possibly copied) file comes from


def make_jobs(args, cache_dir: Path) -> list[Job]:
    from milp_planner.instance import load_instance
    from milp_planner.report import runner

    run_labels = None if args.planners in (None, "default") else set(args.planners.split(","))
    loaded: dict[Path, object] = {}
    jobs = []
    for g in args.groups:
        spec = GROUPS[g]
        files = [ROOT / f for f in spec["instances"]]
        if args.instances:
            files = [f for f in files if any(s in f.name for s in args.instances.split(","))]
        for v in spec["variants"]:
            if v.label in args.skip:
                continue
            run = v.label in run_labels if run_labels is not None else v.default
            paths = [objective_copy(f, obj, cache_dir) for obj in v.objectives for f in files]
            bases = list(paths)  # an any-cut copy belongs to the instance it copies
            if v.any_cuts:
                paths = [any_cuts_copy(p, cache_dir) for p in paths]
            base_of = {p.resolve(): b for p, b in zip(paths, bases)}
            insts = []
            for p in paths:
                if p not in loaded:
                    inst = load_instance(p)
                    inst.path = p
                    loaded[p] = inst
                insts.append(loaded[p])
            tl = args.exact_time_limit if is_exact(v.planner) else args.time_limit
            opts = {v.planner: v.opts} if v.options else None
            for t in runner.make_tasks(insts, [v.planner], time_limit=tl, repeats=args.repeats, options=opts):
                jobs.append(Job(g, v, t, run, base_of[Path(t.instance_path).resolve()]))
    return jobs


def expected_cost(task) -> int:
    """Long runs first, so the two workers finish together."""
    if task.exact:
        return 3
    return {"distredge": 2, "autodice": 2, "distredge-lcpss": 1}.get(task.planner, 0)




def git_state() -> dict:
    """HEAD and the uncommitted files under milp_planner/ and formulations/ (planner code), when in a git checkout."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        st = subprocess.run(["git", "status", "--porcelain", "--", "milp_planner", "formulations"], cwd=ROOT,
                            capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"head": head, "dirty": [line[3:] for line in st if line.strip()]}


def machine() -> dict:
    """``bench_exact.machine()`` with the platform, the time and the load at the start."""
    from bench_exact import machine as base

    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {**base(), "platform": platform.platform(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "loadavg_at_start": load}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default="coopai,distredge,autodice", help="comma-separated: coopai,distredge,autodice")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per heuristic/search run (default 60)")
    ap.add_argument("--exact-time-limit", type=float, default=45.0,
                    help="seconds per exact run (default 45: the recorded results' budget)")
    ap.add_argument("--repeats", type=int, default=2, help="seeds 0..N-1 for seeded planners (default 2)")
    ap.add_argument("--workers", type=int, default=2, help="parallel runs (default 2)")
    ap.add_argument("--planners", default=None,
                    help="variants to run (labels, comma-separated; e.g. dp,milp); default: each group's default set. "
                         "Cached variants are reported either way")
    ap.add_argument("--refresh", default="", help="variants whose cached records are deleted first (e.g. dp,milp)")
    ap.add_argument("--skip", default="", help="variants left out entirely (not run, not reported)")
    ap.add_argument("--instances", default="", help="only instance files whose name contains one of these (comma-separated)")
    ap.add_argument("--retry-failed", action="store_true", help="rerun cached runs that crashed or were killed")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--cache", default=None, help="run cache (default OUT/.cache/runs; not committed)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--keep-groups-from", default=None, metavar="SEEDS_JSON",
                    help="add the groups of a recorded seeds.json that this invocation does not run (their rows "
                         "and AutoDiCE Pareto sets as recorded; seeds.md says which groups and from when)")
    ap.add_argument("--render-only", nargs="?", const="", default=None, metavar="SEEDS_JSON",
                    help="run nothing: redraw seeds.md in --out from a recorded seeds.json (default: OUT/seeds.json)")
    args = ap.parse_args(argv)
    args.groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    for g in args.groups:
        if g not in GROUPS:
            ap.error(f"unknown group {g!r} (known: {', '.join(GROUPS)})")
    args.skip = {s for s in args.skip.split(",") if s}
    refresh = {s for s in args.refresh.split(",") if s}
    known = {v.label for g in GROUPS.values() for v in g["variants"]}
    for lab in (set((args.planners or "default").split(",")) - {"default"}) | refresh | args.skip:
        if lab not in known:
            ap.error(f"unknown variant {lab!r} (known: {', '.join(sorted(known))})")

    if args.render_only is not None:
        return render_only(Path(args.render_only or Path(args.out) / "seeds.json"), Path(args.out), args.groups)

    from milp_planner.report import runner
    from milp_planner.report.results import build_rows

    out = Path(args.out)
    cache_dir = Path(args.cache) if args.cache else out / ".cache" / "runs"
    cache = runner.Cache(cache_dir)
    t_start = time.time()
    mach = machine()

    jobs = make_jobs(args, cache_dir)
    for j in jobs:
        if j.variant.label in refresh:
            try:
                cache.path(j.task.key).unlink()
            except FileNotFoundError:
                pass
    todo, seen = [], set()
    for j in sorted((j for j in jobs if j.run), key=lambda j: -expected_cost(j.task)):
        if j.task.key not in seen:
            seen.add(j.task.key)
            todo.append(j.task)
    executor = runner.make_executor(args.workers)
    summary = runner.run_all(todo, cache, executor, progress=not args.quiet, retry_failed=args.retry_failed)
    wall = time.time() - t_start

    # every job with a record (run now, or cached by this or an earlier invocation)
    now = {t.key: rec for t, rec in zip(todo, summary.records)}
    recs, kept = [], []
    records = {}
    for j in jobs:
        rec = now.get(j.task.key)
        if rec is None:
            rec = cache.get(j.task.key)
            if rec is None:
                continue
            rec["cached"] = True
        rec = dict(rec)
        recs.append(rec)
        kept.append(j)
        records[j.task.key] = rec
    rows = build_rows(recs)
    for r, j, rec in zip(rows, kept, recs):
        r["group"] = j.group
        r["variant"] = j.variant.label
        r["variant_options"] = json.dumps(j.variant.opts, sort_keys=True) if j.variant.options else ""
        info = ((rec.get("result") or {}).get("info") or {})
        r["_info"] = {k: info[k] for k in ("episodes_done", "stopped_by_time_limit", "evaluations") if k in info}
        r["instance_file"] = str(Path(r["instance_file"]).resolve().relative_to(ROOT)) \
            if Path(r["instance_file"]).resolve().is_relative_to(ROOT) else r["instance_file"]
        r["base_file"] = str(j.base.resolve().relative_to(ROOT))
    attach_references(rows, ROOT)
    groups, kept = list(args.groups), {}
    pareto = None
    if args.keep_groups_from:
        old = json.loads(Path(args.keep_groups_from).read_text())
        for g in old["analysis"]:
            if g in groups or g not in GROUPS:
                continue
            old_rows = [dict(r, _exact=r["kind"] == "exact", _info=r.get("info") or {}, _metrics=None, _plan=None,
                             cached=True) for r in old["rows"] if r["group"] == g]
            in_space_references(old_rows)
            rows += old_rows
            groups.append(g)
            if g == "autodice":
                pareto = old["analysis"]["autodice"].get("pareto", {})
            kept[g] = {"date": old["meta"]["machine"].get("date"), "git": (old["meta"].get("git") or {}).get("head"),
                       "runs": len(old_rows), "from": str(args.keep_groups_from)}
        groups = [g for g in GROUPS if g in groups]
    cells = Cells(rows)

    if pareto is None:
        pareto = pareto_entries(cells, autodice_files(rows, cells), records)
    md_parts, analysis = analyse(groups, rows, cells, pareto)

    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "results.csv")
    ran_now = [r for r in rows if not r["cached"]]
    # a log of the invocations that ran something, so seeds.md can state the whole run's wall time
    log_path = cache_dir.parent / "invocations.jsonl"
    if summary.ran:
        with open(log_path, "a") as fh:
            fh.write(json.dumps({"start": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t_start)), "wall_s": wall,
                                 "ran": summary.ran, "argv": sys.argv[1:] if argv is None else argv}) + "\n")
    invocations = []
    if log_path.exists():
        invocations = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    meta = {
        "command": "python " + " ".join(shlex.quote(a) for a in [str(Path(sys.argv[0]))] + (argv if argv is not None else sys.argv[1:])),
        "machine": mach,
        "budget": {"time_limit_s": args.time_limit, "exact_time_limit_s": args.exact_time_limit, "repeats": args.repeats,
                   "workers": args.workers},
        "wall_s": wall, "runs": len(rows), "ran_now": summary.ran, "from_cache": len(rows) - summary.ran,
        "run_time_s_sum_now": sum(r["runtime_s"] or 0 for r in ran_now),
        "run_time_s_sum_all": sum(r["runtime_s"] or 0 for r in rows),
        "invocations": invocations,
        "cache_dir": str(cache_dir.resolve().relative_to(ROOT)) if cache_dir.resolve().is_relative_to(ROOT) else str(cache_dir),
        "variants": {g: [{"label": v.label, "planner": v.planner, "options": v.opts, "default": v.default,
                          "objectives": list(v.objectives), "note": v.note} for v in GROUPS[g]["variants"]]
                     for g in groups},
        "versions": runner.versions(),
        "git": git_state(),
        "kept_groups": kept,
    }
    write_atomic(out / "seeds.json", json.dumps({"meta": meta, "analysis": analysis,
                                                "rows": [public_row(r) | {"info": r["_info"]} for r in rows]},
                                               indent=1, default=runner._jsonable) + "\n")
    write_atomic(out / "seeds.md", markdown(md_parts, meta, rows, analysis))
    print(f"{len(rows)} runs ({summary.ran} run now, {len(rows) - summary.ran} from the cache) in {wall:.0f} s; "
          f"wrote {out / 'seeds.md'}, {out / 'seeds.json'}, {out / 'results.csv'}", file=sys.stderr)
    return 0


def analyse(groups, rows, cells, pareto) -> tuple[list, dict]:
    """The markdown parts and the JSON analysis of every group with rows."""
    md_parts, analysis = [], {}
    for g in groups:
        if not any(r["group"] == g for r in rows):
            continue
        if g == "coopai":
            md, js = analyse_coopai(rows, cells)
        elif g == "distredge":
            md, js = analyse_distredge(rows, cells)
        else:
            md, js = analyse_autodice(rows, cells, pareto)
        md_parts.append((g, md))
        analysis[g] = js
    return md_parts, analysis


def render_only(results: Path, out: Path, groups) -> int:
    """Redraw seeds.md from a recorded seeds.json: the rows, the run's metadata and the AutoDiCE
    Pareto sets it holds (the run records behind those sets are in the cache, not committed)."""
    try:
        data = json.loads(results.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{results}: cannot read the recorded results ({e})")
    rows = [dict(r, _exact=r["kind"] == "exact", _info=r.get("info") or {}, _metrics=None) for r in data["rows"]]
    in_space_references(rows)  # results recorded before the reference columns existed
    pareto = data["analysis"].get("autodice", {}).get("pareto", {})
    md_parts, analysis = analyse(groups, rows, Cells(rows), pareto)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "seeds.md", markdown(md_parts, data["meta"], rows, analysis))
    print(f"wrote {out / 'seeds.md'} from {results} ({len(rows)} runs, nothing run)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

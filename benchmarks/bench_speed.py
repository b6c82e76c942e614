"""Speed of the certified solves (issue #13: "the 4-device VGG16 case without caps: <= 2 s").

Runs each (instance, objective) of ``--cases`` ``--repeats`` times, each in a fresh child
process (so no cache of an earlier run helps, as in ``bench_certify.py``), with the exact
planner ``dp`` and ``--time-limit``, and appends one JSON line per run to ``--out`` (default
``benchmarks/results/speed.jsonl``): status, value, bound, ``solve_time_s``, the child's CPU
seconds, the load average when it ended, the code's commit and ``--label``. ``--root`` runs
another checkout of the project (for example a ``git worktree`` of an older commit), so
before and after are measured in turns on the same machine (``--ab ROOT``: every repeat runs
``--root`` and then ``ROOT``). ``--render`` writes the Markdown summary (median and least
``solve_time_s`` and CPU seconds per label and case) next to ``--out``.

    python benchmarks/bench_speed.py --repeats 3
    python benchmarks/bench_speed.py --ab /tmp/base --label after --ab-label before --repeats 3
    python benchmarks/bench_speed.py --render

The timings move with the machine's load (the load average is recorded with every run): on a
shared machine compare runs taken in turns (``--ab``), and quote the least and the median.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_OUT = RESULTS / "speed.jsonl"
DEFAULT_CASES = ("fleet/vgg16-4dev-uncapped.yaml:latency", "fleet/vgg16-4dev-uncapped.yaml:energy",
                 "fleet/vgg16-4dev-uncapped.yaml:period", "example:edge-3dev:latency",
                 "diapason/vgg16-gemmini100-500.yaml:latency", "diapason/vgg16-gemmini500x2.yaml:latency",
                 "coopai/vgg16-rpi4-4.yaml:latency", "coopai/vgg16-rpi4-4.yaml:energy")

CHILD = """
import json, sys, time
from milp_planner.instance import load_instance
from milp_planner.planners import get_planner
path, objective, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
inst = load_instance(path)
cpu = time.process_time()
res = get_planner("dp").solve(inst, objective=objective, time_limit=limit)
cpu = time.process_time() - cpu
print(json.dumps({"status": res.status, "value": res.value, "bound": res.bound,
                  "solve_time_s": res.solve_time_s, "cpu_s": cpu,
                  "bound_source": res.info.get("bound_source")}))
"""


def _path(root: Path, spec: str) -> str:
    """An instance argument: ``example:NAME`` as is, otherwise a path under ``instances/``."""
    return spec if spec.startswith("example:") else str(root / "instances" / spec)


def _split(case: str) -> tuple[str, str]:
    spec, _, objective = case.rpartition(":")
    if not spec or objective not in ("latency", "energy", "period", "memory"):
        raise SystemExit(f"bench_speed: case {case!r} is not INSTANCE:OBJECTIVE")
    return spec, objective


def _commit(root: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_one(root: Path, case: str, limit: float, label: str, commit: str) -> dict:
    """One solve of ``case`` in a child process running the code under ``root``."""
    spec, objective = _split(case)
    env = dict(os.environ, PYTHONPATH=str(root))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, _path(root, spec), objective, str(limit)], cwd=root,
                          env=env, capture_output=True, text=True, timeout=limit * 3 + 120)
    row = {"case": case, "label": label, "commit": commit, "time_limit": limit,
           "wall_s": round(time.perf_counter() - started, 3), "load1": round(os.getloadavg()[0], 2),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode])[-1][:300]
        return row
    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return row


def render(out: Path) -> Path:
    """The Markdown summary of ``out``'s runs, per label and case, in first-seen order."""
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["label"], r["case"]), []).append(r)
    lines = [f"# Certified solve times ({out.name})", "",
             f"`python benchmarks/bench_speed.py`, `dp`, one child process per run. Machine: "
             f"{platform.machine()}, {os.cpu_count()} cores, shared with other jobs (the load average "
             "at the end of each run is given: the timings grow with it). CPU and memory per stage-graph "
             "arc, before and after each change to the enumeration: [stagegraph.md](stagegraph.md).", "",
             "| label (commit) | case | runs | status | value | solve_time_s median (least) | CPU s median (least) "
             "| load |", "|---|---|---|---|---|---|---|---|"]
    for (label, case), rs in groups.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            lines.append(f"| {label} | {case} | {len(rs)} | error: {rs[-1]['error']} | | | | |")
            continue
        st = sorted({r["status"] for r in ok})
        vals = sorted({f"{r['value']:.6g}" for r in ok if r["value"] is not None})
        t = [r["solve_time_s"] for r in ok]
        c = [r["cpu_s"] for r in ok]
        loads = [r["load1"] for r in ok]
        commits = sorted({r["commit"] for r in ok})
        lines.append(f"| {label} ({', '.join(commits)}) | {case} | {len(ok)} | {', '.join(st)} | {', '.join(vals)} "
                     f"| {statistics.median(t):.2f} ({min(t):.2f}) | {statistics.median(c):.2f} ({min(c):.2f}) "
                     f"| {min(loads):.1f}-{max(loads):.1f} |")
    md = out.with_suffix(".md")
    md.write_text("\n".join(lines) + "\n")
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES), help="INSTANCE:OBJECTIVE, comma-separated "
                    "(INSTANCE: a path under instances/ or example:NAME)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose code runs")
    ap.add_argument("--label", default="", help="names the runs (default: the commit)")
    ap.add_argument("--ab", default="", help="a second checkout run in turns with --root")
    ap.add_argument("--ab-label", default="", help="names the second checkout's runs")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--render", action="store_true", help="run nothing: write the summary of --out")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.render:
        print(render(out))
        return 0
    roots = [(Path(args.root), args.label)]
    if args.ab:
        roots.append((Path(args.ab), args.ab_label))
    roots = [(r, label or _commit(r), _commit(r)) for r, label in roots]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    out.parent.mkdir(parents=True, exist_ok=True)
    for rep in range(args.repeats):
        for case in cases:
            for root, label, commit in roots:
                row = run_one(root, case, args.time_limit, label, commit)
                with out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(f"[{rep + 1}/{args.repeats}] {label:>10} {case:<45} {row.get('status', 'error'):>8} "
                      f"{row.get('solve_time_s', float('nan')):7.2f} s  cpu {row.get('cpu_s', float('nan')):6.2f} s"
                      f"  load {row['load1']}", flush=True)
    print(render(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

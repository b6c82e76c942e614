"""Stage-graph enumeration cost: CPU microseconds and bytes per arc (issue #32, item 1).

Each case builds one stage graph (``formulations.stagegraph.build_stage_graph``) in a fresh
child process, after the layout relaxation it needs (timed apart), with a fixed ``upper`` so
that before and after enumerate the same graph. Per case: the forward arcs (found by the
forward pass), the kept arcs (priced, in the graph), the nodes, the CPU seconds of the build
alone, CPU microseconds per forward and per kept arc, and the child's peak resident memory.

    python benchmarks/bench_stagegraph.py                 # the recorded cases
    python benchmarks/bench_stagegraph.py --label before  # tag the rows (e.g. before a change)

Results: one JSON line per case appended to ``benchmarks/results/stagegraph.jsonl``;
``--render`` writes ``benchmarks/results/stagegraph.md`` from it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = RESULTS / "stagegraph.jsonl"
#: (instance file, objective, upper or None for the whole space)
CASES = (
    ("fleet/vgg16-4dev-uncapped.yaml", "latency", 0.4170),  # the optimum 0.415344 plus 0.4 %
    ("fleet/vgg16-4dev-uncapped.yaml", "latency", 0.4195),  # plus 1 %: 1.5 M arcs
    ("coopai/vgg16-rpi4-4.yaml", "energy", 16.70),  # the optimum 16.5363 plus 1 %
    ("coopai/vgg16-rpi4-5.yaml", "period", 0.5674),  # the best plan known (567.376 ms): a threshold probe's graph
)
CHILD = r"""
import json, resource, sys, time
from milp_planner.instance import load_instance
from formulations.relaxation import layout_bounds
from formulations.stagegraph import build_stage_graph
from formulations.symmetry import reduction_for
path, objective, upper = sys.argv[1], sys.argv[2], (None if sys.argv[3] == "-" else float(sys.argv[3]))
inst = load_instance(path)
t = time.process_time()
reduction = reduction_for(inst, objective)
bounds = layout_bounds(inst, objective, symmetry=reduction != "none")
t_bounds = time.process_time() - t
t = time.process_time()
sg = build_stage_graph(inst, objective=objective, upper=upper, bounds=bounds, reduction=reduction,
                       max_arcs=5_000_000)
t_build = time.process_time() - t
print(json.dumps({"forward_arcs": sg.forward_arcs, "arcs": len(sg.arcs), "nodes": len(sg.nodes),
                  "bounds_cpu_s": t_bounds, "build_cpu_s": t_build,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def run_case(path: str, objective: str, upper: float | None, root: Path) -> dict:
    inst = root / "instances" / path
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", CHILD, str(inst), objective, "-" if upper is None else repr(upper)],
                         capture_output=True, text=True, env=env, cwd=root, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{path} {objective}: {out.stderr.strip().splitlines()[-1]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["us_per_forward_arc"] = 1e6 * row["build_cpu_s"] / max(row["forward_arcs"], 1)
    row["us_per_arc"] = 1e6 * row["build_cpu_s"] / max(row["arcs"], 1)
    return row


def render() -> None:
    if not OUT.exists():
        return
    rows = [json.loads(line) for line in OUT.read_text().splitlines() if line.strip()]
    lines = ["# Stage-graph enumeration cost (stagegraph.jsonl)", "",
             "`python benchmarks/bench_stagegraph.py`: one stage graph per case, built in a fresh child process "
             "with a fixed `upper` (the same graph before and after a change); CPU seconds of the build alone "
             "(the layout relaxation it needs is timed apart), per forward arc (found by the forward pass) and "
             "per kept arc (priced, in the graph), and the child's peak resident memory. Machine: "
             f"{platform.machine()}, {os.cpu_count()} cores; the load average is given per row.", "",
             "| label | commit | case | upper | nodes | forward arcs | kept arcs | build CPU s | us / forward arc "
             "| us / kept arc | relaxation CPU s | peak RSS MB | load |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['commit']} | {r['case']} {r['objective']} | "
                     f"{'whole space' if r['upper'] is None else r['upper']} | {r['nodes']:,} | {r['forward_arcs']:,} | "
                     f"{r['arcs']:,} | {r['build_cpu_s']:.2f} | {r['us_per_forward_arc']:.1f} | {r['us_per_arc']:.1f} | "
                     f"{r['bounds_cpu_s']:.2f} | {r['maxrss_mb']:.0f} | {r['load']:.2f} |")
    (RESULTS / "stagegraph.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", default="")
    ap.add_argument("--root", default=str(ROOT), help="the checkout to measure (default: this one)")
    ap.add_argument("--only", help="run the cases whose instance path contains this")
    ap.add_argument("--render", action="store_true", help="only write stagegraph.md from stagegraph.jsonl")
    args = ap.parse_args()
    if not args.render:
        root = Path(args.root)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True).stdout.strip() or "unknown"
        for path, objective, upper in CASES:
            if args.only and args.only not in f"{path}:{objective}:{upper}":
                continue
            row = run_case(path, objective, upper, root)
            row.update(label=args.label or head, commit=head, case=path, objective=objective, upper=upper,
                       load=os.getloadavg()[0], date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
            print(json.dumps(row), flush=True)
            with OUT.open("a") as f:
                f.write(json.dumps(row) + "\n")
    render()


if __name__ == "__main__":
    main()

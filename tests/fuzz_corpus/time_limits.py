"""Measure every planner against ``--time-limit``: ``python tests/fuzz_corpus/time_limits.py``.

Each planner runs ``milp-planner solve INSTANCE --planner P --time-limit S --compare none``
in a fresh process, one at a time; the table gives the wall time of the process, the
planner's own ``solve_time_s`` (from ``--json``) and the overrun past ``S x 1.05 + 2``
(issue #30's rule), which must be 0. The process's wall time also holds the interpreter's
start and the instance's loading, which are not the planner's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import os

ROOT = Path(__file__).resolve().parents[2]
CODE = Path(os.environ.get("MILP_FUZZ_REPO") or ROOT)  # the checkout under test (its folder is the cwd)


def main() -> int:
    sys.path.insert(0, str(CODE))
    from milp_planner.planners import planner_names

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--instance", default=str(ROOT / "instances" / "autodice" / "densenet121-xaviernx-8.yaml"))
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--planners", default=",".join(planner_names()))
    args = ap.parse_args()
    allowed = args.time_limit * 1.05 + 2.0
    print(f"{Path(args.instance).name}, --time-limit {args.time_limit:g} (allowed {allowed:.2f} s)\n")
    print("| planner | wall s | solve_time_s | overrun s | status |")
    print("|---|---:|---:|---:|---|")
    worst = 0.0
    for name in args.planners.split(","):
        cmd = [sys.executable, "-m", "milp_planner", "solve", args.instance, "--planner", name, "--time-limit",
               str(args.time_limit), "--compare", "none", "--json", "-q"]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=allowed * 10 + 60, cwd=CODE)
            wall = time.monotonic() - t0
            try:
                out = json.loads(p.stdout)
                solve, status = out.get("solve_time_s"), out.get("status")
            except ValueError:
                solve, status = None, (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:60]
        except subprocess.TimeoutExpired:
            wall, solve, status = time.monotonic() - t0, None, "killed"
        over = max(0.0, (solve if solve is not None else wall) - allowed)
        worst = max(worst, over)
        print(f"| {name} | {wall:.1f} | {'-' if solve is None else f'{solve:.2f}'} | {over:.2f} | {status} |",
              flush=True)
    print(f"\nlargest overrun of solve_time_s: {worst:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Progress lines of ``solve``: readable, in the objective's unit, on stderr, silenced by --quiet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from milp_planner.report.progress import format_progress

ROOT = Path(__file__).resolve().parents[1]


def test_a_round_line_says_what_and_in_which_unit():
    line = format_progress({"elapsed": 2.4, "objective": "latency", "phase": "round 3", "within": 0.0007123,
                            "incumbent": 0.0007123, "bound": 0.00070517})
    assert line == "    2.4 s  round 3, plans up to 0.7123 ms: best 0.7123 ms, proven bound 0.70517 ms, gap 1.00 %"


def test_units_of_each_objective_and_no_plan_yet():
    assert "best 12.5 mJ" in format_progress({"objective": "energy", "incumbent": 0.0125})
    assert "best 1.5 MB" in format_progress({"objective": "memory", "incumbent": 1.5e6})
    assert "best 3 ms" in format_progress({"objective": "period", "incumbent": 0.003})
    line = format_progress({"objective": "latency", "phase": "round 1", "incumbent": None, "bound": 0.001})
    assert line.endswith("round 1: no plan yet, proven bound 1 ms")
    assert "12,345 arcs" in format_progress({"phase": "enumerating the plan graph, layer 2 of 5", "arcs": 12345})


def test_solve_prints_progress_on_stderr_unless_quiet():
    cmd = [sys.executable, "-m", "milp_planner", "solve", "example:tiny-2dev", "--planner", "milp"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert any("round 1, plans up to" in ln and " ms" in ln for ln in lines), out.stderr
    assert any(ln.strip().endswith("gap 0.00 %") for ln in lines), out.stderr
    assert "phase" not in out.stderr and "within" not in out.stderr
    quiet = subprocess.run(cmd + ["--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr.strip() == "" and quiet.stdout.strip()

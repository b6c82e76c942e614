"""The seed benchmark's documents are drawn from its recorded results alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "seeds"


def test_render_only_redraws_the_committed_seeds_md(tmp_path):
    """``--render-only`` runs nothing, and the committed seeds.md is what it draws from seeds.json."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_seeds.py"), "--render-only",
                           str(RESULTS / "seeds.json"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "nothing run" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seeds.md"]
    assert (tmp_path / "seeds.md").read_text() == (RESULTS / "seeds.md").read_text()


def test_render_only_without_results_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_seeds.py"), "--render-only",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "seeds.json: cannot read the recorded results" in proc.stderr

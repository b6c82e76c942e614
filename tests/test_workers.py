"""Report workers never outlive the report: SIGTERM or SIGKILL of the parent takes its worker
processes with it (``milp_planner.report.workers``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "instances" / "examples" / "tiny-2dev.yaml"

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it no longer exists."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and st[1] == pid and st[0] != "Z":
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"  # a zombie has exited; only its entry is left


def _wait(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_workers_die_with_the_report(tmp_path, sig):
    inst = tmp_path / "tiny.yaml"
    shutil.copy(TINY, inst)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    # two runs that each take the whole (long) time limit: bruteforce and distredge's training
    proc = subprocess.Popen([sys.executable, "-m", "milp_planner", "report", str(inst), "--planners",
                             "bruteforce,distredge", "--time-limit", "300", "--workers", "2", "--out",
                             str(tmp_path / "rep"), "--quiet"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        assert _wait(lambda: len(_children(proc.pid)) >= 2, 60), "the report never started two workers"
        workers = _children(proc.pid)
        time.sleep(1.0)  # the workers are past their start-up
        assert proc.poll() is None
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert _wait(lambda: not any(_alive(w) for w in workers), 15), \
            f"workers {[w for w in workers if _alive(w)]} outlived the report"
        if sig == signal.SIGTERM:
            err = proc.stderr.read()
            assert proc.returncode == 128 + signal.SIGTERM
            assert "terminated" in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in workers:  # never leave a process behind, even when the test fails
            if _alive(w):
                os.kill(w, signal.SIGKILL)

"""Run corpus cases as subprocesses of ``python -m milp_planner`` and classify the outcome.

Outcomes: ``clean error`` (exit 2 -- or 1 for a closed stdout -- with a short message and no
traceback), ``correct run``, ``traceback``, ``accepted nonsense`` (bad input run as if valid,
or a wrong result), ``refused valid`` (good input refused), ``unclear error`` (refused, but
the message misses what it must name), ``hang`` (past the time limit), and ``damage`` (an input
changed or a temporary file left behind).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fuzz_corpus.cases import Case

REPO = Path(__file__).resolve().parents[2]
OUTCOMES = ("clean error", "correct run", "traceback", "accepted nonsense", "refused valid",
            "unclear error", "hang", "damage")
GOOD = ("clean error", "correct run")


@dataclass
class Result:
    case: str
    dir: Path
    rc: int | None
    stdout: str
    stderr: str
    outcome: str = ""
    reason: str = ""


def _materialize(case: Case, d: Path) -> None:
    for name, content in case.files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(p)
        elif isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def _snapshot(d: Path) -> dict[str, str]:
    out = {}
    for p in d.rglob("*"):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _is_traceback(stderr: str) -> bool:
    # an "internal error" line is a traceback the CLI folded into one line: still a bug
    return ("Traceback (most recent call last)" in stderr or "Exception ignored" in stderr
            or "milp-planner: internal error:" in stderr)


def classify(case: Case, res: Result, before: dict[str, str]) -> None:
    after = _snapshot(res.dir)
    changed = [k for k, h in before.items() if after.get(k) != h]
    temps = [str(p) for p in res.dir.rglob("*.tmp")]
    if res.rc is None:
        res.outcome, res.reason = "hang", "no exit within the time limit"
        return
    if _is_traceback(res.stderr) or res.rc not in (0, 1, 2):
        last = res.stderr.strip().splitlines()[-1:] or [f"exit {res.rc}"]
        res.outcome, res.reason = "traceback", last[0][:160]
        return
    if changed or temps:
        res.outcome, res.reason = "damage", f"changed {changed} temp files {temps}"
        return
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    if case.stdout != "pipe":
        # stdout closed or a broken pipe: quiet and non-zero
        if res.rc != 0 and len(lines) <= 1:
            res.outcome = "clean error"
        else:
            res.outcome, res.reason = "accepted nonsense", f"exit {res.rc}, stderr {lines[:2]}"
        return
    refused = res.rc == 2
    if refused:
        message = lines  # argparse errors too are one line (cli_args.Parser)
        if len(message) != 1:
            res.outcome, res.reason = "unclear error", f"{len(message)} message lines"
            return
        if case.expect == "ok":
            res.outcome, res.reason = "refused valid", message[0][:160]
            return
        if case.expect == "error" and case.check is not None:
            why = case.check(res)
            if why:
                res.outcome, res.reason = "unclear error", why
                return
        res.outcome, res.reason = "clean error", message[0][:160]
        return
    if case.expect == "error":
        res.outcome, res.reason = "accepted nonsense", f"exit {res.rc}"
        return
    why = case.check(res) if case.check is not None else None
    if why:
        res.outcome, res.reason = "accepted nonsense", why
        return
    res.outcome = "correct run"


def _run_forked(case: Case, argv: list[str], d: Path, timeout: float) -> tuple[int | None, str, str]:
    """``main(argv)`` in a forked child (no interpreter start-up, the same isolation)."""
    import signal
    import time
    import traceback

    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    r, w = os.pipe() if case.stdout == "broken" else (None, None)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.setsid()
            os.chdir(d)
            os.environ.pop("MILP_PLANNER_DEBUG", None)
            os.dup2(err.fileno(), 2)
            sys.stderr = open(2, "w", closefd=False)  # pytest's capture objects replaced sys.std*
            if case.stdout == "closed":
                os.close(1)
                sys.stdout = None
            elif case.stdout == "broken":
                os.close(r)
                os.dup2(w, 1)
                os.close(w)
            else:
                os.dup2(out.fileno(), 1)
            if case.stdout != "closed":
                sys.stdout = open(1, "w", closefd=False)
            sys.stdin = open(os.devnull)
            from milp_planner.cli import main

            try:
                code = main(argv)
            except SystemExit as e:  # argparse
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
            try:
                if sys.stdout is not None:
                    sys.stdout.flush()
            except (BrokenPipeError, OSError):
                sys.stderr.write("Exception ignored while flushing sys.stdout\n")
                code = 120
            sys.stderr.flush()
        except BaseException:  # an uncaught exception: what Python would print
            try:
                sys.stderr.write(traceback.format_exc())
                sys.stderr.flush()
            except BaseException:
                pass
            code = 1
        os._exit(code if isinstance(code, int) else 1)
    if case.stdout == "broken":
        os.close(w)
        os.close(r)  # the reader goes away: writes fail with EPIPE
    deadline = time.monotonic() + timeout
    rc = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.01)
    out.seek(0)
    err.seek(0)
    return rc, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")


def run_case(case: Case, timeout: float = 20.0, root: Path | None = None, fork: bool = False) -> Result:
    """Run one case in a fresh directory (under ``root``) and classify it.

    ``fork=True`` runs ``main`` in a forked child of this process (fast; for cases that set
    no environment), otherwise a fresh ``python -m milp_planner``.
    """
    d = Path(tempfile.mkdtemp(prefix=f"fuzz-{case.name}-", dir=root))
    _materialize(case, d)
    before = _snapshot(d)
    argv = [a.replace("{dir}", str(d)) for a in case.argv]
    if fork and not case.env and hasattr(os, "fork"):
        rc, out, err = _run_forked(case, argv, d, timeout)
        res = Result(case.name, d, rc, out, err)
        classify(case, res, before)
        return res
    env = dict(os.environ)
    env.pop("MILP_PLANNER_DEBUG", None)
    paths = [v.replace("{dir}", str(d)) for k, v in case.env.items() if k == "PYTHONPATH"]
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(REPO)])
    env.update({k: v.replace("{dir}", str(d)) for k, v in case.env.items() if k != "PYTHONPATH"})
    cmd = [sys.executable, "-m", "milp_planner", *argv]
    kw = dict(cwd=d, env=env, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    if case.stdout == "closed":
        kw.update(stdout=subprocess.DEVNULL, pass_fds=(), preexec_fn=lambda: os.close(1))
    else:
        kw.update(stdout=subprocess.PIPE)
    p = subprocess.Popen(cmd, **kw, start_new_session=True)
    if case.stdout == "broken":
        p.stdout.close()
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        rc = None
    res = Result(case.name, d, rc, (out or b"").decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    classify(case, res, before)
    return res


def run_all(cases: list[Case], timeout: float = 20.0, workers: int = 2, root: Path | None = None,
            fork: bool = False) -> list[Result]:
    """Every case, ``workers`` at a time (forked children are run one at a time)."""
    if fork:
        return [run_case(c, timeout, root, fork=True) for c in cases]
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda c: run_case(c, timeout, root), cases))

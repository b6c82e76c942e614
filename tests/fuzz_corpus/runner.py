"""Run corpus cases as subprocesses of ``python -m milp_planner`` and classify the outcome.

Outcomes: ``clean error`` (exit 2 -- or 1 for a closed stdout -- with a short message and no
traceback), ``correct run``, ``traceback``, ``accepted nonsense`` (bad input run as if valid,
or a wrong result), ``refused valid`` (good input refused), ``unclear error`` (refused, but
the message misses what it must name), ``hang`` (past the time limit), and ``damage`` (an input
changed or a temporary file left behind). Cases of issue #30 that name their ``outputs`` add
``write outside`` (a file added, changed or removed outside the named outputs, or beside the
case's directory), ``half-written`` (an output left incomplete: a failed command's output must
be absent or as it was), ``overrun`` (the process took longer than the case's ``limit``) and
``leftover process`` (a process started by the case still running after it exited: every
process of a case carries the variable ``MILP_FUZZ_CASE``, which the runner looks for).
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

REPO = Path(os.environ.get("MILP_FUZZ_REPO") or Path(__file__).resolve().parents[2])  # the code under test
OUTCOMES = ("clean error", "correct run", "traceback", "accepted nonsense", "refused valid",
            "unclear error", "hang", "overrun", "damage", "write outside", "half-written", "leftover process")
CASE_MARKER = "MILP_FUZZ_CASE"
#: address space of every case (ulimit -v) unless it sets its own: a broken build reading
#: /dev/zero must not take the memory of a shared machine
DEFAULT_RLIMIT_AS = int(os.environ.get("MILP_FUZZ_RLIMIT_AS", str(12 * 10**9)))


def _limit_memory(limit: int | None) -> None:
    import resource

    limit = limit or DEFAULT_RLIMIT_AS
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
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
    wall: float = 0.0
    leftovers: int = 0
    outside: list = None  # entries added beside the case's directory


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
    """Every entry under ``d`` (symbolic links not followed): a regular file by its content's
    hash, anything else by its kind (a FIFO, a link and its target, a device, a directory)."""
    import stat as st_

    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(d))
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if st_.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                out[rel] = h.hexdigest()
            elif st_.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(p)
            elif st_.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            else:
                out[rel] = f"special:{st.st_mode:o}"
    return out


def _under(rel: str, outputs) -> bool:
    return any(rel == o or rel.startswith(o.rstrip("/") + "/") for o in outputs)


def _processes_with(marker: str) -> list[int]:
    needle = f"{CASE_MARKER}={marker}".encode()
    out = []
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    with open(f"/proc/{d}/stat", "rb") as g:
                        state = g.read().rsplit(b")", 1)[1].split()[0]
                    if state != b"Z":
                        out.append(int(d))
        except (OSError, IndexError):
            continue
    return out


def _reap(marker: str, wait: float = 2.0) -> int:
    """Processes of the case still alive after ``wait`` seconds (then killed); their number."""
    import signal
    import time

    end = time.monotonic() + wait
    left = _processes_with(marker)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = _processes_with(marker)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


def _is_traceback(stderr: str) -> bool:
    # an "internal error" line is a traceback the CLI folded into one line: still a bug
    return ("Traceback (most recent call last)" in stderr or "Exception ignored" in stderr
            or "milp-planner: internal error:" in stderr)


def classify(case: Case, res: Result, before: dict[str, str]) -> None:
    after = _snapshot(res.dir)
    if res.rc is None:
        res.outcome, res.reason = "hang", "no exit within the time limit"
        return
    if case.signal is not None and res.rc == -case.signal[0] and not res.stderr.strip() and not res.leftovers:
        res.outcome, res.reason = "clean error", "ended by the signal before it could answer it"
        return
    if _is_traceback(res.stderr) or res.rc not in (0, 1, 2, 130, 143):
        last = res.stderr.strip().splitlines()[-1:] or [f"exit {res.rc}"]
        res.outcome, res.reason = "traceback", last[0][:160]
        return
    if res.leftovers:
        res.outcome, res.reason = "leftover process", f"{res.leftovers} process(es) still running after exit"
        return
    if case.limit is not None and res.wall > case.limit:
        res.outcome, res.reason = "overrun", f"{res.wall:.1f} s, limit {case.limit:g} s"
        return
    if case.outputs is None:
        changed = [k for k, h in before.items() if after.get(k) != h]
        temps = [str(p) for p in res.dir.rglob("*.tmp")]
        if changed or temps:
            res.outcome, res.reason = "damage", f"changed {changed} temp files {temps}"
            return
    else:
        changed = [k for k, h in before.items() if after.get(k) != h and not _under(k, case.outputs)]
        if changed:
            res.outcome, res.reason = "damage", f"input changed or removed: {changed[:3]}"
            return
        added = [k for k in after if k not in before and not _under(k, case.outputs)]
        if added or res.outside:
            res.outcome, res.reason = "write outside", f"wrote {(added + (res.outside or []))[:3]}"
            return
        if res.rc != 0:
            # a failed command leaves its outputs as they were (absent or unchanged)
            moved = [k for k in set(before) | set(after) if _under(k, case.outputs) and before.get(k) != after.get(k)]
            if moved:
                res.outcome, res.reason = "half-written", f"failed (exit {res.rc}) but changed {sorted(moved)[:3]}"
                return
        elif case.complete is not None:
            why = case.complete(res)
            if why:
                res.outcome, res.reason = "half-written", why
                return
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    if case.signal is not None and res.rc in (130, 143):  # interrupted as asked: one line, then out
        if len(lines) <= 1:
            res.outcome, res.reason = "clean error", (lines or [""])[0][:160]
        else:
            res.outcome, res.reason = "unclear error", f"{len(lines)} message lines after the signal"
        return
    if res.rc in (130, 143):
        res.outcome, res.reason = "traceback", f"exit {res.rc} without a signal"
        return
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


def _run_forked(case: Case, argv: list[str], d: Path, timeout: float, marker: str) -> tuple[int | None, str, str]:
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
            _limit_memory(case.rlimit_as)
            os.chdir(d)
            os.environ.pop("MILP_PLANNER_DEBUG", None)
            os.environ[CASE_MARKER] = marker
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


def _needs_fresh_interpreter(case: Case) -> bool:
    return bool(case.env) or case.rlimit_as is not None or case.signal is not None


def run_case(case: Case, timeout: float = 20.0, root: Path | None = None, fork: bool = False) -> Result:
    """Run one case in a fresh directory (under ``root``) and classify it.

    ``fork=True`` runs ``main`` in a forked child of this process (fast; for cases that set
    no environment, limit or signal), otherwise a fresh ``python -m milp_planner``.
    """
    import time
    import uuid

    d = Path(tempfile.mkdtemp(prefix=f"fuzz-{case.name}-", dir=root))
    _materialize(case, d)
    before = _snapshot(d)
    beside = set(os.listdir(d.parent))
    argv = [a.replace("{dir}", str(d)) for a in case.argv]
    marker = uuid.uuid4().hex
    if case.limit is not None:
        timeout = max(timeout, case.limit * 3)
    t0 = time.monotonic()
    if fork and not _needs_fresh_interpreter(case) and hasattr(os, "fork"):
        rc, out, err = _run_forked(case, argv, d, timeout, marker)
        res = Result(case.name, d, rc, out, err, wall=time.monotonic() - t0)
    else:
        res = _run_fresh(case, argv, d, timeout, marker)
        res.wall = time.monotonic() - t0
    res.leftovers = _reap(marker)
    res.outside = sorted(set(os.listdir(d.parent)) - beside - {d.name}) if root is not None else []
    classify(case, res, before)
    return res


def _run_fresh(case: Case, argv: list[str], d: Path, timeout: float, marker: str) -> Result:
    import signal as signal_
    import threading

    env = dict(os.environ)
    env.pop("MILP_PLANNER_DEBUG", None)
    env[CASE_MARKER] = marker
    paths = [v.replace("{dir}", str(d)) for k, v in case.env.items() if k == "PYTHONPATH"]
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(REPO)])
    env.update({k: v.replace("{dir}", str(d)) for k, v in case.env.items() if k != "PYTHONPATH"})
    cmd = [sys.executable, "-m", "milp_planner", *argv]

    def limits():
        if case.stdout == "closed":
            os.close(1)
        _limit_memory(case.rlimit_as)

    kw = dict(cwd=d, env=env, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, preexec_fn=limits)
    if case.stdout == "closed":
        kw.update(stdout=subprocess.DEVNULL, pass_fds=())
    else:
        kw.update(stdout=subprocess.PIPE)
    p = subprocess.Popen(cmd, **kw, start_new_session=True)
    timer = None
    if case.signal is not None:
        sig, after = case.signal

        def send():
            try:
                os.killpg(p.pid, sig)  # as a terminal's Ctrl-C: the foreground process group
            except OSError:
                pass
        timer = threading.Timer(after, send)
        timer.start()
    if case.stdout == "broken":
        p.stdout.close()
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal_.SIGKILL)
        out, err = p.communicate()
        rc = None
    finally:
        if timer is not None:
            timer.cancel()
    return Result(case.name, d, rc, (out or b"").decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def run_all(cases: list[Case], timeout: float = 20.0, workers: int = 2, root: Path | None = None,
            fork: bool = False) -> list[Result]:
    """Every case, ``workers`` at a time (forked children are run one at a time)."""
    if fork:
        return [run_case(c, timeout, root, fork=True) for c in cases]
    with ThreadPoolExecutor(workers) as ex:
        # each case in a directory of its own, so that "beside the case" means its own
        return list(ex.map(lambda c: run_case(c, timeout, Path(tempfile.mkdtemp(dir=root)) if root else None),
                           cases))

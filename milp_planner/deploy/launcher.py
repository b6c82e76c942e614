"""``run_deployment``: start one MPI rank per device on this machine and collect the timings.

``mpiexec`` (MPICH's hydra, from the ``mpich`` wheel) is looked for next to
``sys.executable``, then on PATH. It runs in its own session. On a timeout, a failed rank,
Ctrl-C (SIGINT) or SIGTERM, every process of the run is stopped: mpiexec's process group,
every descendant of mpiexec (hydra starts each rank in a session of its own), every rank
that recorded its pid, and every process carrying the run's environment marker
(``MILP_PLANNER_RUN``), SIGTERM first, then SIGKILL, so no process is left behind.

Before anything starts: the manifest and every file it names are checked
(``Manifest.load``: a closed folder), ``--input`` is read within bounds
(``runtime.read_input_file``; the ranks get a checked copy), the run's memory is estimated
against the budget (``milp_planner.limits``), and ``--timeout`` starts counting: it covers
reading the inputs as well as the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from milp_planner.deadline import Deadline
from milp_planner.errors import PlannerError
from milp_planner.io import printable
from milp_planner.deploy.manifest import Manifest
from milp_planner.deploy.runtime import make_inputs, max_abs_err, reference_outputs


def find_mpiexec() -> str:
    """The ``mpiexec`` next to this Python, else on PATH; a one-line error if there is none."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("mpiexec")
    if found:
        return found
    raise PlannerError("run: mpiexec not found next to the Python interpreter or on PATH "
                       "(install the runtime: pip install 'milp-planner[deploy]')")


RUN_MARKER = "MILP_PLANNER_RUN"  # environment variable naming the run in every process it starts
RANK_BYTES = 250 * 10**6  # memory of one rank beside its sub-models (interpreter, numpy, onnxruntime, MPI)
SESSION_COPIES = 3  # an onnxruntime session holds a sub-model about this many times over its file size


def _processes_of_run(marker: str, root: int | None) -> list[int]:
    """Pids of the run's processes: descendants of ``root`` and holders of the marker."""
    parent: dict[int, int] = {}
    marked: list[int] = []
    needle = f"{RUN_MARKER}={marker}".encode()
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
            parent[pid] = int(stat[stat.rindex(b")") + 2:].split()[1])
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    marked.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    out = set(marked)
    if root is not None:
        frontier = [root]
        while frontier:
            p = frontier.pop()
            for child, par in parent.items():
                if par == p and child not in out:
                    out.add(child)
                    frontier.append(child)
    out.discard(os.getpid())
    return sorted(out)


def _kill_ranks(results: Path, marker: str | None = None, root: int | None = None) -> None:
    pids = set(_processes_of_run(marker, root)) if marker else set()
    for pid_file in results.glob("pid.*"):
        try:
            pid = int(pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if b"milp_planner.deploy.worker" in cmdline:  # still our rank, not a reused pid
            pids.add(pid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _stop(proc: subprocess.Popen, results: Path, marker: str | None = None) -> None:
    """Stop every process of the run: the descendants are listed before their parents die."""
    family = _processes_of_run(marker, proc.pid) if marker else []
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in family:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    _kill_ranks(results, marker, None)


class _Signalled(BaseException):
    """SIGINT or SIGTERM during a run: stop every rank, then end with 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _TimedOut(BaseException):
    """``--timeout`` ran out while the inputs were read."""


def _handlers(seconds: float):
    """SIGINT and SIGTERM raise ``_Signalled``; SIGALRM at the deadline raises ``_TimedOut``.
    The previous handlers come back on exit. A no-op outside the main thread."""
    import contextlib
    import threading

    @contextlib.contextmanager
    def block():
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum, frame):
            raise _Signalled(signum)

        def on_alarm(signum, frame):
            raise _TimedOut()

        saved = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        saved[signal.SIGALRM] = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, h in saved.items():
                signal.signal(sig, h)
    return block()


def check_run_memory(m: Manifest, sizes: dict[str, int], check: bool, budget: int | None = None) -> int:
    """Bytes a run needs: every rank's sub-models in sessions, the ranks themselves, the
    reference model for ``--check`` and the tensors at the sink; ``PlannerError`` above the budget."""
    from milp_planner.limits import check_need

    subs = sum(v for k, v in sizes.items() if k != m.reference_model)
    tensors = sum(int(np.prod(s)) for s in m.shapes.values()) * 4
    need = SESSION_COPIES * subs + m.n_ranks * RANK_BYTES + tensors
    if check:
        need += SESSION_COPIES * sizes.get(m.reference_model, 0)
    check_need(need, f"run of {m.n_ranks} ranks ({subs / 1e6:.3g} MB of sub-models)", budget)
    return need


def _median(xs):
    return statistics.median(xs) if xs else 0.0


def run_deployment(out_dir, input=None, repeat: int = 5, check: bool = False, emulate_network: bool = False,
                   timeout: float = 120.0, memory_budget: int | None = None) -> dict:
    """Run the deployment in ``out_dir`` under mpiexec and return the report ``run --json`` prints.

    The report holds ``max_abs_err`` (None without ``check``), ``measured_latency_s`` (median
    over ``repeat`` runs after one warm-up), ``predicted_latency_s`` (the evaluator's),
    ``per_stage`` (per stage and device: measured compute and receive seconds beside the
    predicted ones), ``gather`` and ``ranks``. ``timeout`` covers everything from here on.
    """
    if repeat < 1:
        raise PlannerError(f"run: --repeat {repeat} must be at least 1")
    if not timeout > 0:
        raise PlannerError(f"run: --timeout {timeout} must be positive")
    deadline = Deadline.after(timeout)
    folder = Path(out_dir)
    results = None
    proc = None
    marker = uuid.uuid4().hex
    try:
        with _handlers(timeout):
            try:
                m = Manifest.load(folder)  # a closed deployment: schema, ranks, files inside the folder
                sizes = m.check_files(folder)
                check_run_memory(m, sizes, check, memory_budget)
                given = None
                if input is not None:
                    given = make_inputs(m, input)  # a bad file fails here, in one line
                mpiexec = find_mpiexec()
                results = Path(tempfile.mkdtemp(prefix="milp-planner-run-"))
                input_path = None
                if given is not None:  # the ranks read this checked copy, never the user's file
                    input_path = results / "input.npz"
                    np.savez(input_path, **given)
                cmd = [mpiexec, "-n", str(m.n_ranks), sys.executable, "-m", "milp_planner.deploy.worker",
                       str(folder.resolve()), "--repeat", str(repeat), "--results", str(results)]
                if input_path is not None:
                    cmd += ["--input", str(input_path)]
                if emulate_network:
                    cmd.append("--emulate-network")
                env = dict(os.environ, OMP_NUM_THREADS="1", **{RUN_MARKER: marker})
                root = str(Path(__file__).resolve().parents[2])
                env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
                left = deadline.left()
                if left <= 0:
                    raise _TimedOut()
                signal.setitimer(signal.ITIMER_REAL, 0)  # from here communicate() keeps the time
                t_run = time.perf_counter()
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, start_new_session=True, env=env)
                try:
                    _, err = proc.communicate(timeout=left)
                except subprocess.TimeoutExpired:
                    _stop(proc, results, marker)
                    proc.communicate()
                    names = m.rank_names()
                    errors = _errors(results, names)
                    if errors:
                        raise PlannerError(f"run: {errors[0]}") from None
                    late = [f"{r} ({names[r]})" for r in range(m.n_ranks) if not (results / f"rank{r}.json").exists()]
                    raise PlannerError(f"run: timed out after {timeout:g} s; ranks without a result: "
                                       f"{', '.join(late) or 'none'}; every rank was stopped") from None
                wall = time.perf_counter() - t_run
                names = m.rank_names()
                errors = _errors(results, names)
                if proc.returncode != 0 or errors:
                    _kill_ranks(results, marker, None)
                    if errors:
                        raise PlannerError(f"run: {errors[0]}")
                    text = err.decode(errors="replace").strip().splitlines()
                    raise PlannerError(f"run: mpiexec exited with status {proc.returncode}"
                                       + (f" ({printable(text[-1][:200])})" if text else ""))
                report = _report(m, results, repeat, emulate_network, mpiexec, wall)
                if check:
                    order = json.loads((results / "outputs.json").read_text())
                    with np.load(results / "outputs.npz", allow_pickle=False) as z:
                        got = {t: z[f"out{k}"] for k, t in enumerate(order)}
                    ref = reference_outputs(folder, make_inputs(m, input_path))
                    report["max_abs_err"] = max_abs_err(got, ref)
                return report
            except _TimedOut:
                raise PlannerError(f"run: timed out after {timeout:g} s (--timeout) while reading the "
                                   "deployment and its inputs") from None
    except _Signalled as sig:
        if proc is not None and results is not None:
            _stop(proc, results, marker)
        name = signal.Signals(sig.signum).name
        print(f"milp-planner: run interrupted ({name}); every rank was stopped", file=sys.stderr)
        raise SystemExit(128 + sig.signum) from None
    finally:
        if proc is not None and proc.poll() is None and results is not None:
            _stop(proc, results, marker)
        if results is not None:
            shutil.rmtree(results, ignore_errors=True)


def _errors(results: Path, names: list[str]) -> list[str]:
    out = []
    for r, name in enumerate(names):
        f = results / f"rank{r}.error"
        if f.exists():
            text = " ".join(f.read_text(errors="replace")[:400].split())
            out.append(f"rank {r} ({printable(name)}) failed: {printable(text)}")
    return out


def _timeline(per_rank: dict) -> dict:
    """The last timed run of every rank on one clock: seconds from the earliest rank's start
    (the ranks leave the same barrier), for ``milp_planner.trace.measured_events``."""
    recs = {name: r.get("timeline") for name, r in per_rank.items() if r.get("timeline")}
    if not recs:
        return {}
    t0 = min(r["t0"] for r in recs.values())
    out = {"devices": list(per_rank), "sent": {}, "received": [], "compute": []}
    for r in recs.values():
        out["sent"].update({str(k): v - t0 for k, v in r["sent"].items()})
        out["received"] += [{**e, "wait": e["wait"] - t0, "end": e["end"] - t0} for e in r["received"]]
        out["compute"] += [{**e, "start": e["start"] - t0, "end": e["end"] - t0} for e in r["compute"]]
    return out


def _report(m: Manifest, results: Path, repeat: int, emulate: bool, mpiexec: str, wall: float) -> dict:
    per_rank = {}
    for r, name in enumerate(m.rank_names()):
        per_rank[name] = json.loads((results / f"rank{r}.json").read_text())
    sink = per_rank[m.sink]
    per_stage = []
    for s in m.stages:
        devices = []
        for p in s.parts:
            rec = per_rank.get(p.device, {}).get("stages", {}).get(str(s.index), {})
            devices.append({
                "device": p.device,
                "range": list(p.range) if p.range else None,
                "compute_s": _median(rec.get("compute_s", [])),
                "recv_s": _median(rec.get("recv_s", [])),
                "predicted_compute_s": p.predicted_compute_s,
                "predicted_recv_s": p.predicted_recv_s,
            })
        per_stage.append({"stage": s.index, "first": s.first, "last": s.last, "axis": s.axis,
                          "predicted_tau_s": s.predicted_tau_s, "devices": devices})
    return {
        "max_abs_err": None,
        "timeline": _timeline(per_rank),
        "measured_latency_s": _median(sink["latencies_s"]),
        "latencies_s": sink["latencies_s"],
        "predicted_latency_s": m.predicted_latency_s,
        "gather": {"measured_s": _median(sink["gather_s"]), "predicted_s": m.predicted_gather_s},
        "per_stage": per_stage,
        "ranks": m.ranks,
        "repeat": repeat,
        "emulate_network": emulate,
        "messages": len(m.messages),
        "mpiexec": mpiexec,
        "wall_s": wall,
    }

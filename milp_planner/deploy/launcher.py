"""``run_deployment``: start one MPI rank per device on this machine and collect the timings.

``mpiexec`` (MPICH's hydra, from the ``mpich`` wheel) is looked for next to
``sys.executable``, then on PATH. It runs in its own session; on a timeout the whole group is
terminated, then killed, and every rank that recorded its pid is killed too (hydra starts
each rank in a session of its own), so no process is left behind.
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
from pathlib import Path

import numpy as np

from milp_planner.errors import PlannerError
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


def _kill_ranks(results: Path) -> None:
    for pid_file in results.glob("pid.*"):
        try:
            pid = int(pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if b"milp_planner.deploy.worker" in cmdline:  # still our rank, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _stop(proc: subprocess.Popen, results: Path) -> None:
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    _kill_ranks(results)


def _median(xs):
    return statistics.median(xs) if xs else 0.0


def run_deployment(out_dir, input=None, repeat: int = 5, check: bool = False, emulate_network: bool = False,
                   timeout: float = 120.0) -> dict:
    """Run the deployment in ``out_dir`` under mpiexec and return the report ``run --json`` prints.

    The report holds ``max_abs_err`` (None without ``check``), ``measured_latency_s`` (median
    over ``repeat`` runs after one warm-up), ``predicted_latency_s`` (the evaluator's),
    ``per_stage`` (per stage and device: measured compute and receive seconds beside the
    predicted ones), ``gather`` and ``ranks``.
    """
    folder = Path(out_dir)
    m = Manifest.load(folder)
    if repeat < 1:
        raise PlannerError(f"run: --repeat {repeat} must be at least 1")
    if not timeout > 0:
        raise PlannerError(f"run: --timeout {timeout} must be positive")
    input_path = None
    if input is not None:
        if isinstance(input, (str, Path)):
            input_path = Path(input).resolve()
            make_inputs(m, input_path)  # a bad file fails here, in one line
        else:
            arr = np.asarray(input, dtype=np.float32)
            make_inputs(m, arr)
    mpiexec = find_mpiexec()
    results = Path(tempfile.mkdtemp(prefix="milp-planner-run-"))
    try:
        if input is not None and input_path is None:
            input_path = results / "input.npy"
            np.save(input_path, np.asarray(input, dtype=np.float32))
        cmd = [mpiexec, "-n", str(m.n_ranks), sys.executable, "-m", "milp_planner.deploy.worker",
               str(folder.resolve()), "--repeat", str(repeat), "--results", str(results)]
        if input_path is not None:
            cmd += ["--input", str(input_path)]
        if emulate_network:
            cmd.append("--emulate-network")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc, results)
            proc.communicate()
            names = m.rank_names()
            errors = _errors(results, names)
            if errors:
                raise PlannerError(f"run: {errors[0]}") from None
            late = [f"{r} ({names[r]})" for r in range(m.n_ranks) if not (results / f"rank{r}.json").exists()]
            raise PlannerError(f"run: timed out after {timeout:g} s; ranks without a result: "
                               f"{', '.join(late) or 'none'}; every rank was stopped") from None
        wall = time.monotonic() - started
        names = m.rank_names()
        errors = _errors(results, names)
        if proc.returncode != 0 or errors:
            _kill_ranks(results)
            if errors:
                raise PlannerError(f"run: {errors[0]}")
            text = err.decode(errors="replace").strip().splitlines()
            raise PlannerError(f"run: mpiexec exited with status {proc.returncode}"
                               + (f" ({text[-1][:200]})" if text else ""))
        report = _report(m, results, repeat, emulate_network, mpiexec, wall)
        if check:
            order = json.loads((results / "outputs.json").read_text())
            with np.load(results / "outputs.npz") as z:
                got = {t: z[f"out{k}"] for k, t in enumerate(order)}
            ref = reference_outputs(folder, make_inputs(m, input_path))
            report["max_abs_err"] = max_abs_err(got, ref)
        return report
    finally:
        shutil.rmtree(results, ignore_errors=True)


def _errors(results: Path, names: list[str]) -> list[str]:
    out = []
    for r, name in enumerate(names):
        f = results / f"rank{r}.error"
        if f.exists():
            out.append(f"rank {r} ({name}) failed: {f.read_text().strip()}")
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

"""One MPI rank: ``mpiexec -n R python -m milp_planner.deploy.worker DIR [options]``.

Rank r runs the program of the r-th name in the manifest's ``ranks`` (a device, or the
external source/sink, always the last rank). Messages are point-to-point MPI sends (tag =
stage), posted without blocking as soon as the data is owned; a receiver takes its messages
one after another in the manifest's order. Every repeat starts after a barrier; one warm-up
run is not counted.

``--emulate-network`` holds every message until its modelled arrival: sent at ``t`` (the
sender's clock, carried with the message), it arrives at ``max(t, end of the receiver's
previous arrival) + bytes / bandwidth + latency`` (the evaluator's transfer time), and the
receiver sleeps until then (spinning for the last ``SPIN_S``). The clock is
``time.monotonic()``, shared by every process of one host: an emulation for one machine only.

Results go to ``RESULTS/rank<R>.json`` (and ``outputs.npz`` at the sink). A rank that fails
writes ``rank<R>.error`` (one line) and aborts the whole job. For tests only, the variable
``MILP_PLANNER_DEPLOY_FAULT=hang:R`` or ``fail:R`` makes rank R hang or fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from milp_planner.deploy.manifest import Manifest, MessageSpec
from milp_planner.deploy.runtime import RankProgram, make_inputs, tensor_dtype

#: the last part of an emulated wait is spun, not slept: ``time.sleep`` wakes about 80 us late
#: (Linux timer slack and scheduling), which would add that to every emulated message
SPIN_S = 2e-4


class MpiTransport:
    """Point-to-point messages between ranks, optionally held for the modelled network time."""

    def __init__(self, comm, ranks: dict[str, int], emulate: bool):
        self.comm = comm
        self.ranks = ranks
        self.emulate = emulate
        self.pending = []
        self.link_free = 0.0  # end of this receiver's previous modelled arrival

    def send(self, msg: MessageSpec, array: np.ndarray) -> None:
        dest = self.ranks[msg.receiver]
        if self.emulate:
            stamp = np.array([time.monotonic()], dtype=np.float64)
            self.pending.append((self.comm.Isend(stamp, dest=dest, tag=msg.stage), stamp))
        array = np.require(array, dtype=tensor_dtype(self.manifest, msg.tensor), requirements="C")
        self.pending.append((self.comm.Isend(array, dest=dest, tag=msg.stage), array))

    def recv(self, msg: MessageSpec) -> np.ndarray:
        from milp_planner.deploy.regions import region_shape

        src = self.ranks[msg.sender]
        stamp = np.empty(1, dtype=np.float64)
        if self.emulate:
            self.comm.Recv(stamp, source=src, tag=msg.stage)
        buf = np.empty(region_shape(tuple(self.shapes[msg.tensor]), msg.region),
                       dtype=tensor_dtype(self.manifest, msg.tensor))
        self.comm.Recv(buf, source=src, tag=msg.stage)
        if self.emulate:
            arrival = max(float(stamp[0]), self.link_free) + msg.time_s
            self.link_free = arrival
            wait = arrival - time.monotonic()
            if wait > SPIN_S:
                time.sleep(wait - SPIN_S)
            while time.monotonic() < arrival:  # time.sleep overshoots (about 80 us on Linux)
                pass
        return buf

    def finish(self) -> None:
        from mpi4py import MPI

        MPI.Request.Waitall([r for r, _ in self.pending])
        self.pending = []


def _fault(rank: int) -> None:
    spec = os.environ.get("MILP_PLANNER_DEPLOY_FAULT", "")
    kind, _, who = spec.partition(":")
    if who.strip() == str(rank):
        if kind == "hang":
            time.sleep(3600)
        if kind == "fail":
            raise RuntimeError("injected failure (MILP_PLANNER_DEPLOY_FAULT)")


def run_rank(args) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    folder = Path(args.folder)
    results = Path(args.results) if args.results else folder / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"pid.{rank}").write_text(str(os.getpid()))
    try:
        # a board holds the manifest and its own folder: this rank's sub-models are checked
        m = Manifest.load(folder, files=False)
        if comm.Get_size() != m.n_ranks:
            raise RuntimeError(f"started with {comm.Get_size()} ranks, the deployment needs {m.n_ranks}")
        me = m.rank_names()[rank]
        m.check_files(folder, [p.model for s in m.stages for p in s.parts if p.device == me and p.model])
        prog = RankProgram(folder, m, me)
        prog.load()
        transport = MpiTransport(comm, m.ranks, args.emulate_network)
        transport.shapes = m.shapes
        transport.manifest = m
        inputs = make_inputs(m, args.input) if m.source == me else {}
        _fault(rank)
        n = len(m.stages)
        stage_t: dict[int, dict[str, list[float]]] = {}
        latencies, gathers = [], []
        outputs = None
        for it in range(args.repeat + 1):  # the first run warms up and is not counted
            comm.Barrier()
            transport.link_free = 0.0
            t0 = time.monotonic()
            if it == args.repeat:  # the last run is recorded for a timeline (run --trace)
                prog.trace = {"t0": t0, "sent": {}, "received": [], "compute": []}
            prog.start(inputs)
            for si in range(n):
                prog.send_stage(si, transport)
                timing = prog.run_stage(si, transport)
                if timing is not None and it > 0:
                    rec = stage_t.setdefault(si, {"compute_s": [], "recv_s": []})
                    rec["compute_s"].append(timing.compute_s)
                    rec["recv_s"].append(timing.recv_s)
            tg = time.monotonic()
            outputs = prog.gather(transport)
            t_end = time.monotonic()
            transport.finish()
            if it > 0 and me == m.sink:
                latencies.append(t_end - t0)
                gathers.append(t_end - tg)
        comm.Barrier()
        if outputs is not None:
            np.savez(results / "outputs.npz", **{f"out{k}": v for k, v in enumerate(outputs.values())})
            (results / "outputs.json").write_text(json.dumps(list(outputs)))
        (results / f"rank{rank}.json").write_text(json.dumps({
            "rank": rank, "name": me, "stages": stage_t, "latencies_s": latencies, "gather_s": gathers,
            "timeline": prog.trace,
        }))
    except BaseException as e:  # one line for the launcher, then end every rank
        line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        (results / f"rank{rank}.error").write_text(f"{type(e).__name__}: {line}\n")
        sys.stderr.flush()
        comm.Abort(1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m milp_planner.deploy.worker",
                                description="one MPI rank of a milp-planner deployment")
    p.add_argument("folder")
    p.add_argument("--input", help="a .npy file with the model input (default: seeded noise)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--emulate-network", action="store_true")
    p.add_argument("--results", help="folder for the results (default: FOLDER/results)")
    run_rank(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())

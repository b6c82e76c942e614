"""What one rank does with a deployment, whatever carries its messages.

``RankProgram`` holds the data a device owns, sends its messages, assembles the inputs of
its sub-models from what it owns and what it received, runs them with onnxruntime (one
intra-op thread) and keeps only what it owns afterwards: halo rows and received data live
only for the stage (docs/model.md's ownership rule). ``execute_sequential`` runs every rank in this
process, stage by stage in rank order, with an in-memory mailbox: the numerics of the MPI
run without its start-up cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from milp_planner.errors import PlannerError
from milp_planner.space.geometry import Region
from milp_planner.deploy.manifest import Manifest, MessageSpec, PartSpec
from milp_planner.deploy.regions import intersect, put, region_shape, take


def session_options():
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return so


def load_session(path: Path):
    """An onnxruntime session of the sub-model ``path`` (a regular file, checked first)."""
    import onnxruntime as ort

    from milp_planner.io import check_input_file, printable

    check_input_file(path, "a sub-model", 2**31 - 1)
    try:
        return ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    except Exception as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise PlannerError(f"{printable(path)}: onnxruntime cannot load it ({printable(reason)})") from None


NPY_HEADER_BYTES = 64 * 1024  # a .npy header is at most this (numpy allows 4 GiB; real ones are < 1 kB)


def read_input_file(path, shapes: dict[str, tuple]) -> np.ndarray | dict[str, np.ndarray]:
    """The arrays in ``path``: a ``.npy`` array (the first input) or an ``.npz`` archive of arrays
    by input name (``shapes``: the model's inputs).

    Only a regular file of at most the bytes such arrays can take (complex128) is read, its
    archive members' sizes checked before they are unpacked, without pickles; text, objects, a
    FIFO or anything larger is one ``PlannerError`` line naming the file.
    """
    import zipfile

    from milp_planner.io import check_input_file, printable

    path = Path(path)
    label = printable(path)
    limit = sum(int(np.prod(s)) for s in shapes.values()) * 16 + NPY_HEADER_BYTES * (1 + len(shapes))
    check_input_file(path, "an input array (.npy) or archive (.npz)", limit)
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic[:2] == b"PK":
        try:
            with zipfile.ZipFile(path) as z:
                unpacked = sum(i.file_size for i in z.infolist())
        except (zipfile.BadZipFile, OSError) as e:
            raise PlannerError(f"{label}: not an .npz archive ({e})") from None
        if unpacked > limit:
            raise PlannerError(f"{label}: unpacks to {unpacked} bytes, more than the model's inputs can take")
    elif magic != b"\x93NUMPY":
        raise PlannerError(f"{label}: not a .npy array or .npz archive (numpy.save and numpy.savez write them)")
    try:
        data = np.load(path, allow_pickle=False, mmap_mode=None)
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                data = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError) as e:
        reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise PlannerError(f"{label}: cannot read the input arrays ({reason})") from None
    for arr in (data.values() if isinstance(data, dict) else [data]):
        if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf":
            raise PlannerError(f"{label}: holds {getattr(arr, 'dtype', type(arr).__name__)} values, not numbers")
    return data


def tensor_dtype(manifest: Manifest, t: str) -> np.dtype:
    """The element type of tensor ``t`` in the deployment (float32 unless the manifest says otherwise)."""
    return np.dtype(manifest.notes.get("dtypes", {}).get(t, "float32"))


def make_inputs(manifest: Manifest, input=None) -> dict[str, np.ndarray]:
    """The model inputs: ``input`` (an array or a .npy path: the first input; a mapping or an
    .npz file: inputs by name), else seeded noise (normal for float inputs, ones for integer
    ones, e.g. token ids and masks)."""
    if isinstance(input, (str, Path)):
        given = read_input_file(input, manifest.inputs)
    elif input is not None:
        given = input if isinstance(input, dict) else np.asarray(input)
        for arr in (given.values() if isinstance(given, dict) else [given]):
            if np.asarray(arr).dtype.kind not in "biuf":
                raise PlannerError(f"input: holds {np.asarray(arr).dtype} values, not numbers")
    else:
        given = None
    label = input if isinstance(input, (str, Path)) else "input"
    if isinstance(given, dict):
        unknown = sorted(set(given) - set(manifest.inputs))
        if unknown:
            raise PlannerError(f"{label}: '{unknown[0]}' is not an input of the model "
                               f"(its inputs: {', '.join(manifest.inputs)})")
    out = {}
    for k, (t, shape) in enumerate(manifest.inputs.items()):
        dtype = tensor_dtype(manifest, t)
        arr = None
        if isinstance(given, dict):
            arr = given.get(t)
        elif given is not None and k == 0:
            arr = given
        if arr is not None:
            arr = np.asarray(arr, dtype=dtype)
            if tuple(arr.shape) != tuple(shape):
                raise PlannerError(f"{label}: shape {tuple(arr.shape)}, the model's input '{t}' has {tuple(shape)}")
        elif np.issubdtype(dtype, np.floating):
            arr = np.random.default_rng(k).standard_normal(shape, dtype=np.float32).astype(dtype)
        else:
            arr = np.ones(shape, dtype=dtype)
        out[t] = arr
    return out


class Transport(Protocol):
    def send(self, msg: MessageSpec, array: np.ndarray) -> None: ...

    def recv(self, msg: MessageSpec) -> np.ndarray: ...


@dataclass
class StageTiming:
    compute_s: float = 0.0
    recv_s: float = 0.0


@dataclass
class RankProgram:
    """The program of one rank (a device, or the external source/sink)."""

    folder: Path
    manifest: Manifest
    me: str
    store: dict[str, tuple[Region, np.ndarray]] = field(default_factory=dict)
    sessions: dict[str, object] = field(default_factory=dict)
    # the run being recorded for a timeline (``run --trace``): None, or sends, receipts and
    # compute spans on time.monotonic() (milp_planner.trace)
    trace: dict | None = None

    def __post_init__(self):
        m = self.manifest
        self.sends: dict[int, list[MessageSpec]] = {}
        self.recvs: dict[int, list[MessageSpec]] = {}
        for msg in m.messages:
            if msg.sender == self.me:
                self.sends.setdefault(msg.stage, []).append(msg)
            if msg.receiver == self.me:
                self.recvs.setdefault(msg.stage, []).append(msg)
        self.parts: dict[int, PartSpec] = {}
        for s in m.stages:
            for p in s.parts:
                if p.device == self.me:
                    self.parts[s.index] = p

    def load(self) -> None:
        """Open the sub-models of this rank (before any timing)."""
        for p in self.parts.values():
            if p.model and p.model not in self.sessions:
                self.sessions[p.model] = load_session(self.folder / p.model)

    def start(self, inputs: dict[str, np.ndarray]) -> None:
        self.store = {}
        if self.manifest.source == self.me:
            for t, arr in inputs.items():
                self.store[t] = (_full_region(arr.shape), arr)

    def send_stage(self, si: int, transport: Transport) -> None:
        for msg in self.sends.get(si, ()):
            region, arr = self.store[msg.tensor]
            if self.trace is not None:
                self.trace["sent"][msg.id] = time.monotonic()
            transport.send(msg, take(arr, region, msg.region))

    def _recv(self, msg: MessageSpec, transport: Transport, gather: bool = False) -> np.ndarray:
        wait = time.monotonic() if self.trace is not None else 0.0
        arr = transport.recv(msg)
        if self.trace is not None:
            self.trace["received"].append({"id": msg.id, "stage": msg.stage, "tensor": msg.tensor, "src": msg.sender,
                                           "dst": msg.receiver, "bytes": msg.bytes, "wait": wait,
                                           "end": time.monotonic(), "gather": gather})
        return arr

    def run_stage(self, si: int, transport: Transport) -> StageTiming | None:
        """Receive, assemble and compute this rank's part of stage ``si`` (None: no part)."""
        part = self.parts.get(si)
        received = []
        t0 = time.perf_counter()
        for msg in self.recvs.get(si, ()):
            received.append((msg, self._recv(msg, transport)))
        recv_s = time.perf_counter() - t0
        if part is None:
            return None
        timing = StageTiming(recv_s=recv_s)
        if not part.model:
            return timing
        feeds = {}
        for sl in part.inputs:
            feeds[sl.name] = self._assemble(sl.tensor, sl.region, [(m, a) for m, a in received if m.tensor == sl.tensor])
        sess = self.sessions.get(part.model)
        if sess is None:
            sess = self.sessions[part.model] = load_session(self.folder / part.model)
        names = [o.name for o in part.outputs]
        start = time.monotonic() if self.trace is not None else 0.0
        t1 = time.perf_counter()
        outs = sess.run(names, feeds)
        timing.compute_s = time.perf_counter() - t1
        if self.trace is not None:
            self.trace["compute"].append({"device": self.me, "stage": si, "start": start, "end": time.monotonic()})
        for o, arr in zip(part.outputs, outs):
            self.store[o.tensor] = (o.region, arr)
        return timing

    def gather(self, transport: Transport) -> dict[str, np.ndarray] | None:
        """Send owned outputs to the sink; at the sink, return the assembled outputs."""
        n = len(self.manifest.stages)
        self.send_stage(n, transport)
        if self.manifest.sink != self.me:
            return None
        received = [(msg, self._recv(msg, transport, gather=True)) for msg in self.recvs.get(n, ())]
        out = {}
        for t, shape in self.manifest.outputs.items():
            full = _full_region(shape)
            out[t] = self._assemble(t, full, [(m, a) for m, a in received if m.tensor == t])
        return out

    def _assemble(self, t: str, need: Region, received) -> np.ndarray:
        shape = self._shape(t)
        buf = np.empty(region_shape(shape, need), dtype=tensor_dtype(self.manifest, t))
        covered = 0
        own = self.store.get(t)
        if own is not None:
            common = intersect(own[0], need)
            if common is not None:
                put(buf, need, take(own[1], own[0], common), common)
                covered += common.cells
        for msg, arr in received:
            put(buf, need, arr, msg.region)
            covered += msg.region.cells
        if covered != need.cells:
            raise PlannerError(f"deploy: rank {self.me}: tensor '{t}' rows {need.rows} channels {need.chans} "
                               f"assembled from {covered} of {need.cells} cells")
        return buf

    def _shape(self, t: str) -> tuple[int, ...]:
        return tuple(self.manifest.shapes[t])


def _full_region(shape) -> Region:
    shape = tuple(shape)
    if len(shape) == 4:
        return Region((0, shape[2]), (0, shape[1]))
    return Region((0, 1), (0, shape[-1] if shape else 1))


class Mailbox:
    """An in-memory transport for ``execute_sequential``."""

    def __init__(self):
        self.box: dict[int, np.ndarray] = {}

    def send(self, msg: MessageSpec, array: np.ndarray) -> None:
        self.box[msg.id] = array

    def recv(self, msg: MessageSpec) -> np.ndarray:
        try:
            return self.box.pop(msg.id)
        except KeyError:
            raise PlannerError(f"deploy: message {msg.id} ({msg.tensor} {msg.sender} -> {msg.receiver}) "
                               f"received before it was sent") from None


def execute_sequential(out_dir, input=None) -> dict[str, np.ndarray]:
    """Run a deployment in this process, rank after rank within each stage; the sink's outputs."""
    folder = Path(out_dir)
    m = Manifest.load(folder)
    inputs = make_inputs(m, input)
    progs = {name: RankProgram(folder, m, name) for name in m.rank_names()}
    box = Mailbox()
    for p in progs.values():
        p.start(inputs)
    for s in m.stages:
        for p in progs.values():
            p.send_stage(s.index, box)
        for p in progs.values():
            p.run_stage(s.index, box)
    for p in progs.values():
        if p.me != m.sink:
            p.gather(box)
    return progs[m.sink].gather(box)


def reference_outputs(out_dir, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The unsplit model's outputs (onnxruntime, one thread)."""
    folder = Path(out_dir)
    m = Manifest.load(folder)
    sess = load_session(folder / m.reference_model)
    names = [o.name for o in sess.get_outputs()]
    vals = sess.run(names, {k: v for k, v in inputs.items() if k in {i.name for i in sess.get_inputs()}})
    got = dict(zip(names, vals))
    return {t: got[t] for t in m.outputs if t in got}


def max_abs_err(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    missing = set(b) - set(a)
    if missing:
        raise PlannerError(f"deploy: output '{sorted(missing)[0]}' was not produced")
    return max((_abs_err(a[t], b[t]) for t in b), default=0.0)


def _abs_err(got: np.ndarray, want: np.ndarray) -> float:
    """The largest absolute difference; equal values (NaN against NaN, an infinity against the
    same infinity) differ by 0, a NaN or infinity on one side only by infinity."""
    if not want.size:
        return 0.0
    x, y = got.astype(np.float64), want.astype(np.float64)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(x - y))
    return float(np.max(np.nan_to_num(diff, nan=np.inf, posinf=np.inf)))

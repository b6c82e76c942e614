"""The deployment manifest (``manifest.json``): ranks, sub-models and every message.

Written by ``deploy`` and read by the runtime; a run needs nothing else from the project.
Regions are ``rows`` x ``channels`` half-open ranges of a tensor's (H, C) grid.

A deployment is closed (issue #30): ``Manifest.load(folder)`` reads ``manifest.json`` (a
regular file of at most ``MAX_MANIFEST_BYTES``, strict JSON), checks it against
``MANIFEST_SCHEMA`` (a JSON Schema: types, ranges, the float32 dtype) and then against itself
(``validate_manifest``): one rank per device that takes part plus ``external`` exactly when the
source or the sink is external (ranks 0..R-1), the source and the sink among them, stages that
cover the layers in order, regions inside their tensors' shapes, messages between ranks, at
most ``MAX_ELEMENTS`` elements per tensor. With ``files=True`` every file it names (sub-models,
the reference model) must be a relative path inside the folder (no absolute path, no ``..``,
no link out of it) to a regular file of at most 2 GiB. Anything else is one ``PlannerError``
naming the manifest and the key.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from math import prod
from pathlib import Path

from milp_planner.errors import PlannerError
from milp_planner.space.geometry import Region

FORMAT = 1
EXTERNAL_NAME = "external"  # the external source/sink node in the manifest
MAX_MANIFEST_BYTES = 64 * 2**20
MAX_ELEMENTS = 2**31  # elements of one tensor (float32: 8 GiB)
MAX_RANKS = 1024
MAX_SUBMODEL_BYTES = 2**31 - 1

_NAME = {"type": "string", "minLength": 1, "maxLength": 1000}
_INT = {"type": "integer", "minimum": 0, "maximum": 2**40}
_RANGE = {"type": "array", "items": _INT, "minItems": 2, "maxItems": 2}
_SECONDS = {"type": "number", "minimum": 0}
_SHAPE = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 1 << 20}, "minItems": 0,
          "maxItems": 8}  # (a scalar input, e.g. a sample rate, has the shape [])
#: the element types a deployment may carry between ranks (``notes.dtypes``, numpy names)
DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
           "uint64", "bool"]
_SHAPES = {"type": "object", "additionalProperties": _SHAPE, "propertyNames": {"minLength": 1}}
_SLICE = {"type": "object", "required": ["tensor", "rows", "channels", "name"], "additionalProperties": False,
          "properties": {"tensor": _NAME, "rows": _RANGE, "channels": _RANGE, "name": _NAME}}
MANIFEST_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "milp-planner deployment manifest",
    "type": "object",
    "required": ["format", "instance", "model", "devices", "ranks", "source", "sink", "inputs", "outputs",
                 "reference_model", "stages", "messages", "predicted_latency_s", "predicted_gather_s", "notes",
                 "shapes"],
    "additionalProperties": False,
    "properties": {
        "format": {"const": FORMAT},
        "instance": {"type": "string", "maxLength": 1000},
        "model": {"type": ["string", "null"], "maxLength": 4096},
        "devices": {"type": "array", "items": _NAME, "minItems": 1, "maxItems": MAX_RANKS, "uniqueItems": True},
        "ranks": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0,
                                                             "maximum": MAX_RANKS},
                  "minProperties": 1, "maxProperties": MAX_RANKS + 1},
        "source": _NAME,
        "sink": _NAME,
        "inputs": {**_SHAPES, "minProperties": 1},
        "outputs": {**_SHAPES, "minProperties": 1},
        "reference_model": _NAME,
        "stages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False,
            "required": ["index", "first", "last", "axis", "parts", "predicted_tau_s"],
            "properties": {
                "index": _INT, "first": _INT, "last": _INT, "axis": {"enum": ["none", "rows", "channels"]},
                "predicted_tau_s": _SECONDS,
                "parts": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "required": ["device", "range", "model", "inputs", "outputs", "predicted_compute_s",
                                 "predicted_recv_s"],
                    "properties": {
                        "device": _NAME, "range": {"oneOf": [{"type": "null"}, _RANGE]},
                        "model": {"oneOf": [{"type": "null"}, _NAME]},
                        "inputs": {"type": "array", "items": _SLICE}, "outputs": {"type": "array", "items": _SLICE},
                        "predicted_compute_s": _SECONDS, "predicted_recv_s": _SECONDS}}}}}},
        "messages": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["id", "stage", "tensor", "sender", "receiver", "rows", "channels", "bytes",
                         "payload_bytes", "time_s"],
            "properties": {"id": _INT, "stage": _INT, "tensor": _NAME, "sender": _NAME, "receiver": _NAME,
                           "rows": _RANGE, "channels": _RANGE, "bytes": _INT, "payload_bytes": _INT,
                           "time_s": _SECONDS}}},
        "predicted_latency_s": _SECONDS,
        "predicted_gather_s": _SECONDS,
        "notes": {"type": "object", "required": ["dtype"], "properties": {
            "dtype": {"const": "float32"},
            "dtypes": {"type": "object", "additionalProperties": {"enum": DTYPES}}}},
        "shapes": {**_SHAPES, "minProperties": 1},
    },
}


@dataclass(frozen=True)
class Slice:
    """A region of a graph tensor, under the name it has in a sub-model."""

    tensor: str
    rows: tuple[int, int]
    channels: tuple[int, int]
    name: str = ""

    @property
    def region(self) -> Region:
        return Region(tuple(self.rows), tuple(self.channels))


@dataclass(frozen=True)
class PartSpec:
    device: str
    range: tuple[int, int] | None
    model: str | None  # file relative to the deployment folder; None when it computes nothing
    inputs: tuple[Slice, ...]
    outputs: tuple[Slice, ...]
    predicted_compute_s: float
    predicted_recv_s: float


@dataclass(frozen=True)
class StageSpec:
    index: int
    first: int
    last: int
    axis: str
    parts: tuple[PartSpec, ...]
    predicted_tau_s: float


@dataclass(frozen=True)
class MessageSpec:
    """One message: ``stage`` is the stage index, or the number of stages for the gather."""

    id: int
    stage: int
    tensor: str
    sender: str  # a device name or "external"
    receiver: str
    rows: tuple[int, int]
    channels: tuple[int, int]
    bytes: int  # as the evaluator counts them (the instance's dtype_bytes)
    payload_bytes: int  # what is really sent (float32)
    time_s: float  # the evaluator's transfer time: bytes / bandwidth + latency

    @property
    def region(self) -> Region:
        return Region(tuple(self.rows), tuple(self.channels))


@dataclass
class Manifest:
    instance: str
    model: str
    devices: list[str]  # every device of the instance
    ranks: dict[str, int]  # device (or "external") -> MPI rank
    source: str  # device name or "external"
    sink: str
    inputs: dict[str, list[int]]  # graph input -> shape
    outputs: dict[str, list[int]]  # graph output -> shape
    reference_model: str
    stages: list[StageSpec]
    messages: list[MessageSpec]
    predicted_latency_s: float
    predicted_gather_s: float
    format: int = FORMAT
    notes: dict = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)  # every tensor of the graph

    @property
    def n_ranks(self) -> int:
        return len(self.ranks)

    def rank_names(self) -> list[str]:
        """Name of each rank, by rank."""
        out = [""] * len(self.ranks)
        for name, r in self.ranks.items():
            out[r] = name
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def load(cls, folder, *, files: bool = True) -> "Manifest":
        """Read and check ``folder/manifest.json`` (see the module docstring); ``files``: check
        the files it names too."""
        from milp_planner.io import loads_strict, read_text_bounded

        folder = Path(folder)
        path = folder / "manifest.json"
        if not folder.is_dir():
            what = "no such folder" if not folder.exists() else "not a directory"
            raise PlannerError(f"{folder}: not a deployment folder ({what}; it holds manifest.json)")
        try:
            text = read_text_bounded(path, "a deployment manifest", MAX_MANIFEST_BYTES)
        except PlannerError as e:
            raise PlannerError(f"{e}; is {folder} a deployment folder?") from None
        try:
            data = loads_strict(text)
        except RecursionError:
            raise PlannerError(f"{path}: nested too deeply, not a deployment manifest") from None
        except ValueError as e:
            raise PlannerError(f"{path}: not valid JSON ({str(e).splitlines()[0][:100]})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlannerError(f"{path}: not a deployment manifest of format {FORMAT}")
        _check_schema(data, str(path))
        stages = [StageSpec(
            s["index"], s["first"], s["last"], s["axis"],
            tuple(PartSpec(p["device"], tuple(p["range"]) if p["range"] else None, p["model"],
                           tuple(Slice(i["tensor"], tuple(i["rows"]), tuple(i["channels"]), i["name"]) for i in p["inputs"]),
                           tuple(Slice(o["tensor"], tuple(o["rows"]), tuple(o["channels"]), o["name"]) for o in p["outputs"]),
                           p["predicted_compute_s"], p["predicted_recv_s"]) for p in s["parts"]),
            s["predicted_tau_s"]) for s in data["stages"]]
        messages = [MessageSpec(**{**m, "rows": tuple(m["rows"]), "channels": tuple(m["channels"])})
                    for m in data["messages"]]
        m = cls(
            data["instance"], data["model"], data["devices"], data["ranks"], data["source"], data["sink"],
            data["inputs"], data["outputs"], data["reference_model"], stages, messages,
            data["predicted_latency_s"], data["predicted_gather_s"], data["format"], data.get("notes", {}),
            data.get("shapes", {}))
        validate_manifest(m, str(path))
        if files:
            m.check_files(folder)
        return m

    def model_files(self) -> list[str]:
        """Every file the manifest names: the sub-models, then the reference model."""
        return [p.model for s in self.stages for p in s.parts if p.model] + [self.reference_model]

    def check_files(self, folder, only=None) -> dict[str, int]:
        """Each named file (or those in ``only``) inside ``folder``, regular, at most 2 GiB;
        their sizes."""
        from milp_planner.io import check_input_file, inside

        sizes = {}
        for rel in self.model_files() if only is None else only:
            path = inside(Path(folder), rel, f"{Path(folder) / 'manifest.json'}: model file")
            sizes[rel] = check_input_file(path, "a sub-model", MAX_SUBMODEL_BYTES)
        return sizes


def _check_schema(data: dict, label: str) -> None:
    import jsonschema

    from milp_planner.io import printable, strict_json_validator

    error = jsonschema.exceptions.best_match(strict_json_validator(MANIFEST_SCHEMA).iter_errors(data))
    if error is None:
        return
    where = ""
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    what = error.message
    if len(what) > 120:
        what = what[:117] + "..."
    raise PlannerError(f"{label}: {printable(where) or 'manifest'}: {printable(what)}")


def _region_of(shape, rows, chans) -> tuple[int, int]:
    """The (H, C) extent of a tensor of ``shape`` (as ``runtime._full_region``)."""
    shape = tuple(shape)
    if len(shape) == 4:
        return shape[2], shape[1]
    return 1, (shape[-1] if shape else 1)


def validate_manifest(m: Manifest, label: str) -> None:
    """``PlannerError`` unless ``m`` agrees with itself (see the module docstring)."""
    from milp_planner.io import printable

    def bad(key: str, why: str) -> PlannerError:
        return PlannerError(f"{label}: {key}: {printable(why)}")

    devices = set(m.devices)
    # "external" names the external source or sink, unless a device has that name (then the
    # network has no external end: deploy refuses the ambiguous case)
    external = EXTERNAL_NAME in (m.source, m.sink) and EXTERNAL_NAME not in devices
    for key in ("source", "sink"):
        name = getattr(m, key)
        if name != EXTERNAL_NAME and name not in devices:
            raise bad(key, f"{name!r} is not a device of the deployment")
    used = {m.source, m.sink}
    for s in m.stages:
        for p in s.parts:
            used.add(p.device)
    for msg in m.messages:
        used.update((msg.sender, msg.receiver))
    for name in used:
        if name != EXTERNAL_NAME and name not in devices:
            raise bad("stages", f"{name!r} is not a device of the deployment")
    if set(m.ranks) != used:
        extra = sorted(set(m.ranks) - used)
        missing = sorted(used - set(m.ranks))
        why = (f"{extra[0]!r} has a rank but takes no part in the deployment" if extra
               else f"{missing[0]!r} takes part but has no rank")
        raise bad("ranks", why + f" (one rank per device that takes part{', plus external' if external else ''})")
    if sorted(m.ranks.values()) != list(range(len(m.ranks))):
        raise bad("ranks", f"must number the {len(m.ranks)} ranks 0 to {len(m.ranks) - 1}, once each")
    if external and m.ranks.get(EXTERNAL_NAME) != len(m.ranks) - 1:
        raise bad("ranks", f"{EXTERNAL_NAME!r} must be the last rank")
    for t, shape in m.shapes.items():
        if prod(shape) > MAX_ELEMENTS:
            raise bad(f"shapes.{t}", f"{prod(shape):,} elements, more than {MAX_ELEMENTS:,}")
    for key, table in (("inputs", m.inputs), ("outputs", m.outputs)):
        for t, shape in table.items():
            if t not in m.shapes:
                raise bad(f"{key}.{t}", "not a tensor of shapes")
            if list(shape) != list(m.shapes[t]):
                raise bad(f"{key}.{t}", f"shape {shape} is not the tensor's {m.shapes[t]}")

    def region(key, t, rows, chans):
        if t not in m.shapes:
            raise bad(key, f"tensor {t!r} is not in shapes")
        h, c = _region_of(m.shapes[t], rows, chans)
        if not (0 <= rows[0] < rows[1] <= h and 0 <= chans[0] < chans[1] <= c):
            raise bad(key, f"region rows {list(rows)} channels {list(chans)} is empty or outside tensor {t!r} "
                           f"(rows [0, {h}), channels [0, {c}))")

    expect = 0
    seen_models: set[str] = set()
    for i, s in enumerate(m.stages):
        key = f"stages[{i}]"
        if s.index != i:
            raise bad(f"{key}.index", f"must be {i}")
        if s.first != expect or s.last < s.first:
            raise bad(key, f"layers {s.first}-{s.last} do not follow the previous stage (first must be {expect})")
        expect = s.last + 1
        names = [p.device for p in s.parts]
        if len(set(names)) != len(names):
            raise bad(f"{key}.parts", "a device holds two parts of one stage")
        for j, p in enumerate(s.parts):
            pk = f"{key}.parts[{j}]"
            if p.model is not None:
                if p.model in seen_models:
                    raise bad(f"{pk}.model", f"{p.model!r} is named by two parts")
                seen_models.add(p.model)
            if p.model is None and (p.inputs or p.outputs):
                raise bad(pk, "has inputs or outputs but no model")
            for kind, slices in (("inputs", p.inputs), ("outputs", p.outputs)):
                for k, sl in enumerate(slices):
                    region(f"{pk}.{kind}[{k}]", sl.tensor, sl.rows, sl.channels)
    for k, msg in enumerate(m.messages):
        key = f"messages[{k}]"
        if msg.id != k:
            raise bad(f"{key}.id", f"must be {k}")
        if msg.stage > len(m.stages):
            raise bad(f"{key}.stage", f"must be at most {len(m.stages)} (the gather)")
        if msg.sender == msg.receiver:
            raise bad(key, "a device sends to itself")
        region(key, msg.tensor, msg.rows, msg.channels)
        cells = (msg.rows[1] - msg.rows[0]) * (msg.channels[1] - msg.channels[0])
        shape = m.shapes[msg.tensor]
        per_cell = prod(shape) // max(1, prod(_region_of(shape, msg.rows, msg.channels)))
        if msg.payload_bytes != cells * per_cell * 4:
            raise bad(f"{key}.payload_bytes", f"{msg.payload_bytes} is not the region's float32 bytes "
                                              f"({cells * per_cell * 4})")

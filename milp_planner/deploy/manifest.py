"""The deployment manifest (``manifest.json``): ranks, sub-models and every message.

Written by ``deploy`` and read by the runtime; a run needs nothing else from the project.
Regions are ``rows`` x ``channels`` half-open ranges of a tensor's (H, C) grid.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from milp_planner.errors import PlannerError
from milp_planner.space.geometry import Region

FORMAT = 1
EXTERNAL_NAME = "external"  # the external source/sink node in the manifest


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
    def load(cls, folder) -> "Manifest":
        path = Path(folder) / "manifest.json"
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise PlannerError(f"{path}: cannot read the manifest ({e.strerror}); is {folder} a deployment folder?") from None
        except json.JSONDecodeError as e:
            raise PlannerError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlannerError(f"{path}: not a deployment manifest of format {FORMAT}")
        try:
            stages = [StageSpec(
                s["index"], s["first"], s["last"], s["axis"],
                tuple(PartSpec(p["device"], tuple(p["range"]) if p["range"] else None, p["model"],
                               tuple(Slice(i["tensor"], tuple(i["rows"]), tuple(i["channels"]), i["name"]) for i in p["inputs"]),
                               tuple(Slice(o["tensor"], tuple(o["rows"]), tuple(o["channels"]), o["name"]) for o in p["outputs"]),
                               p["predicted_compute_s"], p["predicted_recv_s"]) for p in s["parts"]),
                s["predicted_tau_s"]) for s in data["stages"]]
            messages = [MessageSpec(**{**m, "rows": tuple(m["rows"]), "channels": tuple(m["channels"])})
                        for m in data["messages"]]
            return cls(
                data["instance"], data["model"], data["devices"], data["ranks"], data["source"], data["sink"],
                data["inputs"], data["outputs"], data["reference_model"], stages, messages,
                data["predicted_latency_s"], data["predicted_gather_s"], data["format"], data.get("notes", {}),
                data.get("shapes", {}))
        except (KeyError, TypeError) as e:
            raise PlannerError(f"{path}: malformed manifest ({type(e).__name__}: {e})") from None

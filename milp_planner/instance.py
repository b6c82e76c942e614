"""The instance: one model, the devices, the network, the plan space and the objective.

``load_instance(path)`` reads and validates an instance file (MODEL.md section 1); the
loading and validation code lives in ``instance_file.py``, this module holds the type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from .devices import Device
from .graph import LayerGraph
from .network import Network

OBJECTIVES = ("latency", "energy", "period", "memory")
AXES = ("rows", "channels")


@dataclass(frozen=True)
class SearchSpace:
    fusion_limit: int = 1
    max_parts: int = 1
    splits: tuple[str, ...] = ("equal",)  # "equal", "capacity", "grid:G"
    axes: tuple[str, ...] = ("rows",)


@dataclass(frozen=True)
class Constraints:
    memory: bool = True
    latency_s: Fraction | None = None
    energy_j: Fraction | None = None


@dataclass
class Instance:
    name: str
    graph: LayerGraph
    devices: tuple[Device, ...]
    network: Network
    search: SearchSpace = field(default_factory=SearchSpace)
    objective: str = "latency"
    constraints: Constraints = field(default_factory=Constraints)
    dtype_bytes: int = 4
    path: Path | None = None
    model: str = ""  # the model reference as written ("zoo:vgg16" or a file path)

    def device_index(self, name: str) -> int:
        for i, d in enumerate(self.devices):
            if d.name == name:
                return i
        raise KeyError(name)

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]


def load_instance(path, input_shape=None) -> Instance:
    """Read and validate an instance file; raises ``PlannerError`` with a one-line reason.

    ``example:NAME`` names an example shipped inside the package (``milp_planner/examples``).
    """
    from .instance_file import read_instance

    return read_instance(resolve_instance_path(path), input_shape=input_shape)


def resolve_instance_path(path) -> Path:
    """The file behind ``path``; ``example:NAME`` is a packaged example."""
    text = str(path)
    if text.startswith("example:"):
        from .errors import PlannerError

        name = text.split(":", 1)[1]
        examples = Path(__file__).parent / "examples"
        found = examples / f"{name}.yaml"
        if not found.exists():
            known = ", ".join(sorted(p.stem for p in examples.glob("*.yaml")))
            raise PlannerError(f"{text}: no such packaged example (known: {known})")
        return found
    return Path(path)

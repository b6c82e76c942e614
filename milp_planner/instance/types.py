"""The instance: one model, the devices, the network, the plan space and the objective.

This module holds the types; ``reader.py`` reads and validates instance files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from milp_planner.instance.devices import Device
from milp_planner.model.graph import LayerGraph
from milp_planner.instance.network import Network

OBJECTIVES = ("latency", "energy", "period", "memory")
AXES = ("rows", "channels")


@dataclass(frozen=True)
class SearchSpace:
    fusion_limit: int = 1
    max_parts: int = 1
    splits: tuple[str, ...] = ("equal",)  # "equal", "capacity", "grid:G", "any" (every cut)
    axes: tuple[str, ...] = ("rows",)


@dataclass(frozen=True)
class Constraints:
    memory: bool = True
    latency_s: Fraction | None = None
    energy_j: Fraction | None = None
    period_s: Fraction | None = None  # cap on the period (``constraints.period_ms`` / 1000)


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

    @property
    def memory_capped(self) -> bool:
        """Whether memory caps apply: the constraint is on and some device has a capacity."""
        return bool(self.constraints.memory) and any(d.memory_bytes is not None for d in self.devices)

"""Planner registry: ``get_planner(name)``, ``planner_names()``.

A new planner is one module defining a ``Planner`` subclass and one line in ``_MODULES``.
Modules are imported lazily so that optional dependencies (PyTorch) load only when used.
"""

from __future__ import annotations

import importlib

from milp_planner.errors import PlannerError
from milp_planner.planners.base import Planner, PlanResult, SolveContext

# name -> "module:Class"
_MODULES = {
    "milp": "exact:MILPPlanner",
    "cpsat": "exact:CPSATPlanner",
    "dp": "exact:DPPlanner",
    "bruteforce": "exact:BruteForcePlanner",
    "lp-round": "lp_round:LPRoundPlanner",
    "offload": "offload:OffloadPlanner",
    "modnn": "modnn:MoDNNPlanner",
    "coedge": "coedge:CoEdgePlanner",
    "deepthings": "deepthings:DeepThingsPlanner",
    "deeperthings": "deepthings:DeeperThingsPlanner",
    "aofl": "aofl:AOFLPlanner",
    "neurosurgeon": "neurosurgeon:NeurosurgeonPlanner",
    "coopai": "coopai:CoopAIPlanner",
    "hidp": "hidp:HiDPPlanner",
    "distredge-lcpss": "distredge_lcpss:DistrEdgeLCPSSPlanner",
    "autodice": "autodice:AutoDiCEPlanner",
    "pipeedge": "pipeedge:PipeEdgePlanner",
    "hybrid": "hybrid:HybridPlanner",
    "random": "random_search:RandomSearchPlanner",
    "diapason": "diapason:Diapason",
    "distredge": "distredge_ddpg:DistrEdgeDDPG",
}


def planner_names() -> list[str]:
    return list(_MODULES)


def planner_class(name: str) -> type[Planner]:
    if name not in _MODULES:
        raise PlannerError(f"unknown planner {name!r} (known: {', '.join(_MODULES)})")
    module, cls = _MODULES[name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def get_planner(name: str, **options) -> Planner:
    """An instance of the planner registered as ``name``."""
    return planner_class(name)(**options)


__all__ = ["Planner", "PlanResult", "SolveContext", "get_planner", "planner_names", "planner_class"]

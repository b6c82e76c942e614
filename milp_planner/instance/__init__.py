"""The instance layer: devices, network, plan-space settings and objective, read from a file.

``load_instance(path)`` reads and validates an instance file; ``Instance`` is the one instance
type every planner takes.
"""

from milp_planner.instance.reader import (
    instance_from_dict,
    load_graph_or_instance,
    load_instance,
    read_instance,
    resolve_instance_path,
)
from milp_planner.instance.types import AXES, OBJECTIVES, Constraints, Instance, SearchSpace

__all__ = ["AXES", "OBJECTIVES", "Constraints", "Instance", "SearchSpace", "instance_from_dict",
           "load_graph_or_instance", "load_instance", "read_instance", "resolve_instance_path"]

"""milp-planner: certified-optimal partitioning, fusion and allocation of a DNN on edge devices."""

__version__ = "0.1.0"

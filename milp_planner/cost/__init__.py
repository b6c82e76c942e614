"""The cost model: the one evaluator that prices every plan (``evaluate``)."""

from milp_planner.cost.evaluator import Metrics, evaluate

__all__ = ["Metrics", "evaluate"]

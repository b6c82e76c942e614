"""What an exact solve proves: the outcome of one stage graph's solve, of the rounds over the
whole space, and the check that a solver's objective agrees with the evaluator's.

``GraphSolve`` is what one solver proved over one round's stage graph; ``Exploration`` is what
the rounds proved over the whole space. The status and bound a result may claim follow from
them by ``milp_planner.certificate.certify``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from formulations.stagegraph import StageGraph
from milp_planner.deadline import DeadlinePassed

REL_TOL = 1e-6  # relative tolerance of the agreement between a solver and the evaluator


class SearchStopped(Exception):
    """The rounds stopped before any plan; ``lower`` is what was proven (None: nothing)."""

    def __init__(self, message: str, lower: float | None):
        super().__init__(message)
        self.lower = lower


class SpaceTimeout(SearchStopped, DeadlinePassed):
    """The time limit ran out while enumerating the space; ``lower`` is what was proven."""

    def __init__(self, lower: float | None):
        super().__init__("the time limit ran out while enumerating the plan space", lower)


class MemoryStop(SearchStopped):
    """The memory budget (``formulations.budget``) was hit before any plan."""


@dataclass
class GraphSolve:
    """What a solver found in one stage graph."""

    arcs: list[int]  # the best plan found ([] for none)
    value: float | None  # its objective as the solver computes it
    bound: float | None  # proven lower bound over the graph
    optimal: bool  # proven optimal over the graph
    infeasible: bool = False  # proven: no plan of the graph meets the caps (at or below ``cutoff``)
    cutoff: float | None = None  # the solve looked only at plans no worse than this
    stopped: bool = False  # the solver ran out of time
    tol: float = 0.0  # absolute tolerance of the solver's integer scaling
    info: dict = field(default_factory=dict)

    def proven_in_graph(self) -> float | None:
        """The lower bound this solve proves over its graph: the cutoff when it proved there is
        no plan up to it, else the solver's bound, never above the cutoff (plans above it were
        not looked at). None: nothing proven."""
        if self.infeasible:
            proven = self.cutoff if self.cutoff is not None else math.inf
        else:
            proven = self.bound
        if self.cutoff is not None and proven is not None:
            proven = min(proven, self.cutoff)
        return proven


@dataclass
class Exploration:
    """The outcome of the rounds of ``milp_planner.engine.rounds.explore``."""

    graph: StageGraph | None  # the graph of the best plan (or the last graph)
    found: GraphSolve | None  # the best plan over all rounds
    lower: float | None  # proven lower bound over the whole space
    certified: bool
    rounds: int
    build_s: float
    timed_out: bool = False
    infeasible: bool = False
    memory_out: str = ""  # the memory budget stopped the rounds (the message says how far)
    refused: str = ""  # the space could not be enumerated further (the error), an incumbent being known
    lower_source: str = ""  # "coarse": ``lower`` is the coarse relaxation's (formulations.coarse)
    threshold: dict | None = None  # period: the threshold probes (formulations.threshold), for ``info``
    coarse: dict | None = None  # the coarse relaxation's passes (formulations.coarse), for ``info``


def disagreement(solver_value: float | None, evaluator_value: float | None, tol_abs: float = 0.0) -> bool:
    """True when a solver's objective differs from the evaluator's beyond ``REL_TOL`` relative
    plus ``tol_abs`` (a formulation bug, never a result)."""
    if solver_value is None or evaluator_value is None:
        return False
    return abs(evaluator_value - solver_value) > REL_TOL * max(abs(evaluator_value), 1e-12) + tol_abs


def finite(v, scale: float = 1.0) -> float | None:
    """``v * scale`` as a float, or None when ``v`` is missing, not a number or not finite."""
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v * scale if math.isfinite(v) else None



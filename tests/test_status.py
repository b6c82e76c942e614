"""The status rule: a proven relative gap of at most 1e-6 is ``optimal``, whatever stopped the run."""

from __future__ import annotations

import pytest

from milp_planner.instance import load_instance
from milp_planner.planners import get_planner
from milp_planner.certificate import OPTIMAL_GAP
from milp_planner.planners.base import Planner, PlanResult


class _Stopped(Planner):
    """Returns the dp optimum with a bound just below it and the status a time-out would give."""

    name = "stopped"
    exact = True
    gap = 0.0
    status = "timeout"

    def search(self, instance, ctx):
        best = get_planner("dp").solve(instance, objective=ctx.objective)
        bound = best.value * (1 - self.gap)
        return PlanResult(self.name, self.status, ctx.objective, plan=best.plan, bound=bound)


@pytest.mark.parametrize("status", ["timeout", "feasible"])
@pytest.mark.parametrize("gap, expected", [(0.0, "optimal"), (3e-16, "optimal"), (OPTIMAL_GAP / 2, "optimal"),
                                           (1e-4, None)])
def test_a_tiny_proven_gap_is_optimal(status, gap, expected):
    inst = load_instance("example:tiny-2dev")
    planner = _Stopped()
    planner.gap, planner.status = gap, status
    res = planner.solve(inst)
    assert res.status == (expected or status)


def test_no_bound_keeps_the_status():
    inst = load_instance("example:tiny-2dev")
    res = get_planner("neurosurgeon").solve(inst)
    assert res.bound is None and res.status == "feasible"

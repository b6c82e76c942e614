"""An ε-step's rounds start at the bound a step under looser caps proved
(``milp_planner.pareto._Run.known_lower`` and the exact planners' ``known_lower`` option):
which steps count (a wrong choice is what could break a front: the test lists them), the fronts
still equal brute force, the bound is used, and each step's bound is below the brute-force
optimum under its caps. (A step that finishes finds its optimum whatever bound it starts from:
its first round holds every plan up to above that bound; a bound not proven would only show in
a step stopped early, which these tiny instances do not have.)"""

import math

import pytest
from test_pareto import CASES, all_metrics, brute_front, check_points, same_vectors

import milp_planner.pareto as pareto
from formulations.pareto import BoundStep
from milp_planner.pareto import _Run, pareto_front


def _run_with(steps):
    run = _Run(CASES["fc"](), lambda *a: None, None, None)
    run.steps = steps
    return run


def test_known_lower_takes_only_steps_under_looser_caps():
    run = _run_with([
        BoundStep({}, "energy", 1.0, "optimal"),
        BoundStep({"period": 0.5}, "energy", 2.0, "optimal"),
        BoundStep({"period": 0.3}, "energy", 3.0, "optimal"),  # tighter than 0.4: not a bound there
        BoundStep({"period": 0.5, "memory": 10}, "energy", 4.0, "optimal"),  # a cap 0.4 lacks
        BoundStep({"period": 0.6}, "period", 9.0, "feasible"),  # another objective
        BoundStep({"period": 0.9}, "energy", math.inf, "infeasible"),
        BoundStep({"period": 0.9}, "energy", None, "error"),
    ])
    assert run.known_lower({"period": 0.4}, "energy") == pytest.approx(2.0)
    assert run.known_lower({"period": 0.4, "memory": 10}, "energy") == pytest.approx(4.0)
    assert run.known_lower({"period": 0.5}, "energy") == pytest.approx(2.0)
    assert run.known_lower({}, "energy") == pytest.approx(1.0)
    assert run.known_lower({"period": 0.4}, "latency") == 0.0


def _optimum(case, objective, caps):
    """The least ``objective`` of the plans within ``caps`` (brute force), inf when none."""
    vals = [m.value(objective) for m in all_metrics(case)
            if all(m.value(k) <= c * (1 + 1e-9) for k, c in caps.items())]
    return min(vals, default=math.inf)


@pytest.mark.parametrize("case,objs", [("fc", ["energy", "period"]), ("residual-shared", ["latency", "memory"]),
                                       ("fc", ["latency", "energy"])])
def test_fronts_with_known_lower_equal_brute_force(case, objs, monkeypatch):
    used = []
    real = _Run.known_lower

    def spy(self, caps, objective):
        k = real(self, caps, objective)
        used.append(k)
        return k

    monkeypatch.setattr(_Run, "known_lower", spy)
    # f2's floor may prove the last step infeasible without a solve (the flow MIP does on "fc"),
    # which would leave no capped step to start from a known bound
    monkeypatch.setattr(_Run, "least", lambda self, objective, caps: 0.0)
    front = pareto_front(CASES[case](), objs)
    assert front.certified, front.message
    same_vectors(front.vectors(), brute_front(case, objs))
    check_points(front, case)
    assert any(k > 0 for k in used)  # the steps did start from a looser step's bound
    for s in front.steps:  # every bound is a bound: at most the optimum under its caps
        if s.bound is not None and s.status != "infeasible":
            assert s.bound <= _optimum(case, s.minimised, s.caps) * (1 + 1e-9)


def test_a_step_that_fails_keeps_the_known_bound():
    """A step whose planner refuses (here: always) records the bound its looser caps' step proved."""
    from milp_planner.errors import PlannerError

    real = pareto.planner_solve("milp")
    calls = []

    def solve(inst, objective, time_limit, known_lower=0.0):
        calls.append(known_lower)
        if known_lower > 0:
            raise PlannerError("refused")
        return real(inst, objective, time_limit)

    solve.takes_known_lower = True
    run = _Run(CASES["fc"](), solve, None, None)
    res, _, ok = run.solve({}, "energy")
    assert ok
    run.record({}, "energy", res.bound, res.status)
    caps = {"period": res.metrics.period_s * 0.999}
    res2, infeasible, ok2 = run.solve(caps, "energy")
    assert not ok2 and not infeasible and res2.status == "error"
    assert calls[-1] > 0 and res2.bound == pytest.approx(res.bound, rel=1e-8)

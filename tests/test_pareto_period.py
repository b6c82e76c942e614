"""The period cap (``constraints.period_ms``): reader, evaluator, every exact planner against
brute force with a binding cap, and Pareto fronts with period as an objective."""

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from test_pareto import CASES, all_metrics, brute_front, check_points, same_vectors

from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance import load_instance
from milp_planner.pareto import pareto_front
from milp_planner.planners import get_planner

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "instances/examples/tiny-fc-2dev.yaml"


def binding_cap(case, objective):
    """A period cap that the unconstrained optimum of ``objective`` breaks, halfway between two
    consecutive periods of the space (so no plan lies near it), or None when none binds."""
    periods = sorted({m.period_s for m in all_metrics(case)})
    free = get_planner("bruteforce").solve(CASES[case](), objective=objective)
    below = [p for p in periods if p < free.metrics.period_s * (1 - 1e-6)]
    if not below:
        return None
    i = periods.index(below[-1])
    return (periods[i] + periods[i + 1]) / 2


BINDING = [("chain", "memory"), ("residual-shared", "memory"), ("residual-external", "latency"),
           ("residual-external", "energy"), ("residual-external", "memory"), ("fc", "latency"), ("fc", "memory")]


@pytest.mark.parametrize("case,objective", BINDING)
def test_period_cap_every_exact_planner_agrees_with_brute_force(case, objective):
    cap = binding_cap(case, objective)
    assert cap is not None
    inst = CASES[case]()
    inst.constraints = replace(inst.constraints, period_s=Fraction(cap))
    ref = get_planner("bruteforce").solve(inst, objective=objective)
    free = get_planner("bruteforce").solve(CASES[case](), objective=objective)
    assert ref.status == "optimal" and ref.metrics.period_s <= cap
    assert ref.value > free.value  # the cap binds
    for planner in ("milp", "cpsat"):
        res = get_planner(planner).solve(inst, objective=objective)
        assert res.status == "optimal", (planner, res.message)
        assert res.value == pytest.approx(ref.value, abs=1e-6 * ref.value + res.info.get("tolerance", 0.0)), planner
        again = evaluate(res.plan, inst)
        assert again.feasible and again.period_s <= cap
    # dp honours the cap as it does latency/energy caps: a plan that meets it, or no plan
    res = get_planner("dp").solve(inst, objective=objective)
    if res.plan is not None:
        assert evaluate(res.plan, inst).feasible
        if res.status == "optimal":
            assert res.value == pytest.approx(ref.value, rel=1e-6)
    else:
        assert res.status in ("error", "infeasible") and res.message


@pytest.mark.parametrize("planner", ["milp", "cpsat", "bruteforce"])
def test_period_objective_under_its_own_cap_and_infeasible_cap(planner):
    inst = CASES["residual-shared"]()
    best = get_planner("bruteforce").solve(inst, objective="period").value
    inst.constraints = replace(inst.constraints, period_s=Fraction(best * 1.01))
    res = get_planner(planner).solve(inst, objective="period")
    assert res.status == "optimal" and res.value == pytest.approx(best, rel=1e-6)
    inst.constraints = replace(inst.constraints, period_s=Fraction(best * 0.99))
    res = get_planner(planner).solve(inst, objective="latency")
    assert res.status == "infeasible" and res.plan is None


def test_reader_and_evaluator(tmp_path):
    text = open(TINY).read()
    old = "constraints: {memory: true, latency_ms: 1000, energy_j: null}"
    assert old in text
    f = tmp_path / "i.yaml"
    f.write_text(text.replace(old, "constraints: {period_ms: 0.5}"))
    inst = load_instance(f)
    assert inst.constraints.period_s == Fraction(1, 2000)
    plan = get_planner("offload").solve(load_instance(TINY), objective="latency").plan
    m = evaluate(plan, inst)
    assert not m.feasible and any("period" in v and "cap 0.5 ms" in v for v in m.violations)
    f.write_text(text.replace(old, "constraints: {period_ms: -1}"))
    with pytest.raises(PlannerError, match="constraints.period_ms"):
        load_instance(f)


@pytest.mark.parametrize("case", ["fc", "residual-shared", pytest.param("residual-external", marks=pytest.mark.slow)])
def test_period_fronts_equal_brute_force(case):
    for objs in (["period", "energy"], ["latency", "period"]):
        front = pareto_front(CASES[case](), objs)
        assert front.certified, front.message
        same_vectors(front.vectors(), brute_front(case, objs))
        check_points(front, case)


@pytest.mark.parametrize("case", ["fc", pytest.param("chain", marks=pytest.mark.slow)])
def test_period_memory_energy_front_equals_brute_force(case):
    """AutoDiCE's three objectives."""
    objs = ["period", "memory", "energy"]
    front = pareto_front(CASES[case](), objs)
    assert front.certified, front.message
    same_vectors(front.vectors(), brute_front(case, objs))
    check_points(front, case)


@pytest.mark.parametrize("case", ["fc", "residual-shared"])
def test_latency_and_energy_caps_with_arc_removal_agree_with_brute_force(case):
    """MILP and CP-SAT leave out arcs on no path within the latency/energy caps
    (formulations.additive_caps): with both caps between two plan values, every objective still
    agrees with brute force (optimal or infeasible alike)."""
    import random

    rng = random.Random(7)
    ms = all_metrics(case)
    lats, ens = sorted({m.latency_s for m in ms}), sorted({m.energy_j for m in ms})
    statuses = []
    for objective in ("latency", "energy", "period", "memory"):
        i, j = rng.randrange(len(lats) - 1), rng.randrange(len(ens) - 1)
        inst = CASES[case]()
        inst.constraints = replace(inst.constraints, latency_s=Fraction((lats[i] + lats[i + 1]) / 2),
                                   energy_j=Fraction((ens[j] + ens[j + 1]) / 2))
        ref = get_planner("bruteforce").solve(inst, objective=objective)
        statuses.append(ref.status)
        for planner in ("milp", "cpsat"):
            res = get_planner(planner).solve(inst, objective=objective)
            assert res.status == ref.status, (objective, planner, res.message)
            if ref.value is not None:
                assert res.value == pytest.approx(ref.value, abs=1e-6 * ref.value + res.info.get("tolerance", 0.0))
    assert "optimal" in statuses, statuses


def test_arcs_over_caps_leaves_a_model_that_proves_infeasibility():
    from formulations.additive_caps import arcs_over_caps
    from formulations.stagegraph import build_stage_graph

    inst = CASES["fc"]()
    inst.constraints = replace(inst.constraints, latency_s=Fraction(1, 10**9))
    sg = build_stage_graph(inst)
    assert arcs_over_caps(sg, list(range(len(sg.arcs)))) == set()
    best = min(m.latency_s for m in all_metrics("fc"))
    inst.constraints = replace(inst.constraints, latency_s=Fraction(best))
    sg = build_stage_graph(inst)
    over = arcs_over_caps(sg, list(range(len(sg.arcs))))
    assert 0 < len(over) < len(sg.arcs)

"""Exact planners agree with each other and with brute-force enumeration on tiny instances."""

from dataclasses import replace

import pytest
from builders import chain_graph, device, fc_graph, make_instance, residual_graph

from milp_planner.cost.evaluator import evaluate
from milp_planner.instance import Constraints, SearchSpace
from milp_planner.instance.network import Endpoint
from milp_planner.space.plan import Plan
from milp_planner.planners import get_planner

OBJECTIVES = ["latency", "energy", "period", "memory"]


def tiny(graph, medium="switched", memory=(None, None), external=False, splits=("equal",)):
    devs = [device("a", 1000, "0.01", memory=memory[0], power=(2, 1, 1)),
            device("b", 2500, "0.02", memory=memory[1], power=(4, 1, 2))]
    src = Endpoint(None, (150.0, 90.0), (0.02, 0.03)) if external else 0
    snk = Endpoint(None, (120.0, 60.0), (0.01, 0.01)) if external else 1
    return make_instance(graph, devs, bw=[[0, 100.0], [250.0, 0]], lat=0.05, medium=medium, source=src,
                         sink=snk, search=SearchSpace(2, 2, splits, ("rows", "channels")))


CASES = {
    "chain": lambda: tiny(chain_graph(3)),
    "residual-shared": lambda: tiny(residual_graph(), medium="shared"),
    "residual-external": lambda: tiny(residual_graph(), external=True, splits=("equal", "capacity")),
    "fc": lambda: tiny(fc_graph()),
}

_brute_cache = {}


def brute(case, objective):
    key = (case, objective)
    if key not in _brute_cache:
        _brute_cache[key] = get_planner("bruteforce").solve(CASES[case](), objective=objective)
    return _brute_cache[key]


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("planner", ["milp", "cpsat", "dp"])
def test_exact_planners_agree_with_brute_force(case, objective, planner):
    ref = brute(case, objective)
    assert ref.status == "optimal"
    res = get_planner(planner).solve(CASES[case](), objective=objective)
    assert res.status == "optimal", res.message
    tol = 1e-6 * ref.value + (res.info.get("tolerance", 0.0))
    assert res.value == pytest.approx(ref.value, abs=tol)
    assert res.bound <= res.value + 1e-12
    assert res.gap <= 1e-4


@pytest.mark.parametrize("planner", ["milp", "cpsat", "dp", "bruteforce"])
def test_memory_caps_respected(planner):
    free = get_planner("bruteforce").solve(tiny(chain_graph(3)), objective="latency")
    need_a = free.metrics.memory_bytes["a"]
    need_b = free.metrics.memory_bytes["b"]
    # cap the busier device just below what the unconstrained optimum uses there
    caps = (need_a - 1, None) if need_a >= need_b else (None, need_b - 1)
    inst = tiny(chain_graph(3), memory=caps)
    res = get_planner(planner).solve(inst, objective="latency")
    assert res.status == "optimal"
    assert res.metrics.feasible
    assert res.value >= free.value - 1e-12
    assert res.value == pytest.approx(get_planner("bruteforce").solve(inst, objective="latency").value, rel=1e-6)


@pytest.mark.parametrize("planner", ["milp", "cpsat", "dp", "bruteforce"])
def test_infeasible_memory_is_reported_with_a_reason(planner):
    inst = tiny(chain_graph(3), memory=(50, 50))
    res = get_planner(planner).solve(inst, objective="latency")
    assert res.status == "infeasible"
    assert res.plan is None
    if planner != "bruteforce":
        assert "MB" in res.message and ("fits on no device" in res.message or "memory is too small" in res.message)


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_binding_memory_caps_every_exact_planner_agrees_with_brute_force(case, objective):
    """Every device capped at 90 % of the largest memory of the uncapped optimum (as in the
    exact benchmark): the DP's constrained search, the MILP and CP-SAT all find the capped
    optimum brute force finds."""
    free = brute(case, objective)
    inst = CASES[case]()
    cap = int(0.9 * max(free.metrics.memory_bytes.values()))
    inst.devices = [replace(d, memory_bytes=cap) for d in inst.devices]
    ref = get_planner("bruteforce").solve(inst, objective=objective)
    for planner in ("dp", "milp", "cpsat"):
        res = get_planner(planner).solve(inst, objective=objective)
        assert res.status == ref.status, (planner, res.message)
        if ref.status == "optimal":
            tol = 1e-6 * ref.value + res.info.get("tolerance", 0.0)
            assert res.value == pytest.approx(ref.value, abs=tol), planner
            assert res.metrics.feasible


def test_latency_cap_infeasible_explained():
    inst = tiny(chain_graph(3))
    inst.constraints = Constraints(memory=True, latency_s=0.001)
    res = get_planner("milp").solve(inst, objective="energy")
    assert res.status == "infeasible"
    assert "latency cap" in res.message


@pytest.mark.parametrize("planner", ["milp", "cpsat", "dp", "bruteforce"])
def test_plan_round_trips_and_evaluator_reproduces_objective(planner, tmp_path):
    inst = CASES["residual-shared"]()
    res = get_planner(planner).solve(inst, objective="latency")
    res.plan.save(tmp_path / "p.json")
    again = evaluate(Plan.load(tmp_path / "p.json"), inst)
    assert again.latency_s == pytest.approx(res.value, rel=1e-12)
    assert again.in_space


def test_time_limit_returns_a_plan_not_a_crash():
    inst = replace(tiny(chain_graph(3)), objective="period")
    res = get_planner("milp").solve(inst, time_limit=1.0)
    assert res.plan is not None and res.status in ("optimal", "timeout")


@pytest.mark.parametrize("planner", ["milp", "cpsat", "dp"])
def test_time_limit_before_any_plan_returns_a_single_device_plan_and_the_bound(planner):
    inst = tiny(chain_graph(3))
    res = get_planner(planner).solve(inst, objective="latency", time_limit=1e-9)
    assert res.status == "timeout"
    assert res.plan is not None and len({p.device for s in res.plan.stages for p in s.parts}) == 1
    assert res.value == pytest.approx(evaluate(res.plan, inst).latency_s)
    exact = get_planner("bruteforce").solve(inst, objective="latency").value
    assert res.bound is None or res.bound <= exact * (1 + 1e-9)


# -- bruteforce's own bookkeeping (it is the reference every exact planner is checked against) ----


def test_bruteforce_counts_the_plans_it_scores(monkeypatch):
    """``plans`` is what decides whether bruteforce saw the whole space (its certificate), so it
    must count exactly the plans it scored."""
    import milp_planner.planners.exact as exact_module

    calls = []
    real = exact_module.evaluate_stages

    def counting(stages, instance):
        calls.append(1)
        return real(stages, instance)

    monkeypatch.setattr(exact_module, "evaluate_stages", counting)
    res = get_planner("bruteforce").solve(CASES["chain"](), objective="latency")
    assert res.status == "optimal"
    assert res.info["plans"] == res.info["plans_total"] == len(calls)


def test_bruteforce_keeps_to_the_fusion_limit():
    """Fusion limit 1: every stage one layer, and the optimum the DP's over the same space."""
    inst = CASES["chain"]()
    inst = replace(inst, search=replace(inst.search, fusion_limit=1))
    res = get_planner("bruteforce").solve(inst, objective="latency")
    assert res.status == "optimal" and all(s.first == s.last for s in res.plan.stages)
    from math import prod

    from formulations.options import stage_options

    n = len(inst.graph.layers)  # one stage per layer: the plans are the product of their options
    assert res.info["plans_total"] == prod(len(stage_options(inst, b, b)) for b in range(n))
    assert res.value == pytest.approx(get_planner("dp").solve(inst, objective="latency").value, rel=1e-9)


def test_bruteforce_max_plans_is_inclusive():
    inst = CASES["chain"]()
    total = get_planner("bruteforce").solve(inst, objective="latency").info["plans_total"]
    assert get_planner("bruteforce", max_plans=total).solve(inst, objective="latency").status == "optimal"
    from milp_planner.planners.base import PlannerError

    with pytest.raises(PlannerError, match=f"{total} plans, more than max_plans {total - 1}"):
        get_planner("bruteforce", max_plans=total - 1).solve(inst, objective="latency")

"""``lp-round``: LP relaxation of the MILP plus greedy rounding (GitHub issue #6).

On the tiny hand-built instances of ``test_exact.py``: the LP bound never exceeds the
certified optimum of ``milp``, the rounded plan never beats it, the plan is valid, in the
space, reproduced by the evaluator after a JSON round trip, and the same on every run.
"""

from __future__ import annotations

import json

import pytest
from builders import chain_graph
from test_exact import CASES, tiny

from milp_planner.cli import main
from milp_planner.cost.evaluator import evaluate
from milp_planner.space.plan import Plan, check_plan
from milp_planner.planners import get_planner, planner_class, planner_names

OBJECTIVES = ["latency", "energy", "period", "memory"]
REL = 1e-9



_milp_cache: dict = {}


def optimum(case, objective):
    key = (case, objective)
    if key not in _milp_cache:
        _milp_cache[key] = get_planner("milp").solve(CASES[case](), objective=objective)
    return _milp_cache[key]


def assert_sandwich(res, ref):
    """LP bound <= certified optimum <= value of the rounded plan."""
    assert ref.status == "optimal", ref.message
    assert res.bound is not None and res.value is not None
    assert res.bound <= ref.value * (1 + REL) + 1e-15
    assert res.value >= ref.value * (1 - REL) - 1e-15
    assert res.bound <= res.value


def test_registered_and_not_exact():
    assert "lp-round" in planner_names()
    cls = planner_class("lp-round")
    assert cls.exact is False and cls.seeded is False


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("case", list(CASES))
def test_bound_below_optimum_and_plan_above(case, objective, tmp_path):
    inst = CASES[case]()
    res = get_planner("lp-round").solve(inst, objective=objective)
    ref = optimum(case, objective)
    assert res.status in ("feasible", "optimal"), res.message  # optimal when the LP bound meets it
    assert (res.status == "optimal") == (res.gap <= 1e-6)
    assert_sandwich(res, ref)
    for key in ("lp_value", "lp_time_s", "fractional_arcs", "stage_arcs"):
        assert key in res.info
    assert res.bound == pytest.approx(res.info["lp_value"], rel=1e-9)
    # a valid plan of the space, reproduced by the evaluator after a JSON round trip
    check_plan(res.plan, inst)
    assert res.metrics.in_space and res.metrics.feasible
    res.plan.save(tmp_path / "p.json")
    again = evaluate(Plan.load(tmp_path / "p.json"), inst)
    assert again.value(objective) == pytest.approx(res.value, rel=1e-12)
    json.dumps(res.to_dict())


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_additive_objectives_without_caps_are_integral(case, objective):
    # the LP of a shortest path is integral: rounding keeps the LP's path, which is optimal
    res = get_planner("lp-round", fix_arcs=False).solve(CASES[case](), objective=objective)
    ref = optimum(case, objective)
    assert res.info["fractional_arcs"] == 0
    assert res.info["rounding"] == "greedy"
    assert res.value == pytest.approx(ref.value, rel=1e-9)
    assert res.bound == pytest.approx(ref.value, rel=1e-9)


def test_period_lp_is_fractional_and_bound_is_strict():
    res = get_planner("lp-round").solve(CASES["chain"](), objective="period")
    ref = optimum("chain", "period")
    assert res.info["fractional_arcs"] > 0
    assert res.bound < ref.value * (1 - 1e-3)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("n_layers", [3, 4])
def test_memory_cap_binding(n_layers, objective):
    # cap the busier device just below what the uncapped optimum needs there (as test_exact)
    free = get_planner("milp").solve(tiny(chain_graph(n_layers)), objective=objective)
    need = free.metrics.memory_bytes
    caps = (need["a"] - 1, None) if need["a"] >= need["b"] else (None, need["b"] - 1)
    inst = tiny(chain_graph(n_layers), memory=caps)
    ref = get_planner("milp").solve(inst, objective=objective)
    res = get_planner("lp-round").solve(inst, objective=objective)
    assert ref.status == "optimal", ref.message
    assert res.status in ("feasible", "optimal"), res.message  # optimal when the LP bound meets it
    assert (res.status == "optimal") == (res.gap <= 1e-6)
    assert res.metrics.feasible and res.metrics.in_space
    assert_sandwich(res, ref)
    check_plan(res.plan, inst)
    repaired = res.info["rounding"].startswith("repaired")
    assert repaired == ("repaired with" in res.message)


def test_rounded_plan_breaking_a_cap_is_repaired(monkeypatch):
    # whatever the LP, force the rounding onto "every layer alone on b", which breaks b's cap:
    # the repair must give a feasible plan of the space and the message must say what happened
    from milp_planner.planners import lp_round

    inst = tiny(chain_graph(4), memory=(None, 282))
    alone_on_b = evaluate(Plan.from_dict({"instance": "chain", "stages": [
        {"first": i, "last": i, "axis": "none", "parts": [{"device": "b"}]} for i in range(4)]}), inst)
    assert not alone_on_b.feasible  # b's cap is broken by that plan

    def on_b(sg, x, cost):
        node, path = sg.source, []
        while node not in sg.terminals:
            a = next(a for a in sg.out_arcs[node] if sg.arcs[a].option.first == sg.arcs[a].option.last
                     and sg.arcs[a].option.axis == "none" and sg.arcs[a].option.devices == (1,))
            path.append(a)
            node = sg.arcs[a].head
        return path

    monkeypatch.setattr(lp_round, "_greedy", on_b)
    res = get_planner("lp-round").solve(inst, objective="period")
    ref = get_planner("milp").solve(inst, objective="period")
    # optimal when the LP's bound meets the repaired plan (the first stage's reads from the
    # source make the layout relaxation tight enough here)
    assert res.status in ("feasible", "optimal") and res.metrics.feasible, res.message
    assert_sandwich(res, ref)
    assert res.info["rounding"].startswith("repaired: ")
    assert res.message.startswith("rounded plan breaks memory of b")
    assert "repaired with the" in res.message


def test_infeasible_lp_is_reported():
    # every stage fits alone, but no plan fits both caps: the LP relaxation is infeasible too
    inst = tiny(chain_graph(4), memory=(165, 242))
    res = get_planner("lp-round").solve(inst, objective="period")
    assert get_planner("milp").solve(inst, objective="period").status == "infeasible"
    assert res.status == "infeasible" and res.plan is None
    # the period's warm start (the exact min-max search) may prove it before the LP runs
    assert "LP relaxation is infeasible" in res.message or "memory is too small" in res.message


def test_memory_too_small_for_any_stage_is_infeasible():
    res = get_planner("lp-round").solve(tiny(chain_graph(3), memory=(50, 50)), objective="latency")
    assert res.status == "infeasible" and res.plan is None
    assert "MB" in res.message


@pytest.mark.parametrize("objective", ["period", "memory"])
def test_same_plan_twice(objective):
    a = get_planner("lp-round").solve(CASES["residual-shared"](), objective=objective)
    b = get_planner("lp-round").solve(CASES["residual-shared"](), objective=objective)
    assert a.plan.to_dict() == b.plan.to_dict()
    assert a.bound == b.bound and a.value == b.value


def test_cli_json(capsys):
    assert main(["solve", "example:tiny-2dev", "--planner", "lp-round", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["planner"] == "lp-round" and out["status"] in ("feasible", "optimal")
    assert out["bound"] <= out["objective"] * (1 + REL)
    assert out["info"]["fractional_arcs"] == 0

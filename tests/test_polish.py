"""The combination of the plans' stage layouts (milp_planner/engine/polish.py) and the beam search of
restricted graphs for every objective (milp_planner/engine/restricted.py), checked against the
evaluator and against every path of small restricted graphs."""

import math
from dataclasses import replace
from pathlib import Path

import pytest
from builders import chain_graph, device, make_instance, residual_graph

from milp_planner.engine.polish import layout_options, plan_layouts, polish
from milp_planner.engine.restricted import beam_search, restricted_graph
from milp_planner.cost.evaluator import evaluate
from milp_planner.instance import SearchSpace, load_instance
from milp_planner.planners import get_planner
from milp_planner.planners.anytime_start import project

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "instances" / "examples"
OBJECTIVES = ("latency", "energy", "period", "memory")
BASELINES = ("offload", "modnn", "coedge", "coopai", "aofl", "neurosurgeon", "pipeedge")
DEVS = [device(n, m, "0.01") for n, m in [("a", 1000), ("b", 2500), ("c", 1800)]]


def _chain():
    return make_instance(chain_graph(4), DEVS, sink=2, search=SearchSpace(2, 3, ("equal", "capacity"),
                                                                          ("rows", "channels")))


def _residual():
    return make_instance(residual_graph(), DEVS, search=SearchSpace(2, 2, ("equal",), ("rows", "channels")))


def _capped():
    """Every device capped below the whole model's memory: the plans must share it."""
    inst = _chain()
    whole = evaluate(get_planner("offload").solve(inst).plan, inst).max_memory_bytes
    return replace(inst, devices=tuple(replace(d, memory_bytes=int(whole * 0.7)) for d in inst.devices))


CASES = {"chain": _chain, "residual": _residual, "capped": _capped,
         "tiny-residual-3dev": lambda: load_instance(EXAMPLES / "tiny-residual-3dev.yaml"),
         "tiny-2dev": lambda: load_instance(EXAMPLES / "tiny-2dev.yaml")}


def _plans(inst, objective):
    """The baselines' plans in the space (projected where needed), best first."""
    out = []
    for name in BASELINES:
        try:
            plan = get_planner(name).solve(inst, objective=objective, time_limit=5).plan
            plan = plan if evaluate(plan, inst).in_space else project(plan, inst)
        except Exception:  # noqa: BLE001 - a baseline without a plan here
            continue
        m = evaluate(plan, inst)
        if m.in_space:
            out.append((m.value(objective), plan))
    out.sort(key=lambda x: x[0])
    return [p for _, p in out]


def _all_paths(sg):
    def rec(v):
        if v in sg.terminals:
            yield []
        for a in sg.out_arcs[v]:
            for rest in rec(sg.arcs[a].head):
                yield [a] + rest
    return list(rec(sg.source))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_restricted_space_holds_every_source_plan(case):
    """Each stage of each source plan is an option of the restricted space at its layer, so the
    polished plan can only be as good as the best source or better (for additive objectives)."""
    inst = CASES[case]()
    plans = _plans(inst, "latency")
    devices, layouts = plan_layouts(inst, plans)
    options = layout_options(inst, devices, layouts)
    names = inst.device_names
    for plan in plans:
        for s in plan.stages:
            stages = [o.to_stage(names) for o in options(s.first)]
            norm = [(x.first, x.last, x.axis if len(x.parts) > 1 else "none",
                     sorted((p.range or (0, 0), p.device) for p in x.parts)) for x in stages]
            mine = (s.first, s.last, s.axis if len(s.parts) > 1 else "none",
                    sorted((p.range or (0, 0), p.device) for p in s.parts) if len(s.parts) > 1
                    else [((0, 0), s.parts[0].device)])
            assert mine in norm, (plan, s)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_polished_plans_are_the_evaluators_and_no_worse_than_their_feasible_sources(case, objective):
    inst = CASES[case]()
    plans = _plans(inst, objective)
    assert plans
    feasible = [m.value(objective) for m in (evaluate(p, inst) for p in plans) if m.feasible]
    found = polish(inst, objective, plans)
    if found.plan is None:  # every plan of the restricted space breaks a cap
        assert inst.memory_capped and not feasible
        return
    m = evaluate(found.plan, inst)
    assert m.in_space and m.feasible
    assert m.value(objective) == found.value
    # exact over the restricted space without a deadline (a width of 1, or the label search),
    # which holds every source plan
    if feasible:
        assert found.value <= min(feasible) * (1 + 1e-12)
    # with the best value as the bar, nothing better is found twice
    again = polish(inst, objective, plans, upper=found.value)
    assert again.plan is None


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("case", ["chain", "residual", "capped"])
def test_beam_search_is_exact_with_room_and_width_one_for_additive_objectives(case, objective):
    """Against every path of the restricted graph: an unbounded beam finds the least value of any
    path within the caps; for latency and energy without caps so does a width of 1; no width
    returns a path over a cap or a value other than the path's."""
    inst = CASES[case]()
    plans = _plans(inst, "latency")
    devices, layouts = plan_layouts(inst, plans)
    sg = restricted_graph(inst, layout_options(inst, devices, layouts))
    paths = _all_paths(sg)
    assert 0 < len(paths) < 200_000
    caps = [d.memory_bytes if inst.constraints.memory and d.memory_bytes is not None else math.inf
            for d in inst.devices]

    def fits(path):
        m = evaluate(sg.plan_from_arcs(path), inst)
        return all(m.memory_bytes[d.name] <= c for d, c in zip(inst.devices, caps))

    values = [sg.path_value(p, objective) for p in paths if fits(p)]
    exact = min(values) if values else None
    widths = (10**9, 1) if objective in ("latency", "energy") and not inst.memory_capped else (10**9,)
    for width in widths:
        got = beam_search(sg, width, objective=objective)
        if exact is None:
            assert got is None
            continue
        arcs, value = got
        assert value == pytest.approx(exact, rel=1e-12)
        assert sg.path_value(arcs, objective) == pytest.approx(value, rel=1e-12)
        assert fits(arcs)
    for width in (1, 4):
        got = beam_search(sg, width, objective=objective)
        if got is not None:
            assert fits(got[0]) and got[1] >= exact * (1 - 1e-12)


def test_the_exact_planners_record_polish_and_start_from_its_plan_on_small_spaces(monkeypatch):
    """On a small space (period) polish runs the beam only and its plan, when better, is the
    rounds' incumbent; ``info["anytime"]["polish"]`` says so; with option polish off it is
    absent; with option polish_aside it is kept aside (the rounds start from the baselines'
    best); the certificate is the same every way. (Tiny spaces skip polish: the limit is lowered
    so that this one is not tiny.)"""
    from milp_planner.planners import subfleet

    monkeypatch.setattr(subfleet, "TINY_SPACE_OPTIONS", 10)
    inst = CASES["tiny-residual-3dev"]()
    on = get_planner("dp").solve(inst, objective="period", time_limit=30)
    off = get_planner("dp", polish=False).solve(inst, objective="period", time_limit=30)
    assert on.info["anytime"]["polish"]["aside"] is False
    polished = on.info["anytime"]["polish"]["best"]
    assert on.info["anytime"]["start"].startswith("polish") == (polished is not None)
    assert "polish" not in off.info["anytime"]
    assert on.status == off.status == "optimal"
    assert on.value == pytest.approx(off.value, rel=1e-9)
    aside = get_planner("dp", polish_aside=True).solve(inst, objective="period", time_limit=30)
    assert aside.info["anytime"]["polish"]["aside"] is True
    assert not aside.info["anytime"]["start"].startswith("polish")
    assert aside.status == "optimal" and aside.value == pytest.approx(on.value, rel=1e-9)


def test_a_plan_kept_aside_replaces_a_worse_returned_plan_only():
    from milp_planner.planners.anytime_start import Start, StartReport
    from milp_planner.planners.base import PlanResult, SolveContext
    from milp_planner.planners.exact import ExactPlanner

    inst = CASES["chain"]()
    plans = _plans(inst, "latency")
    worst, best = plans[-1], plans[0]
    v_best = evaluate(best, inst).value("latency")
    assert v_best < evaluate(worst, inst).value("latency")
    ctx = SolveContext(objective="latency")
    start = StartReport(None)
    start.aside = Start(best, v_best, "polish (1 plan)", False)
    res = PlanResult("dp", "timeout", "latency", plan=worst, bound=0.0, message="stopped")
    ExactPlanner._take_aside(inst, ctx, res, start)
    assert res.plan is best and "kept aside" in res.info["plan_from"] and "kept aside" in res.message
    res = PlanResult("dp", "timeout", "latency", plan=best, bound=0.0, message="stopped")
    start.aside = Start(worst, evaluate(worst, inst).value("latency"), "polish (1 plan)", False)
    ExactPlanner._take_aside(inst, ctx, res, start)
    assert res.plan is best and "plan_from" not in res.info

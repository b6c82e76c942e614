"""The exact min-max search (formulations/minmax.py): period and memory certified by dp, milp and
cpsat, in agreement with brute force; an early stop still returns a proven interval."""

from dataclasses import replace
from pathlib import Path

import pytest
from builders import chain_graph, device, make_instance, residual_graph

from formulations.minmax import minmax_search
from formulations.stagegraph import build_stage_graph
from milp_planner.instance import Constraints, SearchSpace, load_instance
from milp_planner.planners import get_planner

EXAMPLES = Path(__file__).resolve().parents[1] / "instances" / "examples"
DEVS = [device(n, m, "0.01", power=(2 + i, 1, 1)) for i, (n, m) in
        enumerate([("a", 1000), ("b", 2500), ("c", 1800), ("d", 3000)])]


def chain4():
    return make_instance(chain_graph(3), DEVS, lat=0.05, sink=3, search=SearchSpace(2, 2, ("equal",), ("rows",)))


def residual3_shared():
    return make_instance(residual_graph(), DEVS[:3], lat=0.05, sink=2, medium="shared",
                         search=SearchSpace(2, 3, ("equal",), ("rows",)))


def tiny2_equal():
    inst = load_instance(EXAMPLES / "tiny-2dev.yaml")
    return replace(inst, search=replace(inst.search, splits=("equal",)))


def _capped(make, objective):
    """Every device capped at 90 % of the largest memory of the uncapped optimum: the caps bind."""
    def build():
        inst = make()
        free = _brute(make.__name__, objective, make)
        cap = int(0.9 * max(free.metrics.memory_bytes.values()))
        return replace(inst, devices=tuple(replace(d, memory_bytes=cap) for d in inst.devices))
    build.__name__ = f"{make.__name__}-capped-{objective}"
    return build


def _latency_capped(make):
    """A latency cap halfway between the fastest plan and the period optimum's latency."""
    def build():
        inst = make()
        fast = _brute(make.__name__, "latency", make).value
        slow = _brute(make.__name__, "period", make).metrics.latency_s
        return replace(inst, constraints=Constraints(memory=True, latency_s=(fast + slow) / 2))
    build.__name__ = f"{make.__name__}-latency-capped"
    return build


def tiny_fc():
    return load_instance(EXAMPLES / "tiny-fc-2dev.yaml")


_cache = {}


def _brute(key, objective, make):
    if (key, objective) not in _cache:
        _cache[(key, objective)] = get_planner("bruteforce").solve(make(), objective=objective)
    return _cache[(key, objective)]


CASES = {
    "tiny-fc-2dev": tiny_fc,
    "tiny-2dev-equal": tiny2_equal,
    "chain-4dev": chain4,
    "residual-3dev-shared": residual3_shared,
}
CAPPED = {
    "chain-4dev-capped": chain4,
    "residual-3dev-shared-capped": residual3_shared,
}


def _check(res, ref):
    assert res.status == ref.status, res.message
    if ref.status != "optimal":
        return
    tol = 1e-6 * ref.value + res.info.get("tolerance", 0.0)
    assert res.value == pytest.approx(ref.value, abs=tol)
    assert res.bound <= res.value + 1e-12
    assert res.metrics.feasible and res.metrics.in_space


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["period", "memory"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_exact_planner_agrees_with_brute_force(case, objective):
    ref = _brute(case, objective, CASES[case])
    assert ref.status == "optimal"
    for planner in ("dp", "milp", "cpsat"):
        _check(get_planner(planner).solve(CASES[case](), objective=objective), ref)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["period", "memory"])
@pytest.mark.parametrize("case", list(CAPPED))
def test_binding_memory_caps_agree_with_brute_force(case, objective):
    make = _capped(CAPPED[case], objective)
    ref = get_planner("bruteforce").solve(make(), objective=objective)
    for planner in ("dp", "milp", "cpsat"):
        _check(get_planner(planner).solve(make(), objective=objective), ref)


@pytest.mark.slow
def test_latency_cap_with_the_period_agrees_with_brute_force():
    make = _latency_capped(chain4)
    ref = get_planner("bruteforce").solve(make(), objective="period")
    for planner in ("dp", "milp", "cpsat"):
        _check(get_planner(planner).solve(make(), objective="period"), ref)


def test_dp_certifies_period_and_memory_quickly():
    inst = tiny_fc()
    for objective, expected in (("period", 0.0008416426666666667), ("memory", 70540.0)):
        res = get_planner("dp").solve(inst, objective=objective)
        assert res.status == "optimal" and res.gap <= 1e-9
        assert res.value == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("planner", ["dp", "milp", "cpsat"])
def test_tiny_residual_3dev_reference_optima(planner):
    """15 million plans, too many for brute force: the optima the full-graph MILP and CP-SAT
    certified before the min-max search (85 s and 34-88 s then)."""
    inst = load_instance(EXAMPLES / "tiny-residual-3dev.yaml")
    for objective, expected in (("period", 0.002439392), ("memory", 10096.0)):
        res = get_planner(planner).solve(inst, objective=objective)
        assert res.status == "optimal", res.message
        assert res.value == pytest.approx(expected, rel=1e-6, abs=res.info.get("tolerance", 0.0))


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["period", "memory"])
def test_minmax_search_stopped_early_returns_a_proven_interval(objective):
    inst = residual3_shared()
    ref = _brute("residual3_shared", objective, residual3_shared).value
    sg = build_stage_graph(inst)
    full = minmax_search(sg, objective)
    assert full.optimal and sg.path_value(full.arcs, objective) == pytest.approx(ref, rel=1e-9)
    cut = minmax_search(sg, objective, max_labels=3)
    assert cut.stopped and not cut.optimal
    assert cut.lower <= ref * (1 + 1e-9)
    assert cut.arcs and sg.path_value(cut.arcs, objective) >= ref * (1 - 1e-9)
    # a threshold below the optimum: proven that nothing lies within it
    below = minmax_search(sg, objective, upper=ref * 0.999)
    assert below.none_within and not below.optimal and below.lower == ref * 0.999


@pytest.mark.parametrize("objective", ["period", "memory"])
def test_dp_stopped_by_its_label_budget_returns_a_valid_interval(objective):
    ref = _brute("residual3_shared", objective, residual3_shared).value
    res = get_planner("dp", max_labels=2).solve(residual3_shared(), objective=objective)
    assert res.plan is not None and res.status in ("feasible", "optimal")
    assert res.bound is not None and res.bound <= ref * (1 + 1e-9) <= res.value * (1 + 2e-9)
    if res.status != "optimal":
        assert "label budget" in res.message

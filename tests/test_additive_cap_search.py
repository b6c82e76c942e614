"""The label search under latency and energy caps (``capped_shortest_path(additive=...)``) and
the rounds that take an exact label search's answer, checked against every path / plan of the
tiny instances."""

import math

import pytest
from test_caps import all_paths, capped_graph
from test_exact import CASES

from formulations.caps import AdditiveCap, additive_caps, capped_shortest_path
from formulations.pareto import capped_instance
from formulations.stagegraph import build_stage_graph
from formulations.warmstart import dp_warm_start
from milp_planner.planners import get_planner

OTHER = {"latency": "energy", "energy": "latency"}


def caps_to_try(values):
    """Caps at the quantiles of a resource's path values, one below them all and one exactly at a value."""
    vs = sorted(set(values))
    picks = {vs[0] * (1 - 1e-6), vs[0], vs[len(vs) // 4], vs[len(vs) // 2], vs[-1]}
    return sorted(picks)


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_additive_capped_search_equals_every_path(case, objective):
    sg = build_stage_graph(CASES[case](), objective=objective)
    other = OTHER[objective]
    paths = [(p, v, sg.path_value(p, other)) for p, v, _ in all_paths(sg, objective)]
    n_dev = len(sg.instance.devices)
    for cap in caps_to_try([r for _, _, r in paths]):
        within = [(p, v) for p, v, r in paths if r <= cap * (1 + 1e-9)]
        for upper in (math.inf, None):
            if upper is None:  # the median of the capped values: only plans up to it count
                if not within:
                    continue
                upper = sorted(v for _, v in within)[len(within) // 2]
            found = capped_shortest_path(sg, objective, [None] * n_dev, upper=upper,
                                         additive=[AdditiveCap(other, cap)])
            best = min((v for _, v in within if v <= upper * (1 + 1e-9)), default=math.inf)
            if not math.isfinite(best):
                assert found.arcs == [] and math.isinf(found.value)
                continue
            assert found.value == pytest.approx(best, rel=1e-9)
            assert sg.path_value(found.arcs, other) <= cap * (1 + 1e-9)
            for p, v in within:  # every plan within the caps and the bound uses only the support
                if v <= upper:
                    assert found.support[p].all()


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_additive_and_memory_caps_together(case, objective):
    sg, caps, _ = capped_graph(case, objective, 0.9)
    other = OTHER[objective]
    paths = [(p, v, sg.path_value(p, other), mem) for p, v, mem in all_paths(sg, objective)]
    fitting = [(p, v, r) for p, v, r, mem in paths if all(m <= c for m, c in zip(mem, caps))]
    if not fitting:
        pytest.skip("no plan fits these memory caps")
    for cap in caps_to_try([r for _, _, r in fitting]):
        found = capped_shortest_path(sg, objective, caps, additive=[AdditiveCap(other, cap)])
        best = min((v for _, v, r in fitting if r <= cap * (1 + 1e-9)), default=math.inf)
        if math.isinf(best):
            assert found.arcs == []
        else:
            assert found.value == pytest.approx(best, rel=1e-9)


def test_additive_caps_read_from_the_instance():
    inst = CASES["chain"]()
    assert additive_caps(inst) == []
    inst = capped_instance(inst, {"energy": 2.5, "latency": 1.0})
    assert additive_caps(inst) == [AdditiveCap("latency", 1.0), AdditiveCap("energy", 2.5)]


@pytest.mark.parametrize("case", list(CASES))
def test_warm_start_under_an_energy_cap_is_exact(case):
    """The DP warm start under a binding energy cap: the best plan within it (``capped_exact``),
    the evaluator's value, within the cap; or none when no plan meets it."""
    base = CASES[case]()
    sg0 = build_stage_graph(base, objective="latency")
    paths = [(p, v, sg0.path_value(p, "energy")) for p, v, _ in all_paths(sg0, "latency")]
    for cap in caps_to_try([r for _, _, r in paths])[:3]:
        inst = capped_instance(base, {"energy": cap})
        sg = build_stage_graph(inst, objective="latency")
        ws = dp_warm_start(sg, "latency")
        best = min((v for _, v, r in paths if r <= cap * (1 + 1e-9)), default=math.inf)
        fastest = min(v for _, v, _ in paths)
        if best <= fastest * (1 + 1e-12):
            continue  # the cap does not bind: the DP's own plan
        assert ws.capped_exact
        if math.isinf(best):
            assert not ws.feasible
        else:
            assert ws.feasible and ws.value == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("planner", ["dp", "milp", "cpsat"])
@pytest.mark.parametrize("case", list(CASES))
def test_exact_planners_under_an_energy_cap_agree_with_brute_force(case, planner):
    base = CASES[case]()
    ref = get_planner("bruteforce").solve(base, objective="energy")
    fastest = get_planner("bruteforce").solve(base, objective="latency")
    # a cap between the least energy and the fastest plan's energy binds
    check_under_cap(base, planner, "energy", (ref.value + fastest.metrics.energy_j) / 2, "latency")


def check_under_cap(base, planner: str, capped: str, cap: float, objective: str) -> None:
    """``planner`` minimising ``objective`` under ``capped`` <= ``cap`` finds brute force's optimum,
    and its plan meets the cap."""
    inst = capped_instance(base, {capped: cap})
    want = get_planner("bruteforce").solve(inst, objective=objective)
    got = get_planner(planner, anytime=False).solve(inst, objective=objective)
    assert want.status == "optimal"
    assert got.status == "optimal", got.message
    assert got.value == pytest.approx(want.value, rel=1e-9)
    assert got.metrics.value(capped) <= cap * (1 + 1e-9)


@pytest.mark.parametrize("within", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_lexicographic_step_by_label_search_equals_brute_force(case, within):
    """The lexicographic step (minimise the other objective with ``within`` at most its optimum,
    or a looser cap) is answered by the label search over the graph of the plans within that
    cap, and equals brute force."""
    from milp_planner.pareto import lexicographic_solve

    base = CASES[case]()
    other = OTHER[within]
    best = get_planner("bruteforce").solve(base, objective=within).value
    for cap in (best, best * 1.05):
        inst = capped_instance(base, {within: cap})
        want = get_planner("bruteforce").solve(inst, objective=other)
        got = lexicographic_solve(inst, other, within, None)
        assert got is not None and got.info.get("solved_by") == "label search"
        assert got.status == "optimal"
        assert got.value == pytest.approx(want.value, rel=1e-9)
        assert got.metrics.feasible


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_period_capped_search_equals_every_path(case, objective):
    """A period cap is one summed resource per device (and one for a shared medium): the label
    search's best plan under it is the best path whose evaluator period meets it."""
    inst = capped_instance(CASES[case](), {"period": 1e9})  # a period cap: the first-use reduction
    sg = build_stage_graph(inst, objective=objective)
    paths = [(p, v, sg.path_value(p, "period")) for p, v, _ in all_paths(sg, objective)]
    n_dev = len(sg.instance.devices)
    for cap in caps_to_try([r for _, _, r in paths]):
        found = capped_shortest_path(sg, objective, [None] * n_dev, additive=[AdditiveCap("period", cap)])
        best = min((v for _, v, r in paths if r <= cap * (1 + 1e-9)), default=math.inf)
        if math.isinf(best):
            assert found.arcs == []
        else:
            assert found.value == pytest.approx(best, rel=1e-9)
            assert sg.path_value(found.arcs, "period") <= cap * (1 + 1e-9)


@pytest.mark.parametrize("planner", ["milp", "cpsat"])
@pytest.mark.parametrize("case", list(CASES))
def test_exact_planners_under_a_period_cap_agree_with_brute_force(case, planner):
    base = CASES[case]()
    least = get_planner("bruteforce").solve(base, objective="period")
    frugal = get_planner("bruteforce").solve(base, objective="energy")
    check_under_cap(base, planner, "period", (least.value + frugal.metrics.period_s) / 2, "energy")


def shared_medium_bound():
    """Three fast devices on a slow shared medium: the medium's summed transfers, not a device's
    load, is the period of many plans."""
    from builders import chain_graph, device, make_instance

    from milp_planner.instance import SearchSpace

    devs = [device(n, 10**6, "0.001", power=(2, 1, 1)) for n in "abc"]
    return make_instance(chain_graph(3), devs, lat=0.01, medium="shared", source=0, sink=2,
                         search=SearchSpace(2, 2, ("equal",), ("rows", "channels")))


def test_period_cap_counts_the_shared_medium():
    """The columns a period cap limits are exactly the sums the evaluator's period takes the
    largest of, the shared medium's included (it binds for some plans here)."""
    from formulations.caps import _summed_columns

    inst = capped_instance(shared_medium_bound(), {"period": 1e9})
    sg = build_stage_graph(inst, objective="energy")
    cols = _summed_columns(sg, AdditiveCap("period", 1.0))
    assert len(cols) == 4  # three devices and the medium
    medium_binds = False
    for p, _, _ in all_paths(sg, "energy"):
        end = sg.arcs[p[-1]].head
        sums = [float(col[p].sum()) + tcol[end] for col, tcol in cols]
        assert max(sums) == pytest.approx(sg.path_value(p, "period"), rel=1e-12)
        medium_binds |= sums[-1] > max(sums[:-1]) * (1 + 1e-6)
    assert medium_binds

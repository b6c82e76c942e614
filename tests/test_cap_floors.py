"""The enumeration's per-device cap floors (``formulations.stagegraph._CapFloors``): under a
period or memory cap (or the period / memory objective's own upper bound) the stage graph
leaves out the arcs whose least per-device load / weights already break it. Checked against every plan of the tiny instances: the graph's plans within the
caps have exactly the cost vectors of the space's plans within them; and a deliberately wrong
prune (the cap tightened by 1 %, a floor over-counted by 1 %) is caught by the same check."""

import math

import pytest
from test_exact import CASES
from test_caps import all_paths
from test_pareto import all_metrics

import formulations.stagegraph as stagegraph
from formulations.pareto import capped_instance
from formulations.stagegraph import build_stage_graph
from milp_planner.cost.evaluator import evaluate

QUANTITIES = {"period": lambda m: m.period_s, "memory": lambda m: max(m.memory_bytes.values())}


def _key(m) -> tuple:
    return tuple(f"{v:.9g}" for v in (m.latency_s, m.energy_j, m.period_s, max(m.memory_bytes.values())))


def caps_of(case: str, quantity: str) -> list[float]:
    """Caps on ``quantity`` that bind: exactly at the least value, at the quartiles and the median."""
    vs = sorted({QUANTITIES[quantity](m) for m in all_metrics(case)})
    return sorted({vs[0], vs[len(vs) // 4], vs[len(vs) // 2], vs[(3 * len(vs)) // 4]})


def within(case: str, quantity: str, cap: float) -> set:
    """The cost vectors of the plans of the space within ``cap`` (as the evaluator checks it)."""
    slack = cap * (1 + 1e-9) if quantity == "period" else math.floor(cap)
    return {_key(m) for m in all_metrics(case) if QUANTITIES[quantity](m) <= slack}


def graph_costs(case: str, quantity: str, cap: float, objective: str = "energy", upper=None):
    """(cost vectors of the graph's plans within the cap, options the floors left out)."""
    inst = capped_instance(CASES[case](), {quantity: cap})
    sg = build_stage_graph(inst, objective=objective, upper=upper, drop_overflow=True)
    out = set()
    for path, _, _ in all_paths(sg, objective):
        m = evaluate(sg.plan_from_arcs(path), inst)
        if m.feasible:
            out.add(_key(m))
    return out, sg.cap_pruned


def _mismatches() -> tuple[int, int]:
    """(cases whose graph lost or gained a plan, options the floors left out), over every case,
    quantity and cap."""
    bad = pruned = 0
    for case in CASES:
        for quantity in QUANTITIES:
            for cap in caps_of(case, quantity):
                got, n = graph_costs(case, quantity, cap)
                pruned += n
                bad += got != within(case, quantity, cap)
    return bad, pruned


@pytest.mark.parametrize("quantity", list(QUANTITIES))
@pytest.mark.parametrize("case", list(CASES))
def test_graph_under_caps_holds_every_plan_within_them(case, quantity):
    for cap in caps_of(case, quantity):
        expected = within(case, quantity, cap)
        got, _ = graph_costs(case, quantity, cap)
        assert got == expected, (case, quantity, cap)
        if expected:  # with an upper bound too (the rounds' graphs): every plan within both
            best = min(float(k[1]) for k in expected)
            got, _ = graph_costs(case, quantity, cap, upper=best * 1.05)
            assert got == {k for k in expected if float(k[1]) <= best * 1.05 * (1 + 1e-9)}


@pytest.mark.slow
def test_the_floors_prune_and_a_wrong_prune_is_caught(monkeypatch):
    bad, pruned = _mismatches()
    assert bad == 0 and pruned > 0  # exact, and it does leave options out

    real = stagegraph._CapFloors.of

    def tightened(instance, pr, **kw):  # the cap tightened by 1 %
        capf = real(instance, pr, **kw)
        if capf is not None:
            capf.limit = capf.limit * 0.99
        return capf

    monkeypatch.setattr(stagegraph._CapFloors, "of", staticmethod(tightened))
    assert _mismatches()[0] > 0
    monkeypatch.setattr(stagegraph._CapFloors, "of", staticmethod(real))

    steps = stagegraph._CapFloors.steps

    def over_counted(self, *args):  # every floor 1 % too high
        adds, needs = steps(self, *args)
        return adds * 1.01, needs

    monkeypatch.setattr(stagegraph._CapFloors, "steps", over_counted)
    assert _mismatches()[0] > 0


def _own_bound_check(case: str, objective: str, upper: float) -> tuple[bool, int]:
    """(the graph of ``objective`` within ``upper`` holds exactly the space's plans within it and
    its ``outside`` bounds every plan it left out, options its own cap left out)."""
    inst = CASES[case]()
    value = QUANTITIES[objective]
    slack = upper * (1 + 1e-9) + 1e-12
    sg = build_stage_graph(inst, objective=objective, upper=upper, drop_overflow=True)
    graph = [evaluate(sg.plan_from_arcs(path), inst) for path, _, _ in all_paths(sg, objective)]
    got = {_key(m) for m in graph if m.feasible and value(m) <= slack}
    space = all_metrics(case)
    expected = {_key(m) for m in space if value(m) <= slack}
    left_out = [value(m) for m in space if _key(m) not in {_key(m) for m in graph}]
    outside_ok = all(v >= sg.outside * (1 - 1e-9) for v in left_out)
    return got == expected and outside_ok, sg.cap_pruned


@pytest.mark.parametrize("objective", list(QUANTITIES))
@pytest.mark.parametrize("case", list(CASES))
def test_the_objectives_own_bound_caps_every_device(case, objective):
    """Period and memory are maxima over the devices: a plan within the round's bound loads (fills)
    no device beyond it, so the bound is a per-device cap of the enumeration (``SELF_CAPPED``).
    The graph keeps every plan within it, and what it leaves out is at least ``sg.outside``."""
    vals = sorted({QUANTITIES[objective](m) for m in all_metrics(case)})
    for upper in sorted({vals[0], vals[len(vals) // 8], vals[len(vals) // 4], vals[len(vals) // 2]}):
        ok, _ = _own_bound_check(case, objective, upper)
        assert ok, (case, objective, upper)


@pytest.mark.slow
def test_the_own_bound_prunes_and_a_wrong_one_is_caught(monkeypatch):
    """The own cap does leave options out on the tiny cases, and the same check catches it
    tightened by 5 % (plans within the bound lost) or not counted in ``outside``."""
    def run():
        bad = pruned = 0
        for case in CASES:
            for objective in QUANTITIES:
                vals = sorted({QUANTITIES[objective](m) for m in all_metrics(case)})
                for upper in sorted({vals[0], vals[len(vals) // 8], vals[len(vals) // 4]}):
                    ok, n = _own_bound_check(case, objective, upper)
                    bad += not ok
                    pruned += n
        return bad, pruned

    bad, pruned = run()
    assert bad == 0 and pruned > 0
    real = stagegraph._CapFloors.of

    def tightened(instance, pr, own_cap=None, **kw):
        return real(instance, pr, own_cap=None if own_cap is None else own_cap * 0.95, **kw)

    monkeypatch.setattr(stagegraph._CapFloors, "of", staticmethod(tightened))
    assert run()[0] > 0

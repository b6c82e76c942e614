"""The memory objective: the liveness term of the ``weights`` floor (milp_planner/cost/floors.py)
and the restricted beam searches that improve the anytime start (milp_planner/engine/memory_search.py),
checked against brute force and the evaluator on tiny instances."""

import random
from dataclasses import replace
from pathlib import Path

import pytest
from builders import chain_graph, device, fc_graph, make_instance, residual_graph

from formulations.caps import PathArrays
from formulations.minmax import minmax_search
from milp_planner.engine.memory_search import FAMILIES, family_options, memory_plans
from milp_planner.engine.restricted import beam_search, restricted_graph
from milp_planner.cost.evaluator import evaluate
from milp_planner.cost.floors import _memory_floor, live_bytes, lower_floor
from milp_planner.instance import SearchSpace, load_instance
from milp_planner.instance.network import Endpoint
from milp_planner.planners import get_planner

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "instances" / "examples"
DEVS = [device(n, m, "0.01") for n, m in [("a", 1000), ("b", 2500), ("c", 1800)]]


def _chain3():
    return make_instance(chain_graph(3), DEVS[:2], search=SearchSpace(2, 2, ("equal", "grid:4"), ("rows", "channels")))


def _chain_3dev():
    return make_instance(chain_graph(3), DEVS, sink=2, search=SearchSpace(1, 3, ("equal",), ("rows", "channels")))


def _chain_capacity():
    """No equal cuts: the searches take the most balanced of the capacity cuts."""
    return make_instance(chain_graph(3), DEVS[:2], sink=1, search=SearchSpace(2, 2, ("capacity",), ("rows", "channels")))


def _residual():
    return make_instance(residual_graph(), DEVS[:2], search=SearchSpace(2, 2, ("equal",), ("rows", "channels")))


def _residual_external():
    ext = Endpoint(None, (150.0, 130.0), (0.02, 0.02))
    return make_instance(residual_graph(), DEVS[:2], source=ext, sink=1,
                         search=SearchSpace(1, 2, ("equal",), ("rows", "channels")))


def _fc():
    return make_instance(fc_graph(), DEVS[:2])


def _fc_rows_only():
    """The FC layer cannot be split (rows only): one device holds its weights, its output and
    its whole input."""
    return make_instance(fc_graph(), DEVS[:2], sink=1, search=SearchSpace(1, 2, ("equal",), ("rows",)))


def _tiny2():
    inst = load_instance(EXAMPLES / "tiny-2dev.yaml")
    return replace(inst, search=replace(inst.search, splits=("equal",)))


def _tiny_fc():
    return load_instance(EXAMPLES / "tiny-fc-2dev.yaml")


CASES = {"chain3": _chain3, "chain-3dev": _chain_3dev, "chain-capacity": _chain_capacity, "residual": _residual,
         "residual-external": _residual_external, "fc": _fc, "fc-rows-only": _fc_rows_only, "tiny-2dev": _tiny2, "tiny-fc-2dev": _tiny_fc}
_BRUTE = {}


def _optimum(case):
    """The brute-force memory optimum of ``case`` (no caps)."""
    if case not in _BRUTE:
        inst = CASES[case]()
        free = replace(inst, constraints=replace(inst.constraints, memory=False))
        res = get_planner("bruteforce").solve(free, objective="memory")
        assert res.status == "optimal"
        _BRUTE[case] = res
    return _BRUTE[case]


def _floor_holds(value: float, optimum: float) -> bool:
    return value <= optimum * (1 + 1e-9)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_memory_floor_is_below_the_brute_force_optimum(case):
    inst = CASES[case]()
    best = _optimum(case)
    floor = lower_floor(inst, "memory")
    assert floor.source == "weights"
    assert _floor_holds(floor.value, best.value), (floor, best.value)


def test_the_liveness_term_raises_the_floor_and_an_overstated_one_fails(monkeypatch):
    """The live bytes (every output a later layer still reads, plus the one computed) lift the
    floor; adding them once more would put it above a brute-force optimum (so the check of the
    test above can fail)."""
    import milp_planner.cost.floors as floors

    with_live = {case: _memory_floor(make()) for case, make in CASES.items()}
    monkeypatch.setattr(floors, "live_bytes", lambda inst: [0])
    without = {case: _memory_floor(make()) for case, make in CASES.items()}
    monkeypatch.undo()
    assert sum(with_live[c] > without[c] for c in CASES) >= 3, (with_live, without)
    overstated = [c for c, make in CASES.items()
                  if not _floor_holds(with_live[c] + max(live_bytes(make())), _optimum(c).value)]
    assert overstated


def test_a_layer_no_plan_splits_is_held_whole_with_its_input_and_output():
    """fc (170 params, 16 inputs, 10 outputs, 1 byte each) with rows only: the floor is the
    optimum, and one byte more would not be a floor."""
    inst = _fc_rows_only()
    assert _memory_floor(inst) == 170 + 16 + 10 == _optimum("fc-rows-only").value
    assert not _floor_holds(_memory_floor(inst) + 1, _optimum("fc-rows-only").value)


def test_live_bytes_of_a_chain_and_a_skip():
    """chain: c1 computes t1 (128 B) while t0 (128 B) is live; residual: the add reads t1 and
    the skip t0; a device source holds the 64 B input until its last reader."""
    assert live_bytes(_chain3()) == [64 + 128, 128 + 128, 128 + 128]
    assert live_bytes(_residual()) == [64 + 128, 128 + 128, 128 + 128 + 128]
    assert live_bytes(_residual_external()) == [128, 256, 384]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", ["chain3", "chain-3dev", "chain-capacity", "residual", "residual-external",
                                  "tiny-2dev"])
def test_restricted_graph_paths_are_the_evaluators_plans(case, family):
    """Every path of a restricted graph (a sample of them) is a plan of the space whose memory,
    from the arcs, is the evaluator's."""
    inst = CASES[case]()
    sg = restricted_graph(inst, family_options(inst, family))
    rng = random.Random(7)
    for _ in range(25):
        v, arcs = sg.source, []
        while v not in sg.terminals:
            a = rng.choice(sg.out_arcs[v])
            arcs.append(a)
            v = sg.arcs[a].head
        plan = sg.plan_from_arcs(arcs)
        m = evaluate(plan, inst)
        assert m.in_space, m.space_reasons
        assert sg.path_value(arcs, "memory") == m.value("memory")
        for objective in ("latency", "energy", "period"):
            assert sg.path_value(arcs, objective) == pytest.approx(m.value(objective), rel=1e-9)
    PathArrays(sg)  # a graph the label searches can read


@pytest.mark.parametrize("case", sorted(CASES))
def test_memory_plans_are_evaluated_and_no_better_than_the_optimum(case):
    inst = CASES[case]()
    best = _optimum(case).value
    found = memory_plans(inst)
    assert found.plan is not None
    m = evaluate(found.plan, inst)
    assert m.in_space and m.value("memory") == found.value
    assert found.value >= best * (1 - 1e-12)
    assert found.value <= 1.5 * best  # a heuristic, but not a poor one on these
    # an upper bound at the optimum leaves nothing better to find
    assert memory_plans(inst, upper=best).plan is None


@pytest.mark.parametrize("case", ["chain3", "residual", "tiny-fc-2dev"])
def test_an_unbounded_beam_is_the_exact_search_of_the_restricted_graph(case):
    """With room for every label, the beam keeps every distinct label: its plan is the exact
    min-max optimum of the restricted graph (``minmax_search``), and a width of 1 is no better."""
    inst = CASES[case]()
    sg = restricted_graph(inst, family_options(inst, "rotations"))
    exact = minmax_search(sg, "memory")
    assert exact.optimal
    arcs, value = beam_search(sg, 10**9)
    assert value == exact.value == sg.path_value(arcs, "memory")
    assert beam_search(sg, 1)[1] >= value


def test_beam_search_keeps_the_caps():
    """With every device capped just below the best restricted plan's largest memory, the beam
    never returns a plan over a cap (it may find none)."""
    inst = _chain_3dev()
    free = memory_plans(inst)
    cap = int(free.value) - 1
    capped = replace(inst, devices=tuple(replace(d, memory_bytes=cap) for d in inst.devices))
    for family in FAMILIES:
        sg = restricted_graph(capped, family_options(capped, family))
        for width in (1, 4, 64):
            got = beam_search(sg, width)
            if got is not None:
                m = evaluate(sg.plan_from_arcs(got[0]), capped)
                assert m.feasible and max(m.memory_bytes.values()) <= cap


@pytest.mark.slow
def test_exact_planners_still_agree_with_brute_force_on_memory():
    """The memory start only replaces the incumbent: dp, milp and cpsat still certify the
    brute-force optimum."""
    for case in ("chain3", "residual", "tiny-2dev"):
        inst = CASES[case]()
        best = _optimum(case).value
        for name in ("dp", "milp", "cpsat"):
            res = get_planner(name).solve(inst, objective="memory")
            assert res.status == "optimal", (case, name, res.message)
            assert res.value == pytest.approx(best, rel=1e-9), (case, name)
            assert "memory_search" in res.info["anytime"], (case, name)
        off = get_planner("dp", memory_search=False).solve(inst, objective="memory")
        assert off.value == pytest.approx(best, rel=1e-9) and "memory_search" not in off.info["anytime"]


@pytest.mark.slow
def test_vgg16_on_four_devices_memory_within_one_percent_fast():
    """Issue #13's 4-device VGG16: the memory search gives a plan within 1 % of the floor
    (47.26 MB and a 25 % gap before), within a few seconds of search."""
    inst = load_instance(ROOT / "instances/fleet/vgg16-4dev-uncapped.yaml")
    found = memory_plans(inst)
    floor = lower_floor(inst, "memory").value
    assert found.plan is not None
    assert evaluate(found.plan, inst).value("memory") == found.value
    assert floor > 36.0e6  # the liveness term: 35.39 MB before
    assert (found.value - floor) / found.value <= 0.01

"""Pareto fronts (milp_planner.pareto, `milp-planner pareto`) against brute-force fronts on tiny instances."""

import json
import math
from dataclasses import replace

import pytest
from test_exact import CASES

from formulations.pareto import capped_instance, hypervolume, next_cap
from milp_planner.pareto import pareto_front
from milp_planner.planners import get_planner
from milp_planner.cli import main
from milp_planner.cost.evaluator import evaluate, evaluate_stages
from milp_planner.errors import PlannerError
from milp_planner.planners.exact import _plans, _stage_tuple
from formulations.stagegraph import stage_options

_space_cache = {}


def all_metrics(case):
    """The evaluator's metrics of every feasible plan of the case's space."""
    if case not in _space_cache:
        inst = CASES[case]()
        n, fl = len(inst.graph.layers), max(1, inst.search.fusion_limit)
        options = {(b, e): stage_options(inst, b, e) for b in range(n) for e in range(b, min(n, b + fl))}
        out = []
        for stack in _plans(options, n, fl):
            m = evaluate_stages([_stage_tuple(o) for o in stack], inst)
            if m.feasible:
                out.append(m)
        _space_cache[case] = out
    return _space_cache[case]


def brute_front(case, objectives):
    vecs = {tuple(m.value(o) for o in objectives) for m in all_metrics(case)}
    front = [v for v in vecs if not any(w != v and all(a <= b for a, b in zip(w, v)) for w in vecs)]
    return sorted(front)


def same_vectors(found, expected):
    assert len(found) == len(expected), (found, expected)
    for f, e in zip(sorted(found), expected):
        assert f == pytest.approx(e, rel=1e-6, abs=1e-9), (found, expected)


def check_points(front, case):
    inst = CASES[case]()
    for p in front.points:
        again = evaluate(p.plan, inst)
        assert again.feasible and again.in_space
        for o in front.objectives:
            assert again.value(o) == pytest.approx(p.values[o], rel=1e-12)
        assert p.status == "optimal"
        assert p.bound is not None and p.bound <= p.values[p.minimised] * (1 + 1e-9)


@pytest.mark.parametrize("case", list(CASES))
def test_latency_energy_front_equals_brute_force(case):
    front = pareto_front(CASES[case](), ["latency", "energy"])
    assert front.certified, front.message
    same_vectors(front.vectors(), brute_front(case, ["latency", "energy"]))
    check_points(front, case)
    assert front.bound_set is None and front.hypervolume_gap == 0.0
    assert front.hypervolume > 0 and len(front.reference) == 2


@pytest.mark.parametrize("case", ["residual-external", "fc"])
def test_memory_pairs_equal_brute_force(case):
    for objs in (["energy", "memory"], ["memory", "latency"]):
        front = pareto_front(CASES[case](), objs)
        assert front.certified, front.message
        same_vectors(front.vectors(), brute_front(case, objs))
        check_points(front, case)


@pytest.mark.parametrize("case", [pytest.param("residual-external", marks=pytest.mark.slow), "fc", "chain"])
def test_three_objectives_equal_brute_force(case):
    objs = ["latency", "energy", "memory"]
    front = pareto_front(CASES[case](), objs)
    assert front.certified, front.message
    same_vectors(front.vectors(), brute_front(case, objs))
    check_points(front, case)


def test_time_limit_returns_points_and_a_bound_set():
    case = "residual-external"
    full = brute_front(case, ["latency", "energy"])
    front = pareto_front(CASES[case](), ["latency", "energy"], max_points=2)
    assert not front.certified and "--points 2" in front.message
    assert len(front.points) == 2
    # every point found is on the true front; every true point lies above some bound point
    for v in front.vectors():
        assert any(v == pytest.approx(w, rel=1e-6) for w in full)
    for w in full:
        assert any(b["latency"] <= w[0] * (1 + 1e-9) and b["energy"] <= w[1] * (1 + 1e-9) for b in front.bound_set)
    assert front.bound_hypervolume >= front.hypervolume
    assert 0 < front.hypervolume_gap < 1
    zero = pareto_front(CASES[case](), ["latency", "energy"], time_limit=0)
    assert not zero.certified and zero.points == []


def test_custom_solve_sees_extra_constraints():
    """Research code passes its own solve: here one that refuses plans on device b."""
    from milp_planner.planners import get_planner
    from milp_planner.planners.base import PlanResult

    inst = CASES["fc"]()

    def solve(capped, objective, time_limit):
        only_a = capped_instance(capped, {})
        only_a.devices = tuple(d if d.name == "a" else replace(d, memory_bytes=0) for d in only_a.devices)
        res = get_planner("milp").solve(only_a, objective=objective, time_limit=time_limit)
        return res if res.plan is not None else PlanResult("milp", res.status, objective)

    front = pareto_front(inst, ["latency", "energy"], solve=solve)
    assert front.certified and front.planner == "custom"
    assert all(p.plan.stages and {q.device for s in p.plan.stages for q in s.parts} == {"a"} for p in front.points)


def test_bad_objectives_are_one_line_errors():
    inst = CASES["fc"]()
    for objs, word in ((["latency"], "2 or 3"), (["latency", "latency"], "repeats"),
                       (["latency", "speed"], "speed")):
        with pytest.raises(PlannerError, match=word):
            pareto_front(inst, objs)


def test_next_cap_is_strictly_below_and_hypervolume():
    assert next_cap("memory", 1000.0) == 999.0
    assert next_cap("latency", 1.0) < 1.0 and next_cap("energy", 0.0) < 0.0
    assert hypervolume([(1.0, 2.0), (2.0, 1.0)], [3.0, 3.0]) == pytest.approx(3.0)
    assert hypervolume([(4.0, 4.0)], [3.0, 3.0]) == 0.0
    assert math.isfinite(hypervolume([], [1.0, 1.0]))


def test_cli_json_and_out(tmp_path, capsys):
    inst = "instances/examples/tiny-fc-2dev.yaml"
    assert main(["pareto", inst, "--objectives", "latency,energy", "--json", "--out", str(tmp_path / "f")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["certified"] is True and data["objectives"] == ["latency", "energy"]
    assert data["reference_point"] and data["hypervolume"] > 0
    for p in data["points"]:
        assert set(p["metrics"]) >= {"latency_s", "energy_j", "period_s", "memory_bytes"}
        assert p["status"] == "optimal" and p["plan"]["stages"]
    assert (tmp_path / "f" / "front.png").stat().st_size > 1000
    rows = (tmp_path / "f" / "front.csv").read_text().splitlines()
    assert len(rows) == len(data["points"]) + 1 and rows[0].startswith("point,latency,energy")
    assert json.loads((tmp_path / "f" / "front.json").read_text())["points"] == data["points"]


def test_cli_bad_input_is_one_line(capsys):
    inst = "instances/examples/tiny-fc-2dev.yaml"
    assert main(["pareto", inst, "--objectives", "latency,speed"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "speed" in err
    assert main(["pareto", inst, "--planner", "dp"]) == 2
    assert "dp" in capsys.readouterr().err


def below_bound_set(bound_set, objectives, case):
    """The feasible plans of the case that lie strictly below the bound set (none may)."""
    out = []
    for m in all_metrics(case):
        y = [m.value(o) for o in objectives]
        if not any(all(b[o] <= v * (1 + 1e-9) + 1e-12 for o, v in zip(objectives, y)) for b in bound_set):
            out.append(y)
    return out


@pytest.mark.parametrize("case,objs", [("fc", ["latency", "energy", "memory"]),
                                       ("fc", ["period", "memory", "energy"]),
                                       pytest.param("chain", ["latency", "energy", "memory"], marks=pytest.mark.slow),
                                       pytest.param("residual-shared", ["period", "memory", "energy"],
                                                    marks=pytest.mark.slow)])
def test_three_objective_lower_bound_set(case, objs):
    """Stopped early (1, 2 points), no feasible plan lies strictly below the bound set and its
    hypervolume is at least the points'; from a complete run's steps the set is valid too and
    its hypervolume is that of the front up to the caps' steps (1 byte of memory on these
    few-hundred-byte tiny models)."""
    from formulations.pareto import lower_bound_set

    for mp in (1, 2):
        front = pareto_front(CASES[case](), objs, max_points=mp)
        assert not front.certified and front.bound_set, front.message
        assert below_bound_set(front.bound_set, objs, case) == []
        assert front.bound_hypervolume >= front.hypervolume > 0
        assert 0 < front.hypervolume_gap < 1
        assert "not implemented" not in front.message
    full = pareto_front(CASES[case](), objs)
    assert full.certified and full.hypervolume_gap == 0.0
    bound_set = lower_bound_set(full.steps, objs)
    assert below_bound_set(bound_set, objs, case) == []
    hv = hypervolume([tuple(b[o] for o in objs) for b in bound_set], full.reference)
    assert full.hypervolume <= hv <= full.hypervolume * 1.05


def test_lower_bound_set_of_hand_made_steps():
    """Steps (caps, bound): no cap -> f1 >= 1; f2 <= 5 -> f1 >= 2; f2 <= 5, f3 <= 3 -> none."""
    from formulations.pareto import BoundStep, lower_bound_set

    steps = [BoundStep({}, "a", 1.0, "optimal"), BoundStep({"b": 5.0}, "a", 2.0, "optimal"),
             BoundStep({"b": 5.0, "c": 3.0}, "a", math.inf, "infeasible")]
    got = {tuple(p[o] for o in "abc") for p in lower_bound_set(steps, ["a", "b", "c"])}
    assert got == {(2.0, 0.0, 3.0), (1.0, 5.0, 0.0)}
    got2 = {tuple(p[o] for o in "ab") for p in lower_bound_set(steps[:2], ["a", "b"])}
    assert got2 == {(2.0, 0.0), (1.0, 5.0)}


def recording_solve():
    """A ``solve`` for ``pareto_front`` (the milp planner without the anytime start) and the list
    of the objectives it was asked, in order."""
    real = get_planner("milp", anytime=False)
    calls: list[str] = []

    def solve(capped, objective, time_limit):
        calls.append(objective)
        return real.solve(capped, objective=objective, time_limit=time_limit)

    return solve, calls


@pytest.mark.parametrize("case", ["residual-external", "fc"])
def test_the_last_step_is_proven_by_the_floor_of_f2_without_a_solve(case):
    """After the first point the loop proves f2's least value once (energy: one solve); the
    ε-step below it is infeasible without a solve of f1, and the front stays equal to brute
    force. Overstating the floor would drop the last points of the front and fail the comparison."""
    objs = ["latency", "energy"]
    solve, calls = recording_solve()
    front = pareto_front(CASES[case](), objs, solve=solve, lexicographic="lazy")
    assert front.certified
    same_vectors(front.vectors(), brute_front(case, objs))
    floors = [s for s in front.steps if s.minimised == "energy"]
    assert len(floors) == 1 and calls.count("energy") == 1
    last = front.steps[-1]
    assert last.status == "infeasible" and last.minimised == "latency" and last.time_s == 0.0
    assert last.caps["energy"] < floors[0].bound
    assert calls.count("latency") == len([s for s in front.steps if s.minimised == "latency"]) - 1


def test_a_min_max_f2_takes_its_floor_without_a_search():
    """Memory (and period) as f2: its least value is bounded by the floors, not by a solve."""
    case = "residual-external"
    objs = ["energy", "memory"]
    solve, calls = recording_solve()
    front = pareto_front(CASES[case](), objs, solve=solve, lexicographic="lazy")
    assert front.certified and "memory" not in calls
    same_vectors(front.vectors(), brute_front(case, objs))
    floor = [s for s in front.steps if s.minimised == "memory"]
    assert len(floor) == 1 and "floor (no search)" in floor[0].message
    assert floor[0].bound <= min(v[1] for v in brute_front(case, objs))


def test_a_reference_point_is_used_as_given_and_checked_for_its_length():
    front = pareto_front(CASES["chain"](), ["latency", "energy"])
    far = [2 * max(p.values["latency"] for p in front.points), 2 * max(p.values["energy"] for p in front.points)]
    given = pareto_front(CASES["chain"](), ["latency", "energy"], reference=far)
    assert list(given.reference) == far and given.hypervolume > front.hypervolume
    with pytest.raises(PlannerError, match="give 2 values, one per objective"):
        pareto_front(CASES["chain"](), ["latency", "energy"], reference=far[:1])

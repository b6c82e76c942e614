"""Memory of a Pareto front: the memory-cap-aware relaxation (``layout_bounds(drop_overflow=True)``),
the release between ε-steps, the step planner's options (``-O memory_budget=...``) and what a
step that hits the memory budget does to the front."""

import json
import math

import pytest
from test_pareto import CASES, all_metrics, below_bound_set, brute_front, check_points, same_vectors

from formulations import relaxation
from formulations.budget import rss_bytes
from formulations.budget import release_memory
from formulations.pareto import capped_instance
from formulations.relaxation import layout_bounds, overflow_cap, part_need
from milp_planner.cli import main
from milp_planner.errors import PlannerError
from milp_planner.pareto import pareto_front
from milp_planner.planners import get_planner
from milp_planner.planners.base import PlanResult

TINY = "instances/examples/tiny-fc-2dev.yaml"


def memory_caps(case):
    """Memory caps just below each point of the case's energy x memory front (each binds)."""
    return [m - 1 for _, m in brute_front(case, ["energy", "memory"])]


@pytest.mark.parametrize("case", ["fc", "chain", "residual-external"])
def test_overflow_filtered_bounds_are_proven_and_remembered_per_range(case):
    """Under every binding cap: the filtered relaxation's bound is at most the least energy of
    the plans that meet the cap (brute force), and at least the unfiltered one; a cap in the
    same range reuses the remembered bounds, one outside it does not."""
    inst = CASES[case]()
    plain = layout_bounds(capped_instance(inst, {}), "energy", drop_overflow=True)
    assert plain.overflow_cap is None  # no memory caps: nothing to filter
    rose = False
    for cap in memory_caps(case):
        capped = capped_instance(inst, {"memory": cap})
        feasible = [m.energy_j for m in all_metrics(case) if m.max_memory_bytes <= cap]
        lb = layout_bounds(capped, "energy", drop_overflow=True)
        assert overflow_cap(capped) == float(int(cap))
        lo, hi = lb.overflow_range  # the caps that filter the same layouts (it may be remembered)
        assert lb.overflow_cap is not None and lo <= lb.overflow_cap < hi and lo <= cap < hi
        bound = float(lb.to_go[0].min())
        if feasible:
            assert bound <= min(feasible) * (1 + 1e-6), (cap, bound, min(feasible))
        unfiltered = layout_bounds(capped, "energy")
        assert unfiltered.overflow_cap is None and bound >= float(unfiltered.to_go[0].min()) * (1 - 1e-9)
        rose = rose or bound > float(unfiltered.to_go[0].min()) * (1 + 1e-6)
        assert layout_bounds(capped_instance(inst, {"memory": lo}), "energy", drop_overflow=True) is lb
        if math.isfinite(hi):
            assert layout_bounds(capped_instance(inst, {"memory": hi}), "energy", drop_overflow=True) is not lb
    if case == "fc":
        assert rose  # a cap below the FC layer's weights forces a split: the bound rises


@pytest.mark.slow
def test_energy_memory_fronts_equal_brute_force_and_record_each_step():
    """With the filtered relaxation in every capped step; each step records its time and memory."""
    for case in ("fc", "residual-external"):
        front = pareto_front(CASES[case](), ["energy", "memory"])
        assert front.certified, front.message
        same_vectors(front.vectors(), brute_front(case, ["energy", "memory"]))
        check_points(front, case)
        assert all(s.rss_bytes and s.rss_bytes > 0 and s.time_s >= 0 for s in front.steps)
        assert all("rss_bytes" in s and "time_s" in s for s in front.to_dict()["steps"])


def test_release_memory_returns_freed_garbage():
    """A step's garbage (here a reference cycle holding 64 MB) is gone after ``release_memory``."""

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    a.blob = bytearray(64 * 2**20)
    a.blob[::4096] = b"x" * len(a.blob[::4096])  # touch every page
    held = rss_bytes()
    del a, b
    after = release_memory()
    assert after == pytest.approx(rss_bytes(), rel=0.05)
    assert held - after > 48 * 2**20


def test_planner_options_are_checked_and_keep_the_lexicographic_graph():
    inst = CASES["fc"]()
    with pytest.raises(PlannerError, match="memory_budjet"):
        pareto_front(inst, ["energy", "memory"], planner_options={"memory_budjet": "8GB"})
    with pytest.raises(PlannerError, match="memory_budget"):
        pareto_front(inst, ["energy", "memory"], planner_options={"memory_budget": "lots"})
    front = pareto_front(inst, ["energy", "memory"], planner_options={"memory_budget": "8GB", "max_arcs": 100000})
    assert front.certified
    same_vectors(front.vectors(), brute_front("fc", ["energy", "memory"]))
    from milp_planner.pareto import _lex_options

    assert _lex_options("milp", {"memory_budget": "8GB"}) == {"max_arcs": 3_000_000, "budget": 8 * 10**9}
    assert _lex_options("cpsat", {"memory_budget": "8GB"}) == {}


@pytest.mark.parametrize("lexicographic", ["steps", "lazy"])
def test_a_step_without_a_plan_ends_the_front_and_keeps_its_bound(lexicographic):
    """A step that stops on the memory budget with a proven bound and no plan: the front stops
    there (no point to take the next cap from), names the step, and its bound joins the set."""
    case = "residual-external"
    real = get_planner("milp", anytime=False)
    calls = []

    def solve(capped, objective, time_limit):
        calls.append(objective)
        res = real.solve(capped, objective=objective, time_limit=time_limit)
        if calls.count("energy") == 2 and objective == "energy":  # the second ε-step
            return PlanResult("milp", "error", objective, bound=res.bound * 0.999,
                              message="the memory budget of 1 GB was hit (resident memory 1 GB); no plan yet")
        return res

    front = pareto_front(CASES[case](), ["energy", "memory"], solve=solve, lexicographic=lexicographic)
    assert not front.certified and len(front.points) == 1
    # lazy: the failed step's bound (above the point's energy) shows the point non-dominated
    assert front.points[0].status == "optimal"
    assert "ε-step 2 (memory <= " in front.message and "memory budget" in front.message
    last = front.steps[-1]
    assert last.status == "error" and last.bound > 0 and "memory budget" in last.message
    assert below_bound_set(front.bound_set, ["energy", "memory"], case) == []
    # below the failed step's cap, energy is at least its bound (and the first step's)
    floor = min(b["energy"] for b in front.bound_set if b["memory"] == 0.0)
    assert floor == pytest.approx(max(last.bound, front.steps[0].bound))


def test_a_step_whose_planner_refuses_ends_the_front_with_its_points():
    """A step planner that raises (a space too large for that step) does not lose the front:
    the points found so far are returned and the message names the step and the reason."""
    case = "residual-external"
    real = get_planner("milp", anytime=False)
    calls = []

    def solve(capped, objective, time_limit):
        calls.append(objective)
        if calls.count("energy") == 2 and objective == "energy":
            raise PlannerError("the plan space has more than 3000000 stage arcs (test)")
        return real.solve(capped, objective=objective, time_limit=time_limit)

    front = pareto_front(CASES[case](), ["energy", "memory"], solve=solve)
    assert not front.certified and len(front.points) == 1
    assert "ε-step 2" in front.message and "stage arcs" in front.message
    assert front.steps[-1].status == "error"
    assert below_bound_set(front.bound_set, ["energy", "memory"], case) == []


def test_a_tiny_memory_budget_stops_with_a_valid_bound_set():
    """The real machinery under a budget every step exceeds: no crash, not certified, a one-line
    message, and no feasible plan below the bound set."""
    case = "fc"
    front = pareto_front(CASES[case](), ["energy", "memory"], planner_options={"memory_budget": "1MB"})
    assert not front.certified
    assert "memory budget" in front.message and "\n" not in front.message
    assert below_bound_set(front.bound_set, ["energy", "memory"], case) == []


def test_cli_option(capsys):
    assert main(["pareto", TINY, "--objectives", "energy,memory", "-O", "memory_budget=8GB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["certified"] and all("rss_bytes" in s for s in data["steps"])
    assert main(["pareto", TINY, "--objectives", "energy,memory", "--lexicographic", "steps", "--json"]) == 0
    assert [q["values"] for q in json.loads(capsys.readouterr().out)["points"]] == [q["values"] for q in data["points"]]
    for bad, word in (("memory_budjet=8GB", "did you mean 'memory_budget'"), ("memory_budget=8XB", "8XB"),
                      ("memory_budget", "KEY=VALUE")):
        assert main(["pareto", TINY, "--objectives", "energy,memory", "-O", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and word in err, err


def test_memo_is_keyed_by_filtering():
    """The unfiltered bounds (no memory caps dropped, e.g. for ``explain_infeasible``'s whole
    graph) are never served from a filtered entry, nor the other way round."""
    inst = capped_instance(CASES["fc"](), {"memory": memory_caps("fc")[-1]})
    relaxation._MEMO.clear()
    filtered = layout_bounds(inst, "energy", drop_overflow=True)
    plain = layout_bounds(inst, "energy")
    assert filtered is not plain and plain.overflow_cap is None and filtered.overflow_cap is not None
    assert layout_bounds(inst, "energy", drop_overflow=True) is filtered
    assert layout_bounds(inst, "energy") is plain


def test_lazy_point_not_confirmed_when_the_next_step_proves_nothing():
    """Lazy: a point is ``optimal`` only once the next ε-step proved a larger f1 below its f2."""
    real = get_planner("milp", anytime=False)
    calls = []

    def solve(capped, objective, time_limit):
        calls.append(objective)
        if len(calls) >= 2:  # the floor of memory and the next ε-step prove nothing
            return PlanResult("milp", "timeout", objective, message="the time limit ran out")
        return real.solve(capped, objective=objective, time_limit=time_limit)

    front = pareto_front(CASES["fc"](), ["energy", "memory"], solve=solve, lexicographic="lazy")
    assert [p.status for p in front.points] == ["feasible"] and not front.certified
    with pytest.raises(PlannerError, match="lexicographic"):
        pareto_front(CASES["fc"](), ["energy", "memory"], lexicographic="never")


@pytest.mark.parametrize("objs", [["energy", "memory"], ["latency", "memory"], ["energy", "period"]])
def test_lazy_and_lexicographic_steps_give_the_same_certified_front(objs):
    case = "residual-external"
    lazy = pareto_front(CASES[case](), objs, lexicographic="lazy")
    steps = pareto_front(CASES[case](), objs, lexicographic="steps")
    assert lazy.certified and steps.certified
    same_vectors(lazy.vectors(), brute_front(case, objs))
    same_vectors(steps.vectors(), brute_front(case, objs))
    check_points(lazy, case)


@pytest.mark.parametrize("lexicographic", ["steps", "lazy"])
def test_a_plan_over_the_cap_by_the_solver_tolerance_retries_the_step_a_step_lower(lexicographic):
    """The second ε-step's solver returns a plan 1 byte over the memory cap (HiGHS's integrality
    tolerance did this on ResNet-101): its bound is kept, the step is retried a step lower, and
    the front goes on; it is certified only if the bound covers the range between the caps."""
    from milp_planner.cost.evaluator import evaluate

    case = "residual-external"
    real = get_planner("milp", anytime=False)
    energy_calls = []

    def solve(capped, objective, time_limit):
        res = real.solve(capped, objective=objective, time_limit=time_limit)
        if objective == "energy":
            energy_calls.append(capped)
        if len(energy_calls) == 2 and objective == "energy" and res.plan is not None:
            first = real.solve(energy_calls[0], objective="energy")  # the first point's plan: over this cap
            over = evaluate(first.plan, capped)
            assert not over.feasible
            return PlanResult("milp", "optimal", objective, plan=first.plan, value=over.energy_j,
                              bound=over.energy_j, metrics=over)
        return res

    front = pareto_front(CASES[case](), ["energy", "memory"], solve=solve, lexicographic=lexicographic)
    broke = [s for s in front.steps if "breaks the caps" in s.message]
    assert len(broke) == 1 and broke[0].status == "error"
    after = front.steps[front.steps.index(broke[0]) + 1]
    assert after.caps["memory"] < broke[0].caps["memory"]
    assert below_bound_set(front.bound_set or [], ["energy", "memory"], case) == [] or front.certified
    expected = brute_front(case, ["energy", "memory"])
    assert set(front.vectors()) <= {tuple(v) for v in expected} or all(
        any(v == pytest.approx(w, rel=1e-6) for w in expected) for v in front.vectors())
    # the broken step's bound (the first point's energy) lies below the retried step's optimum
    assert not front.certified and "retried a step lower" in front.message


@pytest.mark.parametrize("planner", ["milp", "dp", "cpsat"])
def test_a_cap_below_every_part_is_proven_infeasible_by_the_relaxation_alone(planner):
    """Every layout of a stage needs more than the cap: the filtered relaxation's bound is
    infinite, and one empty round (no arc enumerated) proves the caps infeasible (before, the
    rounds enumerated the whole space unbounded: SpaceTooLarge on VGG-19 under 100 MB)."""
    inst = CASES["fc"]()
    least = min(part_need(tab.groups[g]) for tab in layout_bounds(inst, "energy").tables.values()
                for g in range(len(tab.groups)))
    capped = capped_instance(inst, {"memory": least - 1})
    assert math.isinf(float(layout_bounds(capped, "energy", drop_overflow=True).to_go[0].min()))
    res = get_planner(planner, anytime=False).solve(capped, objective="energy")
    assert res.status == "infeasible" and res.plan is None
    assert res.info.get("rounds") == 1 and res.info.get("stage_arcs") == 0
    assert get_planner("bruteforce").solve(capped, objective="energy").status == "infeasible"


@pytest.mark.parametrize("case", list(CASES))
def test_part_need_with_reads_never_exceeds_an_arcs_memory(case):
    """``part_need(grp, pr)`` (weights, computed and read bytes of a part) is at most the memory
    the evaluator charges the part's device for that stage (its weights plus its working set),
    on every arc of the whole space: the relaxation may drop a layout whose need exceeds the
    cap. (Counting a read twice, or the device's other live tensors, would break this.)"""
    from dataclasses import replace

    from formulations.options import stage_groups
    from formulations.stagegraph import build_stage_graph
    from milp_planner.cost.evaluator import pricer

    inst = CASES[case]()
    inst = capped_instance(inst, {"memory": 10**15})  # memory priced, no cap binds
    pr = pricer(inst)
    sg = build_stage_graph(inst, objective="energy")
    groups = {}
    tight = 0
    for arc in sg.arcs:
        o = arc.option
        key = (o.first, o.last)
        if key not in groups:
            groups[key] = {(g.axis, g.ranges): g for g in stage_groups(inst, pr, o.first, o.last)}
        grp = groups[key][(o.axis, o.ranges)]
        for i, d in enumerate(o.devices):
            alone = replace(grp, geos=[grp.geos[i]], weights=(grp.weights[i],), computed=(grp.computed[i],))
            need = part_need(alone, pr)  # part i's need alone
            assert need <= arc.weights[d] + arc.working[d]
            tight += need == arc.weights[d] + arc.working[d]
        assert part_need(grp, pr) >= part_need(grp)
    assert tight  # the bound is reached (a part that owns nothing else before its stage)


@pytest.mark.parametrize("planner", ["milp", "dp"])
def test_a_cap_below_every_parts_reads_is_proven_infeasible_by_the_relaxation(planner):
    """A cap that every layout of some stage exceeds only once its reads are counted: the
    relaxation's bound is infinite, the planners prove the caps infeasible at once, as brute
    force does."""
    from milp_planner.cost.evaluator import pricer

    inst = CASES["fc"]()
    pr = pricer(inst)
    tables = layout_bounds(inst, "energy").tables.values()
    # per stage, the least need of its layouts; the stage whose least need is largest decides
    strong = max(min(part_need(g, pr) for g in tab.groups) for tab in tables)
    weak = max(min(part_need(g) for g in tab.groups) for tab in tables)
    assert strong > weak
    capped = capped_instance(inst, {"memory": strong - 1})
    assert math.isinf(float(layout_bounds(capped, "energy", drop_overflow=True).to_go[0].min()))
    res = get_planner(planner, anytime=False).solve(capped, objective="energy")
    assert res.status == "infeasible" and res.plan is None
    assert get_planner("bruteforce").solve(capped, objective="energy").status == "infeasible"

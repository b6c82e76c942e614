"""Every exit of the rounds loop (``milp_planner.engine.rounds.explore``), each from a scripted scenario.

The graph builder, the warm start and the graph solver are injected, and the relaxation's bound
is fixed at 1.0, so each test states exactly what each round's graph holds (``outside``: the
least value of any plan left out of it) and what its solve proved; the test then says what the
rounds may claim. The exits of ``ExactPlanner`` (no plan, a solver that disagrees with the
evaluator, a result not certified) follow at the end.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from builders import chain_graph, device, make_instance

import milp_planner.engine.course as course
import milp_planner.engine.rounds as rounds
from formulations.budget import MemoryBudgetExceeded
from formulations.certificate import Exploration, GraphSolve, MemoryStop, SpaceTimeout
from milp_planner.engine.rounds import RoundSettings, explore
from formulations.stagegraph import SpaceTooLarge
from milp_planner.errors import PlannerError
from milp_planner.deadline import NEVER, Deadline
from milp_planner.instance import SearchSpace

INF = math.inf


class Graph:
    """A round's graph as the rounds see it: what it leaves out, its size, and its solve."""

    def __init__(self, outside: float, solve: GraphSolve | None = None, arcs: int = 10):
        self.outside = outside
        self.solve = solve
        self.forward_arcs = arcs
        self.arcs = [None] * arcs
        self.n_nodes = 3
        self.build_time_s = 0.0

    def path_value(self, arcs, objective):
        return self.solve.value


def _instance():
    devs = [device("a", 1000, "0.01"), device("b", 2500, "0.02")]
    return make_instance(chain_graph(3), devs, bw=[[0, 100.0], [250.0, 0]],
                         search=SearchSpace(2, 2, ("equal",), ("rows",)))


def run(monkeypatch, script, incumbent=None, objective="latency", time_limit=None, settings=None, full=None):
    """The rounds over ``script``: one Graph or exception per round, in order; ``full``: the
    full relaxation (default: bound 1.0)."""
    full = SimpleNamespace(lower=1.0) if full is None else full
    monkeypatch.setattr(rounds, "_full_bounds", lambda *a, **k: full)
    monkeypatch.setattr(rounds, "_floor", lambda *a, **k: 0.0)
    monkeypatch.setattr(rounds, "_flow_to_go", lambda *a, **k: None)
    steps = list(script)
    built = []

    def build_graph(instance, **kw):
        built.append(kw.get("upper"))
        step = steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def warm_start(sg, objective, deadline, prior):
        empty = sg.solve is None
        return SimpleNamespace(fixing=None, empty=empty, capped_exact=False)

    ctx = SimpleNamespace(objective=objective, deadline=Deadline.after(time_limit), report=lambda **k: None)
    ex = explore(_instance(), ctx, lambda sg, c, ws: sg.solve, warm_start, settings or RoundSettings(), incumbent,
                 build_graph=build_graph)
    ex.built = built
    return ex


def optimal(value, bound=None):
    return GraphSolve([1], value, value if bound is None else bound, True)


def test_a_plan_no_worse_than_everything_left_out_is_certified(monkeypatch):
    ex = run(monkeypatch, [Graph(1.2, optimal(1.1))])
    assert ex.certified and ex.rounds == 1 and ex.found.value == 1.1
    assert ex.lower == pytest.approx(1.1)


def test_a_plan_worse_than_what_was_left_out_is_not_certified(monkeypatch):
    # round 1's best plan (1.1) is worse than a plan it left out (>= 1.05): the next round holds
    # every plan up to 1.1 and only then certifies
    ex = run(monkeypatch, [Graph(1.05, optimal(1.1)), Graph(INF, optimal(1.1))])
    assert ex.certified and ex.rounds == 2


def test_the_bound_is_the_least_of_what_the_graph_and_the_outside_prove(monkeypatch):
    stopped = GraphSolve([1], 1.4, 1.2, False, stopped=True)  # the solver proved 1.2 over its graph
    ex = run(monkeypatch, [Graph(1.5, stopped)])
    assert not ex.certified and ex.timed_out
    assert ex.lower == pytest.approx(1.2)  # not 1.5: the graph's plans are only proven >= 1.2
    assert ex.found.value == 1.4


def test_a_solve_capped_at_a_cutoff_proves_no_more_than_the_cutoff(monkeypatch):
    capped = GraphSolve([], None, None, False, infeasible=True, cutoff=1.1)
    ex = run(monkeypatch, [Graph(1.3, capped), Graph(INF, optimal(1.25))])
    assert ex.certified and ex.found.value == 1.25


def test_time_out_building_before_any_plan_raises_with_what_was_proven(monkeypatch):
    with pytest.raises(SpaceTimeout) as err:
        run(monkeypatch, [TimeoutError()])
    assert err.value.lower == pytest.approx(1.0)


def test_time_out_building_after_a_plan_returns_it_uncertified(monkeypatch):
    ex = run(monkeypatch, [Graph(1.05, optimal(1.1)), TimeoutError()])
    assert ex.timed_out and not ex.certified and ex.found.value == 1.1
    assert ex.lower == pytest.approx(1.05)


def test_a_space_too_large_before_any_plan_raises(monkeypatch):
    with pytest.raises(SpaceTooLarge):
        run(monkeypatch, [SpaceTooLarge("too many")] * 200)


def test_a_space_too_large_after_a_plan_stops_with_the_bound(monkeypatch):
    ex = run(monkeypatch, [Graph(1.05, optimal(1.1))] + [SpaceTooLarge("too many")] * 200)
    assert not ex.certified and not ex.timed_out and ex.found.value == 1.1
    assert ex.lower == pytest.approx(1.05)


def test_a_space_too_large_retries_halfway_back(monkeypatch):
    ex = run(monkeypatch, [Graph(1.01, None, arcs=100), SpaceTooLarge("too many"), Graph(INF, optimal(1.02))])
    assert ex.certified and ex.rounds == 3
    assert ex.built[0] < ex.built[2] < ex.built[1]  # halfway between the last finished round and the refused one


def test_a_planner_error_before_any_plan_raises(monkeypatch):
    with pytest.raises(PlannerError):
        run(monkeypatch, [PlannerError("cannot list")])


def test_a_planner_error_with_an_incumbent_is_a_refusal_with_the_bound(monkeypatch):
    ex = run(monkeypatch, [PlannerError("cannot list")], incumbent=2.0)
    assert ex.refused == "cannot list" and not ex.certified and ex.found is None
    assert ex.lower == pytest.approx(1.0)


def test_a_planner_error_after_a_plan_stops(monkeypatch):
    ex = run(monkeypatch, [Graph(1.05, optimal(1.1)), PlannerError("cannot list")])
    assert not ex.certified and ex.found.value == 1.1 and ex.lower == pytest.approx(1.05)


def test_no_plan_in_the_whole_space_is_infeasible(monkeypatch):
    ex = run(monkeypatch, [Graph(INF, None)])
    assert ex.infeasible and ex.found is None and not ex.certified


def test_a_solver_proving_its_whole_graph_infeasible_is_infeasible(monkeypatch):
    ex = run(monkeypatch, [Graph(INF, GraphSolve([], None, None, False, infeasible=True))])
    assert ex.infeasible


def test_an_empty_round_raises_the_bound_to_what_it_left_out(monkeypatch):
    ex = run(monkeypatch, [Graph(1.3, None), Graph(INF, optimal(1.4))])
    assert ex.certified and ex.found.value == 1.4 and ex.lower >= 1.3


def test_an_empty_round_then_a_time_out_keeps_what_the_empty_round_proved(monkeypatch):
    with pytest.raises(SpaceTimeout) as err:
        run(monkeypatch, [Graph(1.3, None), TimeoutError()])
    assert err.value.lower == pytest.approx(1.3)  # every plan lies outside a graph that left out >= 1.3


def test_without_bounds_one_round_over_everything_proves_the_solver_bound_only(monkeypatch):
    unbounded = RoundSettings(bounded=False)
    ex = run(monkeypatch, [Graph(INF, optimal(1.1))], settings=unbounded)
    assert ex.certified and ex.lower == pytest.approx(1.1)
    ex = run(monkeypatch, [Graph(INF, GraphSolve([1], 1.4, 1.2, False, stopped=True))], settings=unbounded)
    assert not ex.certified and ex.lower == pytest.approx(1.2) and ex.found.value == 1.4
    ex = run(monkeypatch, [Graph(INF, GraphSolve([1], 1.15, None, False))], settings=unbounded)
    assert not ex.certified and ex.lower is None  # a solver that proves nothing: no bound at all


def test_an_incumbent_at_the_bound_ends_the_rounds_at_once(monkeypatch):
    ex = run(monkeypatch, [], incumbent=1.0)
    assert ex.rounds == 0 and ex.found is None and not ex.certified and ex.lower == pytest.approx(1.0)


def test_an_incumbent_proven_by_a_round_ends_them(monkeypatch):
    # the round proves everything below 1.5 absent; the incumbent is 1.5
    ex = run(monkeypatch, [Graph(1.5, GraphSolve([], None, None, False, infeasible=True, cutoff=1.5))],
             incumbent=1.5)
    assert ex.found is None and not ex.certified and ex.lower >= 1.5 * (1 - 1e-7)


def test_a_solver_that_stops_ends_the_rounds_timed_out(monkeypatch):
    ex = run(monkeypatch, [Graph(1.2, GraphSolve([1], 1.15, 1.0, False, stopped=True))])
    assert ex.timed_out and not ex.certified and ex.lower == pytest.approx(1.0)


def test_a_solver_that_proves_nothing_ends_the_rounds(monkeypatch):
    ex = run(monkeypatch, [Graph(1.2, GraphSolve([1], 1.15, None, False))])
    assert not ex.certified and not ex.timed_out and ex.lower == pytest.approx(1.0)


def test_the_memory_budget_before_any_plan_raises(monkeypatch):
    with pytest.raises(MemoryStop):
        run(monkeypatch, [MemoryBudgetExceeded(10**10, 10**9)])


def test_the_memory_budget_after_a_plan_stops_with_it(monkeypatch):
    ex = run(monkeypatch, [Graph(1.05, optimal(1.1)), MemoryBudgetExceeded(10**10, 10**9)])
    assert ex.memory_out and not ex.certified and ex.found.value == 1.1


def test_a_jump_over_the_memory_budget_crawls_back_and_keeps_proving(monkeypatch):
    """Period with a plan known at 1.5: the small first round finds nothing, the jump to 1.5
    hits the memory budget, and the rounds crawl on from the first round's bound (before, the
    budget ended them there: a longer time limit, letting the jump grow further, proved less)."""
    monkeypatch.setattr(rounds, "_threshold", lambda *a, **k: None)
    ex = run(monkeypatch, [Graph(1.0025, None, arcs=50), MemoryBudgetExceeded(10**10, 10**9),
                           Graph(1.01, None, arcs=80), Graph(1.02, None, arcs=90), MemoryBudgetExceeded(10**10, 10**9)],
             incumbent=1.5, objective="period", full=SimpleNamespace(lower=1.0))
    assert ex.built[1] == pytest.approx(1.5)  # the jump
    assert all(u < 1.5 for u in ex.built[2:])  # then the crawl, below it
    assert ex.memory_out and not ex.certified  # a crawl round over the budget ends the rounds, as before
    assert ex.lower == pytest.approx(1.02)  # what the crawl proved after the jump


def test_the_time_limit_between_rounds(monkeypatch):
    with pytest.raises(SpaceTimeout):
        run(monkeypatch, [Graph(1.3, None)], time_limit=0.0)


# -- the exact planner's exits -------------------------------------------------------------


def test_no_plan_and_nothing_proven_infeasible_is_an_error_with_the_bound(monkeypatch):
    from milp_planner.planners import exact

    monkeypatch.setattr(exact, "explore", lambda *a, **k: Exploration(None, None, 1e-9, False, 1, 0.0))
    res = exact.DPPlanner(anytime=False).solve(_instance(), objective="latency")
    assert res.status == "error" and res.plan is None and res.bound is not None


def test_a_solver_that_disagrees_with_the_evaluator_raises(monkeypatch):
    from milp_planner.engine.drivers import solve_dp
    from milp_planner.planners import exact

    class Lying(exact.DPPlanner):
        def solve_graph(self, sg, ctx, ws):
            found = solve_dp(sg, ctx.objective, ws)
            found.value *= 1.01
            return found

    monkeypatch.setattr(rounds, "graph_answer", lambda sg, ctx, ws, solve_graph: solve_graph(sg, ctx, ws))
    with pytest.raises(RuntimeError, match="disagrees with the evaluator"):
        Lying(anytime=False).solve(_instance(), objective="latency")


def test_an_uncertified_round_reports_its_bound_not_the_plan_value(monkeypatch):
    from milp_planner.cost.floors import lower_floor
    from milp_planner.planners import exact

    inst = _instance()
    real = exact.explore

    def uncertified(*a, **k):
        ex = real(*a, **k)
        assert ex.certified
        ex.certified, ex.lower = False, 0.5 * ex.found.value
        return ex

    monkeypatch.setattr(exact, "explore", uncertified)
    res = exact.DPPlanner(anytime=False).solve(inst, objective="latency")
    floor = lower_floor(inst, "latency").value
    expected = max(0.5 * res.value, floor)
    if expected >= res.value * (1 - 1e-6):
        pytest.skip("the floor alone proves this plan optimal")
    assert res.status == "feasible" and res.bound == pytest.approx(expected)


def test_a_time_out_before_any_plan_returns_the_single_device_plan_and_what_was_proven(monkeypatch):
    from milp_planner.cost.floors import lower_floor
    from milp_planner.planners import exact, get_planner

    inst = _instance()
    best = get_planner("bruteforce").solve(inst, objective="latency").value
    floor = lower_floor(inst, "latency").value
    proven = (floor + best) / 2  # above every floor, below the optimum

    def stopped(*a, **k):
        raise SpaceTimeout(proven)

    monkeypatch.setattr(exact, "explore", stopped)
    res = exact.DPPlanner(anytime=False).solve(inst, objective="latency")
    assert res.status == "timeout" and res.plan is not None
    assert len({p.device for s in res.plan.stages for p in s.parts}) == 1
    assert res.bound == pytest.approx(proven) and res.bound_source == "rounds"
    assert "proven bound" in res.message


def test_a_time_out_before_any_plan_never_returns_a_plan_over_the_caps(monkeypatch):
    from dataclasses import replace

    from milp_planner.planners import exact, get_planner

    inst = _instance()
    one = get_planner("offload").solve(inst, objective="latency").metrics
    cap = min(v for v in one.memory_bytes.values() if v) - 1  # every single-device plan breaks it
    inst.devices = tuple(replace(d, memory_bytes=cap) for d in inst.devices)

    def stopped(*a, **k):
        raise SpaceTimeout(None)

    monkeypatch.setattr(exact, "explore", stopped)
    res = exact.DPPlanner(anytime=False).solve(inst, objective="latency")
    assert res.plan is None and res.status == "timeout" and "no plan yet" in res.message


def test_below_an_overflow_the_rounds_bisect_and_stop_when_nothing_is_left():
    from milp_planner.engine.course import below_overflow as _below_overflow

    seen = [(1.5, INF), (1.3, 1000)]  # (bound, cap) of two rounds that overflowed
    assert _below_overflow(1.2, 1.0, 1000, seen) == 1.2  # below every overflow: as asked
    assert _below_overflow(1.4, 1.0, 1000, seen) == pytest.approx(1.15)  # halfway to 1.3
    assert _below_overflow(1.4, 1.0, 4000, seen) == 1.4  # a larger cap than 1.3's: only 1.5 binds
    assert _below_overflow(1.6, 1.0, 4000, seen) == pytest.approx(1.25)
    assert _below_overflow(1.4, 1.29999, 1000, seen) is None  # 1.3 is within TINY_STEP: nothing left


def test_period_rounds_never_retry_a_bound_that_overflowed(monkeypatch):
    """Period with an incumbent at 1.5: every graph within 1.4 or more overflows, below it a
    round finds no plan and proves its bound. After the jump to the incumbent overflows, no
    round goes back above an overflow (before, each round that finished jumped back to the
    incumbent and bisected down again), and the rounds stop once the bound is within
    TINY_STEP of the overflow, with that bound proven."""
    monkeypatch.setattr(rounds, "_full_bounds", lambda *a, **k: SimpleNamespace(lower=1.0))
    monkeypatch.setattr(rounds, "_floor", lambda *a, **k: 0.0)
    monkeypatch.setattr(rounds, "_threshold", lambda *a, **k: None)
    built = []

    def build_graph(instance, **kw):
        upper = kw["upper"]
        built.append(upper)
        assert len(built) < 200, "the rounds do not stop"
        if upper >= 1.4:
            raise SpaceTooLarge("too many")
        return Graph(upper * (1 + 1e-9), None, arcs=50)

    def warm_start(sg, objective, deadline, prior):
        return SimpleNamespace(fixing=None, empty=sg.solve is None, capped_exact=False)

    ctx = SimpleNamespace(objective="period", deadline=NEVER, report=lambda **k: None)
    ex = explore(_instance(), ctx, lambda sg, c, ws: sg.solve, warm_start, RoundSettings(), 1.5, build_graph=build_graph)
    failed = [u for u in built if u >= 1.4]
    assert failed[0] == pytest.approx(1.5)  # the jump
    assert all(u < 1.5 for u in built[built.index(failed[0]) + 1:])
    assert all(b < a for a, b in zip(failed, failed[1:]))  # each overflow below the last: a bisection
    assert len(built) < 60
    assert ex.found is None and not ex.certified
    assert 1.4 * (1 - 2 * course.TINY_STEP) <= ex.lower < 1.4


# -- the coarse relaxation with link-group blocks beside a full relaxation without them -----

def _blocks_beside(monkeypatch, coarse, blocks_off="9,594 classes with link-group blocks after layer 2"):
    """The full relaxation (bound 1.0, returned) left blocks out (``blocks_off``) on an instance
    with link groups; ``coarse`` stands for the coarse relaxation with blocks (a bound, or an
    exception). Returns the pass's calls and the full relaxation."""
    import formulations.coarse
    import formulations.link_groups

    calls = []

    def coarse_bounds(instance, objective, **kw):
        calls.append(kw)
        if isinstance(coarse, BaseException):
            raise coarse
        return SimpleNamespace(lower=coarse)

    monkeypatch.setattr(formulations.coarse, "coarse_bounds", coarse_bounds)
    monkeypatch.setattr(formulations.link_groups, "node_ids", lambda inst: [0, 1])
    return calls, SimpleNamespace(lower=1.0, blocks_off=blocks_off)


def test_the_coarse_bound_with_blocks_is_proven_beside_a_full_relaxation_without(monkeypatch):
    """Latency: the coarse relaxation with blocks (1.5) beats the full one without (1.0). The
    rounds start from it, and a time-out before any plan reports it as the coarse relaxation's,
    with the pass in ``coarse``."""
    calls, full = _blocks_beside(monkeypatch, 1.5)
    with pytest.raises(SpaceTimeout) as err:
        run(monkeypatch, [TimeoutError()], full=full)
    assert calls and calls[0]["blocks"] is True and calls[0]["grid"] is None
    assert err.value.lower == 1.5 and err.value.lower_source == "coarse"
    assert err.value.coarse["lower"] == 1.5 and err.value.coarse["passes"][0]["blocks"] is True


def test_a_round_that_proves_more_than_the_coarse_bound_is_the_source(monkeypatch):
    """The first round (from the coarse bound 1.5) finds no plan and proves 1.8: the bound is the
    rounds' own; the next round certifies a plan of 1.9."""
    _, full = _blocks_beside(monkeypatch, 1.5)
    ex = run(monkeypatch, [Graph(1.8), Graph(2.5, optimal(1.9))], full=full)
    assert ex.built[0] == pytest.approx(1.5 * (1 + RoundSettings().delta))
    assert ex.certified and ex.found.value == 1.9 and ex.coarse["lower"] == 1.5


def test_a_coarse_bound_with_blocks_below_the_full_one_is_not_the_source(monkeypatch):
    """The coarse relaxation with blocks proves less (0.8) than the full one (1.0): the full
    relaxation's bound stands and is not called the coarse one's."""
    _, full = _blocks_beside(monkeypatch, 0.8)
    with pytest.raises(SpaceTimeout) as err:
        run(monkeypatch, [TimeoutError()], full=full)
    assert err.value.lower == 1.0 and err.value.lower_source == ""


@pytest.mark.parametrize("stop", [TimeoutError(), SpaceTooLarge("too many"), MemoryBudgetExceeded(10**10, 10**9)])
def test_a_coarse_pass_that_stops_proves_nothing_and_says_so(monkeypatch, stop):
    _, full = _blocks_beside(monkeypatch, stop)
    with pytest.raises(SpaceTimeout) as err:
        run(monkeypatch, [TimeoutError()], full=full)
    assert err.value.lower == 1.0 and err.value.lower_source == ""
    assert err.value.coarse["lower"] is None and err.value.coarse["blocks"] is False


@pytest.mark.parametrize("objective, blocks_off", [("latency", ""), ("energy", "too many"), ("period", "too many")])
def test_the_coarse_pass_runs_only_for_latency_without_blocks(monkeypatch, objective, blocks_off):
    calls, full = _blocks_beside(monkeypatch, 1.5, blocks_off=blocks_off)
    with pytest.raises(SpaceTimeout) as err:
        run(monkeypatch, [TimeoutError()], objective=objective, full=full)
    assert not calls and err.value.lower == 1.0

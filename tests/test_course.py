"""Every transition of the rounds' state machine (``milp_planner.engine.course.Course``).

Each test starts a course in one mode, reports one outcome of a round, and states where the
next round goes: its mode, its bound, the arcs it may enumerate and its share of the time. The
rounds' loop around it (graphs, solves, certificates) is tested in ``test_rounds_exits.py``.
"""

from __future__ import annotations

import doctest
import math

import pytest

import milp_planner.engine.course as course_module
from milp_planner.engine.course import (FIRST_CAP, FIRST_SHARE, JUMP_SHARE, MIN_GROWTH, TINY_GRAPH, Course, Mode,
                                        RoundSettings, Step, aim, below_overflow)
from milp_planner.deadline import NEVER, Deadline

INF = math.inf
S = RoundSettings(max_arcs=1_000_000, round_budget=60_000, delta=0.01, growth=0.002)
LEFT = Deadline.after(3600.0)  # time left
PASSED = Deadline(0.0)  # a moment long past


def latency(lower=1.0, crawl_from=None, cap_at=INF, settings=S):
    return Course.start(False, True, lower, lower if crawl_from is None else crawl_from, cap_at, settings)


def period(lower=1.0, cap_at=INF, settings=S):
    return Course.start(True, True, lower, lower, cap_at, settings)


def test_the_module_examples_run():
    assert doctest.testmod(course_module).failed == 0


# -- the first round ---------------------------------------------------------------------------

def test_latency_crawls_from_just_above_the_bound():
    c = latency(1.0)
    assert c.mode is Mode.CRAWL and c.upper == pytest.approx(1.01)
    assert c.plan().max_arcs == FIRST_CAP and c.plan().share == 1.0


def test_latency_with_a_bound_known_above_the_relaxation_starts_there_with_the_budget():
    c = latency(2.0, crawl_from=1.0)
    assert c.mode is Mode.KNOWN and c.upper == pytest.approx(2.02)
    r = c.plan()
    assert (r.upper, r.max_arcs, r.share) == (c.upper, S.round_budget, 1.0)


def test_the_first_bound_is_never_past_the_incumbent():
    assert latency(1.0, cap_at=1.005).upper == 1.005


def test_period_with_a_plan_known_tries_a_small_first_round():
    c = period(1.0, cap_at=1.5)
    assert c.mode is Mode.FIRST
    r = c.plan()
    assert (r.upper, r.max_arcs, r.share) == (pytest.approx(1.01), S.round_budget, FIRST_SHARE)


@pytest.mark.parametrize("cap_at", [INF, 1.005])
def test_period_without_room_for_a_first_round_jumps_at_once_with_all_the_time(cap_at):
    c = period(1.0, cap_at=cap_at)
    assert c.mode is Mode.JUMP
    r = c.plan()
    assert (r.max_arcs, r.share) == (S.max_arcs, 1.0)


def test_a_bound_of_infinity_enumerates_nothing():
    """The relaxation proved every plan breaks a memory cap: a round within 0 shows it."""
    assert latency(INF).upper == 0.0 and period(INF, cap_at=2.0).upper == 0.0


@pytest.mark.parametrize("minmax", [False, True])
def test_unbounded_is_one_round_over_everything_with_every_arc(minmax):
    c = Course.start(minmax, False, None, None, INF, S)
    r = c.plan()
    assert r.upper == INF and r.max_arcs == S.max_arcs


# -- a round's time runs out -------------------------------------------------------------------

def test_a_first_round_out_of_its_share_goes_straight_to_the_plan():
    c = period(1.0, cap_at=1.5)
    c.plan()
    assert c.timed_out(LEFT) is Step.AGAIN
    assert c.mode is Mode.JUMP and c.upper == 1.5 and not c.overflowed
    r = c.plan()
    assert (r.upper, r.max_arcs, r.share) == (1.5, S.max_arcs, JUMP_SHARE)


def test_a_first_round_at_the_time_limit_stops():
    c = period(1.0, cap_at=1.5)
    c.plan()
    assert c.timed_out(PASSED) is Step.TIMED_OUT


def test_a_jump_out_of_its_share_crawls_from_the_last_bound_and_remembers_it():
    c = period(1.0, cap_at=1.5)
    c.plan(), c.built()
    c.advance(arcs=50, outside=1.02, best=None, lower=1.0, incumbent=1.4)
    done, growth = c.done_upper, c.growth
    assert c.plan().upper == 1.4
    assert c.timed_out(LEFT) is Step.AGAIN
    assert c.mode is Mode.CRAWL and c.upper == pytest.approx(done * (1 + growth))
    assert c.overflowed == [(1.4, INF)]


@pytest.mark.parametrize("deadline", [PASSED, NEVER])
def test_a_jump_at_the_time_limit_or_without_one_stops(deadline):
    c = period(1.0)
    c.plan()
    assert c.timed_out(deadline) is Step.TIMED_OUT


@pytest.mark.parametrize("make", [lambda: latency(1.0), lambda: latency(2.0, crawl_from=1.0)])
def test_an_additive_round_out_of_time_stops(make):
    c = make()
    c.plan()
    assert c.timed_out(LEFT) is Step.TIMED_OUT


# -- a round's graph is too large --------------------------------------------------------------

def test_a_known_round_too_large_crawls_from_the_relaxation():
    c = latency(2.0, crawl_from=1.0, cap_at=1.005)
    c.plan()
    assert c.too_large(S.round_budget) is Step.AGAIN
    assert c.mode is Mode.CRAWL and c.upper == 1.005  # crawl_from x (1 + delta), within the incumbent


def test_a_first_round_too_large_goes_straight_to_the_plan_without_recording_an_overflow():
    c = period(1.0, cap_at=1.5)
    c.plan()
    assert c.too_large(S.round_budget) is Step.AGAIN
    assert c.mode is Mode.JUMP and c.upper == 1.5 and c.overflowed == []


def test_a_jump_too_large_records_the_overflow_and_crawls():
    c = period(1.0, cap_at=1.5)
    c.plan(), c.built()
    c.advance(arcs=50, outside=1.02, best=None, lower=1.0, incumbent=1.4)
    c.plan()
    assert c.too_large(S.max_arcs) is Step.AGAIN
    assert c.mode is Mode.CRAWL and c.overflowed == [(1.4, S.max_arcs)]


def test_a_min_max_crawl_bisects_below_what_overflowed_and_ends_when_nothing_is_left():
    c = period(1.0)
    c.mode, c.done_upper, c.upper = Mode.CRAWL, 1.0, 1.2
    c.overflowed = [(1.1, S.max_arcs)]
    assert c.plan().upper == pytest.approx(1.05)  # halfway to the overflow
    c.overflowed = [(1.00001, S.max_arcs)]
    c.upper = 1.2
    assert c.plan() is None  # within TINY_STEP of the last bound: no round can prove more


def _crawled(prev_arcs=100):
    c = latency(1.0)
    c.plan(), c.built()
    c.advance(arcs=prev_arcs, outside=1.0, best=None, lower=1.0)
    return c


def test_a_crawl_round_tied_within_a_tiny_step_is_retried_four_times_larger():
    c = _crawled()
    c.upper = c.done_upper * 1.00001
    cap = c.plan().max_arcs
    assert c.too_large(cap) is Step.AGAIN
    assert c.upper == c.done_upper * 1.00001 and c.retry_cap == 4 * cap
    assert c.plan().max_arcs == min(c.crawl_cap(), 4 * cap)
    c.built()
    assert c.retry_cap == 0


def test_a_crawl_round_too_large_goes_halfway_back_with_a_smaller_step():
    c = _crawled()
    done, upper, growth = c.done_upper, c.upper, c.growth
    assert c.too_large(c.plan().max_arcs) is Step.AGAIN
    assert c.upper == pytest.approx(done + (upper - done) / 2)
    assert c.growth == max(growth / 4, MIN_GROWTH)


def test_a_crawl_round_too_large_at_every_arc_allowed_stops():
    c = _crawled()
    c.plan()
    assert c.too_large(S.max_arcs) is Step.TOO_LARGE


def test_a_crawl_round_over_everything_too_large_stops():
    c = _crawled()
    c.upper = INF
    assert c.too_large(c.plan().max_arcs) is Step.TOO_LARGE


# -- a round was built and solved without a certificate ------------------------------------------

def test_built_ends_the_first_and_known_modes():
    c = latency(2.0, crawl_from=1.0)
    c.plan(), c.built()
    assert c.mode is Mode.CRAWL and c.done_upper == c.upper
    c = period(1.0, cap_at=1.5)
    c.plan(), c.built()
    assert c.mode is Mode.JUMP


def test_the_step_doubles_while_the_graphs_grow_slowly_and_halves_when_they_grow_fast():
    c = _crawled(prev_arcs=100)
    assert c.growth == 2 * S.growth
    c.plan(), c.built()
    c.advance(arcs=100_000, outside=1.0, best=None, lower=1.0)
    assert c.growth == S.growth


def test_the_step_never_falls_below_the_least():
    c = _crawled()
    c.growth = MIN_GROWTH
    c.plan(), c.built()
    c.advance(arcs=10 ** 6, outside=1.0, best=None, lower=1.0)
    assert c.growth == MIN_GROWTH


def test_the_next_bound_is_past_everything_left_out():
    c = latency(1.0)
    c.plan(), c.built()
    c.advance(arcs=10, outside=1.3, best=None, lower=1.0)
    assert c.upper == 1.3


def test_the_next_bound_is_never_past_the_best_plan_found_nor_the_incumbent():
    c = latency(1.0, cap_at=1.2)
    c.plan(), c.built()
    c.advance(arcs=10, outside=1.5, best=1.1, lower=1.0)
    assert c.upper == 1.1
    c.plan(), c.built()
    c.advance(arcs=10, outside=1.5, best=None, lower=1.0)
    assert c.upper == 1.2


def test_far_above_the_bound_the_next_round_takes_every_plan_left():
    c = latency(1.0)
    c.plan(), c.built()
    c.advance(arcs=10, outside=2.5, best=None, lower=1.0)
    assert c.upper == INF


def test_a_min_max_round_that_held_the_best_plan_is_the_end():
    c = period(1.0)
    c.plan(), c.built()
    assert c.advance(arcs=10, outside=1.0, best=c.done_upper, lower=1.0) is Step.DONE


def test_a_min_max_round_goes_next_to_the_best_plan_found():
    c = period(1.0)
    c.plan(), c.built()
    assert c.advance(arcs=10, outside=1.0, best=1.3, lower=1.0) is Step.AGAIN
    assert c.upper == 1.3


def test_a_jump_without_a_plan_found_goes_to_the_incumbent():
    c = period(1.0, cap_at=1.5)
    c.plan(), c.built()
    c.advance(arcs=10, outside=1.0, best=None, lower=1.0, incumbent=1.45)
    assert c.upper == 1.45


def test_a_min_max_crawl_doubles_the_bound_while_its_graphs_are_tiny():
    c = period(1.0)
    c.mode = Mode.CRAWL
    c.plan(), c.built()
    c.advance(arcs=TINY_GRAPH - 1, outside=1.0, best=None, lower=1.0)
    assert c.upper == pytest.approx(2 * 1.01)
    c.plan(), c.built()
    c.advance(arcs=TINY_GRAPH, outside=1.0, best=None, lower=1.0)
    assert c.upper < 2 * 2.02


# -- the sizes and steps, at their edges (the mutation gate: benchmarks/mutation.py --only course) --

def test_a_crawl_round_after_a_large_one_may_grow_it_sixteenfold_within_four_times_the_budget():
    c = _crawled(prev_arcs=50_000)
    assert c.crawl_cap() == min(S.max_arcs, 4 * 50_000)
    assert c.plan().max_arcs == min(4 * 50_000, 16 * 50_000)
    c = _crawled(prev_arcs=1_000)
    assert c.plan().max_arcs == 16 * 1_000


def test_a_known_round_too_large_crawls_from_just_above_the_relaxation():
    c = latency(2.0, crawl_from=1.0)
    c.plan()
    c.too_large(S.round_budget)
    assert c.upper == pytest.approx(1.0 * (1 + S.delta))


def test_a_min_max_crawl_without_a_plan_found_does_not_jump_to_the_incumbent():
    c = period(1.0, cap_at=1.5)
    c.mode = Mode.CRAWL
    c.plan(), c.built()
    c.advance(arcs=TINY_GRAPH, outside=1.0, best=None, lower=1.0, incumbent=1.45)
    assert c.upper < 1.45


def test_a_bound_under_twice_the_proven_one_stays_finite():
    c = latency(2.0, crawl_from=2.0)
    c.plan(), c.built()
    c.advance(arcs=10, outside=3.0, best=None, lower=2.0)
    assert c.upper == 3.0
    c.plan(), c.built()
    c.advance(arcs=10, outside=4.0, best=None, lower=2.0)
    assert c.upper == 4.0  # at twice: still finite


@pytest.mark.parametrize("arcs,doubles", [(1200, True), (1201, False)])
def test_the_step_doubles_up_to_twice_the_last_round_plus_a_thousand_arcs(arcs, doubles):
    c = _crawled(prev_arcs=100)
    growth = c.growth
    c.plan(), c.built()
    c.advance(arcs=arcs, outside=1.0, best=None, lower=1.0)
    assert c.growth == (2 * growth if doubles else growth / 2)


def test_no_aim_from_rounds_at_one_bound_or_from_a_zero_bound():
    assert aim([(1.0, 10), (1.0, 20)]) == INF
    assert aim([(0.0, 10), (1.0, 20)]) == INF
    assert aim([(1.0, 10), (1.1, 10)]) == INF


def test_below_an_overflow_at_its_edges():
    seen = [(1.3, 1000)]
    assert below_overflow(1.3, 1.0, 1000, seen) == pytest.approx(1.15)  # at the overflow: halfway back
    assert below_overflow(1.2, 1.3, 1000, seen) == 1.2  # an overflow not above the last bound: as asked
    assert below_overflow(1.4, 1.3, 1000, seen) == 1.4  # (it bounds nothing above that round)

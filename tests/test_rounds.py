"""The rounds' step rule (``milp_planner.engine.rounds``): how far the next round's bound goes."""

from __future__ import annotations

import math

from milp_planner.engine.course import AIM_GROWTH, FIRST_CAP, aim as _aim


def _count(u, u1, a1, rate):
    return a1 * math.exp(rate * math.log(u / u1))


def test_aim_needs_two_rounds_that_grew():
    assert _aim([]) == math.inf
    assert _aim([(1.0, 10)]) == math.inf
    assert _aim([(1.0, 10), (1.01, 10)]) == math.inf  # no growth: nothing to fit
    assert _aim([(1.0, 10), (0.99, 100)]) == math.inf


def test_aim_of_a_very_slow_growth_is_no_bound():
    """differential seed 22804 (kept in tests/differential_corpus): the arcs barely grew while the
    bound doubled, and the fit's step overflowed math.exp (OverflowError out of pareto)."""
    assert _aim([(1.0, 10), (2.0, 11)]) < math.inf
    assert _aim([(1.0, 1000), (1e6, 1001)]) == math.inf
    assert _aim([(1e-300, 2), (1e300, 3)]) == math.inf


def test_aim_is_where_the_log_linear_fit_reaches_the_target():
    (u1, a1), (u2, a2) = (0.40957, 2), (0.41285, 394)  # VGG16 on four devices, rounds 2 and 3
    rate = math.log(a2 / a1) / math.log(u2 / u1)
    u = _aim([(u1, a1), (u2, a2)])
    assert u2 < u < 0.41841  # short of the incumbent, where more than 60,000 arcs lie
    target = max(AIM_GROWTH, FIRST_CAP / 2 / a2) * a2
    assert math.isclose(_count(u, u1, a1, rate), target, rel_tol=1e-9)
    # a large round aims at AIM_GROWTH times its arcs
    u = _aim([(1.0, 5000), (1.01, 20000)])
    rate = math.log(4) / math.log(1.01)
    assert math.isclose(_count(u, 1.0, 5000, rate), AIM_GROWTH * 20000, rel_tol=1e-9)

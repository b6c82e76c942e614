"""The one certificate rule (``milp_planner.certificate.certify``) from a table, and what a
graph solve proves (``GraphSolve.proven_in_graph``): every row is a case the rule must decide
exactly so; a loosened threshold, a dropped cap or a swapped status fails one of them."""

from __future__ import annotations

import math

import pytest

from formulations.certificate import GraphSolve
from milp_planner.certificate import OPTIMAL_GAP, Proof, certify, relative_gap

P = Proof

# (value, feasible, proofs, stopped, infeasible, exact) -> (status, bound, source)
TABLE = [
    # a plan within the caps, with proofs
    ((10.0, True, [P(10.0, "rounds")], False, False, True), ("optimal", 10.0, "rounds")),
    ((10.0, True, [P(10.0 * (1 - OPTIMAL_GAP), "rounds")], False, False, True),
     ("optimal", 10.0 * (1 - OPTIMAL_GAP), "rounds")),
    ((10.0, True, [P(10.0 * (1 - 1.5 * OPTIMAL_GAP), "rounds")], False, False, True),
     ("feasible", 10.0 * (1 - 1.5 * OPTIMAL_GAP), "rounds")),
    ((10.0, True, [P(10.0 * (1 - 1.5 * OPTIMAL_GAP), "rounds")], True, False, True),
     ("timeout", 10.0 * (1 - 1.5 * OPTIMAL_GAP), "rounds")),
    ((10.0, True, [P(9.0, "rounds")], False, False, True), ("feasible", 9.0, "rounds")),
    ((10.0, True, [P(9.0, "rounds")], True, False, True), ("timeout", 9.0, "rounds")),
    # a gap this small is optimal whatever stopped the run
    ((10.0, True, [P(10.0, "rounds")], True, False, True), ("optimal", 10.0, "rounds")),
    # the best proof wins, the first of equal ones; the bound never exceeds the value
    ((10.0, True, [P(8.0, "rounds"), P(9.0, "flow")], False, False, True), ("feasible", 9.0, "flow")),
    ((10.0, True, [P(9.0, "rounds"), P(9.0, "flow")], False, False, True), ("feasible", 9.0, "rounds")),
    ((10.0, True, [P(10.5, "certified")], False, False, True), ("optimal", 10.0, "certified")),
    ((10.0, True, [None, P(math.inf, "x"), P(math.nan, "y"), P(9.0, "z")], False, False, True),
     ("feasible", 9.0, "z")),
    # no proof
    ((10.0, True, [], False, False, False), ("feasible", None, "none")),
    ((10.0, True, [], True, False, False), ("timeout", None, "none")),
    ((10.0, True, [], False, False, True), ("feasible", None, "none")),
    # a value of 0 has gap 0
    ((0.0, True, [P(0.0, "weights")], False, False, True), ("optimal", 0.0, "weights")),
    # a plan that breaks the caps: an exact planner's is an error, a heuristic's infeasible; the
    # bound stays (it holds for the plans within the caps) even above the value
    ((10.0, False, [P(12.0, "rounds")], False, False, True), ("error", 12.0, "rounds")),
    ((10.0, False, [P(12.0, "rounds")], True, False, True), ("error", 12.0, "rounds")),
    ((10.0, False, [], False, False, False), ("infeasible", None, "none")),
    ((10.0, False, [P(3.0, "lp-relaxation")], False, False, False), ("infeasible", 3.0, "lp-relaxation")),
    # no plan
    ((None, None, [P(7.0, "rounds")], True, False, True), ("timeout", 7.0, "rounds")),
    ((None, None, [P(7.0, "rounds")], False, False, True), ("error", 7.0, "rounds")),
    ((None, None, [], False, False, False), ("error", None, "none")),
    # proven: no plan meets the caps
    ((None, None, [P(7.0, "rounds")], False, True, True), ("infeasible", None, "none")),
    ((None, None, [], True, True, True), ("infeasible", None, "none")),
]


@pytest.mark.parametrize("args, expected", TABLE)
def test_certify(args, expected):
    value, feasible, proofs, stopped, infeasible, exact = args
    cert = certify(value, feasible, proofs, stopped=stopped, infeasible=infeasible, exact=exact)
    status, bound, source = expected
    assert cert.status == status
    assert cert.bound_source == source
    if bound is None:
        assert cert.bound is None
    else:
        assert cert.bound == pytest.approx(bound, rel=1e-15, abs=0)


def test_optimal_exactly_at_the_threshold_and_not_beyond():
    assert OPTIMAL_GAP == 1e-6  # docs/model.md section 6
    v = 1.0
    assert certify(v, True, [Proof(v - 2.0**-20, "r")]).status == "optimal"  # gap 9.5e-7
    assert certify(v, True, [Proof(v - 2.0**-19, "r")]).status == "feasible"  # gap 1.9e-6
    v = 10.0
    assert certify(v, True, [Proof(v * (1 - OPTIMAL_GAP), "r")]).status == "optimal"
    assert certify(v, True, [Proof(v * (1 - OPTIMAL_GAP) * (1 - 1e-12), "r")]).status == "feasible"


@pytest.mark.parametrize("value, bound, gap", [(10.0, 9.0, 0.1), (10.0, 11.0, 0.0), (0.0, -1.0, 0.0),
                                               (10.0, None, None), (None, 1.0, None), (-10.0, -11.0, 0.1)])
def test_relative_gap(value, bound, gap):
    got = relative_gap(value, bound)
    assert got == (None if gap is None else pytest.approx(gap))


# GraphSolve(arcs, value, bound, optimal, infeasible, cutoff) -> proven over the graph
PROVEN = [
    (GraphSolve([1], 5.0, 4.0, False), 4.0),
    (GraphSolve([1], 5.0, 5.0, True), 5.0),
    (GraphSolve([], None, None, False), None),
    (GraphSolve([1], 5.0, 4.0, False, cutoff=3.0), 3.0),  # plans above the cutoff were not looked at
    (GraphSolve([1], 5.0, 4.0, False, cutoff=4.5), 4.0),
    (GraphSolve([], None, None, False, infeasible=True, cutoff=6.0), 6.0),  # none up to the cutoff
    (GraphSolve([], None, None, False, infeasible=True), math.inf),  # none at all
    (GraphSolve([], None, 9.0, False, infeasible=True, cutoff=6.0), 6.0),
]


@pytest.mark.parametrize("solve, proven", PROVEN)
def test_proven_in_graph(solve, proven):
    assert solve.proven_in_graph() == proven


def test_a_gap_of_exactly_the_threshold_is_optimal():
    # 1 / 1e6 is the double nearest 1e-6, as OPTIMAL_GAP is: the boundary itself, exactly
    assert relative_gap(1e6, 1e6 - 1) == OPTIMAL_GAP
    assert certify(1e6, True, [Proof(1e6 - 1, "r")]).status == "optimal"
    assert certify(1e6, True, [Proof(1e6 - 1.0000001, "r")]).status == "feasible"


@pytest.mark.parametrize("solver, evaluator, tol, expected", [
    (None, 1.0, 0.0, False), (1.0, None, 0.0, False), (None, None, 0.0, False),
    (1.0, 1.0 + 0.9e-6, 0.0, False), (1.0, 1.0 + 1.1e-6, 0.0, True), (1.0, 1.0 + 1.1e-6, 1e-6, False),
    (1.0, 1.0 - 1.1e-6, 0.0, True), (0.0, 0.0, 0.0, False), (0.0, 1e-13, 0.0, True), (0.0, 5e-18, 0.0, True),
    (100.0, 100.0 + 0.9e-4, 0.0, False), (100.0, 100.0 + 1.1e-4, 0.0, True),
    (1.0, 0.0, 1.0, False)])  # a difference of exactly the tolerance (1e-18 + 1.0 == 1.0) is within it
def test_disagreement(solver, evaluator, tol, expected):
    from formulations.certificate import disagreement

    assert disagreement(solver, evaluator, tol) is expected

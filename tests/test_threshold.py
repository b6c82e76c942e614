"""Threshold period bounds (``formulations.threshold``) are proofs.

With every stage option that has a part whose relaxed load exceeds ``T`` left out, the period
relaxation's weighted bound ``L_w(T)`` bounds the weighted load ``sum_d w_d load_d`` of every
plan whose loads are all within ``T`` (so every plan of period ``<= T``), and is infinite when
there is none. Checked against every plan of the space (every path of the stage graph without
reduction) on tiny instances, for several thresholds around the brute-force optimum and
adversarial weights, in the full and the coarse relaxation (also with merged device types). A
refuted threshold lies below the optimum; the search's bound never exceeds it and beats the
weighted bound on distinct devices; dp still certifies the brute-force optimum with the probes
on, and reports them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_coarse import CASES as COARSE_CASES
from test_periodlb import CASES as PERIOD_CASES
from test_periodlb import adversarial, hetero

from formulations.coarse import coarse_bounds
from formulations.relaxation import layout_bounds
from formulations.stagegraph import build_stage_graph
from formulations.threshold import filtered_period_bound, threshold_period_bound, threshold_search
from milp_planner.planners import get_planner

REL = 1e-9

CASES = dict(PERIOD_CASES)
CASES["hetero"] = hetero
CASES["tiny-fc-2dev"] = COARSE_CASES["tiny-fc-2dev"]
CASES["chain-4distinct"] = COARSE_CASES["chain-4distinct"]
SLOW = {"chain-4distinct", "branches-3distinct-external"}
CASE_PARAMS = [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in sorted(CASES)]
FRACTIONS = (0.4, 0.6, 0.8, 0.9, 0.97, 1.0, 1.2)

_loads: dict = {}
_opt: dict = {}


def optimum(case: str) -> float:
    if case not in _opt:
        res = get_planner("bruteforce").solve(CASES[case](), objective="period")
        assert res.status == "optimal", res.message
        _opt[case] = res.value
    return _opt[case]


def plan_loads(case: str) -> np.ndarray:
    """(plans, devices): each device's load over every plan of the space (every source-to-
    terminal path of the stage graph without reduction, the gather included)."""
    if case not in _loads:
        sg = build_stage_graph(CASES[case](), reduction="none")
        out = []

        def walk(nid, acc):
            if nid in sg.terminals:
                out.append(acc + np.asarray(sg.terminals[nid].load, dtype=float))
            for a in sg.out_arcs[nid]:
                arc = sg.arcs[a]
                walk(arc.head, acc + np.asarray(arc.load, dtype=float))

        walk(sg.source, np.zeros(len(CASES[case]().devices)))
        _loads[case] = np.array(out)
    return _loads[case]


def least_within(case: str, T: float, w) -> float:
    """min of sum_d w_d load_d over the plans whose every device load is within T (inf: none)."""
    loads = plan_loads(case)
    w = np.asarray(w, dtype=float) / float(np.sum(w))
    ok = loads.max(axis=1) <= T
    return float((loads[ok] @ w).min()) if ok.any() else math.inf


def check_filtered(case: str, lb) -> int:
    """``L_w(T)`` below the least weighted load of the plans within T, for every T and w; the
    number of (T, w) where the filter refuted T (a check that the test can see it)."""
    inst = CASES[case]()
    opt = optimum(case)
    # the brute-force optimum is the least max load (the evaluator's period; shared media may add)
    assert plan_loads(case).max(axis=1).min() <= opt * (1 + REL)
    weights = [None] + [p.weights for p in lb.passes] + adversarial(len(inst.devices))
    refuted = 0
    for f in FRACTIONS:
        T = opt * f
        for w in weights:
            bound = filtered_period_bound(lb, inst, T, w)
            least = least_within(case, T, np.ones(len(inst.devices)) if w is None else w)
            assert bound <= least * (1 + REL) + 1e-15, (case, f, None if w is None else list(w), bound, least)
            if bound > T:
                refuted += 1
                assert T < opt, (case, f, bound)
    return refuted


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_filtered_full_bound_is_a_proof(case):
    lb = layout_bounds(CASES[case](), "period")
    check_filtered(case, lb)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_filtered_coarse_bound_is_a_proof(case):
    lb = coarse_bounds(CASES[case](), "period")
    check_filtered(case, lb)


def test_filtered_bound_with_merged_types():
    case = "skip-3distinct"
    inst = CASES[case]()
    for budget in (40, 8, 4, 2):
        try:
            lb = coarse_bounds(inst, "period", max_options=budget)
        except Exception as err:  # noqa: BLE001 - a budget below one merged type is refused
            assert "options" in str(err)
            continue
        check_filtered(case, lb)


def test_filter_refutes_thresholds():
    """The filter is not idle: thresholds below the optimum are refuted, and none at or above it."""
    total = 0
    for case in ("skip-3distinct", "hetero", "residual-shared"):
        total += check_filtered(case, layout_bounds(CASES[case](), "period"))
    assert total > 0


def test_no_plan_within_gives_infinity():
    """Below every part's least relaxed load the relaxation leaves no option at all."""
    inst = CASES["chain-2"]()
    lb = layout_bounds(inst, "period")
    assert filtered_period_bound(lb, inst, 1e-9) == math.inf
    assert filtered_period_bound(lb, inst, 1e9) == pytest.approx(float(lb.to_go[0].min()), rel=1e-4)


@pytest.mark.parametrize("case", CASE_PARAMS)
@pytest.mark.parametrize("relaxation", ["full", "coarse"])
def test_search_is_below_the_optimum(case, relaxation):
    inst = CASES[case]()
    opt = optimum(case)
    lb = (layout_bounds if relaxation == "full" else coarse_bounds)(inst, "period")
    for hi in (opt, opt * 1.5, opt * 4):
        found = threshold_search(lb, inst, lb.lower, hi, seconds=60)
        assert lb.lower <= found.lower <= opt * (1 + REL), (case, hi, found)
        for p in found.probes:
            if p.refuted:
                assert p.threshold < opt and p.bound > p.threshold
            else:
                assert min(p.bound, p.threshold) <= opt * (1 + REL)
        assert threshold_period_bound(lb, inst, lb.lower, hi, seconds=60) == found.lower


def test_search_beats_the_weighted_bound():
    """On distinct devices behind slow links the threshold bound is well above the weighted one."""
    case = "skip-3distinct"
    inst = CASES[case]()
    lb = layout_bounds(inst, "period")
    found = threshold_search(lb, inst, lb.lower, optimum(case) * 1.5, seconds=60)
    assert found.lower > lb.lower * 1.3, (found.lower, lb.lower)
    assert any(p.refuted for p in found.probes)


def test_search_honours_its_limits():
    inst = CASES["skip-3distinct"]()
    lb = layout_bounds(inst, "period")
    assert threshold_search(lb, inst, 1.0, 0.5).lower == 1.0  # nothing to probe
    assert threshold_search(lb, inst, lb.lower, math.inf).lower == lb.lower
    few = threshold_search(lb, inst, lb.lower, optimum("skip-3distinct"), max_probes=2, seconds=60)
    assert len(few.probes) <= 2 and few.stopped in ("probes", "converged")
    with pytest.raises(ValueError):
        threshold_search(layout_bounds(inst, "latency"), inst, 0.1, 1.0)


@pytest.mark.parametrize("case", ["skip-3distinct", "hetero"])
@pytest.mark.parametrize("relaxation", ["full", "coarse"])
def test_dp_certifies_with_the_probes(case, relaxation):
    """End to end: with the anytime start's incumbent the rounds run the probes (``info``), and
    dp still returns the brute-force optimum with a bound no higher."""
    inst = CASES[case]()
    opt = optimum(case)
    res = get_planner("dp", relaxation=relaxation).solve(inst, objective="period")
    assert res.value == pytest.approx(opt, rel=1e-9)
    assert res.bound is not None and res.bound <= opt * (1 + REL)
    th = res.info.get("threshold")
    if th is not None:  # (an anytime start proven optimal by the relaxation needs no probe)
        assert th["lower"] <= opt * (1 + REL) and th["probes"]


def edge():
    """One layer in one part: a plan is one device, and its part's relaxed load (its compute,
    what it receives from the external source) is that device's load, so the optimum's part
    sits exactly at the optimum."""
    from builders import chain_graph, device, make_instance

    from milp_planner.instance import SearchSpace
    from milp_planner.instance.network import Endpoint

    devs = [device("fast", 2000, "0.01"), device("slow", 500, "0.02")]
    src = Endpoint(None, (150.0, 90.0), (0.02, 0.03))
    snk = Endpoint(None, (120.0, 60.0), (0.01, 0.01))
    return make_instance(chain_graph(1), devs, bw=[[0, 100.0], [250.0, 0]], lat=0.05, source=src, sink=snk,
                         search=SearchSpace(1, 1, ("equal",), ("rows",)))


def test_a_part_at_the_threshold_stays():
    """The threshold is refuted just below the optimum and not at it (the filter is exact there)."""
    inst = edge()
    opt = get_planner("bruteforce").solve(inst, objective="period").value
    for lb in (layout_bounds(inst, "period"), coarse_bounds(inst, "period")):
        for w in (None, [1.0, 0.0], [0.3, 0.7]):
            assert filtered_period_bound(lb, inst, opt, w) <= opt * (1 + REL)
        assert filtered_period_bound(lb, inst, opt * (1 - 1e-3), [1.0, 0.0]) > opt * (1 - 1e-3)
        assert threshold_period_bound(lb, inst, lb.lower, opt * 1.5, seconds=60) <= opt * (1 + REL)


def test_terminal_says_the_probes_raised_the_bound():
    from types import SimpleNamespace

    from milp_planner.report.terminal import bound_source_text

    th = {"lower": 0.012, "raised": True, "probes": [{"refuted": True}, {"refuted": False}]}
    res = SimpleNamespace(info={"rounds": 2, "stage_arcs": 10, "threshold": th}, bound_source="rounds",
                          bound=0.012, planner="dp")
    text = bound_source_text(res)
    assert text.startswith("rounds: layout relaxation") and "threshold probes (1 of 2 refuted)" in text
    res.info["threshold"] = dict(th, raised=False)
    assert "threshold" not in bound_source_text(res)

"""The flow MIP (milp_planner/cost/flow_mip.py): its period bound never exceeds the brute-force
optimum nor the least period over every path of the whole stage graph, is at least the flow
LP's, strictly above it where part overheads or whole reads decide, and breaks (exceeds the
optimum) when a term is overstated: a part cap one too low, whole reads charged to row parts,
receives from the group siblings forbidden, an overhead counted twice."""

from __future__ import annotations

import time

import numpy as np
import pytest
from test_exact import CASES as EXACT_CASES
from test_flow_floor import CASES as FLOW_CASES
from test_flow_floor import _optimum

import milp_planner.cost.flow_mip as fm
from builders import chain_graph, device, fc_graph, make_instance
from formulations.stagegraph import build_stage_graph
from milp_planner.cost.flow import flow_floor
from milp_planner.cost.floors import lower_floor
from milp_planner.instance import SearchSpace
from milp_planner.planners import get_planner

CASES = {**{f"flow-{k}": v for k, v in FLOW_CASES.items()}, **{f"exact-{k}": v for k, v in EXACT_CASES.items()}}
REL = 1e-9


def overheads():
    """Two equal devices, large per-layer overheads, slow links: the LP halves every layer at
    the chord (o + a) / 2 each; a real part pays its overhead whole."""
    return make_instance(chain_graph(3), [device("a", 1000, "0.05"), device("b", 1000, "0.05")],
                         bw=[[0, 2000.0], [2000.0, 0]], lat=0.0,
                         search=SearchSpace(2, 2, ("equal", "grid:4"), ("rows", "channels")))


def grouped():
    """Four devices in two pairs (fast inside a pair, slow between): the LP receives at the
    pair's link whatever the sender; the MIP only what the sibling computed."""
    fast, slow = 5000.0, 40.0
    bw = [[0, fast, slow, slow], [fast, 0, slow, slow], [slow, slow, 0, fast], [slow, slow, fast, 0]]
    devs = [device("a1", 1500, "0.001"), device("a2", 1500, "0.001"), device("b1", 400, "0.001"),
            device("b2", 300, "0.001")]
    return make_instance(chain_graph(2), devs, bw=bw, lat=0.0, sink=1,
                         search=SearchSpace(2, 2, ("equal",), ("channels",)))


EXTRA = {"overheads": overheads, "grouped": grouped, "fc-3": lambda: make_instance(
    fc_graph(), [device("a", 1000, "0.01"), device("b", 1200, "0.01"), device("c", 3000, "0.02")],
    bw=[[0, 300.0, 200.0], [300.0, 0, 250.0], [200.0, 250.0, 0]], lat=0.0,
    search=SearchSpace(2, 3, ("equal",), ("rows", "channels")))}
ALL = {**CASES, **{f"extra-{k}": v for k, v in EXTRA.items()}}
_opt: dict = {}


def optimum(case: str) -> float:
    if case not in _opt:
        _opt[case] = _optimum(ALL[case](), "period")
    return _opt[case]


def least_path_period(inst) -> float:
    """min over every source-to-terminal path of the whole stage graph of its period."""
    sg = build_stage_graph(inst, reduction="none")
    best = np.inf
    stack = [(sg.source, ())]
    while stack:
        nid, path = stack.pop()
        if nid in sg.terminals and path:
            best = min(best, sg.path_value(list(path), "period"))
        for a in sg.out_arcs[nid]:
            stack.append((sg.arcs[a].head, path + (a,)))
    return best


@pytest.mark.parametrize("case", sorted(ALL))
def test_the_mip_bound_is_below_every_plan(case):
    inst = ALL[case]()
    mip = fm.flow_mip_floor(inst)
    lp = flow_floor(inst, "period")
    assert mip is not None and lp is not None
    best = optimum(case)
    assert mip.value <= best * (1 + REL), (case, mip, best)
    assert mip.value >= lp.value * (1 - 1e-6)  # the LP's constraints are the MIP's
    assert mip.value <= mip.lp_value  # the dual bound, lowered, is at most HiGHS's plan
    rnd = get_planner("random", samples=20).solve(inst, objective="period", seed=3)
    assert mip.value <= rnd.value * (1 + REL)


@pytest.mark.parametrize("case", ["exact-chain", "exact-residual-shared", "extra-overheads", "extra-grouped"])
def test_the_mip_bound_is_below_every_path(case):
    inst = ALL[case]()
    assert fm.flow_mip_floor(inst).value <= least_path_period(inst) * (1 + REL)


@pytest.mark.parametrize("case", ["extra-overheads", "extra-grouped", "extra-fc-3"])
def test_strictly_above_the_lp(case):
    inst = ALL[case]()
    lp, mip = flow_floor(inst, "period").value, fm.flow_mip_floor(inst).value
    assert mip > lp * 1.02, (case, lp, mip, optimum(case))
    floor = lower_floor(inst, "period")
    assert floor.source == "flow-mip" and floor.value == mip


def _broken(monkeypatch, what: str) -> None:
    if what == "part cap one too low":
        real = fm.part_cap
        monkeypatch.setattr(fm, "part_cap", lambda inst, layer: max(1, real(inst, layer) - 1))
    elif what == "whole reads for row parts":
        monkeypatch.setattr(fm, "whole_reads", lambda inst, layer: True)
    elif what == "no receives from siblings":
        monkeypatch.setattr(fm, "sibling_terms", lambda lp, producer, sibs: {})
    elif what == "overhead twice":
        real_init = fm._FlowMIP.__init__

        def doubled(self, inst, lp):
            lp.affine = {j: (2 * o, a) for j, (o, a) in lp.affine.items()}
            real_init(self, inst, lp)
        monkeypatch.setattr(fm._FlowMIP, "__init__", doubled)


@pytest.mark.parametrize("what", ["part cap one too low", "whole reads for row parts", "no receives from siblings",
                                  "overhead twice"])
def test_an_overstated_term_breaks_the_bound(monkeypatch, what):
    """Each term of the MIP, overstated, puts the bound above the optimum on some tiny case:
    so the test above can fail."""
    broke = []
    for case in sorted(ALL):
        best = optimum(case)
        with monkeypatch.context() as m:
            _broken(m, what)
            got = fm.flow_mip_floor(ALL[case]())
        if got is not None and got.value > best * (1 + 1e-6):
            broke.append(case)
    assert broke, what


def test_a_past_deadline_gives_no_mip():
    inst = EXTRA["overheads"]()
    assert fm.flow_mip_floor(inst, deadline=time.perf_counter() - 1.0) is None


def test_link_groups():
    assert fm.link_groups(EXTRA["grouped"]()) == [frozenset({0, 1})] * 2 + [frozenset({2, 3})] * 2
    assert fm.link_groups(EXTRA["overheads"]()) == [frozenset({0}), frozenset({1})]


def test_dp_reports_the_mip_bound():
    inst = EXTRA["overheads"]()
    res = get_planner("dp").solve(inst, objective="period", time_limit=20)
    assert res.bound <= res.value * (1 + REL)
    assert res.bound >= fm.flow_mip_floor(inst).value * (1 - 1e-9) or res.info["bound_source"] in ("certified", "rounds")

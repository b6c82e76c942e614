"""The flow MIP (milp_planner/cost/flow_mip.py): its period bound never exceeds the brute-force
optimum nor the least period over every path of the whole stage graph, is at least the flow
LP's, strictly above it where part overheads or whole reads decide, and breaks (exceeds the
optimum) when a term is overstated: a part cap one too low, whole reads charged to row parts,
receives from the group siblings forbidden, an overhead counted twice, halo rows counted twice, redundant rows counted from zero."""

from __future__ import annotations

import time

import numpy as np
import pytest
from test_exact import CASES as EXACT_CASES
from test_exact import tiny
from test_flow_floor import CASES as FLOW_CASES
from test_flow_floor import _optimum

from milp_planner.deadline import Deadline
import milp_planner.cost.flow_mip as fm
from builders import CONV3, chain_graph, conv, device, fc_graph, make_instance
from formulations.stagegraph import build_stage_graph
from milp_planner.cost.flow import flow_floor
from milp_planner.cost.floors import lower_floor
from milp_planner.instance import SearchSpace
from milp_planner.model.graph import LayerGraph, RowDep
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


def rows3():
    """Three equal devices, heavy 3x3 convolutions, slow links: the best plans split rows, and
    every boundary between parts pays a halo row by transfer or by computing it twice."""
    layers = [conv(0, "c0", "x", "t0", (1, 2, 9, 8), macs=30000)]
    for i in (1, 2):
        layers.append(conv(i, f"c{i}", f"t{i - 1}", f"t{i}", (1, 2, 9, 8), macs=30000))
    graph = LayerGraph("rows3", layers, {"x": (1, 1, 9, 8)}, ["t2"])
    devs = [device(f"d{i}", 4000, "0.001") for i in range(3)]
    bw = [[0 if i == j else 80.0 for j in range(3)] for i in range(3)]
    return make_instance(graph, devs, bw=bw, lat=0.0, sink=0,
                         search=SearchSpace(2, 3, ("equal",), ("rows",)))


def fused():
    """Two equal devices behind a very slow link: the best plan fuses two 3x3 convolutions in
    one row-split stage and computes the halo rows twice (the redundant rows of the bound)."""
    layers = [conv(0, "c0", "x", "t0", (1, 2, 9, 8), macs=30000)]
    for i in (1, 2):
        layers.append(conv(i, f"c{i}", f"t{i - 1}", f"t{i}", (1, 2, 9, 8), macs=30000))
    graph = LayerGraph("fused", layers, {"x": (1, 1, 9, 8)}, ["t2"])
    devs = [device(f"d{i}", 4000, "0.001") for i in range(2)]
    return make_instance(graph, devs, bw=[[0, 10.0], [10.0, 0]], lat=0.0,
                         search=SearchSpace(3, 2, ("equal",), ("rows",)))


def grouped_rows():
    """Two pairs of devices (fast inside a pair), rows only: halo rows between the pairs."""
    fast, slow = 400.0, 20.0
    bw = [[0, fast, slow, slow], [fast, 0, slow, slow], [slow, slow, 0, fast], [slow, slow, fast, 0]]
    devs = [device(f"d{i}", 3000, "0.001") for i in range(4)]
    layers = [conv(0, "c0", "x", "t0", (1, 2, 8, 8), macs=20000), conv(1, "c1", "t0", "t1", (1, 2, 8, 8), macs=20000)]
    graph = LayerGraph("pairs", layers, {"x": (1, 1, 8, 8)}, ["t1"])
    return make_instance(graph, devs, bw=bw, lat=0.0, search=SearchSpace(1, 4, ("equal",), ("rows",)))


EXTRA = {"overheads": overheads, "rows3": rows3, "fused": fused, "grouped-rows": grouped_rows, "grouped": grouped, "fc-3": lambda: make_instance(
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


@pytest.mark.parametrize("case", ["exact-chain", "exact-residual-shared", "extra-overheads", "extra-grouped",
                                  "extra-rows3", "extra-fused"])
def test_the_mip_bound_is_below_every_path(case):
    inst = ALL[case]()
    assert fm.flow_mip_floor(inst).value <= least_path_period(inst) * (1 + REL)


def test_the_halo_rows_raise_the_bound():
    inst = EXTRA["rows3"]()
    plain, halo = fm.flow_mip_floor(inst, halo=False).value, fm.flow_mip_floor(inst).value
    assert halo > plain * 1.01, (plain, halo, optimum("extra-rows3"))


@pytest.mark.parametrize("dep,h_out,h_in,expected", [
    (CONV3, 8, 8, (8, ((1 - 1 / 8, 1), (0, 2)))),  # one row each side of a boundary
    (RowDep("window", kernel=2, stride=2), 4, 8, (8, ((2, 0), (2, 0)))),  # two rows per row, no halo
    (RowDep("identity"), 6, 6, (6, ((1, 0), (1, 0)))),
    (RowDep("window", kernel=3, stride=2, pad_top=1), 4, 8, (8, ((2, 0), (1, 1)))),  # one side only
    (RowDep("window", kernel=1, stride=2), 4, 8, (7, ((1, 0),))),  # every other row
    (RowDep("window", kernel=5, stride=1, pad_top=2), 9, 9, (9, ((1 - 1 / 9, 1), (-3, 3)))),
])
def test_halo_terms(dep, h_out, h_in, expected):
    got = fm.halo_terms(dep, h_out, h_in)
    assert got.w_all == expected[0] and len(got.bounds) == len(expected[1])
    for a, b in zip(got.bounds, expected[1]):
        assert a == pytest.approx(b)


@pytest.mark.parametrize("case", ["extra-overheads", "extra-grouped", "extra-fc-3"])
def test_strictly_above_the_lp(case):
    inst = ALL[case]()
    lp, mip = flow_floor(inst, "period").value, fm.flow_mip_floor(inst).value
    assert mip > lp * 1.02, (case, lp, mip, optimum(case))
    floor = lower_floor(inst, "period")
    assert floor.source == "flow-mip" and floor.value == pytest.approx(mip, rel=1e-12)


def _broken(monkeypatch, what: str) -> None:
    if what == "part cap one too low":
        real = fm.part_cap
        monkeypatch.setattr(fm, "part_cap", lambda inst, layer: max(1, real(inst, layer) - 1))
    elif what == "whole reads for row parts":
        monkeypatch.setattr(fm, "whole_reads", lambda inst, layer: True)
    elif what == "no receives from siblings":
        monkeypatch.setattr(fm, "sibling_terms", lambda lp, producer, sibs: {})
    elif what == "halo rows twice":
        real = fm.halo_terms
        monkeypatch.setattr(fm, "halo_terms", lambda *a: None if real(*a) is None else
                            fm.HaloTerms(real(*a).w_all, tuple((x, 2 * b + 1) for x, b in real(*a).bounds)))
    elif what == "redundant rows counted from zero":  # sum u instead of sum u - 1
        real = fm.halo_terms
        monkeypatch.setattr(fm, "halo_terms", lambda dep, h_out, h_in: None if real(dep, h_out, h_in) is None else
                            fm.HaloTerms(real(dep, h_out, h_in).w_all + real(dep, h_out, h_in).bounds[0][0] * h_out,
                                         real(dep, h_out, h_in).bounds[:1]))
    elif what == "overhead twice":
        real_init = fm._FlowMIP.__init__

        def doubled(self, inst, lp, halo=True, objective="period"):
            lp.affine = {j: (2 * o, a) for j, (o, a) in lp.affine.items()}
            real_init(self, inst, lp, halo, objective)
        monkeypatch.setattr(fm._FlowMIP, "__init__", doubled)


@pytest.mark.parametrize("what", ["part cap one too low", "whole reads for row parts", "no receives from siblings",
                                  "overhead twice", "halo rows twice", "redundant rows counted from zero"])
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
    assert fm.flow_mip_floor(inst, deadline=Deadline(time.perf_counter() - 1.0)) is None


def test_link_groups():
    assert fm.link_groups(EXTRA["grouped"]()) == [frozenset({0, 1})] * 2 + [frozenset({2, 3})] * 2
    assert fm.link_groups(EXTRA["overheads"]()) == [frozenset({0}), frozenset({1})]


def test_dp_reports_the_mip_bound():
    inst = EXTRA["overheads"]()
    res = get_planner("dp").solve(inst, objective="period", time_limit=20)
    assert res.bound <= res.value * (1 + REL)
    assert res.bound >= fm.flow_mip_floor(inst).value * (1 - 1e-9) or res.bound_source in ("certified", "rounds")


# ---- energy under memory caps


def heavy(params=150):
    """Three 3x3 convolutions with heavy weights (the caps bind on the weights)."""
    layers = [conv(0, "c0", "x", "t0", (1, 2, 8, 8), params=params)]
    for i in (1, 2):
        layers.append(conv(i, f"c{i}", f"t{i - 1}", f"t{i}", (1, 2, 8, 8), params=params))
    return LayerGraph("heavy", layers, {"x": (1, 1, 8, 8)}, ["t2"])


def wide(caps):
    """One layer too heavy for either device: the best plans split it by channels."""
    layers = [conv(0, "c0", "x", "t0", (1, 4, 4, 4), params=400, macs=2000),
              conv(1, "c1", "t0", "t1", (1, 4, 4, 4), params=40)]
    graph = LayerGraph("wide", layers, {"x": (1, 1, 4, 4)}, ["t1"])
    return make_instance(graph, [device("a", 1000, "0.01", memory=caps[0], power=(2, 1, 1)),
                                 device("b", 1500, "0.01", memory=caps[1], power=(3, 1, 1))],
                         bw=[[0, 200.0], [200.0, 0]], lat=0.0, search=SearchSpace(2, 2, ("equal",), ("rows", "channels")))


CAPPED = {
    "heavy-b400": lambda: tiny(heavy(), memory=(None, 400)),
    "heavy-b300": lambda: tiny(heavy(), memory=(None, 300)),
    "heavy-a450": lambda: tiny(heavy(), memory=(450, None)),
    "heavy-b600": lambda: tiny(heavy(), memory=(None, 600)),
    "heavy-b0": lambda: tiny(heavy(), memory=(None, 0)),  # b can store nothing
    "chain-capped": lambda: tiny(chain_graph(3), memory=(None, 150)),
    "wide-350": lambda: wide((350, 350)),
    "wide-420-300": lambda: wide((420, 300)),
}
_capped_opt: dict = {}


def capped_optimum(case: str) -> float:
    if case not in _capped_opt:
        res = get_planner("bruteforce").solve(CAPPED[case](), objective="energy")
        assert res.status == "optimal", res.message
        _capped_opt[case] = res.value
    return _capped_opt[case]


@pytest.mark.parametrize("case", sorted(CAPPED))
def test_the_energy_mip_is_below_the_capped_optimum(case):
    inst = CAPPED[case]()
    got = fm.mip_floor(inst, "energy")
    assert got is not None and got.value <= capped_optimum(case) * (1 + REL), (case, got, capped_optimum(case))
    assert got.value >= flow_floor(inst, "energy").value * (1 - 1e-4)  # the MIP margin
    assert lower_floor(inst, "energy").value <= capped_optimum(case) * (1 + REL)


@pytest.mark.parametrize("case", ["flow-chain-2", "flow-residual-3", "flow-fc", "exact-residual-external", "extra-rows3"])
def test_the_energy_mip_is_below_the_uncapped_optimum(case):
    inst = ALL[case]()
    assert fm.mip_floor(inst, "energy").value <= _optimum(inst, "energy") * (1 + REL)


def test_the_caps_raise_the_energy_bound():
    inst = CAPPED["heavy-b300"]()
    lp, mip = flow_floor(inst, "energy").value, fm.mip_floor(inst, "energy").value
    assert mip > lp * 1.1, (lp, mip, capped_optimum("heavy-b300"))
    floor = lower_floor(inst, "energy")
    assert floor.source == "flow-mip" and floor.value == pytest.approx(mip, rel=1e-12)


def test_channel_parts_charged_whole_weights_break_the_bound(monkeypatch):
    """The optimum splits the heavy layer by channels to fit both caps: charging a channel part
    the layer's whole weights leaves no plan (or a bound above the optimum)."""
    best = capped_optimum("wide-350")
    monkeypatch.setattr(fm, "stored_weights", lambda inst, layer: (0.0, layer.params * float(inst.dtype_bytes)))
    got = fm.mip_floor(CAPPED["wide-350"](), "energy")
    assert got is None or got.value > best * (1 + 1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["period", "energy"])
def test_the_mip_is_below_the_residual_example(objective):
    from test_flow_floor import EXAMPLES

    from milp_planner.instance.reader import load_instance

    inst = load_instance(EXAMPLES / "tiny-residual-3dev.yaml")
    got = fm.mip_floor(inst, objective)
    assert got is not None and got.value <= _optimum(inst, objective) * (1 + REL)

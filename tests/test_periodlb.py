"""Weighted (Lagrangian) period bounds of the layout relaxations are proofs, and tighter.

For device weights ``w >= 0`` summing to 1 every plan's period is at least ``sum_d w_d load_d``
(``formulations.relaxation``, "weighted period floors"). On tiny instances with distinct
devices: the bound of every weight vector the passes try, and of adversarial ones (one device
only, random, unnormalised, unequal within an orbit), never exceeds the least ``w``-weighted
load of any plan (the every-path minimum over the whole stage graph) nor the brute-force
optimum; the passes' bound (``LayoutBounds.lower``) is at least the uniform one and strictly
above it on heterogeneous devices; all-interchangeable devices run no pass. The same for the
coarse relaxation, also with device types merged, and end to end through ``dp``.
"""

from __future__ import annotations

import numpy as np
import pytest
from builders import chain_graph, device, make_instance, residual_graph
from test_coarse import branch_graph, distinct
from test_exact import tiny

from formulations.coarse import coarse_bounds
from formulations.relaxation import layout_bounds, weighted_period_bound
from formulations.stagegraph import build_stage_graph
from milp_planner.instance import SearchSpace
from milp_planner.planners import get_planner

REL = 1e-9

CASES = {
    "chain-2": lambda: tiny(chain_graph(3)),
    "residual-external": lambda: tiny(residual_graph(), external=True, splits=("equal", "capacity")),
    "residual-shared": lambda: tiny(residual_graph(), medium="shared"),
    "skip-3distinct": lambda: distinct(residual_graph()),
    "branches-3distinct-external": lambda: distinct(branch_graph(), external=True),
}
SLOW: set = set()
CASE_PARAMS = [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in sorted(CASES)]

_brute: dict = {}
_graphs: dict = {}


def optimum(case: str) -> float:
    if case not in _brute:
        res = get_planner("bruteforce").solve(CASES[case](), objective="period")
        assert res.status == "optimal", res.message
        _brute[case] = res.value
    return _brute[case]


def least_weighted_load(case: str, w) -> float:
    """min over every plan of the space of sum_d w_d load_d (w normalised): a shortest path
    over the whole stage graph with arc cost w . (the arc's loads), plus the terminal's."""
    if case not in _graphs:
        _graphs[case] = build_stage_graph(CASES[case](), reduction="none")
    sg = _graphs[case]
    w = np.asarray(w, dtype=float) / float(np.sum(w))
    best = [np.inf] * sg.n_nodes
    for nid in sorted(range(sg.n_nodes), key=lambda i: -sg.nodes[i][0]):
        if nid in sg.terminals:
            best[nid] = float(w @ np.asarray(sg.terminals[nid].load))
        for a in sg.out_arcs[nid]:
            arc = sg.arcs[a]
            best[nid] = min(best[nid], float(w @ np.asarray(arc.load)) + best[arc.head])
    return best[sg.source]


def adversarial(n: int, seed: int = 7) -> list[np.ndarray]:
    """One device only (scaled up: the bound must normalise), random, near-uniform."""
    rng = np.random.default_rng(seed)
    out = [5.0 * np.eye(n)[d] for d in range(n)]
    out += [rng.dirichlet(np.ones(n)) * 3.0 for _ in range(4)]
    out += [np.full(n, 1.0 / n) + 1e-3 * np.arange(n)]
    return out


def check_weights(case: str, lb, weights) -> None:
    inst = CASES[case]()
    opt = optimum(case)
    for w in weights:
        bound = weighted_period_bound(lb, inst, w)
        least = least_weighted_load(case, w)
        assert bound <= least * (1 + REL) + 1e-15, (case, list(w), bound, least)
        assert bound <= opt * (1 + REL), (case, list(w), bound, opt)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_weighted_full_bound_is_a_proof_and_at_least_the_uniform_one(case):
    inst = CASES[case]()
    lb = layout_bounds(inst, "period")
    uniform = float(lb.to_go[0].min())
    assert uniform <= lb.lower <= optimum(case) * (1 + REL)
    assert lb.passes, "distinct devices: the weighted passes run"
    for p in lb.passes:
        assert p.bound <= optimum(case) * (1 + REL)
        assert abs(sum(p.weights) - 1) < 1e-9 and min(p.weights) >= 0
    check_weights(case, lb, [p.weights for p in lb.passes] + adversarial(len(inst.devices)))
    # the uniform weights give back the tables' own (additive) bound
    n = len(inst.devices)
    assert weighted_period_bound(lb, inst, np.ones(n)) == pytest.approx(uniform, rel=1e-4)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_weighted_coarse_bound_is_a_proof(case):
    inst = CASES[case]()
    lb = coarse_bounds(inst, "period")
    assert float(lb.to_go[0].min()) <= lb.lower <= optimum(case) * (1 + REL)
    check_weights(case, lb, [p.weights for p in lb.passes] + adversarial(len(inst.devices)))


def test_merged_types_price_at_their_least_weight():
    """Coarse relaxation with every device merged into fewer types: a part on a merged type is
    priced at the least weight of its members; weights unequal within the merged type too."""
    case = "skip-3distinct"
    inst = CASES[case]()
    for budget in (40, 8, 4, 2, 1):
        try:
            lb = coarse_bounds(inst, "period", max_options=budget)
        except Exception as err:  # noqa: BLE001 - a budget below one merged type is refused
            assert "options" in str(err)
            continue
        assert lb.lower <= optimum(case) * (1 + REL)
        check_weights(case, lb, adversarial(len(inst.devices), seed=budget))


def hetero():
    """A fast device (10x) behind slow links and a slow one: the uniform floor is the fast
    device's time / 2, far below any plan's period."""
    devs = [device("fast", 10000, "0.001", power=(5, 1, 1)), device("slow", 1000, "0.001", power=(1, 1, 1))]
    return make_instance(chain_graph(3), devs, bw=[[0, 50.0], [50.0, 0]], lat=0.01,
                         search=SearchSpace(2, 2, ("equal",), ("rows",)))


def test_strictly_tighter_on_heterogeneous_devices():
    inst = hetero()
    lb = layout_bounds(inst, "period")
    uniform = float(lb.to_go[0].min())
    opt = get_planner("bruteforce").solve(inst, objective="period").value
    assert lb.lower > uniform * 1.2, (lb.lower, uniform)
    assert lb.lower <= opt * (1 + REL)
    co = coarse_bounds(inst, "period")
    assert co.lower > float(co.to_go[0].min()) * 1.2
    assert co.lower <= opt * (1 + REL)
    off = layout_bounds(inst, "period", weight_passes=0)
    assert off.lower == float(off.to_go[0].min()) and not off.passes


def test_interchangeable_devices_run_no_pass():
    devs = [device(f"d{i}", 1000, "0.01") for i in range(3)]
    bw = [[0.0 if i == j else 100.0 for j in range(3)] for i in range(3)]
    from milp_planner.instance.network import Endpoint

    src = Endpoint(None, (150.0,) * 3, (0.01,) * 3)
    inst = make_instance(chain_graph(2), devs, bw=bw, lat=0.01, source=src, sink=src,
                         search=SearchSpace(1, 2, ("equal",), ("rows",)))
    lb = layout_bounds(inst, "period")
    assert len(lb.types.orbits) == 1
    assert not lb.passes and lb.lower == float(lb.to_go[0].min())


def test_other_objectives_keep_the_additive_bound():
    inst = CASES["skip-3distinct"]()
    for objective in ("latency", "energy", "memory"):
        lb = layout_bounds(inst, objective)
        assert lb.lower == float(lb.to_go[0].min()) and not lb.passes


def test_weights_are_checked():
    inst = CASES["chain-2"]()
    lb = layout_bounds(inst, "period")
    with pytest.raises(ValueError):
        weighted_period_bound(lb, inst, [0.0, 0.0])
    with pytest.raises(ValueError):
        weighted_period_bound(layout_bounds(inst, "latency"), inst, [0.5, 0.5])


@pytest.mark.parametrize("relaxation", ["full", "coarse"])
def test_dp_reports_the_weighted_bound(relaxation):
    """End to end: dp's period bound on the heterogeneous instance is at least the weighted
    relaxation's and never above the brute-force optimum."""
    inst = hetero()
    opt = get_planner("bruteforce").solve(inst, objective="period").value
    res = get_planner("dp", relaxation=relaxation, anytime=False).solve(inst, objective="period")
    lb = (layout_bounds if relaxation == "full" else coarse_bounds)(inst, "period")
    assert res.bound is not None and res.bound <= opt * (1 + REL)
    assert res.bound >= lb.lower * (1 - 1e-9)
    assert res.value >= opt * (1 - REL)

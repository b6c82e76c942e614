"""The coarse relaxation (``formulations.coarse``) is a proof: its bound never exceeds the optimum.

On tiny instances (the example files, a skip, two parallel branches, three and four
all-distinct devices) the coarse bound is compared with the brute-force optimum of every
objective, with the full relaxation's bound (it is coarser, so never above it), and with the
least sum of arc floors over every path of the whole stage graph (the every-path check of
tests/test_pricing_paths.py). The device merging and the collapsed boundaries are forced on
small instances, and the exact planners' ``relaxation`` option is checked end to end.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from builders import IDENT, chain_graph, conv, device, make_instance, residual_graph
from test_exact import tiny
from test_pricing_paths import floor_suffix

from milp_planner.deadline import Deadline
from formulations.coarse import COARSE_GRID, REFINE_GRIDS, coarse_bounds, refined_coarse_bounds
from formulations.relaxation import layout_bounds
from formulations.stagegraph import build_stage_graph
from milp_planner.errors import PlannerError
from milp_planner.instance import SearchSpace
from milp_planner.instance.network import Endpoint
from milp_planner.instance.reader import load_instance
from milp_planner.model.graph import Layer, LayerGraph
from milp_planner.planners import get_planner

OBJECTIVES = ("latency", "energy", "period", "memory")
EXAMPLES = Path(__file__).resolve().parents[1] / "instances" / "examples"
REL = 1e-9


def branch_graph():
    """c0: x -> t0; two parallel branches b1: t0 -> t1, b2: t0 -> t2; add: (t1, t2) -> y."""
    layers = [
        conv(0, "c0", "x", "t0", (1, 2, 8, 8)),
        conv(1, "b1", "t0", "t1", (1, 2, 8, 8), macs=3000),
        conv(2, "b2", "t0", "t2", (1, 2, 8, 8), macs=500),
        Layer(3, "add", "Add", ("t1", "t2"), "y", (1, 2, 8, 8), ops=128, rowdep=IDENT, row_splittable=True),
    ]
    return LayerGraph("branches", layers, {"x": (1, 1, 8, 8)}, ["y"])


def distinct(graph, n=3, external=False, fusion=1, splits=("equal",), axes=("rows",), max_parts=2):
    """``n`` all-distinct devices (speeds, overheads, power and links all differ)."""
    speeds = (1000, 2500, 1700, 3100)[:n]
    devs = [device(f"d{i}", s, f"0.0{i + 1}", power=(2 + i, 1, 1 + i % 2)) for i, s in enumerate(speeds)]
    bw = [[0.0 if i == j else 40.0 + 30 * i + 17 * j for j in range(n)] for i in range(n)]
    src = Endpoint(None, tuple(150.0 - 20 * i for i in range(n)), tuple(0.01 * (i + 1) for i in range(n))) \
        if external else 0
    snk = Endpoint(None, tuple(120.0 - 10 * i for i in range(n)), tuple(0.01 for _ in range(n))) \
        if external else n - 1
    return make_instance(graph, devs, bw=bw, lat=0.03, source=src, sink=snk,
                         search=SearchSpace(fusion, max_parts, splits, axes))


def example(name: str, **search):
    inst = load_instance(EXAMPLES / name)
    return replace(inst, search=replace(inst.search, **search)) if search else inst


CASES = {
    "tiny-2dev": lambda: example("tiny-2dev.yaml", splits=("equal",), fusion_limit=1),
    "tiny-fc-2dev": lambda: example("tiny-fc-2dev.yaml"),
    "tiny-residual-3dev": lambda: example("tiny-residual-3dev.yaml", max_parts=1),  # external source,
    "chain": lambda: tiny(chain_graph(3)),
    "residual-external": lambda: tiny(residual_graph(), external=True, splits=("equal", "capacity")),
    "residual-shared": lambda: tiny(residual_graph(), medium="shared"),
    "skip-3distinct": lambda: distinct(residual_graph()),
    "branches-3distinct-external": lambda: distinct(branch_graph(), external=True),
    "chain-4distinct": lambda: distinct(chain_graph(2), n=4, max_parts=3),
}
SLOW = {"tiny-residual-3dev", "chain-4distinct", "tiny-2dev", "branches-3distinct-external"}
CASE_PARAMS = [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in sorted(CASES)]

_brute: dict = {}
_graphs: dict = {}


def optimum(case: str, objective: str) -> float:
    key = (case, objective)
    if key not in _brute:
        res = get_planner("bruteforce").solve(CASES[case](), objective=objective)
        assert res.status == "optimal", res.message
        _brute[key] = res.value
    return _brute[key]


def whole_graph(case: str):
    if case not in _graphs:
        _graphs[case] = build_stage_graph(CASES[case](), reduction="none")
    return _graphs[case]


def lower(lb) -> float:
    return float(lb.to_go[0].min())


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_coarse_bound_never_exceeds_the_optimum_nor_the_full_bound(case):
    inst = CASES[case]()
    for objective in OBJECTIVES:
        coarse = lower(coarse_bounds(inst, objective))
        full = lower(layout_bounds(inst, objective))
        opt = optimum(case, objective)
        assert 0 <= coarse <= opt * (1 + REL), (objective, coarse, opt)
        assert coarse <= full * (1 + 1e-6) + 1e-15, (objective, coarse, full)


def most_options(inst) -> int:
    """The most options of one stage in the full relaxation (one order per device type)."""
    return max(len(t.group) for t in layout_bounds(inst, "latency").tables.values())


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_forced_merging_and_collapse_stay_below_every_path(case):
    """Merged device types (smaller and smaller option budgets, down to one type) and
    boundaries without classes only lower the bound: below the unforced coarse bound and below
    the least floor sum of every path of the whole stage graph."""
    inst = CASES[case]()
    sg = whole_graph(case)
    budgets = []
    m = most_options(inst) - 1
    while m >= 1:
        budgets.append(m)
        m //= 2
    merged = 0
    for objective in OBJECTIVES:
        best_path = floor_suffix(sg, objective)[sg.source]
        plain = lower(coarse_bounds(inst, objective))
        assert plain <= best_path * (1 + REL) + 1e-15, objective
        forced = [dict(max_classes=0), dict(grid=2), dict(grid=1), dict(grid=None)] + \
            [dict(max_options=b) for b in budgets] + [dict(max_options=b, max_classes=0) for b in budgets[:1]] + \
            [dict(max_options=b, grid=3) for b in budgets[-1:]]
        for kw in forced:
            try:
                lb = coarse_bounds(inst, objective, **kw)
            except PlannerError:  # even one merged type has more options than the budget
                assert "max_options" in kw
                continue
            merged += len(lb.types.orbits) < len(coarse_bounds(inst, objective).types.orbits)
            value = lower(lb)
            if kw.get("grid", 2) is not None:  # regions as they are (grid None) may give more
                assert value <= plain * (1 + 1e-6) + 1e-15, (objective, kw)
            assert value <= best_path * (1 + REL) + 1e-15, (objective, kw)
            if objective == "latency" and "max_options" in kw:
                assert value <= optimum(case, objective) * (1 + REL)
    if len(inst.devices) > 1 and budgets:
        assert merged > 0  # the budgets did force merged types


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_refined_coarse_bound_is_the_best_grid_and_never_exceeds_the_optimum(case):
    """The refinement keeps the highest of its grids' bounds, each a proof: at least the default
    grid's, at most the optimum and the least floor sum of every path."""
    inst = CASES[case]()
    sg = whole_graph(case)
    for objective in ("latency", "energy"):
        refined = refined_coarse_bounds(inst, objective)
        plain = lower(coarse_bounds(inst, objective))
        tried = [p["lower"] for p in refined.passes]
        assert refined.passes[0]["grid"] == COARSE_GRID and tried[0] == pytest.approx(plain, rel=1e-12)
        assert None not in tried and lower(refined.bounds) == max(tried) >= plain
        raised = [i for i, v in enumerate(tried) if i and v > tried[0]]
        assert len(tried) == (1 + len(REFINE_GRIDS) if not raised else raised[0] + 1)  # stops once raised
        assert lower(refined.bounds) <= optimum(case, objective) * (1 + REL)
        assert lower(refined.bounds) <= floor_suffix(sg, objective)[sg.source] * (1 + REL) + 1e-15


def test_refinement_is_skipped_without_time():
    inst = CASES["skip-3distinct"]()
    refined = refined_coarse_bounds(inst, "latency", refine_by=Deadline(0.0))
    assert [p["grid"] for p in refined.passes] == [COARSE_GRID] and refined.grid == COARSE_GRID


def test_merging_fits_the_budget_with_fewer_types():
    inst = CASES["chain-4distinct"]()
    lb = coarse_bounds(inst, "latency")
    assert [len(o) for o in lb.types.orbits] == [1, 1, 1, 1]  # fits: the devices' own types
    most = most_options(inst)
    merged = coarse_bounds(inst, "latency", max_options=most - 1)
    assert 1 <= len(merged.types.orbits) < 4
    assert sorted(d for o in merged.types.orbits for d in o) == [0, 1, 2, 3]
    assert max(len(t.group) for t in merged.tables.values()) < most
    # the stage-time floor of merged types: the k-th fastest device for k parts
    assert any(t.time_floor is not None and (t.time_floor > 0).all() for t in merged.tables.values())


def test_the_coarse_relaxation_drops_the_skip():
    """Inside the residual block only the newest tensor is kept: fewer classes than the full
    relaxation, which keeps the skip's layout too."""
    inst = CASES["skip-3distinct"]()
    full = layout_bounds(inst, "latency")
    coarse = coarse_bounds(inst, "latency")
    assert len(coarse.classes[2]) < len(full.classes[2])
    assert all(t != "t0" for key in coarse.classes[2] for t, _ in key)


def solve(inst, **options):
    return get_planner("dp", **options).solve(inst, objective="latency")


@pytest.mark.parametrize("case", ["residual-external", "skip-3distinct"])
def test_planner_reports_the_coarse_bound(case):
    inst = CASES[case]()
    opt = optimum(case, "latency")
    forced = solve(inst, relaxation="coarse")
    assert forced.bound_source in ("coarse", "fluid", "compute-only", "flow")
    assert forced.bound <= opt * (1 + REL)
    assert forced.value is not None and forced.bound <= forced.value
    if forced.bound_source == "coarse":
        refined = lower(refined_coarse_bounds(inst, "latency").bounds)  # no time limit: every grid
        assert forced.bound == pytest.approx(refined, rel=1e-12)
        assert forced.info["coarse"]["lower"] == pytest.approx(refined, rel=1e-12)
        assert refined >= lower(coarse_bounds(inst, "latency"))
    full = solve(inst, relaxation="full")
    assert full.status == "optimal" and full.bound_source == "certified"
    # auto: the full relaxation fits, so the same certificate
    auto = solve(inst)
    assert auto.status == "optimal" and auto.value == pytest.approx(full.value, rel=1e-12)


def test_auto_falls_back_to_the_coarse_relaxation_when_the_full_one_refuses():
    inst = CASES["skip-3distinct"]()
    opt = optimum("skip-3distinct", "latency")
    res = solve(inst, max_options=1)  # the full relaxation refuses every stage
    assert res.info.get("relaxation") == "coarse"
    assert res.bound <= opt * (1 + REL)
    assert "coarse relaxation" in res.message
    with pytest.raises(PlannerError):
        solve(inst, max_options=1, relaxation="full", anytime=False)
    no_start = solve(inst, max_options=1, anytime=False)  # no incumbent: the best single-device plan
    assert no_start.info.get("relaxation") == "coarse" and no_start.plan is not None
    assert no_start.bound <= opt * (1 + REL)


def test_auto_falls_back_to_the_coarse_relaxation_when_the_full_one_hits_the_memory_budget(monkeypatch):
    import milp_planner.engine.rounds as rounds
    from formulations.budget import MemoryBudgetExceeded

    def over_budget(*args, **kw):
        raise MemoryBudgetExceeded(2 * 10**9, 10**9)

    inst = CASES["skip-3distinct"]()
    opt = optimum("skip-3distinct", "latency")
    monkeypatch.setattr(rounds, "_full_bounds", over_budget)
    res = solve(inst)
    assert res.info.get("relaxation") == "coarse" and "memory budget" in res.message
    assert res.bound_source in ("coarse", "fluid", "compute-only", "flow")
    assert res.plan is not None and res.bound <= opt * (1 + REL)


def test_the_full_relaxation_stopped_by_its_time_is_released_before_the_coarse_one(monkeypatch):
    """A full relaxation stopped by its share of the time leaves its tables too: the coarse
    one then ran out of the 2 GB budget on them (fleet/mobilenetv2-16dev-4types latency)."""
    import milp_planner.engine.rounds as rounds

    def out_of_time(*args, **kw):
        raise TimeoutError("the time limit ran out while bounding the plan space")

    released = []
    monkeypatch.setattr(rounds, "_full_bounds", out_of_time)
    monkeypatch.setattr(rounds, "release_memory", lambda: released.append(1) or 0)
    res = solve(CASES["skip-3distinct"]())
    assert res.info.get("relaxation") == "coarse" and released
    assert res.bound <= optimum("skip-3distinct", "latency") * (1 + REL)


def test_relaxation_option_is_checked():
    with pytest.raises(PlannerError, match="relaxation"):
        get_planner("dp", relaxation="fine")


def test_cli_json_says_coarse(tmp_path, capsys):
    from milp_planner.cli import main

    path = EXAMPLES / "tiny-2dev.yaml"
    code = main(["solve", str(path), "--planner", "dp", "-O", "relaxation=coarse", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["bound_source"] in ("coarse", "fluid", "compute-only", "flow")
    assert out["bound"] <= out["objective"] * (1 + REL)

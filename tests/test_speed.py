"""The caches of the certified solves (docs/exact.md, "Speed"): the stage geometry shared by
the pricers of one graph and remembered per part range, the per-part prices of
``stage_groups``, and the rule that skips the sub-fleet ladder on small spaces. Every cached
number must equal the one computed afresh."""

import json
import subprocess
import sys
from dataclasses import replace
from itertools import permutations
from pathlib import Path

import numpy as np
import pytest
from builders import chain_graph, device, make_instance, residual_graph

from milp_planner.deadline import Deadline
from milp_planner.cost.evaluator import Pricer, pricer
from milp_planner.instance import SearchSpace
from milp_planner.instance.restrict import restrict_devices
from milp_planner.planners import get_planner, subfleet
from milp_planner.planners.subfleet import SMALL_SPACE_OPTIONS, ladder_pays, space_size
from milp_planner.space.geometry import Region, StageGeometry, stage_geometry
from formulations.options import _layouts, stage_groups
from formulations.symmetry import device_types, order_count

ROOT = Path(__file__).resolve().parents[1]


def _fleet(n=4, graph=None, search=None):
    devs = [device(f"d{i}", 1000 * (i + 1), "0.01") for i in range(n)]
    bw = [[0.0 if i == j else 4000.0 for j in range(n)] for i in range(n)]
    return make_instance(graph or chain_graph(3), devs, bw=bw, lat=0.001,
                         search=search or SearchSpace(2, 3, ("equal", "capacity"), ("rows", "channels")))


def test_region_cells_is_a_plain_attribute_left_out_of_equality():
    r = Region((2, 7), (0, 3))
    assert r.cells == 15 and Region((5, 5), (0, 3)).cells == 0 and Region((4, 2), (0, 3)).cells == 0
    assert r == Region((2, 7), (0, 3)) and hash(r) == hash(Region((2, 7), (0, 3)))
    assert "cells" not in repr(r)


@pytest.mark.parametrize("graph", [chain_graph(4), residual_graph()], ids=["chain", "residual"])
def test_cached_parts_equal_fresh_geometry(graph):
    """Every part of every layout, from the shared, per-range cache, equals the geometry built
    afresh for that layout alone (a new ``StageGeometry`` per layout)."""
    inst = _fleet(3, graph, SearchSpace(3, 3, ("equal", "capacity"), ("rows", "channels")))
    geo = stage_geometry(inst.graph)
    n = len(inst.graph.layers)
    checked = 0
    for b in range(n):
        for e in range(b, min(n, b + 3)):
            for axis, ranges in _layouts(inst, b, e):
                cached = geo.parts(b, e, axis, list(ranges))
                fresh = StageGeometry(inst.graph).parts(b, e, axis, list(ranges))
                assert cached == fresh
                checked += len(ranges)
    assert checked > 20


def test_sub_fleets_share_the_geometry_of_their_graph():
    inst = _fleet(4)
    sub = restrict_devices(inst, ["d0", "d2"])
    assert sub.graph is inst.graph and pricer(sub) is not pricer(inst)
    assert pricer(sub).geometry is pricer(inst).geometry
    parts = pricer(inst).geometry.parts(0, 1, "rows", [(0, 3), (3, 8)])
    assert pricer(sub).geometry.parts(0, 1, "rows", [(0, 3), (3, 8)]) is parts
    # the same part range in another layout is the same object
    assert pricer(sub).geometry.parts(0, 1, "rows", [(0, 3), (3, 5), (5, 8)])[0] is parts[0]


@pytest.mark.parametrize("planner", ["modnn", "coedge"])
def test_a_solved_instance_once_dropped_takes_its_geometry_with_it(planner):
    """The shared geometries and the needed-rows memo hold a graph weakly: a long-lived process
    (a test worker, research code) does not keep the parts of the last graphs it solved (a
    DenseNet-121 over 8 devices left about 0.35 GB each). (The exact planners' relaxation memos,
    two entries each, keep their graphs on purpose: a Pareto front's steps reuse them.)"""
    import gc
    import weakref

    from milp_planner.cost.floors import needed_row_sets
    from milp_planner.space import geometry

    def solve():
        inst = _fleet(3, residual_graph())
        needed_row_sets(inst.graph)
        res = get_planner(planner).solve(inst, time_limit=30)
        assert res.plan is not None and stage_geometry(inst.graph).graph is inst.graph
        return weakref.ref(inst.graph), stage_geometry(inst.graph)

    graph, geo = solve()
    gc.collect()
    assert graph() is None and all(ref() is not None for ref, _ in geometry._SHARED)
    assert not any(g is geo for _, g in geometry._SHARED)
    with pytest.raises(ReferenceError):
        geo.graph


def test_stage_group_prices_equal_the_pricer():
    """``stage_groups``' remembered per-part prices are the evaluator's own numbers: compute
    seconds per device (the same floats), weight bytes and computed bytes."""
    inst = _fleet(3)
    pr = Pricer(inst)
    n = len(inst.graph.layers)
    seen = 0
    for b in range(n):
        for e in range(b, min(n, b + 2)):
            for grp in stage_groups(inst, pr, b, e):
                k = len(grp.geos)
                assert grp.perms == list(permutations(range(3), k))
                for p, devs in enumerate(grp.perms):
                    for j, (d, part) in enumerate(zip(devs, grp.geos)):
                        assert grp.comp[p, j] == pr.compute_time(d, part)
                for j, part in enumerate(grp.geos):
                    assert grp.weights[j] == sum(pr.weight_bytes(part, grp.axis).values())
                    assert grp.computed[j] == pr.computed_bytes(part)
                seen += 1
    assert seen > 10


@pytest.mark.parametrize("symmetry", [True, False])
def test_space_size_counts_what_the_relaxation_lists(symmetry):
    devs = [device("a", 1000), device("b", 2000), device("c", 2000), device("d", 2000)]
    inst = make_instance(chain_graph(4), devs, lat=0.001,
                         search=SearchSpace(3, 4, ("equal", "capacity"), ("rows", "channels")))
    types = device_types(inst, symmetry)
    n = len(inst.graph.layers)
    total = largest = 0
    for b in range(n):
        for e in range(b, min(n, b + 3)):
            stage = sum(order_count(types, len(r)) for _, r in _layouts(inst, b, e))
            total += stage
            largest = max(largest, stage)
    size = space_size(inst, symmetry)
    assert (size.total, size.largest) == (total, largest)
    assert space_size(inst, symmetry, stop_above=3).total > 3  # stops early, above the limit


def test_the_ladder_is_skipped_only_for_latency_and_energy_over_small_spaces(monkeypatch):
    inst = _fleet(4)
    assert space_size(inst).total <= SMALL_SPACE_OPTIONS
    assert not ladder_pays(inst, "latency", 250_000)
    assert not ladder_pays(inst, "energy", 250_000)
    assert ladder_pays(inst, "period", 250_000) and ladder_pays(inst, "memory", 250_000)
    assert ladder_pays(inst, "latency", 100)  # a stage over max_options: the relaxation refuses
    monkeypatch.setattr(subfleet, "SMALL_SPACE_OPTIONS", 10)
    assert ladder_pays(inst, "latency", 250_000)


def test_the_ladder_runs_over_a_small_space_with_memory_caps_on_a_larger_fleet():
    capped = replace(_fleet(5), devices=tuple(replace(d, memory_bytes=10**9) for d in _fleet(5).devices))
    assert space_size(capped).total <= SMALL_SPACE_OPTIONS
    assert ladder_pays(capped, "latency", 250_000) and ladder_pays(capped, "energy", 250_000)
    assert not ladder_pays(_fleet(5), "energy", 250_000)  # the same fleet without caps
    four = _fleet(4)
    four = replace(four, devices=tuple(replace(d, memory_bytes=10**9) for d in four.devices))
    assert not ladder_pays(four, "energy", 250_000)  # caps on 4 devices: the full search first


def test_a_small_space_is_certified_without_the_ladder_and_the_same_optimum(monkeypatch):
    inst = _fleet(4)
    res = get_planner("dp").solve(inst, time_limit=30)
    assert res.status == "optimal" and "ladder" not in res.info
    monkeypatch.setattr(subfleet, "SMALL_SPACE_OPTIONS", 0)
    with_ladder = get_planner("dp").solve(inst, time_limit=30)
    assert with_ladder.status == "optimal" and with_ladder.info["ladder"]["tried"]
    assert res.value == pytest.approx(with_ladder.value, rel=1e-12)
    assert res.bound == pytest.approx(with_ladder.bound, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("objective, value", [("latency", 0.41534444603076925), ("energy", 6.234398796799998)])
def test_vgg16_4dev_uncapped_is_certified_with_the_same_optimum(objective, value):
    """The issue #13 target file, solved as a user solves it (a command of its own, the default
    memory budget): certified, the optimum recorded before the caches. A process of its own:
    the budget counts the whole process, and a test worker may hold what earlier tests left."""
    out = subprocess.run([sys.executable, "-m", "milp_planner", "solve", "instances/fleet/vgg16-4dev-uncapped.yaml",
                          "--planner", "dp", "--objective", objective, "--time-limit", "60", "--compare", "none",
                          "--json", "--quiet"], capture_output=True, text=True, check=True, cwd=ROOT)
    res = json.loads(out.stdout)
    assert res["status"] == "optimal" and res["bound_source"] == "certified"
    assert res["objective"] == pytest.approx(value, rel=1e-12)
    assert np.isclose(res["bound"], res["objective"], rtol=1e-12)
    assert "ladder" not in res["info"]


def test_the_enumeration_pauses_the_garbage_collector_and_restores_it():
    """``build_stage_graph`` runs with the cyclic collector paused and leaves it as it found
    it, also when the enumeration stops at its deadline."""
    import gc

    from formulations.stagegraph import build_stage_graph, gc_paused

    inst = _fleet(3)
    seen = []
    with gc_paused():
        seen.append(gc.isenabled())
    assert seen == [False] and gc.isenabled()
    sg = build_stage_graph(inst, objective="latency")
    assert sg.arcs and gc.isenabled()
    with pytest.raises(TimeoutError):
        build_stage_graph(inst, objective="latency", deadline=Deadline(0.0))
    assert gc.isenabled()
    gc.disable()
    try:
        build_stage_graph(inst, objective="latency")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_no_ladder_nor_polish_over_a_tiny_space_whatever_the_objective(monkeypatch):
    inst = _fleet(4)
    assert space_size(inst).total > subfleet.TINY_SPACE_OPTIONS
    monkeypatch.setattr(subfleet, "TINY_SPACE_OPTIONS", space_size(inst).total)
    assert ladder_pays(inst, "period", 250_000)  # 4 devices: not a tiny fleet
    monkeypatch.setattr(subfleet, "TINY_FLEET", 4)
    for objective in ("latency", "energy", "period", "memory"):
        assert not ladder_pays(inst, objective, 250_000)

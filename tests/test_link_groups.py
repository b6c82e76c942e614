"""Link groups in the layout relaxation (``formulations.link_groups``): a layout records which
of its regions one machine holds, so a device receives from a machine that owns nothing over
the slow links between machines, not over its board sibling's fast link.

The bounds are checked against brute force (every plan of a random instance scored by the
evaluator, ``benchmarks/differential.py``) on random instances whose devices sit on boards,
against the bound without groups (never above it), and arc by arc against the exact best
completion; the helpers against hand-computed values.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from builders import chain_graph, device, make_instance, residual_graph

from formulations.coarse import COARSE_GRID, coarse_bounds, refined_coarse_bounds
from formulations.dp import arc_cost, prefix_suffix, shortest_path, terminal_cost
from formulations.link_groups import (
    NO_LINK,
    canonical_labels,
    grouped_links,
    node_ids,
    node_patterns,
)
from formulations.relaxation import _FloorCost, layout_bounds
from formulations.stagegraph import build_stage_graph
from formulations.symmetry import device_types
from milp_planner.instance import SearchSpace

from bed_cases import bed, small_cases

from milp_planner.instance.generate import random_spec

REL = 1e-9


def boards(n_boards=2, fast=400.0, slow=30.0, same=False, search=None, graph=None):
    """``n_boards`` boards of two devices each (fast inside a board, slow between boards);
    ``same``: every board alike (their devices interchangeable board by board)."""
    devs, bw = [], []
    for b in range(n_boards):
        speed = 1000 if same else 1000 + 300 * b
        devs += [replace(device(f"b{b}cpu", speed, "0.01"), node=f"b{b}"),
                 replace(device(f"b{b}gpu", 3 * speed, "0.005", power=(3, 1, 1)), node=f"b{b}")]
    n = len(devs)
    for i in range(n):
        bw.append([0.0 if i == j else (fast if i // 2 == j // 2 else slow + (0 if same else 3 * ((i + j) % 3)))
                   for j in range(n)])
    return make_instance(graph or chain_graph(3), devs, bw=bw, lat=0.02, source=0, sink=0,
                         search=search or SearchSpace(1, 4, ("equal",), ("rows",)))


def without_nodes(inst):
    return replace(inst, devices=tuple(replace(d, node="") for d in inst.devices))


# -- the helpers, by hand ------------------------------------------------------------------

def test_canonical_labels_number_blocks_by_first_appearance():
    assert canonical_labels(np.array([[7, 7, 3, 5], [2, 4, 4, 2], [1, 1, 1, 1]])).tolist() == [
        [0, 0, 1, 2], [0, 1, 1, 0], [0, 0, 0, 0]]


def test_node_ids_are_none_without_a_shared_node():
    inst = boards()
    assert node_ids(inst).tolist() == [0, 0, 1, 1]
    assert node_ids(without_nodes(inst)) is None


def test_node_patterns_list_every_partition_a_real_order_gives():
    inst = boards(3, same=True)
    inst = replace(inst, network=replace(inst.network, source=replace(inst.network.source, device=None,
                                                                         bandwidth_Bps=(1.0,) * 6,
                                                                         latency_s=(0.0,) * 6),
                                         sink=replace(inst.network.sink, device=None, bandwidth_Bps=(1.0,) * 6,
                                                      latency_s=(0.0,) * 6)))
    types = device_types(inst)
    orbit = np.asarray(types.orbit)
    assert len(types.orbits) == 2  # the CPUs, the GPUs: boards interchangeable
    pats = node_patterns(orbit, node_ids(inst), 2)
    cpu, gpu = orbit[0], orbit[1]
    # a CPU and a GPU: on one board or on two; two CPUs: always on two boards
    assert sorted(map(tuple, pats[(cpu, gpu)].tolist())) == [(0, 0), (0, 1)]
    assert pats[(cpu, cpu)].tolist() == [[0, 1]]
    assert node_patterns(orbit, node_ids(inst), 7) is None  # more parts than devices


def test_grouped_links_split_a_device_links_by_machine():
    inst = boards()
    in_bw, in_lat, out_bw, _ = grouped_links(inst, node_ids(inst), 3)
    assert in_bw[0].tolist() == pytest.approx([1 / 400.0, NO_LINK, NO_LINK])
    assert out_bw[0].tolist() == pytest.approx([1 / 36.0, 1 / 30.0, NO_LINK])
    assert in_lat[0].tolist() == pytest.approx([0.02, NO_LINK, NO_LINK])


def test_received_grouped_by_hand():
    """One receiver (device 0, board b0, in-node link 400 B/s, out-node 36 then 30 B/s) reads
    100 B from each of three regions. Blocks {0, 1}, {2}: it claims one of {0, 1}, gets the other
    over its board link, the third over the fastest link out: 100/400 + 100/36 + 2 x 0.02.
    Blocks {0}, {1}, {2}: one claimed, two over the links out: 100/36 + 100/30 + 2 x 0.02."""
    inst = boards()
    cost = _FloorCost(inst, "latency", node_ids(inst), 4)
    nbytes = np.full((2, 3, 1, 1), 100.0)
    labels = np.array([[0, 0, 1], [0, 1, 2]])
    got, link = cost._received_grouped(nbytes, labels)
    d0 = got[:, link[0], 0, 0]
    assert d0[0] == pytest.approx(100 / 400 + 100 / 36 + 0.04)
    assert d0[1] == pytest.approx(100 / 36 + 100 / 30 + 0.04)


# -- the bounds against brute force ----------------------------------------------------------

def _on_boards(seed: int) -> dict:
    """A random spec (the differential bed's) with its devices on boards: two per board, a
    fast link inside a board (``differential.on_boards``)."""
    spec = bed.on_boards(random_spec(seed), random.Random(seed))
    spec["name"] = spec["instance"]["name"] = f"boards-{seed}"
    return spec


def _cases(count: int, start: int):
    return small_cases(_on_boards, count, start)


@pytest.mark.parametrize("chunk", range(4))
def test_grouped_bounds_below_brute_force_and_above_the_ungrouped(chunk):
    """On random instances on boards: the relaxation's bound with link groups is never above
    the brute-force optimum of latency, energy and period, and never below the bound without
    groups; with and without the device-type symmetry it is the same. The same for the coarse
    relaxation's blocks, with its regions as they are and widened to a grid."""
    for seed, inst, table in _cases(6, 31000 + 1000 * chunk):
        for col, objective in enumerate(("latency", "energy", "period")):
            opt = float(table[:, col].min())
            lb = layout_bounds(inst, objective)
            assert lb.node_of is not None
            assert lb.lower <= opt * (1 + REL), (seed, objective, lb.lower, opt)
            plain = layout_bounds(without_nodes(inst), objective)
            assert plain.lower <= lb.lower * (1 + 1e-6) + 1e-15, (seed, objective, plain.lower, lb.lower)
            nosym = layout_bounds(inst, objective, symmetry=False)
            assert nosym.lower == pytest.approx(lb.lower, rel=1e-6), (seed, objective)
            for grid in (None, 2):  # the coarse relaxation (the newest tensor only, widened regions)
                coarse = coarse_bounds(inst, objective, grid=grid, blocks=True)
                assert coarse.node_of is not None
                assert coarse.lower <= opt * (1 + REL), (seed, objective, grid, coarse.lower, opt)
                flat = coarse_bounds(inst, objective, grid=grid)
                assert flat.lower <= coarse.lower * (1 + 1e-6) + 1e-15, (seed, objective, grid)


@pytest.mark.parametrize("same", [False, True])
@pytest.mark.parametrize("objective", ["latency", "energy"])
def test_bound_after_each_arc_never_exceeds_the_best_rest(objective, same):
    """After every arc of the whole space of a residual network on two boards, the bound on
    what is left is at most the exact best completion (the DP suffix)."""
    inst = boards(same=same, graph=residual_graph(), search=SearchSpace(2, 3, ("equal",), ("rows", "channels")))
    bounds = layout_bounds(inst, objective)
    full = build_stage_graph(inst, objective=objective, bounds=bounds)
    _, suf = prefix_suffix(full, arc_cost(full, objective), terminal_cost(full, objective))
    index = {}
    for tab in bounds.tables.values():
        for oi in range(len(tab.group)):
            index.setdefault(tab.groups[tab.group[oi]].option(tab.perm[oi]), (tab, oi))
    checked = 0
    for a in full.arcs:
        if a.option not in index:  # a device order the type-level table lists by another order
            continue
        tab, oi = index[a.option]
        after = float(bounds.after(a.option.first, a.option.last, dict(full.nodes[a.tail][1]))[oi])
        assert after <= suf[a.head] * (1 + REL) + 1e-12
        checked += 1
    assert checked and bounds.misses == 0


def test_groups_lift_the_bound_where_a_sibling_owns_nothing():
    """Two boards, a 3-layer chain, four row parts at most: without groups a device gets a
    neighbour's halo over the 400 B/s board link whoever owns it; with them the bound rises."""
    inst = boards(search=SearchSpace(1, 4, ("equal",), ("rows",)))
    grouped = layout_bounds(inst, "latency").lower
    plain = layout_bounds(without_nodes(inst), "latency").lower
    assert grouped > plain * 1.001
    _, opt = shortest_path(build_stage_graph(inst), "latency")  # the whole space's optimum
    assert grouped <= opt * (1 + REL)


def test_received_widened_grouped_by_hand():
    """The coarse relaxation's widened regions: device 0 needs 100 B and three regions hold
    60, 50 and 30 B of it. Blocks {0, 1}, {2}: it claims 60, gets the other 40 from its board
    (50 B there) over 400 B/s: 40/400. Blocks {0}, {1}, {2}: it claims 60 and the other 40 come
    from other boards over its fastest link out (36 B/s). No message latency."""
    inst = boards()
    cost = _FloorCost(inst, "latency", node_ids(inst), 4)
    share = np.array([60.0, 50.0, 30.0])[None, :, None, None].repeat(2, axis=0)
    got, link = cost._received_widened_grouped(share, np.array([[0, 0, 1], [0, 1, 2]]), np.array([[100.0]]))
    d0 = got[:, link[0], 0, 0]
    assert d0[0] == pytest.approx(40 / 400)
    assert d0[1] == pytest.approx(40 / 36)


def test_refined_coarse_bounds_try_blocks_first_with_link_groups():
    """With link groups the refinement's last pass records blocks on the grid kept; on two
    boards it raises the bound above every pass without; without groups it is not tried."""
    inst = boards(search=SearchSpace(1, 4, ("equal",), ("rows",)))
    refined = refined_coarse_bounds(inst, "latency")
    assert refined.passes[0]["grid"] == COARSE_GRID and not refined.passes[0]["blocks"]
    assert [p["blocks"] for p in refined.passes].count(True) == 1 and refined.passes[-1]["blocks"]
    assert refined.blocks and refined.info()["blocks"] is True
    assert refined.bounds.lower > max(p["lower"] for p in refined.passes[:-1])
    _, opt = shortest_path(build_stage_graph(inst), "latency")
    assert refined.bounds.lower <= opt * (1 + REL)
    plain = refined_coarse_bounds(without_nodes(inst), "latency")
    assert not any(p["blocks"] for p in plain.passes)


def test_too_many_block_classes_fall_back_to_layouts_without_blocks(monkeypatch):
    """Past ``MAX_BLOCK_CLASSES`` classes at a boundary the full relaxation is built again
    without blocks and says why; its bound is then the one without groups. The coarse
    relaxation has its own limit (its reads go free) and never falls back."""
    from formulations import relaxation

    inst = boards(search=SearchSpace(1, 4, ("equal",), ("rows",)))
    monkeypatch.setattr(relaxation, "MAX_BLOCK_CLASSES", 1)
    lb = layout_bounds(inst, "energy")
    assert lb.node_of is None and "classes with link-group blocks" in lb.blocks_off
    assert lb.lower == pytest.approx(layout_bounds(without_nodes(inst), "energy").lower, rel=1e-12)
    coarse = coarse_bounds(inst, "energy", blocks=True, grid=None)
    assert coarse.node_of is not None


def test_solves_with_the_coarse_blocks_beside_the_full_relaxation_match_brute_force(monkeypatch):
    """With the full relaxation forced to leave blocks out (``MAX_BLOCK_CLASSES`` = 1), a latency
    solve proves the coarse relaxation's bound with blocks beside it (``rounds._blocked_lower``):
    on random instances on boards the bound never exceeds the brute-force optimum, the plan is
    that optimum, and the pass is in ``info``."""
    from formulations import relaxation
    from milp_planner.planners import get_planner

    monkeypatch.setattr(relaxation, "MAX_BLOCK_CLASSES", 1)
    ran = 0
    for seed, inst, table in _cases(6, 37000):
        opt = float(table[:, 0].min())
        for anytime in (False, True):  # (with a start, a bound above it would prove it optimal)
            res = get_planner("dp", anytime=anytime).solve(inst, objective="latency")
            assert res.status == "optimal" and res.value == pytest.approx(opt, rel=1e-9), (seed, res.value, opt)
            assert res.bound <= opt * (1 + REL), (seed, res.bound, opt)
            coarse = res.info.get("coarse")
            if coarse is not None:
                assert coarse["lower"] <= opt * (1 + REL) and coarse["passes"][0]["blocks"], seed
                ran += 1
    assert ran, "no case ran the coarse pass beside the full relaxation"


def test_every_chunk_asks_for_its_temporaries_before_it_allocates(monkeypatch):
    """The received seconds (``_FloorCost._received``) and the backward pass check the memory
    budget before every chunk with the bytes the chunk is about to hold (``need``): the peaks
    of hidp/vgg19-5node passed 2 GB by one chunk's temporaries when only the first was checked."""
    import sys

    import formulations.relaxation as rel

    asked = []

    def check(force=False, need=0):
        asked.append((sys._getframe(1).f_code.co_name, need))

    monkeypatch.setattr(rel, "check_memory", check)
    monkeypatch.setattr(_FloorCost, "RECEIVE_CHUNK_BYTES", 1)  # one layout per chunk: many chunks
    monkeypatch.setattr(rel, "BACKWARD_CHUNK_BYTES", 1)
    inst = boards(graph=residual_graph(), search=SearchSpace(2, 3, ("equal",), ("rows", "channels")))
    rel._MEMO.clear()
    coarse_bounds(inst, "latency", grid=None, blocks=True)
    received = [n for f, n in asked if f == "_received"]
    backward = [n for f, n in asked if f == "_check"]
    assert len(received) > 2 and all(n > 0 for n in received)
    assert any(n > 0 for n in backward)


@pytest.mark.parametrize("objective", ["latency", "period"])
def test_received_in_chunks_of_one_layout_gives_the_same_bounds(monkeypatch, objective):
    """``_FloorCost._received`` prices layouts in chunks (``RECEIVE_CHUNK_BYTES``) to bound its
    temporaries: with one layout per chunk every relaxation (full, coarse on a grid and with
    its regions as they are, with and without blocks) gives the same bounds, bit for bit."""
    import formulations.coarse as coarse_mod
    import formulations.relaxation as rel

    def bounds(inst):
        rel._MEMO.clear()
        coarse_mod._MEMO.clear()
        out = [layout_bounds(inst, objective)]
        out += [coarse_bounds(inst, objective, grid=g, blocks=b) for g in (None, 2) for b in (False, True)]
        return [(float(lb.lower), [a.tobytes() for a in lb.to_go]) for lb in out]

    cases = [inst for _, inst, _ in _cases(2, 47000)]
    cases.append(boards(graph=residual_graph(), search=SearchSpace(2, 3, ("equal",), ("rows", "channels"))))
    for inst in cases:
        whole = bounds(inst)
        monkeypatch.setattr(_FloorCost, "RECEIVE_CHUNK_BYTES", 1)
        assert bounds(inst) == whole
        monkeypatch.undo()

"""Every path of the tiny stage graphs costs what the evaluator says, and no floor exceeds a cost.

A certificate is only as true as this. The exact planners score a plan as the sum (or max) of
its arcs' prices plus the terminal gather (``StageGraph.path_value``), and prune with floors:
``arc_floor``/``terminal_floor`` along a path, the vectorised floors of the forward pass
(``_ExactFloors``) and the layout relaxation's bounds (``layout_bounds(...).to_go`` and
``after``). Here the whole graph of each tiny instance is built (no upper bound) and

- it holds exactly one arc per stage option leaving every node (``stage_options``);
- every source-to-terminal path's plan, evaluated by ``evaluate``, is in the space and has
  the path's value for latency, energy, period and memory (relative 1e-9);
- along every path the floors add up to at most its value, for every objective;
- every floor of the forward pass is at most the arc's floor, and after every arc (and at the
  source) the relaxation's bound is at most the best completion's floor sum.

Arc prices and the evaluator come from one function (``evaluator.price_stage``), so the path
check tests how the graph composes them (the arcs' per-device loads, weights and working
sets, the next states, the gather); the floors are computed independently in numpy and would
catch a price that is too low. Where the paths are too many to evaluate (the full example
files: 451,072 and 15,494,625 paths) a slow test evaluates one path through every arc.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from builders import chain_graph, device, fc_graph, make_instance, residual_graph
from test_exact import tiny

import formulations.stagegraph as stagegraph
from formulations.options import stage_options
from formulations.relaxation import layout_bounds
from formulations.stagegraph import _ExactFloors, arc_floor, build_stage_graph, terminal_floor
from milp_planner.cost.evaluator import evaluate, pricer
from milp_planner.instance import SearchSpace
from milp_planner.instance.network import Endpoint
from milp_planner.instance.reader import load_instance

OBJECTIVES = ("latency", "energy", "period", "memory")
EXAMPLES = Path(__file__).resolve().parents[1] / "instances" / "examples"


def example(name: str, **search):
    """An example file, with some ``search`` keys changed to keep its graph small."""
    inst = load_instance(EXAMPLES / name)
    return replace(inst, search=replace(inst.search, **search)) if search else inst


def three_devices(graph, medium="switched", fusion=2, splits=("equal", "capacity"), axes=("rows", "channels"),
                  external=False, memory=(None, None, None)):
    devs = [device("a", 1000, "0.01", memory=memory[0], power=(2, 1, 1)),
            device("b", 2500, "0.02", memory=memory[1], power=(4, 1, 2)),
            device("c", 1700, "0.005", memory=memory[2], power=(3, 2, 1))]
    bw = [[0, 100.0, 40.0], [250.0, 0, 80.0], [60.0, 120.0, 0]]
    src = Endpoint(None, (150.0, 90.0, 60.0), (0.02, 0.03, 0.01)) if external else 0
    snk = Endpoint(None, (120.0, 60.0, 30.0), (0.01, 0.01, 0.02)) if external else 2
    return make_instance(graph, devs, bw=bw, lat=0.05, medium=medium, source=src, sink=snk,
                         search=SearchSpace(fusion, 3, splits, axes))


def caps_chain():
    """The two-device chain with memory caps that bind (the latency optimum breaks them)."""
    return tiny(chain_graph(3), memory=(160, 285))


CASES = {
    # the example files, as they are or with a smaller search space
    "tiny-fc-2dev": lambda: example("tiny-fc-2dev.yaml"),  # shared medium, channel splits, grid:4
    "tiny-2dev-equal-f1": lambda: example("tiny-2dev.yaml", splits=("equal",), fusion_limit=1),
    "tiny-residual-3dev-p1": lambda: example("tiny-residual-3dev.yaml", max_parts=1),  # external source
    # hand-built graphs: every medium, endpoint, axis and a skip
    "chain": lambda: tiny(chain_graph(3)),
    "chain-caps": caps_chain,
    "chain-capacity-external": lambda: tiny(chain_graph(2), external=True, splits=("equal", "capacity")),
    "residual-shared": lambda: tiny(residual_graph(), medium="shared"),
    "residual-external": lambda: tiny(residual_graph(), external=True, splits=("equal", "capacity")),
    "fc-channels": lambda: tiny(fc_graph(), splits=("equal", "grid:4")),
    "chain-3dev": lambda: three_devices(chain_graph(2), fusion=1),
    "chain-3dev-shared-external": lambda: three_devices(chain_graph(2), medium="shared", fusion=1,
                                                        splits=("equal",), external=True),
}


# ---------------------------------------------------------------------------------------
# helpers


def all_paths(sg):
    """Every source-to-terminal path (lists of arc ids)."""
    out, stack = [], [(sg.source, [])]
    while stack:
        nid, path = stack.pop()
        if nid in sg.terminals:
            out.append(path)
        for a in sg.out_arcs[nid]:
            stack.append((sg.arcs[a].head, path + [a]))
    return out


def n_paths(sg) -> int:
    count = {}
    for nid in sorted(range(sg.n_nodes), key=lambda i: -sg.nodes[i][0]):
        count[nid] = (nid in sg.terminals) + sum(count[sg.arcs[a].head] for a in sg.out_arcs[nid])
    return count[sg.source]


def floor_suffix(sg, objective: str) -> list[float]:
    """Per node: the least floor sum of a completion (arcs' floors plus the terminal's)."""
    n_dev = len(sg.instance.devices)
    best = [math.inf] * sg.n_nodes
    for nid in sorted(range(sg.n_nodes), key=lambda i: -sg.nodes[i][0]):
        if nid in sg.terminals:
            best[nid] = terminal_floor(sg.terminals[nid], objective, n_dev)
        for a in sg.out_arcs[nid]:
            arc = sg.arcs[a]
            best[nid] = min(best[nid], arc_floor(arc, objective, n_dev) + best[arc.head])
    return best


def one_path_per_arc(sg) -> list[list[int]]:
    """For every arc, a path through it: the first prefix found to its tail, the first suffix
    from its head (deduplicated)."""
    prefix = {sg.source: []}
    for nid in sorted(range(sg.n_nodes), key=lambda i: sg.nodes[i][0]):
        if nid not in prefix:
            continue
        for a in sg.out_arcs[nid]:
            prefix.setdefault(sg.arcs[a].head, prefix[nid] + [a])
    suffix = {nid: [] for nid in sg.terminals}
    for nid in sorted(range(sg.n_nodes), key=lambda i: -sg.nodes[i][0]):
        for a in sg.out_arcs[nid]:
            if sg.arcs[a].head in suffix and nid not in suffix:
                suffix[nid] = [a] + suffix[sg.arcs[a].head]
    paths = {tuple(prefix[a.tail] + [i] + suffix[a.head]) for i, a in enumerate(sg.arcs)}
    return [list(p) for p in sorted(paths)]


def check_arcs_are_the_stage_options(sg) -> None:
    """Every non-terminal node has one arc per stage option starting there, and nothing else."""
    inst = sg.instance
    n, fl = len(inst.graph.layers), max(1, inst.search.fusion_limit)
    options = {b: [o for e in range(b, min(n, b + fl)) for o in stage_options(inst, b, e)] for b in range(n)}
    total = 0
    for nid, (b, _) in enumerate(sg.nodes):
        got = [sg.arcs[a].option for a in sg.out_arcs[nid]]
        if b == n:
            assert not got and nid in sg.terminals
            continue
        assert nid not in sg.terminals
        assert len(got) == len(set(got)) == len(options[b])
        assert set(got) == set(options[b])
        total += len(options[b])
    assert len(sg.arcs) == total
    assert set(sg.terminals) == {nid for nid, (b, _) in enumerate(sg.nodes) if b == n}


def check_paths(sg, paths) -> None:
    """The evaluator's value of each path's plan is the path's value; floors stay below it."""
    inst = sg.instance
    n_dev = len(inst.devices)
    for path in paths:
        m = evaluate(sg.plan_from_arcs(path), inst)
        assert m.in_space, m.space_reasons
        term = sg.terminals[sg.arcs[path[-1]].head]
        for obj in OBJECTIVES:
            value = sg.path_value(path, obj)
            assert value == pytest.approx(m.value(obj), rel=1e-9, abs=1e-15), (obj, path)
            floor = sum(arc_floor(sg.arcs[a], obj, n_dev) for a in path) + terminal_floor(term, obj, n_dev)
            assert floor <= value * (1 + 1e-12) + 1e-15, (obj, path)


def check_bounds(sg, objective: str) -> None:
    """The forward pass's floors and the relaxation's bounds never exceed what they bound."""
    inst = sg.instance
    pr = pricer(inst)
    n_dev = len(inst.devices)
    bounds = layout_bounds(inst, objective, pr, symmetry=False)
    exact = _ExactFloors(inst, pr, objective)
    best = floor_suffix(sg, objective)
    assert float(bounds.to_go[0][bounds.classes[0][()]]) <= best[sg.source] * (1 + 1e-9) + 1e-15
    index = {}
    for tab in bounds.tables.values():
        for oi in range(len(tab.group)):
            index[tab.groups[tab.group[oi]].option(tab.perm[oi])] = (tab, oi)
    by_tail = {}
    for i, a in enumerate(sg.arcs):
        by_tail.setdefault((a.tail, a.option.first, a.option.last), []).append(i)
    for (tail, first, last), arc_ids in by_tail.items():
        owners = dict(sg.nodes[tail][1])
        tab = bounds.tables[(first, last)]
        recv, energy = exact.received(tab, owners)
        devices, comp, mask, _ = tab.flat()
        # as build_stage_graph prunes with them
        floors = exact.option_floors(tab, recv, energy, tab.group, devices, devices, comp, mask) * (1 - 1e-9)
        after = bounds.after(first, last, owners)
        for i in arc_ids:
            arc = sg.arcs[i]
            t, oi = index[arc.option]
            assert t is tab
            cost = arc_floor(arc, objective, n_dev)
            assert floors[oi] <= cost * (1 + 1e-12) + 1e-15, (objective, arc.option)
            assert after[oi] <= best[arc.head] * (1 + 1e-9) + 1e-12, (objective, arc.option)
    assert bounds.misses == 0


# ---------------------------------------------------------------------------------------
# tests


@pytest.fixture(scope="module")
def graphs():
    return {}


def graph_of(graphs, case):
    """The whole graph of ``case``, every device order, every arc priced in batches
    (``milp_planner.cost.batch``: the engine's way with large graphs; tests/test_batch_pricing.py
    checks those prices bit for bit against ``price_stage``)."""
    if case not in graphs:
        saved, stagegraph.BATCH_MIN = stagegraph.BATCH_MIN, 1
        try:
            graphs[case] = build_stage_graph(CASES[case](), reduction="none")
        finally:
            stagegraph.BATCH_MIN = saved
    return graphs[case]


SLOW = {"chain-3dev"}  # 6,561 paths, ~5 s: in the slow selection (CI runs it)


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in sorted(CASES)])
def test_every_path_costs_what_the_evaluator_says(graphs, case):
    sg = graph_of(graphs, case)
    check_arcs_are_the_stage_options(sg)
    paths = all_paths(sg)
    assert len(paths) == n_paths(sg) > 0
    check_paths(sg, paths)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_floor_exceeds_the_cost_it_bounds(graphs, case, objective):
    check_bounds(graph_of(graphs, case), objective)


def test_graph_without_overflowing_arcs_keeps_every_plan_within_the_caps(graphs):
    """``drop_overflow`` leaves out only arcs no plan within the memory caps uses."""
    full = graph_of(graphs, "chain-caps")
    capped = build_stage_graph(CASES["chain-caps"](), drop_overflow=True)
    assert len(capped.arcs) < len(full.arcs)

    def plans(sg):
        out = {}
        for path in all_paths(sg):
            key = tuple(sg.arcs[a].option for a in path)
            out[key] = evaluate(sg.plan_from_arcs(path), sg.instance).feasible
        return out

    everything, kept = plans(full), plans(capped)
    feasible = {k for k, ok in everything.items() if ok}
    assert feasible and len(feasible) < len(everything)  # the caps bind
    assert feasible <= set(kept)
    assert {k for k, ok in kept.items() if ok} == feasible


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny-2dev.yaml", "tiny-residual-3dev.yaml"])
def test_example_files_one_path_through_every_arc(name):
    """The full example files have too many paths to evaluate every one (451,072 and
    15,494,625): every arc and every terminal is checked on at least one path instead, with
    every floor."""
    sg = build_stage_graph(example(name))
    check_arcs_are_the_stage_options(sg)
    paths = one_path_per_arc(sg)
    assert {a for p in paths for a in p} == set(range(len(sg.arcs)))
    assert {sg.arcs[p[-1]].head for p in paths} == set(sg.terminals)
    check_paths(sg, paths)
    for objective in OBJECTIVES:
        check_bounds(sg, objective)


def test_the_check_fails_on_a_wrong_arc(graphs):
    """The path check can fail: an arc priced too low (half its stage time) is caught."""
    sg = graph_of(graphs, "chain-3dev")
    path = all_paths(sg)[0]
    check_paths(sg, [path])
    arc = sg.arcs[path[0]]
    saved = arc.tau
    try:
        arc.tau = saved * 0.5
        with pytest.raises(AssertionError):
            check_paths(sg, [path])
    finally:
        arc.tau = saved

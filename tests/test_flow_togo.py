"""The flow LP's floor after a boundary (formulations/flow_togo.py): at every node of the whole
stage graph of the tiny instances (with and without binding memory caps) it is at most the
least energy of any completion from that node's exact state; at the source it is the flow LP's
bound; the vectorised floors of the enumeration are the same numbers (and, per orbit, at most
them); it breaks (exceeds a completion) when what a device owns is not credited or when the
rows of earlier layers are kept; and ``dp`` with it agrees with brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from test_exact import CASES as EXACT_CASES
from test_flow_floor import CASES as FLOW_CASES
from test_flow_mip import CAPPED
from test_symmetry import CASES as TYPED_CASES

import formulations.flow_togo as ftg
from formulations.relaxation import layout_bounds
from formulations.stagegraph import _ExactFloors, build_stage_graph
from formulations.symmetry import device_types
from milp_planner.cost.evaluator import next_owners, pricer
from milp_planner.cost.flow import flow_floor
from milp_planner.planners import get_planner

CASES = {**{f"flow-{k}": v for k, v in FLOW_CASES.items()}, **{f"exact-{k}": v for k, v in EXACT_CASES.items()},
         **{f"capped-{k}": v for k, v in CAPPED.items()}, **{f"typed-{k}": v for k, v in TYPED_CASES.items()}}
# the typed cases' whole graphs (every device order) take seconds each: the floor on a smaller space
SMALL = {"typed-two-types", "typed-boards", "typed-host-twins"}
REL = 1e-9


def _instance(case):
    inst = CASES[case]()
    if case in SMALL:
        from test_symmetry import small

        inst = small(case.removeprefix("typed-"))
    return inst


def best_completions(sg) -> list[float]:
    """Per node of a stage graph: the least energy of a path from it to a terminal (its
    arcs and the terminal's gather), inf where none."""
    best = [math.inf] * sg.n_nodes
    for nid, term in sg.terminals.items():
        best[nid] = term.energy
    for nid in sorted(range(sg.n_nodes), key=lambda i: -sg.nodes[i][0]):
        for a in sg.out_arcs[nid]:
            arc = sg.arcs[a]
            best[nid] = min(best[nid], arc.energy + best[arc.head])
    return best


def violations(inst, to_go) -> list[tuple]:
    """The nodes of the whole graph (every device order, caps off) whose floor exceeds their
    best completion: (boundary, floor, best)."""
    sg = build_stage_graph(inst, reduction="none")
    best = best_completions(sg)
    out = []
    for nid, (b, state) in enumerate(sg.nodes):
        if not math.isfinite(best[nid]):
            continue
        floor = to_go.at(b, dict(state))
        if floor > best[nid] * (1 + REL) + 1e-15:
            out.append((b, floor, best[nid]))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_floor_is_below_every_completion(case):
    inst = _instance(case)
    to_go = ftg.flow_to_go(inst)
    assert to_go is not None
    assert violations(inst, to_go) == []


@pytest.mark.parametrize("case", ["flow-chain-2", "flow-chain-external-slow", "flow-residual-3", "exact-fc",
                                  "capped-heavy-b300", "typed-two-types"])
def test_the_floor_at_the_source_is_the_lp_bound_and_below_the_optimum(case):
    inst = _instance(case)
    to_go = ftg.flow_to_go(inst)
    pr = pricer(inst)
    from milp_planner.cost.evaluator import initial_owners

    at_source = to_go.at(0, initial_owners(pr))
    lp = flow_floor(inst, "energy").value
    assert at_source == pytest.approx(lp, rel=1e-6)
    best = get_planner("bruteforce").solve(inst, objective="energy")
    assert at_source <= best.value * (1 + REL)


@pytest.mark.parametrize("case", ["flow-chain-2", "flow-residual-3", "exact-residual-external", "typed-two-types",
                                  "typed-boards"])
def test_the_option_floors_are_the_head_states_floors(case):
    """``after_options`` (what the enumeration prunes with) equals ``at`` on the head state that
    ``next_owners`` gives, for every option of every stage from every state of the graph; with
    the orbits it is at most that for every device order with the same orbits."""
    inst = _instance(case)
    to_go = ftg.flow_to_go(inst)
    pr = pricer(inst)
    bounds = layout_bounds(inst, "energy", pr, symmetry=False)
    types = device_types(inst)
    exact = _ExactFloors(inst, pr, "energy", types)
    orbit = np.array(types.orbit)
    sg = build_stage_graph(inst, reduction="none")
    checked = 0
    for b, state in {(b, s) for b, s in sg.nodes if b < len(inst.graph.layers)}:
        owners = dict(state)
        for (first, e), tab in bounds.tables.items():
            if first != b:
                continue
            devices, _, mask, _ = tab.flat()
            got = to_go.after_options(tab, owners, devices, tab.group)
            typed = to_go.after_options(tab, owners, devices, tab.group, exact.orbit_members)
            for oi in range(len(tab.group)):
                grp = tab.groups[tab.group[oi]]
                k = len(grp.geos)
                devs = tuple(int(d) for d in devices[oi, :k])
                head = next_owners(pr, owners, grp.last, devs, grp.geos)
                assert got[oi] == pytest.approx(to_go.at(e + 1, head), rel=1e-12, abs=1e-15)
                for alt in itertools.permutations(range(len(inst.devices)), k):
                    if all(orbit[a] == orbit[d] for a, d in zip(alt, devs)):
                        other = to_go.at(e + 1, next_owners(pr, owners, grp.last, alt, grp.geos))
                        assert typed[oi] <= other + 1e-15
                checked += 1
    assert checked > 0


def test_not_crediting_what_a_device_owns_breaks_it(monkeypatch):
    """The data a device owns at the boundary is what saves it a transfer: without that credit
    the floor exceeds some completion."""
    inst = _instance("flow-chain-2")
    monkeypatch.setattr(ftg.FlowToGo, "held", lambda self, k, owners: 0.0)
    assert violations(inst, ftg.flow_to_go(inst))


def test_rows_of_earlier_layers_kept_active_break_it(monkeypatch):
    """A row is active after a boundary only if it covers or reads a later layer; keeping
    every row active charges the rest of a plan for layers already computed."""
    inst = _instance("flow-chain-2")
    monkeypatch.setattr(ftg, "_row_layer", lambda tag, n: n)
    assert violations(inst, ftg.flow_to_go(inst))


@pytest.mark.parametrize("case", ["flow-chain-2", "flow-chain-external-slow", "flow-residual-3", "flow-down-2",
                                  "capped-heavy-b300", "capped-wide-350", "capped-chain-capped",
                                  "typed-two-types", "typed-host-twins"])
def test_dp_with_the_floor_agrees_with_brute_force(case):
    inst = _instance(case)
    ref = get_planner("bruteforce").solve(inst, objective="energy")
    res = get_planner("dp", anytime=False).solve(inst, objective="energy")
    assert res.status == ref.status
    if ref.status == "optimal":
        assert res.value == pytest.approx(ref.value, rel=1e-6)
        assert res.bound <= ref.value * (1 + REL)

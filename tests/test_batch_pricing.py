"""``price_batch`` gives every float ``price_stage`` gives, bit for bit.

The exact engine prices the arcs it keeps in batches (``formulations.stagegraph._price_batches``,
``milp_planner.cost.batch``): the options of one stage from one state at once, in numpy. Its
arcs must be the ones ``price_stage``, the evaluator's one definition of a stage's cost, would
give, or a certificate could rest on a price the evaluator does not reproduce. Checked here
without tolerance: whole stage graphs built with every arc batched against the same graphs
with none batched (the hand-built cases of the every-path test, and random instances of the
differential bed: DAGs, link groups, external endpoints, shared media, stage overheads), and a
state built by hand that the graphs rarely reach (a device owning two regions of a tensor, the
external source and a device outside the stage owning parts of it).
"""

from __future__ import annotations

import doctest
import random
from itertools import permutations
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from bed_cases import bed
from builders import chain_graph, residual_graph
from test_pricing_paths import CASES, three_devices

import formulations.stagegraph as stagegraph
from formulations.link_groups import node_ids
from formulations.options import stage_groups
from formulations.stagegraph import build_stage_graph
from milp_planner.cost.batch import layouts_of, price_batch
from milp_planner.cost.evaluator import EXTERNAL, price_stage, pricer
from milp_planner.instance.generate import build_graph, build_instance, random_spec
from milp_planner.space.geometry import Region

MAX_PLANS = 20_000  # random cases whose whole graph is small enough to build twice


def _seeds(start: int, count: int) -> list[int]:
    """The first ``count`` seeds from ``start`` whose random instance has at most MAX_PLANS plans."""
    out, seed = [], start
    while len(out) < count:
        inst = _random_instance(seed)
        if bed.plan_count(bed.list_space(inst), len(inst.graph.layers)) <= MAX_PLANS:
            out.append(seed)
        seed += 1
    return out


def arcs_of(inst, batch_min: int, monkeypatch, reduction="none", **kw):
    monkeypatch.setattr(stagegraph, "BATCH_MIN", batch_min)
    sg = build_stage_graph(inst, reduction=reduction, **kw)
    return [(a.tail, a.head, a.option, a.tau, a.energy, a.load, a.transfer_s, a.weights, a.working, a.relabel)
            for a in sg.arcs]


def same_bits(batched, single):
    assert len(batched) == len(single) > 0
    for x, y in zip(batched, single):
        assert x == y, (x, y)
        # the same types too: an integer tuple must not turn into a float one (CP-SAT's coefficients)
        assert [type(v) for v in x[7] + x[8]] == [type(v) for v in y[7] + y[8]] == [int] * (len(x[7]) + len(x[8]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_graphs_are_the_graphs_priced_one_by_one(case, monkeypatch):
    inst = CASES[case]()
    same_bits(arcs_of(inst, 1, monkeypatch), arcs_of(inst, 10**9, monkeypatch))


def _random_instance(seed: int):
    """The differential bed's random spec of ``seed``, its devices on boards (link groups) for
    odd seeds."""
    spec = random_spec(seed)
    if seed % 2:
        spec = bed.on_boards(spec, random.Random(seed))
    return build_instance(spec, build_graph(spec))


RANDOM_SEEDS = _seeds(26880, 24)
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_batched_graphs_of_random_instances_are_the_graphs_priced_one_by_one(seed, monkeypatch):
    inst = _random_instance(seed)
    same_bits(arcs_of(inst, 1, monkeypatch), arcs_of(inst, 10**9, monkeypatch))


def test_a_bounded_graph_is_priced_the_same_in_batches(monkeypatch):
    from milp_planner.instance.reader import load_instance

    inst = load_instance("example:edge-3dev")
    kw = {"objective": "latency", "upper": 0.1015, "max_arcs": 500_000}
    batched = arcs_of(inst, stagegraph.BATCH_MIN, monkeypatch, **kw)
    same_bits(batched, arcs_of(inst, 10**9, monkeypatch, **kw))


@pytest.mark.parametrize("objective,upper,reduction", [("energy", 16.7, "canonical"), ("energy", 16.7, "first-use"),
                                                       ("energy", 16.7, "free"), ("period", 0.712, "first-use")])
def test_graphs_over_device_types_are_priced_the_same_in_batches(objective, upper, reduction, monkeypatch):
    """Four identical Pis: the tables list one order per sequence of device types and the arcs
    their real devices (canonical relabelling, first-use and free reductions; period with its
    own bound as a cap on every device's load)."""
    from milp_planner.instance.reader import load_instance

    inst = load_instance(ROOT / "instances" / "coopai" / "vgg16-rpi4-4.yaml")
    kw = {"objective": objective, "upper": upper, "max_arcs": 500_000, "reduction": reduction}
    batched = arcs_of(inst, stagegraph.BATCH_MIN, monkeypatch, **kw)
    same_bits(batched, arcs_of(inst, 10**9, monkeypatch, **kw))


def test_a_state_the_graphs_rarely_reach_prices_the_same():
    """Device 1 owns two regions of the tensor read, the external source owns another, and
    device 2 owns one without a part in some options; every device order of every layout of
    the stage, switched and shared."""
    for medium in ("switched", "shared"):
        inst = three_devices(chain_graph(2), medium=medium, fusion=2, external=True)
        pr = pricer(inst)
        t = inst.graph.layers[1].inputs[0]
        rows, chans = inst.graph.tensor_rows(t), inst.graph.tensor_channels(t)
        owners = {t: ((1, Region((0, 2), (0, chans))), (EXTERNAL, Region((2, 3), (0, chans))),
                      (1, Region((3, 5), (0, chans))), (2, Region((5, rows), (0, chans))))}
        groups = stage_groups(inst, pr, 1, 1)
        layouts = layouts_of([g.geos for g in groups], [g.weights for g in groups], [g.computed for g in groups])
        kmax = int(layouts.widths.max())
        rows_, devs, comp, expect = [], [], [], []
        for gi, grp in enumerate(groups):
            k = len(grp.geos)
            for order in permutations(range(3), k):
                c = [pr.compute_time(d, geo) for d, geo in zip(order, grp.geos)]
                rows_.append(gi)
                devs.append(list(order) + [0] * (kmax - k))
                comp.append(c + [0.0] * (kmax - k))
                expect.append(price_stage(pr, owners, 1, order, grp.geos, c, grp.weights, grp.computed,
                                          successor=False))
        got = price_batch(pr, owners, rows_, np.array(devs), np.array(comp), layouts)
        assert len(expect) > 20
        for i, sp in enumerate(expect):
            assert got.tau[i] == sp.tau and got.energy[i] == sp.energy and got.transfer_s[i] == sp.transfer_s
            assert got.load[i].tolist() == sp.load
            assert got.weights[i].tolist() == sp.weights and got.working[i].tolist() == sp.working


def test_the_modules_example_runs():
    import milp_planner.cost.batch as batch

    assert doctest.testmod(batch).failed == 0


def test_parts_reading_tensors_in_different_orders_are_refused():
    a, b = Region((0, 1), (0, 1)), Region((0, 2), (0, 1))
    one = SimpleNamespace(needs={"x": a, "y": b}, fraction={})
    other = SimpleNamespace(needs={"y": b, "x": a}, fraction={})
    layouts_of([[one], [one]], [[0], [0]], [[0], [0]])  # one order: fine
    with pytest.raises(ValueError, match="not in the order"):
        layouts_of([[one], [other]], [[0], [0]], [[0], [0]])


def test_a_residual_stage_reading_two_tensors_prices_the_same(monkeypatch):
    inst = three_devices(residual_graph(), fusion=2, external=True)
    same_bits(arcs_of(inst, 1, monkeypatch), arcs_of(inst, 10**9, monkeypatch))


def test_random_seeds_cover_dags_link_groups_media_and_overheads():
    """The random cases above are not all alike (a check of the check)."""
    dags, groups, media, overheads = set(), set(), set(), set()
    for seed in RANDOM_SEEDS:
        inst = _random_instance(seed)
        dags.add(any(len(layer.inputs) > 1 for layer in inst.graph.layers))
        groups.add(node_ids(inst) is not None)
        media.add(inst.network.medium)
        overheads.add(any(pricer(inst).stage_overhead))
    assert dags == groups == overheads == {True, False}
    assert media == {"switched", "shared"}

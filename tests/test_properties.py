"""Property tests of the evaluator over random valid plans on tiny models."""

from dataclasses import replace

import pytest
from builders import chain_graph, device, make_instance, residual_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from milp_planner.cost.evaluator import evaluate
from milp_planner.instance.network import Network
from milp_planner.space.plan import Part, Plan, Stage

GRAPHS = {"chain": chain_graph(3), "residual": residual_graph()}
DEVICES = [device("a", 1000, "0.01", power=(2, 1, 1)), device("b", 3000, "0.02", power=(5, 2, 1)),
           device("c", 1500, "0", power=(1, 1, 3))]
BW = [[0.0, 100.0, 50.0], [200.0, 0.0, 80.0], [70.0, 90.0, 0.0]]


def instance(graph_name, medium="switched", n_dev=3):
    bw = [row[:n_dev] for row in BW[:n_dev]]
    return make_instance(GRAPHS[graph_name], DEVICES[:n_dev], bw=bw, lat=0.05, medium=medium, source=0, sink=1)


@st.composite
def plans(draw, graph_name, n_dev=3):
    g = GRAPHS[graph_name]
    n = len(g.layers)
    names = [d.name for d in DEVICES[:n_dev]]
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1)))
    bounds = [0, *cuts, n]
    stages = []
    for first, stop in zip(bounds, bounds[1:]):
        last = stop - 1
        k = draw(st.integers(1, n_dev))
        devs = draw(st.permutations(names))[:k]
        if k == 1:
            stages.append(Stage(first, last, "none", (Part(devs[0]),)))
            continue
        h = g.layers[last].rows
        inner = sorted(draw(st.sets(st.integers(1, h - 1), min_size=k - 1, max_size=k - 1)))
        pts = [0, *inner, h]
        stages.append(Stage(first, last, "rows", tuple(Part(d, (pts[i], pts[i + 1])) for i, d in enumerate(devs))))
    return Plan("t", stages)


def same(m1, m2):
    assert m1.latency_s == pytest.approx(m2.latency_s, rel=1e-9)
    assert m1.energy_j == pytest.approx(m2.energy_j, rel=1e-9)
    assert m1.period_s == pytest.approx(m2.period_s, rel=1e-9)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("graph_name", list(GRAPHS))
@pytest.mark.parametrize("medium", ["switched", "shared"])
@SETTINGS
@given(data=st.data())
def test_every_stage_on_one_device_equals_single_device(graph_name, medium, data):
    inst = instance(graph_name, medium)
    p = data.draw(plans(graph_name))
    d = data.draw(st.sampled_from(inst.device_names))
    moved = Plan("t", [Stage(s.first, s.last, "none", (Part(d),)) for s in p.stages])
    n = len(inst.graph.layers)
    whole = Plan("t", [Stage(0, n - 1, "none", (Part(d),))])
    same(evaluate(moved, inst), evaluate(whole, inst))


@pytest.mark.parametrize("graph_name", list(GRAPHS))
@pytest.mark.parametrize("medium", ["switched", "shared"])
@SETTINGS
@given(data=st.data())
def test_renaming_devices_changes_nothing(graph_name, medium, data):
    inst = instance(graph_name, medium)
    p = data.draw(plans(graph_name))
    perm = data.draw(st.permutations(range(3)))  # new position i holds old device perm[i]
    new_names = {DEVICES[perm[i]].name: f"n{i}" for i in range(3)}
    devices = tuple(replace(DEVICES[perm[i]], name=f"n{i}") for i in range(3))
    net = inst.network
    bw = tuple(tuple(net.bandwidth_Bps[perm[i]][perm[j]] for j in range(3)) for i in range(3))
    lat = tuple(tuple(net.latency_s[perm[i]][perm[j]] for j in range(3)) for i in range(3))
    inv = {old: new for new, old in enumerate(perm)}
    net2 = Network(bw, lat, net.medium, replace(net.source, device=inv[net.source.device]),
                   replace(net.sink, device=inv[net.sink.device]))
    inst2 = replace(inst, devices=devices, network=net2)
    p2 = Plan("t", [Stage(s.first, s.last, s.axis, tuple(Part(new_names[q.device], q.range) for q in s.parts))
                    for s in p.stages])
    m1, m2 = evaluate(p, inst), evaluate(p2, inst2)
    same(m1, m2)
    assert {new_names[k]: v for k, v in m1.memory_bytes.items()} == m2.memory_bytes


@pytest.mark.parametrize("graph_name", list(GRAPHS))
@SETTINGS
@given(data=st.data())
def test_latency_never_below_lower_bound(graph_name, data):
    inst = instance(graph_name)
    m = evaluate(data.draw(plans(graph_name)), inst)
    assert m.latency_s >= m.lower_bound_s - 1e-12


@pytest.mark.parametrize("graph_name", list(GRAPHS))
@SETTINGS
@given(data=st.data())
def test_adding_an_unused_device_changes_nothing(graph_name, data):
    p = data.draw(plans(graph_name, n_dev=2))
    small, big = instance(graph_name, n_dev=2), instance(graph_name, n_dev=3)
    m1, m2 = evaluate(p, small), evaluate(p, big)
    same(m1, m2)
    assert m2.memory_bytes["c"] == 0
    assert {k: v for k, v in m2.memory_bytes.items() if k != "c"} == m1.memory_bytes

"""The relaxed and learned planners: ``diapason`` (DIAPASON's relaxation) and ``distredge`` (DDPG)."""

from __future__ import annotations

import json
import sys
from fractions import Fraction as F
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from milp_planner.instance.devices import CostModel, Device, Power
from milp_planner.errors import PlannerError
from milp_planner.cost.evaluator import evaluate
from milp_planner.model.graph import Layer, LayerGraph, RowDep
from milp_planner.instance import Instance, SearchSpace
from milp_planner.instance.reader import instance_from_dict
from milp_planner.instance.network import Endpoint, Network
from milp_planner.space.plan import Plan, check_plan
from milp_planner.planners import get_planner, planner_class, planner_names
from milp_planner.planners.diapason_model import build_relaxation

# ---------------------------------------------------------------------------------------------
# The hand-computed two-layer example


def two_layer_instance(n_dev=2, fusion_limit=1):
    """x (1,2,4,4) -> A (3x3 conv, pad 1) -> a (1,2,4,4) -> B (1x1 conv) -> b (1,2,4,4).

    int8: one (row, channel) cell = 4 bytes, one row of a tensor = 8 bytes. A = 8000 MACs,
    B = 4000 MACs. d0: 1e6 MAC/s, d1: 2e6 MAC/s, d2 (if any): 1e6 MAC/s; no overhead.
    Every link 8000 B/s (1 ms per row) plus 1 ms per message. Source and sink: d0.
    Power (compute, tx, rx): d0 (2, 1, 0.5), d1 (3, 1, 0.5), d2 (2, 1, 0.5) W.
    """
    conv3 = RowDep("window", kernel=3, stride=1, pad_top=1)
    conv1 = RowDep("window", kernel=1, stride=1, pad_top=0)
    layers = [
        Layer(0, "A", "Conv", ("x",), "a", (1, 2, 4, 4), macs=8000, params=36, rowdep=conv3,
              row_splittable=True, channel_splittable=True),
        Layer(1, "B", "Conv", ("a",), "b", (1, 2, 4, 4), macs=4000, params=4, rowdep=conv1,
              row_splittable=True, channel_splittable=True),
    ]
    g = LayerGraph("two", layers, {"x": (1, 2, 4, 4)}, ["b"])
    speeds = [10**6, 2 * 10**6, 10**6][:n_dev]
    power = [(2, 1, F(1, 2)), (3, 1, F(1, 2)), (2, 1, F(1, 2))][:n_dev]
    devices = tuple(Device(f"d{i}", CostModel("linear", F(s), F(0)), power=Power(*map(F, p)))
                    for i, (s, p) in enumerate(zip(speeds, power)))
    bw = tuple(tuple(0.0 if i == j else 8000.0 for j in range(n_dev)) for i in range(n_dev))
    lat = tuple(tuple(0.0 if i == j else 0.001 for j in range(n_dev)) for i in range(n_dev))
    net = Network(bw, lat, "switched", Endpoint(device=0), Endpoint(device=0))
    search = SearchSpace(fusion_limit=fusion_limit, max_parts=n_dev, splits=("equal",), axes=("rows",))
    return Instance("two", g, devices, net, search, dtype_bytes=1)


def select(rel, choice, devices):
    """One-hot selector probabilities: ``choice[layer]`` picks a PO (predicate), ``devices``
    maps (layer, kind) -> device per sublayer of that PO's selector set."""
    n_dev = len(rel.instance.devices)
    p_dev = torch.zeros((rel.n_groups, rel.s_max, n_dev), dtype=torch.float64)
    p_dev[..., 0] = 1.0
    p_l = torch.zeros(rel.tensors["l_mask"].shape, dtype=torch.float64)
    for lid, pred in choice.items():
        k = next(k for k, idx in enumerate(rel.layer_pos[lid]) if pred(rel.pos[idx]))
        p_l[lid, k] = 1.0
    for (lid, kind), devs in devices.items():
        po = next(rel.pos[i] for i in rel.layer_pos[lid] if rel.pos[i].kind == kind)
        for j, d in enumerate(devs):
            p_dev[po.group, j] = 0.0
            p_dev[po.group, j, d] = 1.0
    return p_dev, p_l


def is_kind(kind):
    return lambda p: p.kind == kind


def test_one_hot_loss_equals_hand_computed_equations():
    inst = two_layer_instance()
    rel = build_relaxation(inst, torch, objective="latency", unit="ms", fusionlimit=1)
    # choice: A split by rows (equal: rows [0,2) and [2,4)), sublayer 0 on d0, sublayer 1 on d1;
    #         B unpartitioned on d0.
    p_dev, p_l = select(rel, {0: is_kind("rows"), 1: is_kind("whole")}, {(0, "rows"): [0, 1], (1, "whole"): [0]})
    # (12) input: A's sublayer 0 reads x rows [0,3) on d0 = the source: 0. Sublayer 1 reads rows
    #      [1,4): 3 rows x 8 B = 24 B to d1: 24 / 8000 s = 3 ms + 1 ms message = 4 ms.
    # (3)  A: sublayer 0 on d0 = 0.5 x 8000 / 1e6 s = 4 ms; sublayer 1 on d1 = 0.5 x 8000 / 2e6 = 2 ms
    #      -> L_sub = 6 ms.
    # (4)-(6) X_01 = |e0 - e1|_2 / sqrt(2) = 1; V_01 = 1 x min(4, 2) = 2 ms = L_pen.
    # (1)  L_part(A) = 6 - 2 = 4 ms.   B whole on d0: 4000 / 1e6 = 4 ms (one sublayer, no penalty).
    # (8)-(11) A -> B: B (1x1) reads rows [0,4) of a; rows [0,2) are on d0 already; rows [2,4)
    #      from d1: 2 rows x 8 B = 16 B -> 2 ms + 1 ms = 3 ms.
    # (14) B's output is on d0 = the sink: 0.
    # (16) 4 + 4 + 4 + 3 = 15 ms.
    assert float(rel.loss_from_probs(p_dev, p_l)) == pytest.approx(15.0, rel=1e-12)
    rel_s = build_relaxation(inst, torch, objective="latency", unit="s", fusionlimit=1)
    assert float(rel_s.loss_from_probs(p_dev, p_l)) == pytest.approx(0.015, rel=1e-12)
    # energy (2): compute 2 W x 4 ms + 3 W x 2 ms + 2 W x 4 ms = 22 mJ; transfers (tx 1 + rx 0.5 W)
    # x (4 ms + 3 ms) = 10.5 mJ -> 32.5 mJ (no penalty for energy).
    rel_e = build_relaxation(inst, torch, objective="energy", unit="ms", fusionlimit=1)
    assert float(rel_e.loss_from_probs(p_dev, p_l)) == pytest.approx(32.5, rel=1e-12)
    # the decoded plan: energy is additive, so the evaluator agrees; its latency takes the max
    # over devices of (receive + compute) per stage: max(0 + 4, 4 + 2) + (3 + 4) = 13 ms.
    plan, repairs = rel.decode(p_dev, p_l)
    assert repairs == []
    assert [(s.first, s.last, s.axis, [(p.device, p.range) for p in s.parts]) for s in plan.stages] == [
        (0, 0, "rows", [("d0", (0, 2)), ("d1", (2, 4))]), (1, 1, "none", [("d0", None)])]
    m = evaluate(plan, inst)
    assert m.energy_j == pytest.approx(0.0325, rel=1e-12)
    assert m.latency_s == pytest.approx(0.013, rel=1e-12)


def test_one_hot_loss_of_a_fused_chain():
    inst = two_layer_instance(fusion_limit=2)
    rel = build_relaxation(inst, torch, objective="latency", unit="ms", fusionlimit=2)
    # A takes the fusion PO of B's rows PO, B its rows PO: B rows [0,2) on d0, [2,4) on d1, and
    # A's fused sublayers compute what they need (1x1: rows [0,2) and [2,4)) on the same devices.
    fused_rows = lambda p: p.kind == "fusion" and p.axis == "rows"  # noqa: E731
    p_dev, p_l = select(rel, {0: fused_rows, 1: is_kind("rows")}, {(1, "rows"): [0, 1]})
    fusion = [rel.pos[i] for i in rel.layer_pos[0] if rel.pos[i].kind == "fusion"]
    # one fusion PO below each of B's basic POs (whole and rows), sharing their selectors
    assert sorted(p.axis for p in fusion) == ["none", "rows"]
    assert {p.root_layer for p in fusion} == {1} and {p.depth for p in fusion} == {1}
    # input 4 ms (as above); A: 4 + 2 - min(4, 2) = 4 ms; B: 2 + 1 - min(2, 1) = 2 ms;
    # A -> B inside the chain: 0; output: d1's rows [2,4) of b, 16 B to the sink d0: 3 ms.
    # (16) 4 + 4 + 2 + 0 + 3 = 13 ms.
    assert float(rel.loss_from_probs(p_dev, p_l)) == pytest.approx(13.0, rel=1e-12)
    plan, repairs = rel.decode(p_dev, p_l)
    assert repairs == []
    assert [(s.first, s.last, s.axis, [(p.device, p.range) for p in s.parts]) for s in plan.stages] == [
        (0, 1, "rows", [("d0", (0, 2)), ("d1", (2, 4))])]
    # evaluator: d0 computes 4 + 2 ms, d1 receives 4 ms and computes 2 + 1 ms; gather 3 ms.
    assert evaluate(plan, inst).latency_s == pytest.approx(0.010, rel=1e-12)


def test_repair_rules():
    inst = two_layer_instance(n_dev=3, fusion_limit=2)
    rel = build_relaxation(inst, torch, objective="latency", unit="ms", fusionlimit=2)
    # A: its rows PO (3 sublayers, equal cuts on 4 rows: [0,1), [1,3), [3,4)) with sublayers 0 and 2
    # on d0 and 1 on d1: d0 may hold one part only, so one run moves to the unused d2.
    p_dev, p_l = select(rel, {0: is_kind("rows"), 1: is_kind("whole")}, {(0, "rows"): [0, 1, 0], (1, "whole"): [1]})
    plan, repairs = rel.decode(p_dev, p_l)
    check_plan(plan, inst)
    assert any("moved" in r for r in repairs)
    st = plan.stages[0]
    assert st.axis == "rows" and sorted(p.device for p in st.parts) == ["d0", "d1", "d2"]
    # adjacent sublayers on one device merge: [0,1) and [1,3) on d1 -> one part [0,3)
    p_dev, p_l = select(rel, {0: is_kind("rows"), 1: is_kind("whole")}, {(0, "rows"): [1, 1, 2], (1, "whole"): [1]})
    plan, repairs = rel.decode(p_dev, p_l)
    check_plan(plan, inst)
    assert [(p.device, p.range) for p in plan.stages[0].parts] == [("d1", (0, 3)), ("d2", (3, 4))]
    assert any("merged" in r for r in repairs)
    # all sublayers on one device: a one-part stage, written axis none
    p_dev, p_l = select(rel, {0: is_kind("rows"), 1: is_kind("whole")}, {(0, "rows"): [2, 2, 2], (1, "whole"): [2]})
    plan, _ = rel.decode(p_dev, p_l)
    check_plan(plan, inst)
    assert plan.stages[0].axis == "none" and plan.stages[0].parts[0].device == "d2"
    # a fusion PO whose parent (B's rows PO) was not selected: a stage of its own, cut at the
    # parent's fractions, on the parent's devices
    p_dev, p_l = select(rel, {0: lambda p: p.kind == "fusion" and p.axis == "rows", 1: is_kind("whole")},
                        {(1, "rows"): [2, 1, 0], (1, "whole"): [0]})
    plan, repairs = rel.decode(p_dev, p_l)
    check_plan(plan, inst)
    assert any("without its parent" in r for r in repairs)
    assert [(s.first, s.last) for s in plan.stages] == [(0, 0), (1, 1)]
    assert [(p.device, p.range) for p in plan.stages[0].parts] == [("d2", (0, 1)), ("d1", (1, 3)), ("d0", (3, 4))]


# ---------------------------------------------------------------------------------------------
# Planners on zoo models


def zoo_instance(model, devices, **extra):
    data = {"name": f"t-{model}", "model": f"zoo:{model}", "dtype_bytes": 1, "devices": devices,
            "network": {"bandwidth_mbps": 100, "latency_ms": 0.2}}
    data.update(extra)
    return instance_from_dict(exact(data), "test")


def exact(x):
    """Instance files hold exact decimals: turn the floats written here into Fractions."""
    if isinstance(x, float):
        return F(str(x))
    if isinstance(x, dict):
        return {k: exact(v) for k, v in x.items()}
    if isinstance(x, list):
        return [exact(v) for v in x]
    return x


HETERO = [
    {"name": "slow", "compute": {"model": "linear", "macs_per_s": 1.0e9, "overhead_s": 1e-4},
     "power_w": {"compute": 3, "tx": 1, "rx": 1}},
    {"name": "fast", "compute": {"model": "linear", "macs_per_s": 5.0e9, "overhead_s": 1e-4},
     "power_w": {"compute": 6, "tx": 1.5, "rx": 1}},
    {"name": "gpu", "compute": {"model": "roofline", "macs_per_s": 2.0e10, "mem_gbps": 4, "overhead_s": 5e-5},
     "power_w": {"compute": 10, "tx": 1.5, "rx": 1.2}},
]


@pytest.mark.parametrize("model", ["tiny_chain", "tiny_residual", "tiny_fc"])
@pytest.mark.parametrize("options", [
    {},
    {"weightsinit": "random", "runs": 2},
    {"fusionlimit": 4, "parttype": "capability"},
    {"fusionlimit": 0, "loss_unit": "s"},
])
def test_diapason_decoded_plan_is_valid(model, options):
    inst = zoo_instance(model, HETERO, search={"fusion_limit": 3, "max_parts": 3, "splits": ["equal", "capacity"],
                                                "axes": ["rows", "channels"]},
                        network={"bandwidth_mbps": [[0, 100, 50], [100, 0, 50], [50, 50, 0]], "latency_ms": 0.2,
                                 "source": {"bandwidth_mbps": [20, 20, 10], "latency_ms": 1}, "sink": {"device": "fast"}})
    for objective in ("latency", "energy"):
        res = get_planner("diapason", **options).solve(inst, objective=objective, seed=3)
        assert res.status == "feasible"
        check_plan(res.plan, inst)
        again = Plan.from_json(res.plan.to_json())
        check_plan(again, inst)
        assert evaluate(again, inst).value(objective) == pytest.approx(res.value, rel=1e-12)
        info = res.info
        assert info["loss_curve"][-1] == info["loss"] and len(info["loss_curve"]) == info["iterations_done"] + 1
        assert info["loss_unit"] in ("ms", "s", "mJ", "J")
        assert info["options"]["objective"] == objective


def test_diapason_on_two_devices_homogeneous_and_ablation_options():
    dev = {"compute": {"model": "linear", "macs_per_s": 2.0e9, "overhead_s": 1e-4}}
    inst = zoo_instance("tiny_chain", [{"name": "a", **dev}, {"name": "b", **dev}],
                        search={"fusion_limit": 2, "max_parts": 2, "splits": ["equal"], "axes": ["rows"]})
    res = get_planner("diapason").solve(inst)
    o = res.info["options"]
    assert (o["lr"], o["iterations"], o["weightsinit"], o["fusionlimit"], o["parttype"], o["loss_unit"]) == (
        0.4, 20, "heuristic", 2, "naive", "ms")
    assert res.metrics.in_space
    # the loss in ms moves the selectors; a solve in s starts from the same point (x 1000)
    res_s = get_planner("diapason", loss_unit="s").solve(inst)
    assert res_s.info["loss_curve"][0] * 1000 == pytest.approx(res.info["loss_curve"][0], rel=1e-9)
    with pytest.raises(PlannerError):
        get_planner("diapason", weightsinit="zeros").solve(inst)
    with pytest.raises(PlannerError):
        get_planner("diapason", nonsense=1).solve(inst)
    with pytest.raises(PlannerError, match="latency or energy"):
        get_planner("diapason").solve(inst, objective="period")


def test_seeded_runs_are_deterministic():
    inst = zoo_instance("tiny_residual", HETERO[:2])
    a = get_planner("diapason", weightsinit="random").solve(inst, seed=7)
    b = get_planner("diapason", weightsinit="random").solve(inst, seed=7)
    assert a.plan.to_dict()["stages"] == b.plan.to_dict()["stages"]
    assert a.info["loss"] == b.info["loss"] and a.info["loss_curve"] == b.info["loss_curve"]
    c = get_planner("diapason", weightsinit="random").solve(inst, seed=8)
    assert c.info["loss_curve"][0] != a.info["loss_curve"][0]

    d1 = get_planner("distredge", episodes=25).solve(inst, seed=5)
    d2 = get_planner("distredge", episodes=25).solve(inst, seed=5)
    assert d1.plan.to_dict()["stages"] == d2.plan.to_dict()["stages"]
    assert d1.value == d2.value and d1.info["value_curve"] == d2.info["value_curve"]


@pytest.mark.parametrize("model", ["tiny_chain", "tiny_residual", "tiny_fc"])
def test_distredge_plan_is_valid(model):
    inst = zoo_instance(model, HETERO, search={"fusion_limit": 4, "max_parts": 3, "splits": ["equal"],
                                                "axes": ["rows"]})
    res = get_planner("distredge", episodes=15, batch=8).solve(inst, seed=1)
    check_plan(res.plan, inst)
    info = res.info
    assert info["episodes_done"] == 15 and len(info["value_curve"]) == 15
    assert res.value == pytest.approx(min(info["value_curve"]), rel=1e-9)  # the sim is the evaluator
    assert res.value == pytest.approx(info["best_value_sim"], rel=1e-9)
    vols = info["volumes"]
    assert vols[0][0] == 0 and vols[-1][1] == len(inst.graph.layers) - 1
    again = Plan.from_json(res.plan.to_json())
    assert evaluate(again, inst).latency_s == pytest.approx(res.value, rel=1e-12)


def test_distredge_explicit_volumes_and_time_limit():
    inst = zoo_instance("tiny_chain", HETERO[:2])
    res = get_planner("distredge", volumes=[[0, 2], [3, 5]], episodes=100000, batch=4).solve(inst, time_limit=1.0)
    check_plan(res.plan, inst)
    assert res.info["stopped_by_time_limit"] and res.info["episodes_done"] < 100000
    assert res.info["volumes"] == [[0, 2], [3, 5]]
    with pytest.raises(PlannerError):
        get_planner("distredge", volumes=[[0, 2], [4, 5]]).solve(inst)


def test_time_limit_returns_the_last_iterate():
    inst = zoo_instance("tiny_chain", HETERO[:2])
    res = get_planner("diapason", iterations=10**7).solve(inst, time_limit=0.5)
    check_plan(res.plan, inst)
    assert res.info["stopped_by_time_limit"] and res.info["iterations_done"] < 10**7


def test_registry_and_missing_torch(monkeypatch):
    for name in ("diapason", "distredge"):
        assert name in planner_names()
        cls = planner_class(name)
        assert cls.seeded and cls.description and cls.source
    inst = two_layer_instance()
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    for name in ("diapason", "distredge"):
        with pytest.raises(PlannerError, match=rf"planner {name} needs PyTorch: pip install 'milp-planner\[relaxed\]'"):
            get_planner(name).solve(inst)


def test_cli_solve_json(tmp_path, capsys):
    from milp_planner.cli import main

    path = Path(tmp_path) / "inst.yaml"
    path.write_text(
        "name: cli-tiny\nmodel: zoo:tiny_chain\ndtype_bytes: 1\n"
        "devices:\n  - {name: a, compute: {model: linear, macs_per_s: 1.0e9, overhead_s: 1e-4}}\n"
        "  - {name: b, compute: {model: linear, macs_per_s: 3.0e9, overhead_s: 1e-4}}\n"
        "network: {bandwidth_mbps: 100, latency_ms: 0.5}\n"
        "search: {fusion_limit: 2, max_parts: 2, splits: [equal, capacity], axes: [rows]}\n")
    assert main(["solve", str(path), "--planner", "diapason", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("status", "objective", "bound", "gap", "planner", "solve_time_s", "metrics", "plan"):
        assert key in out
    assert out["planner"] == "diapason" and out["status"] == "feasible"
    assert out["objective"] == pytest.approx(out["metrics"]["latency_s"])
    assert out["info"]["loss_unit"] == "ms" and out["info"]["loss_curve"]
    assert main(["solve", str(path), "--planner", "distredge", "-O", "episodes=5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["planner"] == "distredge" and out["plan"]["stages"]

"""Deployment: sub-models reproduce the unsplit model, the manifest moves what the evaluator prices.

Numerics of many plans run in-process (``execute_sequential``: the same sub-models, rank
after rank); tests/test_deploy_mpi.py runs a few end to end under mpiexec.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from deploy_models import chain_model, fc_model, features_model, residual_model
from milp_planner.cost.evaluator import EXTERNAL, messages
from milp_planner.deploy import Manifest, deploy, execute_sequential, make_inputs, max_abs_err, reference_outputs
from milp_planner.errors import PlannerError
from milp_planner.instance.reader import instance_from_dict
from milp_planner.model import zoo
from milp_planner.planners import get_planner, planner_names
from milp_planner.planners.common import evaluate_tuples
from milp_planner.planners.random_search import random_stages
from milp_planner.space.plan import Part, Plan, Stage

TOL = 1e-4


def make_instance(model: str, n_dev=3, external=True, fusion=4, splits=("equal", "grid:4"), axes=("rows", "channels"),
                  name="t"):
    devices = [{"name": f"d{i}", "compute": {"model": "linear", "macs_per_s": 1e9 * (i + 1), "overhead_s": 1e-4}}
               for i in range(n_dev)]
    ends = ({"bandwidth_mbps": [40 + 10 * i for i in range(n_dev)], "latency_ms": 1} if external
            else {"device": "d0"})
    sink = ({"bandwidth_mbps": [30 + 10 * i for i in range(n_dev)], "latency_ms": 2} if external
            else {"device": f"d{n_dev - 1}"})
    data = {"name": name, "model": model, "devices": devices,
            "network": {"bandwidth_mbps": 100, "latency_ms": 0.5, "source": ends, "sink": sink},
            "search": {"fusion_limit": fusion, "max_parts": n_dev, "splits": list(splits), "axes": list(axes)}}
    return instance_from_dict(data, name)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    out = {}
    for name, make in (("features", features_model), ("chain", lambda: chain_model(3)),
                       ("residual", residual_model), ("fc", fc_model)):
        path = d / f"{name}.onnx"
        onnx.save(make(), str(path))
        out[name] = str(path)
    return out


@pytest.fixture(scope="module")
def feat(models):
    return make_instance(models["features"])


def run_plan(inst, plan, folder: Path) -> Manifest:
    """Deploy, check the messages against the evaluator and the outputs against the unsplit model."""
    if folder.exists():
        shutil.rmtree(folder)
    deploy(inst, plan, folder)
    m = Manifest.load(folder)
    names = inst.device_names

    def who(d):
        return "external" if d == EXTERNAL else names[d]

    assert [(x.stage, x.tensor, x.sender, x.receiver, x.bytes) for x in m.messages] == \
        [(x.stage, x.tensor, who(x.src), who(x.dst), x.bytes) for x in messages(plan, inst)]
    for x, y in zip(m.messages, messages(plan, inst)):
        assert x.time_s == pytest.approx(y.time_s)
    out = execute_sequential(folder)
    ref = reference_outputs(folder, make_inputs(m))
    err = max_abs_err(out, ref)
    assert err <= TOL, (err, plan.to_json(None))
    return m


def plan_of(inst, *stages) -> Plan:
    out = []
    for first, last, axis, parts in stages:
        out.append(Stage(first, last, axis, tuple(Part(d, tuple(r) if r else None) for d, r in parts)))
    return Plan(inst.name, out)


# -- hand-built plans: every feature -------------------------------------------------------------

FEATURE_PLANS = {
    # stride 2 + dilation + folded BN/PRelu/Clip + depthwise, fused with halos on 3 devices
    "rows-fused": [
        (0, 3, "rows", [("d0", (0, 4)), ("d1", (4, 9)), ("d2", (9, 12))]),
        (4, 7, "rows", [("d2", (0, 2)), ("d0", (2, 6))]),  # grouped conv, skip Add, avg + max pool
        (8, 11, "rows", [("d1", (0, 7)), ("d0", (7, 12))]),  # linear Resize, Pad, Concat
        (12, 14, "rows", [("d0", (0, 3)), ("d1", (3, 5)), ("d2", (5, 12))]),  # ConvTranspose, Resize 3/2
        (15, 16, "none", [("d2", None)]),
        (17, 17, "channels", [("d0", (0, 3)), ("d1", (3, 10))]),  # Gemm columns
        (18, 18, "channels", [("d2", (0, 1)), ("d1", (1, 6))]),  # MatMul columns + bias
    ],
    "channels": [
        (0, 0, "channels", [("d0", (0, 5)), ("d1", (5, 8))]),  # folded BN sliced
        (1, 1, "rows", [("d2", (0, 1)), ("d0", (1, 12))]),  # a one-row part
        (2, 2, "channels", [("d1", (0, 2)), ("d2", (2, 8))]),  # dilation, PRelu slopes sliced
        (3, 3, "channels", [("d0", (0, 3)), ("d1", (3, 7)), ("d2", (7, 8))]),  # depthwise
        (4, 4, "channels", [("d2", (0, 3)), ("d0", (3, 5)), ("d1", (5, 8))]),  # groups of 4, cut inside them
        (5, 11, "none", [("d1", None)]),
        (12, 12, "channels", [("d0", (0, 1)), ("d2", (1, 4))]),  # ConvTranspose
        (13, 18, "none", [("d0", None)]),
    ],
    "one-layer-each": [(i, i, "none", [(f"d{i % 3}", None)]) for i in range(19)],
    "rows-small": [
        (0, 2, "rows", [("d1", (0, 1)), ("d0", (1, 2)), ("d2", (2, 12))]),  # 1-row parts: halos on both sides
        (3, 6, "rows", [("d2", (0, 11)), ("d1", (11, 12))]),
        (7, 8, "rows", [("d0", (0, 1)), ("d2", (1, 12))]),  # the cut of the exit mp is round(1 x 6 / 12) = 1
        (9, 10, "rows", [("d1", (0, 6)), ("d2", (6, 12))]),
        (11, 13, "rows", [("d2", (0, 35)), ("d0", (35, 36))]),
        (14, 14, "rows", [("d0", (0, 6)), ("d1", (6, 12))]),
        (15, 18, "none", [("d1", None)]),
    ],
}


@pytest.mark.parametrize("name", sorted(FEATURE_PLANS))
def test_feature_plans_reproduce_the_model(feat, tmp_path, name):
    plan = plan_of(feat, *FEATURE_PLANS[name])
    run_plan(feat, plan, tmp_path / "dep")


def test_random_plans_from_the_space(feat, models, tmp_path):
    rng = np.random.default_rng(7)
    insts = [feat, make_instance(models["residual"], n_dev=2, external=False, fusion=3),
             make_instance(models["chain"], n_dev=3, fusion=3, splits=("grid:8",)),
             make_instance(models["fc"], n_dev=2, fusion=1)]
    for k in range(36):
        inst = insts[k % len(insts)]
        plan = evaluate_tuples(inst, random_stages(inst, rng), "random")[0]
        run_plan(inst, plan, tmp_path / "dep")


def test_tiny_networks_of_builders(models, tmp_path):
    """ONNX versions of tests/builders.py's chain, residual and fc graphs, split both ways."""
    chain = make_instance(models["chain"], n_dev=2, external=False)
    run_plan(chain, plan_of(chain, (0, 2, "rows", [("d0", (0, 3)), ("d1", (3, 8))])), tmp_path / "a")
    res = make_instance(models["residual"], n_dev=2, external=False)
    run_plan(res, plan_of(res, (0, 0, "channels", [("d1", (0, 1)), ("d0", (1, 2))]),
                          (1, 2, "rows", [("d0", (0, 5)), ("d1", (5, 8))])), tmp_path / "b")
    fc = make_instance(models["fc"], n_dev=2, external=True)
    run_plan(fc, plan_of(fc, (0, 0, "channels", [("d0", (0, 4)), ("d1", (4, 10))])), tmp_path / "c")


@pytest.mark.parametrize("name", ["tiny_chain", "tiny_residual", "tiny_fc", "tiny_unet"])
def test_tiny_zoo_models(tmp_path, name):
    size = 16
    inst = make_instance(f"zoo:{name}:{size}", n_dev=3, fusion=3)
    rng = np.random.default_rng(1)
    for _ in range(3):
        plan = evaluate_tuples(inst, random_stages(inst, rng), "random")[0]
        run_plan(inst, plan, tmp_path / "dep")
    run_plan(inst, mixed_plan(inst, 3), tmp_path / "dep")


def mixed_plan(inst, n_parts: int, fusion: int = 3) -> Plan:
    """Row stages of up to ``fusion`` layers on every device, channel splits where rows cannot be
    split, single layers elsewhere (rotating devices)."""
    g = inst.graph
    names = inst.device_names
    stages, i, k = [], 0, 0
    while i < len(g.layers):
        j = i
        while (j + 1 < len(g.layers) and j + 1 - i < fusion and g.layers[j + 1].row_splittable
               and g.layers[i].row_splittable):
            j += 1
        layer = g.layers[j]
        if g.layers[i].row_splittable and layer.rows >= n_parts:
            cuts = [round(p * layer.rows / n_parts) for p in range(n_parts + 1)]
            parts = [(names[(p + k) % len(names)], (cuts[p], cuts[p + 1])) for p in range(n_parts)]
            stages.append((i, j, "rows", parts))
        elif g.layers[i].channel_splittable and g.layers[i].channels >= n_parts:
            j = i
            c = g.layers[i].channels
            cuts = [round(p * c / n_parts) for p in range(n_parts + 1)]
            stages.append((i, i, "channels", [(names[(p + k) % len(names)], (cuts[p], cuts[p + 1]))
                                              for p in range(n_parts)]))
        else:
            j = i
            stages.append((i, i, "none", [(names[k % len(names)], None)]))
        k += 1
        i = j + 1
    return plan_of(inst, *stages)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in zoo.names() if not n.startswith("tiny")])
def test_zoo_models(tmp_path, name):
    size = max(zoo.MODELS[name].min_size, 32)
    if name == "alexnet":
        size = 63
    inst = make_instance(f"zoo:{name}:{size}", n_dev=3, fusion=3)
    run_plan(inst, mixed_plan(inst, 2 if name.startswith("vgg") else 3), tmp_path / "dep")


def planner_instance(model="zoo:tiny_residual:8", fusion=2):
    data = {"name": "pl", "model": model,
            "devices": [{"name": "a", "profile": "rpi4"}, {"name": "b", "profile": "rpi5"}],
            "network": {"bandwidth_mbps": 100, "latency_ms": 0.5, "source": {"device": "a"}, "sink": {"device": "b"}},
            "search": {"fusion_limit": fusion, "max_parts": 2, "splits": ["equal"], "axes": ["rows", "channels"]}}
    return instance_from_dict(data, "pl")


FAST_PLANNERS = ["dp", "cpsat", "modnn", "deeperthings", "coedge", "random", "neurosurgeon"]


@pytest.mark.parametrize("planner", FAST_PLANNERS)
def test_plans_of_planners(tmp_path, planner):
    inst = planner_instance()
    res = get_planner(planner).solve(inst, time_limit=10)
    run_plan(inst, res.plan, tmp_path / "dep")


@pytest.mark.slow
@pytest.mark.parametrize("planner", [p for p in planner_names() if p not in FAST_PLANNERS])
def test_plans_of_every_planner(tmp_path, planner):
    if planner in ("diapason", "distredge", "lp-round"):
        pytest.importorskip("torch")
    inst = planner_instance("zoo:tiny_chain:8", fusion=1) if planner == "bruteforce" else planner_instance()
    res = get_planner(planner).solve(inst, time_limit=20)
    run_plan(inst, res.plan, tmp_path / "dep")


# -- what each device gets -------------------------------------------------------------------------


def _inits(path: Path) -> dict[str, tuple]:
    m = onnx.load(str(path))
    return {t.name.split("#")[0]: tuple(t.dims) for t in m.graph.initializer}


def test_weights_are_sliced_and_pads_rewritten(feat, tmp_path):
    plan = plan_of(feat, *FEATURE_PLANS["channels"])
    m = run_plan(feat, plan, tmp_path / "ch")
    parts = {(s.index, p.device): p for s in m.stages for p in s.parts}
    assert _inits(tmp_path / "ch" / parts[0, "d0"].model)["c1.w"] == (5, 3, 3, 3)
    assert _inits(tmp_path / "ch" / parts[0, "d0"].model)["bn.s"] == (5,)
    assert _inits(tmp_path / "ch" / parts[3, "d2"].model)["dw.w"] == (1, 1, 3, 3)  # one depthwise channel
    assert _inits(tmp_path / "ch" / parts[4, "d2"].model)["gc.w"] == (4, 4, 3, 3)  # its whole group, then cut
    assert _inits(tmp_path / "ch" / parts[4, "d0"].model)["gc.w"] == (8, 4, 3, 3)  # channels 3-4: two groups
    assert parts[3, "d2"].inputs[0].channels == (7, 8)  # a depthwise part reads only its channels
    assert _inits(tmp_path / "ch" / parts[2, "d1"].model)["slope"] == (2, 1, 1)
    assert _inits(tmp_path / "ch" / parts[6, "d0"].model)["ct.w"] == (16, 1, 2, 2)

    plan = plan_of(feat, *FEATURE_PLANS["rows-fused"])
    m = run_plan(feat, plan, tmp_path / "rows")
    first = {p.device: p for p in m.stages[0].parts}

    def conv_pads(part, name):
        model = onnx.load(str(tmp_path / "rows" / part.model))
        node = next(n for n in model.graph.node if n.op_type == "Conv" and n.name.startswith(name + "#"))
        return list(next(a for a in node.attribute if a.name == "pads").ints)

    assert conv_pads(first["d0"], "c1") == [1, 1, 0, 1]  # touches row 0 only
    assert conv_pads(first["d1"], "c1") == [0, 1, 1, 1]  # rows 1-23: the last row only
    assert conv_pads(first["d1"], "dw") == [0, 1, 0, 1]  # rows 4-8, interior: the slice brings the halo
    assert conv_pads(first["d2"], "dw") == [0, 1, 1, 1]  # touches the last row
    assert _inits(tmp_path / "rows" / first["d1"].model)["c1.w"] == (8, 3, 3, 3)  # rows need every weight
    files = {p.model.split("/")[0] for s in m.stages for p in s.parts if p.model}
    assert files == {"d0", "d1", "d2"}
    for s in m.stages:  # a device's folder holds only its own parts
        for p in s.parts:
            assert p.model is None or p.model.startswith(p.device + "/")


def test_manifest_lists_ranks_source_and_sink(feat, tmp_path):
    m = run_plan(feat, plan_of(feat, *FEATURE_PLANS["rows-fused"]), tmp_path / "dep")
    assert m.ranks == {"d0": 0, "d1": 1, "d2": 2, "external": 3}
    assert (m.source, m.sink) == ("external", "external")
    assert any(x.sender == "external" for x in m.messages)
    assert any(x.receiver == "external" and x.stage == len(m.stages) for x in m.messages)
    data = json.loads((tmp_path / "dep" / "manifest.json").read_text())
    msg = data["messages"][0]
    assert {"tensor", "rows", "channels", "sender", "receiver", "stage", "bytes"} <= set(msg)
    assert (tmp_path / "dep" / "hostfile").read_text().splitlines()[-4:] == ["d0:1", "d1:1", "d2:1", "external:1"]
    assert "mpiexec -f hostfile" in (tmp_path / "dep" / "README.md").read_text()


def test_deploy_errors(feat, tmp_path, models):
    bad = plan_of(feat, (0, 17, "none", [("d0", None)]))
    with pytest.raises(PlannerError, match="layers 18-18 are in no stage"):
        deploy(feat, bad, tmp_path / "x")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "f").write_text("x")
    with pytest.raises(PlannerError, match="not empty"):
        deploy(feat, plan_of(feat, (0, 18, "none", [("d0", None)])), tmp_path / "busy")


def test_cli_deploy_and_errors(tmp_path, capsys):
    from milp_planner.cli import main

    plan = tmp_path / "p.json"
    assert main(["solve", "example:tiny-2dev", "--planner", "dp", "--out", str(plan), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["deploy", "example:tiny-2dev", str(plan), "--out", str(tmp_path / "dep")]) == 0
    assert "sub-models" in capsys.readouterr().out
    assert (tmp_path / "dep" / "manifest.json").exists()
    assert main(["run", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "manifest" in err
    plan.write_text('{"stages": [{"first": 0, "last": 0, "parts": [{"device": "zz"}]}]}')
    assert main(["deploy", "example:tiny-2dev", str(plan), "--out", str(tmp_path / "dep2")]) == 2
    assert "unknown device 'zz'" in capsys.readouterr().err


class _Clock:
    """A fake ``time`` for the emulated network: ``sleep`` wakes ``late`` seconds late, and every
    read of the clock costs ``tick``."""

    def __init__(self, late=80e-6, tick=1e-6):
        self.now, self.late, self.tick, self.slept = 0.0, late, tick, []

    def monotonic(self):
        self.now += self.tick
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s + self.late


@pytest.mark.parametrize("time_s, sleeps", [(1e-3, 1), (1e-4, 0)])
def test_emulated_arrival_is_kept_to_the_microsecond(monkeypatch, time_s, sleeps):
    """The receiver sleeps until SPIN_S before the modelled arrival and spins the rest, so a
    sleep that wakes 80 us late does not delay the message (it did, on every message)."""
    from milp_planner.deploy import worker
    from milp_planner.deploy.manifest import MessageSpec

    clock = _Clock()
    monkeypatch.setattr(worker, "time", clock)
    monkeypatch.setattr(worker, "tensor_dtype", lambda manifest, tensor: np.float32)

    class Comm:
        def Recv(self, buf, source, tag):
            buf[...] = 0.0  # the stamp: sent at time 0

    t = worker.MpiTransport(Comm(), {"a": 0, "b": 1}, emulate=True)
    t.shapes, t.manifest = {"x": [1, 1, 2, 2]}, None
    msg = MessageSpec(0, 0, "x", "a", "b", (0, 2), (0, 1), 16, 16, time_s)
    assert t.recv(msg).shape == (1, 1, 2, 2)
    assert len(clock.slept) == sleeps
    assert time_s <= clock.now <= time_s + 5e-6
    assert t.link_free == time_s


def _conv_nd_model(rank: int) -> onnx.ModelProto:
    """Two convolutions over a (N, C, *spatial) input of ``rank`` dims, then Flatten and Gemm."""
    from onnx import TensorProto, helper, numpy_helper

    spatial = {3: (12,), 5: (4, 6, 6)}[rank]
    k = len(spatial)
    rng = np.random.default_rng(rank)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    n_out = 6 * int(np.prod(spatial))
    inits = [w("w1", 8, 4, *(3,) * k), w("b1", 8), w("w2", 6, 8, *(1,) * k), w("wg", n_out, 5), w("bg", 5)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 2 * k),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Flatten", ["c2"], ["f"]),
             helper.make_node("MatMul", ["f", "wg"], ["m"], name="fc"),
             helper.make_node("Add", ["m", "bg"], ["y"])]
    g = helper.make_graph(nodes, f"conv{k}d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, *spatial])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("rank", [3, 5])
def test_convolutions_of_rank_other_than_4_are_not_split_by_channels(tmp_path, rank):
    """A region's channels are the last axis of a tensor of rank other than 4, not a Conv's
    output channels: r3d_18 (torchvision's 3-D ResNet) split a Conv3d by channels and its run
    failed. Conv1d / Conv3d layers run whole; the Gemm after them still splits by columns."""
    path = tmp_path / "m.onnx"
    onnx.save(_conv_nd_model(rank), str(path))
    inst = make_instance(str(path), n_dev=3, fusion=2)
    layers = {layer.name: layer for layer in inst.graph.layers}
    assert not layers["conv1"].channel_splittable and not layers["conv2"].channel_splittable
    assert layers["fc"].channel_splittable
    rng = np.random.default_rng(3)
    for _ in range(8):
        plan = evaluate_tuples(inst, random_stages(inst, rng), "random")[0]
        run_plan(inst, plan, tmp_path / "dep")

"""Deploy within a memory budget: the weights are read per sub-model (deploy/weights.py).

A deploy holds one sub-model's weights at a time, not the model's: checked with tracemalloc
(numpy arrays and bytes objects are traced; protobuf's and onnxruntime's own buffers are not,
so this bounds what Python holds: the values read, the serialized chunks). The streamed paths
(weights read from the file, external data, reference.onnx copied as a stream) give the same
sub-models and the same reference model as the whole-model load did.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploy_models import features_model
from milp_planner.deploy import deploy, execute_sequential, make_inputs, max_abs_err, reference_outputs
from milp_planner.deploy.build import deploy_memory_need, stage_weight_bytes
from milp_planner.deploy.manifest import Manifest
from milp_planner.errors import PlannerError
from milp_planner.instance.reader import instance_from_dict
from milp_planner.space.plan import Plan

MB = 10**6
TOL = 1e-4


def gemm_chain(path, n_layers: int, d: int, seed: int = 0) -> int:
    """``n_layers`` Gemm layers on 1 x d activations, d x d float32 weights; returns their bytes."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"
    for i in range(n_layers):
        w = (rng.standard_normal((d, d), dtype=np.float32) / np.float32(d ** 0.5)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(np.full(d, 0.01 * i, np.float32), f"b{i}"))
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"g{i}"], name=f"g{i}", transB=1))
        x = f"g{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", d])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return n_layers * d * d * 4


def instance(model, n_dev: int, name: str = "chain", d: int = 1224):
    devices = [{"name": f"d{i}", "compute": {"model": "linear", "macs_per_s": 1e9, "overhead_s": 1e-4}}
               for i in range(n_dev)]
    return instance_from_dict({"name": name, "model": str(model), "input_shape": [1, d], "devices": devices,
                               "network": {"bandwidth_mbps": 100, "latency_ms": 0.5, "source": {"device": "d0"},
                                           "sink": {"device": f"d{n_dev - 1}"}},
                               "search": {"fusion_limit": 8, "max_parts": n_dev, "splits": ["equal"],
                                          "axes": ["rows", "channels"]}}, name)


def stages_plan(inst, n_layers: int, n_stages: int, split: bool = False) -> Plan:
    """``n_stages`` stages of consecutive layers, one device each; ``split``: instead one stage
    per layer, each split by output columns over ``n_stages`` devices."""
    if split:
        d = inst.graph.layers[0].channels
        cuts = [round(d * k / n_stages) for k in range(n_stages + 1)]
        parts = [{"device": f"d{k}", "range": [cuts[k], cuts[k + 1]]} for k in range(n_stages)]
        return Plan.from_dict({"stages": [{"first": i, "last": i, "axis": "channels", "parts": parts}
                                          for i in range(n_layers)]})
    per = -(-n_layers // n_stages)
    stages = []
    for s in range(n_stages):
        first, last = s * per, min(n_layers, (s + 1) * per) - 1
        stages.append({"first": first, "last": last, "axis": "none", "parts": [{"device": f"d{s}"}]})
    return Plan.from_dict({"stages": stages})


def check_numerics(folder) -> None:
    m = Manifest.load(folder)
    err = max_abs_err(execute_sequential(folder), reference_outputs(folder, make_inputs(m)))
    assert err <= TOL, err


@pytest.fixture(scope="module")
def chain48(tmp_path_factory):
    """About 48 MB of weights in 8 layers (6 MB each), 4 devices."""
    d = tmp_path_factory.mktemp("chain48")
    weights = gemm_chain(d / "m.onnx", 8, 1224)
    return instance(d / "m.onnx", 4), weights


@pytest.mark.parametrize("split", [False, True], ids=["one-device-stages", "channel-split-stages"])
def test_deploy_holds_one_stage_of_weights_at_a_time(chain48, tmp_path, split):
    inst, weights = chain48
    plan = stages_plan(inst, 8, 4, split)
    stage = stage_weight_bytes(inst, plan)
    assert weights > 45 * MB and stage == pytest.approx(weights / (8 if split else 4), rel=0.01)
    tracemalloc.start()
    try:
        deploy(inst, plan, tmp_path / "dep")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # before: the model's weights as numpy arrays (kept from the first stage to the end) and the
    # reference model serialized whole, about 2 x 48 MB traced; now at most the sub-model being
    # built (its values read, a chunk being written), far below the model's weights
    assert peak < stage + 8 * MB, (peak / MB, stage / MB)
    assert peak < weights / 2
    check_numerics(tmp_path / "dep")
    # reference.onnx: the model itself (its weights byte for byte), the input dims fixed
    ref = onnx.load(str(tmp_path / "dep" / "reference.onnx"))
    src = onnx.load(str(inst.model))
    assert [t.name for t in ref.graph.initializer] == [t.name for t in src.graph.initializer]
    assert all(a == b for a, b in zip(ref.graph.initializer, src.graph.initializer))
    assert [d.dim_value for d in ref.graph.input[0].type.tensor_type.shape.dim] == [1, 1224]
    assert list(ref.graph.node) == list(src.graph.node)


def test_memory_estimate_counts_one_stage_not_the_model(chain48, tmp_path):
    inst, weights = chain48
    four = stages_plan(inst, 8, 4)
    one = stages_plan(inst, 8, 1)
    streamed, _ = deploy_memory_need(inst, four)
    assert streamed < deploy_memory_need(inst, one)[0]  # the largest stage decides
    whole, _ = deploy_memory_need(inst, four, streamed=False)
    assert whole - streamed >= weights  # a model loaded whole adds its weights at least once
    # the refusal is one line, before anything is written
    with pytest.raises(PlannerError, match=r"^deploy of .* needs about .* GB of memory, more than the memory "
                                           r"budget of .*; raise it with --memory-budget$"):
        deploy(inst, four, tmp_path / "dep", memory_budget=streamed - 1)
    assert not (tmp_path / "dep").exists()
    deploy(inst, four, tmp_path / "dep", memory_budget=streamed)


def test_every_weight_read_from_the_file(tmp_path, monkeypatch):
    """``skim`` stubs every initializer (even the 8-byte ones): each is read from the file when a
    sub-model needs it, and reference.onnx is copied from the file."""
    from test_deploy import FEATURE_PLANS, make_instance, plan_of

    from milp_planner.model.onnx import skim

    onnx.save(features_model(), str(tmp_path / "f.onnx"))
    inst = make_instance(str(tmp_path / "f.onnx"))  # (the importer infers shapes from the small constants)
    monkeypatch.setattr(skim, "SKIM_BYTES", 0)
    for name in ("rows-fused", "channels"):
        deploy(inst, plan_of(inst, *FEATURE_PLANS[name]), tmp_path / name)
        check_numerics(tmp_path / name)
        ref = onnx.load(str(tmp_path / name / "reference.onnx"))
        assert {t.name: numpy_helper.to_array(t).tolist() for t in ref.graph.initializer} == \
            {t.name: numpy_helper.to_array(t).tolist() for t in features_model().graph.initializer}


def test_external_data_is_read_per_sub_model(tmp_path):
    """A model whose weights are external data: each sub-model reads its own, reference.onnx
    carries them inline (a deployment is closed: run reads nothing outside its folder)."""
    from test_deploy import FEATURE_PLANS, make_instance, plan_of

    m = features_model()
    onnx.save(m, str(tmp_path / "f.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="f.data", size_threshold=100)  # the small constants inline
    assert (tmp_path / "f.data").stat().st_size > 0
    inst = make_instance(str(tmp_path / "f.onnx"))
    deploy(inst, plan_of(inst, *FEATURE_PLANS["channels"]), tmp_path / "dep")
    check_numerics(tmp_path / "dep")
    ref = onnx.load(str(tmp_path / "dep" / "reference.onnx"), load_external_data=False)
    assert not any(t.data_location == TensorProto.EXTERNAL for t in ref.graph.initializer)
    assert {t.name: numpy_helper.to_array(t).tolist() for t in ref.graph.initializer} == \
        {t.name: numpy_helper.to_array(t).tolist() for t in features_model().graph.initializer}
    files = json.loads((tmp_path / "dep" / ".milp-planner-output.json").read_text())["files"]
    assert not any(f.endswith(".data") for f in files)


def test_a_model_file_changed_under_a_deploy_is_an_error(chain48, tmp_path, monkeypatch):
    """The weights are read late: a file truncated meanwhile is a one-line error, and nothing is written."""
    import shutil

    from milp_planner.deploy import build

    inst, _ = chain48
    shutil.copy(inst.model, tmp_path / "m.onnx")
    inst = instance(tmp_path / "m.onnx", 4)
    opened = build.open_model

    def open_then_truncate(*a, **k):
        out = opened(*a, **k)
        with open(tmp_path / "m.onnx", "r+b") as f:
            f.truncate(1000)
        return out

    monkeypatch.setattr(build, "open_model", open_then_truncate)
    with pytest.raises(PlannerError, match="the file changed since it was read"):
        deploy(inst, stages_plan(inst, 8, 4), tmp_path / "dep")
    assert not (tmp_path / "dep").exists()


def test_streamed_serialization_is_the_same_model():
    from milp_planner.deploy.weights import Weights, array_tensor, model_chunks

    m = features_model()
    m.graph.initializer.append(numpy_helper.from_array(np.arange(6, dtype=np.float16).reshape(2, 3), "half"))
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "flag"))
    m.graph.initializer.append(numpy_helper.from_array(np.array([b"s"], dtype=object), "text"))
    for chunks in (model_chunks(m), Weights(m).model_chunks()):
        assert onnx.ModelProto.FromString(b"".join(bytes(c) for c in chunks)) == m
    # a sub-model's weights written from its arrays: as numpy_helper.from_array makes them
    shell = onnx.ModelProto()
    shell.CopyFrom(m)
    del shell.graph.initializer[:]
    arrays = [(t.name, numpy_helper.to_array(t)) for t in m.graph.initializer]
    arrays.append(("strided", np.arange(24, dtype=np.int64).reshape(4, 6)[:, 1:5]))
    whole = onnx.ModelProto()
    whole.CopyFrom(shell)
    whole.graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in arrays)
    data = b"".join(bytes(c) for c in model_chunks(shell, extra=[array_tensor(n, a) for n, a in arrays]))
    assert onnx.ModelProto.FromString(data) == whole


def test_a_reference_model_beyond_protobufs_limit_is_refused_first(chain48, tmp_path, monkeypatch):
    from milp_planner.deploy import build, weights

    inst, _ = chain48
    monkeypatch.setattr(weights, "MAX_PROTO", 10 * MB)
    monkeypatch.setattr(build, "build_submodel", lambda *a, **k: pytest.fail("a sub-model was built"))
    with pytest.raises(PlannerError, match=r"^deploy: the model .*m\.onnx with its weights is 0\.048 GB, beyond the "
                                           r"2 GiB a protobuf message can hold$"):
        deploy(inst, stages_plan(inst, 8, 4), tmp_path / "dep")
    assert not (tmp_path / "dep").exists()

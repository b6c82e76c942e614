"""What real graphs contain, end to end on small models made here (no downloads): old opsets,
scalars, integer tensors across stages, Split fan-out, If with outer reads, quantised ops,
recurrent ops, inputs given by name; every deployment checked against onnxruntime on the whole
model, every count against the textbook formula."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from milp_planner.cli import main
from milp_planner.deploy import deploy, execute_sequential, make_inputs, max_abs_err, reference_outputs
from milp_planner.deploy.manifest import Manifest
from milp_planner.errors import PlannerError
from milp_planner.instance.reader import instance_from_dict
from milp_planner.model.onnx import import_onnx
from milp_planner.space.plan import Part, Plan, Stage

RNG = np.random.default_rng(0)


def wt(name, *shape):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def model(nodes, inputs, outputs, inits=(), opset=17):
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs]
    m = helper.make_model(helper.make_graph(nodes, "m", ins, outs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return m


def instance(path, n_dev=2, **extra):
    devices = [{"name": f"d{i}", "compute": {"model": "linear", "macs_per_s": 1e9}} for i in range(n_dev)]
    data = {"name": "t", "model": str(path), "devices": devices,
            "network": {"bandwidth_mbps": 100, "source": {"device": "d0"}, "sink": {"device": "d0"}},
            "search": {"fusion_limit": 4, "max_parts": n_dev}, **extra}
    return instance_from_dict(data, "t")


def one_stage_per_layer(inst, split: dict | None = None):
    """Layer l on device d(l % 2); the layers in ``split`` (id -> axis) split in two halves."""
    stages = []
    for layer in inst.graph.layers:
        axis = (split or {}).get(layer.id)
        if axis:
            n = layer.rows if axis == "rows" else layer.channels
            stages.append(Stage(layer.id, layer.id, axis, (Part("d0", (0, n // 2)), Part("d1", (n // 2, n)))))
        else:
            stages.append(Stage(layer.id, layer.id, "none", (Part(f"d{layer.id % 2}"),)))
    return Plan(inst.name, stages)


def check_deploy(inst, plan, folder: Path, inputs=None, tol=1e-5):
    deploy(inst, plan, folder)
    m = Manifest.load(folder)
    got = execute_sequential(folder, input=inputs)
    ref = reference_outputs(folder, make_inputs(m, inputs))
    assert max_abs_err(got, ref) <= tol
    return m


def conv_chain(opset):
    x = ("x", TensorProto.FLOAT, [1, 3, 12, 10])
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Upsample" if opset < 10 else "Resize",
                              ["r1", "sc"] if opset < 10 else ["r1", "roi", "sc"], ["u"], mode="nearest"),
             helper.make_node("Conv", ["u", "w2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits = [wt("w1", 4, 3, 3, 3), wt("w2", 2, 4, 3, 3), numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")]
    if opset >= 10:
        inits.append(numpy_helper.from_array(np.zeros(0, np.float32), "roi"))
    return model(nodes, [x], [("y", TensorProto.FLOAT)], inits, opset=opset)


@pytest.mark.parametrize("opset", [9, 11])
def test_row_splits_at_old_opsets_load_and_match(opset, tmp_path):
    """Opset 9: Slice and Pad take attributes; opset 11: Resize needs its roi input."""
    path = tmp_path / "m.onnx"
    onnx.save(conv_chain(opset), path)
    inst = instance(path)
    plan = one_stage_per_layer(inst, {l.id: "rows" for l in inst.graph.layers})
    m = check_deploy(inst, plan, tmp_path / "dep")
    for s in m.stages:
        for p in s.parts:
            sub = onnx.load(tmp_path / "dep" / p.model)
            assert sub.opset_import[0].version == opset
            if opset < 10:
                assert all(len(n.input) == 1 for n in sub.graph.node if n.op_type == "Slice")


def test_unsqueeze_axes_attribute_in_a_reshape_target():
    """Opset 12: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0), axes=[0]), [-1])) has a known shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]),
             helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array([-1], np.int64), "m1"),
             wt("wf", 5, 24)]
    m = model(nodes, [("x", TensorProto.FLOAT, ["N", 2, 3, 4])], [("y", TensorProto.FLOAT)], inits, opset=12)
    g = import_onnx(m, input_shape=(1, 2, 3, 4))
    assert g.layers[-1].shape == (1, 5) and g.totals["macs"] == 5 * 24


def test_scalar_index_integer_boundary_and_split_fan_out(tmp_path):
    """x[:, 0] with a 0-d index (ViT's class token), an int64 tensor between two devices, and a
    Split whose two outputs go different ways (YOLOv8's C2f)."""
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=2),
             helper.make_node("Relu", ["a"], ["ra"]),
             helper.make_node("Sigmoid", ["b"], ["sb"]),
             helper.make_node("Concat", ["ra", "sb", "a"], ["cat"], axis=2),
             helper.make_node("Gather", ["cat", "zero"], ["cls"], axis=1),  # (1, 12): a scalar index
             helper.make_node("ArgMax", ["cls"], ["am"], axis=1, keepdims=1),  # int64 (1, 1)
             helper.make_node("Cast", ["am"], ["amf"], to=TensorProto.FLOAT),
             helper.make_node("Gemm", ["cls", "wg"], ["g"], transB=1),
             helper.make_node("Add", ["g", "amf"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), wt("wg", 3, 12)]
    m = model(nodes, [("x", TensorProto.FLOAT, [1, 5, 8])], [("y", TensorProto.FLOAT)], inits)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    inst = instance(path)
    g = inst.graph
    assert sum(l.op == "Split" for l in g.layers) == 2  # one layer per used output
    man = check_deploy(inst, one_stage_per_layer(inst), tmp_path / "dep")
    assert man.notes["dtypes"].get("am") == "int64"
    assert any(x.tensor == "am" for x in man.messages)  # the int64 tensor crosses devices


def test_if_reading_outer_tensors_is_one_layer_and_deploys(tmp_path):
    then = helper.make_graph([helper.make_node("Mul", ["h", "two"], ["t_out"])], "then", [],
                             [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [1, 4])])
    other = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"])], "else", [],
                              [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("Gemm", ["x", "w"], ["h"], transB=1),
             helper.make_node("ReduceSum", ["h"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zf"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    inits = [wt("w", 4, 6), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zf")]
    m = model(nodes, [("x", TensorProto.FLOAT, [1, 6])], [("y", TensorProto.FLOAT)], inits)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    inst = instance(path)
    (if_layer,) = [l for l in inst.graph.layers if l.op == "If"]
    assert set(if_layer.inputs) == {"cond", "h"}  # the outer read is an input
    check_deploy(inst, one_stage_per_layer(inst), tmp_path / "dep")


def test_recurrent_ops_counted_by_their_formulas():
    seq, batch, size, hidden = 5, 2, 7, 6
    for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        nodes = [helper.make_node(op, ["x", "W", "R"], ["y"], hidden_size=hidden)]
        inits = [wt("W", 1, gates * hidden, size), wt("R", 1, gates * hidden, hidden)]
        g = import_onnx(model(nodes, [("x", TensorProto.FLOAT, [seq, batch, size])], [("y", TensorProto.FLOAT)],
                              inits))
        assert g.totals["macs"] == seq * batch * gates * hidden * (size + hidden), op
        assert g.totals["params"] == gates * hidden * (size + hidden)
        assert not g.warnings


def test_quantised_convolutions_counted_exactly():
    x8 = ("x", TensorProto.UINT8, [1, 3, 8, 8])
    w8 = numpy_helper.from_array(RNG.integers(-5, 5, (4, 3, 3, 3)).astype(np.int8), "w")
    conv_int = model([helper.make_node("ConvInteger", ["x", "w"], ["y"], kernel_shape=[3, 3])], [x8],
                     [("y", TensorProto.INT32)], [w8], opset=13)
    f = lambda v, n, t=np.float32: numpy_helper.from_array(np.array(v, t), n)  # noqa: E731
    qconv = model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                                    kernel_shape=[3, 3])], [x8], [("y", TensorProto.UINT8)],
                  [w8, f(0.1, "xs"), f(128, "xz", np.uint8), f(0.05, "ws"), f(0, "wz", np.int8), f(0.2, "ys"),
                   f(128, "yz", np.uint8)], opset=13)
    for m in (conv_int, qconv):
        g = import_onnx(m)
        assert g.totals["macs"] == 4 * 6 * 6 * 27 and g.totals["params"] == 4 * 27 and not g.warnings


def test_input_shape_once_per_input(tmp_path, capsys):
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    m = model(nodes, [("a", TensorProto.FLOAT, ["N", 4]), ("b", TensorProto.FLOAT, ["M", 4])],
              [("y", TensorProto.FLOAT)])
    path = tmp_path / "two.onnx"
    onnx.save(m, path)
    assert main(["inspect", str(path), "--input-shape", "3,4", "--input-shape", "b=3,4", "--json"]) == 0
    assert '"a"' in capsys.readouterr().out
    assert main(["inspect", str(path), "--input-shape", "3,4", "--input-shape", "c=3,4"]) == 2
    assert "'c', which is not an input" in capsys.readouterr().err
    with pytest.raises(PlannerError, match="'b'"):
        import_onnx(path, input_shape=(3, 4))  # b still symbolic: the error names it


def test_deploy_refuses_a_sub_model_onnxruntime_cannot_load(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(conv_chain(13), path)
    inst = instance(path)
    import milp_planner.deploy.build as build

    real = build.build_submodel

    def broken(*a, **k):
        sub = real(*a, **k)
        sub.model.graph.node[0].op_type = "NoSuchOp"
        return sub

    monkeypatch.setattr(build, "build_submodel", broken)
    with pytest.raises(PlannerError, match=r"stage 0 on d0 \(d0/stage000.onnx\): onnxruntime cannot load") as err:
        deploy(inst, one_stage_per_layer(inst), tmp_path / "dep")
    assert "nor the model itself" not in str(err.value)  # the model loads: the split is at fault
    assert not (tmp_path / "dep" / "manifest.json").exists()


def test_deploy_says_when_the_model_itself_does_not_load(tmp_path):
    """onnxruntime's quantiser wrote ConvNeXt and Swin models whose QLinearAdd / QGemm read a
    zero point of the wrong type: no split of them loads, and the error says the model is at fault."""
    m = conv_chain(13)
    m.graph.node.append(helper.make_node("Cast", ["y"], ["yi"], to=TensorProto.INT32))
    m.graph.node.append(helper.make_node("Relu", ["yi"], ["z"]))  # Relu of int32: not in any opset
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.INT32, None))
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    inst = instance(path)
    with pytest.raises(PlannerError, match=r"cannot load the sub-model .*nor the model itself, so the model is "
                                           r"invalid, not its split"):
        deploy(inst, one_stage_per_layer(inst), tmp_path / "dep")


def _float_net() -> onnx.ModelProto:
    """Conv, a residual Add, x * Sigmoid(x), Concat, AveragePool, GlobalAveragePool and Gemm:
    each has an onnxruntime operator-format quantised form (com.microsoft QLinear*, QGemm)."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Mul", ["a", "s"], ["m"]),
             helper.make_node("Concat", ["m", "r1"], ["cat"], axis=1),
             helper.make_node("AveragePool", ["cat"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1)]
    inits = [wt("w1", 8, 3, 3, 3), wt("b1", 8), wt("w2", 8, 8, 3, 3), wt("b2", 8), wt("wg", 5, 16), wt("bg", 5)]
    return model(nodes, [("x", TensorProto.FLOAT, [1, 3, 12, 12])], [("y", TensorProto.FLOAT)], inits, opset=13)


def test_operator_format_quantised_models_count_as_their_float_model_and_deploy(tmp_path):
    """onnxruntime's ``quantize_static`` in operator format writes com.microsoft QLinearAdd,
    QLinearMul, QLinearSigmoid, QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool and
    QGemm, which onnx's shape inference does not know: torchvision's MobileNetV3 and SqueezeNet so
    quantised failed at import ("unknown rank"), and QGemm counted 0 MACs."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    fp, q8 = tmp_path / "float.onnx", tmp_path / "qop.onnx"
    onnx.save(_float_net(), fp)
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.data, None)

    quantize_static(str(fp), str(q8), Reader(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(str(q8)).graph.node if n.domain == "com.microsoft"}
    assert {"QLinearAdd", "QLinearMul", "QLinearConcat", "QGemm", "QLinearGlobalAveragePool"} <= ops
    f, q = import_onnx(fp), import_onnx(q8)
    assert q.totals["macs"] == f.totals["macs"] == 8 * 144 * 27 + 8 * 144 * 72 + 5 * 16
    assert q.totals["params"] == f.totals["params"] and not q.warnings
    inst = instance(q8)
    check_deploy(inst, one_stage_per_layer(inst), tmp_path / "dep", tol=0.0)


def test_an_unknown_custom_operator_is_refused_by_its_name():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Frobnicate", ["r"], ["y"], domain="com.acme")]
    m = model(nodes, [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT)])
    m.opset_import.append(helper.make_opsetid("com.acme", 1))
    with pytest.raises(PlannerError, match=r"operator Frobnicate of domain 'com.acme' is not supported"):
        import_onnx(m)

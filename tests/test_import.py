"""The ONNX importer (docs/model.md section 2): folding, shapes, counts, row dependencies, errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from milp_planner.cli import main
from milp_planner.errors import PlannerError
from milp_planner.model.graph import EMPTY, RowDep, input_rows
from milp_planner.model.onnx import ModelWarning, import_onnx

ort = pytest.importorskip("onnxruntime")


# -- helpers --------------------------------------------------------------------------------


def make_model(nodes, inputs, outputs, inits=(), value_info=(), opset=17, name="m"):
    """inputs: [(name, shape)], outputs: [name] (shapes left to inference)."""
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    g = helper.make_graph(nodes, name, ins, outs, list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def w(name, *shape, seed=0):
    rng = np.random.default_rng(seed + len(name))
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def conv(x, wname, out, bias=None, **attrs):
    ins = [x, wname] + ([bias] if bias else [])
    return helper.make_node("Conv", ins, [out], name=out, **attrs)


def layer_by_name(g, name):
    (layer,) = [layer for layer in g.layers if layer.name == name]
    return layer


def run(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def assert_rows_suffice(model, x_shape, seed=0, trials=6):
    """Output rows [a, b) of the model's single layer depend only on input_rows(...) rows.

    Rows of the input outside input_rows are replaced by noise; the output rows must not
    change. This checks the importer's RowDep against what onnxruntime computes.
    """
    g = import_onnx(model)
    layer = g.layers[-1]
    assert len(g.layers) == 1 and layer.row_splittable
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    y = run(model, x)
    h_out, h_in = y.shape[2], x_shape[2]
    for _ in range(trials):
        a = int(rng.integers(0, h_out))
        b = int(rng.integers(a + 1, h_out + 1))
        lo, hi = input_rows(layer.rowdep, (a, b), h_in)
        x2 = rng.standard_normal(x_shape).astype(np.float32) * 100
        x2[:, :, lo:hi] = x[:, :, lo:hi]
        y2 = run(model, x2)
        np.testing.assert_allclose(y2[:, :, a:b], y[:, :, a:b], rtol=1e-4, atol=1e-4,
                                   err_msg=f"rows [{a},{b}) read input rows [{lo},{hi}) {layer.rowdep}")


# -- input_rows (graph.py) by hand ----------------------------------------------------------


@pytest.mark.parametrize(
    "dep, out, h_in, expect",
    [
        (RowDep("window", kernel=3, stride=1, pad_top=1), (0, 4), 8, (0, 5)),  # top clipped
        (RowDep("window", kernel=3, stride=1, pad_top=1), (4, 8), 8, (3, 8)),  # bottom clipped
        (RowDep("window", kernel=3, stride=2, pad_top=1), (2, 4), 8, (3, 8)),
        (RowDep("window", kernel=2, stride=2, pad_top=0), (1, 3), 8, (2, 6)),  # 2x2 pool
        (RowDep("window", kernel=3, stride=1, pad_top=2, dilation=2), (0, 2), 8, (0, 4)),
        (RowDep("window", kernel=3, stride=1, pad_top=2, dilation=2), (3, 5), 8, (1, 7)),
        (RowDep("window", kernel=7, stride=2, pad_top=3), (0, 56), 224, (0, 114)),
        (RowDep("window", kernel=3, stride=1, pad_top=1), (3, 3), 8, EMPTY),  # empty request
        (RowDep("identity"), (2, 5), 8, (2, 5)),
        (RowDep("resize", factor_num=2, factor_den=1), (3, 7), 8, (1, 4)),
        (RowDep("resize", factor_num=2, factor_den=1, linear=True), (3, 7), 8, (0, 5)),
        (RowDep("resize", factor_num=3, factor_den=2), (0, 3), 4, (0, 2)),
        (RowDep("resize", factor_num=1, factor_den=2), (1, 3), 8, (2, 6)),
        (RowDep("transpose", kernel=2, stride=2, pad_top=0), (2, 6), 8, (1, 3)),
        (RowDep("transpose", kernel=3, stride=2, pad_top=1), (0, 1), 8, (0, 1)),
        (RowDep("transpose", kernel=3, stride=2, pad_top=1), (1, 2), 8, (0, 2)),
        (RowDep("none"), (1, 2), 8, (0, 8)),
    ],
)
def test_input_rows_by_hand(dep, out, h_in, expect):
    assert input_rows(dep, out, h_in) == expect


@pytest.mark.parametrize("k,s,p,d", [(3, 1, 1, 1), (3, 2, 1, 1), (5, 2, 2, 1), (3, 1, 2, 2), (1, 1, 0, 1),
                                     (4, 3, 0, 1)])
def test_window_rows_match_brute_force(k, s, p, d):
    h_in = 17
    h_out = (h_in + 2 * p - (k - 1) * d - 1) // s + 1
    for a in range(h_out):
        for b in range(a + 1, h_out + 1):
            taps = {o * s - p + j * d for o in range(a, b) for j in range(k)}
            taps = [t for t in taps if 0 <= t < h_in]
            lo, hi = input_rows(RowDep("window", kernel=k, stride=s, pad_top=p, dilation=d), (a, b), h_in)
            assert lo <= min(taps) and hi >= max(taps) + 1  # enough rows
            if d == 1:  # and, without holes in the window, exactly the rows read
                assert (lo, hi) == (min(taps), max(taps) + 1)


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (4, 2, 1), (3, 1, 1), (5, 3, 2)])
def test_transpose_rows_match_brute_force(k, s, p):
    h_in = 9
    h_out = (h_in - 1) * s - 2 * p + k
    for a in range(h_out):
        for b in range(a + 1, h_out + 1):
            src = [i for i in range(h_in) if any(a <= i * s - p + j < b for j in range(k))]
            assert input_rows(RowDep("transpose", kernel=k, stride=s, pad_top=p), (a, b), h_in) == (
                min(src), max(src) + 1)


# -- row dependencies against onnxruntime ---------------------------------------------------


@pytest.mark.parametrize(
    "attrs",
    [
        dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0]),
        dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]),
        dict(kernel_shape=[4, 4], auto_pad="SAME_UPPER"),
        dict(kernel_shape=[4, 4], auto_pad="SAME_LOWER"),
        dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
        dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="VALID"),
    ],
)
def test_conv_rowdep_matches_onnxruntime(attrs):
    m = make_model([conv("x", "w", "y", "b", **attrs)], [("x", [1, 2, 11, 9])], ["y"],
                   [w("w", 3, 2, *attrs["kernel_shape"]), w("b", 3)])
    assert_rows_suffice(m, (1, 2, 11, 9))


@pytest.mark.parametrize(
    "op, attrs",
    [
        ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
        ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], auto_pad="SAME_UPPER")),
    ],
)
def test_pool_rowdep_matches_onnxruntime(op, attrs):
    m = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [1, 2, 11, 8])], ["y"])
    assert_rows_suffice(m, (1, 2, 11, 8))


@pytest.mark.parametrize("attrs", [dict(strides=[2, 2], pads=[1, 1, 1, 1]), dict(strides=[2, 2]),
                                   dict(strides=[3, 3], pads=[2, 0, 2, 0], output_padding=[1, 0])])
def test_convtranspose_rowdep_matches_onnxruntime(attrs):
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[4, 3], **attrs)
    m = make_model([node], [("x", [1, 2, 7, 6])], ["y"], [w("w", 2, 3, 4, 3)])
    assert_rows_suffice(m, (1, 2, 7, 6))


@pytest.mark.parametrize(
    "mode, ctm, h_out",
    [("nearest", "asymmetric", 16), ("nearest", "half_pixel", 12), ("linear", "half_pixel", 16),
     ("linear", "align_corners", 12), ("linear", "pytorch_half_pixel", 5), ("nearest", "align_corners", 12)],
)
def test_resize_rowdep_matches_onnxruntime(mode, ctm, h_out):
    sizes = numpy_helper.from_array(np.array([1, 2, h_out, 6], np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, coordinate_transformation_mode=ctm)
    m = make_model([node], [("x", [1, 2, 8, 6])], ["y"], [sizes])
    assert_rows_suffice(m, (1, 2, 8, 6))


def test_pad_and_depth_to_space_rowdeps_match_onnxruntime():
    pads = numpy_helper.from_array(np.array([0, 0, 2, 1, 0, 0, 1, 0], np.int64), "pads")
    m = make_model([helper.make_node("Pad", ["x", "pads"], ["y"])], [("x", [1, 2, 7, 5])], ["y"], [pads])
    g = import_onnx(m)
    assert g.layers[0].rowdep == RowDep("window", kernel=1, stride=1, pad_top=2, dilation=1)
    assert_rows_suffice(m, (1, 2, 7, 5))
    m = make_model([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)], [("x", [1, 8, 5, 4])], ["y"])
    assert_rows_suffice(m, (1, 8, 5, 4))
    m = make_model([helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)], [("x", [1, 2, 8, 4])], ["y"])
    assert_rows_suffice(m, (1, 2, 8, 4))


def test_auto_pad_pad_top():
    def top(**attrs):
        m = make_model([conv("x", "w", "y", **attrs)], [("x", [1, 2, 8, 8])], ["y"],
                       [w("w", 3, 2, *attrs["kernel_shape"])])
        return import_onnx(m).layers[0].rowdep.pad_top

    # k=4, s=1, H=8: total = 7*1 + 4 - 8 = 3
    assert top(kernel_shape=[4, 4], auto_pad="SAME_UPPER") == 1
    assert top(kernel_shape=[4, 4], auto_pad="SAME_LOWER") == 2
    # k=3, s=2, H=8: out 4, total = 3*2 + 3 - 8 = 1
    assert top(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER") == 0
    assert top(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER") == 1
    # k=3, s=2, dilation 2, H=8: total = 3*2 + 5 - 8 = 3
    assert top(kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 2], auto_pad="SAME_UPPER") == 1
    assert top(kernel_shape=[1, 1], strides=[2, 2], auto_pad="SAME_LOWER") == 0
    assert top(kernel_shape=[3, 3], pads=[2, 0, 1, 0]) == 2
    assert top(kernel_shape=[3, 3], auto_pad="VALID") == 0


# -- folding --------------------------------------------------------------------------------


def bn_inits(prefix, c):
    return [w(f"{prefix}.s", c), w(f"{prefix}.b", c), w(f"{prefix}.m", c),
            numpy_helper.from_array(np.ones(c, np.float32), f"{prefix}.v")]


def bn(x, prefix, out):
    return helper.make_node("BatchNormalization", [x, f"{prefix}.s", f"{prefix}.b", f"{prefix}.m", f"{prefix}.v"],
                            [out], name=out)


def test_conv_bn_relu_fold_into_one_layer():
    nodes = [conv("x", "w", "c", "cb", kernel_shape=[3, 3], pads=[1, 1, 1, 1]), bn("c", "bn", "n"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             conv("r", "w2", "y", kernel_shape=[1, 1])]
    m = make_model(nodes, [("x", [1, 3, 16, 16])], ["y"], [w("w", 8, 3, 3, 3), w("cb", 8), *bn_inits("bn", 8),
                                                            w("w2", 4, 8, 1, 1)])
    g = import_onnx(m)
    assert [layer.name for layer in g.layers] == ["c", "y"]
    first = g.layers[0]
    assert first.op == "Conv" and first.folded == ("BatchNormalization", "Relu")
    assert first.output == "r" and g.layers[1].inputs == ("r",)
    assert first.params == 8 * 3 * 9 + 8 + 2 * 8  # weight + bias + BN scale and shift
    assert first.macs == 1 * 8 * 16 * 16 * 3 * 9  # BN and bias are not MACs
    assert first.ops == 0
    assert g.layers[1].params == 32
    assert g.outputs == ["y"]


def test_no_fold_when_producer_output_has_two_consumers():
    nodes = [conv("x", "w", "c", kernel_shape=[1, 1]), helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["c", "r"], ["y"], name="add")]
    g = import_onnx(make_model(nodes, [("x", [1, 3, 8, 8])], ["y"], [w("w", 3, 3, 1, 1)]))
    assert [(layer.op, layer.folded) for layer in g.layers] == [("Conv", ()), ("Relu", ()), ("Add", ())]
    add = g.layers[2]
    assert add.inputs == ("c", "r") and add.rowdep.kind == "identity" and add.row_splittable
    assert add.ops == 3 * 8 * 8 and add.params == 0


def test_no_fold_when_producer_output_is_a_graph_output():
    nodes = [conv("x", "w", "c", kernel_shape=[1, 1]), helper.make_node("Relu", ["c"], ["r"], name="relu")]
    g = import_onnx(make_model(nodes, [("x", [1, 3, 8, 8])], ["c", "r"], [w("w", 3, 3, 1, 1)]))
    assert [layer.output for layer in g.layers] == ["c", "r"]
    assert g.outputs == ["c", "r"]


def test_bn_alone_is_an_identity_layer_with_2c_params():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), bn("x", "bn", "n"),
             helper.make_node("Add", ["r", "n"], ["y"], name="add")]
    g = import_onnx(make_model(nodes, [("x", [1, 4, 8, 8])], ["y"], bn_inits("bn", 4)))
    bn_layer = layer_by_name(g, "n")
    assert bn_layer.op == "BatchNormalization" and bn_layer.params == 8
    assert bn_layer.rowdep.kind == "identity" and bn_layer.row_splittable and not bn_layer.channel_splittable


def test_identity_and_dropout_disappear():
    nodes = [conv("x", "w", "c", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Identity", ["c"], ["i"], name="id"),
             helper.make_node("Dropout", ["i"], ["d"], name="drop"),
             helper.make_node("Relu", ["d"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["y"], name="out")]
    g = import_onnx(make_model(nodes, [("x", [1, 3, 8, 8])], ["y"], [w("w", 4, 3, 3, 3)]))
    assert len(g.layers) == 1
    layer = g.layers[0]
    assert layer.folded == ("Relu",) and layer.output == "y" and g.outputs == ["y"]
    assert layer.shape == (1, 4, 8, 8)


def test_folded_graph_output_names_the_layer_output():
    nodes = [conv("x", "w", "c", kernel_shape=[1, 1]), bn("c", "bn", "n"),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    g = import_onnx(make_model(nodes, [("x", [1, 3, 8, 8])], ["y"], [w("w", 4, 3, 1, 1), *bn_inits("bn", 4)]))
    assert len(g.layers) == 1 and g.layers[0].output == "y" and g.outputs == ["y"]
    assert g.producer("y") == 0


def test_bias_add_and_scale_mul_fold_and_count():
    bias = w("bias", 1, 6, 1, 1)
    scalar = numpy_helper.from_array(np.array(3.0, np.float32), "three")
    nodes = [helper.make_node("MatMul", ["x", "wm"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "bv"], ["a"], name="add"),
             helper.make_node("Mul", ["three", "a"], ["y"], name="mul")]  # constant first operand
    m = make_model(nodes, [("x", [2, 5])], ["y"], [w("wm", 5, 7), w("bv", 7), bias, scalar])
    g = import_onnx(m)
    assert len(g.layers) == 1
    mm = g.layers[0]
    assert mm.folded == ("Add", "Mul") and mm.params == 35 + 7  # the scalar 3 is not a parameter
    assert mm.macs == 2 * 7 * 5 and mm.channel_splittable and not mm.row_splittable
    # a broadcasting Add is not a bias: it changes the shape, so it stays a layer
    nodes = [conv("x", "w", "c", kernel_shape=[1, 1]), helper.make_node("Add", ["c", "big"], ["y"], name="add")]
    m = make_model(nodes, [("x", [1, 3, 4, 4])], ["y"], [w("w", 6, 3, 1, 1), w("big", 2, 6, 4, 4)])
    g = import_onnx(m)
    assert [layer.op for layer in g.layers] == ["Conv", "Add"] and g.layers[1].params == 2 * 6 * 16


def test_gelu_and_swish_patterns_fold():
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "wm"], ["h"], name="fc"),
             helper.make_node("Div", ["h", "sqrt2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add1"),
             helper.make_node("Mul", ["h", "a"], ["m"], name="mul1"),
             helper.make_node("Mul", ["m", "half"], ["g"], name="mul2"),
             helper.make_node("MatMul", ["g", "wm2"], ["s0"], name="fc2"),
             helper.make_node("Sigmoid", ["s0"], ["sg"], name="sig"),
             helper.make_node("Mul", ["s0", "sg"], ["y"], name="swish")]
    inits = [w("wm", 8, 16), w("wm2", 16, 4), c("sqrt2", 1.4142135), c("one", 1.0), c("half", 0.5)]
    m = make_model(nodes, [("x", [3, 8])], ["y"], inits)
    g = import_onnx(m)
    assert [(layer.name, layer.folded) for layer in g.layers] == [("fc", ("Gelu",)), ("fc2", ("Swish",))]
    assert g.totals["params"] == 8 * 16 + 16 * 4  # sqrt2, one, half are scalars
    assert g.layers[1].inputs == ("g",) and g.outputs == ["y"]


def test_constant_node_weights_are_params_and_not_layers():
    wt = w("wv", 4, 3, 3, 3)
    nodes = [helper.make_node("Constant", [], ["wc"], value=wt, name="const_w"),
             helper.make_node("Constant", [], ["bc"], value=w("bv", 4), name="const_b"),
             conv("x", "wc", "y", "bc", kernel_shape=[3, 3])]
    g = import_onnx(make_model(nodes, [("x", [1, 3, 8, 8])], ["y"]))
    assert len(g.layers) == 1 and g.layers[0].params == 4 * 27 + 4 and g.layers[0].channel_splittable
    assert g.layers[0].inputs == ("x",)


def test_clip_bounds_are_not_params():
    lo = numpy_helper.from_array(np.array(0.0, np.float32), "lo")
    nodes = [helper.make_node("Constant", [], ["hi"], value=numpy_helper.from_array(np.array(6.0, np.float32), "h")),
             conv("x", "w", "c", kernel_shape=[1, 1]), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    g = import_onnx(make_model(nodes, [("x", [1, 3, 8, 8])], ["y"], [w("w", 4, 3, 1, 1), lo]))
    assert len(g.layers) == 1 and g.layers[0].folded == ("Clip",) and g.layers[0].params == 12


def test_prelu_slopes_and_layernorm_count():
    nodes = [conv("x", "w", "c", kernel_shape=[1, 1]), helper.make_node("PRelu", ["c", "slope"], ["y"])]
    g = import_onnx(make_model(nodes, [("x", [1, 3, 8, 8])], ["y"], [w("w", 4, 3, 1, 1), w("slope", 4, 1, 1)]))
    assert g.layers[0].folded == ("PRelu",) and g.layers[0].params == 12 + 4


def test_initializers_listed_as_graph_inputs_are_not_activations():
    m = make_model([conv("x", "w", "y", kernel_shape=[1, 1])], [("x", [1, 3, 4, 4]), ("w", [5, 3, 1, 1])], ["y"],
                   [w("w", 5, 3, 1, 1)])
    g = import_onnx(m)
    assert g.inputs == {"x": (1, 3, 4, 4)} and g.layers[0].inputs == ("x",) and g.layers[0].params == 15


# -- MACs, ops ------------------------------------------------------------------------------


def test_depthwise_and_grouped_conv_macs():
    dw = conv("x", "wd", "d", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8)
    gc = conv("d", "wg", "y", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2)
    g = import_onnx(make_model([dw, gc], [("x", [1, 8, 16, 16])], ["y"], [w("wd", 8, 1, 3, 3), w("wg", 4, 4, 3, 3)]))
    d, y = g.layers
    assert d.macs == 1 * 8 * 16 * 16 * (8 // 8) * 9 and d.groups == 8 and d.params == 72
    assert y.macs == 1 * 4 * 16 * 16 * (8 // 2) * 9 and y.groups == 2 and y.params == 144


def test_convtranspose_macs_and_rowdep():
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1], output_padding=[1, 1])
    g = import_onnx(make_model([node], [("x", [1, 4, 8, 8])], ["y"], [w("w", 4, 6, 3, 3), w("b", 6)]))
    (t,) = g.layers
    assert t.shape == (1, 6, 16, 16)
    assert t.macs == 1 * 4 * 8 * 8 * 6 * 9 and t.params == 4 * 6 * 9 + 6
    assert t.rowdep == RowDep("transpose", kernel=3, stride=2, pad_top=1, dilation=1)
    assert t.row_splittable and t.channel_splittable


def test_gemm_pool_and_relayout_work():
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["gp"]),
             helper.make_node("Flatten", ["gp"], ["f"]),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1)]
    g = import_onnx(make_model(nodes, [("x", [2, 6, 8, 8])], ["y"], [w("wg", 10, 6), w("bg", 10)]))
    pool, gap, flat, fc = g.layers
    assert pool.ops == 2 * 6 * 4 * 4 * 4 and pool.macs == 0
    assert gap.ops == 2 * 6 * 16 and gap.rowdep.kind == "none" and not gap.row_splittable
    assert flat.ops == 0 and flat.shape == (2, 6)
    assert fc.macs == 2 * 10 * 6 and fc.params == 70 and fc.channel_splittable and fc.rowdep.kind == "none"


def test_resize_layers():
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    sizes = numpy_helper.from_array(np.array([1, 4, 12, 12], np.int64), "sizes")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["u"], mode="nearest"),
             helper.make_node("Resize", ["u", "", "", "sizes"], ["y"], mode="linear")]
    g = import_onnx(make_model(nodes, [("x", [1, 4, 4, 4])], ["y"], [scales, sizes]))
    u, y = g.layers
    assert u.shape == (1, 4, 8, 8) and u.rowdep == RowDep("resize", factor_num=2, factor_den=1, linear=False)
    assert y.rowdep == RowDep("resize", factor_num=3, factor_den=2, linear=True)
    assert u.row_splittable and y.row_splittable and u.ops == 4 * 64 and u.params == 0


def test_concat_axes():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c1"], axis=1, name="cat_c"),
             helper.make_node("Concat", ["a", "b"], ["c2"], axis=-2, name="cat_h")]
    g = import_onnx(make_model(nodes, [("x", [1, 2, 4, 4])], ["c1", "c2"]))
    c1, c2 = layer_by_name(g, "cat_c"), layer_by_name(g, "cat_h")
    assert c1.shape == (1, 4, 4, 4) and c1.rowdep.kind == "identity" and c1.row_splittable and c1.ops == 64
    assert c2.shape == (1, 2, 8, 4) and c2.rowdep.kind == "none" and not c2.row_splittable
    assert c1.inputs == ("a", "b")


def test_broadcast_mul_reads_whole_inputs():
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["s"]), helper.make_node("Sigmoid", ["s"], ["g"]),
             helper.make_node("Mul", ["x", "g"], ["y"], name="scale")]
    g = import_onnx(make_model(nodes, [("x", [1, 4, 8, 8])], ["y"]))
    scale = layer_by_name(g, "scale")
    assert scale.rowdep.kind == "none" and not scale.row_splittable


def test_split_fan_out_is_one_layer_per_used_output():
    split = helper.make_node("Split", ["x"], ["s0", "s1"], axis=1, name="split")
    nodes = [split, helper.make_node("Relu", ["s0"], ["r0"]), helper.make_node("Relu", ["s1"], ["r1"])]
    g = import_onnx(make_model(nodes, [("x", [1, 4, 6, 6])], ["r0", "r1"], opset=13))
    assert [(l.output, l.inputs, l.shape, l.folded) for l in g.layers] == [
        ("r0", ("x",), (1, 2, 6, 6), ("Relu",)), ("r1", ("x",), (1, 2, 6, 6), ("Relu",))]
    assert all(l.rowdep.kind == "identity" for l in g.layers)
    # the node's work is its output elements, counted once over its layers
    assert [l.ops for l in g.layers] == [72, 72] and g.totals["ops"] == 4 * 36


# -- shapes, errors, warnings ---------------------------------------------------------------


def symbolic_model():
    nodes = [conv("x", "w", "c", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, [("x", ["N", 3, "H", "W"])], ["y"], [w("w", 4, 3, 3, 3)])


def test_symbolic_input_fixed_by_input_shape():
    g = import_onnx(symbolic_model(), input_shape=(2, 3, 20, 24))
    assert g.inputs == {"x": (2, 3, 20, 24)} and g.layers[0].shape == (2, 4, 20, 24)
    assert g.layers[0].macs == 2 * 4 * 20 * 24 * 27


def test_symbolic_input_not_fixed_is_an_error():
    with pytest.raises(PlannerError, match=r"'x'.*\(\?, 3, \?, \?\)"):
        import_onnx(symbolic_model(), name="symb")


def test_input_shape_rank_mismatch_names_the_input():
    with pytest.raises(PlannerError, match="input 'x' has rank 4"):
        import_onnx(symbolic_model(), input_shape=(3, 20, 24))


def test_input_shape_overrides_static_dims(tmp_path):
    m = make_model([conv("x", "w", "y", kernel_shape=[3, 3])], [("x", [1, 3, 8, 8])], ["y"], [w("w", 4, 3, 3, 3)])
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6]))
    g = import_onnx(m, input_shape=(1, 3, 10, 12))
    assert g.layers[0].shape == (1, 4, 8, 10)


def test_unknown_shape_is_an_error_naming_the_tensor():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"], name="rs")]
    m = make_model(nodes, [("x", [1, 4, 4, 4])], ["y"])
    m.graph.input.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    with pytest.raises(PlannerError, match=r"mymodel: .*'y'.*'rs'"):
        import_onnx(m, name="mymodel")


def test_constant_subgraphs_are_evaluated_for_shapes():
    """Float Resize scales made by Concat(Constant, Constant), and a Reshape target computed
    from Shape of a tensor whose dims were symbolic: shape inference alone leaves them unknown."""
    f32 = lambda name, v: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.float32), name))
    nodes = [f32("s_nc", [1.0, 1.0]), f32("s_hw", [2.0, 2.0]),
             helper.make_node("Concat", ["s_nc", "s_hw"], ["scales"], axis=0),
             helper.make_node("Resize", ["x", "", "scales"], ["u"], mode="nearest", name="up"),
             helper.make_node("Shape", ["u"], ["shp"]),
             helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["u", "target"], ["y"], name="flat")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    m = make_model(nodes, [("x", ["N", 4, "H", "W"])], ["y"], inits)
    g = import_onnx(m, input_shape=(2, 4, 5, 6))
    assert [(layer.name, layer.shape) for layer in g.layers] == [("up", (2, 4, 10, 12)), ("flat", (2, 480))]
    assert g.layers[0].rowdep == RowDep("resize", factor_num=2, factor_den=1)
    assert g.layers[1].inputs == ("u",) and g.layers[1].ops == 0


def test_a_long_chain_of_computed_reshape_targets_is_folded_to_the_end():
    """Swin's window partitions: each Reshape's target is computed (Shape, Gather, Div,
    Unsqueeze, Concat) from the previous Reshape's output, so each link needs its own round of
    folding and inference. Found by torchvision's Swin-T at opset 13 (4 rounds were too few)."""
    links, nodes = 12, []
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(1, np.int64), "div"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array([1], np.int64), "lead")]
    x = "x"
    for i in range(links):
        nodes += [helper.make_node("Relu", [x], [f"a{i}"], name=f"relu{i}"),
                  helper.make_node("Shape", [f"a{i}"], [f"s{i}"]),
                  helper.make_node("Gather", [f"s{i}", "one"], [f"g{i}"], axis=0),
                  helper.make_node("Div", [f"g{i}", "div"], [f"d{i}"]),
                  helper.make_node("Unsqueeze", [f"d{i}", "ax0"], [f"u{i}"]),
                  helper.make_node("Concat", ["lead", f"u{i}", "minus1"] if i % 2 else ["lead", "minus1", f"u{i}"],
                                   [f"t{i}"], axis=0),
                  helper.make_node("Reshape", [f"a{i}", f"t{i}"], [f"r{i}"], name=f"reshape{i}")]
        x = f"r{i}"
    m = make_model(nodes, [("x", [1, 6, 4])], [x], inits, opset=13)
    g = import_onnx(m)
    shapes = {layer.name: layer.shape for layer in g.layers}
    expect, shape = [], (1, 6, 4)
    for i in range(links):
        u = shape[1]
        shape = (1, u, 24 // u) if i % 2 else (1, 24 // u, u)
        expect.append(shape)
    assert [shapes[f"reshape{i}"] for i in range(links)] == expect


def test_external_data_is_never_read(tmp_path):
    nodes = [conv("x", "w", "c", "b", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    m = make_model(nodes, [("x", [1, 16, 32, 32])], ["y"], [w("w", 64, 16, 3, 3), w("b", 64)])
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.bin", size_threshold=0)
    (tmp_path / "ext.bin").unlink()  # the importer must not need it
    g = import_onnx(path)
    assert g.name == "ext" and g.layers[0].params == 64 * 16 * 9 + 64
    assert g.layers[0].shape == (1, 64, 32, 32)


def test_inline_weights_file_is_read_without_its_weight_data(tmp_path):
    from milp_planner.model.onnx.skim import SKIM_BYTES, skim

    big = w("w", 64, 32, 3, 3)  # raw_data, 73 KB
    ones = np.ones(16384, np.float32).tolist()
    listed = helper.make_tensor("b", TensorProto.FLOAT, [1, 64, 16, 16], ones)  # stored as float_data
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [conv("x", "w", "c", kernel_shape=[3, 3], pads=[1, 1, 1, 1]), helper.make_node("Add", ["c", "b"], ["a"]),
             helper.make_node("Flatten", ["a"], ["f"]), helper.make_node("MatMul", ["f", "wm"], ["mm"]),
             helper.make_node("Reshape", ["mm", "shape"], ["y"])]
    m = make_model(nodes, [("x", [1, 32, 16, 16])], ["y"], [big, listed, w("wm", 16384, 10), shape])
    path = tmp_path / "inline.onnx"
    onnx.save_model(m, str(path))
    skimmed = skim(path)
    loaded = onnx.load(str(path))
    assert [n.SerializeToString() for n in skimmed.graph.node] == [n.SerializeToString() for n in loaded.graph.node]
    assert skimmed.graph.input == loaded.graph.input and skimmed.opset_import == loaded.opset_import
    for s_t, l_t in zip(skimmed.graph.initializer, loaded.graph.initializer):
        assert (s_t.name, list(s_t.dims), s_t.data_type) == (l_t.name, list(l_t.dims), l_t.data_type)
        if l_t.name in ("w", "b", "wm"):
            assert len(l_t.SerializeToString()) > SKIM_BYTES
            assert s_t.data_location == TensorProto.EXTERNAL and not s_t.raw_data and not s_t.float_data
        else:
            assert s_t == l_t  # small tensors (shapes) keep their data
    g, ref = import_onnx(path), import_onnx(m)
    assert g.totals == ref.totals
    assert g.totals["params"] == 64 * 32 * 9 + 16384 + 16384 * 10  # the Add's constant is a (folded) bias
    assert [layer.shape for layer in g.layers] == [(1, 64, 16, 16), (1, 16384), (1, 10), (1, 10)]
    assert g.layers[0].folded == ("Add",)


def test_large_inline_weights_are_stubbed_for_inference():
    m = make_model([conv("x", "w", "y", kernel_shape=[3, 3])], [("x", [1, 32, 8, 8])], ["y"], [w("w", 64, 32, 3, 3)])
    g = import_onnx(m)
    assert g.layers[0].params == 64 * 32 * 9
    assert m.graph.initializer[0].HasField("raw_data")  # the caller's model is not modified


def test_unknown_op_warns_and_is_not_splittable():
    node = helper.make_node("FancyOp", ["c"], ["f"], name="fancy", domain="my.ops")
    nodes = [conv("x", "w", "c", kernel_shape=[1, 1]), node, helper.make_node("Relu", ["f"], ["y"])]
    vi = [helper.make_tensor_value_info("f", TensorProto.FLOAT, [1, 4, 8, 8])]
    m = make_model(nodes, [("x", [1, 3, 8, 8])], ["y"], [w("w", 4, 3, 1, 1)], value_info=vi)
    m.opset_import.append(helper.make_opsetid("my.ops", 1))
    with pytest.warns(ModelWarning, match="FancyOp.*fancy"):
        g = import_onnx(m)
    fancy = layer_by_name(g, "fancy")
    assert fancy.rowdep.kind == "none" and not fancy.row_splittable and not fancy.channel_splittable
    assert fancy.ops == 4 * 64 and fancy.folded == ("Relu",)
    assert any("FancyOp" in msg for msg in g.warnings)


def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is not a model\n" * 10)
    with pytest.raises(PlannerError, match=r"notes.onnx: not an ONNX model \("):
        import_onnx(bad)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(PlannerError, match="not an ONNX model"):
        import_onnx(empty)


def test_missing_file(tmp_path):
    with pytest.raises(PlannerError, match="nope.onnx: no such file"):
        import_onnx(tmp_path / "nope.onnx")


def test_layer_ids_names_and_order():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),  # no name: named after its output
             helper.make_node("Sigmoid", ["x"], ["b"], name="sig"),
             helper.make_node("Add", ["a", "b"], ["y"], name="")]
    g = import_onnx(make_model(nodes, [("x", [1, 2, 4, 4])], ["y"]))
    assert [(layer.id, layer.name) for layer in g.layers] == [(0, "a"), (1, "sig"), (2, "y")]
    assert g.consumers("a") == [2] and g.producer("x") is None


# -- CLI --------------------------------------------------------------------------------------


def test_cli_inspect_json(capsys):
    assert main(["inspect", "zoo:tiny_chain", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["params"] == sum(layer["params"] for layer in data["layers"])
    assert data["totals"]["macs"] == sum(layer["macs"] for layer in data["layers"]) > 0
    assert data["totals"]["weight_bytes"] == 4 * data["totals"]["params"]
    first = data["layers"][0]
    assert set(first) >= {"id", "name", "op", "shape", "macs", "ops", "params", "weight_bytes",
                          "row_splittable", "channel_splittable", "folded"}
    assert first["folded"] == ["Relu"] and first["shape"] == [1, 8, 32, 32]


def test_cli_inspect_table(capsys):
    assert main(["inspect", "zoo:tiny_residual"]) == 0
    out = capsys.readouterr().out
    assert "Conv+Relu" in out and "Add+Relu" in out and "total" in out


def test_cli_inspect_onnx_file_with_input_shape(tmp_path, capsys):
    path = tmp_path / "sym.onnx"
    onnx.save_model(symbolic_model(), str(path))
    assert main(["inspect", str(path), "--input-shape", "1,3,16,16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layers"][0]["shape"] == [1, 4, 16, 16]
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "input-shape" in err and "Traceback" not in err


def test_cli_missing_file_is_one_line(tmp_path, capsys):
    missing = tmp_path / "missing.onnx"
    assert main(["inspect", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("milp-planner: error: ") and captured.err.count("\n") == 1
    assert "missing.onnx" in captured.err and "Traceback" not in captured.err


def test_cli_not_onnx_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xfe garbage \x00\x01")
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not an ONNX model" in err and err.count("\n") == 1


def test_warnings_do_not_leak_between_imports():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import_onnx(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 2, 3, 3])], ["y"]))


# -- a real exporter ----------------------------------------------------------------------------


def test_torch_export_imports_with_torch_parameter_count(tmp_path):
    """PyTorch's TorchScript exporter: BN kept (training export) or folded (eval), Erf GELU,
    SiLU as x*Sigmoid(x), ReLU6 as Clip, interpolate as Resize with Concat-made scales,
    dynamic axes fixed by input_shape."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.dw, self.bn2 = nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16, bias=False), nn.BatchNorm2d(16)
            self.c2 = nn.Conv2d(16, 32, 1)
            self.up = nn.ConvTranspose2d(32, 16, 2, stride=2)
            self.c3 = nn.Conv2d(32, 8, 3, padding=1)
            self.fc, self.act, self.fc2 = nn.Linear(8, 10), nn.PReLU(), nn.Linear(10, 5)

        def forward(self, x):
            a = torch.relu(self.bn1(self.c1(x)))
            b = nn.functional.relu6(self.bn2(self.dw(a)))
            b = nn.functional.silu(self.c2(b))
            u = nn.functional.interpolate(self.up(b), scale_factor=2.0, mode="nearest")
            u = nn.functional.max_pool2d(u, 2)
            c = nn.functional.gelu(self.c3(torch.cat([u, a], 1)))
            return self.fc2(self.act(self.fc(nn.functional.adaptive_avg_pool2d(c, 1).flatten(1))))

    net = Net().eval()
    n_params = sum(p.numel() for p in net.parameters())
    x = torch.randn(1, 3, 32, 32)
    path = tmp_path / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(net, x, str(path), input_names=["x"], output_names=["y"], dynamo=False,
                              do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING,
                              dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
        except Exception as e:  # the legacy exporter may be gone in some torch version
            pytest.skip(f"torch.onnx.export(dynamo=False) failed: {e}")
    with pytest.raises(PlannerError, match="input 'x'"):
        import_onnx(path)
    g = import_onnx(path, input_shape=(1, 3, 32, 32))
    assert g.totals["params"] == n_params and not g.warnings
    ops = [(layer.op, layer.folded) for layer in g.layers]
    assert ops[:3] == [("Conv", ("BatchNormalization", "Relu")), ("Conv", ("BatchNormalization", "Clip")),
                       ("Conv", ("Swish",))]
    assert ("Conv", ("Gelu",)) in ops and ("Gemm", ("PRelu",)) in ops
    resize = [layer for layer in g.layers if layer.op == "Resize"]
    assert resize and resize[0].rowdep == RowDep("resize", factor_num=2, factor_den=1)
    assert all(layer.row_splittable for layer in g.layers if len(layer.shape) == 4 and layer.op != "GlobalAveragePool")
    assert g.layers[-1].shape == (1, 5)
    bigger = import_onnx(path, input_shape=(2, 3, 64, 48))
    assert bigger.layers[0].shape == (2, 16, 64, 48)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, x, str(path), input_names=["x"], output_names=["y"], dynamo=False)
    g = import_onnx(path)  # eval export: BN folded into the conv weights by the exporter
    assert g.totals["params"] == n_params - 2 * 2 * 16 + 16  # dw gains a bias, c1 keeps its own

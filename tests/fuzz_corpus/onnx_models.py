"""Small ONNX models, valid and broken, for the hostile corpus of issue #30.

``model(kind)`` returns a ``ModelProto``; ``write(kind)(path)`` saves it (a ``Case`` file
writer). ``ok`` is a valid Conv -> Relu -> Conv chain on a 1x3x8x8 input; every other kind
breaks one declaration of the file (``docs/model.md``: a model must agree with itself).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _w(name, shape, seed=0):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _model(nodes, inits, inputs, outputs, opset=17):
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _x(c=3, h=8, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info("x", dtype, [1, c, h, h])


def _y(name="y", dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, None)


def ok(c_in=3, c1=4, c2=4, group=1, names=("conv1", "relu1", "conv2")) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name=names[0], pads=[1, 1, 1, 1], group=group),
        helper.make_node("Relu", ["a"], ["r"], name=names[1]),
        helper.make_node("Conv", ["r", "w2"], ["y"], name=names[2], pads=[1, 1, 1, 1]),
    ]
    inits = [_w("w1", [c1, max(c_in // group, 0), 3, 3]), _w("b1", [c1], 1), _w("w2", [c2, c1, 3, 3], 2)]
    return _model(nodes, inits, [_x(c_in)], [_y()])


def model(kind: str) -> onnx.ModelProto:
    if kind == "ok":
        return ok()
    if kind == "channels_mismatch":  # the input says 5 channels, the weights read 3
        m = ok()
        m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 5
        return m
    if kind == "zero_channels":
        m = ok()
        m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 0
        m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.zeros((4, 0, 3, 3), np.float32), "w1"))
        return m
    if kind == "group_not_dividing":  # 3 input channels in groups of 2
        m = ok()
        for a in m.graph.node[0].attribute:
            if a.name == "group":
                a.i = 2
        m.graph.initializer[0].CopyFrom(_w("w1", [4, 1, 3, 3]))
        return m
    if kind == "group_out_not_dividing":  # 4 input channels in 2 groups, but 3 filters
        nodes = [helper.make_node("Conv", ["x", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1], group=2)]
        return _model(nodes, [_w("w1", [3, 2, 3, 3])], [_x(4)], [_y()])
    if kind == "produced_twice":
        m = ok()
        m.graph.node[1].output[0] = "a"  # Relu writes the Conv's output again
        m.graph.node[2].input[0] = "a"
        return m
    if kind == "output_unproduced":
        m = ok()
        m.graph.output.append(_y("ghost"))
        return m
    if kind == "input_unproduced":  # a node reads a tensor nothing produces
        m = ok()
        m.graph.node[2].input[0] = "nowhere"
        return m
    if kind == "duplicate_names":
        return ok(names=("conv", "relu", "conv"))
    if kind == "weight_no_data":  # a 2 GB weight declared, no data at all
        m = ok()
        w = m.graph.initializer[2]
        w.ClearField("raw_data")
        del w.dims[:]
        w.dims.extend([16384, 4, 96, 96])
        return m
    if kind == "weight_short_data":  # raw data of 10 floats for 144
        m = ok()
        w = m.graph.initializer[2]
        w.raw_data = w.raw_data[:40]
        return m
    if kind == "weight_short_typed":
        m = ok()
        w = m.graph.initializer[1]  # b1, 4 floats
        w.ClearField("raw_data")
        w.float_data.extend([1.0, 2.0])
        return m
    if kind == "external_escape":  # external data outside the model's folder
        m = ok()
        w = m.graph.initializer[2]
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "../../../../etc/passwd"), ("offset", "0"), ("length", "576")):
            e = w.external_data.add()
            e.key, e.value = k, v
        return m
    if kind == "external_missing":
        m = ok()
        w = m.graph.initializer[2]
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        e = w.external_data.add()
        e.key, e.value = "location", "weights.bin"
        return m
    if kind == "gemm_mismatch":  # Flatten(1x3x8x8) = 192 features, the weight has 100
        nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flat"),
                 helper.make_node("Gemm", ["f", "w"], ["y"], name="fc", transB=1)]
        return _model(nodes, [_w("w", [10, 100])], [_x()], [_y()])
    if kind == "bn_mismatch":
        nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
                 helper.make_node("BatchNormalization", ["a", "s", "bb", "mu", "var"], ["y"], name="bn")]
        inits = [_w("w1", [4, 3, 3, 3]), *(_w(n, [7], i) for i, n in enumerate(("s", "bb", "mu", "var")))]
        return _model(nodes, inits, [_x()], [_y()])
    if kind == "lstm_only":
        nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm", hidden_size=4)]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 3])
        return _model(nodes, [_w("W", [1, 16, 3]), _w("R", [1, 16, 4], 1)], [x], [_y()])
    if kind == "lstm_yh_only":  # the first output (Y) unnamed, Y_h used
        nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["", "y"], name="lstm", hidden_size=4)]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 3])
        return _model(nodes, [_w("W", [1, 16, 3]), _w("R", [1, 16, 4], 1)], [x], [_y()])
    if kind == "gru_only":
        nodes = [helper.make_node("GRU", ["x", "W", "R"], ["y"], name="gru", hidden_size=4)]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 3])
        return _model(nodes, [_w("W", [1, 12, 3]), _w("R", [1, 12, 4], 1)], [x], [_y()])
    if kind == "fp16":
        m = ok()
        m.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
        for t in m.graph.initializer:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
        m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
        return m
    if kind == "uint8_input":
        nodes = [helper.make_node("Cast", ["x"], ["xf"], name="cast", to=TensorProto.FLOAT),
                 helper.make_node("Conv", ["xf", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1])]
        return _model(nodes, [_w("w1", [4, 3, 3, 3])], [_x(dtype=TensorProto.UINT8)], [_y()])
    if kind == "control_names":  # terminal escape sequences in node names
        return ok(names=("\x1b[2J\x1b[31mconv", "relu\r\x1b]0;pwned\x07", "conv2\u202e"))
    if kind == "markup_names":
        return ok(names=("<script>alert(1)</script>", "[red]relu[/red]", "=HYPERLINK(\"http://x\")"))
    if kind == "many_names":  # names that clean to the same file name
        return ok(names=("a b", "a_b", "a/b"))
    raise KeyError(kind)


KINDS = ("ok", "channels_mismatch", "zero_channels", "group_not_dividing", "group_out_not_dividing",
         "produced_twice", "output_unproduced", "input_unproduced", "duplicate_names", "weight_no_data",
         "weight_short_data", "weight_short_typed", "external_escape", "external_missing", "gemm_mismatch",
         "bn_mismatch", "lstm_only", "lstm_yh_only", "gru_only", "fp16", "uint8_input", "control_names", "markup_names",
         "many_names")


def write(kind: str):
    """A ``Case`` file writer saving ``model(kind)``."""
    def make(path: Path) -> None:
        onnx.save(model(kind), str(path))
    return make

"""The importer on real models: the backend-test models shipped in the onnx package.

Every ``light_*.onnx`` model goes through ``inspect --json`` and its MACs and parameters are
compared with a count made here, independently of the importer: onnx shape inference on the
original, unfolded model, then MACs summed over Conv, ConvTranspose, Gemm and MatMul (output
elements x multiplications per output) and parameters by docs/model.md section 2's rules (the
constant weight tensors of the weight ops, 2 x C per BatchNormalization, PRelu slopes, and
the constant operand of more than one element of an Add, Sub, Mul or Div, as the importer
documents it). These models are older than IR version 4, keep their weights as
ConstantOfShape nodes and have Dropout masks: the case where folding used to lose shapes.
They are also imported with the IR version raised to 8, the case where convolutions used to
get 0 MACs.
"""

from __future__ import annotations

import json
import warnings
from math import prod
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from milp_planner.cli import main
from milp_planner.errors import PlannerError
from milp_planner.model.onnx import ModelWarning, import_onnx, shapes

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(LIGHT.glob("light_*.onnx"))
EXPECTED = {"light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2",
            "light_resnet50", "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512"}

WEIGHT_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
BIAS_OPS = ("Add", "Sub", "Mul", "Div")
CONST_OPS = ("Constant", "ConstantOfShape")


class Count:
    """MACs and parameters of a model, from onnx alone."""

    def __init__(self, model: onnx.ModelProto):
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        g = inferred.graph
        self.shapes: dict[str, tuple[int, ...]] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            dims = vi.type.tensor_type.shape.dim
            if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
                self.shapes[vi.name] = tuple(d.dim_value for d in dims)
        for t in g.initializer:
            self.shapes[t.name] = tuple(t.dims)
        # constants: initializers, Constant(OfShape) outputs, and whatever is computed from them only
        const = {t.name for t in g.initializer}
        for n in g.node:
            if n.op_type in CONST_OPS or all(i in const for i in n.input if i):
                const.update(n.output)
        self.macs = self.params = 0
        for n in g.node:
            if n.op_type in WEIGHT_OPS:
                self.macs += self.node_macs(n)
                self.params += sum(self.numel(i) for i in n.input if i in const)
            elif n.op_type == "BatchNormalization":
                self.params += 2 * self.shapes[n.input[0]][1]
            elif n.op_type == "PRelu":
                self.params += self.numel(n.input[1])
            elif n.op_type in BIAS_OPS:
                self.params += sum(c for i in n.input if i in const and (c := self.numel(i)) > 1)

    def numel(self, t: str) -> int:
        return int(prod(self.shapes[t]))

    def node_macs(self, n: onnx.NodeProto) -> int:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        x, w, y = (self.shapes[t] for t in (n.input[0], n.input[1], n.output[0]))
        if n.op_type == "Conv":  # each output: (C_in / group) x kernel
            return int(prod(y)) * w[1] * int(prod(w[2:]))
        if n.op_type == "ConvTranspose":  # each input element: (C_out / group) x kernel
            return int(prod(x)) * w[1] * int(prod(w[2:]))
        if n.op_type == "Gemm":
            return int(prod(y)) * (x[0] if attrs.get("transA", 0) else x[1])
        return int(prod(y)) * x[-1]  # MatMul


def inspect_json(path: Path, capsys) -> dict:
    assert main(["inspect", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_backend_model_is_there():
    assert {p.stem for p in MODELS} == EXPECTED


@pytest.mark.parametrize("fold", [False, True], ids=["", "folded"])
@pytest.mark.parametrize("ir_version", [None, 8], ids=["file-ir", "ir8"])
@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_backend_model_counts_match_an_independent_count(path, ir_version, fold, tmp_path, capsys, monkeypatch):
    """``fold``: the constant-folding round of shape inference runs whether or not shapes are
    missing (a Dropout mask without a shape used to trigger it), so it must keep every shape."""
    if fold:
        monkeypatch.setattr(shapes, "_unknown_outputs", lambda inferred: True)
    model = onnx.load(str(path))
    assert model.ir_version < 4  # initializers are graph inputs: the case folding must handle
    if ir_version is not None:
        model.ir_version = ir_version
        path = tmp_path / path.name
        onnx.save_model(model, str(path))
    expected = Count(model)
    data = inspect_json(path, capsys)
    assert data["warnings"] == []
    assert (data["totals"]["macs"], data["totals"]["params"]) == (expected.macs, expected.params)
    layers = data["layers"]
    assert all(layer["macs"] > 0 for layer in layers if layer["op"] in WEIGHT_OPS)
    assert data["totals"]["macs"] == sum(layer["macs"] for layer in layers)


def test_backend_figures_from_the_issue(capsys):
    """The numbers the issue reported wrong: SqueezeNet's MACs, AlexNet's biases."""
    squeezenet = inspect_json(LIGHT / "light_squeezenet.onnx", capsys)["totals"]
    assert squeezenet["macs"] == 349_151_936 and squeezenet["params"] == 1_235_496
    alexnet = inspect_json(LIGHT / "light_bvlc_alexnet.onnx", capsys)["totals"]
    assert alexnet["params"] == 60_965_224  # 10,568 of them biases
    vgg19 = inspect_json(LIGHT / "light_vgg19.onnx", capsys)["totals"]
    assert vgg19["params"] == 143_667_240  # torchvision's VGG-19


# -- counts that cannot be computed are never a silent 0 -----------------------------------------


def _conv_with_opaque_weight(kernel_shape: bool) -> onnx.ModelProto:
    """A Conv whose weight is computed by a custom op from a constant: its shape is unknown."""
    wq = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.int8), "wq")
    nodes = [helper.make_node("Dequant", ["wq"], ["w"], domain="my.ops"),
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv",
                              pads=[1, 1, 1, 1], **({"kernel_shape": [3, 3]} if kernel_shape else {}))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [wq])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)])
    m.ir_version = 8
    return m


def test_unknown_weight_shape_warns_naming_the_layer_and_macs_come_from_attributes():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = import_onnx(_conv_with_opaque_weight(kernel_shape=True))
    (layer,) = g.layers
    assert layer.macs == 8 * 8 * 8 * 3 * 9  # output elements x C_in x kernel, from the attributes
    assert layer.params == 0
    (msg,) = g.warnings
    assert "layer 'conv'" in msg and "'w'" in msg and "totals are incomplete" in msg
    assert [w.category for w in caught] == [ModelWarning]


def test_uncountable_macs_are_an_error_naming_the_layer(tmp_path, capsys):
    path = tmp_path / "opaque.onnx"
    onnx.save_model(_conv_with_opaque_weight(kernel_shape=False), str(path))
    with pytest.raises(PlannerError, match=r"opaque.onnx: layer 'conv' \(Conv\): cannot count its work"):
        import_onnx(path)
    assert main(["inspect", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "layer 'conv'" in err and "Traceback" not in err


# -- broken files: one line naming the file and the reason ------------------------------------


def _relu_model(opset: int = 17, outputs: bool = True, nodes: bool = True) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])] if nodes else [], "g", [x],
                          [y] if outputs else [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _cut_before_opset() -> bytes:
    """A model file that ends right after its graph: the opset_import that follows is lost."""
    m = _relu_model()
    data = m.SerializeToString()
    opset_field = helper.make_model(helper.make_graph([], "g", [], []),
                                    opset_imports=[helper.make_opsetid("", 17)]).opset_import[0]
    tail = b"\x42" + bytes([opset_field.ByteSize()]) + opset_field.SerializeToString()  # field 8
    assert data.endswith(tail)
    return data[: -len(tail)]


@pytest.mark.parametrize("case,reason", [
    ("truncated", "a truncated file or not an ONNX model"),
    ("cut_before_opset", "no opset for the default ONNX domain"),
    ("no_outputs", "the graph has no outputs"),
    ("opset_999", "opset 999 is newer than the newest this onnx"),
    ("no_nodes", "the graph has no nodes"),
])
def test_broken_files_are_one_line_errors(case, reason, tmp_path, capsys):
    path = tmp_path / f"{case}.onnx"
    if case == "truncated":
        data = (LIGHT / "light_squeezenet.onnx").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif case == "cut_before_opset":
        path.write_bytes(_cut_before_opset())
    else:
        model = {"no_outputs": lambda: _relu_model(outputs=False), "opset_999": lambda: _relu_model(opset=999),
                 "no_nodes": lambda: _relu_model(nodes=False)}[case]()
        path.write_bytes(model.SerializeToString())
    with pytest.raises(PlannerError, match=f"{case}.onnx: {reason}"):
        import_onnx(path)
    assert main(["inspect", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("milp-planner: error: ") and err.count("\n") == 1 and reason in err


def test_every_truncation_of_a_backend_model_is_an_error(tmp_path):
    """No prefix of a model file imports silently (sampled cut points, every field boundary
    of the top-level message included)."""
    data = (LIGHT / "light_bvlc_alexnet.onnx").read_bytes()
    path = tmp_path / "cut.onnx"
    for n in sorted(set(range(1, len(data), 97)) | _field_ends(data)):
        path.write_bytes(data[:n])
        with pytest.raises(PlannerError, match="cut.onnx: "):
            import_onnx(path)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value, pos, shift = value | (byte & 0x7F) << shift, pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def _field_ends(data: bytes) -> set[int]:
    """Offsets just after each top-level protobuf field of ``data`` (varint or length-delimited)."""
    ends, pos = set(), 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        value, pos = _varint(data, pos)
        if tag & 7 == 2:
            pos += value
        ends.add(pos)
    return ends - {len(data)}

"""Import an ONNX model as a ``LayerGraph`` (MODEL.md section 2).

``import_onnx(model, input_shape=None, name=None)`` reads an ``.onnx`` file (or takes a
``ModelProto``) and returns the layers after folding, with shapes, MACs, ops, parameter
counts and row dependencies. It never reads weight data: the file is loaded with
``load_external_data=False`` and parameters are counted from tensor shapes only; shape
inference runs on a copy of the graph whose large initializers are replaced by dims-only
stubs, so a model with gigabytes of weights is inspected in the memory of its graph.

Decisions where MODEL.md is silent (documented here, relied on by the tests):

* Constants. A tensor is constant when it is an initializer, the output of a ``Constant``,
  ``ConstantOfShape``, ``Shape`` or ``Size`` node (shapes are static once the input shape is
  fixed), or the output of a node whose inputs are all constant (weight preprocessing such
  as ``DequantizeLinear(W)`` or ``Transpose(W)``). Nodes producing constants are not layers.
* Parameters of a layer are the element counts of its constant weight operands: every
  constant floating-point operand of Conv, ConvTranspose, Gemm and MatMul; 2 x C for
  BatchNormalization (scale and shift, whether folded or alone); PRelu slopes; scale and bias
  of LayerNormalization / InstanceNormalization / GroupNormalization (trainable in
  torchvision as well); the constant floating-point operand of Add, Sub, Mul or Div when it
  has more than one element (a bias or per-channel scale, folded or not). Scalars (``+ 3``,
  ``/ sqrt(2)``, Clip bounds) and integer tensors are never parameters.
* Folding also takes ``QuantizeLinear`` / ``DequantizeLinear`` of an activation (elementwise
  with constant scale) and two multi-node activation patterns: the Erf GELU
  (``Div -> Erf -> Add -> Mul(x, .) [-> Mul 0.5]``, recorded as ``Gelu``) and
  ``Mul(x, Sigmoid(x))`` / ``Mul(x, HardSigmoid(x))`` (recorded as ``Swish`` / ``HardSwish``).
  When a pattern cannot be folded into its producer it becomes one layer of that op.
  A folded op must keep its input's shape (a broadcasting Add is not a bias).
* Row dependency beyond MODEL.md's list: ``Pad`` (constant mode, pads known) is a window of
  kernel 1 and ``pad_top`` = the H padding; ``DepthToSpace`` / ``SpaceToDepth`` are a
  nearest resize by the block size (exact); ``Split`` along channels is ``identity``.
  An elementwise layer whose activation inputs do not all have the output's H (a broadcast
  such as the Mul of a squeeze-and-excitation block) reads its inputs whole (``none``).
  A cubic or antialiased ``Resize`` and ``tf_crop_and_resize`` are ``none``; a nearest
  ``Resize`` with ``align_corners`` is treated as linear (one extra row each side).
  ConvTranspose with ``auto_pad`` SAME_* or an ``output_shape`` attribute: total padding
  ``s*(H_in-1) + output_padding + (k-1)*d + 1 - H_out``, ``pad_top`` = floor(total/2) for
  SAME_UPPER, ceil(total/2) otherwise (the ONNX operator text).
* ``ops`` of pure re-layouts is 0: Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Expand,
  DepthToSpace, SpaceToDepth. Data-moving selections (Concat, Split, Slice, Gather, Pad)
  count their output elements like any other op.
* Multi-output nodes (Split, TopK, ...): the layer's ``output`` is the first output; the
  consumers of the other outputs read that same tensor (a layer produces one tensor) and its
  shape is the first output's shape. Folding into such a node is not done when its other
  outputs are used.
* ``input_shape`` fixes the first graph input that is not an initializer. A graph output
  that is an ``Identity`` of a layer's output names that layer's output, so
  ``graph.outputs`` always names layer outputs (or a graph input).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from math import prod
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from milp_planner.errors import PlannerError
from milp_planner.model.graph import Layer, LayerGraph, RowDep

__all__ = ["import_onnx", "ModelWarning"]


class ModelWarning(UserWarning):
    """Something in the model the importer could only approximate (also in ``graph.warnings``)."""

# -- op categories ---------------------------------------------------------------------------

WEIGHT_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
WINDOW_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
ALIAS_OPS = frozenset({"Identity", "Dropout"})
STATIC_OPS = frozenset({"Constant", "ConstantOfShape", "Shape", "Size"})

# unary activations folded into their producer
FOLD_UNARY = frozenset({
    "Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
    "Elu", "Selu", "Softplus", "Softsign", "Gelu", "Celu", "ThresholdedRelu", "Mish",
    "QuantizeLinear", "DequantizeLinear",
    "Swish",  # synthetic: Mul(x, Sigmoid(x))
})
FOLD_BIAS = frozenset({"Add", "Sub", "Mul", "Div"})

# ops reading output row r from input row r (when every input has the output's H)
ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Mod", "Where",
    "And", "Or", "Xor", "Not", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual",
    "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
    "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
    "Atanh", "IsNaN", "IsInf", "Cast", "CastLike", "Shrink", "LRN", "BatchNormalization",
}) | FOLD_UNARY
RELAYOUT = frozenset({
    "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Expand", "DepthToSpace",
    "SpaceToDepth",
})
# known ops without a row mapping (read their inputs whole)
WHOLE = frozenset({
    "Gemm", "MatMul", "Softmax", "LogSoftmax", "Hardmax", "ReduceMean", "ReduceMax",
    "ReduceMin", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK", "Gather",
    "GatherElements", "GatherND", "Slice", "Tile", "InstanceNormalization",
    "LayerNormalization", "GroupNormalization", "MeanVarianceNormalization", "Einsum",
    "CumSum", "ScatterND", "ScatterElements", "Trilu", "Range", "NonZero", "OneHot",
    "Compress", "ReverseSequence", "Unique", "Concat", "Split", "Pad", "Resize", "Upsample",
    "NonMaxSuppression", "RoiAlign", "MaxRoiPool", "GridSample", "Col2Im", "CenterCropPad",
}) | GLOBAL_POOLS
KNOWN = WEIGHT_OPS | WINDOW_POOLS | ELEMENTWISE | RELAYOUT | WHOLE

NORM_PARAM_OPS = frozenset({"LayerNormalization", "InstanceNormalization", "GroupNormalization"})

FLOAT_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16,
    *(getattr(TensorProto, n) for n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                        "FLOAT8E5M2FNUZ") if hasattr(TensorProto, n)),
})

KEEP_DATA_ELEMENTS = 4096  # initializers up to this size keep their data for shape inference


# -- the working node ---------------------------------------------------------------------


@dataclass
class _Node:
    op: str
    domain: str
    name: str
    inputs: list[str]
    outputs: list[str]
    proto: onnx.NodeProto | None  # None for a synthetic pattern node
    act: list[str] = field(default_factory=list)  # resolved activation inputs (with repeats)
    first: str = ""  # resolved first input
    members: list["_Node"] = field(default_factory=list)  # nodes of a synthetic pattern

    @property
    def display_name(self) -> str:
        return self.name or (self.outputs[0] if self.outputs else self.op)

    def attr(self, key: str, default=None):
        if self.proto is None:
            return default
        for a in self.proto.attribute:
            if a.name == key:
                v = helper.get_attribute_value(a)
                return v.decode() if isinstance(v, bytes) else v
        return default


@dataclass
class _Proto:
    """A layer under construction: a root node plus the nodes folded into it."""

    root: _Node
    out: str
    folded: list[_Node] = field(default_factory=list)
    multi: bool = False  # other outputs of the root are used


# -- loading ----------------------------------------------------------------------------


def _load(model) -> tuple[onnx.ModelProto, str | None, str]:
    """The model, its label for messages (the file, if any), and a default name."""
    if isinstance(model, onnx.ModelProto):
        return model, None, model.graph.name or "model"
    path = Path(model)
    if not path.exists():
        raise PlannerError(f"{path}: no such file")
    if path.is_dir():
        raise PlannerError(f"{path}: not an ONNX model (a directory)")
    proto = None
    if path.suffix.lower() not in TEXT_SUFFIXES:
        try:
            proto = _skim(path)
        except Exception:  # not the binary format we expect: let onnx.load say why
            proto = None
        if proto is not None and not _looks_like_model(proto):
            proto = None
    if proto is None:
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except OSError as e:
            raise PlannerError(f"{path}: cannot read ({e.strerror or e})") from None
        except Exception as e:  # DecodeError, RuntimeError from the C++ loader, ...
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise PlannerError(f"{path}: not an ONNX model ({reason[:120]})") from None
    if not _looks_like_model(proto):
        raise PlannerError(f"{path}: not an ONNX model (no graph in the file)")
    return proto, str(path), path.stem


def _looks_like_model(proto: onnx.ModelProto) -> bool:
    return proto.HasField("graph") and bool(proto.graph.node or proto.opset_import)


# -- reading a binary .onnx without its weight data ------------------------------------------
#
# onnx.load parses the whole file, weights included: a 575 MB VGG19 costs 1.2 GB of memory.
# _skim walks the protobuf wire format over a memory map instead and copies everything except
# the data of large initializers, which become dims-only stubs (data_location EXTERNAL, like
# the zoo's). Pages holding weight data are never touched. Field numbers are onnx.proto's.

TEXT_SUFFIXES = (".onnxtxt", ".textproto", ".txtpb", ".json", ".pbtxt")
SKIM_BYTES = 16 * 1024  # initializers with more data than this are stubbed
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_DATA = frozenset({4, 5, 6, 7, 9, 10, 11})  # float/int32/string/int64/raw/double/uint64 data
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint")


def _enc_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, start of tag, start of value, end) of each field in buf[start:end]."""
    pos = start
    while pos < end:
        tag_start = pos
        tag, pos = _varint(buf, pos)
        field, wt = tag >> 3, tag & 7
        if wt == 0:
            _, stop = _varint(buf, pos)
        elif wt == 1:
            stop = pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            stop = pos + n
        elif wt == 5:
            stop = pos + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if field == 0 or stop > end:
            raise ValueError("malformed message")
        yield field, wt, tag_start, pos, stop
        pos = stop


def _len_field(field: int, payload: bytes) -> bytes:
    return _enc_varint(field << 3 | 2) + _enc_varint(len(payload)) + payload


def _skim_tensor(buf, start: int, end: int) -> bytes:
    fields = list(_fields(buf, start, end))
    if sum(stop - vs for f, _, _, vs, stop in fields if f in _TENSOR_DATA) <= SKIM_BYTES:
        return bytes(buf[start:end])
    keep = [bytes(buf[ts:stop]) for f, _, ts, _, stop in fields
            if f not in _TENSOR_DATA and f not in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION)]
    entry = _len_field(1, b"location") + _len_field(2, b"__milp_planner_no_data__")
    keep.append(_len_field(_TENSOR_EXTERNAL_DATA, entry))
    keep.append(_enc_varint(_TENSOR_DATA_LOCATION << 3) + _enc_varint(TensorProto.EXTERNAL))
    return b"".join(keep)


def _skim_graph(buf, start: int, end: int) -> bytes:
    out = []
    for f, wt, ts, vs, stop in _fields(buf, start, end):
        if f == _GRAPH_INITIALIZER and wt == 2:
            out.append(_len_field(f, _skim_tensor(buf, vs, stop)))
        else:
            out.append(bytes(buf[ts:stop]))
    return b"".join(out)


def _skim(path: Path) -> onnx.ModelProto | None:
    """The model in a binary .onnx file, large initializers as dims-only stubs."""
    import mmap

    with open(path, "rb") as fh:
        if fh.seek(0, 2) == 0:
            return None
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            out = []
            for f, wt, ts, vs, stop in _fields(mm, 0, len(mm)):
                if f == _MODEL_GRAPH and wt == 2:
                    out.append(_len_field(f, _skim_graph(mm, vs, stop)))
                else:
                    out.append(bytes(mm[ts:stop]))
    proto = onnx.ModelProto()
    proto.ParseFromString(b"".join(out))
    return proto


def _numel(dims) -> int:
    return int(prod(dims)) if dims is not None else 0


def _stub(t: TensorProto) -> TensorProto:
    """A copy of ``t`` with dims and type only: its data 'lives' in a file that does not exist."""
    s = TensorProto()
    s.name = t.name
    s.dims.extend(t.dims)
    s.data_type = t.data_type
    s.data_location = TensorProto.EXTERNAL
    e = s.external_data.add()
    e.key, e.value = "location", "__milp_planner_no_data__"
    return s


def _light_tensor(t: TensorProto) -> TensorProto:
    if t.data_location == TensorProto.EXTERNAL or _numel(t.dims) <= KEEP_DATA_ELEMENTS:
        return t
    return _stub(t)


def _skeleton(model: onnx.ModelProto, keep_value_info: bool) -> onnx.ModelProto:
    """A copy of the model for shape inference, without the data of large tensors."""
    sk = onnx.ModelProto()
    sk.ir_version = model.ir_version or 8
    sk.opset_import.extend(model.opset_import)
    sk.functions.extend(model.functions)
    src, g = model.graph, sk.graph
    g.name = src.name
    for node in src.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            big = [a for a in node.attribute if a.name == "value" and a.t.data_location != TensorProto.EXTERNAL
                   and _numel(a.t.dims) > KEEP_DATA_ELEMENTS]
            if big:
                n = g.node.add()
                n.CopyFrom(node)
                del n.attribute[:]
                n.attribute.append(helper.make_attribute("value", _stub(big[0].t)))
                continue
        g.node.append(node)
    g.initializer.extend(_light_tensor(t) for t in src.initializer)
    g.sparse_initializer.extend(src.sparse_initializer)
    g.input.extend(src.input)
    g.output.extend(src.output)
    if keep_value_info:
        g.value_info.extend(src.value_info)
    else:  # shapes recorded for another input size would contradict the new ones
        for o in g.output:
            if o.type.HasField("tensor_type"):
                o.type.tensor_type.ClearField("shape")
    return sk


def _fix_input(vi: onnx.ValueInfoProto, input_shape, label: str) -> None:
    tt = vi.type.tensor_type
    if tt.HasField("shape") and len(tt.shape.dim) != len(input_shape):
        have = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
        raise PlannerError(
            f"{label}: input '{vi.name}' has rank {len(have)} {have}, "
            f"the input shape {tuple(input_shape)} has rank {len(input_shape)}"
        )
    tt.ClearField("shape")
    for d in input_shape:
        tt.shape.dim.add().dim_value = int(d)


def _infer(sk: onnx.ModelProto, label: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(sk, strict_mode=False, data_prop=True)
    except Exception:
        pass
    try:
        return onnx.shape_inference.infer_shapes(sk, strict_mode=False)
    except Exception as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PlannerError(f"{label}: shape inference failed ({reason[:200]})") from None


def _vi_shape(vi: onnx.ValueInfoProto):
    """(shape with None for unknown dims, or None for unknown rank; elem type or None)."""
    if not vi.type.HasField("tensor_type"):
        return None, None
    tt = vi.type.tensor_type
    et = tt.elem_type or None
    if not tt.HasField("shape"):
        return None, et
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim), et


def _shape_map(inferred: onnx.ModelProto) -> dict[str, tuple | None]:
    g = inferred.graph
    out: dict[str, tuple | None] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        shape, _ = _vi_shape(vi)
        if shape is not None or vi.name not in out:
            out[vi.name] = shape
    for t in g.initializer:
        out[t.name] = tuple(t.dims)
    return out


def _unknown_outputs(inferred: onnx.ModelProto) -> bool:
    shapes = _shape_map(inferred)
    for node in inferred.graph.node:
        for o in node.output:
            if o and (shapes.get(o) is None or None in shapes[o]):
                return True
    return False


NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                              "Multinomial", "Bernoulli"})


def _fold_and_infer(sk: onnx.ModelProto, inferred: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """Shape inference again after evaluating small constant subgraphs.

    ONNX shape inference propagates values only through integer shape arithmetic; a Resize
    whose float ``scales`` come from ``Concat(Constant, Constant)`` (PyTorch's export of
    ``interpolate``), or a Reshape whose target is computed from ``Shape`` after a dynamic
    axis was fixed, stays unknown. Here every node whose inputs are small known values
    (data-holding initializers, Constant nodes, Shape/Size of tensors of known shape) is
    evaluated with onnx's reference evaluator and replaced by an initializer in the skeleton,
    and shapes are inferred again, a few rounds at most. Weights are never involved: their
    data is not in the skeleton.
    """
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    opset = next((o.version for o in sk.opset_import if o.domain in ("", "ai.onnx")), 17)
    for _ in range(4):
        shapes = _shape_map(inferred)
        values: dict[str, object] = {}
        for t in sk.graph.initializer:
            if t.data_location != TensorProto.EXTERNAL and _numel(t.dims) <= KEEP_DATA_ELEMENTS:
                try:
                    values[t.name] = numpy_helper.to_array(t)
                except Exception:
                    pass
        removed: set[int] = set()
        new_inits: list[TensorProto] = []
        for idx, node in enumerate(sk.graph.node):
            if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC:
                continue
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                continue
            ins = [i for i in node.input if i]
            try:
                if node.op_type in ("Shape", "Size"):
                    shape = shapes.get(node.input[0])
                    if shape is None or None in shape:
                        continue
                    if node.op_type == "Size":
                        outs = [np.array(prod(shape), dtype=np.int64)]
                    else:
                        attrs = {a.name: a.i for a in node.attribute}
                        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
                        outs = [np.array(shape[start:end], dtype=np.int64)]
                elif all(i in values for i in ins):
                    if node.op_type in ("ConstantOfShape", "Expand", "Tile", "Range") and not _small_result(
                            node, [values[i] for i in ins]):
                        continue
                    feeds = {i: values[i] for i in ins}
                    outs = ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)
                else:
                    continue
            except Exception:
                continue
            outs = [np.asarray(v) for v in outs]
            if any(v.size > KEEP_DATA_ELEMENTS or v.dtype == object for v in outs):
                continue
            for name, v in zip(node.output, outs):
                if name:
                    values[name] = v
                    new_inits.append(numpy_helper.from_array(v, name))
            removed.add(idx)
        if not removed:
            break
        nxt = onnx.ModelProto()
        nxt.CopyFrom(sk)
        del nxt.graph.node[:]
        nxt.graph.node.extend(n for i, n in enumerate(sk.graph.node) if i not in removed)
        nxt.graph.initializer.extend(new_inits)
        sk, inferred = nxt, _infer(nxt, label)
        if not _unknown_outputs(inferred):
            break
    return inferred


def _small_result(node: onnx.NodeProto, ins: list) -> bool:
    """Will a shape-making op produce at most KEEP_DATA_ELEMENTS elements?"""
    try:
        if node.op_type in ("ConstantOfShape", "Expand"):
            return int(prod(int(d) for d in np.asarray(ins[-1 if node.op_type == "ConstantOfShape" else 1]).ravel())) \
                <= KEEP_DATA_ELEMENTS
        if node.op_type == "Tile":
            return np.asarray(ins[0]).size * int(prod(int(d) for d in np.asarray(ins[1]).ravel())) <= KEEP_DATA_ELEMENTS
        if node.op_type == "Range":
            start, limit, delta = (float(np.asarray(v)) for v in ins[:3])
            return delta != 0 and (limit - start) / delta <= KEEP_DATA_ELEMENTS
    except Exception:
        return False
    return True


def _fmt_shape(shape) -> str:
    if shape is None:
        return "unknown rank"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _subgraph_inputs(node: onnx.NodeProto) -> list[str]:
    """Outer-scope tensors read inside the node's subgraphs (If, Loop, Scan bodies)."""
    found: list[str] = []

    def walk(g: onnx.GraphProto, outer_defined: set[str]) -> None:
        defined = set(outer_defined)
        defined.update(i.name for i in g.input)
        defined.update(t.name for t in g.initializer)
        for n in g.node:
            for i in n.input:
                if i and i not in defined:
                    found.append(i)
            for a in n.attribute:
                for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    walk(sg, defined)
            defined.update(n.output)

    for a in node.attribute:
        for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            walk(sg, set())
    return list(dict.fromkeys(found))


# -- the importer -------------------------------------------------------------------------


class _Importer:
    def __init__(self, model: onnx.ModelProto, label: str, gname: str, input_shape):
        self.model = model
        self.label = label
        self.gname = gname
        self.warnings: list[str] = []
        g = model.graph
        init_names = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
        self.act_graph_inputs = [vi.name for vi in g.input if vi.name not in init_names]

        sk = _skeleton(model, keep_value_info=input_shape is None)
        if input_shape is not None:
            if not self.act_graph_inputs:
                raise PlannerError(f"{label}: the model has no input to give the shape {tuple(input_shape)}")
            first = self.act_graph_inputs[0]
            _fix_input(next(vi for vi in sk.graph.input if vi.name == first), input_shape, label)
        inferred = _infer(sk, label)
        if _unknown_outputs(inferred):
            inferred = _fold_and_infer(sk, inferred, label)

        # shapes and element types of every tensor we know of
        self.shapes: dict[str, tuple | None] = {}
        self.dtypes: dict[str, int | None] = {}
        ig = inferred.graph
        for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
            shape, et = _vi_shape(vi)
            if shape is not None or vi.name not in self.shapes:
                self.shapes[vi.name] = shape
            if et is not None:
                self.dtypes[vi.name] = et
        for t in g.initializer:  # initializer dims are authoritative
            self.shapes[t.name] = tuple(t.dims)
            self.dtypes[t.name] = t.data_type
        for st in g.sparse_initializer:
            self.shapes[st.values.name] = tuple(st.dims)
            self.dtypes[st.values.name] = st.values.data_type
        self.initializers = {t.name: t for t in g.initializer}
        self.const: set[str] = set(init_names)
        self.const_nodes: dict[str, onnx.NodeProto] = {}  # Constant node outputs
        self.graph_outputs = [o.name for o in g.output]

    # -- small helpers --------------------------------------------------------------

    def shape(self, t: str):
        return self.shapes.get(t)

    def known(self, t: str) -> tuple[int, ...] | None:
        s = self.shapes.get(t)
        if s is None or any(d is None for d in s):
            return None
        return s

    def numel(self, t: str) -> int | None:
        s = self.known(t)
        return None if s is None else int(prod(s))

    def is_float(self, t: str) -> bool:
        et = self.dtypes.get(t)
        return et is None or et in FLOAT_TYPES

    def const_value(self, t: str):
        """The value of a small constant (initializer with inline data or Constant node)."""
        from onnx import numpy_helper

        tensor = None
        if t in self.initializers:
            tensor = self.initializers[t]
        elif t in self.const_nodes:
            node = self.const_nodes[t]
            for a in node.attribute:
                if a.name == "value":
                    tensor = a.t
                elif a.name in ("value_ints", "value_int", "value_floats", "value_float"):
                    return helper.get_attribute_value(a)
        if tensor is None or tensor.data_location == TensorProto.EXTERNAL:
            return None
        if _numel(tensor.dims) > 64:
            return None
        try:
            return numpy_helper.to_array(tensor).tolist()
        except Exception:
            return None

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)
        warnings.warn(msg, ModelWarning, stacklevel=2)

    # -- steps ------------------------------------------------------------------------

    def run(self) -> LayerGraph:
        g = self.model.graph
        nodes: list[_Node] = []
        alias: dict[str, str] = {}

        def resolve(t: str) -> str:
            while t in alias:
                t = alias[t]
            return t

        for p in g.node:
            n = _Node(p.op_type, p.domain or "", p.name, list(p.input), list(p.output), p)
            extra = _subgraph_inputs(p) if any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in p.attribute
            ) else []
            n.inputs += [i for i in extra if i not in n.inputs]
            std = n.domain in ("", "ai.onnx")
            real_inputs = [i for i in n.inputs if i]
            if (std and n.op in STATIC_OPS) or all(resolve(i) in self.const for i in real_inputs):
                # not a layer: a weight, a shape, or a computation on constants only
                self.const.update(o for o in n.outputs if o)
                if std and n.op == "Constant" and n.outputs:
                    self.const_nodes[n.outputs[0]] = p
                    if self.known(n.outputs[0]) is None:
                        self.shapes[n.outputs[0]] = _constant_node_shape(p)
                continue
            if std and n.op in ALIAS_OPS and real_inputs:
                for o in n.outputs[:1]:
                    alias[o] = n.inputs[0]
                continue
            nodes.append(n)

        for n in nodes:
            n.act = [resolve(i) for i in n.inputs if i and resolve(i) not in self.const]
            n.first = resolve(n.inputs[0]) if n.inputs and n.inputs[0] else ""
        gouts = {resolve(o) for o in self.graph_outputs}
        nodes = _match_patterns(nodes, gouts)

        consumers: dict[str, int] = {}
        for n in nodes:
            for t in dict.fromkeys(n.act):
                consumers[t] = consumers.get(t, 0) + 1

        # -- folding
        protos: list[_Proto] = []
        owner: dict[str, int] = {}
        for n in nodes:
            if self.foldable(n, consumers, gouts):
                x = n.act[0]
                pid = owner.get(x)
                if pid is not None:
                    P = protos[pid]
                    if (P.out == x and not P.multi and consumers.get(x, 0) == 1 and x not in gouts
                            and n.outputs and self.known(x) is not None
                            and self.known(x) == self.known(n.outputs[0])):
                        P.folded.append(n)
                        P.out = n.outputs[0]
                        owner[P.out] = pid
                        continue
            if not n.outputs or not n.outputs[0]:
                continue  # produces nothing usable
            P = _Proto(n, n.outputs[0])
            P.multi = any(o and (consumers.get(o) or o in gouts) for o in n.outputs[1:])
            for o in n.outputs:
                if o:
                    owner[o] = len(protos)
            protos.append(P)

        # -- graph outputs that are Identity/Dropout copies name the layer's output
        original_outs = set(self.graph_outputs)
        for o in self.graph_outputs:
            r = resolve(o)
            if r != o and r in owner:
                P = protos[owner[r]]
                if P.out == r and r not in original_outs:
                    P.out = o
                    owner[o] = owner[r]

        def final(t: str) -> str:
            pid = owner.get(t)
            return protos[pid].out if pid is not None else t

        # -- graph inputs: shapes must be known
        used: set[str] = set()
        for P in protos:
            used.update(P.root.act)
        outputs: list[str] = []
        for o in self.graph_outputs:
            t = final(resolve(o))
            if t not in owner and t not in self.act_graph_inputs:
                self.warn(f"{self.label}: graph output '{o}' is a constant, not computed by any layer; ignored")
                continue
            if t not in outputs:
                outputs.append(t)
        inputs: dict[str, tuple[int, ...]] = {}
        for name in self.act_graph_inputs:
            s = self.known(name)
            if s is None:
                if name in used or name in outputs:
                    raise PlannerError(
                        f"{self.label}: input '{name}' has shape {_fmt_shape(self.shape(name))}; "
                        f"fix its symbolic dims with an input shape (--input-shape or input_shape:)"
                    )
                continue
            inputs[name] = tuple(int(d) for d in s)

        layers = [self.make_layer(i, P, final) for i, P in enumerate(protos)]
        return LayerGraph(name=self.gname, layers=layers, inputs=inputs, outputs=outputs,
                          warnings=list(self.warnings))

    def foldable(self, n: _Node, consumers: dict[str, int], gouts: set[str]) -> bool:
        """Can ``n`` merge into the producer of its single activation input (its first input)?"""
        if n.domain not in ("", "ai.onnx") or len(n.act) != 1:
            return False
        if n.act[0] != n.first and n.op not in ("Add", "Mul"):  # c - x, c / x: not a bias
            return False
        if any(o and (consumers.get(o) or o in gouts) for o in n.outputs[1:]):
            return False  # e.g. the running statistics of a training-mode BatchNormalization, if used
        if n.op in FOLD_UNARY or n.op == "BatchNormalization":
            return True
        if n.op in FOLD_BIAS:
            return len([i for i in n.inputs if i]) == 2
        return False

    def make_layer(self, lid: int, P: _Proto, final) -> Layer:
        n = P.root
        out_shape = self.known(P.out)
        if out_shape is None:
            raise PlannerError(
                f"{self.label}: the output '{P.out}' of node '{n.display_name}' ({n.op}) has "
                f"shape {_fmt_shape(self.shape(P.out))} after shape inference; "
                f"give a fixed input shape or a model whose shapes can be inferred"
            )
        if any(d <= 0 for d in out_shape):
            raise PlannerError(
                f"{self.label}: the output '{P.out}' of node '{n.display_name}' ({n.op}) is empty "
                f"{_fmt_shape(out_shape)}; the input is too small for this model"
            )
        inputs = tuple(dict.fromkeys(final(t) for t in n.act))
        for t in n.act:
            if self.known(t) is None:
                raise PlannerError(
                    f"{self.label}: tensor '{t}' read by node '{n.display_name}' has shape "
                    f"{_fmt_shape(self.shape(t))} after shape inference"
                )
        op = n.op if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op}"
        out_elems = int(prod(out_shape))
        macs, ops = self.work(n, out_shape, out_elems)
        params = self.node_params(n) + sum(self.node_params(f) for f in P.folded)
        rowdep = self.rowdep(n, out_shape)
        act_shapes = [self.known(t) for t in n.act]
        row_split = (len(out_shape) == 4 and bool(act_shapes)
                     and all(len(s) == 4 for s in act_shapes) and rowdep.kind != "none")
        weight_const = len(n.inputs) > 1 and bool(n.inputs[1]) and n.inputs[1] in self.const
        chan_split = n.op in WEIGHT_OPS and n.domain in ("", "ai.onnx") and weight_const
        groups = int(n.attr("group", 1)) if n.op in ("Conv", "ConvTranspose") else 1
        if op not in KNOWN and n.proto is not None:
            self.warn(
                f"{self.label}: unknown op {op} (node '{n.display_name}'): treated as one "
                f"layer that is not splittable, with ops = output elements"
            )
        attrs = {}
        if n.proto is not None:
            for a in n.proto.attribute:
                if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
                              onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
                    v = helper.get_attribute_value(a)
                    if isinstance(v, bytes):
                        v = v.decode()
                    attrs[a.name] = list(v) if isinstance(v, (list, tuple)) else v
        if n.op in WEIGHT_OPS and len(n.inputs) > 1 and self.known(n.inputs[1]) is not None:
            attrs["weight_shape"] = list(self.known(n.inputs[1]))
        if n.members:
            attrs["pattern_nodes"] = [m.display_name for m in n.members]
        if P.folded:
            attrs["folded_nodes"] = [f.display_name for f in P.folded]
        if len([o for o in n.outputs if o]) > 1:
            attrs["outputs"] = [o for o in n.outputs if o]
        return Layer(
            id=lid, name=n.display_name, op=op, inputs=inputs, output=P.out,
            shape=tuple(int(d) for d in out_shape), macs=macs, ops=ops, params=params,
            rowdep=rowdep, row_splittable=row_split, channel_splittable=chan_split,
            groups=groups, folded=tuple(f.op for f in P.folded), attrs=attrs,
        )

    # -- per-op semantics ------------------------------------------------------------

    def node_params(self, n: _Node) -> int:
        if n.domain not in ("", "ai.onnx") or n.proto is None:
            return 0
        ins = n.inputs
        const = [i for i in ins if i and i in self.const]

        def count(t: str) -> int:
            c = self.numel(t)
            if c is None:
                self.warn(f"{self.label}: the shape of weight '{t}' of node '{n.display_name}' "
                          f"is unknown; its parameters are not counted")
                return 0
            return c

        if n.op in WEIGHT_OPS:
            return sum(count(t) for t in const if self.is_float(t))
        if n.op == "BatchNormalization":
            return sum(count(t) for t in ins[1:3] if t and t in self.const)
        if n.op == "PRelu":
            return sum(count(t) for t in ins[1:2] if t and t in self.const)
        if n.op in NORM_PARAM_OPS:
            return sum(count(t) for t in ins[1:3] if t and t in self.const and self.is_float(t))
        if n.op in FOLD_BIAS:
            return sum(c for t in const if self.is_float(t) and (c := self.numel(t) or 0) > 1)
        return 0

    def work(self, n: _Node, out_shape, out_elems: int) -> tuple[int, int]:
        """(MACs, ops) of the root node; folded nodes add nothing."""
        op = n.op if n.domain in ("", "ai.onnx") else None
        ins = n.inputs
        if op in ("Conv", "ConvTranspose"):
            w = self.known(ins[1]) if len(ins) > 1 else None
            if w is None or len(w) < 2:
                return 0, out_elems
            per = int(w[1]) * int(prod(w[2:]))  # (Cin/groups)*k for Conv, (Cout/groups)*k for ConvT
            if op == "Conv":
                return out_elems * per, 0
            x = self.known(ins[0])
            return int(prod(x)) * per, 0
        if op == "Gemm":
            a = self.known(ins[0])
            k = a[0] if int(n.attr("transA", 0)) else a[1]
            return out_elems * int(k), 0
        if op == "MatMul":
            a = self.known(ins[0])
            return out_elems * int(a[-1]), 0
        if op in WINDOW_POOLS:
            return 0, out_elems * int(prod(n.attr("kernel_shape", [1])))
        if op in GLOBAL_POOLS:
            x = self.known(ins[0])
            return 0, out_elems * int(prod(x[2:]))
        if op in RELAYOUT:
            return 0, 0
        return 0, out_elems

    def rowdep(self, n: _Node, out_shape) -> RowDep:
        op = n.op if n.domain in ("", "ai.onnx") else None
        act_shapes = [self.known(t) for t in n.act]
        if len(out_shape) != 4 or not act_shapes or any(len(s) != 4 for s in act_shapes):
            return RowDep()
        h_out = out_shape[2]
        x = act_shapes[0]
        if op in ("Conv", "ConvTranspose") and len(n.act) > 1:
            return RowDep()  # weights computed at run time: not a window over one input
        if op in ("Conv", "MaxPool", "AveragePool", "LpPool"):
            if op == "Conv":
                w = self.known(n.inputs[1])
                k = int(n.attr("kernel_shape", w[2:] if w is not None else [1])[0])
            else:
                k = int(n.attr("kernel_shape", [1])[0])
            s = int((n.attr("strides") or [1])[0])
            d = int((n.attr("dilations") or [1])[0])
            return RowDep("window", kernel=k, stride=s, pad_top=_pad_top(n, x[2], k, s, d), dilation=d)
        if op == "ConvTranspose":
            w = self.known(n.inputs[1])
            k = int(n.attr("kernel_shape", w[2:] if w is not None else [1])[0])
            s = int((n.attr("strides") or [1])[0])
            d = int((n.attr("dilations") or [1])[0])
            auto = n.attr("auto_pad", "NOTSET")
            if auto in ("SAME_UPPER", "SAME_LOWER") or n.attr("output_shape") is not None:
                opad = int((n.attr("output_padding") or [0])[0])
                total = s * (x[2] - 1) + opad + (k - 1) * d + 1 - h_out
                p = total // 2 if auto == "SAME_UPPER" else total - total // 2
            elif auto == "VALID":
                p = 0
            else:
                p = int((n.attr("pads") or [0])[0])
            return RowDep("transpose", kernel=k, stride=s, pad_top=p, dilation=d)
        if op in ELEMENTWISE or (n.proto is None and n.op in FOLD_UNARY):
            if all(sh[2] == h_out for sh in act_shapes):
                return RowDep("identity")
            return RowDep()
        if op in ("Concat", "Split"):
            axis = int(n.attr("axis", 0 if op == "Split" else 1))
            if axis < 0:
                axis += 4
            if axis == 1 and all(sh[2] == h_out for sh in act_shapes):
                return RowDep("identity")
            return RowDep()
        if op == "Pad":
            mode = n.attr("mode", "constant")
            pads = n.attr("pads") if n.proto is not None and n.attr("pads") is not None else (
                self.const_value(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] else None)
            has_axes = len(n.inputs) > 3 and bool(n.inputs[3])
            if mode == "constant" and pads is not None and len(pads) == 8 and not has_axes:
                return RowDep("window", kernel=1, stride=1, pad_top=int(pads[2]), dilation=1)
            return RowDep()
        if op in ("Resize", "Upsample"):
            if x[0] != out_shape[0] or x[1] != out_shape[1]:
                return RowDep()
            mode = n.attr("mode", "nearest")
            ctm = n.attr("coordinate_transformation_mode", "half_pixel" if op == "Resize" else "asymmetric")
            if mode == "cubic" or ctm == "tf_crop_and_resize" or (int(n.attr("antialias", 0)) and h_out < x[2]):
                return RowDep()
            linear = mode in ("linear", "bilinear") or ctm not in (
                "half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn")
            f = Fraction(h_out, x[2])
            return RowDep("resize", factor_num=f.numerator, factor_den=f.denominator, linear=linear)
        if op in ("DepthToSpace", "SpaceToDepth"):
            f = Fraction(h_out, x[2])
            return RowDep("resize", factor_num=f.numerator, factor_den=f.denominator, linear=False)
        return RowDep()


def _pad_top(n: _Node, h_in: int, k: int, s: int, d: int) -> int:
    """Rows of padding above the input (H axis) of a conv or pooling node."""
    auto = n.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = -(-h_in // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - h_in, 0)
        return total // 2 if auto == "SAME_UPPER" else total - total // 2
    if auto == "VALID":
        return 0
    pads = n.attr("pads")
    return int(pads[0]) if pads else 0


def _constant_node_shape(p: onnx.NodeProto):
    for a in p.attribute:
        if a.name == "value":
            return tuple(a.t.dims)
        if a.name in ("value_float", "value_int", "value_string"):
            return ()
        if a.name in ("value_floats", "value_ints", "value_strings"):
            return (len(helper.get_attribute_value(a)),)
    return None


# -- multi-node activation patterns ---------------------------------------------------------


def _match_patterns(nodes: list[_Node], gouts: set[str]) -> list[_Node]:
    """Replace Erf-GELU and x*Sigmoid(x) subgraphs by one synthetic node each."""
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o:
                producer[o] = i
        for t in dict.fromkeys(n.act):
            readers.setdefault(t, []).append(i)

    def std(n: _Node, op: str) -> bool:
        return n.op == op and n.domain in ("", "ai.onnx")

    def one_const_operand(n: _Node) -> bool:
        return len(n.inputs) == 2 and len(n.act) == 1

    def sole_reader(t: str) -> int | None:
        r = readers.get(t, [])
        return r[0] if len(r) == 1 and t not in gouts else None

    replaced: dict[int, _Node] = {}
    removed: set[int] = set()
    for i, n in enumerate(nodes):
        if i in removed:
            continue
        if std(n, "Erf") and len(n.act) == 1:
            di = producer.get(n.act[0])
            if di is None or di in removed or sole_reader(n.act[0]) != i:
                continue
            d = nodes[di]
            if not ((std(d, "Div") or std(d, "Mul")) and one_const_operand(d)):
                continue
            x = d.act[0]
            ai = sole_reader(n.outputs[0])
            if ai is None or not std(nodes[ai], "Add") or not one_const_operand(nodes[ai]):
                continue
            mi = sole_reader(nodes[ai].outputs[0])
            if mi is None or not std(nodes[mi], "Mul") or len(nodes[mi].act) != 2:
                continue
            m = nodes[mi]
            other = m.act[0] if m.act[1] == nodes[ai].outputs[0] else m.act[1]
            members = [di, i, ai]
            if other == x:  # x * (1 + erf) [* 0.5]
                if sorted(readers.get(x, [])) != sorted({di, mi}):
                    continue
                members.append(mi)
                end = mi
                hi = sole_reader(m.outputs[0])
                if hi is not None and std(nodes[hi], "Mul") and one_const_operand(nodes[hi]):
                    members.append(hi)
                    end = hi
            else:  # (x * 0.5) * (1 + erf)
                h0 = producer.get(other)
                if (h0 is None or not std(nodes[h0], "Mul") or not one_const_operand(nodes[h0])
                        or nodes[h0].act[0] != x or sole_reader(other) != mi
                        or sorted(readers.get(x, [])) != sorted({di, h0})):
                    continue
                members += [h0, mi]
                end = mi
            members = sorted(set(members))
            if any(j in removed for j in members):
                continue
            syn = _Node("Gelu", "", d.name, [x], [nodes[end].outputs[0]], None, act=[x], first=x,
                        members=[nodes[j] for j in members])
            removed.update(members)
            replaced[end] = syn
        elif (std(n, "Sigmoid") or std(n, "HardSigmoid")) and len(n.act) == 1:
            x = n.act[0]
            mi = sole_reader(n.outputs[0])
            if mi is None or mi in removed or not std(nodes[mi], "Mul"):
                continue
            m = nodes[mi]
            if sorted(m.act) != sorted([x, n.outputs[0]]) or sorted(readers.get(x, [])) != sorted({i, mi}):
                continue
            op = "Swish" if n.op == "Sigmoid" else "HardSwish"
            syn = _Node(op, "", n.name, [x], [m.outputs[0]], None, act=[x], first=x, members=[n, m])
            removed.update({i, mi})
            replaced[mi] = syn
    if not replaced:
        return nodes
    out = []
    for i, n in enumerate(nodes):
        if i in replaced:
            out.append(replaced[i])
        elif i not in removed:
            out.append(n)
    return out


# -- entry point ----------------------------------------------------------------------------


def import_onnx(
    model: str | Path | onnx.ModelProto,
    input_shape: tuple[int, ...] | None = None,
    name: str | None = None,
    *,
    source: str | None = None,
) -> LayerGraph:
    """Read an ONNX model (a path or a ``ModelProto``) as a ``LayerGraph``.

    ``input_shape`` overwrites the dims of the first non-initializer graph input before shape
    inference (fixing symbolic dims such as ``N`` or ``H``). ``name`` names the graph (default:
    the ONNX graph name, else the file's stem); ``source`` is how error messages name the model
    (default: the file path, else the name). Weight data are never read.
    """
    proto, label, default_name = _load(model)
    gname = name or default_name
    label = source or label or gname
    if input_shape is not None:
        input_shape = tuple(int(d) for d in input_shape)
        if not input_shape or any(d <= 0 for d in input_shape):
            raise PlannerError(f"{label}: input shape {input_shape} must be positive integers")
    return _Importer(proto, label, gname, input_shape).run()

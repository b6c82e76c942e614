"""Shapes of every tensor, from onnx shape inference on a copy of the model without weight data.

``infer_model`` runs ``onnx.shape_inference`` on a skeleton of the model: the same graph,
whose large initializers and Constant values are dims-only stubs, so inference never sees
weight data. When a tensor that something reads still has no full shape, small constant
subgraphs are evaluated with onnx's reference evaluator and inference runs again
(``fold_and_infer``). Works for every IR version: before IR 4 every initializer is also a
graph input, and shape inference reads an initializer's shape from that input, so the values
folded here are declared as inputs too.
"""

from __future__ import annotations

from math import prod

import numpy as np
import onnx
from onnx import TensorProto, helper

from milp_planner.errors import PlannerError
from milp_planner.model.onnx.ops import CONTRIB_QUANT

KEEP_DATA_ELEMENTS = 4096  # initializers up to this size keep their data for shape inference
#: rounds of folding and inference at most: a chain of reshapes whose targets are computed from
#: the previous one's shape (Swin's window partitions) needs one round per link (Swin-T: 40-64
#: rounds of about 2,400 nodes, 1.7 s); and at most FOLD_NODE_ROUNDS nodes inferred over all
#: rounds (about 20 s), so that a hostile chain of 200,000 nodes stops early
MAX_FOLD_ROUNDS = 512
FOLD_NODE_ROUNDS = 2_000_000
QUANT_PROXY_OPSET = 13  # the opset of the float ops standing for quantised ones in shape inference

def numel(dims) -> int:
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
    if t.data_location == TensorProto.EXTERNAL or numel(t.dims) <= KEEP_DATA_ELEMENTS:
        return t
    return _stub(t)


def skeleton(model: onnx.ModelProto, keep_value_info: bool) -> onnx.ModelProto:
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
                   and numel(a.t.dims) > KEEP_DATA_ELEMENTS]
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


def fix_input(vi: onnx.ValueInfoProto, input_shape, label: str) -> None:
    tt = vi.type.tensor_type
    if tt.HasField("shape") and len(tt.shape.dim) != len(input_shape):
        have = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
        raise PlannerError(
            f"{label}: input '{vi.name}' has rank {len(have)} {have}, "
            f"the input shape {tuple(input_shape)} has rank {len(input_shape)}"
        )
    tt.ClearField("shape")
    tt.shape.SetInParent()  # a scalar (rank 0) has a shape with no dims, not an unknown one
    for d in input_shape:
        tt.shape.dim.add().dim_value = int(d)


def infer(sk: onnx.ModelProto, label: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(sk, strict_mode=False, data_prop=True)
    except Exception:
        pass
    try:
        return onnx.shape_inference.infer_shapes(sk, strict_mode=False)
    except Exception as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PlannerError(f"{label}: shape inference failed ({reason[:200]})") from None


def vi_shape(vi: onnx.ValueInfoProto):
    """(shape with None for unknown dims, or None for unknown rank; elem type or None)."""
    if not vi.type.HasField("tensor_type"):
        return None, None
    tt = vi.type.tensor_type
    et = tt.elem_type or None
    if not tt.HasField("shape"):
        return None, et
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim), et


def shape_map(inferred: onnx.ModelProto) -> dict[str, tuple | None]:
    g = inferred.graph
    out: dict[str, tuple | None] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        shape, _ = vi_shape(vi)
        if shape is not None or vi.name not in out:
            out[vi.name] = shape
    for t in g.initializer:
        out[t.name] = tuple(t.dims)
    return out


def _unknown_outputs(inferred: onnx.ModelProto) -> bool:
    """Does a tensor that something reads (or a graph output) still lack a full shape?

    Outputs nobody reads (the mask of a Dropout, say) do not count: they are not layers'
    outputs, and chasing their shapes would only run the folding rounds for nothing.
    """
    shapes = shape_map(inferred)
    g = inferred.graph
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for node in g.node:
        for o in node.output:
            if o and o in read and (shapes.get(o) is None or None in shapes[o]):
                return True
    return False


def eval_node(node: onnx.NodeProto, feeds: dict, opset_imports) -> list:
    """Run one node on numpy values with the kernels of the model's opsets.

    onnx's ``ReferenceEvaluator(node, opsets=...)`` runs the newest kernel of a bare node (an
    opset-12 ``Unsqueeze`` with an ``axes`` attribute fails, an opset-9 ``Slice`` is read with
    the opset-10 inputs), so the node is wrapped in a model that imports the right opsets.
    """
    from onnx.reference import ReferenceEvaluator

    ins = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(np.asarray(feeds[i]).dtype), None)
           for i in dict.fromkeys(i for i in node.input if i)]
    outs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    graph = helper.make_graph([node], "eval", ins, outs)
    model = helper.make_model(graph, opset_imports=list(opset_imports))
    model.ir_version = max(model.ir_version, 8) if model.ir_version else 8
    inputs = {i: feeds[i] for i in dict.fromkeys(i for i in node.input if i)}
    try:
        got = ReferenceEvaluator(model).run(None, inputs)
    except Exception:
        # onnx's reference kernels do not cover every version (DequantizeLinear before 19, say):
        # onnxruntime, when it is installed, runs the node at the model's own opset
        try:
            import onnxruntime as ort
        except ImportError:
            raise
        so = ort.SessionOptions()
        so.log_severity_level = 4
        got = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, inputs)
    names = [o for o in node.output if o]
    values = dict(zip(names, got))
    return [values.get(o) for o in node.output]


NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                              "Multinomial", "Bernoulli"})


def fold_and_infer(sk: onnx.ModelProto, inferred: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """Shape inference again after evaluating small constant subgraphs.

    ONNX shape inference propagates values only through integer shape arithmetic; a Resize
    whose float ``scales`` come from ``Concat(Constant, Constant)`` (PyTorch's export of
    ``interpolate``), or a Reshape whose target is computed from ``Shape`` after a dynamic
    axis was fixed, stays unknown. Here every node whose inputs are small known values
    (data-holding initializers, Constant nodes, Shape/Size of tensors of known shape) is
    evaluated with onnx's reference evaluator and replaced by an initializer in the skeleton,
    and shapes are inferred again, until every shape is known or a round folds nothing
    (``_fold_rounds`` at most). Weights are never involved: their data is not in the skeleton.
    """
    from onnx import numpy_helper

    for _ in range(_fold_rounds(sk)):  # each round folds at least one node, or the loop ends
        shapes = shape_map(inferred)
        values: dict[str, object] = {}
        for t in sk.graph.initializer:
            if t.data_location != TensorProto.EXTERNAL and numel(t.dims) <= KEEP_DATA_ELEMENTS:
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
                    outs = [v for v in eval_node(node, feeds, sk.opset_import) if v is not None]
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
        if nxt.ir_version < 4:
            # Before IR 4 every initializer is also a graph input, and shape inference reads
            # an initializer's shape only from that input: without it the folded values
            # (and every shape computed from them) would be unknown.
            nxt.graph.input.extend(
                helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in new_inits)
        sk, inferred = nxt, infer(nxt, label)
        if not _unknown_outputs(inferred):
            break
    return inferred


def _fold_rounds(sk: onnx.ModelProto) -> int:
    """Rounds of inference a model of this size may take (``MAX_FOLD_ROUNDS``, ``FOLD_NODE_ROUNDS``)."""
    return max(4, min(MAX_FOLD_ROUNDS, FOLD_NODE_ROUNDS // max(1, len(sk.graph.node))))


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


def fmt_shape(shape) -> str:
    if shape is None:
        return "unknown rank"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"



def infer_model(model: onnx.ModelProto, label: str, input_shapes, act_inputs: list[str]) -> onnx.ModelProto:
    """The skeleton of ``model`` with every shape onnx can infer (in ``value_info``).

    ``input_shapes`` (a mapping input name -> shape, ``None`` naming the first of
    ``act_inputs``, or None) overwrites the dims of those graph inputs. Value infos recorded in
    the file are kept only when the input shapes are the file's own.
    """
    sk = skeleton(model, keep_value_info=not input_shapes)
    for key, shape in (input_shapes or {}).items():
        if key is None:
            if not act_inputs:
                raise PlannerError(f"{label}: the model has no input to give the shape {tuple(shape)}")
            key = act_inputs[0]
        vi = next((vi for vi in sk.graph.input if vi.name == key), None)
        if vi is None or key not in act_inputs:
            known = ", ".join(act_inputs) or "none"
            raise PlannerError(f"{label}: --input-shape names '{key}', which is not an input of the model "
                               f"(its inputs: {known})")
        fix_input(vi, shape, label)
    inferred = infer(sk, label)
    sk, inferred = contrib_shapes(sk, inferred, label)
    if _unknown_outputs(inferred):
        inferred = fold_and_infer(sk, inferred, label)
    return inferred


def contrib_shapes(sk: onnx.ModelProto, inferred: onnx.ModelProto, label: str):
    """Output shapes of onnxruntime's contrib ops (com.microsoft), which onnx's inference does
    not know: the quantised LSTM (``DynamicQuantizeLSTM``) has those of an LSTM (Y: seq x
    directions x batch x hidden, Y_h and Y_c: directions x batch x hidden); the quantised
    operator-format ops of ``ops.CONTRIB_QUANT`` those of their float op, inferred on a one-node
    model. Inference runs again from them, round after round while a round adds a shape (a
    QLinearConv between two QLinearAdds needs onnx's inference in between)."""
    for _ in range(_fold_rounds(sk)):
        extra = _contrib_round(sk, inferred)
        if not extra:
            break
        nxt = onnx.ModelProto()
        nxt.CopyFrom(sk)
        nxt.graph.value_info.extend(extra)
        sk, inferred = nxt, infer(nxt, label)
    return sk, inferred


def _contrib_round(sk: onnx.ModelProto, inferred: onnx.ModelProto) -> list:
    """Value infos for the outputs of contrib ops whose shapes are now computable."""
    shapes = shape_map(inferred)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(inferred.graph.input)
             + list(inferred.graph.value_info) if vi.type.HasField("tensor_type")}
    types.update((t.name, t.data_type) for t in sk.graph.initializer)
    extra = []
    for node in sk.graph.node:
        if node.domain != "com.microsoft":
            continue
        if node.op_type == "DynamicQuantizeLSTM":
            found, et = _lstm_shapes(node, shapes), types.get(node.input[0], TensorProto.FLOAT)
        elif node.op_type in CONTRIB_QUANT:
            found, et = [_quant_shape(node, shapes)], _quant_type(node, types)
        else:
            continue
        for name, shape in zip(node.output, found):
            if name and shape is not None and (shapes.get(name) is None or None in shapes[name]):
                extra.append(helper.make_tensor_value_info(name, et, list(shape)))
                shapes[name], types[name] = tuple(shape), et
    return extra


def _lstm_shapes(node: onnx.NodeProto, shapes: dict) -> list:
    x = shapes.get(node.input[0])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if x is None or len(x) != 3 or None in x or "hidden_size" not in attrs:
        return []
    dirs = 2 if attrs.get("direction", b"forward") == b"bidirectional" else 1
    h = int(attrs["hidden_size"])
    return [(x[0], dirs, x[1], h), (dirs, x[1], h), (dirs, x[1], h)]


def quant_inputs(node: onnx.NodeProto) -> list[str]:
    """The inputs of a ``CONTRIB_QUANT`` node that its float op reads, in that op's order."""
    inputs = list(node.input)
    idx = CONTRIB_QUANT[node.op_type][1]
    idx = idx if idx is not None else range(2, len(inputs), 3)
    return [inputs[i] for i in idx if i < len(inputs) and inputs[i]]


def _quant_shape(node: onnx.NodeProto, shapes: dict):
    """The output shape of a quantised operator-format op: its float op's on a one-node model."""
    base = CONTRIB_QUANT[node.op_type][0]
    ins = quant_inputs(node)
    known = [shapes.get(i) for i in ins]
    if not ins or any(k is None or None in k for k in known) or \
            any(a.name == "channels_last" and a.i for a in node.attribute):
        return None
    allowed = onnx.defs.get_schema(base, QUANT_PROXY_OPSET).attributes
    proxy = helper.make_node(base, ins, [node.output[0]])
    proxy.attribute.extend(a for a in node.attribute if a.name in allowed)
    inputs = [helper.make_tensor_value_info(i, TensorProto.FLOAT, list(k)) for i, k in dict(zip(ins, known)).items()]
    graph = helper.make_graph([proxy], "proxy", inputs, [onnx.ValueInfoProto(name=node.output[0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", QUANT_PROXY_OPSET)])
    model.ir_version = 8
    try:
        out = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:
        return None
    shape, _ = vi_shape(out.graph.output[0])
    return shape if shape is not None and None not in shape else None


def _quant_type(node: onnx.NodeProto, types: dict) -> int:
    """The element type of a quantised op's output: its activations' (QGemm without an output
    scale gives floats)."""
    if node.op_type == "QGemm" and (len(node.input) < 8 or not node.input[7]):
        return TensorProto.FLOAT
    first = quant_inputs(node)
    return types.get(first[0], TensorProto.UINT8) if first else TensorProto.UINT8

"""MACs, ops and parameters of a layer (docs/model.md section 2).

A count that cannot be computed is never a silent 0: MACs of a weight op whose sizes are
unknown are an error naming the layer, and a weight whose shape is unknown is a warning
naming the layer and saying the parameter totals are incomplete.
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

from milp_planner.errors import PlannerError
from milp_planner.model.onnx.nodes import Node
from milp_planner.model.onnx.ops import (CONTRIB_DOMAINS, CONTRIB_QUANT, CONTRIB_RECURRENT, FOLD_BIAS, GLOBAL_POOLS,
                                         NORM_PARAM_OPS, QUANT_WEIGHT_OPS, RECURRENT, RELAYOUT, WEIGHT_OPS,
                                         WINDOW_POOLS)
from milp_planner.model.onnx.shapes import fmt_shape, quant_inputs
from milp_planner.model.onnx.tensors import Tensors


class Work(NamedTuple):
    """MACs (Conv, ConvTranspose, Gemm, MatMul multiplications) and ops (everything else)."""

    macs: int
    ops: int


def recurrent_kind(n: Node) -> str | None:
    """``LSTM``, ``GRU`` or ``RNN`` for a recurrent node (onnxruntime's quantised LSTM too), else None."""
    if n.standard and n.op in RECURRENT:
        return n.op
    if n.domain == "com.microsoft":
        return CONTRIB_RECURRENT.get(n.op)
    return None


def node_params(t: Tensors, n: Node, layer: str) -> int:
    """Parameters held by node ``n`` (a root or folded node of layer ``layer``)."""
    kind = recurrent_kind(n) if n.proto is not None else None
    quant = n.domain in CONTRIB_DOMAINS and n.op in CONTRIB_QUANT  # its weights are integers
    n = as_float_op(n)
    if not n.standard or n.proto is None:
        if kind is None:
            return 0
    ins = n.inputs
    const = [i for i in ins if i and i in t.const]

    def count(w: str) -> int:
        c = t.numel(w)
        if c is None:
            t.warn(f"{t.label}: layer '{layer}': the shape of weight '{w}' of node '{n.display_name}' "
                   f"({n.op}) is {fmt_shape(t.shape(w))}; its parameters are not counted and the "
                   f"parameter totals are incomplete")
            return 0
        return c

    if kind is not None:  # W, R, B (and the peepholes P of an LSTM), integer weights included
        return sum(count(ins[k]) for k in RECURRENT[kind][2] if k < len(ins) and ins[k] and ins[k] in t.const)
    if n.op in WEIGHT_OPS:
        return sum(count(w) for w in const if quant or t.is_float(w))
    if n.op in QUANT_WEIGHT_OPS:  # the integer weight (and QLinearConv's int32 bias)
        k = QUANT_WEIGHT_OPS[n.op][1]
        idx = [k, 8] if n.op == "QLinearConv" else [k]
        return sum(count(ins[i]) for i in idx if i < len(ins) and ins[i] and ins[i] in t.const)
    if n.op == "BatchNormalization":
        return sum(count(w) for w in ins[1:3] if w and w in t.const)
    if n.op == "PRelu":
        return sum(count(w) for w in ins[1:2] if w and w in t.const)
    if n.op in NORM_PARAM_OPS:
        return sum(count(w) for w in ins[1:3] if w and w in t.const and t.is_float(w))
    if n.op in FOLD_BIAS:  # a bias or per-channel scale: more than one element
        return sum(c for w in const if (quant or t.is_float(w)) and (c := count(w)) > 1)
    return 0


def as_float_op(n: Node) -> Node:
    """A quantised operator-format node (``ops.CONTRIB_QUANT``) as its float op, reading the
    same activations and weights; any other node as it is."""
    if n.domain in CONTRIB_DOMAINS and n.op in CONTRIB_QUANT and n.proto is not None:
        return Node(CONTRIB_QUANT[n.op][0], "", n.name, quant_inputs(n.proto), n.outputs, n.proto, n.act, n.first)
    return n


def work(t: Tensors, n: Node, out_shape: tuple[int, ...]) -> Work:
    """MACs and ops of the root node ``n`` of a layer; folded nodes add nothing."""
    n = as_float_op(n)
    op = n.op if n.standard else None
    ins = n.inputs
    out_elems = int(prod(out_shape))
    kind = recurrent_kind(n) if n.proto is not None else None
    if kind is not None:
        return _recurrent_work(t, n, kind)
    if op in WEIGHT_OPS:
        return Work(_weight_op_macs(t, n, out_shape, out_elems), 0)
    if op in QUANT_WEIGHT_OPS:
        base, k = QUANT_WEIGHT_OPS[op]
        as_float = Node(base, n.domain, n.name, [ins[0], ins[k] if k < len(ins) else ""], n.outputs, n.proto)
        return Work(_weight_op_macs(t, as_float, out_shape, out_elems), 0)
    if op in WINDOW_POOLS:
        return Work(0, out_elems * int(prod(n.attr("kernel_shape", [1]))))
    if op in GLOBAL_POOLS:
        x = t.known(ins[0])
        if x is None:
            _unknown(t, n, ins[0])
        return Work(0, out_elems * int(prod(x[2:])))
    if op in RELAYOUT:
        return Work(0, 0)
    return Work(0, out_elems)


def _recurrent_work(t: Tensors, n: Node, kind: str) -> Work:
    """LSTM / GRU / RNN: per step, batch row and direction, gates x hidden x (input + hidden) MACs
    (the products with W and R) and a fixed number of elementwise ops per hidden unit."""
    x = t.known(n.inputs[0])
    if x is None or len(x) != 3:
        _unknown(t, n, n.inputs[0])
    hidden = n.attr("hidden_size")
    if hidden is None:
        raise PlannerError(f"{t.label}: layer '{n.display_name}' ({n.op}): no hidden_size attribute")
    layout = int(n.attr("layout", 0))
    seq, batch, size = (x[1], x[0], x[2]) if layout else (x[0], x[1], x[2])
    dirs = 2 if n.attr("direction", "forward") == "bidirectional" else 1
    gates, elementwise, _ = RECURRENT[kind]
    steps = int(seq) * int(batch) * dirs
    return Work(steps * gates * int(hidden) * (int(size) + int(hidden)), steps * elementwise * int(hidden))


def _weight_op_macs(t: Tensors, n: Node, out_shape, out_elems: int) -> int:
    """Multiplications of a Conv, ConvTranspose, Gemm or MatMul.

    From the weight's shape when known, else from the activation shapes and attributes.
    """
    ins = n.inputs
    x = t.known(ins[0]) if ins and ins[0] else None
    w = t.known(ins[1]) if len(ins) > 1 and ins[1] else None
    if n.op in ("Conv", "ConvTranspose"):
        group = int(n.attr("group", 1))
        if w is not None and len(w) >= 2:
            per = int(w[1]) * int(prod(w[2:]))  # (Cin/group)*k for Conv, (Cout/group)*k for ConvT
        elif n.attr("kernel_shape") is not None and (x is not None or n.op == "ConvTranspose"):
            channels = x[1] if n.op == "Conv" else out_shape[1]
            per = int(channels) // group * int(prod(n.attr("kernel_shape")))
        else:
            _unknown(t, n, ins[1] if len(ins) > 1 else ins[0])
        if n.op == "Conv":
            return out_elems * per
        if x is None:
            _unknown(t, n, ins[0])
        return int(prod(x)) * per
    if n.op == "Gemm":
        if x is not None:
            k = x[0] if int(n.attr("transA", 0)) else x[1]
        elif w is not None:
            k = w[1] if int(n.attr("transB", 0)) else w[0]
        else:
            _unknown(t, n, ins[0])
        return out_elems * int(k)
    # MatMul
    if x is not None:
        k = x[-1]
    elif w is not None:
        k = w[-2] if len(w) >= 2 else w[0]
    else:
        _unknown(t, n, ins[0])
    return out_elems * int(k)


def _unknown(t: Tensors, n: Node, tensor: str):
    raise PlannerError(
        f"{t.label}: layer '{n.display_name}' ({n.op}): cannot count its work, the shape of "
        f"'{tensor}' is {fmt_shape(t.shape(tensor))} after shape inference"
    )

"""A model must agree with its own declarations before anything is counted (issue #30).

``check_structure(proto, label, base_dir)`` runs on the file as read (weights left out), before
shape inference:

* node names are unique (a name identifies a layer in plans, profiles and deployments), except
  among ``Constant`` nodes, which never become layers;
* every tensor is produced once: by a graph input, an initializer or one node output;
* every tensor a node reads is produced before it (the nodes are in topological order, as the
  ONNX IR requires), and every graph output is produced;
* a node whose first output is unnamed has no other output in use (a layer is its node's first
  output: an LSTM or GRU exported for ``Y_h`` alone was "no layers" without the op's name);
* at most ``MAX_NODES`` nodes, and the import's estimated memory (``NODE_BYTES`` a node, four
  times the graph's bytes without weights, ``IMPORT_BASE_BYTES``) within the memory budget
  (``milp_planner.limits``: 4 GB, lowered to ``ulimit -v`` and the cgroup);
* every initializer holds the data its type and dims declare (inline data of the right length);
  dims are >= 0.

``external_data_bytes(proto, label, base_dir)``: the tensors kept in external files have their
data inside the model's folder (no absolute path, no ``..``, no link out), in a regular file
long enough for them; returns the total (the bytes a load with weights reads).

``check_shapes(proto, shape_of, label)`` runs once shapes are inferred (``shape_of(name)``: a
tuple with ``None`` for unknown dims, or ``None``):

* a graph input has no dimension of 0;
* Conv: weights (M, C/group, k...) with ``group`` >= 1 dividing M and the input channels C > 0,
  and C = weight channels x group; ConvTranspose: weights (C, M/group, k...) with C the input
  channels; Gemm and MatMul with constant weights: the inner dimensions agree;
  BatchNormalization: scale, bias, mean and variance of the input's channel count.

Every problem is one ``PlannerError`` naming the file, the node or tensor, and the reason.
"""

from __future__ import annotations

import os
from math import prod
from pathlib import Path
from typing import Callable

import onnx
from onnx import TensorProto, helper

from milp_planner.errors import PlannerError
from milp_planner.io import printable

MAX_NODES = 200_000
NODE_BYTES = 4_000  # memory of an import per node (measured: 3.3 kB at 150,000 nodes)
IMPORT_BASE_BYTES = 200 * 10**6
NO_DATA = "__milp_planner_no_data__"  # a dims-only stub (skim, zoo models without weights)

# bytes per element of the fixed-size types
_ITEMSIZE = {
    TensorProto.FLOAT: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1, TensorProto.UINT16: 2, TensorProto.INT16: 2,
    TensorProto.INT32: 4, TensorProto.INT64: 8, TensorProto.BOOL: 1, TensorProto.FLOAT16: 2, TensorProto.DOUBLE: 8,
    TensorProto.UINT32: 4, TensorProto.UINT64: 8, TensorProto.BFLOAT16: 2, TensorProto.COMPLEX64: 8,
    TensorProto.COMPLEX128: 16,
}
for _n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ"):
    if hasattr(TensorProto, _n):
        _ITEMSIZE[getattr(TensorProto, _n)] = 1

# the typed field holding a type's elements, and how many elements one field entry holds
_TYPED = {
    TensorProto.FLOAT: ("float_data", 1), TensorProto.COMPLEX64: ("float_data", 0.5),
    TensorProto.DOUBLE: ("double_data", 1), TensorProto.COMPLEX128: ("double_data", 0.5),
    TensorProto.INT64: ("int64_data", 1), TensorProto.UINT32: ("uint64_data", 1), TensorProto.UINT64: ("uint64_data", 1),
    TensorProto.INT32: ("int32_data", 1), TensorProto.INT16: ("int32_data", 1), TensorProto.INT8: ("int32_data", 1),
    TensorProto.UINT16: ("int32_data", 1), TensorProto.UINT8: ("int32_data", 1), TensorProto.BOOL: ("int32_data", 1),
    TensorProto.FLOAT16: ("int32_data", 1), TensorProto.BFLOAT16: ("int32_data", 1),
}


#: nodes that never become a layer (folded into the constants they produce), so their names
#: identify nothing: exporters such as OpenVINO's give many of them one name ('F0::anon')
NAMELESS_OPS = frozenset({"Constant"})


def _q(name: str) -> str:
    text = printable(name)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _node_label(n: onnx.NodeProto, i: int) -> str:
    return f"node {_q(n.name)}" if n.name else f"node {i} ({n.op_type})"


def _fmt(dims) -> str:
    return "x".join(str(d) for d in dims) or "a scalar"


def check_structure(proto: onnx.ModelProto, label: str, base_dir: Path | None = None) -> None:
    """``PlannerError`` for a graph that contradicts itself (see the module docstring)."""
    g = proto.graph
    if len(g.node) > MAX_NODES:
        raise PlannerError(f"{label}: {len(g.node):,} nodes, more than the {MAX_NODES:,} an import handles "
                           "(its memory budget)")
    from milp_planner.limits import check_need

    check_need(IMPORT_BASE_BYTES + NODE_BYTES * len(g.node) + 4 * proto.ByteSize(),
               f"{label}: an import of {len(g.node):,} nodes")
    names: dict[str, int] = {}
    for i, n in enumerate(g.node):
        if n.name and n.op_type not in NAMELESS_OPS:
            j = names.setdefault(n.name, i)
            if j != i:
                raise PlannerError(f"{label}: node name {_q(n.name)} is used by nodes {j} and {i} "
                                   f"({g.node[j].op_type}, {n.op_type}); node names must be unique")
    produced: dict[str, str] = {}

    def produce(t: str, who: str) -> None:
        if not t:
            return
        prev = produced.get(t)
        if prev is not None:
            raise PlannerError(f"{label}: tensor {_q(t)} is produced twice ({prev} and {who})")
        produced[t] = who

    inits = set()
    for t in g.initializer:
        produce(t.name, f"initializer {_q(t.name)}")
        inits.add(t.name)
    for st in g.sparse_initializer:
        produce(st.values.name, f"sparse initializer {_q(st.values.name)}")
        inits.add(st.values.name)
    for vi in g.input:
        if vi.name in inits:
            continue  # an initializer listed as an input too (IR < 4 models): one tensor
        produce(vi.name, f"graph input {_q(vi.name)}")
    for i, n in enumerate(g.node):
        who = _node_label(n, i)
        for t in n.input:
            if t and t not in produced:
                raise PlannerError(f"{label}: {who} reads tensor {_q(t)}, which no node, input or initializer "
                                   "produces before it")
        for t in n.output:
            produce(t, who)
    for o in g.output:
        if o.name not in produced:
            raise PlannerError(f"{label}: graph output {_q(o.name)} is produced by no node, input or initializer")
    used = {t for n in g.node for t in n.input if t} | {o.name for o in g.output}
    for i, n in enumerate(g.node):
        if n.output and not n.output[0] and any(t in used for t in n.output[1:]):
            # a layer is a node's first output (docs/model.md section 2): LSTM/GRU exported for Y_h only
            raise PlannerError(f"{label}: {_node_label(n, i)} ({n.op_type}) leaves its first output unnamed and "
                               "another is used; a layer is its node's first output: name it (LSTM and GRU: Y)")
    for t in g.initializer:
        check_tensor_data(t, label, base_dir)
    for i, n in enumerate(g.node):
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    check_tensor_data(a.t, label, base_dir, f"the value of {_node_label(n, i)}")


def _external(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def check_tensor_data(t: TensorProto, label: str, base_dir: Path | None, what: str | None = None) -> None:
    """``PlannerError`` unless tensor ``t`` holds the data its type and dims declare."""
    what = what or f"initializer {_q(t.name)}"
    if any(d < 0 for d in t.dims):
        raise PlannerError(f"{label}: {what} has a negative dimension ({_fmt(t.dims)})")
    size = _ITEMSIZE.get(t.data_type)
    if size is None:
        return  # strings and unknown types: no fixed size to check
    n = prod(t.dims) if t.dims else 1
    need = n * size
    if t.data_location == TensorProto.EXTERNAL:
        ext = _external(t)
        loc = ext.get("location", "")
        if loc == NO_DATA:
            have = int(ext["length"]) if ext.get("length", "").isdigit() else None
            if have is not None and have < need:
                raise PlannerError(f"{label}: {what} declares {_fmt(t.dims)} {_type(t)} ({need:,} bytes) "
                                   f"but holds {have:,} bytes of data")
            return
        if base_dir is not None:  # a file's external data (checked by ``check_external_data``)
            _check_external(t, ext, need, label, base_dir, what)
        return
    if t.HasField("raw_data") or not any(getattr(t, f) for f, _ in set(_TYPED.values())):
        have = len(t.raw_data)
        if have < need:
            raise PlannerError(f"{label}: {what} declares {_fmt(t.dims)} {_type(t)} ({need:,} bytes) "
                               f"but holds {have:,} bytes of data")
        return
    field, per = _TYPED.get(t.data_type, (None, 1))
    if field is None:
        return
    count = len(getattr(t, field))
    if t.data_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16) or size == 1:
        expected = n  # one element per int32 entry (the ONNX packing of these types)
    else:
        expected = int(n / per) if per != 1 else n
    if count < expected:
        raise PlannerError(f"{label}: {what} declares {_fmt(t.dims)} {_type(t)} ({n:,} elements) "
                           f"but holds {count:,}")


def _type(t: TensorProto) -> str:
    try:
        return helper.tensor_dtype_to_np_dtype(t.data_type).name
    except Exception:  # noqa: BLE001 - a type numpy does not name
        return TensorProto.DataType.Name(t.data_type).lower() if t.data_type in TensorProto.DataType.values() \
            else f"type {t.data_type}"


def _check_external(t: TensorProto, ext: dict, need: int, label: str, base_dir: Path | None, what: str) -> None:
    from milp_planner.io import inside

    loc = ext.get("location", "")
    try:
        path = inside(Path(base_dir), loc, f"{what}: external data")
    except PlannerError as e:
        raise PlannerError(f"{label}: {e}") from None
    try:
        st = os.stat(path)
    except OSError:
        raise PlannerError(f"{label}: {what}: external data file {_q(loc)} not found next to the model") from None
    import stat as _stat

    if not _stat.S_ISREG(st.st_mode):
        raise PlannerError(f"{label}: {what}: external data {_q(loc)} is not a regular file")
    try:
        offset = int(ext.get("offset", "0") or 0)
        length = int(ext["length"]) if ext.get("length") else st.st_size - offset
    except ValueError:
        raise PlannerError(f"{label}: {what}: external data offset or length is not an integer") from None
    if offset < 0 or length < 0 or offset + length > st.st_size:
        raise PlannerError(f"{label}: {what}: external data {_q(loc)} holds {st.st_size:,} bytes, "
                           f"the tensor asks for bytes {offset:,} to {offset + length:,}")
    if length < need:
        raise PlannerError(f"{label}: {what} declares {_fmt(t.dims)} {_type(t)} ({need:,} bytes) "
                           f"but its external data holds {length:,}")


def external_data_bytes(proto: onnx.ModelProto, label: str, base_dir: Path, *, present: bool = True) -> int:
    """Bytes of external data the model's tensors read, each checked: a relative path inside
    ``base_dir`` (the model's folder) and, with ``present`` (a load with weights), a regular
    file long enough for the tensor. Without ``present`` (an import, which never reads weight
    data) only the paths are checked and 0 is returned."""
    from milp_planner.io import inside

    total = 0
    seen = set()
    tensors = list(proto.graph.initializer)
    for n in proto.graph.node:
        tensors += [a.t for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    for t in tensors:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        ext = _external(t)
        loc = ext.get("location", "")
        if loc == NO_DATA:
            continue
        if not present:
            try:
                inside(Path(base_dir), loc, f"initializer {_q(t.name)}: external data")
            except PlannerError as e:
                raise PlannerError(f"{label}: {e}") from None
            continue
        check_tensor_data(t, label, base_dir)
        key = (loc, ext.get("offset", "0"))
        if key in seen:
            continue
        seen.add(key)
        offset = int(ext.get("offset", "0") or 0)
        total += int(ext["length"]) if ext.get("length") else os.stat(Path(base_dir) / loc).st_size - offset
    return total


# -- after shape inference ---------------------------------------------------------------------


def _attr(n: onnx.NodeProto, name: str, default=None):
    for a in n.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def check_shapes(proto: onnx.ModelProto, shape_of: Callable[[str], tuple | None], label: str) -> None:
    """``PlannerError`` for a weight or input that contradicts the shapes (see the module docstring)."""
    g = proto.graph
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        s = shape_of(vi.name)
        if s is not None and any(d == 0 for d in s):
            raise PlannerError(f"{label}: graph input {_q(vi.name)} has a dimension of 0 ({_fmt(s)}): an empty tensor")
    for i, n in enumerate(g.node):
        if n.domain not in ("", "ai.onnx"):
            continue
        who = _node_label(n, i)
        ins = [shape_of(t) if t else None for t in n.input]
        if n.op_type in ("Conv", "ConvTranspose") and len(ins) >= 2:
            _conv(n, who, ins[0], ins[1], label)
        elif n.op_type == "Gemm" and len(ins) >= 2 and n.input[1] in inits:
            a, b = ins[0], ins[1]
            if a is not None and b is not None and len(a) == 2 and len(b) == 2:
                k_a = a[0] if _attr(n, "transA", 0) else a[1]
                k_b = b[1] if _attr(n, "transB", 0) else b[0]
                if k_a is not None and k_b is not None and k_a != k_b:
                    raise PlannerError(f"{label}: {who} (Gemm) multiplies {_fmt(a)} by weights {_fmt(b)}"
                                       f"{' (transposed)' if _attr(n, 'transB', 0) else ''}: inner dimensions "
                                       f"{k_a} and {k_b} differ")
        elif n.op_type == "MatMul" and len(ins) >= 2 and n.input[1] in inits:
            a, b = ins[0], ins[1]
            if a is not None and b is not None and len(a) >= 1 and len(b) >= 2:
                if a[-1] is not None and b[-2] is not None and a[-1] != b[-2]:
                    raise PlannerError(f"{label}: {who} (MatMul) multiplies {_fmt(a)} by weights {_fmt(b)}: "
                                       f"inner dimensions {a[-1]} and {b[-2]} differ")
        elif n.op_type == "BatchNormalization" and len(ins) >= 5:
            x = ins[0]
            c = x[1] if x is not None and len(x) >= 2 else None
            for t, s in zip(n.input[1:5], ins[1:5]):
                if c is not None and s is not None and t in inits and tuple(s) != (c,):
                    raise PlannerError(f"{label}: {who} (BatchNormalization) has {c} channels but its "
                                       f"parameter {_q(t)} has shape {_fmt(s)}")


def _conv(n: onnx.NodeProto, who: str, x, w, label: str) -> None:
    op = n.op_type
    group = _attr(n, "group", 1)
    if not isinstance(group, int) or group < 1:
        raise PlannerError(f"{label}: {who} ({op}) has group {group!r}; it must be >= 1")
    if w is None:
        return
    if len(w) < 3:
        raise PlannerError(f"{label}: {who} ({op}) has weights of shape {_fmt(w)}; they need at least 3 dims")
    if any(d == 0 for d in w if d is not None):
        raise PlannerError(f"{label}: {who} ({op}) has weights of shape {_fmt(w)}, with a dimension of 0")
    c = x[1] if x is not None and len(x) >= 2 else None
    if c == 0:
        raise PlannerError(f"{label}: {who} ({op}) reads an input with 0 channels ({_fmt(x)})")
    if op == "Conv":
        m, per = w[0], w[1]
        if m is not None and m % group:
            raise PlannerError(f"{label}: {who} (Conv) has {m} filters, not divisible by group {group}")
        if c is not None and c % group:
            raise PlannerError(f"{label}: {who} (Conv) reads {c} input channels, not divisible by group {group}")
        if c is not None and per is not None and c != per * group:
            raise PlannerError(f"{label}: {who} (Conv) reads {c} input channels but its weights "
                               f"{_fmt(w)} expect {per * group} ({per} per group x {group} groups)")
    else:
        cin = w[0]
        if c is not None and cin is not None and c != cin:
            raise PlannerError(f"{label}: {who} (ConvTranspose) reads {c} input channels but its weights "
                               f"{_fmt(w)} expect {cin}")
        if cin is not None and cin % group:
            raise PlannerError(f"{label}: {who} (ConvTranspose) has {cin} input channels, not divisible by "
                               f"group {group}")

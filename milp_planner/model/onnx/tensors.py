"""What the importer knows of every tensor: shape, element type, and whether it is constant."""

from __future__ import annotations

import warnings
from math import prod

import onnx
from onnx import TensorProto, helper, numpy_helper

from milp_planner.model.onnx.ops import FLOAT_TYPES
from milp_planner.model.onnx.shapes import numel, vi_shape


class ModelWarning(UserWarning):
    """Something in the model the importer could only approximate (also in ``graph.warnings``)."""


class Tensors:
    """Shapes, element types and constness of the model's tensors, and the warnings so far.

    ``shapes`` maps a tensor to its shape (``None`` for an unknown dim) or ``None`` for an
    unknown rank; initializer dims are authoritative. ``const`` holds the tensors that are
    constants (filled in further by the importer as it meets constant-only nodes).
    """

    def __init__(self, model: onnx.ModelProto, inferred: onnx.ModelProto, label: str):
        self.label = label
        self.warnings: list[str] = []
        self.shapes: dict[str, tuple | None] = {}
        self.dtypes: dict[str, int | None] = {}
        g, ig = model.graph, inferred.graph
        for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
            shape, et = vi_shape(vi)
            if shape is not None or vi.name not in self.shapes:
                self.shapes[vi.name] = shape
            if et is not None:
                self.dtypes[vi.name] = et
        for t in ig.initializer:  # values folded for shape inference (shapes.fold_and_infer)
            if self.shapes.get(t.name) is None:
                self.shapes[t.name] = tuple(t.dims)
            self.dtypes.setdefault(t.name, t.data_type)
        for t in g.initializer:  # initializer dims are authoritative
            self.shapes[t.name] = tuple(t.dims)
            self.dtypes[t.name] = t.data_type
        for st in g.sparse_initializer:
            self.shapes[st.values.name] = tuple(st.dims)
            self.dtypes[st.values.name] = st.values.data_type
        self.initializers = {t.name: t for t in g.initializer}
        self.const: set[str] = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
        self.const_nodes: dict[str, onnx.NodeProto] = {}  # Constant node outputs

    def shape(self, t: str):
        """The shape of ``t`` as inferred (``None`` dims unknown), or ``None``."""
        return self.shapes.get(t)

    def known(self, t: str) -> tuple[int, ...] | None:
        """The shape of ``t`` if every dim is known, else ``None``."""
        s = self.shapes.get(t)
        if s is None or any(d is None for d in s):
            return None
        return s

    def numel(self, t: str) -> int | None:
        """Elements of ``t``, or ``None`` when its shape is not fully known."""
        s = self.known(t)
        return None if s is None else int(prod(s))

    def is_float(self, t: str) -> bool:
        """Is ``t`` floating-point (or of unknown type)?"""
        et = self.dtypes.get(t)
        return et is None or et in FLOAT_TYPES

    def const_value(self, t: str):
        """The value of a small constant (initializer with inline data or Constant node)."""
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
        if numel(tensor.dims) > 64:
            return None
        try:
            return numpy_helper.to_array(tensor).tolist()
        except Exception:
            return None

    def warn(self, msg: str) -> None:
        """Record ``msg`` in the graph's warnings and issue it as a ``ModelWarning``."""
        self.warnings.append(msg)
        warnings.warn(msg, ModelWarning, stacklevel=2)

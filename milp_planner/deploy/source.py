"""The model with its weights, and which original ONNX nodes make each layer.

The importer folds BatchNormalization, bias and activation nodes into their producer and
drops Identity/Dropout; a layer records its output tensor and its activation inputs. Here
the original nodes of a layer are found structurally: walking back from the tensor holding
the layer's value through every node that is not a constant, until a tensor that is a graph
input or another layer's value is reached. That needs no extra record in the importer, and it
finds pattern nodes (GELU, Swish) and Identity copies as well.

Constants (initializers, Constant nodes, shape arithmetic, weight preprocessing) are
evaluated to numpy arrays, so a sub-model holds plain initializers and a device gets only the
slice of a weight it uses. An initializer is read (``deploy.weights.Weights``) each time a
sub-model asks for it and not kept; a value computed from constants is kept until the sub-model
is built (``ModelSource.release``), so a deploy holds one sub-model's weights at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from milp_planner.errors import PlannerError
from milp_planner.model.graph import LayerGraph

STATIC_OPS = frozenset({"Constant", "ConstantOfShape", "Shape", "Size"})  # as the importer
#: the oldest default-domain opset onnxruntime runs; an older model is converted to it once
#: (``onnx.version_converter``) before it is split
MIN_RUNTIME_OPSET = 7
ALIAS_OPS = frozenset({"Identity", "Dropout"})


@dataclass
class LayerNodes:
    """The original nodes computing one layer."""

    nodes: list[onnx.NodeProto]  # in the file's (topological) order
    act: dict[str, str]  # tensor name read by a node -> the layer input (graph tensor) it holds
    value: str  # the original tensor holding the layer's output
    consts: set[str] = field(default_factory=set)  # constant tensor names read by the nodes

    @property
    def prefix(self) -> dict[str, onnx.NodeProto]:
        """DequantizeLinear nodes reading an input, by their output: the front of a QDQ group
        (``DequantizeLinear -> Conv -> QuantizeLinear``), which the importer keeps in this layer."""
        return {n.output[0]: n for n in self.nodes
                if n.op_type == "DequantizeLinear" and n.domain in ("", "ai.onnx") and n.input[0] in self.act}

    @property
    def front(self) -> dict[str, str]:
        """``act`` plus the outputs of the ``prefix`` nodes, each mapped to the layer input it holds."""
        out = dict(self.act)
        for o, n in self.prefix.items():
            out[o] = self.act[n.input[0]]
        return out

    @property
    def root(self) -> onnx.NodeProto:
        """The first node reading an activation input (the Conv of Conv -> BN -> Relu; the Conv of
        DequantizeLinear -> Conv -> QuantizeLinear)."""
        front, prefix = self.front, self.prefix
        for n in self.nodes:
            if n.output and n.output[0] in prefix:
                continue
            if any(i in front for i in n.input):
                return n
        return self.nodes[0]


def instance_model_path(instance) -> Path | None:
    """The instance's ``.onnx`` file (None for a zoo model or an instance built in code)."""
    ref = instance.model or ""
    if not ref or ref.startswith("zoo:"):
        return None
    path = Path(ref).expanduser()
    if not path.is_absolute() and instance.path is not None:
        path = Path(instance.path).parent / path
    return path


def streams_weights(instance) -> bool:
    """Whether ``open_model`` reads the instance's weights per sub-model (a binary ``.onnx``
    file) rather than loading them whole (zoo models, text-format files)."""
    from milp_planner.model.onnx.reading import TEXT_SUFFIXES

    path = instance_model_path(instance)
    return path is not None and path.suffix.lower() not in TEXT_SUFFIXES


def open_model(instance, on_full_load=None):
    """The instance's model and its ``Weights``: for a binary ``.onnx`` file the graph without
    the data of its large initializers, which ``Weights`` reads when a sub-model uses them (see
    deploy/weights.py); otherwise ``load_model`` (every weight in memory), after calling
    ``on_full_load()`` (deploy checks that estimate against its memory budget)."""
    from milp_planner.deploy.weights import Weights

    path = instance_model_path(instance)
    if streams_weights(instance):
        model, spans = _skim_with_spans(path)
        if model is not None and not _too_old(model):
            _fix_input_dims(model, instance.graph)
            return model, Weights(model, path, spans)
    if on_full_load is not None:
        on_full_load()
    model = load_model(instance)
    return model, Weights(model)


def _skim_with_spans(path: Path):
    """(the skimmed model, its initializers' spans), or (None, None) when the file is one to load
    whole: ``skim`` gives up on it, or a Constant node's tensor has external data."""
    from milp_planner.io import check_input_file
    from milp_planner.model.onnx.reading import MAX_MODEL_BYTES, _looks_like_model
    from milp_planner.model.onnx.skim import skim
    from milp_planner.model.onnx.validate import external_data_bytes

    check_input_file(path, "an ONNX model", MAX_MODEL_BYTES)
    spans: list = []
    try:
        model = skim(path, spans)
    except Exception:  # noqa: BLE001 - not what skim expects: onnx.load says why, or loads it
        return None, None
    if model is None or not _looks_like_model(model) or len(spans) != len(model.graph.initializer):
        return None, None
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_location == onnx.TensorProto.EXTERNAL:
                return None, None
    external_data_bytes(model, str(path), path.parent)  # present, inside the folder, long enough
    return model, spans


def _fix_input_dims(model: onnx.ModelProto, g: LayerGraph) -> None:
    """Symbolic input dims fixed to the instance's shapes."""
    for vi in model.graph.input:
        if vi.name in g.inputs:
            tt = vi.type.tensor_type
            tt.ClearField("shape")
            for d in g.inputs[vi.name]:
                tt.shape.dim.add().dim_value = int(d)


def load_model(instance) -> onnx.ModelProto:
    """The instance's model with its weights (zoo models: seeded weights, ``zoo.build(..., weights=True)``)."""
    from milp_planner.model.loading import parse_zoo_ref

    ref = instance.model or ""
    g = instance.graph
    if ref.startswith("zoo:"):
        from milp_planner.model import zoo

        name, _ = parse_zoo_ref(ref)
        shape = next(iter(g.inputs.values()))
        return zoo.build(name, size=tuple(shape[2:]), weights=True, batch=shape[0])
    if not ref:
        raise PlannerError(f"instance {instance.name}: no model reference to deploy (an instance built in code)")
    path = Path(ref).expanduser()
    if not path.is_absolute() and instance.path is not None:
        path = Path(instance.path).parent / path
    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise PlannerError(f"{path}: cannot load the model with its weights ({str(e).splitlines()[0][:120]})") from None
    _fix_input_dims(model, g)
    return runtime_opset(model, path)


def _default_opset(model: onnx.ModelProto) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _too_old(model: onnx.ModelProto) -> bool:
    v = _default_opset(model)
    return v is not None and v < MIN_RUNTIME_OPSET


def _channel_slopes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Before opset 7 a PRelu slope of C elements is per channel (axis 1); from 7 it broadcasts
    as numpy does (from the last axis), which the converter leaves as it is: such a slope
    initializer is reshaped to (C, 1, ..., 1)."""
    from onnx import numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    model = copy
    ranks = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - ranks unknown: the slopes stay as they are
        inferred = model
    for vi in [*inferred.graph.input, *inferred.graph.value_info]:
        if vi.type.tensor_type.HasField("shape"):
            ranks[vi.name] = len(vi.type.tensor_type.shape.dim)
    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type != "PRelu" or n.domain not in ("", "ai.onnx") or len(n.input) < 2:
            continue
        t, rank = inits.get(n.input[1]), ranks.get(n.input[0], 0)
        if t is None or len(t.dims) != 1 or t.dims[0] <= 1 or rank < 3:
            continue
        value = numpy_helper.to_array(t).reshape((t.dims[0],) + (1,) * (rank - 2))
        t.CopyFrom(numpy_helper.from_array(value, t.name))
        for vi in model.graph.input:  # before IR 4 an initializer is also declared as an input
            if vi.name == t.name and vi.type.tensor_type.HasField("shape"):
                vi.type.tensor_type.shape.ClearField("dim")
                for d in value.shape:
                    vi.type.tensor_type.shape.dim.add().dim_value = d
    return model


def runtime_opset(model: onnx.ModelProto, label) -> onnx.ModelProto:
    """``model``, converted to opset ``MIN_RUNTIME_OPSET`` when it is older (onnxruntime runs
    nothing older), with a ``ModelWarning`` that says so; the sub-models and ``reference.onnx``
    are cut from the converted model."""
    if not _too_old(model):
        return model
    import warnings

    from onnx import version_converter

    from milp_planner.model.onnx import ModelWarning

    old = _default_opset(model)
    try:
        new = version_converter.convert_version(_channel_slopes(model), MIN_RUNTIME_OPSET)
    except Exception as e:  # noqa: BLE001 - the converter's own reason, on one line
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise PlannerError(f"{label}: opset {old} is older than onnxruntime runs ({MIN_RUNTIME_OPSET}) and "
                           f"onnx.version_converter cannot convert it ({reason})") from None
    warnings.warn(f"{label}: opset {old} is older than onnxruntime runs; the model was converted to opset "
                  f"{MIN_RUNTIME_OPSET} (onnx.version_converter) before it was split", ModelWarning, stacklevel=2)
    return new


def _outer_reads(n: onnx.NodeProto) -> list[str]:
    """Tensors of the enclosing graph read inside the node's subgraphs (If / Loop / Scan bodies)."""
    if not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
        return []
    from milp_planner.model.onnx.nodes import subgraph_inputs

    return subgraph_inputs(n)


class ModelSource:
    """Original nodes and constant values of ``model``, which ``graph`` was imported from."""

    def __init__(self, model: onnx.ModelProto, graph: LayerGraph, weights=None):
        from milp_planner.deploy.weights import Weights

        self.model = model
        self.graph = graph
        self.weights = weights if weights is not None else Weights(model)
        g = model.graph
        self.opset = _default_opset(model) or 17
        self.initializers = {t.name: t for t in g.initializer}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.const: set[str] = set(self.initializers)
        for n in g.node:
            for o in n.output:
                if o:
                    self.producer[o] = n
            ins = [i for i in n.input if i]
            if n.domain in ("", "ai.onnx") and n.op_type in STATIC_OPS or all(i in self.const for i in ins):
                self.const.update(o for o in n.output if o)
        self.order = {id(n): i for i, n in enumerate(g.node)}
        self._values: dict[str, np.ndarray] = {}
        self._shapes: dict[str, tuple] | None = None
        self._roots = {self.resolve(t): t for t in graph.inputs}
        for layer in graph.layers:
            self._roots[self.resolve(layer.output)] = layer.output
        self._layer_nodes: dict[int, LayerNodes] = {}
        self._dtypes: dict[str, int] | None = None

    def resolve(self, t: str) -> str:
        """Follow Identity/Dropout copies back to the tensor they copy."""
        while True:
            n = self.producer.get(t)
            if n is None or n.op_type not in ALIAS_OPS or t != n.output[0] or t in self.const:
                return t
            t = n.input[0]

    def layer_nodes(self, lid: int) -> LayerNodes:
        hit = self._layer_nodes.get(lid)
        if hit is not None:
            return hit
        layer = self.graph.layers[lid]
        value = self.resolve(layer.output)
        nodes: dict[int, onnx.NodeProto] = {}
        act: dict[str, str] = {}
        consts: set[str] = set()
        stack = [value]
        seen = set()
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            n = self.producer.get(t)
            if n is None:
                raise PlannerError(f"layer {lid} ({layer.name}): tensor '{t}' has no producer in the model")
            nodes[id(n)] = n
            for i in list(n.input) + _outer_reads(n):
                if not i:
                    continue
                if i in self.const:
                    consts.add(i)
                    continue
                r = self.resolve(i)
                if r in self._roots and r != value:
                    act[i] = self._roots[r]
                else:
                    stack.append(i)
        ordered = sorted(nodes.values(), key=lambda n: self.order[id(n)])
        missing = set(layer.inputs) - set(act.values())
        if missing:
            raise PlannerError(f"layer {lid} ({layer.name}): input '{sorted(missing)[0]}' is not read by the "
                               f"model's nodes of this layer ({', '.join(sorted({n.op_type for n in nodes.values()}))})")
        hit = self._layer_nodes[lid] = LayerNodes(ordered, act, value, consts)
        return hit

    # -- constants ----------------------------------------------------------------------------
    def _infer(self) -> None:
        """Shapes and element types of every tensor, from onnx shape inference on a weightless
        skeleton of the model (the importer's: weight data are never copied for it)."""
        from milp_planner.model.onnx.shapes import (_unknown_outputs, contrib_shapes, fold_and_infer, infer,
                                                    skeleton, vi_shape)

        sk = skeleton(self.model, keep_value_info=False)  # the file's may be for other input dims
        sk, inferred = contrib_shapes(sk, infer(sk, "deploy"), "deploy")
        if _unknown_outputs(inferred):
            inferred = fold_and_infer(sk, inferred, "deploy")
        shapes, dtypes = {}, {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            shape, et = vi_shape(vi)
            if shape is not None and None not in shape:
                shapes[vi.name] = tuple(shape)
            if et:
                dtypes[vi.name] = et
        for t in inferred.graph.initializer:  # values folded for inference (shapes.fold_and_infer)
            shapes.setdefault(t.name, tuple(t.dims))
            dtypes.setdefault(t.name, t.data_type)
        for t in self.model.graph.initializer:
            dtypes[t.name] = t.data_type
        for t in self.graph.inputs:
            shapes[t] = tuple(self.graph.inputs[t])
        for layer in self.graph.layers:
            shapes.setdefault(layer.output, layer.shape)
        self._shapes, self._dtypes = shapes, dtypes

    def shapes(self) -> dict[str, tuple]:
        if self._shapes is None:
            self._infer()
        return self._shapes

    def elem_type(self, t: str) -> int:
        """The ONNX element type of graph tensor ``t`` (FLOAT when inference does not say)."""
        if self._dtypes is None:
            self._infer()
        et = self._dtypes.get(t) or self._dtypes.get(self.resolve(t))
        return et or onnx.TensorProto.FLOAT

    def release(self) -> None:
        """Forget the values computed so far (after each sub-model: they are its weights)."""
        self._values.clear()

    def value(self, t: str) -> np.ndarray:
        """The value of constant tensor ``t`` (an initializer is read now and not kept)."""
        v = self._values.get(t)
        if v is not None:
            return v
        if t in self.initializers:
            return self.weights.array(self.initializers[t])
        else:
            n = self.producer.get(t)
            if n is None or t not in self.const:
                raise PlannerError(f"tensor '{t}' is not a constant of the model")
            if n.op_type in ("Shape", "Size"):
                shape = self.shapes().get(n.input[0])
                if shape is None:
                    raise PlannerError(f"node '{n.name}' ({n.op_type}): the shape of '{n.input[0]}' is unknown")
                if n.op_type == "Size":
                    v = np.array(int(np.prod(shape)), dtype=np.int64)
                else:
                    a = {x.name: x.i for x in n.attribute}
                    v = np.array(shape[a.get("start", 0):a.get("end", len(shape))], dtype=np.int64)
            else:
                from milp_planner.model.onnx.shapes import eval_node

                feeds = {i: self.value(i) for i in n.input if i}
                try:
                    outs = eval_node(n, feeds, self.model.opset_import)
                except Exception as e:  # noqa: BLE001 - an operator the reference kernels lack, say
                    raise PlannerError(f"node '{n.name or n.output[0]}' ({n.op_type}, opset {self.opset}): cannot "
                                       f"evaluate this constant ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
                                       ) from None
                for name, val in zip(n.output, outs):
                    if name and val is not None:
                        self._values[name] = np.asarray(val)
                v = self._values[t]
        v = np.asarray(v)
        self._values[t] = v
        return v

"""Import an ONNX model as a ``LayerGraph`` (docs/model.md section 2).

``import_onnx(model, input_shape=None, name=None)`` reads an ``.onnx`` file (or takes a
``ModelProto``) and returns the layers after folding, with shapes, MACs, ops, parameter
counts and row dependencies. It never reads weight data: the file is loaded with
``load_external_data=False`` and parameters are counted from tensor shapes only; shape
inference runs on a copy of the graph whose large initializers are replaced by dims-only
stubs, so a model with gigabytes of weights is inspected in the memory of its graph.

Decisions where docs/model.md is silent (documented here, relied on by the tests):

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
* Row dependency beyond docs/model.md's list: ``Pad`` (constant mode, pads known) is a window of
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
* Multi-output nodes (Split, TopK, DynamicQuantizeLinear, LSTM, ...): one layer per output
  that is read (or is a graph output), in output order, each holding its own tensor and shape.
  The node's MACs, ops and parameters are charged to the layer of its first used output; a
  layer of another output costs its output elements (a copy). A deployment computes the node
  once per sub-model that needs any of its outputs.
* Recurrent ops (LSTM, GRU, RNN, and onnxruntime's DynamicQuantizeLSTM): MACs per step, batch
  row and direction are gates x hidden x (input + hidden) (the products with W and R; 4, 3 and
  1 gates); ops are 9 (LSTM), 7 (GRU) or 1 (RNN) per hidden unit and step; parameters are W, R,
  B (and P). They are one layer, never split.
* Quantised weight ops (ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul) count as Conv
  and MatMul on their integer weight; their integer weights (and QLinearConv's bias) are
  parameters. onnxruntime's operator-format ops (com.microsoft QLinearAdd, QLinearMul,
  QLinearConcat, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, the QLinear pools and
  reductions, QGemm: ``ops.CONTRIB_QUANT``) have the shape, work and (integer) weights of their
  float op; they are never split. Any other operator outside the standard domain whose output
  shape stays unknown is refused, naming it.
* ``input_shape`` fixes the first graph input that is not an initializer, or any input by
  name (``{name: shape}``; a name the model does not have is an error). A graph output
  that is an ``Identity`` of a layer's output names that layer's output, so
  ``graph.outputs`` always names layer outputs (or a graph input).
* A MAC count that cannot be computed (a weight op whose sizes stay unknown) is an error; a
  weight whose shape stays unknown is a warning naming the layer, saying the parameter
  totals are incomplete. Neither is ever a silent 0.

The modules of this package, in the order an import goes through them:

* ``reading`` loads the file (``skim`` reads a binary file without its weight data) and
  rejects a model that cannot be trusted (no nodes, no outputs, no or too new an opset);
* ``shapes`` runs onnx shape inference on a weightless skeleton of the model, folding small
  constant subgraphs when shapes stay unknown; ``tensors`` holds what is known per tensor;
* ``importer`` turns nodes into folded layers (``nodes``, ``patterns``, ``ops``), with
  ``counting`` (MACs, ops, parameters) and ``rowdeps`` (row dependencies).
"""

from __future__ import annotations

from pathlib import Path

import onnx

from milp_planner.errors import PlannerError
from milp_planner.model.graph import LayerGraph
from milp_planner.model.onnx.importer import Importer
from milp_planner.model.onnx.reading import check_model, load_model
from milp_planner.model.onnx.tensors import ModelWarning
from milp_planner.model.onnx.validate import check_shapes

__all__ = ["import_onnx", "input_shapes", "ModelWarning"]


def input_shapes(input_shape) -> dict[str | None, tuple[int, ...]] | None:
    """``input_shape`` as a mapping input name -> shape (``None`` names the first input).

    Takes a shape (a sequence of ints: the first input), a mapping ``{name: shape}`` (a name
    ``None`` or ``""`` is the first input) or ``None``. A 0-d input (a scalar) has shape ``()``.
    """
    if input_shape is None:
        return None
    if isinstance(input_shape, dict):
        return {(k or None): tuple(int(d) for d in v) for k, v in input_shape.items()}
    return {None: tuple(int(d) for d in input_shape)}


def import_onnx(
    model: str | Path | onnx.ModelProto,
    input_shape=None,
    name: str | None = None,
    *,
    source: str | None = None,
) -> LayerGraph:
    """Read an ONNX model (a path or a ``ModelProto``) as a ``LayerGraph``.

    ``input_shape`` overwrites the dims of graph inputs before shape inference (fixing
    symbolic dims such as ``N`` or ``H``): a shape for the first non-initializer input, or a
    mapping input name -> shape for any of them (``input_shapes``). ``name`` names the graph
    (default: the ONNX graph name, else the file's stem); ``source`` is how error messages name
    the model (default: the file path, else the name). Weight data are never read.
    """
    proto, label, default_name = load_model(model)
    gname = name or default_name
    label = source or label or gname
    shapes = input_shapes(input_shape)
    if shapes is not None:
        for key, shape in shapes.items():
            what = f"input '{key}'" if key else "input"
            if key is None and not shape:
                raise PlannerError(f"{label}: input shape {shape} must be positive integers")
            if any(d <= 0 for d in shape):
                raise PlannerError(f"{label}: {what} shape {shape} must be positive integers")
    check_model(proto, label)
    importer = Importer(proto, label, gname, shapes)
    check_shapes(proto, importer.t.shape, label)  # weights against the inferred shapes (validate.py)
    return importer.run()

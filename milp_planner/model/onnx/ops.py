"""Op categories: which ONNX ops are weights, pools, folded activations, re-layouts, ..."""

from __future__ import annotations

from onnx import TensorProto

WEIGHT_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
# integer (quantised) forms of the weight ops: counted as Conv / MatMul; operand index of the weight
QUANT_WEIGHT_OPS = {"ConvInteger": ("Conv", 1), "QLinearConv": ("Conv", 3),
                    "MatMulInteger": ("MatMul", 1), "QLinearMatMul": ("MatMul", 3)}
# recurrent ops: gates per step, elementwise ops per hidden unit and step (activations and gate
# products of the ONNX operator's equations), operand indices of the weights (W, R, B, P)
RECURRENT = {"LSTM": (4, 9, (1, 2, 3, 7)), "GRU": (3, 7, (1, 2, 3)), "RNN": (1, 1, (1, 2, 3))}
# onnxruntime's quantised LSTM (com.microsoft), counted as an LSTM
CONTRIB_RECURRENT = {"DynamicQuantizeLSTM": "LSTM"}
CONTRIB_DOMAINS = ("com.microsoft",)
# onnxruntime's quantised operator-format ops (com.microsoft; ``quantize_static`` with
# ``QuantFormat.QOperator`` writes them): the float op whose output shape, work and weights they
# have, and the indices of that op's inputs among theirs (None: QLinearConcat's X at 2, 5, 8, ...)
CONTRIB_QUANT = {
    "QLinearAdd": ("Add", (0, 3)), "QLinearMul": ("Mul", (0, 3)),
    "QLinearSigmoid": ("Sigmoid", (0,)), "QLinearLeakyRelu": ("LeakyRelu", (0,)),
    "QLinearSoftmax": ("Softmax", (0,)), "QLinearGlobalAveragePool": ("GlobalAveragePool", (0,)),
    "QLinearAveragePool": ("AveragePool", (0,)), "QLinearReduceMean": ("ReduceMean", (0,)),
    "QGemm": ("Gemm", (0, 3, 6)), "QLinearConcat": ("Concat", None),
}
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
    "DynamicQuantizeLinear", "If", "Loop",
}) | GLOBAL_POOLS
KNOWN = WEIGHT_OPS | WINDOW_POOLS | ELEMENTWISE | RELAYOUT | WHOLE | frozenset(QUANT_WEIGHT_OPS) | frozenset(RECURRENT) \
    | frozenset(f"com.microsoft.{op}" for op in [*CONTRIB_QUANT, *CONTRIB_RECURRENT])

NORM_PARAM_OPS = frozenset({"LayerNormalization", "InstanceNormalization", "GroupNormalization"})

FLOAT_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16,
    *(getattr(TensorProto, n) for n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                        "FLOAT8E5M2FNUZ") if hasattr(TensorProto, n)),
})

STANDARD_DOMAINS = ("", "ai.onnx")

"""Row dependencies: which rows of its inputs a layer's output rows read (docs/model.md section 2)."""

from __future__ import annotations

from fractions import Fraction

from milp_planner.model.graph import RowDep
from milp_planner.model.onnx.nodes import Node
from milp_planner.model.onnx.ops import ELEMENTWISE, FOLD_UNARY
from milp_planner.model.onnx.tensors import Tensors


def rowdep(tensors: Tensors, n: Node, out_shape) -> RowDep:
    """The row dependency of the layer whose root node is ``n``."""
    op = n.op if n.standard else None
    act_shapes = [tensors.known(t) for t in n.act]
    if len(out_shape) != 4 or not act_shapes or any(len(s) != 4 for s in act_shapes):
        return RowDep()
    h_out = out_shape[2]
    x = act_shapes[0]
    if op in ("Conv", "ConvTranspose") and len(n.act) > 1:
        return RowDep()  # weights computed at run time: not a window over one input
    if op in ("Conv", "MaxPool", "AveragePool", "LpPool"):
        if op == "Conv":
            w = tensors.known(n.inputs[1])
            k = int(n.attr("kernel_shape", w[2:] if w is not None else [1])[0])
        else:
            k = int(n.attr("kernel_shape", [1])[0])
        s = int((n.attr("strides") or [1])[0])
        d = int((n.attr("dilations") or [1])[0])
        return RowDep("window", kernel=k, stride=s, pad_top=_pad_top(n, x[2], k, s, d), dilation=d)
    if op == "ConvTranspose":
        w = tensors.known(n.inputs[1])
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
            tensors.const_value(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] else None)
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


def _pad_top(n: Node, h_in: int, k: int, s: int, d: int) -> int:
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


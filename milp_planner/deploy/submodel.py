"""One part of one stage as an ONNX model: exactly what that device computes there.

Inputs are the regions of the stage's external tensors the part needs (the evaluator's
``PartGeometry.needs``); outputs are the regions it owns afterwards (``owns``). Inside, every
layer computes the rows (or channels) ``PartGeometry.computed`` gives it:

* ``window`` layers (Conv, pooling, Pad) read the input rows the row dependency names and
  get their H pads rewritten: a part touching row 0 keeps the top pad, one touching the last
  row the bottom pad, any other side gets 0 because the input slice supplies the halo. The
  output then has exactly the computed rows; stride, dilation and groups are untouched.
* ``identity`` layers (elementwise, Add, Concat) read the same rows; constants with an H axis
  are sliced with them.
* ``resize`` layers (Resize with an integer factor, DepthToSpace, SpaceToDepth) and
  ConvTranspose run on the input slice and the rows wanted are cut from their output (they
  are shift-equivariant: the slice starts on a whole input row). Anything else with a row
  dependency (a rational Resize factor, ``align_corners``, ConvTranspose with ``output_shape``)
  runs on the slice zero-padded back to full height; the row dependency guarantees that the
  padding rows do not reach the rows kept. Exact, but that layer then costs its full compute.
* layers that are not row-splittable compute their whole output from whole inputs.
* a ``channels`` part slices the weights (Conv output channels, grouped and depthwise convs
  their groups' input channels too; ConvTranspose, Gemm and MatMul output columns) and every
  per-channel constant of its folded nodes (bias, BatchNormalization, PRelu slopes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from milp_planner.errors import PlannerError
from milp_planner.model.graph import Interval, input_rows
from milp_planner.space.geometry import PartGeometry, Region
from milp_planner.deploy.regions import region_shape
from milp_planner.deploy.source import LayerNodes, ModelSource

SHIFT_CTM = frozenset({"half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn"})


@dataclass(frozen=True)
class Port:
    """A sub-model input or output: a region of a graph tensor, under an ONNX name."""

    tensor: str
    region: Region
    name: str


@dataclass(frozen=True)
class SubModel:
    model: onnx.ModelProto
    inputs: list[Port]
    outputs: list[Port]


@dataclass(frozen=True)
class _Local:
    name: str  # sub-model value
    region: Region  # the part of the tensor it holds


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class _Graph:
    """The sub-model under construction."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}#{self.count}"

    def const(self, base: str, value) -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], base: str, **attrs) -> str:
        out = self.fresh(base)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def slice(self, x: str, axis: int, start: int, stop: int, length: int) -> str:
        """Elements [start, stop) along ``axis`` of ``x`` (which has ``length`` there)."""
        if start == 0 and stop == length:
            return x
        return self.node("Slice", [x, self.const("starts", np.array([start], np.int64)),
                                   self.const("ends", np.array([stop], np.int64)),
                                   self.const("axes", np.array([axis], np.int64))], f"{x.split('#')[0]}.slice")


class _Builder:
    def __init__(self, source: ModelSource, first: int, last: int, axis: str, part: PartGeometry, tag: str):
        self.src = source
        self.graph = source.graph
        self.first, self.last, self.axis, self.part = first, last, axis, part
        self.g = _Graph(tag)
        self.local: dict[str, _Local] = {}

    # -- values ------------------------------------------------------------------------------
    def rank(self, t: str) -> int:
        return len(self.graph.shape(t))

    def select(self, t: str, want: Region) -> str:
        """A value holding exactly ``want`` of tensor ``t`` (sliced from what the part has)."""
        loc = self.local[t]
        have = loc.region
        if not (have.rows[0] <= want.rows[0] and want.rows[1] <= have.rows[1]
                and have.chans[0] <= want.chans[0] and want.chans[1] <= have.chans[1]):
            raise PlannerError(f"deploy: internal error: tensor '{t}' holds {have}, {want} is needed")
        x = loc.name
        if self.rank(t) == 4:
            x = self.g.slice(x, 2, want.rows[0] - have.rows[0], want.rows[1] - have.rows[0],
                             have.rows[1] - have.rows[0])
        if self.rank(t) >= 1:
            ax = 1 if self.rank(t) == 4 else self.rank(t) - 1
            x = self.g.slice(x, ax, want.chans[0] - have.chans[0], want.chans[1] - have.chans[0],
                             have.chans[1] - have.chans[0])
        return x

    def rows_of(self, t: str, rows: Interval) -> str:
        loc = self.local[t]
        return self.select(t, Region(rows, loc.region.chans) if self.rank(t) == 4 else loc.region)

    # -- copying original nodes ---------------------------------------------------------------
    def copy(self, node: onnx.NodeProto, rename: dict[str, str], skip_first: int = 0) -> None:
        ins = [rename.get(i, i) if i else "" for i in node.input]
        outs = []
        for o in node.output:
            if not o:
                outs.append("")
                continue
            rename[o] = self.g.fresh(o)
            outs.append(rename[o])
        n = onnx.NodeProto()
        n.CopyFrom(node)
        del n.input[:]
        n.input.extend(ins)
        del n.output[:]
        n.output.extend(outs)
        n.name = outs[0] if outs and outs[0] else self.g.fresh(node.op_type)
        self.g.nodes.append(n)

    # -- layers ---------------------------------------------------------------------------------
    def build(self) -> SubModel:
        g, part = self.graph, self.part
        inputs = []
        for t, need in part.needs.items():
            if need.empty:
                continue
            name = f"in:{t}"
            self.local[t] = _Local(name, need)
            inputs.append(Port(t, need, name))
        for lid in range(self.first, self.last + 1):
            comp = part.computed.get(lid)
            if comp is None or comp.empty:
                continue
            layer = g.layers[lid]
            if self.axis == "channels":
                out = self.channel_layer(lid, comp)
            else:
                out = self.row_layer(lid, comp)
            self.local[layer.output] = _Local(out, comp)
        outputs, value_outs = [], []
        for t, own in part.owns.items():
            if own.empty:
                continue
            x = self.select(t, own)
            name = f"own:{t}"
            self.g.nodes.append(helper.make_node("Identity", [x], [name], name=name))
            outputs.append(Port(t, own, name))
            value_outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, region_shape(g.shape(t), own)))
        value_ins = [helper.make_tensor_value_info(p.name, TensorProto.FLOAT, region_shape(g.shape(p.tensor), p.region))
                     for p in inputs]
        graph = helper.make_graph(self.g.nodes, self.g.prefix, value_ins, value_outs, self.g.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.src.opset)],
                                  producer_name="milp-planner deploy")
        model.ir_version = self.src.model.ir_version or 8
        return SubModel(model, inputs, outputs)

    def _emit(self, ln: LayerNodes, rename: dict[str, str], special: onnx.NodeProto | None, slicer) -> str:
        """Copy the layer's nodes except ``special`` (already emitted), constants through ``slicer``."""
        for n in ln.nodes:
            if n is special:
                continue
            local_rename = dict(rename)
            for k, i in enumerate(n.input):
                if i and i in ln.consts:
                    local_rename[i] = self.g.const(i, slicer(n, k, self.src.value(i)))
            self.copy(n, local_rename)
            for o in n.output:
                if o:
                    rename[o] = local_rename[o]
        return rename[ln.value]

    def row_layer(self, lid: int, comp: Region) -> str:
        g = self.graph
        layer = g.layers[lid]
        ln = self.src.layer_nodes(lid)
        a, b = comp.rows
        h_out = layer.rows
        kind = layer.rowdep.kind if layer.row_splittable else "none"
        rename: dict[str, str] = {}

        def h_slicer(node, k, v):  # constants on the H axis follow the computed rows
            if kind != "none" and v.ndim == 4 and v.shape[2] == h_out > 1 and (a, b) != (0, h_out):
                return v[:, :, a:b]
            return v

        if kind in ("none", "identity"):
            for i, t in ln.act.items():
                if kind == "none":
                    rename[i] = self.select(t, self.local[t].region)
                    if self.local[t].region.cells != _full_cells(g, t):
                        raise PlannerError(f"deploy: internal error: layer {lid} reads '{t}' whole")
                else:
                    rename[i] = self.rows_of(t, (a, b))
            return self._emit(ln, rename, None, h_slicer)

        root = ln.root
        x_name = next(i for i in root.input if i in ln.act)
        t = ln.act[x_name]
        h_in = g.tensor_rows(t)
        lo, hi = input_rows(layer.rowdep, (a, b), h_in)
        x = self.rows_of(t, (lo, hi))
        for i in ln.act:
            rename[i] = x
        out = None
        if kind == "window":
            out = self.window_root(root, ln, layer, (a, b), (lo, hi), h_in, x)
        elif kind == "resize":
            out = self.resize_root(root, ln, layer, (a, b), (lo, hi), h_in, x)
        elif kind == "transpose":
            out = self.transpose_root(root, ln, layer, (a, b), (lo, hi), x)
        if out is None:  # embed the slice in a zero tensor of full height
            full = self.g.node("Pad", [x, self.g.const("pads", np.array([0, 0, lo, 0, 0, 0, h_in - hi, 0], np.int64))],
                               "embed")
            rename_root = dict(rename)
            for i in ln.act:
                rename_root[i] = full
            for k, i in enumerate(root.input):
                if i and i in ln.consts:
                    rename_root[i] = self.g.const(i, self.src.value(i))
            self.copy(root, rename_root)
            y = rename_root[root.output[0]]
            out = self.g.slice(y, 2, a, b, h_out)
        rename[root.output[0]] = out
        return self._emit(ln, rename, root, h_slicer)

    def _root_consts(self, root, ln, rename, replace: dict[int, str] | None = None):
        r = dict(rename)
        for k, i in enumerate(root.input):
            if replace and k in replace:
                continue
            if i and i in ln.consts:
                r[i] = self.g.const(i, self.src.value(i))
        return r

    def _emit_root(self, root, r, inputs: list[str] | None = None, **override) -> str:
        attrs = _attrs(root)
        attrs.update(override)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        ins = inputs if inputs is not None else [r.get(i, i) if i else "" for i in root.input]
        return self.g.node(root.op_type, ins, root.output[0], **attrs)

    def window_root(self, root, ln, layer, out_rows, in_rows, h_in, x) -> str | None:
        dep = layer.rowdep
        a, b = out_rows
        lo, hi = in_rows
        s, p, k, d = dep.stride, dep.pad_top, dep.kernel, dep.dilation
        lo_unc = a * s - p
        hi_unc = (b - 1) * s - p + (k - 1) * d + 1
        top, bottom = lo - lo_unc, hi_unc - hi
        r = self._root_consts(root, ln, {i: x for i in ln.act})
        if root.op_type == "Pad":
            pads_name = root.input[1] if len(root.input) > 1 else ""
            attrs = _attrs(root)
            if pads_name:
                pads = [int(v) for v in self.src.value(pads_name).ravel()]
            else:
                pads = list(attrs.get("pads"))
            pads[2], pads[6] = top, bottom
            if pads_name:
                ins = [r.get(i, i) if i else "" for i in root.input]
                ins[1] = self.g.const("pads", np.array(pads, np.int64))
                return self._emit_root(root, r, ins)
            return self._emit_root(root, r, pads=pads)
        shape_in = self.graph.shape(ln.act[next(i for i in root.input if i in ln.act)])
        pads = _spatial_pads(root, shape_in, self.src)
        nd = len(pads) // 2
        pads[0], pads[nd] = top, bottom
        return self._emit_root(root, r, pads=pads, auto_pad=None)

    def resize_root(self, root, ln, layer, out_rows, in_rows, h_in, x) -> str | None:
        dep = layer.rowdep
        a, b = out_rows
        lo, hi = in_rows
        num, den = dep.factor_num, dep.factor_den
        if (lo * num) % den or (hi * num) % den:
            return None
        start = lo * num // den
        length = (hi - lo) * num // den
        attrs = _attrs(root)
        r = self._root_consts(root, ln, {i: x for i in ln.act})
        if root.op_type in ("DepthToSpace", "SpaceToDepth"):
            y = self._emit_root(root, r)
        elif root.op_type == "Resize":
            ctm = attrs.get("coordinate_transformation_mode", b"half_pixel")
            ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
            in_shape = self.graph.shape(layer.inputs[0])
            w_in, w_out = in_shape[3], layer.shape[3]
            if den != 1 or ctm not in SHIFT_CTM or w_out % w_in or attrs.get("antialias", 0):
                return None
            scales = self.g.const("scales", np.array([1.0, 1.0, float(num), float(w_out // w_in)], np.float32))
            ins = [x, "", scales]
            y = self._emit_root(root, r, ins)
        else:
            return None
        return self.g.slice(y, 2, a - start, b - start, length)

    def transpose_root(self, root, ln, layer, out_rows, in_rows, x) -> str | None:
        dep = layer.rowdep
        a, b = out_rows
        lo, hi = in_rows
        attrs = _attrs(root)
        auto = attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto not in ("NOTSET", "VALID") or attrs.get("output_shape") is not None:
            return None
        s, p, k, d = dep.stride, dep.pad_top, dep.kernel, dep.dilation
        span = (k - 1) * d + 1
        start = lo * s - p
        length = (hi - lo - 1) * s + span
        if a - start < 0 or b - start > length:
            return None
        pads = list(attrs.get("pads") or [0, 0, 0, 0]) if auto == "NOTSET" else [0, 0, 0, 0]
        nd = len(pads) // 2
        pads[0], pads[nd] = 0, 0
        over = {"pads": pads, "auto_pad": None}
        if attrs.get("output_padding") is not None:
            op = list(attrs["output_padding"])
            op[0] = 0
            over["output_padding"] = op
        r = self._root_consts(root, ln, {i: x for i in ln.act})
        y = self._emit_root(root, r, **over)
        return self.g.slice(y, 2, a - start, b - start, length)

    def channel_layer(self, lid: int, comp: Region) -> str:
        g = self.graph
        layer = g.layers[lid]
        ln = self.src.layer_nodes(lid)
        c0, c1 = comp.chans
        c_out = layer.channels
        rank = len(layer.shape)
        ch_axis = 1 if rank == 4 else rank - 1
        root = ln.root
        op = root.op_type
        attrs = _attrs(root)
        x_name = next(i for i in root.input if i in ln.act)
        t = ln.act[x_name]
        x = self.select(t, self.local[t].region)
        e0, e1 = c0, c1  # output channels actually computed (whole groups)
        ins = [x] + [""] * (len(root.input) - 1)
        over = {}
        w = self.src.value(root.input[1])
        if op == "Conv":
            groups = int(attrs.get("group", 1))
            if groups > 1:
                per_out = c_out // groups
                per_in = w.shape[1]
                g0, g1 = c0 // per_out, -(-c1 // per_out)
                e0, e1 = g0 * per_out, g1 * per_out
                x = self.select(t, Region(self.local[t].region.rows, (g0 * per_in, g1 * per_in)))
                ins[0] = x
                over["group"] = g1 - g0
            ins[1] = self.g.const(root.input[1], w[e0:e1])
            if len(root.input) > 2 and root.input[2]:
                ins[2] = self.g.const(root.input[2], self.src.value(root.input[2])[e0:e1])
        elif op == "ConvTranspose":
            if int(attrs.get("group", 1)) != 1:
                raise PlannerError(f"deploy: layer {lid} ({layer.name}): a channel split of a grouped ConvTranspose is not supported")
            ins[1] = self.g.const(root.input[1], w[:, c0:c1])
            if len(root.input) > 2 and root.input[2]:
                ins[2] = self.g.const(root.input[2], self.src.value(root.input[2])[c0:c1])
        elif op == "Gemm":
            wb = w[c0:c1] if int(attrs.get("transB", 0)) else w[:, c0:c1]
            ins[1] = self.g.const(root.input[1], wb)
            if len(root.input) > 2 and root.input[2]:
                cv = self.src.value(root.input[2])
                if cv.ndim >= 1 and cv.shape[-1] == c_out and c_out > 1:
                    cv = cv[..., c0:c1]
                ins[2] = self.g.const(root.input[2], cv)
        elif op == "MatMul":
            ins[1] = self.g.const(root.input[1], w[..., c0:c1])
        else:
            raise PlannerError(f"deploy: layer {lid} ({layer.name}, {op}) cannot be split by channels")
        if root.input[0] not in ln.act:
            raise PlannerError(f"deploy: layer {lid} ({layer.name}): the activation must be the first input")
        y = self.g.node(op, ins, root.output[0], **{**attrs, **over})
        if (e0, e1) != (c0, c1):
            y = self.g.slice(y, ch_axis, c0 - e0, c1 - e0, e1 - e0)
        rename = {root.output[0]: y}

        def c_slicer(node, k, v):
            if node.op_type == "BatchNormalization" and k >= 1:
                return v[c0:c1] if v.ndim == 1 and v.shape[0] == c_out else v
            ax = ch_axis - (rank - v.ndim)
            if v.ndim and ax >= 0 and v.shape[ax] == c_out and c_out > 1:
                idx = [slice(None)] * v.ndim
                idx[ax] = slice(c0, c1)
                return v[tuple(idx)]
            return v

        return self._emit(ln, rename, root, c_slicer)


def _full_cells(graph, t: str) -> int:
    from milp_planner.space.geometry import full_region

    return full_region(graph, t).cells


def _spatial_pads(node: onnx.NodeProto, in_shape, source: ModelSource) -> list[int]:
    """The begin/end pads a conv or pooling node applies to each spatial axis."""
    attrs = _attrs(node)
    nd = len(in_shape) - 2
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", None):
        return [int(v) for v in attrs.get("pads") or [0] * (2 * nd)]
    if auto == "VALID":
        return [0] * (2 * nd)
    if node.op_type == "Conv":
        ks = attrs.get("kernel_shape") or list(source.value(node.input[1]).shape[2:])
    else:
        ks = attrs["kernel_shape"]
    strides = attrs.get("strides") or [1] * nd
    dil = attrs.get("dilations") or [1] * nd
    begins, ends = [], []
    for ax in range(nd):
        n, s, k, d = in_shape[2 + ax], strides[ax], ks[ax], dil[ax]
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        first = total // 2 if auto == "SAME_UPPER" else total - total // 2
        begins.append(first)
        ends.append(total - first)
    return begins + ends


def build_submodel(source: ModelSource, first: int, last: int, axis: str, part: PartGeometry,
                   tag: str) -> SubModel:
    """The ONNX model of one part (see the module docstring)."""
    return _Builder(source, first, last, axis, part, tag).build()

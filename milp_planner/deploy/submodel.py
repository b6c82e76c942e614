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
from pathlib import Path

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
    """The model of one part: ``model`` without its initializers, which are ``weights`` (name,
    value), serialized straight from the arrays when written (``chunks``), so that a sub-model's
    weights are in memory once (``proto()`` gives the whole ``ModelProto``)."""

    model: onnx.ModelProto
    inputs: list[Port]
    outputs: list[Port]
    weights: list[tuple[str, np.ndarray]]

    def chunks(self, label: str):
        """The serialized model, as chunks to write one after another (``weights.model_chunks``)."""
        from milp_planner.deploy.weights import array_tensor, model_chunks

        return model_chunks(self.model, extra=[array_tensor(n, v) for n, v in self.weights], label=label)

    def proto(self) -> onnx.ModelProto:
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        m.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in self.weights)
        return m


@dataclass(frozen=True)
class _Local:
    name: str  # sub-model value
    region: Region  # the part of the tensor it holds


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class _Graph:
    """The sub-model under construction; the nodes it makes itself (Slice, Pad, Resize) take the
    form of the model's own opset ``opset`` (an opset-9 Slice has attributes, not inputs)."""

    def __init__(self, prefix: str, opset: int = 17):
        self.prefix = prefix
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[tuple[str, np.ndarray]] = []
        self.count = 0
        self.slices: dict[tuple, str] = {}  # (value, axis, start, stop) -> the slice already made

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}#{self.count}"

    def const(self, base: str, value) -> str:
        name = self.fresh(base)
        self.named_const(name, value)
        return name

    def named_const(self, name: str, value) -> None:
        """An initializer ``name`` holding ``value`` as it is (a 0-d scalar stays 0-d). A slice of
        a larger array is copied, so that the whole weight it was cut from is not kept."""
        v = np.asarray(value)
        base = v.base
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        if isinstance(base, np.ndarray) and base.nbytes > v.nbytes:
            v = v.copy()
        self.inits.append((name, v))

    def node(self, op: str, inputs: list[str], base: str, **attrs) -> str:
        out = self.fresh(base)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def slice(self, x: str, axis: int, start: int, stop: int, length: int) -> str:
        """Elements [start, stop) along ``axis`` of ``x`` (which has ``length`` there)."""
        if start == 0 and stop == length:
            return x
        hit = self.slices.get((x, axis, start, stop))
        if hit is not None:
            return hit
        self.slices[(x, axis, start, stop)] = out = self._slice(x, axis, start, stop)
        return out

    def _slice(self, x: str, axis: int, start: int, stop: int) -> str:
        base = f"{x.split('#')[0]}.slice"
        if self.opset < 10:
            return self.node("Slice", [x], base, starts=[start], ends=[stop], axes=[axis])
        return self.node("Slice", [x, self.const("starts", np.array([start], np.int64)),
                                   self.const("ends", np.array([stop], np.int64)),
                                   self.const("axes", np.array([axis], np.int64))], base)

    def pad(self, x: str, pads: list[int], base: str) -> str:
        """``x`` zero-padded by ``pads`` (begins then ends, every axis)."""
        if self.opset < 11:
            return self.node("Pad", [x], base, pads=[int(p) for p in pads], mode="constant")
        return self.node("Pad", [x, self.const("pads", np.array(pads, np.int64))], base)

    def resize_inputs(self, x: str, scales: str) -> list[str]:
        """The inputs of a Resize by ``scales`` in the opset's form: (X, scales) at 10, (X, roi,
        scales) at 11-12, where roi is required (an empty tensor), (X, '', scales) from 13."""
        if self.opset < 11:
            return [x, scales]
        if self.opset < 13:
            return [x, self.const("roi", np.zeros(0, np.float32)), scales]
        return [x, "", scales]


class _Builder:
    def __init__(self, source: ModelSource, first: int, last: int, axis: str, part: PartGeometry, tag: str):
        self.src = source
        self.graph = source.graph
        self.first, self.last, self.axis, self.part = first, last, axis, part
        self.g = _Graph(tag, source.opset)
        self.local: dict[str, _Local] = {}
        self.emitted: dict[tuple, dict[str, str]] = {}  # (node, its inputs) -> its renamed outputs
        self.bound: set[str] = set()  # outer-scope names bound for subgraphs
        self.dequantized: dict[str, str] = {}  # quantised weight -> its DequantizeLinear output here

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
        self.bind_outer(node, rename)
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

    def bind_outer(self, node: onnx.NodeProto, rename: dict[str, str]) -> None:
        """Give the tensors an If / Loop body reads from the enclosing graph their original names
        in the sub-model (an Identity of the local value, or the constant itself)."""
        from milp_planner.deploy.source import _outer_reads

        for t in _outer_reads(node):
            if t in self.bound:
                continue
            self.bound.add(t)
            if t in self.src.const:
                self.g.named_const(t, self.src.value(t))
            elif t in rename:
                self.g.nodes.append(helper.make_node("Identity", [rename[t]], [t], name=self.g.fresh(t)))
            else:
                raise PlannerError(f"deploy: node '{node.name}' ({node.op_type}) reads '{t}' in a subgraph, "
                                   f"which its stage does not hold")

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
            value_outs.append(helper.make_tensor_value_info(name, self.src.elem_type(t),
                                                            region_shape(g.shape(t), own)))
        value_ins = [helper.make_tensor_value_info(p.name, self.src.elem_type(p.tensor),
                                                   region_shape(g.shape(p.tensor), p.region))
                     for p in inputs]
        # the initializers stay arrays (SubModel.weights); helper.make_graph / make_model would
        # copy every node and value twice, so the model is built in place
        model = onnx.ModelProto()
        model.ir_version = self.src.model.ir_version or 8
        model.producer_name = "milp-planner deploy"
        model.opset_import.append(helper.make_opsetid("", self.src.opset))
        model.opset_import.extend(o for o in self.src.model.opset_import if o.domain not in ("", "ai.onnx"))
        model.functions.extend(self.src.model.functions)
        graph = model.graph
        graph.name = self.g.prefix
        graph.node.extend(self.g.nodes)
        graph.input.extend(value_ins)
        graph.output.extend(value_outs)
        return SubModel(model, inputs, outputs, self.g.inits)

    def const_input(self, i: str, slicer=None) -> str:
        """A constant operand in the sub-model: its value (through ``slicer``), or, for a quantised
        weight (``DequantizeLinear`` of constants) used whole, that node on its integer data, so
        that onnxruntime fuses the group into the same integer kernel as in the whole model."""
        v = self.src.value(i)
        sliced = slicer(v) if slicer is not None else v
        dq = self.src.producer.get(i)
        if (dq is not None and dq.op_type == "DequantizeLinear" and dq.domain in ("", "ai.onnx")
                and sliced.shape == v.shape and i not in self.src.initializers):
            hit = self.dequantized.get(i)
            if hit is None:
                r = {j: self.g.const(j, self.src.value(j)) for j in dq.input if j}
                self.copy(dq, r)
                hit = self.dequantized[i] = r[dq.output[0]]
            return hit
        return self.g.const(i, sliced)

    def _dequant(self, ln: LayerNodes, name: str, x: str) -> str:
        """``x`` through the layer's DequantizeLinear ``name`` when ``name`` is one of its prefix
        outputs (the front of a QDQ group), else ``x``."""
        p = ln.prefix.get(name)
        if p is None:
            return x
        r = {p.input[0]: x}
        for i in p.input[1:]:
            if i and i in ln.consts:
                r[i] = self.g.const(i, self.src.value(i))
        self.copy(p, r)
        return r[p.output[0]]

    def _emit(self, ln: LayerNodes, rename: dict[str, str], special: onnx.NodeProto | None, slicer,
              sig=None) -> str:
        """Copy the layer's nodes except ``special`` (already emitted), constants through ``slicer``.

        A node already emitted in this sub-model on the same values for the same rows or
        channels ``sig`` (another used output of a multi-output node is a layer of its own) is
        not emitted again: its outputs are reused."""
        skip = {id(special)} if special is not None else set()
        if special is not None:
            skip.update(id(p) for p in ln.prefix.values())  # emitted with the root (_dequant)
        for n in ln.nodes:
            if id(n) in skip:
                continue
            key = (id(n), tuple("" if i in ln.consts else rename.get(i, i) for i in n.input), sig)
            done = self.emitted.get(key) if sig is not None else None
            if done is not None:
                rename.update(done)
                continue
            local_rename = dict(rename)
            for k, i in enumerate(n.input):
                if i and i in ln.consts:
                    local_rename[i] = self.const_input(i, lambda v, n=n, k=k: slicer(n, k, v))
            self.copy(n, local_rename)
            for o in n.output:
                if o:
                    rename[o] = local_rename[o]
            self.emitted[key] = {o: rename[o] for o in n.output if o}
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
            return self._emit(ln, rename, None, h_slicer, sig=(a, b))

        root = ln.root
        front = ln.front
        x_name = next(i for i in root.input if i in front)
        t = front[x_name]
        h_in = g.tensor_rows(t)
        lo, hi = input_rows(layer.rowdep, (a, b), h_in)
        x = self._dequant(ln, x_name, self.rows_of(t, (lo, hi)))
        for i in front:
            rename[i] = x
        out = None
        if kind == "window":
            out = self.window_root(root, ln, layer, (a, b), (lo, hi), h_in, x)
        elif kind == "resize":
            out = self.resize_root(root, ln, layer, (a, b), (lo, hi), h_in, x)
        elif kind == "transpose":
            out = self.transpose_root(root, ln, layer, (a, b), (lo, hi), x)
        if out is None:  # embed the slice in a zero tensor of full height
            full = self.g.pad(x, [0, 0, lo, 0, 0, 0, h_in - hi, 0], "embed")
            rename_root = dict(rename)
            for i in front:
                rename_root[i] = full
            for k, i in enumerate(root.input):
                if i and i in ln.consts:
                    rename_root[i] = self.const_input(i)
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
                r[i] = self.const_input(i)
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
        r = self._root_consts(root, ln, {i: x for i in ln.front})
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
        front = ln.front
        shape_in = self.graph.shape(front[next(i for i in root.input if i in front)])
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
        r = self._root_consts(root, ln, {i: x for i in ln.front})
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
            y = self._emit_root(root, r, self.g.resize_inputs(x, scales))
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
        r = self._root_consts(root, ln, {i: x for i in ln.front})
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
        front = ln.front
        x_name = next(i for i in root.input if i in front)
        t = front[x_name]
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
        ins[0] = self._dequant(ln, root.input[0], ins[0])
        if root.input[0] not in front:
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


def check_loadable(data, what: str, whole: Path | None = None) -> None:
    """Refuse a sub-model (serialized, or the ``Path`` of its file) that onnxruntime cannot load,
    naming ``what`` and the cause; ``whole``: the model's file, loaded only then, to say whether
    the model itself loads (if not, the model is invalid, not its split).

    ``deploy`` calls it on every sub-model before it reports success, so a folder that cannot
    run is an error at deploy time, not at ``run``. Without onnxruntime installed nothing is
    checked (the folder is then checked when it runs)."""
    reason = load_error(data)
    if reason is None:
        return
    msg = f"deploy: {what}: onnxruntime cannot load the sub-model ({reason})"
    if whole is not None and whole.is_file() and (own := load_error(whole)) is not None:
        msg += f"; nor the model itself, so the model is invalid, not its split ({own[:200]})"
    raise PlannerError(msg)


def load_error(data) -> str | None:
    """Why onnxruntime cannot load the model (serialized, or the ``Path`` of its file), in one
    line; None when it loads or onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # loading is all this checks: no thread pool, no memory arena, and no pre-packed copy of the
    # weights (which costs about the sub-model's weights again)
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.enable_cpu_mem_arena = False
    so.add_session_config_entry("session.disable_prepacking", "1")
    try:
        ort.InferenceSession(str(data) if isinstance(data, Path) else data, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several types; one line names the cause
        lines = [x.strip() for x in str(e).splitlines() if x.strip()]
        return (lines[0] if lines else type(e).__name__)[:300]
    return None


def numpy_dtype_names(source: ModelSource, tensors) -> dict[str, str]:
    """``tensor -> numpy dtype name`` for the tensors in ``tensors`` that are not float32."""
    out = {}
    for t in tensors:
        et = source.elem_type(t)
        if et != TensorProto.FLOAT:
            out[t] = _carried_dtype(t, et)
    return out


def _carried_dtype(tensor: str, elem_type: int) -> str:
    """The numpy name of a tensor's element type, or ``PlannerError`` for one that the workers
    cannot carry between devices or feed (strings, complex numbers)."""
    from milp_planner.deploy.manifest import DTYPES

    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        name = TensorProto.DataType.Name(elem_type).lower()
    if name not in DTYPES:
        raise PlannerError(f"deploy: tensor '{tensor}' holds {TensorProto.DataType.Name(elem_type).lower()} "
                           f"elements; a deployment carries and feeds only {', '.join(DTYPES)} tensors")
    return name

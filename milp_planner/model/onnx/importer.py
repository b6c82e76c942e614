"""Layer conversion: ONNX nodes -> folded layers of a ``LayerGraph`` (docs/model.md section 2).

Constant-only nodes (weights, shapes, weight preprocessing) are not layers; Identity and
Dropout are aliases; activations, BatchNormalization and bias Add/Mul fold into the single
producer they follow; each remaining node becomes one layer with its shape, work,
parameters and row dependency.
"""

from __future__ import annotations

from math import prod

import onnx
from onnx import helper

from milp_planner.errors import PlannerError
from milp_planner.model.graph import Layer, LayerGraph
from milp_planner.model.onnx.counting import node_params, work
from milp_planner.model.onnx.nodes import Node, PendingLayer, constant_node_shape, subgraph_inputs
from milp_planner.model.onnx.ops import ALIAS_OPS, FOLD_BIAS, FOLD_UNARY, KNOWN, STATIC_OPS, WEIGHT_OPS
from milp_planner.model.onnx.patterns import match_patterns
from milp_planner.model.onnx.rowdeps import rowdep
from milp_planner.model.onnx.shapes import fmt_shape, infer_model
from milp_planner.model.onnx.tensors import Tensors


class Importer:
    """One import of one model: ``Importer(model, label, name, input_shape).run()``."""

    def __init__(self, model: onnx.ModelProto, label: str, gname: str, input_shape):
        self.model = model
        self.label = label
        self.gname = gname
        g = model.graph
        init_names = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
        self.act_graph_inputs = [vi.name for vi in g.input if vi.name not in init_names]
        self.t = Tensors(model, infer_model(model, label, input_shape, self.act_graph_inputs), label)
        self.graph_outputs = [o.name for o in g.output]
        self.dequantized: set[str] = set()  # outputs of DequantizeLinear of activations (QDQ fronts)
        self.alias: dict[str, str] = {}  # Identity/Dropout outputs and QDQ fronts -> the tensor they copy

    def run(self) -> LayerGraph:
        """The layer graph: constants and aliases set aside, patterns matched, nodes folded."""
        nodes = self._collect_nodes()
        for n in nodes:
            n.act = [self._resolve(i) for i in n.inputs if i and self._resolve(i) not in self.t.const]
            n.first = self._resolve(n.inputs[0]) if n.inputs and n.inputs[0] else ""
        gouts = {self._resolve(o) for o in self.graph_outputs}
        nodes = match_patterns(nodes, gouts)

        consumers: dict[str, int] = {}
        for n in nodes:
            for t in dict.fromkeys(n.act):
                consumers[t] = consumers.get(t, 0) + 1

        pending, owner = self._fold(nodes, consumers, gouts)
        self._name_copied_outputs(pending, owner)

        def final(t: str) -> str:
            pid = owner.get(t)
            return pending[pid].out if pid is not None else t

        outputs = self._outputs(owner, final)
        inputs = self._input_shapes(pending, outputs)
        if not pending:
            raise PlannerError(f"{self.label}: no layers: every node computes constants or copies an input")
        layers = [self.make_layer(i, pl, final) for i, pl in enumerate(pending)]
        return LayerGraph(name=self.gname, layers=layers, inputs=inputs, outputs=outputs,
                          warnings=list(self.t.warnings))

    def _resolve(self, t: str) -> str:
        """The tensor ``t`` stands for once aliases (Identity, Dropout, QDQ fronts) are followed."""
        while t in self.alias:
            t = self.alias[t]
        return t

    def _collect_nodes(self) -> list[Node]:
        """The graph's nodes that are not constants or aliases, with subgraph inputs added to their inputs."""
        nodes: list[Node] = []
        for p in self.model.graph.node:
            n = Node(p.op_type, p.domain or "", p.name, list(p.input), list(p.output), p)
            extra = subgraph_inputs(p) if any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in p.attribute
            ) else []
            n.inputs += [i for i in extra if i not in n.inputs]
            if not self._set_aside(n, p):
                nodes.append(n)
        return nodes

    def _set_aside(self, n: Node, p: onnx.NodeProto) -> bool:
        """Is ``n`` a constant, an alias or a QDQ front (recorded in ``self.t`` or ``self.alias``), not a layer?"""
        std = n.standard
        real_inputs = [i for i in n.inputs if i]
        if (std and n.op in STATIC_OPS) or all(self._resolve(i) in self.t.const for i in real_inputs):
            # not a layer: a weight, a shape, or a computation on constants only
            self.t.const.update(o for o in n.outputs if o)
            if std and n.op == "Constant" and n.outputs:
                self.t.const_nodes[n.outputs[0]] = p
                if self.t.known(n.outputs[0]) is None:
                    self.t.shapes[n.outputs[0]] = constant_node_shape(p)
            return True
        if std and n.op in ALIAS_OPS and real_inputs:
            for o in n.outputs[:1]:
                self.alias[o] = n.inputs[0]
            return True
        if std and n.op == "DequantizeLinear" and n.outputs and n.outputs[0] not in self.graph_outputs:
            # the front of a QDQ group (DequantizeLinear -> op -> QuantizeLinear): it belongs
            # to each op reading it, so that layers exchange the quantised tensor and a
            # deployed group is the one onnxruntime fuses into an integer kernel
            self.alias[n.outputs[0]] = n.inputs[0]
            self.dequantized.add(n.outputs[0])
            return True
        return False

    def _fold(self, nodes: list[Node], consumers: dict[str, int],
              gouts: set[str]) -> tuple[list[PendingLayer], dict[str, int]]:
        """The pending layers, and the pending layer owning each tensor, once foldable nodes are folded."""
        pending: list[PendingLayer] = []
        owner: dict[str, int] = {}
        for n in nodes:
            if self.foldable(n, consumers, gouts) and self._fold_into_producer(n, pending, owner, consumers, gouts):
                continue
            if not n.outputs or not n.outputs[0]:
                continue  # produces nothing usable
            # one layer per output that is read (Split fan-out, a quantiser's value and scale, an
            # LSTM's sequence and state): each holds its own tensor; the node's work is charged to
            # the first, the others cost their output elements (docs/model.md section 2)
            used = [o for o in n.outputs if o and (consumers.get(o) or o in gouts)] or [n.outputs[0]]
            for o in n.outputs:
                if o:
                    owner[o] = len(pending)
            for k, o in enumerate(used):
                pl = PendingLayer(n, o)
                pl.secondary = k > 0
                owner[o] = len(pending)
                pending.append(pl)
        return pending, owner

    def _fold_into_producer(self, n: Node, pending: list[PendingLayer], owner: dict[str, int],
                            consumers: dict[str, int], gouts: set[str]) -> bool:
        """Fold ``n`` into the pending layer whose output only ``n`` reads, if it has one and shapes match."""
        x = n.act[0]
        pid = owner.get(x)
        if pid is None:
            return False
        pl = pending[pid]
        if (pl.out == x and not pl.multi and consumers.get(x, 0) == 1 and x not in gouts
                and n.outputs and self.t.known(x) is not None
                and self.t.known(x) == self.t.known(n.outputs[0])):
            pl.folded.append(n)
            pl.out = n.outputs[0]
            owner[pl.out] = pid
            return True
        return False

    def _name_copied_outputs(self, pending: list[PendingLayer], owner: dict[str, int]) -> None:
        """Let graph outputs that are Identity/Dropout copies name the output of their layer."""
        original_outs = set(self.graph_outputs)
        for o in self.graph_outputs:
            r = self._resolve(o)
            if r != o and r in owner:
                pl = pending[owner[r]]
                if pl.out == r and r not in original_outs:
                    pl.out = o
                    owner[o] = owner[r]

    def _outputs(self, owner: dict[str, int], final) -> list[str]:
        """The graph's outputs as layer outputs or graph inputs, warning about (and dropping) constant ones."""
        outputs: list[str] = []
        for o in self.graph_outputs:
            t = final(self._resolve(o))
            if t not in owner and t not in self.act_graph_inputs:
                self.t.warn(f"{self.label}: graph output '{o}' is a constant, not computed by any layer; ignored")
                continue
            if t not in outputs:
                outputs.append(t)
        return outputs

    def _input_shapes(self, pending: list[PendingLayer], outputs: list[str]) -> dict[str, tuple[int, ...]]:
        """The shape of every graph input with a known shape; one read or output without one is an error."""
        used: set[str] = set()
        for pl in pending:
            used.update(pl.root.act)
        inputs: dict[str, tuple[int, ...]] = {}
        for name in self.act_graph_inputs:
            s = self.t.known(name)
            if s is None:
                if name in used or name in outputs:
                    raise PlannerError(
                        f"{self.label}: input '{name}' has shape {fmt_shape(self.t.shape(name))}; "
                        f"fix its symbolic dims with an input shape (--input-shape or input_shape:)"
                    )
                continue
            inputs[name] = tuple(int(d) for d in s)
        return inputs

    def foldable(self, n: Node, consumers: dict[str, int], gouts: set[str]) -> bool:
        """Can ``n`` merge into the producer of its single activation input (its first input)?"""
        if not n.standard or len(n.act) != 1:
            return False
        if n.act[0] != n.first and n.op not in ("Add", "Mul"):  # c - x, c / x: not a bias
            return False
        if any(o and (consumers.get(o) or o in gouts) for o in n.outputs[1:]):
            return False  # e.g. the running statistics of a training-mode BatchNormalization, if used
        if n.op in FOLD_UNARY or n.op == "BatchNormalization":
            return True
        if n.op in FOLD_BIAS:
            return len([i for i in n.inputs if i]) == 2
        return False

    def make_layer(self, lid: int, pl: PendingLayer, final) -> Layer:
        """Layer ``lid`` from a pending layer; ``final`` maps a tensor to the output of its layer."""
        n = pl.root
        out_shape = self.t.known(pl.out)
        if out_shape is None and n.standard and n.op in ("If", "Loop", "Scan"):
            raise PlannerError(
                f"{self.label}: node '{n.display_name}' ({n.op}): the shape of its output '{pl.out}' "
                f"({fmt_shape(self.t.shape(pl.out))}) depends on the branch or iteration count taken at run "
                f"time; {n.op} is supported when its output shapes are static"
            )
        if out_shape is None and not n.standard and n.proto is not None \
                and f"{n.domain}.{n.op}" not in KNOWN:
            raise PlannerError(
                f"{self.label}: node '{n.display_name}': operator {n.op} of domain '{n.domain}' is not "
                f"supported (onnx's shape inference does not know it, nor does the importer; "
                f"its output '{pl.out}' has shape {fmt_shape(self.t.shape(pl.out))})"
            )
        if out_shape is None:
            raise PlannerError(
                f"{self.label}: the output '{pl.out}' of node '{n.display_name}' ({n.op}) has "
                f"shape {fmt_shape(self.t.shape(pl.out))} after shape inference; "
                f"give a fixed input shape or a model whose shapes can be inferred"
            )
        if any(d <= 0 for d in out_shape):
            raise PlannerError(
                f"{self.label}: the output '{pl.out}' of node '{n.display_name}' ({n.op}) is empty "
                f"{fmt_shape(out_shape)}; the input is too small for this model"
            )
        inputs = tuple(dict.fromkeys(final(t) for t in n.act))
        for t in n.act:
            if self.t.known(t) is None:
                raise PlannerError(
                    f"{self.label}: tensor '{t}' read by node '{n.display_name}' has shape "
                    f"{fmt_shape(self.t.shape(t))} after shape inference"
                )
        op = n.op if n.standard else f"{n.domain}.{n.op}"
        if pl.secondary:  # another output of a node whose work the layer of its first output carries
            macs, ops = 0, int(prod(out_shape))
        else:
            macs, ops = work(self.t, n, out_shape)
        params = sum(node_params(self.t, m, n.display_name) for m in ([] if pl.secondary else [n]) + pl.folded)
        dep = rowdep(self.t, n, out_shape)
        act_shapes = [self.t.known(t) for t in n.act]
        row_split = (len(out_shape) == 4 and bool(act_shapes)
                     and all(len(s) == 4 for s in act_shapes) and dep.kind != "none")
        weight_const = len(n.inputs) > 1 and bool(n.inputs[1]) and n.inputs[1] in self.t.const
        # a quantised group (its input dequantised) is not split by channels: a part would hold a
        # float slice of the weight, not the integer weight onnxruntime's fused kernel uses
        qdq = any(i in self.dequantized for i in n.inputs)
        # a part's channels are those of the region grid (milp_planner.space.geometry): axis 1 of
        # a rank-4 tensor, else the last axis, which is a Conv's output channels only at rank 4
        conv_rank_ok = n.op not in ("Conv", "ConvTranspose") or len(out_shape) == 4
        chan_split = n.op in WEIGHT_OPS and n.standard and weight_const and not qdq and conv_rank_ok
        groups = int(n.attr("group", 1)) if n.op in ("Conv", "ConvTranspose") else 1
        if op not in KNOWN and n.proto is not None:
            self.t.warn(
                f"{self.label}: unknown op {op} (node '{n.display_name}'): treated as one "
                f"layer that is not splittable, with ops = output elements"
            )
        attrs = {}
        if n.proto is not None:
            for a in n.proto.attribute:
                if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
                              onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
                    v = helper.get_attribute_value(a)
                    if isinstance(v, bytes):
                        v = v.decode()
                    attrs[a.name] = list(v) if isinstance(v, (list, tuple)) else v
        if n.op in WEIGHT_OPS and len(n.inputs) > 1 and self.t.known(n.inputs[1]) is not None:
            attrs["weight_shape"] = list(self.t.known(n.inputs[1]))
        if n.members:
            attrs["pattern_nodes"] = [m.display_name for m in n.members]
        if pl.folded:
            attrs["folded_nodes"] = [f.display_name for f in pl.folded]
        if len([o for o in n.outputs if o]) > 1:
            attrs["outputs"] = [o for o in n.outputs if o]
            attrs["node_output"] = n.outputs.index(pl.out) if pl.out in n.outputs else 0
        return Layer(
            id=lid, name=n.display_name, op=op, inputs=inputs, output=pl.out,
            shape=tuple(int(d) for d in out_shape), macs=macs, ops=ops, params=params,
            rowdep=dep, row_splittable=row_split, channel_splittable=chan_split,
            groups=groups, folded=tuple(f.op for f in pl.folded), attrs=attrs,
        )

"""The importer's working view of ONNX nodes: a node with its resolved activation inputs,
and a layer under construction (a root node plus the nodes folded into it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import helper

from milp_planner.model.onnx.ops import STANDARD_DOMAINS


@dataclass
class Node:
    """An ONNX node (or a synthetic node standing for a multi-node activation pattern)."""

    op: str
    domain: str
    name: str
    inputs: list[str]
    outputs: list[str]
    proto: onnx.NodeProto | None  # None for a synthetic pattern node
    act: list[str] = field(default_factory=list)  # resolved activation inputs (with repeats)
    first: str = ""  # resolved first input
    members: list["Node"] = field(default_factory=list)  # nodes of a synthetic pattern

    @property
    def display_name(self) -> str:
        """The ONNX node name, else its first output's name (docs/model.md section 2)."""
        return self.name or (self.outputs[0] if self.outputs else self.op)

    @property
    def standard(self) -> bool:
        """Is the node in the default ONNX domain?"""
        return self.domain in STANDARD_DOMAINS

    def attr(self, key: str, default=None):
        """The value of attribute ``key`` (strings decoded), or ``default``."""
        if self.proto is None:
            return default
        for a in self.proto.attribute:
            if a.name == key:
                v = helper.get_attribute_value(a)
                return v.decode() if isinstance(v, bytes) else v
        return default


@dataclass
class PendingLayer:
    """A layer under construction: a root node plus the nodes folded into it."""

    root: Node
    out: str
    folded: list[Node] = field(default_factory=list)
    multi: bool = False  # other outputs of the root are used
    secondary: bool = False  # not the node's first used output: its work is charged elsewhere

def subgraph_inputs(node: onnx.NodeProto) -> list[str]:
    """Outer-scope tensors read inside the node's subgraphs (If, Loop, Scan bodies)."""
    found: list[str] = []

    def walk(g: onnx.GraphProto, outer_defined: set[str]) -> None:
        defined = set(outer_defined)
        defined.update(i.name for i in g.input)
        defined.update(t.name for t in g.initializer)
        for n in g.node:
            for i in n.input:
                if i and i not in defined:
                    found.append(i)
            for a in n.attribute:
                for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    walk(sg, defined)
            defined.update(n.output)

    for a in node.attribute:
        for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            walk(sg, set())
    return list(dict.fromkeys(found))



def constant_node_shape(p: onnx.NodeProto):
    for a in p.attribute:
        if a.name == "value":
            return tuple(a.t.dims)
        if a.name in ("value_float", "value_int", "value_string"):
            return ()
        if a.name in ("value_floats", "value_ints", "value_strings"):
            return (len(helper.get_attribute_value(a)),)
    return None


"""Multi-node activation patterns folded like one activation: the Erf GELU and x * Sigmoid(x).

The Erf GELU (``Div -> Erf -> Add -> Mul(x, .) [-> Mul 0.5]``) becomes a ``Gelu`` node;
``Mul(x, Sigmoid(x))`` / ``Mul(x, HardSigmoid(x))`` become ``Swish`` / ``HardSwish``.
"""

from __future__ import annotations

from milp_planner.model.onnx.nodes import Node


def match_patterns(nodes: list[Node], gouts: set[str]) -> list[Node]:
    """Replace Erf-GELU and x*Sigmoid(x) subgraphs by one synthetic node each."""
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o:
                producer[o] = i
        for t in dict.fromkeys(n.act):
            readers.setdefault(t, []).append(i)

    def std(n: Node, op: str) -> bool:
        return n.op == op and n.domain in ("", "ai.onnx")

    def one_const_operand(n: Node) -> bool:
        return len(n.inputs) == 2 and len(n.act) == 1

    def sole_reader(t: str) -> int | None:
        r = readers.get(t, [])
        return r[0] if len(r) == 1 and t not in gouts else None

    replaced: dict[int, Node] = {}
    removed: set[int] = set()
    for i, n in enumerate(nodes):
        if i in removed:
            continue
        if std(n, "Erf") and len(n.act) == 1:
            di = producer.get(n.act[0])
            if di is None or di in removed or sole_reader(n.act[0]) != i:
                continue
            d = nodes[di]
            if not ((std(d, "Div") or std(d, "Mul")) and one_const_operand(d)):
                continue
            x = d.act[0]
            ai = sole_reader(n.outputs[0])
            if ai is None or not std(nodes[ai], "Add") or not one_const_operand(nodes[ai]):
                continue
            mi = sole_reader(nodes[ai].outputs[0])
            if mi is None or not std(nodes[mi], "Mul") or len(nodes[mi].act) != 2:
                continue
            m = nodes[mi]
            other = m.act[0] if m.act[1] == nodes[ai].outputs[0] else m.act[1]
            members = [di, i, ai]
            if other == x:  # x * (1 + erf) [* 0.5]
                if sorted(readers.get(x, [])) != sorted({di, mi}):
                    continue
                members.append(mi)
                end = mi
                hi = sole_reader(m.outputs[0])
                if hi is not None and std(nodes[hi], "Mul") and one_const_operand(nodes[hi]):
                    members.append(hi)
                    end = hi
            else:  # (x * 0.5) * (1 + erf)
                h0 = producer.get(other)
                if (h0 is None or not std(nodes[h0], "Mul") or not one_const_operand(nodes[h0])
                        or nodes[h0].act[0] != x or sole_reader(other) != mi
                        or sorted(readers.get(x, [])) != sorted({di, h0})):
                    continue
                members += [h0, mi]
                end = mi
            members = sorted(set(members))
            if any(j in removed for j in members):
                continue
            syn = Node("Gelu", "", d.name, [x], [nodes[end].outputs[0]], None, act=[x], first=x,
                        members=[nodes[j] for j in members])
            removed.update(members)
            replaced[end] = syn
        elif (std(n, "Sigmoid") or std(n, "HardSigmoid")) and len(n.act) == 1:
            x = n.act[0]
            mi = sole_reader(n.outputs[0])
            if mi is None or mi in removed or not std(nodes[mi], "Mul"):
                continue
            m = nodes[mi]
            if sorted(m.act) != sorted([x, n.outputs[0]]) or sorted(readers.get(x, [])) != sorted({i, mi}):
                continue
            op = "Swish" if n.op == "Sigmoid" else "HardSwish"
            syn = Node(op, "", n.name, [x], [m.outputs[0]], None, act=[x], first=x, members=[n, m])
            removed.update({i, mi})
            replaced[mi] = syn
    if not replaced:
        return nodes
    out = []
    for i, n in enumerate(nodes):
        if i in replaced:
            out.append(replaced[i])
        elif i not in removed:
            out.append(n)
    return out


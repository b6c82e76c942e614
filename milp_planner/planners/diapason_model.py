"""The DIAPASON relaxation (DATE 2024), built on this project's geometry and cost models.

``build_relaxation(instance, ...)`` enumerates the partition opportunities (POs) of every
layer and precomputes every cost the paper's loss (equations 1 to 16) needs, priced with
``evaluator.pricer(instance)`` (``layer_time`` for sublayer compute, ``link_time`` for every
transfer). ``Relaxation.loss(W_dev, W_l)`` is the relaxed loss as a PyTorch scalar;
``Relaxation.loss_from_probs(P_dev, P_l)`` takes the selector probabilities directly (one-hot
probabilities give the cost of one discrete choice, as in the tests); ``decode`` turns the
argmax choice into a ``Plan`` that passes ``check_plan``. docs/diapason.md has the equations
as implemented, and the planner module (``diapason.py``) the options.

This module needs PyTorch only in the functions that build tensors; ``torch`` is passed in
by the caller, so importing it stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import sqrt

from milp_planner.errors import PlannerError
from milp_planner.cost.evaluator import EXTERNAL, pricer
from milp_planner.space.geometry import (
    NOTHING,
    Region,
    StageGeometry,
    intersect_cells,
    round_half_up,
)
from milp_planner.model.graph import input_rows, length
from milp_planner.instance import Instance
from milp_planner.space.plan import Part, Plan, Stage
from milp_planner.space.cuts import capacity_cuts, equal_cuts, ranges_from_cuts, speeds

UNIT_SCALE = {"s": 1.0, "ms": 1000.0}


@dataclass
class PO:
    """One partition opportunity of one layer.

    ``kind``: ``whole`` (the unpartitioned PO), ``rows`` / ``channels`` (the partitioned PO
    with one sublayer per device), or ``fusion`` (generated from a parent chain ending at
    ``root_layer``). ``ranges`` are the root PO's part ranges on the root layer's rows (or
    channels); ``None`` for a whole PO. Fusion POs share the root's device selectors
    (``group``), sublayer j of a fusion PO computing what sublayer j of its chain needs.
    """

    index: int
    layer: int
    kind: str
    axis: str  # axis of the stage this PO stands for: none | rows | channels
    group: int  # which W_dev set (shared along a fusion chain)
    root: int  # index of the basic PO ending the chain (itself for a basic PO)
    root_layer: int
    depth: int  # root_layer - layer
    ranges: tuple  # root's ranges, one per sublayer
    init_devices: tuple[int, ...]  # heuristic initialisation: sublayer j -> this device
    computed: list[Region] = field(default_factory=list)  # per sublayer, of this layer's output
    fraction: list[Fraction] = field(default_factory=list)
    owns: list[Region | None] = field(default_factory=list)  # per sublayer (exit tensors only)
    needs: list[dict[str, Region]] = field(default_factory=list)  # per sublayer, per input tensor

    @property
    def n_sub(self) -> int:
        return len(self.ranges)

    def describe(self) -> str:
        if self.kind == "fusion":
            return f"fusion(root layer {self.root_layer}, depth {self.depth}, {self.axis})"
        return self.kind


@dataclass
class Relaxation:
    """The POs of every layer and the cost tensors of the loss (numpy-free, torch tensors)."""

    instance: Instance
    objective: str
    unit: str
    fusionlimit: int
    parttype: str
    n_parts: int
    pos: list[PO]
    layer_pos: list[list[int]]  # layer -> indices of its POs (basic first)
    n_groups: int
    s_max: int
    tensors: dict  # name -> torch tensor (see build_relaxation)
    torch: object

    # -- parameters -------------------------------------------------------------------------
    def init_weights(self, weightsinit: str, generator, heuristic_logit: float = 1.0,
                     heuristic_whole: str = "uniform"):
        """(W_dev [G, S, D], W_l [L, P]) as float64 leaf tensors, per the paper's weightsinit.

        random: W_dev ~ U[0, 1] (paper). heuristic: sublayer j of each partitioned PO on its
        j-th device (logit ``heuristic_logit``, others 0); the unpartitioned PO has no sublayers
        to spread, so its selector starts uniform (``heuristic_whole="uniform"``) or on the first
        device (``"first"``, the literal "sequential" reading). Fusion POs share their parent's.
        W_l starts at 0 (uniform over the layer's POs) in both modes; the paper does not say
        how W_l is initialised.
        """
        torch = self.torch
        n_dev = len(self.instance.devices)
        if weightsinit == "random":
            w_dev = torch.rand((self.n_groups, self.s_max, n_dev), generator=generator, dtype=torch.float64)
        elif weightsinit == "heuristic":
            w_dev = torch.zeros((self.n_groups, self.s_max, n_dev), dtype=torch.float64)
            if heuristic_whole not in ("uniform", "first"):
                raise PlannerError(f"diapason: heuristic_whole must be uniform or first (got {heuristic_whole!r})")
            for p in self.pos:
                if p.kind == "fusion" or (p.kind == "whole" and heuristic_whole == "uniform"):
                    continue
                for j, d in enumerate(p.init_devices):
                    w_dev[p.group, j, d] = heuristic_logit
        else:
            raise PlannerError(f"diapason: weightsinit must be random or heuristic (got {weightsinit!r})")
        w_l = torch.zeros(self.tensors["l_mask"].shape, dtype=torch.float64)
        return w_dev.requires_grad_(True), w_l.requires_grad_(True)

    # -- the loss -----------------------------------------------------------------------------
    def probs(self, w_dev, w_l):
        torch = self.torch
        p_dev = torch.softmax(w_dev, dim=-1)
        p_l = torch.softmax(w_l + self.tensors["l_mask"], dim=-1)
        return p_dev, p_l

    def loss(self, w_dev, w_l):
        """Equation (16) with softmax selectors, in ``self.unit``."""
        p_dev, p_l = self.probs(w_dev, w_l)
        return self.loss_from_probs(p_dev, p_l)

    def loss_from_probs(self, p_dev, p_l):
        """Equation (16) for given selector probabilities P_dev [G, S, D] and P_l [L, P]."""
        torch = self.torch
        t = self.tensors
        pp = p_dev[t["po_group"]]  # [N, S, D]: each PO's sublayer device probabilities
        # (3) sublayer costs
        ls = (pp * t["c_sub"]).sum(-1)  # [N, S]
        l_sub = ls.sum(-1)
        if self.objective == "latency":
            # (4)-(6) superposition penalty: X_ij = |p_i - p_j|_2 / sqrt(2) in [0, 1]
            diff = pp[:, :, None, :] - pp[:, None, :, :]
            sq = (diff * diff).sum(-1)
            dist = torch.where(sq > 0, torch.sqrt(torch.clamp(sq, min=1e-300)), torch.zeros_like(sq))
            x = dist / sqrt(2.0)
            v = x * torch.minimum(ls[:, :, None], ls[:, None, :])
            v = torch.where(t["pair_mask"], v, torch.full_like(v, float("inf")))
            vmin = v.min(dim=-1).values
            vmin = torch.where(t["row_mask"], vmin, torch.zeros_like(vmin))
            l_part = l_sub - vmin.sum(-1)  # (1)
        else:
            l_part = l_sub  # (2)
        # (12), (14): input and output movement of each PO
        l_io = (pp * t["c_io"]).sum((-1, -2))
        # (7), (13), (15): weighted by the layer's PO selector
        per_po = l_part + l_io
        layer_terms = (p_l * per_po[t["l_index"]]).sum()
        total = layer_terms
        if t["e_ov"] is not None:
            # (8)-(11): for each edge (a, b), PO pairs (m, n), sublayer pairs (j, i), devices (k, l)
            a = pp[t["e_a_po"]]  # [E, P, S, D]
            b = pp[t["e_b_po"]]
            q_bw = torch.einsum("emjk,kl,enil->emnji", a, t["link_per_byte"], b)
            q_lat = torch.einsum("emjk,kl,enil->emnji", a, t["link_per_msg"], b)
            mov = (t["e_ov"] * q_bw + t["e_nz"] * q_lat).sum((-1, -2))  # [E, P, P]
            wa = p_l[t["e_a_layer"]]
            wb = p_l[t["e_b_layer"]]
            total = total + (wa[:, :, None] * wb[:, None, :] * mov).sum()
        return total

    # -- decoding -----------------------------------------------------------------------------
    def choices(self, p_dev, p_l) -> tuple[list[int], dict[int, list[int]]]:
        """Argmax decoding: the PO of every layer, and the device of every sublayer per group."""
        po_of_layer = []
        for lid, idx in enumerate(self.layer_pos):
            row = p_l[lid, : len(idx)]
            po_of_layer.append(idx[int(self.torch.argmax(row))])
        devices = {}
        for p in self.pos:
            if p.group not in devices:
                devices[p.group] = [int(self.torch.argmax(p_dev[p.group, j])) for j in range(p.n_sub)]
        return po_of_layer, devices

    def decode(self, p_dev, p_l) -> tuple[Plan, list[str]]:
        """The plan of the argmax choice, repaired into a valid plan (rules in docs/diapason.md).

        Returns the plan and a list of the repairs made (human-readable).
        """
        po_of_layer, devices = self.choices(p_dev, p_l)
        g = self.instance.graph
        repairs: list[str] = []
        stages: list[Stage] = []
        lid = 0
        n = len(g.layers)
        while lid < n:
            p = self.pos[po_of_layer[lid]]
            last = lid
            if p.kind == "fusion":
                # extend along the chain while the next layer chose the same chain's next PO
                while last < p.root_layer:
                    q = self.pos[po_of_layer[last + 1]]
                    if q.root != p.root or q.depth != p.root_layer - (last + 1):
                        break
                    last += 1
                if last < p.root_layer:
                    root_desc = self.pos[p.root].describe()
                    repairs.append(
                        f"layers {lid}-{last}: fusion chain of layer {p.root_layer} ({root_desc}) without its "
                        f"parent selected -> stage ending at layer {last}, cut at the parent's fractions")
            stages.append(self._stage(lid, last, p, devices[p.group], p_dev, repairs))
            lid = last + 1
        return Plan(self.instance.name, stages), repairs

    def _stage(self, first: int, last: int, p: PO, devs: list[int], p_dev, repairs: list[str]) -> Stage:
        names = self.instance.device_names
        g = self.instance.graph
        if p.axis == "none":
            return Stage(first, last, "none", (Part(names[devs[0]]),))
        root_layer = self.pos[p.root].layer
        ranges = list(p.ranges)
        if p.axis == "rows" and last != root_layer:
            h_root, h_last = g.layers[root_layer].rows, g.layers[last].rows
            ranges = [(round_half_up(a * h_last, h_root), round_half_up(b * h_last, h_root)) for a, b in ranges]
        # sublayers: (range, device, probability of that device); empty ranges are dropped
        subs = [(r, devs[j], float(p_dev[p.group, j, devs[j]])) for j, r in enumerate(ranges) if r[0] < r[1]]
        # runs of consecutive sublayers on one device become one part
        runs: list[list] = []
        for r, d, pr in subs:
            if runs and runs[-1][1] == d and runs[-1][0][1] == r[0]:
                runs[-1][0] = (runs[-1][0][0], r[1])
                runs[-1][2] += pr
            else:
                runs.append([r, d, pr])
        if len(runs) < len(subs):
            repairs.append(f"layers {first}-{last}: adjacent sublayers on one device merged into one part")
        # a device holding several non-adjacent runs keeps the most probable one; each other
        # run goes to the most probable device (for its first sublayer) unused in the stage
        by_dev: dict[int, list[int]] = {}
        for k, (_, d, _) in enumerate(runs):
            by_dev.setdefault(d, []).append(k)
        moved = [k for d, ks in by_dev.items() if len(ks) > 1
                 for k in sorted(ks, key=lambda k: (-runs[k][2], k))[1:]]
        if moved:
            used = {runs[k][1] for k in range(len(runs)) if k not in moved}
            for k in sorted(moved):
                j = next(j for j, rr in enumerate(ranges) if rr[0] == runs[k][0][0] and rr[0] < rr[1])
                prob = [float(x) for x in p_dev[p.group, j]]
                order = sorted((d for d in range(len(names)) if d not in used), key=lambda d: (-prob[d], d))
                old = runs[k][1]
                runs[k][1] = order[0]
                used.add(order[0])
                repairs.append(f"layers {first}-{last}: rows/channels {list(runs[k][0])} moved from "
                               f"{names[old]} (which holds another part) to {names[order[0]]}")
        if len(runs) == 1:
            return Stage(first, last, "none", (Part(names[runs[0][1]]),))
        return Stage(first, last, p.axis, tuple(Part(names[d], tuple(r)) for r, d, _ in runs))


# ---------------------------------------------------------------------------------------------
# building


def _cuts(instance: Instance, extent: int, parttype: str, order: list[int]) -> list[tuple[int, int]]:
    k = len(order)
    if parttype == "capability":
        spd = speeds(instance)
        cuts = capacity_cuts(extent, [spd[d] for d in order])
    else:
        cuts = equal_cuts(extent, k)
    return ranges_from_cuts(cuts, extent)


def _layer_needs(instance: Instance, lid: int, rows) -> dict[str, Region]:
    """What a sublayer computing output rows ``rows`` of layer ``lid`` reads of each input."""
    g = instance.graph
    layer = g.layers[lid]
    out = {}
    for t in dict.fromkeys(layer.inputs):
        h, c = g.tensor_rows(t), g.tensor_channels(t)
        if not length(rows):
            out[t] = NOTHING
            continue
        iv = input_rows(layer.rowdep, rows, h) if layer.row_splittable else (0, h)
        out[t] = Region(iv, (0, c)) if length(iv) else NOTHING
    return out


def _fill_geometry(po: PO, instance: Instance, geo: StageGeometry) -> None:
    g = instance.graph
    lid = po.layer
    out_t = g.layers[lid].output
    if po.axis == "channels":
        parts = geo.parts(lid, lid, "channels", list(po.ranges))
        for part in parts:
            po.computed.append(part.computed.get(lid, NOTHING))
            po.fraction.append(part.fraction.get(lid, Fraction(0)))
            po.owns.append(part.owns.get(out_t))
            po.needs.append({t: part.needs.get(t, NOTHING) for t in dict.fromkeys(g.layers[lid].inputs)})
        return
    rng = [None] if po.axis == "none" else list(po.ranges)
    parts = geo.parts(lid, po.root_layer, po.axis, rng)
    for part in parts:
        comp = part.computed.get(lid, NOTHING)
        po.computed.append(comp)
        po.fraction.append(part.fraction.get(lid, Fraction(0)))
        po.owns.append(part.owns.get(out_t))
        po.needs.append(_layer_needs(instance, lid, comp.rows))


def enumerate_pos(instance: Instance, fusionlimit: int, parttype: str,
                  n_parts: int) -> tuple[list[PO], list[list[int]], int]:
    """Every PO of every layer (section IV of the paper). Returns (pos, layer_pos, n_groups)."""
    g = instance.graph
    geo = pricer(instance).geometry
    n_dev = len(instance.devices)
    spd = speeds(instance)
    # the devices of the partitioned PO: all (or the n_parts fastest), in index order
    order = sorted(sorted(range(n_dev), key=lambda d: (-spd[d], d))[:n_parts])
    axes = instance.search.axes
    pos: list[PO] = []
    layer_pos: list[list[int]] = [[] for _ in g.layers]
    n_groups = 0

    def add(**kw) -> PO:
        po = PO(index=len(pos), **kw)
        _fill_geometry(po, instance, geo)
        pos.append(po)
        layer_pos[po.layer].append(po.index)
        return po

    basics: list[PO] = []
    for layer in g.layers:
        lid = layer.id
        whole = add(layer=lid, kind="whole", axis="none", group=n_groups, root=len(pos), root_layer=lid, depth=0,
                    ranges=(None,), init_devices=(order[0],))
        n_groups += 1
        basics.append(whole)
        if len(order) < 2:
            continue
        for axis in ("rows", "channels"):
            if axis not in axes:
                continue
            if axis == "rows" and not layer.row_splittable:
                continue
            if axis == "channels" and not layer.channel_splittable:
                continue
            extent = layer.rows if axis == "rows" else layer.channels
            ranges = _cuts(instance, extent, parttype, order)
            keep = [(r, d) for r, d in zip(ranges, order) if r[0] < r[1]]  # drop empty slices
            if len(keep) < 2:
                continue
            po = add(layer=lid, kind=axis, axis=axis, group=n_groups, root=len(pos), root_layer=lid, depth=0,
                     ranges=tuple(r for r, _ in keep), init_devices=tuple(d for _, d in keep))
            n_groups += 1
            basics.append(po)
    # fusion POs: recursively below each parent, sharing its W_dev; a chain (parent included)
    # has at most fusionlimit layers, so 0 and 1 both mean no fusion
    for root in basics:
        if root.axis == "channels":
            continue  # a channel stage is one layer (docs/model.md)
        for depth in range(1, fusionlimit):
            lid = root.layer - depth
            if lid < 0:
                break
            if root.axis == "rows" and not g.layers[lid].row_splittable:
                break
            add(layer=lid, kind="fusion", axis=root.axis, group=root.group, root=root.index,
                root_layer=root.layer, depth=depth, ranges=root.ranges, init_devices=root.init_devices)
    return pos, layer_pos, n_groups


def _check_options(objective: str, unit: str, parttype: str, fusionlimit: int) -> None:
    """Raise PlannerError for an objective, loss unit, parttype or fusionlimit diapason does not take."""
    if objective not in ("latency", "energy"):
        raise PlannerError(f"diapason optimizes latency or energy, not {objective!r}")
    if unit not in UNIT_SCALE:
        raise PlannerError(f"diapason: loss_unit must be 's' or 'ms' (got {unit!r})")
    if parttype not in ("naive", "capability"):
        raise PlannerError(f"diapason: parttype must be naive or capability (got {parttype!r})")
    if fusionlimit < 0:
        raise PlannerError(f"diapason: fusionlimit must be >= 0 (got {fusionlimit})")


@dataclass
class _Pricing:
    """What one unit of compute or of one message costs: time, or energy for the energy objective."""

    pr: object  # evaluator.pricer(instance)
    pw: list[tuple[float, float, float]]  # per device: (compute, tx, rx) watts
    energy: bool

    def movement(self, src: int, dst: int, nbytes: int) -> float:
        """Cost of one message (time, or energy: tx of the sender + rx of the receiver)."""
        t = self.pr.link_time(src, dst, nbytes)
        if not self.energy or t == 0:
            return t
        w = (self.pw[src][1] if src != EXTERNAL else 0.0) + (self.pw[dst][2] if dst != EXTERNAL else 0.0)
        return w * t


def _sublayer_costs(instance: Instance, cost: _Pricing, pos: list[PO], s_max: int,
                    scale: float) -> tuple[list, list]:
    """(c_sub, c_io) [PO, S, D]: each sublayer's compute cost (3) and its input (12) and output (14) transfers."""
    g = instance.graph
    pr, pw, energy = cost.pr, cost.pw, cost.energy
    n_dev = len(instance.devices)
    src = instance.network.source.device if not instance.network.source.external else EXTERNAL
    sink = instance.network.sink.device if not instance.network.sink.external else EXTERNAL
    outputs = set(g.outputs)
    c_sub = [[[0.0] * n_dev for _ in range(s_max)] for _ in range(len(pos))]
    c_io = [[[0.0] * n_dev for _ in range(s_max)] for _ in range(len(pos))]
    for p in pos:
        layer = g.layers[p.layer]
        for j in range(p.n_sub):
            f = p.fraction[j]
            for d in range(n_dev):
                t = pr.layer_time(d, p.layer, f, "channels" if p.axis == "channels" else "rows") if f > 0 else 0.0
                c_sub[p.index][j][d] = (pw[d][0] * t if energy else t) * scale
            # (12) input: graph inputs read by this sublayer come from the source
            for t_name, need in p.needs[j].items():
                if g.producer(t_name) is not None or need.empty:
                    continue
                nb = pr.region_bytes(t_name, need.cells)
                for d in range(n_dev):
                    c_io[p.index][j][d] += (cost.movement(src, d, nb) if src != d else 0.0) * scale
            # (14) output: what the sublayer owns of a graph output goes to the sink
            if layer.output in outputs:
                own = p.owns[j] if p.owns[j] is not None else p.computed[j]
                nb = pr.region_bytes(layer.output, own.cells)
                for d in range(n_dev):
                    c_io[p.index][j][d] += (cost.movement(d, sink, nb) if sink != d else 0.0) * scale
    return c_sub, c_io


@dataclass
class _Edges:
    """(8)-(11): one entry per (producer layer a, consumer layer b, tensor)."""

    a_layer: list[int] = field(default_factory=list)
    b_layer: list[int] = field(default_factory=list)
    a_po: list[list[int]] = field(default_factory=list)
    b_po: list[list[int]] = field(default_factory=list)
    ov: list = field(default_factory=list)  # [P_a, P_b, S, S] bytes of the tensor sublayer i of b gets from j of a


def _overlap(pos: list[PO], layer_pos: list[list[int]], a: int, b: int, t_name: str, unit_b: int,
             p_max: int, s_max: int) -> list:
    """[P, P, S, S]: bytes of ``t_name`` that sublayer i of each PO of b reads from sublayer j of each PO of a."""
    ov = [[[[0.0] * s_max for _ in range(s_max)] for _ in range(p_max)] for _ in range(p_max)]
    for mi, m_idx in enumerate(layer_pos[a]):
        m = pos[m_idx]
        for ni, n_idx in enumerate(layer_pos[b]):
            n = pos[n_idx]
            if m.root == n.root:
                continue  # same fusion chain: the data stays on the device that computed it
            for j in range(m.n_sub):
                inside = m.kind == "fusion" and b <= m.root_layer
                have = m.computed[j] if inside or m.owns[j] is None else m.owns[j]
                if have.empty:
                    continue
                for i in range(n.n_sub):
                    need = n.needs[i].get(t_name, NOTHING)
                    cells = intersect_cells(have, need)
                    if cells > 0:
                        ov[mi][ni][j][i] = float(cells * unit_b)
    return ov


def _edges(instance: Instance, pr, pos: list[PO], layer_pos: list[list[int]], l_index: list[list[int]],
           p_max: int, s_max: int) -> _Edges:
    """The producer/consumer entries of every tensor exchanged between two layers, with their overlaps."""
    g = instance.graph
    edges = _Edges()
    for layer in g.layers:
        for t_name in dict.fromkeys(layer.inputs):
            a = g.producer(t_name)
            if a is None:
                continue
            b = layer.id
            unit_b = pr.unit_bytes(t_name)
            ov = _overlap(pos, layer_pos, a, b, t_name, unit_b, p_max, s_max)
            edges.a_layer.append(a)
            edges.b_layer.append(b)
            edges.a_po.append(l_index[a])
            edges.b_po.append(l_index[b])
            edges.ov.append(ov)
    return edges


def _link_costs(instance: Instance, pw: list[tuple[float, float, float]], energy: bool,
                scale: float) -> tuple[list, list]:
    """(per_byte, per_msg) [D, D]: the cost of one byte and of one message on each link (0 on the diagonal)."""
    n_dev = len(instance.devices)
    per_byte = [[0.0] * n_dev for _ in range(n_dev)]
    per_msg = [[0.0] * n_dev for _ in range(n_dev)]
    net = instance.network
    for k in range(n_dev):
        for l2 in range(n_dev):
            if k == l2:
                continue
            w = pw[k][1] + pw[l2][2] if energy else 1.0
            per_byte[k][l2] = w / net.bandwidth_Bps[k][l2] * scale
            per_msg[k][l2] = w * net.latency_s[k][l2] * scale
    return per_byte, per_msg


def _edge_tensors(torch, edges: _Edges) -> dict:
    """The edge entries as tensors (``e_nz`` marks the nonzero overlaps)."""
    f64 = torch.float64
    ov_t = torch.tensor(edges.ov, dtype=f64)
    return {
        "e_a_layer": torch.tensor(edges.a_layer, dtype=torch.long),
        "e_b_layer": torch.tensor(edges.b_layer, dtype=torch.long),
        "e_a_po": torch.tensor(edges.a_po, dtype=torch.long),
        "e_b_po": torch.tensor(edges.b_po, dtype=torch.long),
        "e_ov": ov_t,
        "e_nz": (ov_t > 0).to(f64),
    }


def build_relaxation(instance: Instance, torch, objective: str = "latency", unit: str = "ms",
                     fusionlimit: int = 2, parttype: str = "naive", n_parts: int | None = None) -> Relaxation:
    """Enumerate the POs and precompute every cost tensor of the loss (float64)."""
    _check_options(objective, unit, parttype, fusionlimit)
    scale = UNIT_SCALE[unit]
    pr = pricer(instance)
    n_dev = len(instance.devices)
    if n_parts is None:
        n_parts = min(n_dev, instance.search.max_parts)
    n_parts = max(1, min(n_parts, n_dev))
    pos, layer_pos, n_groups = enumerate_pos(instance, fusionlimit, parttype, n_parts)
    s_max = max(p.n_sub for p in pos)
    energy = objective == "energy"
    pw = [(float(d.power.compute_w), float(d.power.tx_w), float(d.power.rx_w)) for d in instance.devices]
    c_sub, c_io = _sublayer_costs(instance, _Pricing(pr, pw, energy), pos, s_max, scale)

    # PO selector layout: [L, P] with -inf on padding
    p_max = max(len(x) for x in layer_pos)
    l_index = [[x[k] if k < len(x) else 0 for k in range(p_max)] for x in layer_pos]
    l_mask = [[0.0 if k < len(x) else float("-inf") for k in range(p_max)] for x in layer_pos]

    pair_mask = [[[j > i and j < p.n_sub for j in range(s_max)] for i in range(s_max)] for p in pos]
    row_mask = [[i < p.n_sub - 1 for i in range(s_max)] for p in pos]

    edges = _edges(instance, pr, pos, layer_pos, l_index, p_max, s_max)
    per_byte, per_msg = _link_costs(instance, pw, energy, scale)

    f64 = torch.float64
    tens = {
        "po_group": torch.tensor([p.group for p in pos], dtype=torch.long),
        "c_sub": torch.tensor(c_sub, dtype=f64),
        "c_io": torch.tensor(c_io, dtype=f64),
        "l_index": torch.tensor(l_index, dtype=torch.long),
        "l_mask": torch.tensor(l_mask, dtype=f64),
        "pair_mask": torch.tensor(pair_mask, dtype=torch.bool),
        "row_mask": torch.tensor(row_mask, dtype=torch.bool),
        "link_per_byte": torch.tensor(per_byte, dtype=f64),
        "link_per_msg": torch.tensor(per_msg, dtype=f64),
        "e_ov": None,
    }
    if edges.ov:
        tens.update(_edge_tensors(torch, edges))
    return Relaxation(instance, objective, unit, fusionlimit, parttype, n_parts, pos, layer_pos, n_groups, s_max,
                      tens, torch)

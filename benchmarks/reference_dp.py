"""A plain numpy DP over a chain model's plan space, written apart from the product's pricing.

Issue #32 measures ``dp`` against "an independent numpy DP over the same space". This is that
DP, and it doubles as an independent check of the certified latency optimum on a real model: it
takes the space from ``formulations.options.stage_options`` (docs/model.md section 5: which
stages exist) and the layers from the importer (section 2), and computes everything else
itself from section 3 and 4 of docs/model.md: the halo rows of a fused stage, the fraction of
each layer a part computes, what each part receives from the owners of the stage's input, the
stage's ``tau``, the gather. None of ``milp_planner.cost`` or ``milp_planner.space.geometry``
is used.

Scope (anything else raises ``ValueError``): a chain (every layer reads the previous layer's
output, the first reads the one model input) of conv, pool, elementwise and resize rows, a
device source and sink, latency without caps; any cost model (linear, roofline, table, stage
overheads), either medium. The state at a boundary is who owns which box of the tensor
crossing it (in a chain no other tensor is live); the DP
prices every (state, option) pair of a boundary at once with numpy, and keeps per state the
least latency of a prefix reaching it.

    python benchmarks/reference_dp.py instances/fleet/vgg16-4dev-uncapped.yaml
"""

from __future__ import annotations

import sys
import time
from math import prod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from formulations.options import stage_options  # noqa: E402
from milp_planner.instance import Instance, load_instance  # noqa: E402


@dataclass(frozen=True)
class Layout:
    """One stage layout (device-free): per part the box of the stage's input it reads, the
    fraction of each of the stage's layers it computes, and the box of the output it owns."""

    need: tuple  # per part: (r0, r1, c0, c1) of the input tensor's grid
    frac: tuple  # per part: fractions of the stage's layers (0: nothing, no overhead)
    own: tuple  # per part: (r0, r1, c0, c1) of the output tensor's grid


def _grid(shape: tuple) -> tuple[int, int, int]:
    """(rows, channels, elements per cell) of a tensor (docs/model.md section 3, Regions)."""
    if len(shape) == 4:
        n, c, h, w = shape
        return h, c, n * w
    return 1, shape[-1], prod(shape[:-1])


def _window(dep, a: int, b: int, h_in: int) -> tuple[int, int]:
    """Input rows of output rows [a, b) of a conv or pool (section 2's table), clipped; an
    elementwise layer reads the same rows."""
    if b <= a:
        return 0, 0
    if dep.kind == "identity":
        return max(0, a), min(h_in, b)
    if dep.kind == "resize":  # by f = num / den: [floor(a / f), ceil(b / f)), one row wider if linear
        lo, hi = a * dep.factor_den // dep.factor_num, -(-b * dep.factor_den // dep.factor_num)
        if dep.linear:
            lo, hi = lo - 1, hi + 1
        return max(0, lo), min(h_in, hi)
    lo = a * dep.stride - dep.pad_top
    hi = (b - 1) * dep.stride - dep.pad_top + (dep.kernel - 1) * dep.dilation + 1
    return max(0, lo), min(h_in, hi)


class ChainSpace:
    """The instance's chain, checked against the reference's scope."""

    def __init__(self, instance: Instance):
        g = instance.graph
        self.instance, self.layers = instance, g.layers
        if len(g.inputs) != 1 or len(g.outputs) != 1:
            raise ValueError("the reference DP takes one model input and one output")
        prev = next(iter(g.inputs))
        self.in_shape = {0: g.inputs[prev]}
        for i, layer in enumerate(self.layers):
            if layer.inputs != (prev,):
                raise ValueError(f"layer {layer.name} does not read only the previous layer: not a chain")
            if layer.row_splittable and layer.rowdep.kind not in ("window", "identity", "resize"):
                raise ValueError(f"layer {layer.name}: row dependency {layer.rowdep.kind!r} is not covered")
            prev = layer.output
            self.in_shape[i + 1] = layer.shape
        if g.outputs[0] != prev:
            raise ValueError("the model output is not the last layer's")
        for d in instance.devices:
            if d.compute.kind not in ("linear", "roofline", "table"):
                raise ValueError(f"device {d.name}: cost model {d.compute.kind!r} is not covered")
        net = instance.network
        if net.source.external or net.sink.external:
            raise ValueError("the reference DP takes a device source and sink")
        self.shared = net.medium == "shared"
        cons = instance.constraints
        if cons.latency_s is not None or cons.energy_j is not None or cons.period_s is not None or (
                instance.constraints.memory and any(d.memory_bytes for d in instance.devices)):
            raise ValueError("the reference DP takes no caps")
        n = len(instance.devices)
        self.inv_bw = np.array([[0.0 if a == b else 1.0 / net.bandwidth_Bps[a][b] for b in range(n)]
                                for a in range(n)])
        self.lat = np.array([[0.0 if a == b else float(net.latency_s[a][b]) for b in range(n)] for a in range(n)])
        self.stage_overhead = [float(d.compute.stage_overhead_s) for d in instance.devices]

    def seconds(self, d: int, i: int, f: float, axis: str) -> float:
        """Device ``d`` computing fraction ``f`` of layer ``i`` (section 4's table of cost models)."""
        if f <= 0:
            return 0.0
        cm, layer = self.instance.devices[d].compute, self.layers[i]
        points = None
        if cm.kind == "table":
            points = cm.channel_table.get(layer.name) if axis == "channels" else None
            points = points or cm.table.get(layer.name)
        if points:  # through (0, 0) and the points, the last segment extrapolated
            xs = [0.0] + [float(x) for x, _ in points]
            ys = [0.0] + [float(y) for _, y in points]
            for k in range(1, len(xs)):
                if f <= xs[k] or k == len(xs) - 1:
                    return ys[k - 1] + (ys[k] - ys[k - 1]) * (f - xs[k - 1]) / (xs[k] - xs[k - 1])
        whole = layer.work / float(cm.macs_per_s)
        if cm.kind == "roofline" and cm.mem_bytes_per_s:
            elems = sum(prod(self.in_shape[i]) for _ in layer.inputs) + prod(layer.shape)
            whole = max(whole, (elems + layer.params) * self.instance.dtype_bytes / float(cm.mem_bytes_per_s))
        return f * whole + float(cm.overhead_s)

    def layout(self, first: int, last: int, axis: str, ranges: tuple) -> Layout:
        """What each part of a layout reads, computes and owns (section 3)."""
        h_out, c_out, _ = _grid(self.layers[last].shape)
        h_in, c_in, _ = _grid(self.in_shape[first])
        if axis == "channels":  # reads its inputs whole, a grouped conv only its groups' channels
            frac = tuple(((c1 - c0) / c_out,) for c0, c1 in ranges)
            groups = self.layers[last].groups
            go, gi = c_out // groups, c_in // groups
            need = tuple((0, h_in, (c0 // go) * gi, -(-c1 // go) * gi) for c0, c1 in ranges)
            return Layout(need, frac,
                          tuple((0, h_out, c0, c1) for c0, c1 in ranges))
        if axis == "none":
            ranges = ((0, h_out),)
        needs, fracs, owns = [], [], []
        for a, b in ranges:
            rows = []
            lo, hi = a, b
            for i in range(last, first - 1, -1):
                layer = self.layers[i]
                h_i = _grid(layer.shape)[0]
                if not layer.row_splittable:  # computed whole once any of it is needed, reads whole
                    whole = hi > lo
                    rows.append(1.0 if whole else 0.0)
                    lo, hi = (0, _grid(self.in_shape[i])[0]) if whole else (0, 0)
                    continue
                rows.append((hi - lo) / h_i)
                lo, hi = _window(layer.rowdep, lo, hi, _grid(self.in_shape[i])[0])
            needs.append((lo, hi, 0, c_in) if hi > lo else (0, 0, 0, 0))
            fracs.append(tuple(reversed(rows)))
            owns.append((a, b, 0, c_out))
        return Layout(tuple(needs), tuple(fracs), tuple(owns))


def _cells(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    rows = np.clip(np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    cols = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 2], b[..., 2]), 0, None)
    return rows * cols


def _options(space: ChainSpace, first: int, last: int):
    """Per option of stage first..last: its devices, need boxes, compute seconds per part and
    owned boxes, as padded arrays (parts beyond an option's own have device -1)."""
    opts = stage_options(space.instance, first, last)
    kmax = max(len(o.devices) for o in opts)
    cache: dict = {}
    dev = np.full((len(opts), kmax), -1, dtype=np.int64)
    need = np.zeros((len(opts), kmax, 4), dtype=np.int64)
    own = np.zeros((len(opts), kmax, 4), dtype=np.int64)
    comp = np.zeros((len(opts), kmax))
    secs: dict = {}
    for i, o in enumerate(opts):
        lay = cache.get((o.axis, o.ranges))
        if lay is None:
            lay = cache[(o.axis, o.ranges)] = space.layout(first, last, o.axis, o.ranges)
        k = len(o.devices)
        dev[i, :k] = o.devices
        need[i, :k] = lay.need
        own[i, :k] = lay.own
        for j, d in enumerate(o.devices):
            key = (o.axis, o.ranges, j, d)
            if key not in secs:
                parts = [space.seconds(d, first + li, f, o.axis) for li, f in enumerate(lay.frac[j])]
                secs[key] = sum(parts) + (space.stage_overhead[d] if any(f > 0 for f in lay.frac[j]) else 0.0)
            comp[i, j] = secs[key]
    return opts, dev, need, own, comp


def solve(instance: Instance) -> tuple[float, list]:
    """The least latency over the space and the stage options of a plan that has it."""
    space, states, index, best, back = forward(instance)
    n = len(space.layers)
    sdev, sbox = _pad(states[n])
    cell_bytes = _grid(space.layers[-1].shape)[2] * instance.dtype_bytes
    sink = instance.network.sink.device
    sent = (sbox[..., 1] - sbox[..., 0]) * (sbox[..., 3] - sbox[..., 2]) * cell_bytes  # (states, k): each owner's box
    t = np.where((sdev >= 0) & (sdev != sink) & (sent > 0),
                 sent * space.inv_bw[np.maximum(sdev, 0), sink] + space.lat[np.maximum(sdev, 0), sink], 0.0)
    final = best[n] + t.sum(axis=1)
    j = int(final.argmin())
    value = float(final[j])
    plan, b = [], n
    while b > 0:
        pb, pj, o = back[b][j]
        plan.append(o)
        b, j = pb, pj
    return value, plan[::-1]


def forward(instance: Instance):
    """The DP's forward pass: per boundary its states (devices, boxes), their index by key,
    the least latency of a prefix reaching each, and the back pointers (boundary, state,
    option)."""
    space = ChainSpace(instance)
    n, fl = len(space.layers), max(1, instance.search.fusion_limit)
    src = instance.network.source.device
    h, c, _ = _grid(space.in_shape[0])
    # boundary -> list of states (dev (k,), box (k, 4)), their best latency and back pointers
    start = (np.array([src]), np.array([[0, h, 0, c]]))
    states = {0: [start]}
    index = {0: {_key(*start): 0}}
    best = {0: np.array([0.0])}
    back = {0: [None]}
    for b in range(n):
        if b not in states:
            continue
        sdev, sbox = _pad(states[b])
        cell_bytes = _grid(space.in_shape[b])[2] * instance.dtype_bytes
        for e in range(b, min(n, b + fl)):
            opts, dev, need, own, comp = _options(space, b, e)
            val, arg = _step(space, sdev, sbox, best[b], dev, need, comp, cell_bytes)
            idx = index.setdefault(e + 1, {})
            lst = states.setdefault(e + 1, [])
            bk = back.setdefault(e + 1, [])
            vals = list(best.get(e + 1, np.zeros(0)))
            for i, o in enumerate(opts):
                k = len(o.devices)
                st = (dev[i, :k], own[i, :k])
                key = _key(*st)
                j = idx.get(key)
                if j is None:
                    j = idx[key] = len(lst)
                    lst.append(st)
                    vals.append(np.inf)
                    bk.append(None)
                if val[i] < vals[j]:
                    vals[j] = val[i]
                    bk[j] = (b, int(arg[i]), o)
            best[e + 1] = np.array(vals)
    return space, states, index, best, back


def _key(dev: np.ndarray, box: np.ndarray) -> tuple:
    return tuple(sorted((int(d), tuple(int(x) for x in bx)) for d, bx in zip(dev, box)))


def _pad(states: list) -> tuple[np.ndarray, np.ndarray]:
    kmax = max(len(d) for d, _ in states)
    dev = np.full((len(states), kmax), -1, dtype=np.int64)
    box = np.zeros((len(states), kmax, 4), dtype=np.int64)
    for i, (d, bx) in enumerate(states):
        dev[i, :len(d)] = d
        box[i, :len(d)] = bx
    return dev, box


#: states priced at once (bounds the (states, options, parts) arrays to tens of MB)
STATE_CHUNK = 128


def _step(space: ChainSpace, sdev, sbox, best, dev, need, comp, cell_bytes: int):
    """For every option, the least over the states of (best prefix + the option's stage time),
    and the state that gives it (section 4: each part receives, one message per sender, the
    overlap of its need with what the sender owns; tau is the largest receive + compute over
    the parts). What a part receives depends on its need box and device only: those are
    priced once per state (``recv``), then gathered per option and part."""
    keys = {}
    col = np.full(dev.shape, -1, dtype=np.int64)
    for (o, j), d in np.ndenumerate(dev):
        if d >= 0:
            col[o, j] = keys.setdefault((int(d), tuple(need[o, j].tolist())), len(keys))
    udev = np.array([k[0] for k in keys], dtype=np.int64)
    ubox = np.array([k[1] for k in keys], dtype=np.int64)
    cells = _cells(sbox[:, :, None, :], ubox[None, None])  # (S, R, U)
    snd = np.maximum(sdev, 0)[:, :, None]
    msg = (cells > 0) & (sdev[:, :, None] >= 0) & (sdev[:, :, None] != udev[None, None])
    t = np.where(msg, cells * cell_bytes * space.inv_bw[snd, udev[None, None]] + space.lat[snd, udev[None, None]], 0.0)
    recv = np.concatenate([t.sum(axis=1), np.full((len(sdev), 1), -np.inf)], axis=1)  # (S, U + 1): -inf pads
    comp = np.where(col >= 0, comp, 0.0)
    if space.shared:  # one medium: every message of the stage, then the longest compute
        recv[:, -1] = 0.0
    val = np.full(len(dev), np.inf)
    arg = np.zeros(len(dev), dtype=np.int64)
    for lo in range(0, len(sdev), STATE_CHUNK):
        if space.shared:
            tau = recv[lo:lo + STATE_CHUNK][:, col].sum(axis=2) + comp.max(axis=1)[None]
        else:
            tau = (recv[lo:lo + STATE_CHUNK][:, col] + comp[None]).max(axis=2)  # (chunk, O)
        total = best[lo:lo + STATE_CHUNK, None] + tau
        i = total.argmin(axis=0)
        v = total[i, np.arange(len(dev))]
        better = v < val
        val[better], arg[better] = v[better], i[better] + lo
    return val, arg


def twin(seed: int, n_dev: int = 4) -> Instance:
    """A held-out twin of ``fleet/vgg16-4dev-uncapped.yaml``: VGG16 (int8) on ``n_dev`` linear
    devices of seeded random speeds (2-25 GMAC/s) and per-layer overheads (0.05-0.3 ms), a
    switched network of one seeded bandwidth (50-300 Mbps) and message latency (0.1-1 ms),
    the first device the source and sink, no caps; the same search space."""
    from milp_planner.instance.reader import instance_from_dict

    rng = np.random.default_rng(seed)
    devices = [{"name": f"d{i}", "compute": {"model": "linear", "macs_per_s": float(round(rng.uniform(2, 25), 2)) * 1e9,
                                              "overhead_s": float(round(rng.uniform(0.05, 0.3), 3)) * 1e-3}}
               for i in range(n_dev)]
    data = {"name": f"vgg16-{n_dev}dev-twin-{seed}", "model": "zoo:vgg16", "dtype_bytes": 1, "devices": devices,
            "network": {"bandwidth_mbps": float(round(rng.uniform(50, 300))), "latency_ms": float(round(rng.uniform(0.1, 1), 2))},
            "search": {"fusion_limit": 4, "max_parts": 4, "splits": ["equal", "capacity"], "axes": ["rows", "channels"]},
            "constraints": {"memory": False}, "objective": "latency"}
    return instance_from_dict(data, data["name"])


def compare(instance: Instance, time_limit: float = 60.0) -> dict:
    """One instance solved by this DP and by ``dp``: values, status, seconds and CPU seconds."""
    from milp_planner.planners import get_planner

    t0, c0 = time.perf_counter(), time.process_time()
    ref, plan = solve(instance)
    ref_s, ref_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    res = get_planner("dp").solve(instance, objective="latency", time_limit=time_limit)
    dp_s, dp_cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"instance": instance.name, "reference": ref, "reference_s": ref_s, "reference_cpu_s": ref_cpu,
            "dp": res.value, "dp_status": res.status, "dp_bound": res.bound, "dp_s": dp_s, "dp_cpu_s": dp_cpu,
            "stages": len(plan)}


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("instances", nargs="*", help="instance files to solve with the reference DP alone")
    ap.add_argument("--twins", type=int, default=0, help="also compare with dp on this many held-out twins")
    ap.add_argument("--seed", type=int, default=3200, help="the first twin's seed")
    ap.add_argument("--devices", type=int, default=4, help="devices of a twin")
    ap.add_argument("--out", help="write the comparison as Markdown here")
    ap.add_argument("--append", action="store_true", help="add this run's table to --out instead of replacing it")
    args = ap.parse_args(argv)
    for path in args.instances:
        inst = load_instance(path)
        t0, c0 = time.perf_counter(), time.process_time()
        value, plan = solve(inst)
        print(f"{path}: latency {value:.9g} s, {len(plan)} stages, {time.perf_counter() - t0:.2f} s "
              f"({time.process_time() - c0:.2f} CPU s)")
    if not args.twins:
        return 0
    compare(load_instance(ROOT / "instances/fleet/vgg16-4dev-uncapped.yaml"))  # warm-up: imports, zoo model
    rows = [compare(load_instance(ROOT / "instances/fleet/vgg16-4dev-uncapped.yaml"))]
    rows += [compare(twin(args.seed + i, args.devices)) for i in range(args.twins)]
    for r in rows:
        print(_line(r))
    if args.out:
        out = Path(args.out)
        text = _markdown(rows, argv, header=not (args.append and out.exists()))
        out.write_text((out.read_text() + "\n" if args.append and out.exists() else "") + text)
    return 0 if all(_agree(r) for r in rows) else 1


ROOT = Path(__file__).resolve().parents[1]
#: relative difference within which the two optima agree (floats summed in other orders)
AGREE = 1e-9


def _agree(r: dict) -> bool:
    return r["dp_status"] == "optimal" and abs(r["dp"] - r["reference"]) <= AGREE * r["reference"]


def _line(r: dict) -> str:
    return (f"| {r['instance']} | {r['reference']:.9g} | {r['dp']:.9g} ({r['dp_status']}) | "
            f"{'yes' if _agree(r) else '**no**'} | {r['stages']} | {r['reference_s']:.2f} ({r['reference_cpu_s']:.2f}) | "
            f"{r['dp_s']:.2f} ({r['dp_cpu_s']:.2f}) | {r['dp_cpu_s'] / r['reference_cpu_s']:.2f} |")


def _markdown(rows: list[dict], argv: list[str], header: bool = True) -> str:
    import os
    import platform
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    head = ["# dp against a plain numpy DP over the same space (issue #32, \"speed\")", "",
            "Written by `benchmarks/reference_dp.py` (see its docstring: the reference takes the space from "
            "`stage_options` and prices everything else itself, apart from `milp_planner.cost`). Each table "
            "is one run of it, its command line above it.", ""] if header else []
    head += ["`python benchmarks/reference_dp.py " + " ".join(argv) + "`", "",
            f"- Machine: {platform.machine()}, {os.cpu_count()} cores; Python {platform.python_version()}; "
            f"commit {commit}; load average at the end (1 / 5 / 15 min): {load}.",
            "- Both in one process, one after the other, after a warm-up solve of the file (imports and the zoo "
            "model not counted); seconds wall (CPU); ratio = dp CPU / reference CPU.", "",
            "| instance | reference DP latency, s | dp latency, s | agree | stages | reference DP s (CPU) | dp s (CPU) | ratio |",
            "|---|---|---|---|---|---|---|---|"]
    return "\n".join(head + [_line(r) for r in rows]) + "\n"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

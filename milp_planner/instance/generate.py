"""Seeded random instances: tiny ONNX models and instance files that cover what the model allows.

The differential test bed (``benchmarks/differential.py``) checks every planner against brute
force on them; research code can use them the same way. A case is a JSON-able *spec*:

- ``model``: the graph input shape and a list of ONNX nodes with their weight shapes (convs of
  any kernel, stride, dilation and padding, grouped convs, max and average pools, residual adds,
  channel concats, skips from the model input, nearest upsampling, Flatten + Gemm heads);
- ``instance``: an instance file without its ``model`` key (devices with linear, roofline or
  table cost models, memory, power, twins and boards; switched or shared media; device or
  external source and sink; fusion limits, part counts, every split family, both axes; caps).

``random_spec(seed)`` draws one; ``build_model(spec)`` makes the ``onnx.ModelProto`` (random
weights, runnable by onnxruntime); ``build_instance(spec)`` reads it through the real importer
and instance reader; ``write_case(spec, folder)`` writes ``model.onnx`` and ``instance.yaml`` for
the command line. A spec is stable: the corpus of cases that once failed
(``tests/differential_corpus/``) stores specs, not seeds.

>>> from milp_planner.instance.generate import random_spec, build_instance
>>> spec = random_spec(7)
>>> inst = build_instance(spec)
>>> 1 <= len(inst.graph.layers) <= 8 and 2 <= len(inst.devices) <= 4
True
"""

from __future__ import annotations

import copy
import json
import random
from fractions import Fraction
from pathlib import Path

import numpy as np

from milp_planner.instance.types import Instance

#: the most layers (after folding) a random model has: brute force must enumerate its plans
MAX_LAYERS = 6


def _decimal(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (exact as a decimal in YAML and JSON)."""
    return float(f"{x:.{digits - 1}e}")


# -- the model ------------------------------------------------------------------------------


class _Graph:
    """Nodes of a random model with shape tracking (NCHW, square kernels)."""

    def __init__(self, rng: random.Random, c: int, h: int, w: int):
        self.rng = rng
        self.nodes: list[dict] = []
        self.shapes: dict[str, list[int]] = {"x": [1, c, h, w]}
        self.layers = 0  # layers after folding (a Relu after a conv folds into it)

    def _name(self, op: str) -> str:
        return f"{op.lower()}{len(self.nodes)}"

    def add(self, op: str, inputs: list[str], shape: list[int], weights=None, layer: bool = True, **attrs) -> str:
        name = self._name(op)
        self.nodes.append({"op": op, "name": name, "inputs": inputs, "output": name, "attrs": attrs,
                           "weights": weights or []})
        self.shapes[name] = shape
        self.layers += 1 if layer else 0
        return name

    def conv(self, t: str, cout: int, k: int, s: int = 1, d: int = 1, pad: int | None = None, groups: int = 1,
             relu: bool = False, bias: bool = True) -> str:
        _, c, h, w = self.shapes[t]
        pad = (k - 1) * d // 2 if pad is None else pad
        span = (k - 1) * d + 1
        if h + 2 * pad < span or w + 2 * pad < span:
            k, d, pad, span = 1, 1, 0, 1
        ho, wo = (h + 2 * pad - span) // s + 1, (w + 2 * pad - span) // s + 1
        weights = [[cout, c // groups, k, k]] + ([[cout]] if bias else [])
        out = self.add("Conv", [t], [1, cout, ho, wo], weights, kernel_shape=[k, k], strides=[s, s],
                       pads=[pad] * 4, dilations=[d, d], group=groups)
        if relu:
            out = self.add("Relu", [out], [1, cout, ho, wo], layer=False)
        return out

    def pool(self, t: str, kind: str, k: int, s: int, pad: int = 0) -> str:
        _, c, h, w = self.shapes[t]
        while pad >= k or k > min(h, w) + 2 * pad:  # ONNX: pads below the kernel, a nonempty output
            if pad >= k:
                pad -= 1
            else:
                k -= 1
        ho, wo = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
        return self.add(kind, [t], [1, c, ho, wo], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)

    def add_tensors(self, a: str, b: str) -> str:
        return self.add("Add", [a, b], list(self.shapes[a]))

    def concat(self, parts: list[str]) -> str:
        shape = list(self.shapes[parts[0]])
        shape[1] = sum(self.shapes[p][1] for p in parts)
        return self.add("Concat", parts, shape, axis=1)

    def upsample(self, t: str) -> str:
        n, c, h, w = self.shapes[t]
        return self.add("Resize", [t], [n, c, 2 * h, 2 * w], mode="nearest", scales=[1.0, 1.0, 2.0, 2.0],
                        coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    def head(self, t: str, features: int, gap: bool) -> str:
        if gap:
            n, c, _, _ = self.shapes[t]
            t = self.add("GlobalAveragePool", [t], [n, c, 1, 1])
        n, c, h, w = self.shapes[t]
        flat = self.add("Flatten", [t], [n, c * h * w], axis=1)
        return self.add("Gemm", [flat], [n, features], [[features, c * h * w], [features]], transB=1)


def _random_model(rng: random.Random, max_layers: int) -> dict:
    c, h, w = rng.choice([1, 2, 3]), rng.randint(3, 10), rng.randint(1, 3)
    g = _Graph(rng, c, h, w)
    t = "x"
    target = rng.randint(2, max_layers)
    headed = False
    while g.layers < target and not headed:
        left = target - g.layers
        _, ch, hh, ww = g.shapes[t]
        kinds = ["conv"] * 4 + ["pool"] * (1 if hh >= 2 else 0)
        if left >= 2:
            kinds += ["residual", "skip"]
        if left >= 3:
            kinds += ["concat"]
        if hh <= 6:
            kinds += ["upsample"]
        if left <= 2 and g.layers >= 1:
            kinds += ["head"]
        kind = rng.choice(kinds)
        if kind == "conv":
            groups = ch if ch > 1 and rng.random() < 0.2 else 1
            cout = ch if groups > 1 else rng.randint(1, 4)
            t = g.conv(t, cout, rng.choice([1, 3, 3, 5]), s=rng.choice([1, 1, 1, 2]), d=rng.choice([1, 1, 2]),
                       pad=rng.choice([None, None, 0]), groups=groups, relu=rng.random() < 0.5,
                       bias=rng.random() < 0.8)
        elif kind == "pool":
            t = g.pool(t, rng.choice(["MaxPool", "AveragePool"]), rng.choice([2, 3]), rng.choice([1, 2]),
                       pad=rng.choice([0, 0, 1]))
        elif kind == "residual":
            y = g.conv(t, ch, 3, relu=rng.random() < 0.5)
            if left >= 3 and rng.random() < 0.4:
                y = g.conv(y, ch, rng.choice([1, 3]))
            t = g.add_tensors(y, t)
        elif kind == "skip":  # the model input read again later (a skip from the input)
            if g.shapes[t][2:] == g.shapes["x"][2:]:
                t = g.concat([t, "x"]) if rng.random() < 0.5 or g.shapes[t][1] != c else g.add_tensors(t, "x")
            else:
                t = g.conv(t, rng.randint(1, 3), 1)
        elif kind == "concat":
            a = g.conv(t, rng.randint(1, 3), rng.choice([1, 3]))
            b = g.conv(t, rng.randint(1, 3), 3) if rng.random() < 0.6 else g.pool(t, "MaxPool", 3, 1, 1)
            t = g.concat([a, b])
        elif kind == "upsample":
            t = g.upsample(t)
        else:
            t = g.head(t, rng.randint(2, 5), gap=rng.random() < 0.5)
            headed = True
    return {"input": g.shapes["x"], "nodes": g.nodes, "output": t, "output_shape": g.shapes[t]}


def build_model(spec: dict, seed: int = 0):
    """The ``onnx.ModelProto`` of ``spec["model"]`` (opset 17), with random float32 weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    m = spec["model"]
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    for node in m["nodes"]:
        ins = list(node["inputs"])
        for i, shape in enumerate(node["weights"]):
            wname = f"{node['name']}.w{i}"
            data = rng.standard_normal(size=shape).astype(np.float32) * np.float32(0.5)
            inits.append(numpy_helper.from_array(data, wname))
            ins.append(wname)
        attrs = dict(node["attrs"])
        if node["op"] == "Resize":
            scales = attrs.pop("scales")
            sname = f"{node['name']}.scales"
            inits.append(numpy_helper.from_array(np.array(scales, dtype=np.float32), sname))
            ins += ["", sname]
        nodes.append(helper.make_node(node["op"], ins, [node["output"]], name=node["name"], **attrs))
    graph = helper.make_graph(
        nodes, spec.get("name", "random"),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, m["input"])],
        [helper.make_tensor_value_info(m["output"], TensorProto.FLOAT, m["output_shape"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build_graph(spec: dict):
    """The ``LayerGraph`` of ``spec["model"]``, through the ONNX importer."""
    from milp_planner.model.onnx import import_onnx

    return import_onnx(build_model(spec), name=spec.get("name", "random"))


# -- the instance ---------------------------------------------------------------------------


def _device(rng: random.Random, name: str, layer_names: list[str]) -> dict:
    kind = rng.choice(["linear"] * 5 + ["roofline", "table"])
    compute: dict = {"model": kind, "macs_per_s": _decimal(10 ** rng.uniform(3.5, 5))}
    if rng.random() < 0.6:
        compute["overhead_s"] = _decimal(rng.uniform(0, 0.003), 2)
    if rng.random() < 0.25:  # the runtime's own cost of a stage (docs/model.md section 4)
        compute["stage_overhead_s"] = _decimal(rng.uniform(0, 0.004), 2)
    if kind == "roofline":
        compute["mem_bytes_per_s"] = _decimal(10 ** rng.uniform(3.5, 5))
    elif kind == "table":
        compute.pop("overhead_s", None)
        table = {}
        for name_l in rng.sample(layer_names, k=max(1, len(layer_names) // 2)):
            whole = _decimal(rng.uniform(0.002, 0.05), 3)
            if rng.random() < 0.5:
                half = _decimal(whole * rng.uniform(0.5, 0.8), 3)
                table[name_l] = [[0.5, half], [1, whole]]
            else:
                table[name_l] = whole
        compute["table"] = table
    return {"name": name, "compute": compute,
            "power_w": {"compute": _decimal(rng.uniform(0.5, 8), 2), "tx": _decimal(rng.uniform(0, 2), 2),
                        "rx": _decimal(rng.uniform(0, 2), 2)}}


def _endpoint(rng: random.Random, devices: list[dict]) -> dict:
    if rng.random() < 0.3:
        return {"bandwidth_mbps": [_decimal(10 ** rng.uniform(-2.3, -0.7), 3) for _ in devices],
                "latency_ms": _decimal(rng.uniform(0, 3), 2)}
    return {"device": rng.choice(devices)["name"]}


def _random_instance(rng: random.Random, layer_names: list[str], n_layers: int) -> dict:
    n = rng.choice([2, 2, 3, 3, 3]) if n_layers > 3 else rng.choice([2, 3, 3, 4])
    devices = [_device(rng, f"d{i}", layer_names) for i in range(n)]
    bw = [[0.0 if i == j else _decimal(10 ** rng.uniform(-2.3, -0.7), 3) for j in range(n)] for i in range(n)]
    shape = rng.random()
    if shape < 0.2 and n >= 3:  # twins: the last device a copy of the first, links alike
        devices[-1] = {**copy.deepcopy(devices[0]), "name": devices[-1]["name"]}
        for k in range(n):
            if k not in (0, n - 1):
                bw[n - 1][k], bw[k][n - 1] = bw[0][k], bw[k][0]
        bw[0][n - 1] = bw[n - 1][0] = _decimal(10 ** rng.uniform(-2.3, -0.7), 3)
    elif shape < 0.35 and n >= 3:  # a board: two units of one machine on a fast link
        devices[0]["node"] = devices[1]["node"] = "board"
        bw[0][1] = bw[1][0] = _decimal(rng.uniform(2, 20), 3)
    lat = _decimal(rng.uniform(0, 3), 2) if rng.random() < 0.6 else 0
    splits = rng.sample(["equal", "capacity", f"grid:{rng.randint(2, 5)}", "any"], k=rng.randint(1, 3))
    axes = rng.choice([["rows"], ["channels"], ["rows", "channels"], ["rows", "channels"]])
    return {
        "name": "random",
        "dtype_bytes": rng.choice([1, 2, 4]),
        "devices": devices,
        "network": {"bandwidth_mbps": bw, "latency_ms": lat, "medium": rng.choice(["switched"] * 2 + ["shared"]),
                    "source": _endpoint(rng, devices), "sink": _endpoint(rng, devices)},
        "search": {"fusion_limit": rng.randint(1, 3), "max_parts": rng.randint(1, n), "splits": splits,
                   "axes": axes},
        "objective": "latency",
        "constraints": {"memory": True},
    }


def random_spec(seed: int, max_layers: int = MAX_LAYERS) -> dict:
    """A random case (see the module docstring); the same ``seed`` gives the same spec."""
    rng = random.Random(seed)
    spec = {"name": f"random-{seed}", "seed": seed, "model": _random_model(rng, max_layers)}
    graph = build_graph(spec)
    inst = _random_instance(rng, [layer.name for layer in graph.layers], len(graph.layers))
    inst["name"] = spec["name"]
    spec["instance"] = inst
    return spec


def with_caps(spec: dict, memory_bytes: dict[str, int] | None = None, **caps) -> dict:
    """``spec`` with memory caps (device name -> bytes) and ``latency_ms``, ``energy_j`` or
    ``period_ms`` caps (given as numbers; written with 9 significant digits)."""
    out = copy.deepcopy(spec)
    inst = out["instance"]
    for d in inst["devices"]:
        if memory_bytes and d["name"] in memory_bytes:
            d["memory_mb"] = float(Fraction(int(memory_bytes[d["name"]]), 10**6))
    for key, value in caps.items():
        if value is not None:
            inst["constraints"][key] = _decimal(value, 9)
    return out


def build_instance(spec: dict, graph=None) -> Instance:
    """The ``Instance`` of ``spec`` through the real instance reader (``graph``: already imported)."""
    from milp_planner.instance.reader import instance_from_dict

    data = copy.deepcopy(spec["instance"])
    data.pop("model", None)
    return instance_from_dict(data, spec.get("name", "random"), graph=graph if graph is not None else build_graph(spec))


def write_case(spec: dict, folder) -> Path:
    """``model.onnx`` and ``instance.yaml`` (which names the model) in ``folder``; returns the
    instance file's path."""
    import onnx
    import yaml

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(spec), folder / "model.onnx")
    data = {**copy.deepcopy(spec["instance"]), "model": "model.onnx"}
    path = folder / "instance.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def save_spec(spec: dict, path) -> None:
    Path(path).write_text(json.dumps(spec, indent=1) + "\n")


def load_spec(path) -> dict:
    return json.loads(Path(path).read_text())

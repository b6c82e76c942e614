"""Built-in models, written with ``onnx.helper`` (opset 17), shaped like torchvision's.

``names()`` lists them; ``build(name, size=None, weights=False, seed=0)`` returns the
``ModelProto``; ``export(name, out_path, size=None, seed=0)`` writes a runnable ``.onnx``
with deterministic random weights (``numpy.random.default_rng(seed)``).

With ``weights=False`` (what ``inspect`` and the planners use) every weight initializer is a
dims-only stub whose data "lives" in an external file that does not exist: the model costs
nothing to build and the importer counts parameters from the dims. Small integer tensors
(shapes, Resize sizes) and Clip bounds always carry their data.

Models (default input 1x3x224x224 for the big ones, 1x3x32x32 for the tiny ones; ``size``
sets H = W, or (H, W)):

* ``vgg16``, ``vgg19``: torchvision ``vgg16`` / ``vgg19`` (no BN). The adaptive average pool
  to 7x7 is omitted when the features are already 7x7 (input 224..255), is an AveragePool
  when they are a multiple of 7, and otherwise a linear Resize to 7x7 (no parameters; not
  what torchvision computes, but the same layer sizes).
* ``resnet18/34/50/101/152``: torchvision v1.5 (stride in the 3x3 conv of a bottleneck),
  BatchNormalization kept as separate nodes, GlobalAveragePool, Flatten, Gemm.
* ``mobilenetv2``: torchvision, width 1.0, ReLU6 as Clip whose bounds are Constant nodes.
* ``alexnet``, ``densenet121``: torchvision (densenet keeps its pre-activation BN).
* ``tiny_chain`` (convs and pools), ``tiny_residual`` (a residual Add), ``tiny_fc`` (conv,
  pool, Flatten, Gemm), ``tiny_unet`` (Resize, ConvTranspose, channel Concat).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from milp_planner.errors import PlannerError

OPSET = 17
EXTERNAL_LIMIT = 1_800_000_000  # bytes; larger models are saved with external data


# -- the builder ----------------------------------------------------------------------------


class _Builder:
    def __init__(self, name: str, weights: bool, seed: int, batch: int, hw: tuple[int, int]):
        self.name = name
        self.weights = weights
        self.rng = np.random.default_rng(seed)
        # tensors go straight into the final ModelProto: no copy of the weights is made
        self.proto = onnx.ModelProto()
        self.graph = self.proto.graph
        self.batch = batch
        self.hw = hw
        self._clip_bounds: tuple[str, str] | None = None

    # tensors

    def weight(self, name: str, shape: tuple[int, ...], std: float = 0.0, mean: float = 0.0,
               low: float | None = None, high: float | None = None) -> str:
        """A float32 weight: normal(mean, std), or uniform(low, high) when both are given."""
        t = self.graph.initializer.add()
        t.name = name
        t.dims.extend(shape)
        t.data_type = TensorProto.FLOAT
        if not self.weights:
            t.data_location = TensorProto.EXTERNAL
            e = t.external_data.add()
            e.key, e.value = "location", f"{self.name}.weights-not-built"
            return name
        if low is not None and high is not None:
            data = self.rng.uniform(low, high, size=shape).astype(np.float32)
        elif std:
            data = self.rng.standard_normal(size=shape, dtype=np.float32)
            data *= np.float32(std)
            if mean:
                data += np.float32(mean)
        else:
            data = np.full(shape, mean, dtype=np.float32)
        t.raw_data = data.astype("<f4", copy=False).tobytes()
        return name

    def ints(self, name: str, values) -> str:
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, out: str | None = None, **attrs) -> str:
        out = out or name
        self.graph.node.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    # layers

    def conv(self, x: str, name: str, cin: int, cout: int, k: int, s: int = 1, p: int | None = None,
             g: int = 1, bias: bool = True, out: str | None = None) -> str:
        p = k // 2 if p is None else p
        fan_in = cin // g * k * k
        w = self.weight(f"{name}.weight", (cout, cin // g, k, k), std=(2.0 / fan_in) ** 0.5)
        ins = [x, w]
        if bias:
            ins.append(self.weight(f"{name}.bias", (cout,), std=0.01))
        return self.node("Conv", ins, name, out, kernel_shape=[k, k], strides=[s, s],
                         pads=[p, p, p, p], dilations=[1, 1], group=g)

    def bn(self, x: str, name: str, c: int, gamma: float = 1.0) -> str:
        ins = [x,
               self.weight(f"{name}.weight", (c,), low=0.8 * gamma, high=1.2 * gamma),
               self.weight(f"{name}.bias", (c,), std=0.05),
               self.weight(f"{name}.running_mean", (c,), std=0.05),
               self.weight(f"{name}.running_var", (c,), low=0.8, high=1.2)]
        return self.node("BatchNormalization", ins, name, epsilon=1e-5, momentum=0.9)

    def relu(self, x: str, name: str) -> str:
        return self.node("Relu", [x], name)

    def relu6(self, x: str, name: str) -> str:
        if self._clip_bounds is None:  # shared Constant nodes: bounds, not parameters
            lo = self.node("Constant", [], "relu6.min",
                           value=numpy_helper.from_array(np.array(0.0, np.float32), "relu6.min"))
            hi = self.node("Constant", [], "relu6.max",
                           value=numpy_helper.from_array(np.array(6.0, np.float32), "relu6.max"))
            self._clip_bounds = (lo, hi)
        return self.node("Clip", [x, *self._clip_bounds], name)

    def maxpool(self, x: str, name: str, k: int, s: int, p: int = 0) -> str:
        return self.node("MaxPool", [x], name, kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])

    def avgpool(self, x: str, name: str, k: int | tuple[int, int], s: int | tuple[int, int]) -> str:
        kh, kw = (k, k) if isinstance(k, int) else k
        sh, sw = (s, s) if isinstance(s, int) else s
        return self.node("AveragePool", [x], name, kernel_shape=[kh, kw], strides=[sh, sw])

    def gap(self, x: str, name: str) -> str:
        return self.node("GlobalAveragePool", [x], name)

    def flatten(self, x: str, name: str) -> str:
        return self.node("Flatten", [x], name, axis=1)

    def dropout(self, x: str, name: str) -> str:
        return self.node("Dropout", [x], name)

    def linear(self, x: str, name: str, fin: int, fout: int, out: str | None = None, gain: float = 2.0) -> str:
        w = self.weight(f"{name}.weight", (fout, fin), std=(gain / fin) ** 0.5)
        b = self.weight(f"{name}.bias", (fout,), std=0.01)
        return self.node("Gemm", [x, w, b], name, out, transB=1)

    def add(self, a: str, b: str, name: str) -> str:
        return self.node("Add", [a, b], name)

    def adaptive_avg(self, x: str, name: str, c: int, have: tuple[int, int], want: int) -> str:
        """torchvision's AdaptiveAvgPool2d((want, want)) on a (C, *have) feature map."""
        fh, fw = have
        if (fh, fw) == (want, want):
            return x
        if fh % want == 0 and fw % want == 0:
            return self.avgpool(x, name, (fh // want, fw // want), (fh // want, fw // want))
        sizes = self.ints(f"{name}.sizes", [self.batch, c, want, want])
        return self.node("Resize", [x, "", "", sizes], name, mode="linear")

    def model(self, x: str, out: str, out_shape: list) -> onnx.ModelProto:
        m, g = self.proto, self.graph
        g.name = self.name
        g.input.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [self.batch, 3, *self.hw]))
        g.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape))
        m.ir_version = 8
        m.opset_import.append(helper.make_opsetid("", OPSET))
        m.producer_name = "milp-planner zoo"
        return m


def _pool_out(h: int, k: int, s: int, p: int = 0) -> int:
    return (h + 2 * p - k) // s + 1


# -- the models ---------------------------------------------------------------------------


VGG_CFG = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


def _vgg(b: _Builder, cfg) -> onnx.ModelProto:
    x, c, (h, w) = "input", 3, b.hw
    i = 0
    for v in cfg:
        if v == "M":
            x = b.maxpool(x, f"features.{i}", 2, 2)
            h, w = h // 2, w // 2
            i += 1
        else:
            x = b.conv(x, f"features.{i}", c, v, 3)
            x = b.relu(x, f"features.{i + 1}")
            c = v
            i += 2
    x = b.adaptive_avg(x, "avgpool", c, (h, w), 7)
    x = b.flatten(x, "flatten")
    x = b.relu(b.linear(x, "classifier.0", 512 * 7 * 7, 4096), "classifier.1")
    x = b.dropout(x, "classifier.2")
    x = b.relu(b.linear(x, "classifier.3", 4096, 4096), "classifier.4")
    x = b.dropout(x, "classifier.5")
    x = b.linear(x, "classifier.6", 4096, 1000, out="output", gain=1.0)
    return b.model("input", x, [b.batch, 1000])


def _alexnet(b: _Builder) -> onnx.ModelProto:
    x, (h, w) = "input", b.hw
    x = b.relu(b.conv(x, "features.0", 3, 64, 11, s=4, p=2), "features.1")
    h, w = _pool_out(h, 11, 4, 2), _pool_out(w, 11, 4, 2)
    x = b.maxpool(x, "features.2", 3, 2)
    h, w = _pool_out(h, 3, 2), _pool_out(w, 3, 2)
    x = b.relu(b.conv(x, "features.3", 64, 192, 5, p=2), "features.4")
    x = b.maxpool(x, "features.5", 3, 2)
    h, w = _pool_out(h, 3, 2), _pool_out(w, 3, 2)
    x = b.relu(b.conv(x, "features.6", 192, 384, 3), "features.7")
    x = b.relu(b.conv(x, "features.8", 384, 256, 3), "features.9")
    x = b.relu(b.conv(x, "features.10", 256, 256, 3), "features.11")
    x = b.maxpool(x, "features.12", 3, 2)
    h, w = _pool_out(h, 3, 2), _pool_out(w, 3, 2)
    x = b.adaptive_avg(x, "avgpool", 256, (h, w), 6)
    x = b.flatten(x, "flatten")
    x = b.dropout(x, "classifier.0")
    x = b.relu(b.linear(x, "classifier.1", 256 * 6 * 6, 4096), "classifier.2")
    x = b.dropout(x, "classifier.3")
    x = b.relu(b.linear(x, "classifier.4", 4096, 4096), "classifier.5")
    x = b.linear(x, "classifier.6", 4096, 1000, out="output", gain=1.0)
    return b.model("input", x, [b.batch, 1000])


RESNET_CFG = {
    "resnet18": ("basic", [2, 2, 2, 2]),
    "resnet34": ("basic", [3, 4, 6, 3]),
    "resnet50": ("bottleneck", [3, 4, 6, 3]),
    "resnet101": ("bottleneck", [3, 4, 23, 3]),
    "resnet152": ("bottleneck", [3, 8, 36, 3]),
}


def _resnet(b: _Builder, kind: str, blocks: list[int]) -> onnx.ModelProto:
    expansion = 4 if kind == "bottleneck" else 1
    x = b.conv("input", "conv1", 3, 64, 7, s=2, p=3, bias=False)
    x = b.relu(b.bn(x, "bn1", 64), "relu")
    x = b.maxpool(x, "maxpool", 3, 2, 1)
    inplanes = 64
    for li, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks), start=1):
        for bi in range(n):
            s = 2 if (bi == 0 and li > 1) else 1
            p = f"layer{li}.{bi}"
            identity = x
            if kind == "bottleneck":
                y = b.relu(b.bn(b.conv(x, f"{p}.conv1", inplanes, planes, 1, bias=False), f"{p}.bn1", planes),
                           f"{p}.relu1")
                y = b.relu(b.bn(b.conv(y, f"{p}.conv2", planes, planes, 3, s=s, bias=False), f"{p}.bn2", planes),
                           f"{p}.relu2")
                y = b.bn(b.conv(y, f"{p}.conv3", planes, planes * 4, 1, bias=False), f"{p}.bn3", planes * 4,
                         gamma=0.25)
            else:
                y = b.relu(b.bn(b.conv(x, f"{p}.conv1", inplanes, planes, 3, s=s, bias=False), f"{p}.bn1", planes),
                           f"{p}.relu1")
                y = b.bn(b.conv(y, f"{p}.conv2", planes, planes, 3, bias=False), f"{p}.bn2", planes, gamma=0.25)
            if s != 1 or inplanes != planes * expansion:
                identity = b.bn(b.conv(x, f"{p}.downsample.0", inplanes, planes * expansion, 1, s=s, bias=False),
                                f"{p}.downsample.1", planes * expansion)
            x = b.relu(b.add(y, identity, f"{p}.add"), f"{p}.relu")
            inplanes = planes * expansion
    x = b.flatten(b.gap(x, "avgpool"), "flatten")
    x = b.linear(x, "fc", 512 * expansion, 1000, out="output", gain=1.0)
    return b.model("input", x, [b.batch, 1000])


def _mobilenetv2(b: _Builder) -> onnx.ModelProto:
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
    x = b.conv("input", "features.0.0", 3, 32, 3, s=2, bias=False)
    x = b.relu6(b.bn(x, "features.0.1", 32), "features.0.2")
    inp, idx = 32, 1
    for t, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = inp * t
            p = f"features.{idx}"
            y, j = x, 0
            if t != 1:
                y = b.relu6(b.bn(b.conv(y, f"{p}.conv.{j}.0", inp, hidden, 1, bias=False), f"{p}.conv.{j}.1", hidden),
                            f"{p}.conv.{j}.2")
                j += 1
            y = b.conv(y, f"{p}.conv.{j}.0", hidden, hidden, 3, s=stride, g=hidden, bias=False)
            y = b.relu6(b.bn(y, f"{p}.conv.{j}.1", hidden), f"{p}.conv.{j}.2")
            j += 1
            y = b.bn(b.conv(y, f"{p}.conv.{j}", hidden, c, 1, bias=False), f"{p}.conv.{j + 1}", c, gamma=0.5)
            x = b.add(x, y, f"{p}.add") if stride == 1 and inp == c else y
            inp = c
            idx += 1
    x = b.conv(x, f"features.{idx}.0", inp, 1280, 1, bias=False)
    x = b.relu6(b.bn(x, f"features.{idx}.1", 1280), f"features.{idx}.2")
    x = b.flatten(b.gap(x, "avgpool"), "flatten")
    x = b.dropout(x, "classifier.0")
    x = b.linear(x, "classifier.1", 1280, 1000, out="output", gain=1.0)
    return b.model("input", x, [b.batch, 1000])


def _densenet121(b: _Builder) -> onnx.ModelProto:
    growth, bn_size = 32, 4
    x = b.conv("input", "features.conv0", 3, 64, 7, s=2, p=3, bias=False)
    x = b.relu(b.bn(x, "features.norm0", 64), "features.relu0")
    x = b.maxpool(x, "features.pool0", 3, 2, 1)
    c = 64
    for bi, n in enumerate((6, 12, 24, 16), start=1):
        feats = [x]
        for li in range(1, n + 1):
            p = f"features.denseblock{bi}.denselayer{li}"
            cin = c + (li - 1) * growth
            y = feats[0] if len(feats) == 1 else b.node("Concat", feats, f"{p}.cat", axis=1)
            y = b.relu(b.bn(y, f"{p}.norm1", cin), f"{p}.relu1")
            y = b.conv(y, f"{p}.conv1", cin, bn_size * growth, 1, bias=False)
            y = b.relu(b.bn(y, f"{p}.norm2", bn_size * growth), f"{p}.relu2")
            y = b.conv(y, f"{p}.conv2", bn_size * growth, growth, 3, bias=False)
            feats.append(y)
        x = b.node("Concat", feats, f"features.denseblock{bi}.cat", axis=1)
        c += n * growth
        if bi < 4:
            p = f"features.transition{bi}"
            x = b.relu(b.bn(x, f"{p}.norm", c), f"{p}.relu")
            x = b.conv(x, f"{p}.conv", c, c // 2, 1, bias=False)
            x = b.avgpool(x, f"{p}.pool", 2, 2)
            c //= 2
    x = b.relu(b.bn(x, "features.norm5", c), "features.relu5")
    x = b.flatten(b.gap(x, "avgpool"), "flatten")
    x = b.linear(x, "classifier", c, 1000, out="output", gain=1.0)
    return b.model("input", x, [b.batch, 1000])


def _tiny_chain(b: _Builder) -> onnx.ModelProto:
    h, w = b.hw
    x = b.relu(b.conv("input", "conv1", 3, 8, 3), "relu1")
    x = b.relu(b.conv(x, "conv2", 8, 16, 3), "relu2")
    x = b.maxpool(x, "pool1", 2, 2)
    x = b.relu(b.conv(x, "conv3", 16, 16, 3), "relu3")
    x = b.maxpool(x, "pool2", 2, 2)
    x = b.conv(x, "conv4", 16, 8, 1, out="output")
    return b.model("input", x, [b.batch, 8, h // 4, w // 4])


def _tiny_residual(b: _Builder) -> onnx.ModelProto:
    h, w = b.hw
    x = b.relu(b.conv("input", "conv1", 3, 8, 3), "relu1")
    y = b.relu(b.conv(x, "conv2", 8, 8, 3), "relu2")
    y = b.conv(y, "conv3", 8, 8, 3)
    x = b.relu(b.add(y, x, "add"), "relu3")
    x = b.maxpool(x, "pool", 2, 2)
    x = b.conv(x, "conv4", 8, 4, 1, out="output")
    return b.model("input", x, [b.batch, 4, h // 2, w // 2])


def _tiny_fc(b: _Builder) -> onnx.ModelProto:
    h, w = b.hw
    x = b.relu(b.conv("input", "conv1", 3, 8, 3), "relu1")
    x = b.maxpool(x, "pool", 2, 2)
    x = b.flatten(x, "flatten")
    x = b.linear(x, "fc", 8 * (h // 2) * (w // 2), 10, out="output", gain=1.0)
    return b.model("input", x, [b.batch, 10])


def _tiny_unet(b: _Builder) -> onnx.ModelProto:
    h, w = b.hw
    e1 = b.relu(b.conv("input", "enc1", 3, 8, 3), "enc1.relu")
    x = b.maxpool(e1, "pool1", 2, 2)
    e2 = b.relu(b.conv(x, "enc2", 8, 16, 3), "enc2.relu")
    x = b.maxpool(e2, "pool2", 2, 2)
    x = b.relu(b.conv(x, "bottleneck", 16, 16, 3), "bottleneck.relu")
    sizes = b.ints("up1.sizes", [b.batch, 16, h // 2, w // 2])
    x = b.node("Resize", [x, "", "", sizes], "up1", mode="nearest", coordinate_transformation_mode="asymmetric",
               nearest_mode="floor")
    x = b.node("Concat", [x, e2], "cat1", axis=1)
    x = b.relu(b.conv(x, "dec1", 32, 16, 3), "dec1.relu")
    wt = b.weight("up2.weight", (16, 8, 2, 2), std=(2.0 / (16 * 4)) ** 0.5)
    bt = b.weight("up2.bias", (8,), std=0.01)
    x = b.node("ConvTranspose", [x, wt, bt], "up2", kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Concat", [x, e1], "cat2", axis=1)
    x = b.relu(b.conv(x, "dec2", 16, 8, 3), "dec2.relu")
    x = b.conv(x, "head", 8, 2, 1, out="output")
    return b.model("input", x, [b.batch, 2, h, w])


@dataclass(frozen=True)
class _Entry:
    make: Callable[[_Builder], onnx.ModelProto]
    size: int  # default input H = W
    min_size: int
    multiple: int = 1
    doc: str = ""


MODELS: dict[str, _Entry] = {
    "alexnet": _Entry(_alexnet, 224, 63, doc="torchvision alexnet"),
    "densenet121": _Entry(_densenet121, 224, 32, doc="torchvision densenet121"),
    "mobilenetv2": _Entry(_mobilenetv2, 224, 32, doc="torchvision mobilenet_v2, width 1.0"),
    **{k: _Entry(lambda b, kind=kind, n=n: _resnet(b, kind, n), 224, 32, doc=f"torchvision {k} (v1.5)")
       for k, (kind, n) in RESNET_CFG.items()},
    **{k: _Entry(lambda b, cfg=cfg: _vgg(b, cfg), 224, 32, doc=f"torchvision {k}") for k, cfg in VGG_CFG.items()},
    "tiny_chain": _Entry(_tiny_chain, 32, 4, doc="3 convs, 2 max pools, a 1x1 conv"),
    "tiny_residual": _Entry(_tiny_residual, 32, 2, doc="conv, two convs with an Add skip, pool"),
    "tiny_fc": _Entry(_tiny_fc, 32, 2, doc="conv, pool, Flatten, Gemm"),
    "tiny_unet": _Entry(_tiny_unet, 32, 4, multiple=4, doc="two-level U-Net: Resize, ConvTranspose, Concat"),
}


def names() -> list[str]:
    """Names of the built-in models, sorted."""
    return sorted(MODELS)


def default_size(name: str) -> int:
    return _entry(name).size


def _entry(name: str) -> _Entry:
    try:
        return MODELS[name]
    except KeyError:
        raise PlannerError(f"zoo:{name}: no such zoo model (have: {', '.join(names())})") from None


def build(name: str, size: int | tuple[int, int] | None = None, weights: bool = False, seed: int = 0,
          batch: int = 1) -> onnx.ModelProto:
    """The zoo model ``name`` at input H = W = ``size`` (or (H, W)) and batch ``batch``.

    Without ``weights`` the initializers are dims-only stubs (fast; for inspection and
    planning). With ``weights`` they hold float32 values drawn from ``default_rng(seed)``.
    """
    e = _entry(name)
    if size is None:
        hw = (e.size, e.size)
    elif isinstance(size, int):
        hw = (size, size)
    else:
        hw = tuple(int(v) for v in size)
    for v in hw:
        if v < e.min_size or v % e.multiple:
            need = f"at least {e.min_size}" + (f" and a multiple of {e.multiple}" if e.multiple > 1 else "")
            raise PlannerError(f"zoo:{name}: input size {v} is not supported (needs {need})")
    if batch < 1:
        raise PlannerError(f"zoo:{name}: batch {batch} must be positive")
    return e.make(_Builder(name, weights, seed, batch, hw))


def export(name: str, out_path, size: int | tuple[int, int] | None = None, seed: int = 0) -> Path:
    """Write zoo model ``name`` with deterministic random weights to ``out_path``.

    The file is checked with ``onnx.checker`` and written through a temporary file, so a
    failed export leaves nothing behind. Models over 1.8 GB keep their weights in a
    ``<out>.data`` file next to it (no zoo model is that large at its default size).
    """
    out = Path(out_path)
    model = build(name, size=size, weights=True, seed=seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    external = model.ByteSize() > EXTERNAL_LIMIT
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if external:
            data_name = out.name + ".data"
            onnx.save_model(model, tmp, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=data_name)
        else:
            onnx.save_model(model, tmp)
        del model
        onnx.checker.check_model(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it private
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return out

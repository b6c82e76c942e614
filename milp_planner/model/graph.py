"""The layer graph: ONNX nodes after folding, in topological (file) order.

This is the one graph type every other module works on (docs/model.md section 2). It knows
nothing about devices or plans. Tensors are named by their ONNX names; every layer
produces exactly one tensor (``Layer.output``).

Row geometry lives here too, because it is a property of the layers alone:
``input_rows(layer, a, b)`` answers "which rows of each input do output rows [a, b) read".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

Interval = tuple[int, int]  # half-open [a, b); empty when a >= b

EMPTY: Interval = (0, 0)


@dataclass(frozen=True)
class RowDep:
    """How output rows [a, b) of a layer map to rows of its activation inputs (along H).

    kind:
      ``window``   conv/pool: [a*s - pad_top, (b-1)*s - pad_top + (k-1)*dil + 1), clipped
      ``identity`` elementwise, Add, Mul, Concat along channels: [a, b)
      ``resize``   Resize/Upsample by an integer-or-rational factor f = H_out / H_in:
                   [floor(a/f), ceil(b/f)), widened by one row each side when ``linear``
      ``transpose`` ConvTranspose: the input rows whose scatter window touches [a, b)
      ``none``     reads whole inputs (not row-splittable)
    """

    kind: str = "none"
    kernel: int = 1
    stride: int = 1
    pad_top: int = 0
    dilation: int = 1
    # resize: factor as a rational num/den (H_out / H_in)
    factor_num: int = 1
    factor_den: int = 1
    linear: bool = False


@dataclass
class Layer:
    """One layer (an ONNX node plus the nodes folded into it).

    ``shape`` is the output shape, (N, C, H, W) for feature maps or (N, F) / other ranks for
    the rest. ``inputs`` are activation tensors only (weights and other constants are not
    listed). ``rowdep`` applies to every activation input.
    """

    id: int
    name: str
    op: str
    inputs: tuple[str, ...]
    output: str
    shape: tuple[int, ...]
    macs: int = 0
    ops: int = 0
    params: int = 0
    rowdep: RowDep = field(default_factory=RowDep)
    row_splittable: bool = False
    channel_splittable: bool = False
    groups: int = 1  # conv groups: a channel part reads only its groups' input channels
    folded: tuple[str, ...] = ()  # op types folded into this layer
    attrs: dict = field(default_factory=dict)  # op-specific details (informational)

    @property
    def rows(self) -> int:
        """Rows of the output (H), 1 for tensors without a spatial height."""
        return self.shape[2] if len(self.shape) == 4 else 1

    @property
    def channels(self) -> int:
        """Output channels (C of NCHW) or features (last dim of a 2-D output)."""
        if len(self.shape) == 4:
            return self.shape[1]
        return self.shape[-1] if self.shape else 1

    @property
    def work(self) -> int:
        """What the cost models charge for the whole layer: MACs + ops."""
        return self.macs + self.ops


@dataclass
class LayerGraph:
    """Layers in topological order plus the shapes of every tensor they exchange."""

    name: str
    layers: list[Layer]
    inputs: dict[str, tuple[int, ...]]  # graph input tensor -> shape
    outputs: list[str]  # graph output tensors
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._producer = {layer.output: layer.id for layer in self.layers}
        self._consumers: dict[str, list[int]] = {}
        for layer in self.layers:
            for t in dict.fromkeys(layer.inputs):
                self._consumers.setdefault(t, []).append(layer.id)

    def __len__(self) -> int:
        return len(self.layers)

    def producer(self, tensor: str) -> int | None:
        """Id of the layer producing ``tensor``, or None for a graph input."""
        return self._producer.get(tensor)

    def consumers(self, tensor: str) -> list[int]:
        """Ids of the layers reading ``tensor``, ascending."""
        return self._consumers.get(tensor, [])

    def shape(self, tensor: str) -> tuple[int, ...]:
        """Shape of any tensor of the graph (graph input or layer output)."""
        pid = self._producer.get(tensor)
        if pid is not None:
            return self.layers[pid].shape
        return self.inputs[tensor]

    def tensor_rows(self, tensor: str) -> int:
        shape = self.shape(tensor)
        return shape[2] if len(shape) == 4 else 1

    def tensor_channels(self, tensor: str) -> int:
        shape = self.shape(tensor)
        if len(shape) == 4:
            return shape[1]
        return shape[-1] if shape else 1

    def elements(self, tensor: str) -> int:
        return prod(self.shape(tensor))

    @property
    def totals(self) -> dict[str, int]:
        return {
            "params": sum(layer.params for layer in self.layers),
            "macs": sum(layer.macs for layer in self.layers),
            "ops": sum(layer.ops for layer in self.layers),
        }


# ---------------------------------------------------------------------------
# Row geometry


def clip(iv: Interval, hi: int) -> Interval:
    a, b = max(0, iv[0]), min(hi, iv[1])
    return (a, b) if a < b else EMPTY


def hull(a: Interval, b: Interval) -> Interval:
    """Smallest interval covering both (empty intervals are ignored)."""
    if a[0] >= a[1]:
        return b if b[0] < b[1] else EMPTY
    if b[0] >= b[1]:
        return a
    return (min(a[0], b[0]), max(a[1], b[1]))


def length(iv: Interval) -> int:
    return max(0, iv[1] - iv[0])


def overlap(a: Interval, b: Interval) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def input_rows(dep: RowDep, out: Interval, h_in: int) -> Interval:
    """Rows of an input (height ``h_in``) that output rows ``out`` read (docs/model.md section 2)."""
    a, b = out
    if a >= b:
        return EMPTY
    if dep.kind == "identity":
        return clip((a, b), h_in)
    if dep.kind == "window":
        s, p, k, d = dep.stride, dep.pad_top, dep.kernel, dep.dilation
        return clip((a * s - p, (b - 1) * s - p + (k - 1) * d + 1), h_in)
    if dep.kind == "resize":
        # f = num/den ; floor(a/f) = floor(a*den/num), ceil(b/f) = ceil(b*den/num)
        num, den = dep.factor_num, dep.factor_den
        lo, hi = (a * den) // num, -((-b * den) // num)
        if dep.linear:
            lo, hi = lo - 1, hi + 1
        return clip((lo, hi), h_in)
    if dep.kind == "transpose":
        # ConvTranspose: input row i writes output rows [i*s - p, i*s - p + (k-1)*d + 1).
        s, p, k, d = dep.stride, dep.pad_top, dep.kernel, dep.dilation
        span = (k - 1) * d + 1
        lo = -((-(a + p - span + 1)) // s)  # ceil((a + p - span + 1) / s)
        hi = (b - 1 + p) // s + 1
        return clip((lo, hi), h_in)
    return (0, h_in)


def last_readers(graph: LayerGraph) -> dict[str, int]:
    """The id of the last layer reading each tensor; graph outputs map to the number of layers
    (they stay live until the gather)."""
    n = len(graph.layers)
    last: dict[str, int] = {}
    for layer in graph.layers:
        for t in layer.inputs:
            last[t] = max(last.get(t, -1), layer.id)
    for t in graph.outputs:
        last[t] = n
    return last

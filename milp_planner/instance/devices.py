"""Devices and their cost models (docs/model.md sections 1 and 4).

A cost model answers one question: how long does this device take to compute a fraction of
one layer. Numbers from instance files are exact rationals (``Fraction``) so that the
capacity split, which rounds on device speeds, is exact; ``layer_time`` works on Fractions
or floats alike and returns the same type it is given.

Models:
  ``linear``   fraction x (MACs + ops) / macs_per_s + overhead_s
  ``roofline`` fraction x max((MACs + ops) / macs_per_s, bytes / mem_bytes_per_s) + overhead_s,
               where bytes = input + output activations + weights of the whole layer (the
               traffic scales with the fraction computed)
  ``table``    measured seconds per layer name, at fraction 1 or at several fractions,
               interpolated linearly through (0, 0) and extrapolated from the last segment;
               layers missing from the table fall back to ``macs_per_s`` (+ overhead_s)
               when it is given. The overhead is part of the measurement: not added again.
               A layer may have a second table for channel parts (``channel_table``, from
               ``{rows: ..., channels: ...}`` in the file): a channel part of that layer is
               priced from it, every other part from ``table``.
A part that computes nothing of a layer (fraction 0) costs nothing, not even the overhead.

Every model may also carry ``stage_overhead_s`` (default 0): a fixed cost charged once to a
device for each stage in which it computes a part (one call of the runtime, its bindings, cold
caches), added to that stage's compute by the evaluator (``cost.evaluator.price_stage``), never
per layer. ``profile`` measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping

from milp_planner.model.graph import Layer

COST_MODELS = ("linear", "roofline", "table")


@dataclass(frozen=True)
class CostModel:
    kind: str = "linear"
    macs_per_s: Fraction | None = None
    overhead_s: Fraction = Fraction(0)
    mem_bytes_per_s: Fraction | None = None
    # layer name -> ((fraction, seconds), ...) ascending in fraction
    table: Mapping[str, tuple[tuple[Fraction, Fraction], ...]] = field(default_factory=dict)
    # the same for channel parts, where measured apart (rows and channels scale differently)
    channel_table: Mapping[str, tuple[tuple[Fraction, Fraction], ...]] = field(default_factory=dict)
    # a fixed cost per stage in which the device computes a part (docs/model.md section 4)
    stage_overhead_s: Fraction = Fraction(0)

    def points(self, name: str, axis: str = "rows"):
        """The measured points that price ``axis`` parts of layer ``name`` (None: not in the table)."""
        if axis == "channels" and name in self.channel_table:
            return self.channel_table[name]
        return self.table.get(name)


@dataclass(frozen=True)
class Power:
    compute_w: Fraction = Fraction(0)
    tx_w: Fraction = Fraction(0)
    rx_w: Fraction = Fraction(0)


@dataclass(frozen=True)
class Device:
    name: str
    compute: CostModel
    memory_bytes: int | None = None  # None = unbounded
    power: Power = field(default_factory=Power)
    node: str = ""  # devices with the same node are units of one machine
    profile: str | None = None


def layer_time(model: CostModel, layer: Layer, fraction, io_bytes: int = 0, weight_bytes: int = 0,
               axis: str = "rows"):
    """Seconds ``model`` takes to compute ``fraction`` (0..1) of ``layer``.

    ``io_bytes`` (input + output activation bytes) and ``weight_bytes`` are used by the
    roofline model only; ``axis`` (``channels`` for a channel part) by a ``table`` model that
    has a channel table for the layer. The result is a Fraction when ``fraction`` is one,
    else a float.
    """
    if fraction <= 0:
        return fraction * 0
    exact = isinstance(fraction, Fraction)
    num = (lambda x: x) if exact else float
    points = model.points(layer.name, axis) if model.kind == "table" else None
    if points is not None:
        return _interpolate(points, fraction, num)
    if model.macs_per_s is None:
        raise ValueError(f"device cost model has no entry for layer {layer.name!r}")
    per_whole = num(layer.work) / num(model.macs_per_s)
    if model.kind == "roofline" and model.mem_bytes_per_s:
        per_whole = max(per_whole, num(io_bytes + weight_bytes) / num(model.mem_bytes_per_s))
    return fraction * per_whole + num(model.overhead_s)


def _interpolate(points, fraction, num):
    prev_f, prev_t = 0, 0
    for f, t in points:
        f, t = num(f), num(t)
        if fraction <= f:
            return prev_t + (t - prev_t) * (fraction - prev_f) / (f - prev_f)
        prev_f, prev_t = f, t
    if len(points) == 1:
        return prev_t * fraction / prev_f
    (f0, t0), (f1, t1) = points[-2], points[-1]
    f0, t0, f1, t1 = num(f0), num(t0), num(f1), num(t1)
    return t1 + (t1 - t0) * (fraction - f1) / (f1 - f0)

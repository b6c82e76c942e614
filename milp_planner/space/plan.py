"""The plan: stages of consecutive layers, each split into parts on devices (MODEL.md section 3).

``Plan.from_json`` / ``Plan.to_json`` read and write the documented JSON format;
``check_plan(plan, instance)`` raises ``PlannerError`` for a structurally broken plan.
Whether a valid plan lies inside the instance's search space is ``space.out_of_space``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from milp_planner.errors import PlannerError

PLAN_AXES = ("none", "rows", "channels")


@dataclass(frozen=True)
class Part:
    device: str
    range: tuple[int, int] | None = None  # rows or channels of the stage's last layer; None = all


@dataclass(frozen=True)
class Stage:
    first: int
    last: int
    axis: str  # none | rows | channels
    parts: tuple[Part, ...]

    @property
    def layers(self) -> range:
        return range(self.first, self.last + 1)

    @property
    def devices(self) -> list[str]:
        return [p.device for p in self.parts]


@dataclass
class Plan:
    instance: str
    stages: list[Stage]
    meta: dict = field(default_factory=dict)  # free-form: planner name, notes

    # -- JSON -------------------------------------------------------------
    def to_dict(self) -> dict:
        stages = []
        for s in self.stages:
            parts = []
            for p in s.parts:
                d = {"device": p.device}
                if p.range is not None:
                    d["range"] = [p.range[0], p.range[1]]
                parts.append(d)
            stages.append({"first": s.first, "last": s.last, "axis": s.axis, "parts": parts})
        out = {"instance": self.instance, "stages": stages}
        if self.meta:
            out["meta"] = self.meta
        return out

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict, source: str = "plan") -> "Plan":
        def bad(msg):
            raise PlannerError(f"{source}: {msg}")

        if not isinstance(data, dict) or "stages" not in data:
            bad("expected an object with 'stages'")
        unknown = set(data) - {"instance", "stages", "meta"}
        if unknown:
            bad(f"unknown key {sorted(unknown)[0]!r}")
        if not isinstance(data["stages"], list) or not data["stages"]:
            bad("'stages' must be a non-empty list")
        stages = []
        for i, s in enumerate(data["stages"]):
            where = f"stages[{i}]"
            if not isinstance(s, dict):
                bad(f"{where}: expected an object")
            unknown = set(s) - {"first", "last", "axis", "parts"}
            if unknown:
                bad(f"{where}: unknown key {sorted(unknown)[0]!r}")
            for k in ("first", "last", "parts"):
                if k not in s:
                    bad(f"{where}: missing key {k!r}")
            if not isinstance(s["first"], int) or not isinstance(s["last"], int):
                bad(f"{where}: 'first' and 'last' must be integers")
            axis = s.get("axis", "none")
            if axis not in PLAN_AXES:
                bad(f"{where}.axis: {axis!r} is not one of {', '.join(PLAN_AXES)}")
            if not isinstance(s["parts"], list) or not s["parts"]:
                bad(f"{where}.parts: must be a non-empty list")
            parts = []
            for j, p in enumerate(s["parts"]):
                pw = f"{where}.parts[{j}]"
                if not isinstance(p, dict) or "device" not in p:
                    bad(f"{pw}: expected an object with 'device'")
                unknown = set(p) - {"device", "range"}
                if unknown:
                    bad(f"{pw}: unknown key {sorted(unknown)[0]!r}")
                rng = p.get("range")
                if rng is not None:
                    if (not isinstance(rng, list) or len(rng) != 2
                            or not all(isinstance(x, int) for x in rng)):
                        bad(f"{pw}.range: must be [start, stop] integers")
                    rng = (rng[0], rng[1])
                parts.append(Part(str(p["device"]), rng))
            stages.append(Stage(s["first"], s["last"], axis, tuple(parts)))
        return cls(str(data.get("instance", "")), stages, dict(data.get("meta") or {}))

    @classmethod
    def from_json(cls, text: str, source: str = "plan") -> "Plan":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise PlannerError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})") from None
        return cls.from_dict(data, source)

    @classmethod
    def load(cls, path) -> "Plan":
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise PlannerError(f"{path}: cannot read plan ({e.strerror})") from None
        return cls.from_json(text, str(path))

    def save(self, path) -> None:
        """Write atomically: the file is whole or absent."""
        from milp_planner.io import write_atomic

        write_atomic(Path(path), self.to_json() + "\n")


def check_plan(plan: Plan, instance) -> None:
    """Raise ``PlannerError`` naming the stage and the reason if ``plan`` is broken for ``instance``.

    Broken means: stages that leave gaps or overlap, an unknown device, a device used twice in
    one stage, ranges that are missing, empty, overlapping or not covering the output,
    ``rows`` on a layer that is not row-splittable, ``channels`` on more than one layer or on
    a layer that cannot be split by channels.
    """
    g = instance.graph
    names = set(instance.device_names)
    n = len(g.layers)
    expect = 0
    for i, s in enumerate(plan.stages):
        where = f"plan stage {i} (layers {s.first}-{s.last})"
        if s.first != expect:
            kind = "overlaps the previous stage" if s.first < expect else f"leaves layers {expect}-{s.first - 1} uncovered"
            raise PlannerError(f"{where}: {kind}")
        if s.last < s.first:
            raise PlannerError(f"{where}: last < first")
        if s.last >= n:
            raise PlannerError(f"{where}: the model has only {n} layers (ids 0-{n - 1})")
        expect = s.last + 1
        seen = set()
        for p in s.parts:
            if p.device not in names:
                raise PlannerError(f"{where}: unknown device {p.device!r} (devices: {', '.join(sorted(names))})")
            if p.device in seen:
                raise PlannerError(f"{where}: device {p.device!r} holds two parts of one stage")
            seen.add(p.device)
        if s.axis == "none":
            if len(s.parts) != 1:
                raise PlannerError(f"{where}: axis none takes exactly one part, got {len(s.parts)}")
            continue
        if len(s.parts) == 1:  # a one-part rows or channels stage is the same plan as none
            continue
        if s.axis == "rows":
            for lid in s.layers:
                if not g.layers[lid].row_splittable:
                    raise PlannerError(
                        f"{where}: axis rows, but layer {lid} ({g.layers[lid].name}, {g.layers[lid].op}) is not row-splittable")
            extent, what = g.layers[s.last].rows, "rows"
        else:
            if s.first != s.last:
                raise PlannerError(f"{where}: axis channels takes exactly one layer")
            layer = g.layers[s.first]
            if not layer.channel_splittable:
                raise PlannerError(f"{where}: layer {layer.name} ({layer.op}) cannot be split by channels")
            extent, what = layer.channels, "channels"
        ranges = []
        for p in s.parts:
            if p.range is None:
                if len(s.parts) == 1:
                    continue
                raise PlannerError(f"{where}: part on {p.device!r} has no range")
            a, b = p.range
            if a >= b:
                raise PlannerError(f"{where}: part on {p.device!r} has an empty range [{a}, {b})")
            ranges.append((a, b))
        ranges.sort()
        if not ranges:
            continue
        if ranges[0][0] != 0 or ranges[-1][1] != extent:
            raise PlannerError(f"{where}: ranges must cover {what} [0, {extent}), they cover [{ranges[0][0]}, {ranges[-1][1]})")
        for (a0, b0), (a1, b1) in zip(ranges, ranges[1:]):
            if a1 < b0:
                raise PlannerError(f"{where}: ranges [{a0}, {b0}) and [{a1}, {b1}) overlap")
            if a1 > b0:
                raise PlannerError(f"{where}: {what} [{b0}, {a1}) belong to no part")
    if expect != n:
        raise PlannerError(f"plan: layers {expect}-{n - 1} are in no stage (the model has {n} layers)")

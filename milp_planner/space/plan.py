"""The plan: stages of consecutive layers, each split into parts on devices (docs/model.md section 3).

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
MAX_INDEX = 10**9  # layer ids and row/channel indices

_INDEX = {"type": "integer", "minimum": 0, "maximum": MAX_INDEX}  # JSON Schema: true is not an integer
PLAN_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "milp-planner plan",
    "type": "object",
    "required": ["stages"],
    "additionalProperties": False,
    "properties": {
        "instance": {"type": "string"},
        "meta": {"type": "object"},
        "stages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["first", "last", "parts"],
                "additionalProperties": False,
                "properties": {
                    "first": _INDEX,
                    "last": _INDEX,
                    "axis": {"enum": list(PLAN_AXES)},
                    "parts": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["device"],
                            "additionalProperties": False,
                            "properties": {
                                "device": {"type": "string", "minLength": 1},
                                "range": {"type": "array", "items": _INDEX, "minItems": 2, "maxItems": 2},
                            },
                        },
                    },
                },
            },
        },
    },
}


def _schema_path(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _short(value) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    if isinstance(value, dict):
        text = "an object"
    elif isinstance(value, list):
        text = f"a list of {len(value)}"
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        text = "a huge integer"
    return text if len(text) <= 40 else text[:37] + "..."


def validate_plan_dict(data, source: str = "plan") -> None:
    """Raise ``PlannerError`` ``SOURCE: KEY: reason`` if ``data`` does not follow ``PLAN_SCHEMA``."""
    import jsonschema

    from milp_planner.io import strict_json_validator

    error = jsonschema.exceptions.best_match(strict_json_validator(PLAN_SCHEMA).iter_errors(data))
    if error is None:
        return
    where = _schema_path(error.absolute_path) or "plan"
    got = _short(error.instance)
    kind = error.validator
    if kind == "required":
        reason = error.message.split(" is a required")[0] + " is required"
    elif kind == "additionalProperties":
        allowed = ", ".join(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})), key=str)
        reason = f"unknown key {str(extra[0])!r} (allowed: {allowed})"
    elif kind == "type":
        want = error.validator_value
        reason = f"must be {'an' if want in ('integer', 'object', 'array') else 'a'} {want} (got {got})"
    elif kind in ("minimum", "maximum"):
        reason = f"must be {'>=' if kind == 'minimum' else '<='} {error.validator_value} (got {got})"
    elif kind == "enum":
        reason = f"must be one of {', '.join(map(str, error.validator_value))} (got {got})"
    elif kind in ("minItems", "maxItems"):
        reason = "must be [start, stop]" if where.endswith("range") else "must not be empty"
    elif kind == "minLength":
        reason = "must not be empty"
    else:
        reason = " ".join(error.message.split())[:120]
    raise PlannerError(f"{source}: {where}: {reason}")


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
        from milp_planner.io import dumps_json

        return dumps_json(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict, source: str = "plan") -> "Plan":
        """Build a plan from its JSON structure; ``PlannerError`` naming the key if it breaks the schema."""
        validate_plan_dict(data, source)
        try:  # meta is free-form, but must be JSON data (a Python caller could pass anything)
            json.dumps(data.get("meta") or {}, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise PlannerError(f"{source}: meta: must be JSON data ({e})") from None
        stages = []
        for s in data["stages"]:
            parts = tuple(Part(p["device"], tuple(p["range"]) if p.get("range") is not None else None)
                          for p in s["parts"])
            stages.append(Stage(s["first"], s["last"], s.get("axis", "none"), parts))
        return cls(str(data.get("instance", "")), stages, dict(data.get("meta") or {}))

    @classmethod
    def from_json(cls, text: str, source: str = "plan") -> "Plan":
        def constant(name):
            raise ValueError(f"{name} is not a JSON value")

        try:
            data = json.loads(text, parse_constant=constant)
        except json.JSONDecodeError as e:
            raise PlannerError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})") from None
        except ValueError as e:  # an integer of thousands of digits, NaN, Infinity
            raise PlannerError(f"{source}: not valid plan JSON ({' '.join(str(e).split())[:120]})") from None
        except RecursionError:
            raise PlannerError(f"{source}: JSON nested too deeply") from None
        return cls.from_dict(data, source)

    @classmethod
    def load(cls, path) -> "Plan":
        """Read and check the plan file ``path`` (a regular file of JSON, at most 16 MiB)."""
        from milp_planner.io import read_text_bounded

        return cls.from_json(read_text_bounded(path, "a plan file"), str(path))

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
            rng = s.parts[0].range
            extent = g.layers[s.last].rows if s.axis == "rows" else g.layers[s.last].channels
            if rng is not None and tuple(rng) != (0, extent):
                raise PlannerError(f"{where}: its one part must cover {s.axis} [0, {extent}), "
                                   f"not [{rng[0]}, {rng[1]})")
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
            if a < 0 or b > extent:
                raise PlannerError(f"{where}: part on {p.device!r} has range [{a}, {b}) outside {what} [0, {extent})")
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

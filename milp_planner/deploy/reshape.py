"""A deployment at another input shape, without a new solve (``run --input-shape``).

The plan a folder was written from (its stages, devices and cuts) is read back from its
manifest and carried to the new shape: the model is imported again at that shape and must
give the same layer graph (the same layers with the same operators; a Flatten into a Gemm of
fixed width, or a Reshape to fixed sizes, changes it and is refused in one line); a row
split keeps its proportions (each boundary rounded to the nearest row of the new map, every
part keeping at least one row), a channel split its channels. The carried plan is checked
and deployed by ``deploy`` into a folder the caller owns (``run`` uses a temporary one and
deletes it), so its sub-models, messages and predictions are those of the new shape.

>>> from milp_planner.deploy.reshape import carry_ranges
>>> carry_ranges([(0, 32), (32, 64)], 64, 20)
[(0, 10), (10, 20)]
"""

from __future__ import annotations

from pathlib import Path

from milp_planner.errors import PlannerError
from milp_planner.space.plan import Part, Plan, Stage


def plan_of_manifest(manifest) -> Plan:
    """The plan ``manifest`` was deployed from (stages, axes, devices and ranges)."""
    stages = [Stage(s.first, s.last, s.axis, tuple(Part(p.device, tuple(p.range) if p.range else None)
                                                    for p in s.parts))
              for s in manifest.stages]
    return Plan(manifest.instance, stages, {"planner": "deployment", "carried_from": manifest.inputs})


def carry_ranges(ranges: list[tuple[int, int]], old: int, new: int) -> list[tuple[int, int]] | None:
    """Contiguous ``ranges`` over ``old`` rows carried to ``new`` rows in proportion (each
    boundary to the nearest row, half up), or None when some part would get no row."""
    out, start = [], 0
    for i, (_, hi) in enumerate(ranges):
        end = new if i == len(ranges) - 1 else (2 * hi * new + old) // (2 * old)
        if end <= start:
            return None
        out.append((start, end))
        start = end
    return out


def _same_graph(old, new, label: str) -> None:
    if len(old.layers) != len(new.layers):
        raise PlannerError(f"run --input-shape {label}: the model imports into {len(new.layers)} layers at "
                           f"this shape, not the {len(old.layers)} it was deployed with; deploy it anew")
    for a, b in zip(old.layers, new.layers):
        if a.op != b.op or a.name != b.name:
            raise PlannerError(f"run --input-shape {label}: layer {a.id} is {b.name} ({b.op}) at this shape, "
                               f"not {a.name} ({a.op}); deploy it anew")
        if a.channels != b.channels and len(a.shape) == len(b.shape) == 4:
            raise PlannerError(f"run --input-shape {label}: layer {a.name} has {b.channels} channels at this "
                               f"shape, not {a.channels}; deploy it anew")


def carry_plan(plan: Plan, old_graph, new_graph, instance_name: str, label: str) -> Plan:
    """``plan`` (over ``old_graph``) carried to ``new_graph`` (the same layers at another shape)."""
    _same_graph(old_graph, new_graph, label)
    stages = []
    for k, s in enumerate(plan.stages):
        if s.axis != "rows":
            stages.append(s)
            continue
        old, new = old_graph.layers[s.last].rows, new_graph.layers[s.last].rows
        ranges = carry_ranges([p.range for p in s.parts], old, new)
        if ranges is None:
            raise PlannerError(f"run --input-shape {label}: stage {k} splits {old} rows over {len(s.parts)} "
                               f"devices; at this shape layer {new_graph.layers[s.last].name} has {new} row(s), "
                               f"too few for every part: deploy a plan for this shape")
        stages.append(Stage(s.first, s.last, s.axis, tuple(Part(p.device, r) for p, r in zip(s.parts, ranges))))
    return Plan(instance_name, stages, dict(plan.meta))


def shape_text(shapes: dict) -> str:
    return " ".join((f"{name}=" if name else "") + ",".join(str(d) for d in dims) for name, dims in shapes.items())


def deploy_at_shape(folder, instance_path, shapes: dict, out_dir, memory_budget: int | None = None) -> Path:
    """Deploy the plan of the deployment ``folder`` again at the input ``shapes`` (``{name or
    None: dims}``, as ``--input-shape`` gives them) into ``out_dir``; ``instance_path`` is the
    instance the folder was deployed from (its name and devices are checked). Returns the
    new folder."""
    from milp_planner.deploy.build import deploy, model_path
    from milp_planner.deploy.manifest import Manifest
    from milp_planner.instance import load_instance
    from milp_planner.instance.reader import resolve_instance_path
    from milp_planner.io import printable
    from milp_planner.space.plan import check_plan

    text = shape_text(shapes)
    m = Manifest.load(folder)
    given = {k: tuple(v) for k, v in m.inputs.items()}
    if len(given) == 1:  # the first input, as a zoo model takes it
        given = {None: next(iter(given.values()))}
    old = load_instance(instance_path, input_shape=given)
    if old.name != m.instance or old.device_names != list(m.devices):
        raise PlannerError(f"{printable(instance_path)}: not the instance {printable(folder)} was deployed from "
                           f"(that was {printable(m.instance)} with devices {', '.join(m.devices)})")
    new = load_instance(instance_path, input_shape=shapes)
    plan = carry_plan(plan_of_manifest(m), old.graph, new.graph, new.name, text)
    check_plan(plan, new)
    inputs = [resolve_instance_path(instance_path), Path(folder)]
    if model_path(new) is not None:
        inputs.append(model_path(new))
    return deploy(new, plan, out_dir, inputs=inputs, memory_budget=memory_budget)

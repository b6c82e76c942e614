"""Model references: ``zoo:NAME``, ``zoo:NAME:SIZE`` or a path to an ``.onnx`` file.

``load_graph(ref, base_dir=None, input_shape=None)`` turns a reference into a ``LayerGraph``
(relative paths are taken relative to ``base_dir``, e.g. an instance file's folder).

``input_shape`` is a shape for the first input or a mapping input name -> shape (the
importer's ``input_shapes``). For a zoo model, ``input_shape`` (N, 3, H, W) builds the model at that batch and size (the
zoo's fully connected layers are sized from it), so it may differ from the default size.
"""

from __future__ import annotations

from pathlib import Path

from milp_planner.errors import PlannerError
from milp_planner.model.graph import LayerGraph

INSTANCE_SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_DTYPE_BYTES = 4


def parse_zoo_ref(ref: str) -> tuple[str, int | None]:
    """``zoo:NAME`` or ``zoo:NAME:SIZE`` -> (NAME, SIZE or None)."""
    body = ref[len("zoo:"):]
    name, _, size_text = body.partition(":")
    name = name.strip().lower()
    if not name:
        raise PlannerError(f"{ref}: a zoo reference is zoo:NAME or zoo:NAME:SIZE")
    size = None
    if size_text:
        try:
            size = int(size_text)
        except ValueError:
            raise PlannerError(f"{ref}: SIZE must be an integer (input height = width)") from None
        if size <= 0:
            raise PlannerError(f"{ref}: SIZE must be positive")
    return name, size


def load_graph(ref: str, base_dir: Path | None = None, input_shape=None) -> LayerGraph:
    """The layer graph of a model reference (see the module docstring)."""
    from milp_planner.model.onnx import import_onnx

    ref = str(ref)
    if ref.startswith("zoo:"):
        from milp_planner.model import zoo

        name, size = parse_zoo_ref(ref)
        hw: int | tuple[int, int] | None = size
        batch = 1
        if isinstance(input_shape, dict):
            named = [k for k in input_shape if k]
            if named:
                raise PlannerError(f"{ref}: a zoo model has one input; give its shape without a name "
                                   f"(not {named[0]}=...)")
            input_shape = input_shape.get(None, input_shape.get(""))
        if input_shape is not None:
            shape = tuple(int(d) for d in input_shape)
            if len(shape) != 4 or shape[1] != 3:
                raise PlannerError(f"{ref}: input shape {shape} must be (N, 3, H, W) for a zoo model")
            if size is not None and shape[2:] != (size, size):
                raise PlannerError(f"{ref}: input shape {shape} contradicts the size {size} in the reference")
            batch, hw = shape[0], shape[2:]
        model = zoo.build(name, size=hw, weights=False, batch=batch)
        return import_onnx(model, name=ref[len("zoo:"):].lower(), source=ref)
    path = Path(ref).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if not path.exists():
        from milp_planner.model import zoo

        hint = f" (did you mean zoo:{ref}?)" if ref.lower() in zoo.names() else ""
        raise PlannerError(f"{path}: no such file{hint}")
    return import_onnx(path, input_shape=input_shape)

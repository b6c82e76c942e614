"""Reading a model (a file or a ``ModelProto``) and checking it is one the importer can trust.

A binary file is read by ``skim`` (weight data left out, see skim.py); a file that is not
what ``skim`` expects, and a text-format file, go through ``onnx.load`` with
``load_external_data=False``. Every problem is one ``PlannerError`` line naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import onnx

from milp_planner.errors import PlannerError
from milp_planner.model.onnx.ops import STANDARD_DOMAINS
from milp_planner.model.onnx.skim import skim

TEXT_SUFFIXES = (".onnxtxt", ".textproto", ".txtpb", ".json", ".pbtxt")


class LoadedModel(NamedTuple):
    """A model as read: the proto, how messages name it (the file, if any), a default name."""

    proto: onnx.ModelProto
    label: str | None
    name: str


def load_model(model: str | Path | onnx.ModelProto) -> LoadedModel:
    """The model in ``model`` (a path or a ``ModelProto``), its weight data left out."""
    if isinstance(model, onnx.ModelProto):
        return LoadedModel(model, None, model.graph.name or "model")
    path = Path(model)
    if not path.exists():
        raise PlannerError(f"{path}: no such file")
    if path.is_dir():
        raise PlannerError(f"{path}: not an ONNX model (a directory)")
    proto = None
    truncated = False
    if path.suffix.lower() not in TEXT_SUFFIXES:
        try:
            proto = skim(path)
        except Exception as e:  # not the binary format we expect: let onnx.load say why
            truncated = str(e).startswith("truncated")
            proto = None
        if proto is not None and not _looks_like_model(proto):
            proto = None
    if proto is None:
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except OSError as e:
            raise PlannerError(f"{path}: cannot read ({e.strerror or e})") from None
        except Exception as e:  # DecodeError (a truncated file), RuntimeError from the C++ loader, ...
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            what = "a truncated file or not an ONNX model" if truncated else "not an ONNX model"
            raise PlannerError(f"{path}: {what} ({reason[:120]})") from None
    if not _looks_like_model(proto):
        raise PlannerError(f"{path}: not an ONNX model (no graph in the file)")
    return LoadedModel(proto, str(path), path.stem)


def _looks_like_model(proto: onnx.ModelProto) -> bool:
    return proto.HasField("graph") and bool(proto.graph.node or proto.opset_import)


def check_model(proto: onnx.ModelProto, label: str) -> None:
    """Raise ``PlannerError`` for a model that would import wrong or not at all.

    A model with no nodes or no outputs has nothing to plan. A model without an opset for
    the default domain is incomplete (a file cut short after its graph, for one), and an
    opset or IR version newer than the installed onnx knows would have its ops read with
    rules they may not follow.
    """
    g = proto.graph
    if not g.node:
        raise PlannerError(f"{label}: the graph has no nodes")
    if not g.output:
        raise PlannerError(f"{label}: the graph has no outputs")
    opsets = [o.version for o in proto.opset_import if o.domain in STANDARD_DOMAINS]
    if not opsets:
        raise PlannerError(f"{label}: no opset for the default ONNX domain (an incomplete or truncated file?)")
    newest = onnx.defs.onnx_opset_version()
    if max(opsets) > newest:
        raise PlannerError(f"{label}: opset {max(opsets)} is newer than the newest this onnx "
                           f"{onnx.__version__} knows ({newest})")
    if proto.ir_version > onnx.IR_VERSION:
        raise PlannerError(f"{label}: IR version {proto.ir_version} is newer than the newest this onnx "
                           f"{onnx.__version__} knows ({onnx.IR_VERSION})")

"""Reading a model (a file or a ``ModelProto``) and checking it is one the importer can trust.

A binary file is read by ``skim`` (weight data left out, see skim.py); a file that is not
what ``skim`` expects, and a text-format file, go through ``onnx.load`` with
``load_external_data=False``. Only a regular file of less than 2 GiB is opened (a FIFO, a
device such as ``/dev/zero`` or a directory is refused before a byte is read); external data
must lie inside the model's folder. ``check_model`` then checks the model against its own
declarations (``validate.py``). Every problem is one ``PlannerError`` line naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import onnx

from milp_planner.errors import PlannerError
from milp_planner.io import check_input_file
from milp_planner.model.onnx.ops import STANDARD_DOMAINS
from milp_planner.model.onnx.skim import skim
from milp_planner.model.onnx.validate import check_structure, external_data_bytes

#: protobuf cannot parse a message of 2 GiB or more: a larger .onnx file is not a model
MAX_MODEL_BYTES = 2**31 - 1

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
    check_input_file(path, "an ONNX model", MAX_MODEL_BYTES)  # no FIFO, device, directory; bounded
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
    external_data_bytes(proto, str(path), path.parent, present=False)  # locations inside the folder
    return LoadedModel(proto, str(path), path.stem)


def model_file_bytes(path) -> int:
    """Bytes a load of the ``.onnx`` file ``path`` with its weights reads: the file plus its
    external data (every location checked, see ``validate.external_data_bytes``)."""
    path = Path(path)
    size = check_input_file(path, "an ONNX model", MAX_MODEL_BYTES)
    proto = load_model(path).proto
    return size + external_data_bytes(proto, str(path), path.parent)


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
        others = sorted({o.domain for o in proto.opset_import})
        if others:
            ops = sorted({n.op_type for n in g.node})
            raise PlannerError(f"{label}: imports only the operator domain(s) {', '.join(others)} (ops "
                               f"{', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''}), not the default ONNX "
                               "domain of the neural-network operators this tool plans")
        raise PlannerError(f"{label}: no opset for the default ONNX domain (an incomplete or truncated file?)")
    newest = onnx.defs.onnx_opset_version()
    if max(opsets) > newest:
        raise PlannerError(f"{label}: opset {max(opsets)} is newer than the newest this onnx "
                           f"{onnx.__version__} knows ({newest})")
    if proto.ir_version > onnx.IR_VERSION:
        raise PlannerError(f"{label}: IR version {proto.ir_version} is newer than the newest this onnx "
                           f"{onnx.__version__} knows ({onnx.IR_VERSION})")
    check_structure(proto, label)  # names, producers, outputs, weight data (validate.py)

"""Reading a binary ``.onnx`` file without its weight data.

Why this is hand-written: ``onnx.load`` parses the whole file, weights included; a 575 MB
VGG19 costs 1.2 GB of memory and about 4 s (benchmarks/results/inspect.md, where ``inspect``
of that file takes 0.6 s and 78 MB with this reader). The onnx library has no way to parse
a model while leaving out the data of its inline initializers (``load_external_data=False``
only concerns data that is already in separate files), so ``skim`` walks the protobuf wire
format over a memory map and copies everything except the data of large initializers, which
become dims-only stubs (``data_location`` EXTERNAL, like the zoo's). Pages holding weight
data are never touched. Field numbers are onnx.proto's. The result is an ordinary
``ModelProto`` parsed by protobuf; anything this walk does not understand makes it give up,
and the caller falls back to ``onnx.load``.

``skim(path, spans)`` also says where each stubbed tensor lies in the file (``Span``), so that
``deploy`` reads the weights a sub-model uses when it builds that sub-model, and copies the
others from file to file, never holding the model's weights whole (milp_planner/deploy/weights.py).
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import NamedTuple

import onnx
from onnx import TensorProto

SKIM_BYTES = 16 * 1024  # initializers with more data than this are stubbed
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_DATA = frozenset({4, 5, 6, 7, 9, 10, 11})  # float/int32/string/int64/raw/double/uint64 data
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14
_FIXED_WIDTH_DATA = frozenset({4, 9, 10})  # float_data, raw_data, double_data: bytes held = bytes of data


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint")


def _enc_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, start of tag, start of value, end) of each field in buf[start:end]."""
    pos = start
    while pos < end:
        tag_start = pos
        tag, pos = _varint(buf, pos)
        field, wt = tag >> 3, tag & 7
        if wt == 0:
            _, stop = _varint(buf, pos)
        elif wt == 1:
            stop = pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            stop = pos + n
        elif wt == 5:
            stop = pos + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if stop > end:
            raise ValueError("truncated: a field runs past the end of its message")
        if field == 0:
            raise ValueError("malformed message")
        yield field, wt, tag_start, pos, stop
        pos = stop


class Span(NamedTuple):
    """Where a stubbed initializer lies in the file: its TensorProto message is the bytes
    ``[start, end)``; ``raw`` is the ``[start, end)`` of its data when that is one ``raw_data``
    field (the usual case), else None."""

    start: int
    end: int
    raw: tuple[int, int] | None


_TENSOR_RAW_DATA = 9


def _span(buf, start: int, end: int) -> Span:
    data = [(f, vs, stop) for f, _, _, vs, stop in _fields(buf, start, end) if f in _TENSOR_DATA]
    raw = (data[0][1], data[0][2]) if len(data) == 1 and data[0][0] == _TENSOR_RAW_DATA else None
    return Span(start, end, raw)


def _len_field(field: int, payload: bytes) -> bytes:
    return _enc_varint(field << 3 | 2) + _enc_varint(len(payload)) + payload


def _skim_tensor(buf, start: int, end: int) -> tuple[bytes, bool]:
    """The tensor message, or its stub if it holds more than SKIM_BYTES of data; and whether stubbed."""
    fields = list(_fields(buf, start, end))
    if sum(stop - vs for f, _, _, vs, stop in fields if f in _TENSOR_DATA) <= SKIM_BYTES:
        return bytes(buf[start:end]), False
    keep = [bytes(buf[ts:stop]) for f, _, ts, _, stop in fields
            if f not in _TENSOR_DATA and f not in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION)]
    entry = _len_field(1, b"location") + _len_field(2, b"__milp_planner_no_data__")
    keep.append(_len_field(_TENSOR_EXTERNAL_DATA, entry))
    fixed = {f for f, *_ in fields if f in _TENSOR_DATA} <= _FIXED_WIDTH_DATA
    if fixed:  # the bytes of data it held, so that model.onnx.validate can check them against its dims
        held = sum(stop - vs for f, _, _, vs, stop in fields if f in _TENSOR_DATA)
        entry = _len_field(1, b"length") + _len_field(2, str(held).encode())
        keep.append(_len_field(_TENSOR_EXTERNAL_DATA, entry))
    keep.append(_enc_varint(_TENSOR_DATA_LOCATION << 3) + _enc_varint(TensorProto.EXTERNAL))
    return b"".join(keep), True


def _skim_graph(buf, start: int, end: int, spans: list | None = None) -> bytes:
    out = []
    for f, wt, ts, vs, stop in _fields(buf, start, end):
        if f == _GRAPH_INITIALIZER and wt == 2:
            tensor, stubbed = _skim_tensor(buf, vs, stop)
            out.append(_len_field(f, tensor))
            if spans is not None:
                spans.append(_span(buf, vs, stop) if stubbed else None)
        else:
            out.append(bytes(buf[ts:stop]))
    return b"".join(out)


def skim(path: Path, spans: list | None = None) -> onnx.ModelProto | None:
    """The model in a binary .onnx file, large initializers as dims-only stubs.

    None for an empty file; ``ValueError`` (or protobuf's ``DecodeError``) for bytes that
    are not a well-formed message, a truncated file among them. ``spans``: a list that gets,
    for each initializer of the graph in order, its ``Span`` in the file if it was stubbed,
    else None.
    """
    with open(path, "rb") as fh:
        if fh.seek(0, 2) == 0:
            return None
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            out = []
            for f, wt, ts, vs, stop in _fields(mm, 0, len(mm)):
                if f == _MODEL_GRAPH and wt == 2:
                    out.append(_len_field(f, _skim_graph(mm, vs, stop, spans)))
                else:
                    out.append(bytes(mm[ts:stop]))
    proto = onnx.ModelProto()
    proto.ParseFromString(b"".join(out))
    return proto


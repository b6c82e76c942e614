"""The weights of the model a deployment is cut from, read when a sub-model needs them.

``deploy`` holds at most one sub-model's weights at a time, never the model's whole
(docs/deploy.md, "Memory"):

* a binary ``.onnx`` file is read by ``model.onnx.skim`` (its graph without the data of large
  initializers) and each stubbed initializer is read from the file when a sub-model uses it
  (``Weights.array``); external data likewise, from its own file;
* a sub-model keeps its initializers as numpy arrays (``submodel.SubModel.weights``) and is
  written from them (``model_chunks`` with ``array_tensor``): its weights are in memory once,
  where ``numpy_helper.from_array`` and ``SerializeToString`` would copy them three more times
  (protobuf grows its buffer by doubling, then copies it out);
* ``reference.onnx`` (the unsplit model, for ``run --check``) is written as a stream
  (``Weights.model_chunks``): the model's fields, then each initializer copied from file to
  file in chunks, so neither the model nor its serialization is ever in memory whole;
* anything else (a zoo model, a text-format file, a file ``skim`` does not understand, tensors
  of Constant nodes with external data) is loaded whole by ``onnx.load``: the weights once.

The files are read through one handle each, opened at the start and kept until the end: a
file replaced meanwhile is not seen, one truncated meanwhile is an error naming it (never a
crash, as a memory map would be).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from milp_planner.errors import PlannerError
from milp_planner.io import printable
from milp_planner.model.onnx.skim import Span, _enc_varint

NO_DATA = "__milp_planner_no_data__"  # model.onnx.validate.NO_DATA: a stub of skim
CHUNK = 16 * 2**20  # bytes copied at a time from file to file
MAX_PROTO = 2**31 - 1  # protobuf cannot parse a message of 2 GiB or more
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9

#: element types read straight into a numpy array from raw little-endian bytes
_RAW_DTYPES = {t: np.dtype(helper.tensor_dtype_to_np_dtype(t)).newbyteorder("<") for t in (
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.UINT8,
    TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32, TensorProto.INT64,
    TensorProto.UINT64, TensorProto.BOOL)}


def _external(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def _tag(field: int) -> bytes:
    return _enc_varint(field << 3 | 2)


class Weights:
    """Where the data of each initializer of ``model`` is: in the proto itself, a ``Span`` of
    the ``.onnx`` file ``path`` (``spans``: one entry per initializer, None for one held in the
    proto), or external data beside ``path``. Use as a context manager (the open files)."""

    def __init__(self, model: onnx.ModelProto, path: Path | None = None, spans: list[Span | None] | None = None):
        self.model = model
        self.path = Path(path) if path is not None else None
        self.base = self.path.parent if self.path is not None else None
        inits = model.graph.initializer
        spans = list(spans or [])
        if spans and len(spans) != len(inits):
            raise PlannerError(f"deploy: internal error: {len(spans)} spans for {len(inits)} initializers")
        self.spans: dict[str, Span] = {t.name: s for t, s in zip(inits, spans) if s is not None}
        self._files: dict[Path, object] = {}

    # -- files -------------------------------------------------------------------------------
    def __enter__(self) -> "Weights":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()

    def _file(self, path: Path):
        f = self._files.get(path)
        if f is None:
            try:
                f = self._files[path] = open(path, "rb")
            except OSError as e:
                raise PlannerError(f"deploy: {printable(path)}: cannot read the weights ({e.strerror})") from None
        return f

    def _read_into(self, path: Path, offset: int, buf: memoryview, what: str) -> None:
        f = self._file(path)
        n = len(buf)
        got = 0
        while got < n:
            if hasattr(os, "preadv"):
                k = os.preadv(f.fileno(), [buf[got:]], offset + got)
            else:  # no preadv (Windows): one handle per file, read in turn
                f.seek(offset + got)
                k = f.readinto(buf[got:])
            if k <= 0:
                raise PlannerError(f"deploy: {printable(path)}: ended at byte {offset + got:,} while reading {what} "
                                   f"({n:,} bytes from {offset:,}); the file changed since it was read")
            got += k

    def _read(self, path: Path, offset: int, n: int, what: str) -> bytearray:
        buf = bytearray(n)
        self._read_into(path, offset, memoryview(buf), what)
        return buf

    def _chunks(self, path: Path, offset: int, n: int, what: str):
        pos = 0
        while pos < n:
            k = min(CHUNK, n - pos)
            yield self._read(path, offset + pos, k, what)
            pos += k

    def _where(self, t: TensorProto) -> tuple[Path, int, int | None] | None:
        """(file, offset, length or None: to its end) of an initializer's real external data."""
        if t.data_location != TensorProto.EXTERNAL:
            return None
        ext = _external(t)
        loc = ext.get("location", "")
        if not loc or loc == NO_DATA or self.base is None:
            return None
        length = ext.get("length")
        return self.base / loc, int(ext.get("offset", "0") or 0), int(length) if length else None

    # -- values ------------------------------------------------------------------------------
    def array(self, t: TensorProto) -> np.ndarray:
        """The value of initializer ``t`` (a tensor of ``self.model``), read now and not kept."""
        what = f"initializer '{printable(t.name)}'"
        span = self.spans.get(t.name)
        dims = tuple(int(d) for d in t.dims)
        count = int(np.prod(dims, dtype=np.int64)) if dims else 1
        dtype = _RAW_DTYPES.get(t.data_type)
        if span is not None:
            if span.raw is not None and dtype is not None and span.raw[1] - span.raw[0] == count * dtype.itemsize:
                return self._raw_array(self.path, span.raw[0], dtype, dims, count, what)
            full = TensorProto.FromString(bytes(self._read(self.path, span.start, span.end - span.start, what)))
            return numpy_helper.to_array(full)
        where = self._where(t)
        if where is not None:
            path, offset, length = where
            if dtype is not None and (length is None or length >= count * dtype.itemsize):
                return self._raw_array(path, offset, dtype, dims, count, what)
            full = TensorProto()
            full.CopyFrom(t)
            onnx.external_data_helper.load_external_data_for_tensor(full, str(self.base))
            full.ClearField("data_location")
            del full.external_data[:]
            return numpy_helper.to_array(full)
        return numpy_helper.to_array(t)

    def _raw_array(self, path: Path, offset: int, dtype: np.dtype, dims, count: int, what: str) -> np.ndarray:
        a = np.empty(count, dtype)
        self._read_into(path, offset, memoryview(a).cast("B"), what)
        a = a.reshape(dims)
        return a if dtype.isnative else a.astype(dtype.newbyteorder("="))

    # -- the whole model as a stream ---------------------------------------------------------
    def _tensor(self, t: TensorProto) -> tuple[int, object]:
        """(bytes of initializer ``t`` serialized with its data, a function giving those bytes in chunks)."""
        span = self.spans.get(t.name)
        what = f"initializer '{printable(t.name)}'"
        if span is not None:  # the original bytes, as they are in the file
            n = span.end - span.start
            return n, lambda: self._chunks(self.path, span.start, n, what)
        where = self._where(t)
        if where is None:
            return _in_memory(t)
        path, offset, length = where
        if length is None:
            try:
                length = max(0, os.fstat(self._file(path).fileno()).st_size - offset)
            except OSError as e:
                raise PlannerError(f"deploy: {printable(path)}: cannot read the weights ({e.strerror})") from None
        head = TensorProto()  # the tensor without its external-data fields, then its data as raw_data
        for fd, value in t.ListFields():
            if fd.name not in ("external_data", "data_location"):
                _copy_field(head, fd, value)
        if length == 0:
            head.raw_data = b""
            return head.ByteSize(), lambda: iter([head.SerializeToString()])
        head_bytes = head.ByteSize()
        prefix_len = len(_tag(_TENSOR_RAW_DATA)) + len(_enc_varint(length))

        def chunks():
            yield head.SerializeToString() + _tag(_TENSOR_RAW_DATA) + _enc_varint(length)
            yield from self._chunks(path, offset, length, what)
        return head_bytes + prefix_len + length, chunks

    def model_chunks(self, label: str = "the model"):
        """``self.model`` serialized with every weight, in chunks (``model_chunks``)."""
        return model_chunks(self.model, self._tensor, label)


def model_chunks(model: onnx.ModelProto, tensor=None, label: str = "the model", extra=()):
    """``model`` serialized, as a generator of chunks to write one after another: the model's
    fields, then its graph's, then each initializer, serialized alone (``tensor(t)``: its size
    and a function giving its bytes in chunks; default: the proto's own), then the initializers
    ``extra`` (such pairs, e.g. ``array_tensor``'s: a sub-model's weights). The same message as
    ``model.SerializeToString()`` (its fields in another order), whose buffer would cost about
    four times the model (protobuf grows it by doubling, then copies it out). The size is
    checked against protobuf's 2 GiB when the generator is made, before the first chunk."""
    if tensor is None:
        tensor = _in_memory
    header = onnx.ModelProto()
    shell = onnx.GraphProto()
    for fd, value in model.ListFields():
        if fd.name != "graph":
            _copy_field(header, fd, value)
    for fd, value in model.graph.ListFields():
        if fd.name != "initializer":
            _copy_field(shell, fd, value)
    tensors = [tensor(t) for t in model.graph.initializer] + list(extra)
    graph_len = shell.ByteSize() + sum(len(_tag(_GRAPH_INITIALIZER)) + len(_enc_varint(n)) + n for n, _ in tensors)
    total = header.ByteSize() + len(_tag(_MODEL_GRAPH)) + len(_enc_varint(graph_len)) + graph_len
    if total > MAX_PROTO:
        raise PlannerError(f"deploy: {label} with its weights is {total / 1e9:.3g} GB, beyond the 2 GiB a "
                           "protobuf message can hold")

    def gen():
        yield header.SerializeToString()
        yield _tag(_MODEL_GRAPH) + _enc_varint(graph_len)
        yield shell.SerializeToString()
        for n, chunks in tensors:
            yield _tag(_GRAPH_INITIALIZER) + _enc_varint(n)
            yield from chunks()
    return gen()


#: numpy dtypes written as raw little-endian data straight from the array
_ARRAY_TYPES = {np.dtype(helper.tensor_dtype_to_np_dtype(t)): t for t in _RAW_DTYPES}


def array_tensor(name: str, value: np.ndarray) -> tuple[int, object]:
    """(size, chunks) of the initializer ``name`` holding ``value``, as ``numpy_helper.from_array``
    would make it, its data written from the array itself (no copy but for a strided slice)."""
    a = np.asarray(value)
    et = _ARRAY_TYPES.get(a.dtype)
    if et is None or not a.dtype.isnative or sys.byteorder != "little" or a.nbytes == 0:
        return _in_memory(numpy_helper.from_array(a, name))
    head = TensorProto()
    head.name = name
    head.dims.extend(int(d) for d in a.shape)
    head.data_type = et
    n = a.nbytes
    prefix = _tag(_TENSOR_RAW_DATA) + _enc_varint(n)

    def chunks():
        yield head.SerializeToString() + prefix
        yield memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
    return head.ByteSize() + len(prefix) + n, chunks


def _in_memory(t: TensorProto) -> tuple[int, object]:
    """(size, chunks) of a tensor held in the proto: its fields, then its ``raw_data`` as one
    bytes object (serializing the tensor whole would buffer its data about three times)."""
    if not t.HasField("raw_data"):
        return t.ByteSize(), lambda: iter([t.SerializeToString()])

    def chunks():
        head = TensorProto()
        for fd, value in t.ListFields():
            if fd.name != "raw_data":
                _copy_field(head, fd, value)
        data = t.raw_data
        yield head.SerializeToString() + _tag(_TENSOR_RAW_DATA) + _enc_varint(len(data))
        yield data
    return t.ByteSize(), chunks


def _copy_field(msg, fd, value) -> None:
    """Set field ``fd`` of ``msg`` to ``value`` (as ``ListFields`` gives it)."""
    repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
    if repeated:
        getattr(msg, fd.name).extend(value)
    elif fd.type == fd.TYPE_MESSAGE:
        getattr(msg, fd.name).CopyFrom(value)
    else:
        setattr(msg, fd.name, value)

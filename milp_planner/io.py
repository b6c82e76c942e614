"""Small file helpers: inputs are read within bounds, results are written whole or not at all.

- ``read_text_bounded(path, what)``: a regular file of at most ``max_bytes``, as UTF-8 text;
  a FIFO, a device, a directory, an oversized or non-UTF-8 file is a one-line ``PlannerError``.
- ``check_output_path(path, inputs)``: before any work, a place where a file can be written
  (the directory exists or can be made, is writable, the target is not a directory and is
  not one of the input files).
- ``write_atomic(path, text)``: a temporary file in the same directory, then an atomic rename.
- ``dumps_json(obj)``: strict JSON (non-finite floats become ``null``).
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path

from milp_planner.errors import PlannerError

MAX_INPUT_BYTES = 16 * 2**20  # instance and plan files; a real one is a few kB


def read_text_bounded(path, what: str = "a file", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``; ``PlannerError`` naming it otherwise."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise PlannerError(f"{path}: no such file") from None
    except OSError as e:
        raise PlannerError(f"{path}: cannot read {what} ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise PlannerError(f"{path}: is a directory, not {what}")
    if not stat.S_ISREG(st.st_mode):
        raise PlannerError(f"{path}: not a regular file (a FIFO, socket or device), not {what}")
    if st.st_size > max_bytes:
        raise PlannerError(f"{path}: {st.st_size:,} bytes is too large for {what} (limit {max_bytes:,})")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise PlannerError(f"{path}: cannot read {what} ({e.strerror})") from None
    if len(data) > max_bytes:
        raise PlannerError(f"{path}: too large for {what} (limit {max_bytes:,} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlannerError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}), not {what}") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_output_path(path, inputs=(), *, directory: bool = False, option: str = "--out") -> Path:
    """Check, before any work, that ``path`` can be written; return it.

    ``directory=True`` checks an output directory instead of a file. ``inputs`` are the files
    read by the command: writing onto one of them is refused.
    """
    path = Path(path)
    for src in inputs:
        if src is not None and (path.exists() or path.is_symlink()) and _same_file(path, Path(src)):
            raise PlannerError(f"{option} {path}: is the input file {src}; refusing to overwrite it")
    if directory:
        if path.exists() and not path.is_dir():
            raise PlannerError(f"{option} {path}: exists and is not a directory")
        target_dir = path
    else:
        if path.is_dir():
            raise PlannerError(f"{option} {path}: is a directory (give a file name)")
        target_dir = path.parent
    # the nearest existing ancestor must be a writable directory
    probe = target_dir
    while not probe.exists():
        if probe.is_symlink():
            raise PlannerError(f"{option} {path}: {probe} is a broken symbolic link")
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise PlannerError(f"{option} {path}: {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PlannerError(f"{option} {path}: directory {probe} is not writable")
    # root ignores permission bits (and read-only mounts say so only on write): create and
    # remove a file in the directory that will receive the output or its first directory
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".milp-planner-probe.", suffix=".tmp")
    except OSError as e:
        raise PlannerError(f"{option} {path}: cannot write in {probe} ({e.strerror})") from None
    os.close(fd)
    os.unlink(tmp)
    return path


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename.

    Errors (a read-only directory, a directory in the way, a file where a directory should
    be) are ``PlannerError`` naming ``path``; no temporary file is left behind.
    """
    path = Path(path)
    if path.is_dir():
        raise PlannerError(f"{path}: is a directory, cannot write a file there")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlannerError(f"{path}: cannot create its directory ({e.strerror})") from None
    mode = "wb" if isinstance(text, bytes) else "w"
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise PlannerError(f"{path}: cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, mode) as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise PlannerError(f"{path}: cannot write ({e.strerror or e})") from None
        raise


def finite_or_none(obj):
    """``obj`` with every non-finite float (inf, nan) replaced by ``None``, recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


def dumps_json(obj, indent: int | None = 1) -> str:
    """Strict JSON text of ``obj``: inf and nan become ``null`` (never ``Infinity``)."""
    return json.dumps(finite_or_none(obj), indent=indent, allow_nan=False)

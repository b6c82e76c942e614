"""Files in and out: inputs are read within bounds, outputs are written whole or not at all.

Reading (every file any command opens):

- ``check_input_file(path, what, max_bytes)``: a regular file (after following symbolic
  links, which must resolve) of at most ``max_bytes``: a FIFO, a device (``/dev/zero``), a
  socket, a directory, a symbolic-link loop or a name with a NUL byte is a one-line
  ``PlannerError``, before a byte is read (so nothing can hang or fill memory).
- ``read_bytes_bounded`` / ``read_text_bounded``: the same check, then the content (UTF-8
  text for the latter); a file that grows past the limit while read is refused too.

Writing (one discipline for every command that writes: ``solve --out``, ``zoo export``,
``profile --out``, ``deploy --out``, ``pareto --out``, ``report --out``):

- ``check_output_file(path, inputs)``: before any work, a place where a regular file can be
  written: the target is absent or a regular file (never a device, FIFO, socket, directory
  or symbolic link, never one of the command's input files), its folder exists or can be made
  and is writable.
- ``write_atomic(path, data)``: a temporary sibling, then an atomic rename (the same checks
  on the target again, so a FIFO or link put there meanwhile is refused, not replaced).
- ``OutputDir(path, command, inputs)``: a folder output. The folder must be new, empty, or
  one the same command wrote before: it then holds a marker (``.milp-planner-output.json``)
  listing every file the command wrote, and nothing else (``keep`` names entries such as a
  report's cache that are carried over). The new content is built in a temporary sibling
  folder and swapped in whole (``renameat2(RENAME_EXCHANGE)`` where the kernel has it, else
  two renames); the old content is deleted file by file from its marker's list, so nothing
  the command did not write is ever deleted. A failure before the swap removes the sibling
  and leaves the old folder as it was.
- ``safe_filename(name, taken, reserved)``: the one function that turns a name taken from an
  input (a device or layer name) into a file name: one path component of ``[A-Za-z0-9._-]``,
  never ``.``/``..`` nor hidden, at most 64 characters, never one of ``reserved`` and never
  equal (ignoring case) to one already in ``taken``: a clash gets the suffix ``-2``, ``-3``...

Printing (names from inputs reach the terminal and the documents as text, never as markup):

- ``printable(text)``: terminal control characters (escape sequences, carriage returns,
  bidirectional overrides) shown as ``\\xNN``/``\\uNNNN`` escapes.
- ``markdown_text(text)``: literal text in Markdown (HTML and Markdown markup escaped).
- ``csv_cell(value)``: no spreadsheet formula (a cell starting with ``= + - @`` gets a ``'``).
- ``dumps_json(obj)``: strict JSON (non-finite floats become ``null``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import math
import os
import re
import shutil
import stat
import tempfile
import unicodedata
from pathlib import Path

from milp_planner.errors import PlannerError

MAX_INPUT_BYTES = 16 * 2**20  # instance and plan files; a real one is a few kB
MARKER = ".milp-planner-output.json"
MARKER_FORMAT = 1


# -- reading ----------------------------------------------------------------------------------


def _name(path) -> str:
    """``path`` for a message: control characters escaped, at most 200 characters."""
    text = printable(str(path))
    return text if len(text) <= 200 else text[:197] + "..."


def _kind(st: os.stat_result, other: str) -> str:
    """What a file that is not a regular one is, for a message."""
    m = st.st_mode
    if stat.S_ISFIFO(m):
        return "a FIFO"
    if stat.S_ISCHR(m) or stat.S_ISBLK(m):
        return "a device"
    return "a socket" if stat.S_ISSOCK(m) else other


def strict_json_validator(schema: dict):
    """A JSON Schema (2020-12) validator for ``schema`` where an integer is a JSON integer:
    JSON Schema counts 16.0 as one, and ids, ranges and ranks written 16.0 are refused."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    types = base.TYPE_CHECKER.redefine("integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool))
    return jsonschema.validators.extend(base, type_checker=types)(schema)


def _stat_input(path: Path, what: str) -> os.stat_result:
    try:
        return os.stat(path)
    except ValueError:  # an embedded NUL byte
        raise PlannerError(f"{_name(path)}: not a valid file name (it contains a NUL byte)") from None
    except FileNotFoundError:
        if os.path.islink(path):
            raise PlannerError(f"{_name(path)}: a broken symbolic link, not {what}") from None
        raise PlannerError(f"{_name(path)}: no such file") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PlannerError(f"{_name(path)}: a loop of symbolic links, not {what}") from None
        if e.errno == errno.ENAMETOOLONG:
            raise PlannerError(f"{_name(path)}: the file name is too long") from None
        if e.errno == errno.ENOTDIR:
            raise PlannerError(f"{_name(path)}: no such file (a part of the path is not a directory)") from None
        raise PlannerError(f"{_name(path)}: cannot read {what} ({e.strerror})") from None


def check_input_file(path, what: str = "a file", max_bytes: int = MAX_INPUT_BYTES) -> int:
    """Check that ``path`` is a regular file of at most ``max_bytes``; its size.

    Nothing is opened: a FIFO, a device, a socket or a directory is refused before it could
    block a read or stream without end.
    """
    path = Path(path)
    st = _stat_input(path, what)
    if stat.S_ISDIR(st.st_mode):
        raise PlannerError(f"{_name(path)}: is a directory, not {what}")
    if not stat.S_ISREG(st.st_mode):
        raise PlannerError(f"{_name(path)}: not a regular file ({_kind(st, 'unknown kind')}), not {what}")
    if st.st_size > max_bytes:
        raise PlannerError(f"{_name(path)}: {st.st_size:,} bytes is too large for {what} (limit {max_bytes:,})")
    return st.st_size


def read_bytes_bounded(path, what: str = "a file", max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``); ``PlannerError`` otherwise."""
    path = Path(path)
    check_input_file(path, what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise PlannerError(f"{_name(path)}: cannot read {what} ({e.strerror})") from None
    try:
        st = os.fstat(fd)  # the file opened is the file checked (not swapped for a FIFO meanwhile)
        if not stat.S_ISREG(st.st_mode):
            raise PlannerError(f"{_name(path)}: not a regular file, not {what}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise PlannerError(f"{_name(path)}: cannot read {what} ({e.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise PlannerError(f"{_name(path)}: too large for {what} (limit {max_bytes:,} bytes)")
    return data


def read_text_bounded(path, what: str = "a file", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``; ``PlannerError`` naming it otherwise."""
    data = read_bytes_bounded(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlannerError(f"{_name(path)}: not UTF-8 text ({e.reason} at byte {e.start}), not {what}") from None


def inside(folder: Path, rel: str, what: str = "a file") -> Path:
    """``folder / rel`` for a relative POSIX path ``rel`` that stays inside ``folder`` once
    every symbolic link is followed; ``PlannerError`` for an absolute path, ``..``, a NUL or
    a link that leads out."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel:
        raise PlannerError(f"{what} {printable(repr(rel))[:80]}: not a relative path inside {_name(folder)}")
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise PlannerError(f"{what} {printable(repr(rel))[:80]}: must be a relative path inside the folder "
                           "(no absolute path, no '..')")
    base = Path(folder).resolve()
    target = base.joinpath(*parts)
    try:
        real = target.resolve()
    except (OSError, RuntimeError):
        raise PlannerError(f"{what} {printable(rel)[:80]}: a loop of symbolic links") from None
    if real != base and base not in real.parents:
        raise PlannerError(f"{what} {printable(rel)[:80]}: a symbolic link out of {_name(folder)}")
    return target


# -- names -----------------------------------------------------------------------------------

_WINDOWS_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_FILENAME = 64


def safe_filename(name: str, taken: set[str] | None = None, reserved=()) -> str:
    """The file name for ``name`` (a device or layer name from an input); see the module docstring.

    ``taken`` (lower-cased names already given out in the same folder) is updated.
    """
    text = unicodedata.normalize("NFKD", str(name)).encode("ascii", "ignore").decode("ascii")
    text = _UNSAFE.sub("_", text).strip("_") or ""
    text = re.sub(r"_+", "_", text)
    if not text or set(text) <= {"."}:
        text = "x" + (text and "_")
    if text.startswith((".", "-")):
        text = "_" + text.lstrip(".-")
    if len(text) > MAX_FILENAME:
        import hashlib

        text = text[: MAX_FILENAME - 9] + "-" + hashlib.sha256(str(name).encode()).hexdigest()[:8]
    if text.split(".")[0].lower() in _WINDOWS_RESERVED:
        text = "_" + text  # CON, nul.txt: device names on Windows
    used = set() if taken is None else taken
    banned = {r.lower() for r in reserved}
    base, k, out = text, 1, text
    while out.lower() in used or out.lower() in banned:
        k += 1
        out = f"{base}-{k}"
    used.add(out.lower())
    return out


# -- printing ----------------------------------------------------------------------------------

# C0 and C1 controls, DEL, and the bidirectional and zero-width format characters
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def printable(text) -> str:
    """``text`` with terminal control characters escaped (``\\x1b`` -> ``\\x1b`` as 4 characters)."""
    text = str(text)
    if not _CONTROL.search(text):
        return text

    def esc(m: re.Match) -> str:
        c = ord(m.group())
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    return _CONTROL.sub(esc, text)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>&#|~!{}])")


def markdown_text(text) -> str:
    """``text`` as literal Markdown: one line, control characters escaped, and every character
    Markdown or HTML would read as markup (``<script>``, ``[x](y)``, ``*``, ``|``...) escaped with
    a backslash (CommonMark renders ``\\<`` as ``<``)."""
    text = " ".join(printable(text).split())
    text = _MD_SPECIAL.sub(r"\\\1", text)
    if text[:1] in ("-", "+", "=") or re.match(r"\d+[.)]", text):
        text = "\\" + text  # not a list item or a heading underline
    return text


def csv_cell(value):
    """A CSV cell that a spreadsheet shows as text: a string starting with ``=``, ``+``, ``-``,
    ``@`` (a formula), a tab or a carriage return gets a leading ``'`` (OWASP's advice); numbers
    are left as they are."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(value)
            return value  # a number written as text, such as -0.5
        except ValueError:
            return "'" + value
    return value


# -- writing -----------------------------------------------------------------------------------


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        try:
            return a.resolve() == b.resolve()
        except (OSError, RuntimeError, ValueError):
            return False


def _lstat(path: Path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except ValueError:
        raise PlannerError(f"{_name(path)}: not a valid file name (it contains a NUL byte)") from None
    except OSError as e:
        if e.errno == errno.ENOTDIR:
            return None  # the parent check says which ancestor is a file
        raise PlannerError(f"{_name(path)}: cannot look at it ({e.strerror})") from None


def _check_target(path: Path, option: str) -> None:
    """The target of a file output: absent or a regular file, not a link."""
    st = _lstat(path)
    if st is None:
        return
    if stat.S_ISLNK(st.st_mode):
        raise PlannerError(f"{option} {_name(path)}: is a symbolic link; refusing to write through it "
                           "(name the file itself)")
    if stat.S_ISDIR(st.st_mode):
        raise PlannerError(f"{option} {_name(path)}: is a directory (give a file name)")
    if not stat.S_ISREG(st.st_mode):
        raise PlannerError(f"{option} {_name(path)}: is {_kind(st, 'not a regular file')}; only a regular file is written")


def _check_writable_dir(path: Path, target_dir: Path, option: str) -> None:
    """The nearest existing ancestor of ``target_dir`` must be a directory we can write in."""
    probe = target_dir
    while _lstat(probe) is None:
        if probe.parent == probe:
            break
        probe = probe.parent
    st = _lstat(probe)
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(probe)
        except OSError:
            raise PlannerError(f"{option} {_name(path)}: {_name(probe)} is a broken symbolic link") from None
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise PlannerError(f"{option} {_name(path)}: {_name(probe)} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PlannerError(f"{option} {_name(path)}: directory {_name(probe)} is not writable")
    # root ignores permission bits (and read-only mounts say so only on write): create and
    # remove a file in the directory that will receive the output or its first directory
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".milp-planner-probe.", suffix=".tmp")
    except OSError as e:
        raise PlannerError(f"{option} {_name(path)}: cannot write in {_name(probe)} ({e.strerror})") from None
    os.close(fd)
    os.unlink(tmp)


def _check_not_input(path: Path, inputs, option: str) -> None:
    for src in inputs:
        if src is None:
            continue
        if _lstat(path) is not None and _same_file(path, Path(src)):
            raise PlannerError(f"{option} {_name(path)}: is the input file {_name(src)}; refusing to overwrite it")


def check_output_file(path, inputs=(), *, option: str = "--out", suffixes: tuple[str, ...] | None = None) -> Path:
    """Check, before any work, that a regular file can be written at ``path``; return it.

    ``inputs`` are the files the command reads: writing onto one of them (or a hard link to
    one) is refused. ``suffixes`` (lower case, with the dot), when given, are the only ones
    accepted.
    """
    path = Path(path)
    if "\0" in str(path):
        raise PlannerError(f"{option} {_name(path)}: not a valid file name (it contains a NUL byte)")
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise PlannerError(f"{option} {_name(path)}: the file name must end in {' or '.join(suffixes)}")
    _check_not_input(path, inputs, option)
    _check_target(path, option)
    _check_writable_dir(path, path.parent, option)
    return path


def check_output_path(path, inputs=(), *, directory: bool = False, option: str = "--out") -> Path:
    """``check_output_file``, or with ``directory=True`` a folder that files are added to (a
    cache): absent or a directory (a link to one is followed), writable, not an input file."""
    if not directory:
        return check_output_file(path, inputs, option=option)
    path = Path(path)
    if "\0" in str(path):
        raise PlannerError(f"{option} {_name(path)}: not a valid file name (it contains a NUL byte)")
    _check_not_input(path, inputs, option)
    if _lstat(path) is not None and not path.is_dir():
        raise PlannerError(f"{option} {_name(path)}: exists and is not a directory")
    _check_writable_dir(path, path, option)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str | bytes, *, option: str | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary sibling and an atomic rename.

    The target must be absent or a regular file (a link, FIFO or device put there is refused,
    never replaced). Errors are ``PlannerError`` naming ``path``; no temporary file is left.
    The file gets the usual permissions (0666 less the umask).
    """
    path = Path(path)
    label = option or ""
    _check_target(path, label.strip() or "cannot write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlannerError(f"{_name(path)}: cannot create its directory ({e.strerror})") from None
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:60]}.", suffix=".tmp")
    except OSError as e:
        raise PlannerError(f"{_name(path)}: cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_umask())
        _check_target(path, label.strip() or "cannot write")  # again, just before the rename
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise PlannerError(f"{_name(path)}: cannot write ({e.strerror or e})") from None
        raise


# -- folder outputs -------------------------------------------------------------------------


def _renameat2_exchange():
    """``renameat2(..., RENAME_EXCHANGE)`` from the C library, or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap the directories ``a`` and ``b`` atomically; False where the system cannot."""
    fn = _renameat2_exchange()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def read_marker(folder: Path) -> dict | None:
    """The marker of an output folder, or None (no marker, or not one we can trust)."""
    p = Path(folder) / MARKER
    st = _lstat(p)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > MAX_INPUT_BYTES:
        return None
    try:
        data = json.loads(read_text_bounded(p, "an output marker"))
    except (PlannerError, ValueError):
        return None
    if (not isinstance(data, dict) or data.get("format") != MARKER_FORMAT or not isinstance(data.get("files"), list)
            or not all(isinstance(f, str) for f in data["files"])
            or not isinstance(data.get("keep", []), list)):
        return None
    return data


class OutputDir:
    """A folder the command owns, built beside and swapped in whole (see the module docstring).

    ``command`` names the command (``deploy``, ``report``, ``pareto``); a folder written by
    another command is refused. ``keep``: top-level entries carried over from the old folder
    (a report's cache). ``None`` as ``command`` only checks the place (new or empty folder,
    or one with a marker).
    """

    def __init__(self, path, command: str | None, inputs=(), *, option: str = "--out", keep=()):
        self.path = Path(path)
        self.command = command
        self.inputs = [Path(i) for i in inputs if i is not None]
        self.option = option
        self.keep = tuple(keep)
        self.files: list[str] = []
        self.staging: Path | None = None
        self._taken: set[str] = set()

    # -- before any work
    def check(self) -> "OutputDir":
        """``PlannerError`` unless the folder can be written by this command (nothing is changed)."""
        p, opt = self.path, self.option
        if "\0" in str(p):
            raise PlannerError(f"{opt} {_name(p)}: not a valid file name (it contains a NUL byte)")
        absolute = Path(os.path.abspath(p))
        cwd = Path.cwd()
        if absolute == cwd or absolute in cwd.parents:
            raise PlannerError(f"{opt} {_name(p)}: is the current directory or one above it; "
                               "name a new folder for the output")
        st = _lstat(p)
        if st is not None:
            if stat.S_ISLNK(st.st_mode):
                raise PlannerError(f"{opt} {_name(p)}: is a symbolic link; name the folder itself")
            if not stat.S_ISDIR(st.st_mode):
                raise PlannerError(f"{opt} {_name(p)}: exists and is not a directory")
            self._check_owned()
        for src in self.inputs:
            try:
                real_src = src.resolve()
                real_out = absolute.resolve()
            except (OSError, RuntimeError, ValueError):
                continue
            if real_src == real_out or real_out in real_src.parents:
                raise PlannerError(f"{opt} {_name(p)}: holds the input file {_name(src)}; "
                                   "the output folder is replaced whole, name another one")
        _check_writable_dir(p, absolute.parent, opt)
        return self

    def _check_owned(self) -> dict | None:
        """The old folder's marker (None for a folder holding nothing but ``keep`` entries);
        ``PlannerError`` if it holds anything this command did not write."""
        p, opt = self.path, self.option
        try:
            entries = [e.name for e in os.scandir(p) if e.name not in self.keep]
        except OSError as e:
            raise PlannerError(f"{opt} {_name(p)}: cannot list it ({e.strerror})") from None
        if not entries:
            return None
        marker = read_marker(p)
        what = self.command or "milp-planner"
        if marker is None:
            raise PlannerError(f"{opt} {_name(p)}: exists, is not empty and was not written by {what} "
                               "(no marker); name a new or empty folder")
        if self.command is not None and marker.get("command") != self.command:
            raise PlannerError(f"{opt} {_name(p)}: was written by `{printable(marker.get('command'))}`, "
                               f"not `{self.command}`; name another folder")
        listed = set(marker["files"]) | {MARKER}
        kept = set(self.keep) | {k for k in marker.get("keep", []) if isinstance(k, str)}
        for root, dirs, files in os.walk(p):
            rel_root = os.path.relpath(root, p)
            for name in dirs + files:
                rel = name if rel_root == "." else f"{rel_root}/{name}"
                if rel.split("/")[0] in kept:
                    continue
                full = os.path.join(root, name)
                if os.path.islink(full):
                    raise PlannerError(f"{opt} {_name(p)}: holds the symbolic link {_name(rel)}, which "
                                       f"{what} did not write; move it away or name another folder")
                if name in dirs:
                    continue
                if rel not in listed:
                    raise PlannerError(f"{opt} {_name(p)}: holds {_name(rel)}, which {what} did not write; "
                                       "move it away or name another folder")
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))
                       and (rel_root != "." or d not in kept)]
        return marker

    # -- building
    def __enter__(self) -> "OutputDir":
        self.check()
        parent = Path(os.path.abspath(self.path)).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{self.path.name[:60]}.new-"))
        except OSError as e:
            raise PlannerError(f"{self.option} {_name(self.path)}: cannot write in {_name(parent)} "
                               f"({e.strerror})") from None
        return self

    def __exit__(self, kind, value, tb) -> bool:
        if kind is None:
            self.commit()
        else:
            self.abort()
        return False

    def name(self, name: str, reserved=()) -> str:
        """A file name in the folder for ``name`` from an input (``safe_filename``, no clash)."""
        return safe_filename(name, self._taken, reserved)

    def write(self, rel: str, data) -> Path:
        """Write ``rel`` (a relative POSIX path of safe components) in the new folder: ``data``
        is text, bytes, or an iterable of bytes written one after another (a file too large to
        hold in memory whole)."""
        assert self.staging is not None, "write inside `with OutputDir(...)`"
        parts = rel.split("/")
        if any(p in ("", ".", "..") or _UNSAFE.search(p) for p in parts) or rel == MARKER:
            raise PlannerError(f"internal: unsafe output name {rel!r}")
        target = self.staging.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as f:
            if isinstance(data, (str, bytes, bytearray, memoryview)):
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            else:
                for chunk in data:
                    f.write(chunk)
        self.files.append(rel)
        return self.path.joinpath(*parts)

    def staged(self, rel: str) -> Path:
        """Where ``rel``, already written, lies until the folder is swapped in (to read it back)."""
        assert self.staging is not None and rel in self.files, rel
        return self.staging.joinpath(*rel.split("/"))

    def abort(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None

    def commit(self) -> None:
        """Swap the new folder in; delete the old content the marker lists (and nothing else)."""
        assert self.staging is not None
        new, target = self.staging, Path(os.path.abspath(self.path))
        mask = _umask()
        marker = {"format": MARKER_FORMAT, "command": self.command, "files": sorted(self.files),
                  "keep": list(self.keep)}
        old = old_marker = None
        try:
            (new / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
            for root, dirs, files in os.walk(new):
                os.chmod(root, 0o777 & ~mask)
                for f in files:
                    os.chmod(os.path.join(root, f), 0o666 & ~mask)
            if _lstat(target) is None:
                os.rename(new, target)
                self.staging = None
                return
            old_marker = self._check_owned()  # again, just before the swap
            moved = []
            try:
                for k in self.keep:  # carried over (a report's cache)
                    if _lstat(target / k) is not None and _lstat(new / k) is None:
                        os.rename(target / k, new / k)
                        moved.append(k)
                with os.scandir(target) as entries:
                    empty = not any(entries)
                if empty:
                    os.rename(new, target)  # replaces the empty folder
                elif _exchange(new, target):
                    old = new
                else:
                    aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name[:60]}.old-"))
                    os.rmdir(aside)
                    os.rename(target, aside)
                    try:
                        os.rename(new, target)
                    except OSError:
                        os.rename(aside, target)  # the old folder back in place
                        raise
                    old = aside
            except BaseException:
                for k in moved:  # the kept entries go back where they were
                    try:
                        os.rename(new / k, target / k)
                    except OSError:
                        pass
                raise
            self.staging = None
        except OSError as e:
            self.abort()
            raise PlannerError(f"{self.option} {_name(self.path)}: cannot write ({e.strerror or e})") from None
        except BaseException:
            self.abort()
            raise
        if old is None:
            return
        # ``old`` holds the previous content: delete what its marker lists, then the empty folders
        leftovers = _remove_listed(old, set(old_marker["files"]) | {MARKER} if old_marker else {MARKER})
        if leftovers:
            import sys

            print(f"milp-planner: note: the previous {_name(self.path)} held {_name(leftovers[0])} "
                  f"(not written by {self.command}); it is kept in {_name(old)}", file=sys.stderr)


def _remove_listed(folder: Path, listed: set[str]) -> list[str]:
    """Delete the listed files under ``folder`` and the folders left empty; what remains."""
    for rel in listed:
        p = folder.joinpath(*rel.split("/"))
        st = _lstat(p)
        if st is not None and stat.S_ISREG(st.st_mode):
            try:
                os.unlink(p)
            except OSError:
                pass
    for root, dirs, files in os.walk(folder, topdown=False):
        for d in dirs:
            try:
                os.rmdir(os.path.join(root, d))
            except OSError:
                pass
    try:
        os.rmdir(folder)
        return []
    except OSError:
        return sorted(os.path.relpath(os.path.join(r, f), folder) for r, _, fs in os.walk(folder) for f in fs)


# -- JSON -------------------------------------------------------------------------------------


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


def loads_strict(text: str):
    """JSON text to Python, refusing ``NaN``, ``Infinity`` and ``-Infinity`` (``ValueError``)."""
    def no_constant(name):
        raise ValueError(f"non-JSON constant {name}")
    return json.loads(text, parse_constant=no_constant)

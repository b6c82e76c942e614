"""Reading and validating instance files (docs/model.md section 1).

``read_instance(path)`` reads a YAML or JSON file; ``instance_from_dict(data, ...)`` builds an
instance from the same structure already in memory (tests, Python users). Every problem is a
``PlannerError`` with one line: ``FILE: KEY.PATH: reason``.

Numbers: YAML is read with YAML 1.2 core-schema scalars (``6.0e9``, ``1e-4`` and ``.5`` are
numbers) and every decimal is an exact ``Fraction`` of its text; integers stay ``int``. JSON
decimals are ``Fraction`` as well. No binary floating point is used while parsing; the
network matrices are stored as floats in base units (bytes/s, s) after validation.

Bounds (hostile input is a one-line error, never a hang): only regular files of at most
16 MiB are read; YAML nests at most ``MAX_DEPTH`` levels and expands to at most ``MAX_NODES``
nodes counting every alias; a number has at most ``MAX_NUMBER_TEXT`` characters and an
exponent within 1e±400; every quantity lies in [1e-30, 1e30] in magnitude (or is 0). YAML 1.1
booleans (``yes``/``no``/``on``/``off``) are booleans only under an explicit ``!!bool`` tag;
plain, they stay text, which a boolean key refuses.
"""

from __future__ import annotations

import decimal
import difflib
import json
import math
import os
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from milp_planner.instance.devices import COST_MODELS, CostModel, Device, Power
from milp_planner.errors import PlannerError
from milp_planner.io import printable, read_text_bounded
from milp_planner.model.graph import LayerGraph
from milp_planner.instance.types import AXES, OBJECTIVES, Constraints, Instance, SearchSpace
from milp_planner.instance.network import MEDIA, Endpoint, Network
from milp_planner.instance.profiles import PROFILE_FILE_KEYS, PROFILES, is_profile_file, resolve_profile_file
from milp_planner.model.loading import DEFAULT_DTYPE_BYTES, INSTANCE_SUFFIXES, load_graph

BYTES_PER_MBIT = 125_000  # 10^6 bits / 8
BYTES_PER_MB = 10**6
DTYPE_BYTES = (1, 2, 4, 8)
MAX_DIM = 1 << 20  # one input dimension
MAX_TABLE_POINTS = 1000  # points of one layer's table (each price interpolates over them)

TOP_KEYS = ("name", "description", "source", "model", "input_shape", "dtype_bytes", "devices",
            "network", "search", "objective", "constraints")
DEVICE_KEYS = ("name", "profile", "compute", "memory_mb", "power_w", "node")
COMPUTE_KEYS = ("model", "macs_per_s", "overhead_s", "stage_overhead_s", "mem_bytes_per_s", "mem_gbps", "table")
POWER_KEYS = ("compute", "tx", "rx")
NETWORK_KEYS = ("bandwidth_mbps", "latency_ms", "medium", "source", "sink")
ENDPOINT_KEYS = ("device", "bandwidth_mbps", "latency_ms")
SEARCH_KEYS = ("fusion_limit", "max_parts", "splits", "axes")
CONSTRAINT_KEYS = ("memory", "latency_ms", "energy_j", "period_ms")
PROFILE_INFO_KEYS = ("source", "assumptions")  # free text in a profile, not device keys


# ---------------------------------------------------------------------------------------
# YAML with YAML 1.2 core-schema scalars and exact decimals

_INT_RE = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_RE = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")


# Bounds: a real instance is a few kB with a nesting depth below 10.
MAX_DEPTH = 64  # nested collections
MAX_NODES = 200_000  # YAML nodes after alias expansion (a "billion laughs" bomb is refused)
MAX_NUMBER_TEXT = 100  # characters of one number
MAX_EXPONENT = 400  # |exponent| of a decimal: beyond it Fraction(text) takes forever
MAX_MAGNITUDE = Fraction(10) ** 30  # any quantity
MIN_MAGNITUDE = Fraction(1, 10**30)  # smallest non-zero quantity (rates divide)
_NUMBER_PARTS = re.compile(r"^[-+]?(?:\.([0-9]+)|([0-9]+)(?:\.([0-9]*))?)(?:[eE]([-+]?[0-9]+))?$")


class BadNumber(str):
    """Number text that cannot be read exactly within bounds; validation names the key."""

    reason: str = ""

    def __new__(cls, text: str, reason: str):
        obj = super().__new__(cls, text if len(text) <= 40 else text[:20] + "..." + text[-10:])
        obj.reason = reason
        return obj


def exact_number(text: str) -> Fraction | int | BadNumber:
    """``text`` (a decimal or integer literal) as an exact number, or a ``BadNumber``."""
    if len(text) > MAX_NUMBER_TEXT:
        return BadNumber(text, f"a number of {len(text)} characters (limit {MAX_NUMBER_TEXT})")
    m = _NUMBER_PARTS.match(text)
    if m is None:
        return BadNumber(text, "not a number")
    if m.group(4) is not None and abs(int(m.group(4))) > MAX_EXPONENT:
        return BadNumber(text, f"exponent out of range (limit 1e±{MAX_EXPONENT})")
    if m.group(4) is None and m.group(1) is None and m.group(3) is None:
        return int(text, 10)
    return Fraction(text)


class ExactLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema resolution; decimals become ``Fraction``.

    ``.inf`` and ``.nan`` stay strings, so that validation reports them as non-numbers.
    Duplicate keys in a mapping are an error (keys brought in by a ``<<`` merge may be
    overridden). Bounded: nesting depth ``MAX_DEPTH``, ``MAX_NODES`` nodes counting every
    alias expansion, number literals of ``MAX_NUMBER_TEXT`` characters and exponents up to
    ``MAX_EXPONENT``.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes it expands to

    def compose_node(self, parent, index):
        event = self.peek_event()
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if id(node) not in self._sizes:
            size = 1
            if isinstance(node, yaml.SequenceNode):
                size += sum(self._sizes.get(id(c), 1) for c in node.value)
            elif isinstance(node, yaml.MappingNode):
                size += sum(self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value)
            if size > MAX_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"expands to more than {MAX_NODES:,} nodes (aliases repeat their anchor)",
                    event.start_mark)
            self._sizes[id(node)] = size
        return node


ExactLoader.yaml_implicit_resolvers = {}
ExactLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL_RE, list("tTfF"))
ExactLoader.add_implicit_resolver("tag:yaml.org,2002:null", _NULL_RE, ["~", "n", "N", ""])
ExactLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_RE, list("-+0123456789"))
ExactLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))
ExactLoader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])

_TRUE = ("true", "yes", "on", "y")
_FALSE = ("false", "no", "off", "n")


def _bad_tag(node: yaml.Node, what: str) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(None, None, what, node.start_mark)


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int | BadNumber:
    text = str(loader.construct_scalar(node)).strip().replace("_", "")
    try:
        if len(text) > MAX_NUMBER_TEXT:
            return BadNumber(text, f"an integer of {len(text)} digits (limit {MAX_NUMBER_TEXT})")
        if text.lower().startswith(("0o", "0x", "-0o", "-0x", "+0o", "+0x")):
            return int(text, 0)
        return int(text, 10)
    except ValueError:
        raise _bad_tag(node, f"{text[:40]!r} is not an integer") from None


def _construct_float(loader: yaml.SafeLoader, node: yaml.Node) -> Fraction | int | str:
    text = str(loader.construct_scalar(node)).strip()
    if text.lstrip("+-").lower() in (".inf", ".nan"):
        return text  # rejected by validation as "not a number"
    value = exact_number(text)
    if isinstance(value, BadNumber) and value.reason == "not a number":
        raise _bad_tag(node, f"{text[:40]!r} is not a number")
    return Fraction(value) if isinstance(value, int) else value


def _construct_bool(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    # YAML 1.1 spellings are read only under an explicit !!bool tag; plain yes/no stay text
    text = str(loader.construct_scalar(node)).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _bad_tag(node, f"{text[:40]!r} is not a boolean (true or false)")


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: set = set()
    for key_node, _ in node.value:  # duplicates among the keys written here
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "unhashable key", key_node.start_mark) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    loader.flatten_mapping(node)  # merged keys first, so the keys written here win
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "unhashable key", key_node.start_mark) from None
        out[key] = loader.construct_object(value_node, deep=True)
    return out


ExactLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
ExactLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
ExactLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
ExactLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def _json_int(text: str) -> int | BadNumber:
    if len(text) > MAX_NUMBER_TEXT:
        return BadNumber(text, f"an integer of {len(text)} digits (limit {MAX_NUMBER_TEXT})")
    return int(text)


def _json_float(text: str) -> Fraction | int | BadNumber:
    value = exact_number(text)
    return Fraction(value) if isinstance(value, int) else value


def _json_depth_ok(text: str) -> bool:
    depth = deepest = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest <= MAX_DEPTH


def parse_text(text: str, source: str, kind: str) -> Any:
    """Parse YAML (``kind='yaml'``) or JSON text with exact decimals; one-line errors."""
    if kind == "json":
        if not _json_depth_ok(text):
            raise PlannerError(f"{source}: JSON nested deeper than {MAX_DEPTH} levels")
        try:
            return json.loads(text, parse_float=_json_float, parse_int=_json_int, parse_constant=lambda s: s)
        except json.JSONDecodeError as e:
            raise PlannerError(f"{source}: line {e.lineno}: JSON syntax error: {e.msg}") from None
    try:
        return yaml.load(text, Loader=ExactLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f"line {mark.line + 1}: " if mark is not None else ""
        what = e.problem or e.context or "invalid YAML"
        raise PlannerError(f"{source}: {line}YAML syntax error: {what}") from None
    except yaml.YAMLError as e:
        raise PlannerError(f"{source}: YAML syntax error: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise PlannerError(f"{source}: YAML nested too deeply") from None


# ---------------------------------------------------------------------------------------
# Validation helpers


class _Ctx:
    """The file label used in every message."""

    def __init__(self, source: str, base_dir: Path | None = None):
        self.source = source
        self.base_dir = base_dir  # where relative profile files are found
        self.profile_files: dict[Path, tuple[dict, "_Ctx"]] = {}  # read once per instance

    def fail(self, key: str, reason: str) -> PlannerError:
        where = f"{key}: " if key else ""
        return PlannerError(f"{self.source}: {where}{reason}")


def _show(value: Any) -> str:
    if isinstance(value, Fraction):
        if value.denominator == 1 and value.numerator.bit_length() <= 200:
            return str(value.numerator)
        if value == 0 or Fraction(1, 10**300) < abs(value) < 10**300:
            return f"{float(value):.12g}"
        # beyond the float range (1e400): Decimal, as float() would overflow or round to 0
        ctx12 = decimal.Context(prec=12, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
        return str(ctx12.divide(decimal.Decimal(value.numerator), decimal.Decimal(value.denominator)).normalize(ctx12))
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57]) + "..."
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return f"a mapping of {len(value)} keys"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(x: Any) -> bool:
    # floats only arrive from Python callers of instance_from_dict (files parse to Fraction)
    if isinstance(x, float):
        return math.isfinite(x)
    return isinstance(x, (int, Fraction)) and not isinstance(x, bool)


def _mapping(ctx: _Ctx, key: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise ctx.fail(key, f"must be a mapping (got {_show(value)})")
    return value


def _check_keys(ctx: _Ctx, key: str, data: dict, allowed: tuple[str, ...]) -> None:
    for k in data:
        if k not in allowed:
            hint = difflib.get_close_matches(str(k), allowed, n=1)
            did = f"; did you mean {hint[0]!r}?" if hint else ""
            where = f"{key}.{k}" if key else str(k)
            raise ctx.fail(where, f"unknown key {str(k)!r} (allowed: {', '.join(allowed)}){did}")


def _number(ctx: _Ctx, key: str, value: Any, *, positive: bool = False, nonneg: bool = False) -> Fraction:
    if isinstance(value, BadNumber):
        raise ctx.fail(key, f"{value.reason} (got {str(value)!r})")
    if not _is_number(value):
        raise ctx.fail(key, f"must be a number (got {_show(value)})")
    v = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if abs(v) > MAX_MAGNITUDE:
        raise ctx.fail(key, f"{_show(value)} is out of range (|x| <= 1e30)")
    if v != 0 and abs(v) < MIN_MAGNITUDE:
        raise ctx.fail(key, f"{_show(value)} is too small (0 or |x| >= 1e-30)")
    if positive and v <= 0:
        raise ctx.fail(key, f"must be > 0 (got {_show(value)})")
    if nonneg and v < 0:
        raise ctx.fail(key, f"must be >= 0 (got {_show(value)})")
    return v


def _int(ctx: _Ctx, key: str, value: Any, *, minimum: int | None = None, maximum: int = 10**9) -> int:
    if isinstance(value, BadNumber):
        raise ctx.fail(key, f"{value.reason} (got {str(value)!r})")
    if isinstance(value, bool) or not (isinstance(value, int)
                                        or (isinstance(value, Fraction) and value.denominator == 1)):
        raise ctx.fail(key, f"must be an integer (got {_show(value)})")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ctx.fail(key, f"must be >= {minimum} (got {v})")
    if v > maximum:
        raise ctx.fail(key, f"must be <= {maximum} (got {_show(v)})")
    return v


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_NAME = 1000  # names and model paths


def _string(ctx: _Ctx, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ctx.fail(key, f"must be a non-empty string (got {_show(value)})")
    if _CONTROL.search(value):
        raise ctx.fail(key, f"must not contain control characters such as newlines (got {_show(value)})")
    if len(value) > MAX_NAME:
        raise ctx.fail(key, f"must be at most {MAX_NAME} characters (got {len(value)})")
    return value


def _string_list(ctx: _Ctx, key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ctx.fail(key, f"must be a non-empty list (got {_show(value)})")
    out: list[str] = []
    for i, item in enumerate(value):
        s = _string(ctx, f"{key}[{i}]", item)
        if s not in out:
            out.append(s)
    return out


# ---------------------------------------------------------------------------------------
# Sections


def _input_shapes(ctx: _Ctx, key: str, value: Any) -> dict:
    """``input_shape:`` a list (the first input) or a mapping input name -> list ([] for a scalar)."""
    if isinstance(value, dict):
        if not value:
            raise ctx.fail(key, "must not be empty")
        out = {}
        for name, dims in value.items():
            if not isinstance(name, str) or not name:
                raise ctx.fail(key, f"input names must be text (got {_show(name)})")
            if isinstance(dims, (list, tuple)) and not dims:
                out[name] = ()
            else:
                out[name] = _input_shape(ctx, f"{key}.{name}", dims)
        return out
    return {None: _input_shape(ctx, key, value)}


def _input_shape(ctx: _Ctx, key: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ctx.fail(key, f"must be a list of positive integers (got {_show(value)})")
    dims = []
    for i, d in enumerate(value):
        if isinstance(d, bool) or not isinstance(d, int) or d <= 0:
            raise ctx.fail(f"{key}[{i}]", f"must be a positive integer (got {_show(d)})")
        if d > MAX_DIM:
            raise ctx.fail(f"{key}[{i}]", f"must be <= {MAX_DIM} (got {_show(d)})")
        dims.append(d)
    return tuple(dims)


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,39}")


def _profile_file(ctx: _Ctx, key: str, name: str) -> tuple[dict, _Ctx]:
    """A device file named by ``profile:`` (relative to the instance file), read and checked
    for structure; its own context labels errors in its values with its path.

    An error never shows the file's content when the file is not a device file at all (a
    text that is no mapping, unknown keys that are not names): ``profile: /etc/passwd`` must
    not print the passwords file's first line."""
    try:
        path = resolve_profile_file(name, ctx.base_dir)
    except PlannerError as e:
        raise ctx.fail(f"{key}.profile", f"profile file {_show(name)}: {e}") from None
    hit = ctx.profile_files.get(path)
    if hit is not None:
        return hit
    if not os.path.lexists(path):
        raise ctx.fail(f"{key}.profile", f"no such profile file {_show(name)} ({printable(path)})")
    text = read_text_bounded(path, "a profile file")
    fctx = _Ctx(str(path), path.parent)
    try:
        data = parse_text(text, str(path), "json" if path.suffix.lower() == ".json" else "yaml")
    except PlannerError as e:  # the parser's reason may quote the file: only the line and our own limits
        line = re.search(r": (line \d+): ", str(e))
        limit = re.search(r"(expands to more than [\d,]+ nodes|nested deeper than \d+ levels)", str(e))
        raise fctx.fail(line.group(1) if line else "", (limit.group(1) + ", " if limit else "syntax error, ")
                        + "not a device file (a YAML or JSON mapping with compute, memory_mb, power_w)") from None
    if data is None:
        raise fctx.fail("", "the profile file is empty (needs a device entry: compute, ...)")
    if not isinstance(data, dict):
        raise fctx.fail("", "must be a mapping with compute, memory_mb, power_w (a device file); "
                            f"it holds {'a list' if isinstance(data, list) else 'text or a number'}")
    for k in data:
        if k not in PROFILE_FILE_KEYS and not (isinstance(k, str) and _PLAIN_KEY.fullmatch(k)):
            raise fctx.fail("", f"not a device file: a key that is not a name (allowed: "
                                f"{', '.join(PROFILE_FILE_KEYS)})")
    _check_keys(fctx, "", data, PROFILE_FILE_KEYS)
    for k in PROFILE_INFO_KEYS:
        if k in data and not isinstance(data[k], str):
            raise fctx.fail(k, f"must be text (got {_show(data[k])})")
    ctx.profile_files[path] = (data, fctx)
    return data, fctx


def _measured_shape(data: dict) -> tuple[int, ...] | None:
    """The input shape a device file's table was measured at: its ``measured.input_shape``, else
    the ``input [N, C, H, W]`` its ``source`` text names (files of earlier versions)."""
    m = data.get("measured")
    if isinstance(m, dict) and isinstance(m.get("input_shape"), list):
        dims = m["input_shape"]
        if all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            return tuple(dims)
    src = data.get("source")
    if isinstance(src, str):
        hit = re.search(r"input \[(\d+(?:, \d+)*)\]", src)
        if hit:
            return tuple(int(x) for x in hit.group(1).split(", "))
    return None


def _check_measured(fctx: _Ctx, data: dict, graph: LayerGraph) -> None:
    """A ``table`` measured at one input shape is not valid for the model at another."""
    m = data.get("measured")
    if m is not None:
        m = _mapping(fctx, "measured", m)
        _check_keys(fctx, "measured", m, ("model", "input_shape"))
        if "input_shape" in m:
            _input_shape(fctx, "measured.input_shape", m["input_shape"])
    compute = data.get("compute")
    if not isinstance(compute, dict) or compute.get("model") != "table":
        return
    shape = _measured_shape(data)
    have = next(iter(graph.inputs.values()), None)
    if shape is not None and have is not None and tuple(shape) != tuple(have):
        raise fctx.fail("compute.table", f"measured at input {list(shape)}, but the instance's model has input "
                                         f"{list(have)}: layer times do not carry over to another size; profile "
                                         "again at this size (milp-planner profile MODEL --input-shape ...)")


def _merge_profile(ctx: _Ctx, key: str, raw: dict) -> tuple[dict, str | None]:
    """The device entry with its profile's defaults filled in (explicit keys win)."""
    name = raw.get("profile")
    if name is None:
        return dict(raw), None
    if isinstance(name, str) and name not in PROFILES and is_profile_file(name):
        source = _profile_file(ctx, key, name)[0]
    elif not isinstance(name, str) or name not in PROFILES:
        known = ", ".join(sorted(PROFILES)[:6])
        raise ctx.fail(f"{key}.profile", f"unknown profile {_show(name)} (known: {known}, ..., "
                                         "or a device file such as host.yaml)")
    else:
        source = PROFILES[name]
    base = {k: v for k, v in source.items() if k not in PROFILE_INFO_KEYS and k != "measured"}
    merged = dict(base)
    for k, v in raw.items():
        if k in ("compute", "power_w") and isinstance(v, dict) and isinstance(base.get(k), dict):
            sub = dict(base[k])
            if k == "compute" and ("mem_bytes_per_s" in v or "mem_gbps" in v):
                sub.pop("mem_bytes_per_s", None)
                sub.pop("mem_gbps", None)
            if k == "compute" and "model" in v and v["model"] != sub.get("model"):
                # a different cost model: keep the profile's rates, drop what only its model reads
                if v["model"] != "roofline":
                    sub.pop("mem_bytes_per_s", None)
                    sub.pop("mem_gbps", None)
                if v["model"] != "table":
                    sub.pop("table", None)
            sub.update(v)
            merged[k] = sub
        else:
            merged[k] = v
    return merged, name


TABLE_AXES = ("rows", "channels")


def _points(ctx: _Ctx, k: str, entry: Any) -> tuple[tuple[Fraction, Fraction], ...]:
    if _is_number(entry) or isinstance(entry, BadNumber):
        return ((Fraction(1), _number(ctx, k, entry, nonneg=True)),)
    if not isinstance(entry, list) or not entry:
        raise ctx.fail(k, f"must be seconds or a list of [fraction, seconds] (got {_show(entry)})")
    if len(entry) > MAX_TABLE_POINTS:
        raise ctx.fail(k, f"{len(entry):,} points, more than {MAX_TABLE_POINTS:,} (a measured table has a few)")
    points: list[tuple[Fraction, Fraction]] = []
    for i, pt in enumerate(entry):
        kp = f"{k}[{i}]"
        if not isinstance(pt, list) or len(pt) != 2:
            raise ctx.fail(kp, f"must be a pair [fraction, seconds] (got {_show(pt)})")
        f = _number(ctx, f"{kp}[0]", pt[0], positive=True)
        if f > 1:
            raise ctx.fail(f"{kp}[0]", f"fraction must be <= 1 (got {_show(pt[0])})")
        t = _number(ctx, f"{kp}[1]", pt[1], nonneg=True)
        if points and f <= points[-1][0]:
            raise ctx.fail(f"{kp}[0]", "fractions must be strictly ascending")
        points.append((f, t))
    return tuple(points)


def _table(ctx: _Ctx, key: str, value: Any, graph: LayerGraph) -> tuple[dict, dict]:
    """(table, channel_table): an entry is seconds, a list of [fraction, seconds], or
    ``{rows: POINTS, channels: POINTS}`` (either key alone is the layer's one table)."""
    table = _mapping(ctx, key, value)
    if not table:
        raise ctx.fail(key, "must not be empty")
    names = {layer.name for layer in graph.layers}
    out: dict[str, tuple[tuple[Fraction, Fraction], ...]] = {}
    chans: dict[str, tuple[tuple[Fraction, Fraction], ...]] = {}
    for lname, entry in table.items():
        if isinstance(lname, int) and not isinstance(lname, bool):
            lname = str(lname)  # a layer named "12" written as a bare YAML key
        k = f"{key}.{lname}"
        if not isinstance(lname, str) or lname not in names:
            some = ", ".join(layer.name for layer in graph.layers[:4])
            raise ctx.fail(k, f"no layer named {_show(lname)} in the model (layers: {some}, ...)")
        if isinstance(entry, dict):
            _check_keys(ctx, k, entry, TABLE_AXES)
            if not entry:
                raise ctx.fail(k, "must give rows, channels or both")
            per = {ax: _points(ctx, f"{k}.{ax}", entry[ax]) for ax in TABLE_AXES if ax in entry}
            out[lname] = per.get("rows", per.get("channels"))
            if "rows" in per and "channels" in per:
                chans[lname] = per["channels"]
            continue
        out[lname] = _points(ctx, k, entry)
    return out, chans


def _compute(ctx: _Ctx, key: str, value: Any, graph: LayerGraph) -> CostModel:
    c = _mapping(ctx, key, value)
    _check_keys(ctx, key, c, COMPUTE_KEYS)
    kind = c.get("model", "linear")
    if kind not in COST_MODELS:
        raise ctx.fail(f"{key}.model", f"unknown cost model {_show(kind)} (known: {', '.join(COST_MODELS)})")
    macs = c.get("macs_per_s")
    macs = None if macs is None else _number(ctx, f"{key}.macs_per_s", macs, positive=True)
    overhead = _number(ctx, f"{key}.overhead_s", c.get("overhead_s", 0), nonneg=True)
    stage_overhead = _number(ctx, f"{key}.stage_overhead_s", c.get("stage_overhead_s", 0), nonneg=True)
    if "mem_bytes_per_s" in c and "mem_gbps" in c:
        raise ctx.fail(f"{key}.mem_gbps", "give mem_bytes_per_s or mem_gbps, not both")
    mem = None
    if c.get("mem_bytes_per_s") is not None:
        mem = _number(ctx, f"{key}.mem_bytes_per_s", c["mem_bytes_per_s"], positive=True)
    elif c.get("mem_gbps") is not None:
        mem = _number(ctx, f"{key}.mem_gbps", c["mem_gbps"], positive=True) * 10**9
    table: dict = {}
    chans: dict = {}
    if c.get("table") is not None:
        if kind != "table":
            raise ctx.fail(f"{key}.table", f"only read by model: table (this device's model is {kind})")
        table, chans = _table(ctx, f"{key}.table", c["table"], graph)
    if kind in ("linear", "roofline") and macs is None:
        raise ctx.fail(f"{key}.macs_per_s", f"required by model: {kind}")
    if kind == "roofline" and mem is None:
        raise ctx.fail(f"{key}.mem_bytes_per_s", "required by model: roofline (or mem_gbps)")
    if kind == "table":
        if not table:
            raise ctx.fail(f"{key}.table", "required by model: table")
        if macs is None:
            for layer in graph.layers:
                if layer.name not in table:
                    raise ctx.fail(f"{key}.table", f"has no entry for layer {layer.name!r} "
                                                   "(give every layer, or macs_per_s as a fallback)")
    return CostModel(kind=kind, macs_per_s=macs, overhead_s=overhead, stage_overhead_s=stage_overhead,
                     mem_bytes_per_s=mem, table=table,
                     channel_table=chans)


def _power(ctx: _Ctx, key: str, value: Any) -> Power:
    if value is None:
        return Power()
    p = _mapping(ctx, key, value)
    _check_keys(ctx, key, p, POWER_KEYS)
    return Power(
        compute_w=_number(ctx, f"{key}.compute", p.get("compute", 0), nonneg=True),
        tx_w=_number(ctx, f"{key}.tx", p.get("tx", 0), nonneg=True),
        rx_w=_number(ctx, f"{key}.rx", p.get("rx", 0), nonneg=True),
    )


def _device(ctx: _Ctx, key: str, value: Any, graph: LayerGraph) -> Device:
    raw = _mapping(ctx, key, value)
    _check_keys(ctx, key, raw, DEVICE_KEYS)
    if "name" not in raw:
        raise ctx.fail(f"{key}.name", "required")
    name = _string(ctx, f"{key}.name", raw["name"])
    merged, prof = _merge_profile(ctx, key, raw)
    if prof is not None and prof not in PROFILES:  # a device file: its own values name its path
        data, fctx = _profile_file(ctx, key, prof)
        if not (isinstance(raw.get("compute"), dict) and "table" in raw["compute"]):
            _check_measured(fctx, data, graph)  # its table, unless the instance gives its own
        if "compute" in data:
            _compute(fctx, "compute", data["compute"], graph)
        if data.get("memory_mb") is not None:
            _number(fctx, "memory_mb", data["memory_mb"], positive=True)
        _power(fctx, "power_w", data.get("power_w"))
    if "compute" not in merged:
        raise ctx.fail(f"{key}.compute", "required (or a profile)")
    compute = _compute(ctx, f"{key}.compute", merged["compute"], graph)
    memory = merged.get("memory_mb")
    memory_bytes = None
    if memory is not None:
        mb = _number(ctx, f"{key}.memory_mb", memory, positive=True)
        memory_bytes = int(mb * BYTES_PER_MB)  # floor of an exact product
    power = _power(ctx, f"{key}.power_w", merged.get("power_w"))
    node = _string(ctx, f"{key}.node", merged["node"]) if merged.get("node") is not None else name
    return Device(name=name, compute=compute, memory_bytes=memory_bytes, power=power, node=node,
                  profile=prof)


def _matrix(ctx: _Ctx, key: str, value: Any, n: int, *, positive: bool, scale: Fraction,
            diagonal: float) -> tuple[tuple[float, ...], ...]:
    """A scalar for every pair or an n x n matrix; returns floats in base units."""
    if _is_number(value) or isinstance(value, BadNumber):
        v = _number(ctx, key, value, positive=positive, nonneg=not positive)
        x = float(v * scale)
        return tuple(tuple(diagonal if i == j else x for j in range(n)) for i in range(n))
    if not isinstance(value, list):
        raise ctx.fail(key, f"must be a number or a {n}x{n} matrix (got {_show(value)})")
    if len(value) != n or not all(isinstance(row, list) and len(row) == n for row in value):
        rows = len(value)
        cols = sorted({len(r) if isinstance(r, list) else 0 for r in value})
        got = f"{rows}x{cols[0]}" if len(cols) == 1 else f"{rows} rows of lengths {cols}"
        raise ctx.fail(key, f"matrix must be {n}x{n} (|D|x|D|, one row per sending device; got {got})")
    out = []
    for i, row in enumerate(value):
        out_row = []
        for j, x in enumerate(row):
            k = f"{key}[{i}][{j}]"
            if i == j:
                if x is not None and not _is_number(x):
                    raise ctx.fail(k, f"must be a number (got {_show(x)})")
                out_row.append(diagonal)
                continue
            v = _number(ctx, k, x, positive=positive, nonneg=not positive)
            out_row.append(float(v * scale))
        out.append(tuple(out_row))
    return tuple(out)


def _vector(ctx: _Ctx, key: str, value: Any, n: int, *, positive: bool, scale: Fraction) -> tuple[float, ...]:
    if _is_number(value) or isinstance(value, BadNumber):
        v = _number(ctx, key, value, positive=positive, nonneg=not positive)
        return tuple(float(v * scale) for _ in range(n))
    if not isinstance(value, list):
        raise ctx.fail(key, f"must be a number or a list of {n} (one per device; got {_show(value)})")
    if len(value) != n:
        raise ctx.fail(key, f"must have {n} entries, one per device (got {len(value)})")
    return tuple(float(_number(ctx, f"{key}[{i}]", x, positive=positive, nonneg=not positive) * scale)
                 for i, x in enumerate(value))


def _endpoint(ctx: _Ctx, key: str, value: Any, names: list[str]) -> Endpoint:
    if value is None:
        return Endpoint(device=0)
    e = _mapping(ctx, key, value)
    _check_keys(ctx, key, e, ENDPOINT_KEYS)
    if "device" in e:
        if "bandwidth_mbps" in e or "latency_ms" in e:
            raise ctx.fail(key, "give either device or bandwidth_mbps/latency_ms, not both")
        dev = e["device"]
        if not isinstance(dev, str) or dev not in names:
            shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            raise ctx.fail(f"{key}.device", f"no device named {_show(dev)} (devices: {shown})")
        return Endpoint(device=names.index(dev))
    if "bandwidth_mbps" not in e:
        raise ctx.fail(key, "needs device: NAME or bandwidth_mbps (an external node)")
    n = len(names)
    bw = _vector(ctx, f"{key}.bandwidth_mbps", e["bandwidth_mbps"], n, positive=True,
                 scale=Fraction(BYTES_PER_MBIT))
    lat = _vector(ctx, f"{key}.latency_ms", e.get("latency_ms", 0), n, positive=False,
                  scale=Fraction(1, 1000))
    return Endpoint(device=None, bandwidth_Bps=bw, latency_s=lat)


def _network(ctx: _Ctx, value: Any, names: list[str]) -> Network:
    n = len(names)
    net = _mapping(ctx, "network", value if value is not None else {})
    _check_keys(ctx, "network", net, NETWORK_KEYS)
    bw = net.get("bandwidth_mbps")
    if bw is None:
        if n > 1:
            raise ctx.fail("network.bandwidth_mbps", "required when there is more than one device")
        bw = 1  # one device: the matrix has only its (ignored) diagonal
    bandwidth = _matrix(ctx, "network.bandwidth_mbps", bw, n, positive=True,
                        scale=Fraction(BYTES_PER_MBIT), diagonal=float("inf"))
    lat = net.get("latency_ms")
    latency = _matrix(ctx, "network.latency_ms", 0 if lat is None else lat, n, positive=False,
                      scale=Fraction(1, 1000), diagonal=0.0)
    medium = net.get("medium", "switched")
    if medium not in MEDIA:
        raise ctx.fail("network.medium", f"must be one of {', '.join(MEDIA)} (got {_show(medium)})")
    source = _endpoint(ctx, "network.source", net.get("source"), names)
    sink = _endpoint(ctx, "network.sink", net.get("sink"), names)
    return Network(bandwidth_Bps=bandwidth, latency_s=latency, medium=medium, source=source, sink=sink)


def _search(ctx: _Ctx, value: Any, n_devices: int) -> SearchSpace:
    s = _mapping(ctx, "search", value if value is not None else {})
    _check_keys(ctx, "search", s, SEARCH_KEYS)
    fusion = _int(ctx, "search.fusion_limit", s.get("fusion_limit", 1), minimum=1)
    max_parts = _int(ctx, "search.max_parts", s.get("max_parts", n_devices), minimum=1)
    splits = _string_list(ctx, "search.splits", s.get("splits", ["equal"]))
    for i, sp in enumerate(splits):
        if sp in ("equal", "capacity", "any"):
            continue
        m = re.fullmatch(r"grid:(\d+)", sp)
        if not m:
            raise ctx.fail(f"search.splits[{i}]", f"unknown split {sp!r} (known: equal, capacity, grid:G, any)")
        if int(m.group(1)) < 2:
            raise ctx.fail(f"search.splits[{i}]", f"grid:G needs an integer G >= 2 (got {sp!r})")
        splits[i] = f"grid:{int(m.group(1))}"
    axes = _string_list(ctx, "search.axes", s.get("axes", ["rows"]))
    for i, ax in enumerate(axes):
        if ax not in AXES:
            raise ctx.fail(f"search.axes[{i}]", f"unknown axis {ax!r} (known: {', '.join(AXES)})")
    return SearchSpace(fusion_limit=fusion, max_parts=min(max_parts, n_devices),
                       splits=tuple(dict.fromkeys(splits)), axes=tuple(axes))


def _constraints(ctx: _Ctx, value: Any) -> Constraints:
    c = _mapping(ctx, "constraints", value if value is not None else {})
    _check_keys(ctx, "constraints", c, CONSTRAINT_KEYS)
    memory = c.get("memory", True)
    if not isinstance(memory, bool):
        raise ctx.fail("constraints.memory", f"must be true or false (got {_show(memory)})")
    lat = c.get("latency_ms")
    lat_s = None if lat is None else _number(ctx, "constraints.latency_ms", lat, positive=True) / 1000
    en = c.get("energy_j")
    en_j = None if en is None else _number(ctx, "constraints.energy_j", en, positive=True)
    per = c.get("period_ms")
    per_s = None if per is None else _number(ctx, "constraints.period_ms", per, positive=True) / 1000
    return Constraints(memory=memory, latency_s=lat_s, energy_j=en_j, period_s=per_s)


# ---------------------------------------------------------------------------------------
# Entry points


def instance_from_dict(data: Any, source: str, base_dir: Path | None = None, input_shape=None,
                       graph: LayerGraph | None = None, path: Path | None = None) -> Instance:
    """Validate ``data`` (the parsed file) and build the ``Instance``.

    ``source`` labels every error message (normally the file name). ``base_dir`` resolves a
    relative model path. ``input_shape`` overrides the file's. With ``graph`` given the model
    is not loaded (and the ``model`` key may be absent).
    """
    ctx = _Ctx(source, base_dir)
    if data is None:
        raise ctx.fail("", "the file is empty (needs at least model and devices)")
    top = _mapping(ctx, "", data)
    _check_keys(ctx, "", top, TOP_KEYS)
    for k in ("description", "source"):
        if k in top and not isinstance(top[k], str):
            raise ctx.fail(k, f"must be text (got {_show(top[k])})")
    default_name = Path(source).stem if source else "instance"
    name = _string(ctx, "name", top["name"]) if top.get("name") is not None else default_name

    dtype = top.get("dtype_bytes", 4)
    if isinstance(dtype, bool) or not _is_number(dtype) or dtype not in DTYPE_BYTES:
        raise ctx.fail("dtype_bytes", f"must be one of 1, 2, 4, 8 (got {_show(dtype)})")
    dtype = int(dtype)

    if top.get("input_shape") is not None:
        file_shape = _input_shapes(ctx, "input_shape", top["input_shape"])
    else:
        file_shape = None
    from milp_planner.model.onnx import input_shapes

    given = input_shapes(input_shape)  # the command line's, input by input over the file's
    shape = {**(file_shape or {}), **given} if given is not None else file_shape
    if shape is not None and list(shape) == [None]:
        shape = shape[None]  # the first input only: the plain shape

    objective = top.get("objective", "latency")
    if objective not in OBJECTIVES:
        raise ctx.fail("objective", f"must be one of {', '.join(OBJECTIVES)} (got {_show(objective)})")

    # devices: structure first (cheap errors before the model is loaded)
    if "devices" not in top:
        raise ctx.fail("devices", "required (a list of devices)")
    devs = top["devices"]
    if not isinstance(devs, list):
        raise ctx.fail("devices", f"must be a list (got {_show(devs)})")
    if not devs:
        raise ctx.fail("devices", "must not be empty")
    seen: dict[str, int] = {}
    for i, d in enumerate(devs):
        dm = _mapping(ctx, f"devices[{i}]", d)
        _check_keys(ctx, f"devices[{i}]", dm, DEVICE_KEYS)
        if "name" not in dm:
            raise ctx.fail(f"devices[{i}].name", "required")
        nm = _string(ctx, f"devices[{i}].name", dm["name"])
        if nm in seen:
            raise ctx.fail(f"devices[{i}].name", f"device {nm!r} is named twice (also devices[{seen[nm]}])")
        seen[nm] = i
        prof = dm.get("profile")
        if prof is not None and (not isinstance(prof, str) or prof not in PROFILES):
            _merge_profile(ctx, f"devices[{i}]", dm)  # unknown profile, or a bad profile file
    names = list(seen)

    network = _network(ctx, top.get("network"), names)
    search = _search(ctx, top.get("search"), len(names))
    constraints = _constraints(ctx, top.get("constraints"))

    model_ref = top.get("model")
    if graph is None:
        if model_ref is None:
            raise ctx.fail("model", "required (zoo:NAME or a path to an .onnx file)")
        model_ref = _string(ctx, "model", model_ref)

        try:
            graph = load_graph(model_ref, base_dir=base_dir, input_shape=shape)
        except PlannerError as e:
            raise ctx.fail("model", str(e)) from None
    elif model_ref is not None:
        model_ref = _string(ctx, "model", model_ref)

    devices = tuple(_device(ctx, f"devices[{i}]", d, graph) for i, d in enumerate(devs))
    return Instance(
        name=name,
        graph=graph,
        devices=devices,
        network=network,
        search=search,
        objective=objective,
        constraints=constraints,
        dtype_bytes=dtype,
        path=path,
        model=model_ref or "",
    )


def read_instance(path: Path, input_shape=None) -> Instance:
    """Read, validate and build the instance in ``path`` (.yaml, .yml or .json)."""
    path = Path(path)
    source = str(path)
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        kind = "yaml"
    elif suffix == ".json":
        kind = "json"
    else:
        raise PlannerError(f"{source}: not an instance file (expected .yaml, .yml or .json)")
    text = read_text_bounded(path, "an instance file")
    data = parse_text(text, source, kind)
    return instance_from_dict(data, source, base_dir=path.parent, input_shape=input_shape, path=path)


def load_instance(path, input_shape=None) -> Instance:
    """Read and validate an instance file; raises ``PlannerError`` with a one-line reason.

    ``example:NAME`` names an example shipped inside the package (``milp_planner/instance/examples``).
    """
    return read_instance(resolve_instance_path(path), input_shape=input_shape)


def resolve_instance_path(path) -> Path:
    """The file behind ``path``; ``example:NAME`` is a packaged example."""
    text = str(path)
    if text.startswith("example:"):
        name = text.split(":", 1)[1]
        examples = Path(__file__).parent / "examples"
        found = examples / f"{name}.yaml"
        if not found.exists():
            known = ", ".join(sorted(p.stem for p in examples.glob("*.yaml")))
            raise PlannerError(f"{text}: no such packaged example (known: {known})")
        return found
    return Path(path)


def load_graph_or_instance(target: str, input_shape=None) -> tuple[LayerGraph, int]:
    """(graph, dtype_bytes) of an instance file, or of a model reference (dtype_bytes 4)."""
    target = str(target)
    if target.startswith("example:") or Path(target).suffix.lower() in INSTANCE_SUFFIXES:
        inst = load_instance(target, input_shape=input_shape)
        return inst.graph, inst.dtype_bytes
    return load_graph(target, input_shape=input_shape), DEFAULT_DTYPE_BYTES

"""The run cache: one ``KEY.json`` file per finished run (whatever its status), written
atomically as soon as the run is back, so an interrupted report resumes where it stopped and a
repeated one runs nothing.

A record is read back only if it is one this version writes: a regular file of at most
``MAX_RECORD_BYTES``, strict JSON (no ``NaN`` or ``Infinity``), following ``RECORD_SCHEMA``
(its key, its task, a known status, finite numbers, a plan that follows the plan schema).
Anything else (a damaged or hand-edited file) is a cache miss: the run is made again and the
file replaced.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

from milp_planner.errors import PlannerError
from milp_planner.io import loads_strict, read_text_bounded, write_atomic

MAX_RECORD_BYTES = 64 * 2**20

_NUM = {"type": ["number", "null"]}
RECORD_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["format", "key", "task", "status"],
    "properties": {
        "format": {"type": "integer"},
        "key": {"type": "string"},
        "task": {
            "type": "object",
            "required": ["instance_path", "instance_name", "planner", "seed"],
            "properties": {
                "instance_path": {"type": "string"}, "instance_name": {"type": "string"},
                "planner": {"type": "string"}, "seed": {"type": "integer", "minimum": 0},
                "time_limit": _NUM, "exact": {"type": "boolean"}, "seeded": {"type": "boolean"},
                "objective": {"type": ["string", "null"]},
            },
        },
        "status": {"type": ["string", "null"]},
        "message": {"type": ["string", "null"]},
        "traceback": {"type": ["string", "null"]},
        "wall_s": _NUM,
        "killed": {"type": "boolean"},
        "result": {
            "type": ["object", "null"],
            "properties": {
                "status": {"type": ["string", "null"]},
                "objective_name": {"type": ["string", "null"]},
                "objective": _NUM, "bound": _NUM, "gap": _NUM, "solve_time_s": _NUM,
                "metrics": {"type": ["object", "null"], "additionalProperties": {
                    "type": ["number", "boolean", "string", "array", "object", "null"]}},
                "plan": {"type": ["object", "null"]},
            },
        },
        "versions": {"type": ["object", "null"]},
    },
}


def check_record(rec, key: str) -> str | None:
    """Why ``rec`` is not a usable record for ``key``, or None."""
    import jsonschema

    from milp_planner.space.plan import PLAN_SCHEMA

    if not isinstance(rec, dict) or rec.get("key") != key:
        return "not the record of this run"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(RECORD_SCHEMA).iter_errors(rec))
    if error is not None:
        return f"{'.'.join(str(p) for p in error.absolute_path) or 'record'}: {error.message[:100]}"
    plan = (rec.get("result") or {}).get("plan")
    if plan is not None:
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(PLAN_SCHEMA).iter_errors(plan))
        if error is not None:
            return f"result.plan: {error.message[:100]}"
    return None


class Cache:
    """``KEY.json`` files in one directory; each written atomically."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.rejected: list[str] = []  # files read back that were not usable records

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        p = self.path(key)
        if not p.exists() and not p.is_symlink():
            return None
        try:
            rec = loads_strict(read_text_bounded(p, "a cache record", MAX_RECORD_BYTES))
        except (PlannerError, ValueError, RecursionError) as e:
            self.rejected.append(f"{p.name}: {str(e)[:120]}")
            return None
        why = check_record(rec, key)
        if why is not None:
            self.rejected.append(f"{p.name}: {why}")
            return None
        return rec

    def put(self, record: dict) -> None:
        from milp_planner.io import finite_or_none

        text = json.dumps(finite_or_none(json.loads(json.dumps(record, default=jsonable))), indent=1,
                          allow_nan=False)
        write_atomic(self.path(record["key"]), text + "\n")


def default_cache_dir(out_dir: Path) -> Path:
    return Path(out_dir) / ".cache"


def jsonable(x):
    """A JSON encoder fallback: fractions, sets, tuples, paths and numpy values."""
    if isinstance(x, Fraction):
        return float(x)
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    item = getattr(x, "item", None)  # numpy scalars
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    tolist = getattr(x, "tolist", None)
    if callable(tolist):
        return tolist()
    return str(x)

"""The run cache: one ``KEY.json`` file per finished run (whatever its status), written
atomically as soon as the run is back, so an interrupted report resumes where it stopped and a
repeated one runs nothing."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

from milp_planner.io import write_atomic


class Cache:
    """``KEY.json`` files in one directory; each written atomically."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        p = self.path(key)
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(rec, dict) or rec.get("key") != key:
            return None
        return rec

    def put(self, record: dict) -> None:
        write_atomic(self.path(record["key"]), json.dumps(record, default=jsonable, indent=1) + "\n")


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

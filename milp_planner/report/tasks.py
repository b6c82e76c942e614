"""The runs of a report: one ``Task`` per (instance, planner, seed), and its cache key.

One *task* is one run: an instance file, a planner (with its options), a time limit and a
seed. Its *key* is a SHA-256 of everything its result depends on:

- the instance file's bytes, plus the referenced model file's bytes (or the ``zoo:`` reference
  itself: zoo models are fixed by the package version),
- the planner name and its options, the time limit, the seed, the thread count,
- ``milp_planner.__version__``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from milp_planner import __version__
from milp_planner.errors import PlannerError

GRACE_FACTOR = 1.5
GRACE_S = 30.0
CACHE_FORMAT = 1


@dataclass(frozen=True)
class Task:
    """One run. ``planner_ref`` is ``module:QualName`` of the planner class (resolved by the parent)."""

    instance_path: str
    instance_name: str
    instance_digest: str
    objective: str
    planner: str
    planner_ref: str
    exact: bool
    seeded: bool
    options: tuple = ()  # sorted (key, value) pairs
    time_limit: float | None = None
    seed: int = 0
    threads: int = 1

    @property
    def key(self) -> str:
        ident = {
            "format": CACHE_FORMAT,
            "instance": self.instance_digest,
            "planner": self.planner,
            "options": [[k, v] for k, v in self.options],
            "time_limit": self.time_limit,
            "seed": self.seed,
            "threads": self.threads,
            "version": __version__,
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:32]

    @property
    def deadline_s(self) -> float:
        return deadline(self.time_limit)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["options"] = dict(self.options)
        return d


def deadline(time_limit: float | None, factor: float = GRACE_FACTOR, grace_s: float = GRACE_S) -> float:
    """Seconds after which a run is killed: ``time_limit x factor + grace`` (inf without a limit)."""
    return math.inf if time_limit is None else time_limit * factor + grace_s


def instance_digest(path: Path, model_ref: str) -> str:
    """SHA-256 of the instance file's bytes plus its model file's bytes (or its zoo reference)."""
    path = Path(path)
    h = hashlib.sha256()
    h.update(b"instance\0")
    h.update(path.read_bytes())
    h.update(b"\0model\0")
    ref = model_ref or ""
    if ref and not ref.startswith("zoo:"):
        model_path = Path(ref) if Path(ref).is_absolute() else path.parent / ref
        try:
            h.update(model_path.read_bytes())
        except OSError:
            h.update(ref.encode())
    else:
        h.update(ref.encode())
    return h.hexdigest()


def class_ref(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_ref(ref: str) -> type:
    module, qual = ref.split(":", 1)
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def make_tasks(instances: list, planners: list[str], *, time_limit: float | None, repeats: int = 1,
               options: dict[str, dict] | None = None, threads: int = 1) -> list[Task]:
    """Every (instance, planner, seed) run. ``instances`` are loaded ``Instance`` objects with ``path``.

    Seeded planners run with seeds 0..repeats-1, the others once (seed 0).
    """
    from milp_planner.planners import planner_class

    options = options or {}
    classes = {name: planner_class(name) for name in planners}
    tasks = []
    for inst in instances:
        if inst.path is None:
            raise PlannerError(f"instance {inst.name!r}: a report needs instances read from files")
        digest = instance_digest(inst.path, inst.model)
        for name in planners:
            cls = classes[name]
            seeds = range(repeats) if getattr(cls, "seeded", False) else range(1)
            opts = tuple(sorted(options.get(name, {}).items()))
            for seed in seeds:
                tasks.append(Task(
                    instance_path=str(Path(inst.path).resolve()), instance_name=inst.name,
                    instance_digest=digest, objective=inst.objective, planner=name,
                    planner_ref=class_ref(cls), exact=bool(getattr(cls, "exact", False)),
                    seeded=bool(getattr(cls, "seeded", False)), options=opts,
                    time_limit=None if time_limit is None else float(time_limit), seed=int(seed),
                    threads=int(threads)))
    return tasks

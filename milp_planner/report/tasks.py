"""The runs of a report: one ``Task`` per (instance, planner, seed), and its cache key.

One *task* is one run: an instance file, a planner (with its options), a time limit and a
seed. Its *key* is a SHA-256 of everything its result depends on:

- the instance file's bytes, plus the referenced model file's bytes (or the ``zoo:`` reference
  itself: zoo models are fixed by the package version), plus the bytes of every device
  profile file the instance names (``profile: host.yaml``: a re-measured profile is a new run),
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

    def to_dict(self) -> dict:
        d = asdict(self)
        d["options"] = dict(self.options)
        return d


def kill_after_s(time_limit: float | None, factor: float = GRACE_FACTOR, grace_s: float = GRACE_S) -> float:
    """Seconds after which a run is killed: ``time_limit x factor + grace`` (inf without a limit)."""
    return math.inf if time_limit is None else time_limit * factor + grace_s


def profile_files(inst) -> list[Path]:
    """The device profile files an instance reads (``profile: FILE``), resolved, in device order."""
    from milp_planner.instance.profiles import PROFILES, is_profile_file, resolve_profile_file

    base = Path(inst.path).parent if inst.path is not None else None
    out: list[Path] = []
    for d in inst.devices:
        name = getattr(d, "profile", None)
        if isinstance(name, str) and name not in PROFILES and is_profile_file(name):
            p = resolve_profile_file(name, base)
            if p not in out:
                out.append(p)
    return out


def input_files(inst) -> list[Path]:
    """Every file the instance was read from: the instance, its ``.onnx`` model, its device
    profile files (an output may be none of them)."""
    out: list[Path] = []
    if inst.path is not None:
        out.append(Path(inst.path))
        ref = inst.model or ""
        if ref and not ref.startswith("zoo:"):
            model = Path(ref).expanduser()
            out.append(model if model.is_absolute() else Path(inst.path).parent / model)
    return out + profile_files(inst)


def instance_digest(path: Path, model_ref: str, profiles=()) -> str:
    """SHA-256 of the instance file's bytes plus its model file's bytes (or its zoo reference)
    and the bytes of each device profile file in ``profiles``."""
    from milp_planner.io import read_bytes_bounded
    from milp_planner.model.onnx.reading import MAX_MODEL_BYTES

    path = Path(path)
    h = hashlib.sha256()
    h.update(b"instance\0")
    h.update(read_bytes_bounded(path, "an instance file"))
    h.update(b"\0model\0")
    ref = model_ref or ""
    if ref and not ref.startswith("zoo:"):
        model_path = Path(ref) if Path(ref).is_absolute() else path.parent / ref
        try:
            _hash_file(h, model_path, MAX_MODEL_BYTES)
        except (OSError, PlannerError):
            h.update(ref.encode())
    else:
        h.update(ref.encode())
    for p in profiles:
        h.update(b"\0profile\0" + str(p).encode() + b"\0")
        h.update(read_bytes_bounded(p, "a profile file"))
    return h.hexdigest()


def _hash_file(h, path: Path, max_bytes: int) -> None:
    """Feed the regular file ``path`` (at most ``max_bytes``) to ``h``, 1 MiB at a time."""
    from milp_planner.io import check_input_file

    check_input_file(path, "an ONNX model", max_bytes)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


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
        digest = instance_digest(inst.path, inst.model, profile_files(inst))
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

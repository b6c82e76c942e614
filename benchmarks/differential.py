"""The differential test bed: every planner, objective and front against brute force on random cases.

Each case is a seeded random instance (``milp_planner.instance.generate``): a tiny ONNX model read
through the importer, 2-4 devices, a random plan space, and caps chosen from the plans' own
values (binding, at a plan's value to the 9th digit, or infeasible). The bed lists the plan
space itself, from docs/model.md section 5 and without the planners' code, checks that
``formulations.options.stage_options`` lists the same options, and scores every plan with the
evaluator once. From that table it knows each objective's optimum under the caps and the
Pareto fronts, and checks:

- ``dp``, ``milp``, ``cpsat`` and ``bruteforce`` on every objective: the status (``infeasible``
  exactly when no plan meets the caps), the value (the optimum), every plan re-scored by
  ``evaluate`` (feasible, in the space, the reported value), the bound never above the optimum,
  and the one status rule (``optimal`` exactly when the gap is at most 1e-6);
- the same planners under a random ``--time-limit`` and ``-O max_arcs``: any status, but the
  bound never above the optimum and a plan never below it;
- ``pareto`` over 2 and 3 objectives: every point a feasible in-space plan, none that says
  ``optimal`` dominated by any plan, and ``certified`` only when every non-dominated vector is on the front (up to the
  front's stated ``resolution``);
- ``milp-planner solve`` on the command line with its default baselines: never an internal
  error, the certificate always printed.

Beside the generator's own boards (two devices of one machine, in about 15 % of the cases with
three devices or more), a share of the cases (``--boards``, default ``BOARDS_SHARE``; drawn per
seed) puts every device on a board: two devices per ``node`` with a fast link between them
(AutoDiCE's and HiDP's boards), so that the link-group relaxations (``formulations.link_groups``)
meet several boards; those cases are named ``boards-SEED`` (``--boards 0`` gives the seeds of
the runs before session 41).

    python benchmarks/differential.py --seed 0 --count 3000 --workers 2 \\
        --out benchmarks/results/differential.md --save-failures tests/differential_corpus

A case that ever failed is kept as a spec in ``tests/differential_corpus/`` and rerun by the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations, permutations
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from milp_planner.cost.evaluator import evaluate, evaluate_stages  # noqa: E402
from milp_planner.errors import PlannerError  # noqa: E402
from milp_planner.instance.devices import layer_time  # noqa: E402
from milp_planner.instance.generate import (build_graph, build_instance, load_spec, random_spec,  # noqa: E402
                                            save_spec, with_caps, write_case)

OBJECTIVES = ("latency", "energy", "period", "memory")
EXACT = ("dp", "milp", "cpsat")
OPTIMAL_GAP = 1e-6  # docs/model.md section 6
CAP_SLACK = 1e-9  # docs/model.md section 4: a plan within a relative 1e-9 of a cap meets it
MATCH = 1e-9  # relative: two evaluator values this close are the same point
MAX_PLANS = 6000  # a case's plan space is resampled until it has at most this many plans
COLUMNS = ("latency", "energy", "period", "memory")


# -- the plan space, listed from the docs ----------------------------------------------------


def _round_half_up(p: Fraction) -> int:
    """round(p/q) = floor((2p + q) / 2q) (docs/model.md section 3)."""
    return (2 * p.numerator + p.denominator) // (2 * p.denominator)


def _speeds(inst) -> list[Fraction]:
    """1 / (each device's time for the whole model alone, overheads included)."""
    g, dt = inst.graph, inst.dtype_bytes
    out = []
    for dev in inst.devices:
        total = Fraction(0)
        for layer in g.layers:
            io_b = (sum(math.prod(g.shape(t)) for t in layer.inputs) + math.prod(layer.shape)) * dt
            total += Fraction(layer_time(dev.compute, layer, Fraction(1), io_b, layer.params * dt))
        out.append(1 / total if total > 0 else Fraction(10**18))
    return out


def _cut_vectors(inst, n: int, k: int, speeds: list[Fraction]) -> set[tuple[int, ...]]:
    found: set[tuple[int, ...]] = set()
    for family in inst.search.splits:
        if family == "equal":
            found.add(tuple(_round_half_up(Fraction(i * n, k)) for i in range(1, k)))
        elif family == "capacity":
            for devs in permutations(range(len(speeds)), k):
                total, acc, cuts = sum(speeds[d] for d in devs), Fraction(0), []
                for d in devs[:-1]:
                    acc += speeds[d]
                    cuts.append(_round_half_up(n * acc / total))
                found.add(tuple(cuts))
        else:
            g = n if family == "any" else int(family.split(":")[1])
            points = sorted({_round_half_up(Fraction(j * n, g)) for j in range(1, g)} - {0, n})
            found.update(combinations(points, k - 1))
    return {c for c in found if all(a < b for a, b in zip((0, *c), (*c, n)))}


def _extent(layer, axis: str) -> int:
    shape = layer.shape
    if axis == "rows":
        return shape[2] if len(shape) == 4 else 1
    return shape[1] if len(shape) == 4 else shape[-1]


def list_space(inst) -> dict[tuple[int, int], list[tuple]]:
    """Every stage of the space per layer range, as the evaluator's stage tuple
    ``(first, last, axis, ((device, range), ...))``, from docs/model.md section 5."""
    g, sp, n_dev = inst.graph, inst.search, len(inst.devices)
    speeds = _speeds(inst)
    kmax = min(sp.max_parts, n_dev)
    out = {}
    for first in range(len(g.layers)):
        for last in range(first, min(len(g.layers), first + sp.fusion_limit)):
            stages = [(first, last, "none", ((d, None),)) for d in range(n_dev)]
            layers = g.layers[first:last + 1]
            axes = [a for a in sp.axes if (a == "rows" and all(l.row_splittable for l in layers))
                    or (a == "channels" and first == last and layers[0].channel_splittable)]
            for axis in axes:
                n = _extent(g.layers[last], axis)
                for k in range(2, kmax + 1):
                    for cuts in sorted(_cut_vectors(inst, n, k, speeds)):
                        pts = (0, *cuts, n)
                        ranges = [(pts[i], pts[i + 1]) for i in range(k)]
                        for devs in permutations(range(n_dev), k):
                            stages.append((first, last, axis, tuple(zip(devs, ranges))))
            out[first, last] = stages
    return out


def product_space(inst) -> dict[tuple[int, int], list[tuple]]:
    """The same, from ``formulations.options.stage_options`` (what the planners search)."""
    from formulations.options import stage_options

    out = {}
    for key in list_space_keys(inst):
        out[key] = [(o.first, o.last, o.axis, tuple(zip(o.devices, o.ranges))) for o in stage_options(inst, *key)]
    return out


def list_space_keys(inst):
    n, fl = len(inst.graph.layers), inst.search.fusion_limit
    return [(b, e) for b in range(n) for e in range(b, min(n, b + fl))]


def plan_count(space, n_layers: int) -> int:
    count = [0] * n_layers + [1]
    for b in range(n_layers - 1, -1, -1):
        count[b] = sum(len(v) * count[e + 1] for (bb, e), v in space.items() if bb == b)
    return count[0]


def all_plans(space, n_layers: int):
    stack: list = []

    def rec(b):
        if b == n_layers:
            yield list(stack)
            return
        for (bb, e), stages in space.items():
            if bb != b:
                continue
            for s in stages:
                stack.append(s)
                yield from rec(e + 1)
                stack.pop()

    yield from rec(0)


def _normal(stage) -> tuple:
    first, last, axis, parts = stage
    if len(parts) == 1:
        return (first, last, "none", ((parts[0][0], None),))
    return (first, last, axis, tuple(sorted(parts, key=lambda p: p[1])))


# -- a case ------------------------------------------------------------------------------------


@dataclass
class Case:
    """A random instance, every plan of its space and their scores (``table``: one row per plan:
    latency, energy, period, largest memory, then each device's memory)."""

    spec: dict
    inst: object
    plans: list
    table: np.ndarray
    space_mismatch: str = ""

    @property
    def name(self) -> str:
        return self.spec["name"]

    def feasible(self) -> np.ndarray:
        """Which plans meet the instance's caps (docs/model.md section 4, with its 1e-9 slack)."""
        c, t = self.inst.constraints, self.table
        ok = np.ones(len(t), dtype=bool)
        if c.memory:
            for d, dev in enumerate(self.inst.devices):
                if dev.memory_bytes is not None:
                    ok &= t[:, 4 + d] <= dev.memory_bytes
        for col, cap in ((0, c.latency_s), (1, c.energy_j), (2, c.period_s)):
            if cap is not None:
                ok &= t[:, col] <= float(cap) * (1 + CAP_SLACK)
        return ok

    def optimum(self, objective: str) -> float | None:
        ok = self.feasible()
        if not ok.any():
            return None
        return float(self.table[ok, COLUMNS.index(objective)].min())

    def front(self, objectives) -> np.ndarray:
        """The non-dominated vectors of the feasible plans (one per vector, up to ``MATCH``)."""
        cols = [COLUMNS.index(o) for o in objectives]
        vec = np.unique(self.table[self.feasible()][:, cols], axis=0)
        keep = []
        for i, v in enumerate(vec):
            le = np.all(vec <= v * (1 + MATCH) + 1e-300, axis=1)
            lt = np.any(vec < v * (1 - MATCH), axis=1)
            if not np.any(le & lt) and not any(_same(v, w) for w in keep):
                keep.append(v)
        return np.array(keep).reshape(-1, len(cols))


def _same(a, b, rel: float = MATCH) -> bool:
    return bool(np.all(np.abs(np.asarray(a) - np.asarray(b)) <= rel * np.maximum(np.abs(b), 1e-300)))


def score(inst, plans) -> np.ndarray:
    n_dev = len(inst.devices)
    rows = np.empty((len(plans), 4 + n_dev))
    names = inst.device_names
    for i, plan in enumerate(plans):
        m = evaluate_stages([_as_evaluator_stage(s) for s in plan], inst)
        rows[i, :4] = (m.latency_s, m.energy_j, m.period_s, m.max_memory_bytes)
        rows[i, 4:] = [m.memory_bytes[n] for n in names]
    return rows


def _as_evaluator_stage(stage):
    first, last, axis, parts = _normal(stage)
    return (first, last, axis, list(parts))


def _caps(rng: random.Random, spec: dict, inst, table: np.ndarray) -> dict:
    """Caps drawn from the plans' own values: binding, at a plan's value, or infeasible."""
    memory, caps = {}, {}
    r = rng.random()
    if r < 0.35:
        for d, dev in enumerate(inst.devices):
            if rng.random() < 0.6:
                used = table[table[:, 4 + d] > 0, 4 + d]
                if len(used):
                    memory[dev.name] = max(1, int(np.quantile(used, rng.uniform(0.05, 0.8))))
    for col, key, scale, p in ((0, "latency_ms", 1e3, 0.2), (1, "energy_j", 1.0, 0.15), (2, "period_ms", 1e3, 0.15)):
        if rng.random() < p:
            q = np.quantile(table[:, col], rng.uniform(0.02, 0.7))
            caps[key] = q * scale if rng.random() < 0.9 else 0.5 * table[:, col].min() * scale
    if rng.random() < 0.05 and inst.devices:  # every device capped below the least memory any plan needs
        least = int(table[:, 3].min())
        memory = {dev.name: max(1, least // 2) for dev in inst.devices}
    return with_caps(spec, memory, **caps) if memory or caps else spec


BOARDS_SHARE = 0.25  # the share of the seeds whose devices are put on boards (``on_boards``)


def on_boards(spec: dict, rng: random.Random) -> dict:
    """``spec`` with its devices on boards: devices 2i and 2i+1 share the node ``board{i}`` and a
    link of 2-20 times their other links' typical speed (at least 2 parts allowed when there
    are 3 devices or more, so that a stage can use two boards)."""
    inst = spec["instance"]
    devs, bw = inst["devices"], inst["network"]["bandwidth_mbps"]
    for i, d in enumerate(devs):
        d["node"] = f"board{i // 2}"
    for i in range(len(devs)):
        for j in range(len(devs)):
            if i != j and i // 2 == j // 2:
                bw[i][j] = round(rng.uniform(2, 20), 3)
    inst["search"]["max_parts"] = max(inst["search"]["max_parts"], min(len(devs), 3))
    return spec


def make_case(seed: int, spec: dict | None = None, boards: float = BOARDS_SHARE) -> Case:
    """The case of ``seed`` (a spec resampled until its space has at most ``MAX_PLANS`` plans,
    its devices on boards for a share ``boards`` of the seeds, then capped), or of a given
    ``spec`` (the corpus)."""
    given = spec is not None
    attempt = 0
    on = not given and random.Random(f"boards:{seed}").random() < boards
    while True:
        if spec is None:
            spec = random_spec(seed * 1000 + attempt)
            if on:
                spec = on_boards(spec, random.Random(seed * 1000 + attempt))
            spec["name"] = f"{'boards' if on else 'random'}-{seed}" + (f"-{attempt}" if attempt else "")
            spec["instance"]["name"] = spec["name"]
        graph = build_graph(spec)
        inst = build_instance(spec, graph)
        space = list_space(inst)
        if given or plan_count(space, len(graph.layers)) <= MAX_PLANS:
            break
        spec, attempt = None, attempt + 1
    mismatch = _space_mismatch(inst, space)
    plans = list(all_plans(space, len(graph.layers)))
    table = score(inst, plans)
    if not given:
        spec = _caps(random.Random(seed), spec, inst, table)
        inst = build_instance(spec, graph)
    return Case(spec, inst, plans, table, mismatch)


def _space_mismatch(inst, space) -> str:
    try:
        theirs = product_space(inst)
    except Exception as err:  # noqa: BLE001 - reported as a finding
        return f"stage_options raised {type(err).__name__}: {err}"
    for key, ours in space.items():
        a, b = set(map(_normal, ours)), set(map(_normal, theirs.get(key, [])))
        if a != b:
            return (f"stages {key}: the docs' space has {len(a)} options, stage_options {len(b)} "
                    f"(e.g. only in the docs: {sorted(a - b, key=str)[:1]}, only in stage_options: "
                    f"{sorted(b - a, key=str)[:1]})")
    return ""


# -- the checks ----------------------------------------------------------------------------------


@dataclass
class Finding:
    case: str
    check: str
    what: str
    detail: str

    def to_dict(self) -> dict:
        return {"case": self.case, "check": self.check, "what": self.what, "detail": self.detail}


@dataclass
class Tally:
    cases: int = 0
    plans: int = 0
    runs: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    checked: Counter = field(default_factory=Counter)  # what was compared, counted
    findings: list = field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: "Tally") -> None:
        self.cases += other.cases
        self.plans += other.plans
        self.runs.update(other.runs)
        self.statuses.update(other.statuses)
        self.checked.update(other.checked)
        self.findings += other.findings
        self.seconds += other.seconds


def _tol(res, ref: float) -> float:
    return 1e-6 * abs(ref) + float(res.info.get("tolerance", 0.0) or 0.0)


def check_result(case: Case, res, objective: str, planner: str, where: str, limited: bool) -> list[str]:
    """What is wrong with one planner's result (empty: nothing)."""
    bad = []
    ref = case.optimum(objective)
    if res.status not in ("optimal", "feasible", "infeasible", "timeout", "error"):
        bad.append(f"unknown status {res.status!r}")
    if res.plan is not None:
        m = evaluate(res.plan, case.inst)
        if res.value is None or abs(m.value(objective) - res.value) > 1e-12 * max(abs(res.value), 1e-300):
            bad.append(f"reported value {res.value!r}, the evaluator's {m.value(objective)!r}")
        if res.status in ("optimal", "feasible", "timeout") and not m.feasible:
            bad.append(f"status {res.status} for a plan that breaks the caps: {'; '.join(m.violations)}")
        if planner in EXACT + ("bruteforce",) and not m.in_space and res.status in ("optimal", "feasible", "timeout"):
            bad.append(f"plan outside the space: {'; '.join(m.space_reasons)}")
    if ref is None:
        if res.status == "optimal" or (res.plan is not None and res.status not in ("infeasible", "error")):
            bad.append(f"no plan meets the caps, but status {res.status} with value {res.value!r}")
        if not limited and planner != "dp" and res.status != "infeasible":
            bad.append(f"no plan meets the caps: expected status infeasible, got {res.status} ({res.message})")
        return bad
    if res.status == "infeasible":
        bad.append(f"status infeasible, but a plan of value {ref!r} meets the caps ({res.message})")
    tol = _tol(res, ref)
    if res.bound is not None and res.bound > ref + tol:
        bad.append(f"bound {res.bound!r} above the optimum {ref!r}")
    if res.plan is not None and res.value is not None and res.value < ref - tol and res.status != "error":
        bad.append(f"value {res.value!r} below the optimum {ref!r} of the plans within the caps")
    if res.status == "optimal" and res.value is not None and res.value > ref + tol:
        bad.append(f"status optimal at {res.value!r}; the optimum is {ref!r}")
    gap = res.gap
    if res.status == "optimal" and (gap is None or gap > OPTIMAL_GAP):
        bad.append(f"status optimal with gap {gap!r} (bound {res.bound!r}, value {res.value!r})")
    if res.status in ("feasible", "timeout") and res.plan is not None and gap is not None and gap <= OPTIMAL_GAP \
            and planner in EXACT:
        bad.append(f"status {res.status} with gap {gap!r}: the status rule says optimal")
    if not limited and planner in EXACT + ("bruteforce",) and res.status != "optimal" and not _dp_cannot(
            case, planner, objective):
        bad.append(f"status {res.status} without a time limit on a tiny instance ({res.message})")
    return bad


def _dp_cannot(case: Case, planner: str, objective: str) -> bool:
    """``dp``'s stated limit: its min-max search for memory does not carry a period cap."""
    return planner == "dp" and objective == "memory" and case.inst.constraints.period_s is not None


def _run(tally: Tally, case: Case, planner: str, objective: str, where: str, limited: bool = False, **kw):
    from milp_planner.planners import get_planner

    options = kw.pop("options", {})
    tally.runs[where] += 1
    try:
        res = get_planner(planner, **options).solve(case.inst, objective=objective, **kw)
    except PlannerError as err:
        if limited and options.get("max_arcs") is not None:  # a clean refusal: the space exceeds max_arcs
            tally.statuses[f"{planner}:refused"] += 1
            return None
        tally.findings.append(Finding(case.name, where, f"{planner} {objective}", f"refused: {err}"))
        return None
    except Exception as err:  # noqa: BLE001 - a finding, not a crash of the bed
        tally.findings.append(Finding(case.name, where, f"{planner} {objective}",
                                      f"raised {type(err).__name__}: {err}\n{traceback.format_exc(limit=-3)}"))
        return None
    tally.statuses[f"{planner}:{res.status}"] += 1
    tally.checked["results against the brute-force optimum"] += 1
    if res.plan is not None:
        tally.checked["plans re-scored by the evaluator"] += 1
    for why in check_result(case, res, objective, planner, where, limited):
        tally.findings.append(Finding(case.name, where, f"{planner} {objective} {options or ''} {kw or ''}".strip(),
                                      why))
    return res


def check_planners(case: Case, tally: Tally, rng: random.Random) -> None:
    for objective in OBJECTIVES:
        for planner in EXACT + ("bruteforce",):
            _run(tally, case, planner, objective, "exact")
    # a random time limit and arc budget: any status, but nothing false
    planner, objective = rng.choice(EXACT), rng.choice(OBJECTIVES)
    options = {"max_arcs": rng.choice([1, 3, 10, 40, 200])} if rng.random() < 0.6 else {}
    _run(tally, case, planner, objective, "limits", limited=True, options=options,
         time_limit=round(rng.uniform(0.0, 1.0), 3) if rng.random() < 0.7 else None)


def check_front(case: Case, tally: Tally, objectives, planner: str = "milp", time_limit: float | None = None) -> None:
    from milp_planner.pareto import pareto_front

    where = f"pareto{len(objectives)}"
    what = f"{planner} {','.join(objectives)}"
    tally.runs[where] += 1
    try:
        front = pareto_front(case.inst, objectives, planner=planner, time_limit=time_limit)
    except Exception as err:  # noqa: BLE001
        tally.findings.append(Finding(case.name, where, what, f"raised {type(err).__name__}: {err}\n"
                                                              f"{traceback.format_exc(limit=-3)}"))
        return
    tally.statuses[f"{where}:{'certified' if front.certified else 'not certified'}"] += 1
    ref = case.front(objectives)
    tally.checked["front points re-scored"] += len(front.points)
    if front.certified:
        tally.checked["brute-force front vectors matched (certified fronts)"] += len(ref)
    got = []
    for p in front.points:
        m = evaluate(p.plan, case.inst)
        vec = np.array([m.value(o) for o in objectives])
        if not (m.feasible and m.in_space):
            tally.findings.append(Finding(case.name, where, what, f"point {vec.tolist()} is not a feasible plan of "
                                                                  f"the space: {m.violations + m.space_reasons}"))
        if not _same(vec, [p.values[o] for o in objectives], 1e-12):
            tally.findings.append(Finding(case.name, where, what, f"point values {p.values} but the evaluator "
                                                                  f"says {vec.tolist()}"))
        got.append(vec)
    for v, p in zip(got, front.points):
        if p.status != "optimal":  # (an unproven point of a front stopped early may be dominated)
            continue
        if not any(_same(v, r) for r in ref):
            better = [r.tolist() for r in ref if np.all(r <= v * (1 + MATCH)) and np.any(r < v * (1 - MATCH))]
            tally.findings.append(Finding(case.name, where, what, f"point {v.tolist()} is dominated by "
                                                                  f"{better[:1] or 'no plan (not a plan vector?)'}"))
    if not front.certified:
        return
    res = getattr(front, "resolution", None) or {}
    for r in ref:
        if any(_same(v, r) for v in got):
            continue
        within = any(all(v[i] - _step(res, o, v[i]) <= r[i] * (1 + MATCH) for i, o in enumerate(objectives))
                     for v in got)
        kind = "within the stated resolution" if within else "missing"
        tally.findings.append(Finding(case.name, where, what, f"certified, but the non-dominated vector "
                                                              f"{r.tolist()} is {kind} (front: "
                                                              f"{[v.tolist() for v in got]})"))


def _step(resolution: dict, objective: str, value: float) -> float:
    r = resolution.get(objective) or {}
    return float(r.get("absolute", 0.0)) + float(r.get("relative", 0.0)) * abs(value)


def check_cli(case: Case, tally: Tally, rng: random.Random, folder: Path) -> None:
    """``milp-planner solve`` with its default baselines: exit 0 or 1, never an internal error,
    and the certificate in the JSON whatever the baselines do."""
    from milp_planner.cli import main

    path = write_case(case.spec, folder)
    planner, objective = rng.choice(EXACT), rng.choice(OBJECTIVES)
    argv = ["solve", str(path), "--planner", planner, "--objective", objective, "--json", "--quiet",
            "--compare-time-limit", "2"]
    tally.runs["cli"] += 1
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    what = f"solve --planner {planner} --objective {objective}"
    if rc not in (0, 1) or "internal error" in err.getvalue():
        tally.findings.append(Finding(case.name, "cli", what, f"exit {rc}: {err.getvalue().strip()[:600]}"))
        return
    try:
        data = json.loads(out.getvalue())
    except ValueError:
        tally.findings.append(Finding(case.name, "cli", what, f"not JSON: {out.getvalue()[:300]}"))
        return
    ref = case.optimum(objective)
    tol = 0.0 if ref is None else 1e-6 * ref
    if ref is not None and data.get("status") == "optimal" and abs(data["objective"] - ref) > tol:
        tally.findings.append(Finding(case.name, "cli", what, f"status optimal at {data['objective']!r}, "
                                                              f"the optimum is {ref!r}"))
    if ref is not None and data.get("bound") is not None and data["bound"] > ref + tol:
        tally.findings.append(Finding(case.name, "cli", what, f"bound {data['bound']!r} above the optimum {ref!r}"))
    claims_plan = data.get("plan") is not None and data.get("status") in ("optimal", "feasible", "timeout")
    if ref is None and claims_plan:
        tally.findings.append(Finding(case.name, "cli", what, f"status {data['status']} with a plan where none "
                                                              "meets the caps"))
    if ref is not None and data.get("status") == "infeasible":
        tally.findings.append(Finding(case.name, "cli", what, "status infeasible where a plan meets the caps"))
    for b in data.get("baselines", []):
        if b.get("status") == "error" and "internal error" in (b.get("message") or ""):
            tally.findings.append(Finding(case.name, "cli", what, f"baseline {b['planner']}: {b['message']}"))


def run_case(seed: int | None = None, spec: dict | None = None, *, fronts: bool = True, cli: bool = True,
             boards: float = BOARDS_SHARE) -> Tally:
    """Every check on one case (``seed``, or a corpus ``spec``)."""
    started = time.perf_counter()
    tally = Tally(cases=1)
    try:
        case = make_case(seed if seed is not None else 0, spec, boards)
    except Exception as err:  # noqa: BLE001
        name = spec["name"] if spec else f"random-{seed}"
        tally.findings.append(Finding(name, "setup", "make_case", f"raised {type(err).__name__}: {err}\n"
                                                                 f"{traceback.format_exc(limit=-3)}"))
        return tally
    tally.plans = len(case.plans)
    tally.checked["plan spaces listed from the docs and by stage_options, compared"] += 1
    if case.name.startswith("boards-"):
        tally.checked["cases with their devices on boards (link groups)"] += 1
    if case.space_mismatch:
        tally.findings.append(Finding(case.name, "space", "stage_options", case.space_mismatch))
    rng = random.Random(f"{case.name}:checks")
    check_planners(case, tally, rng)
    if fronts:
        check_front(case, tally, ["latency", "energy"])
        others = [o for o in OBJECTIVES]
        rng.shuffle(others)
        check_front(case, tally, others[:2])
        if rng.random() < 0.35:
            check_front(case, tally, others[:3])
    if cli:
        with tempfile.TemporaryDirectory() as tmp:
            check_cli(case, tally, rng, Path(tmp))
    tally.seconds = time.perf_counter() - started
    for f in tally.findings:
        f.spec = case.spec  # kept for the corpus
    return tally


def _worker(job: tuple[int, float]) -> Tally:
    seed, boards = job
    return run_case(seed, boards=boards)


def run(seeds, workers: int = 1, progress=None, boards: float = BOARDS_SHARE) -> Tally:
    total = Tally()
    if workers <= 1:
        for s in seeds:
            total.add(run_case(s, boards=boards))
            if progress:
                progress(total)
        return total
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(workers, maxtasksperchild=50) as pool:
        for t in pool.imap_unordered(_worker, [(s, boards) for s in seeds]):
            total.add(t)
            if progress:
                progress(total)
    return total


def _kind(f: Finding) -> str:
    d = f.detail
    if "above the optimum" in d:
        return "bound above the optimum"
    if d.startswith("raised") or "internal error" in d or f.check == "setup":
        return "internal error"
    if f.check.startswith("pareto"):
        return "front"
    if f.check in ("exact", "limits", "cli"):
        return "wrong value or status"
    return "other"


def _machine() -> str:
    import platform

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT).stdout.strip() or "?"
    except OSError:
        return "?"


PARTIAL_EVERY = 50  # cases between two writes of the tally while the run goes


def render(tally: Tally, args) -> str:
    load = os.getloadavg()
    by_check = Counter(f.check for f in tally.findings)
    lines = [
        "# Differential test bed: every planner against brute force on random instances",
        "",
        *([f"**Partial: {tally.cases} of {args.count} cases so far** (the tally is rewritten as the run goes).", ""]
          if not args.corpus and tally.cases < args.count else []),
        f"Command: `python benchmarks/differential.py --seed {args.seed} --count {args.count} "
        f"--workers {args.workers} --boards {args.boards:g}`  ",
        f"Commit {_commit()}, {_machine()}, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, "
        f"{tally.seconds / max(1, args.workers) / 60:.1f} min of wall time per worker.",
        "",
        "What one case is and what is checked: `benchmarks/differential.py` (its docstring).",
        "",
        "| count | value |",
        "|---|---|",
        f"| cases (random instances) | {tally.cases} |",
        f"| plans enumerated and scored | {tally.plans:,} |",
    ]
    for where in ("exact", "limits", "pareto2", "pareto3", "cli"):
        lines.append(f"| runs: {where} | {tally.runs[where]:,} |")
    for what, n in sorted(tally.checked.items()):
        lines.append(f"| checked: {what} | {n:,} |")
    kinds = Counter(_kind(f) for f in tally.findings)
    for kind in ("bound above the optimum", "wrong value or status", "internal error", "front", "other"):
        lines.append(f"| findings: {kind} | {kinds[kind]} |")
    lines.append(f"| findings in all | {len(tally.findings)} |")
    for check, n in sorted(by_check.items()):
        lines.append(f"| findings in check {check} | {n} |")
    lines += ["", "Statuses:", "", "| planner:status | runs |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" for k, v in sorted(tally.statuses.items())]
    if tally.findings:
        lines += ["", "Findings (first 40):", ""]
        lines += [f"- `{f.case}` {f.check} {f.what}: {f.detail.splitlines()[0][:400]}" for f in tally.findings[:40]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--count", type=int, default=100, help="number of cases")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", help="write the Markdown tally here")
    p.add_argument("--save-failures", metavar="DIR", help="write the spec of every failing case here")
    p.add_argument("--corpus", metavar="DIR", help="run the specs of DIR instead of seeds")
    p.add_argument("--boards", type=float, default=BOARDS_SHARE,
                   help=f"share of the seeds with their devices on boards (link groups; default {BOARDS_SHARE})")
    args = p.parse_args(argv)
    started = time.perf_counter()

    shown = [0]

    def progress(t: Tally) -> None:
        for f in t.findings[shown[0]:]:  # each finding as soon as its case ends
            print(f"\nFINDING {f.case} {f.check} {f.what}: {f.detail.splitlines()[0][:500]}", file=sys.stderr)
            spec = getattr(f, "spec", None)
            if args.save_failures and spec is not None:
                Path(args.save_failures).mkdir(parents=True, exist_ok=True)
                save_spec(spec, Path(args.save_failures) / f"{spec['name']}.json")
        shown[0] = len(t.findings)
        if args.out and t.cases % PARTIAL_EVERY == 0:  # a run stopped early still leaves its tally
            Path(args.out).write_text(render(t, args))
        print(f"\r{t.cases} cases, {len(t.findings)} findings, {time.perf_counter() - started:.0f} s",
              end="", file=sys.stderr, flush=True)

    if args.corpus:
        tally = Tally()
        for path in sorted(Path(args.corpus).glob("*.json")):
            tally.add(run_case(spec=load_spec(path)))
            progress(tally)
    else:
        tally = run(range(args.seed, args.seed + args.count), args.workers, progress, args.boards)
    print(file=sys.stderr)
    text = render(tally, args)
    if args.out:
        Path(args.out).write_text(text)
    if args.save_failures:
        folder = Path(args.save_failures)
        folder.mkdir(parents=True, exist_ok=True)
        for f in tally.findings:
            spec = getattr(f, "spec", None)
            if spec is not None:
                save_spec(spec, folder / f"{spec['name']}.json")
    print(text)
    for f in tally.findings:
        print(f"{f.case} {f.check} {f.what}: {f.detail}", file=sys.stderr)
    return 1 if tally.findings else 0


if __name__ == "__main__":
    sys.exit(main())

"""``autodice``: AutoDiCE's NSGA-II over the split-point encoding.

Source: AutoDiCE, Guo et al., IEEE Internet of Things Journal 2023, Section IV-B: a GA (NSGA-II)
whose chromosome is the Split Point Encoding (SPE): N split points in the layer order, group i
(the consecutive layers between split points i and i+1) mapped on processing element i; the
objectives are system throughput (here: the period), the maximum memory per device and the
maximum energy per device (Section IV-A), here all taken from our evaluator.

Our choices:
  * one PE per device, in instance order; the first split point is fixed at 0, so a chromosome
    is N - 1 integers in [0, L] (sorted by the repair; equal points leave a device unused);
  * each group runs as one single-device stage per layer (inside every search space; a device
    never sends to itself, and per-layer stages give the smallest working sets);
  * NSGA-II from pymoo: integer random sampling, SBX crossover (probability ``crossover``,
    default 0.5 as in the paper), polynomial mutation with per-gene probability ``mutation``
    (default 0.2, the paper's value), rounding + sorting repair, duplicates eliminated;
    ``pop_size`` (default 40) and ``generations`` (default 25) are far below the paper's
    100 x 400 so that it runs in seconds; enlarge them with options. AutoDiCE's multi-stage
    hierarchical DSE (2^k PEs per stage, on-board measurements in the second level) is
    replaced by this single stage on the analytical model;
  * plans that break the memory, latency or energy constraints are constrained (pymoo's
    constraint violation), not discarded;
  * the Pareto set of every plan evaluated (feasible ones only, if any) is returned in
    ``info["pareto"]``; the plan returned is its best point for ``ctx.objective`` (ties: the
    smaller period). ``ctx.time_limit`` stops the GA after the current generation;
  * when the SPE space has no more chromosomes than pop_size x generations (tiny models or a
    single device), every chromosome is evaluated instead and the Pareto set is exact.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import evaluate_tuples, per_layer


def spe_stages(points, n_layers: int, n_dev: int) -> list:
    """Stages of the split-point chromosome ``points`` (N - 1 sorted ints; x_0 = 0 implied)."""
    pts = [0, *sorted(int(p) for p in points), n_layers]
    out = []
    for d in range(n_dev):
        a, b = pts[d], pts[d + 1]
        if a < b:
            out.extend(per_layer(a, b - 1, d))
    return out


def _violation(instance, m) -> float:
    v = 0.0
    for dev in instance.devices:
        cap = dev.memory_bytes
        if instance.constraints.memory and cap is not None and m.memory_bytes[dev.name] > cap:
            v += (m.memory_bytes[dev.name] - cap) / cap
    c = instance.constraints
    if c.latency_s is not None and m.latency_s > float(c.latency_s):
        v += m.latency_s / float(c.latency_s) - 1
    if c.energy_j is not None and m.energy_j > float(c.energy_j):
        v += m.energy_j / float(c.energy_j) - 1
    if not m.feasible and v <= 0:
        v = 1e-9
    return v


def _pareto(keys, F) -> list:
    """Indices of the non-dominated rows of F (duplicates of an earlier point dropped)."""
    keep = []
    idx = np.arange(len(keys))
    for i in range(len(keys)):
        dom = np.all(F <= F[i], axis=1) & (np.any(F < F[i], axis=1) | (idx < i))
        dom[i] = False
        if not dom.any():
            keep.append(i)
    return keep


class AutoDiCEPlanner(Planner):
    name = "autodice"
    description = "NSGA-II over split-point encodings: period, max memory and max energy per device"
    source = "AutoDiCE, Guo et al., IEEE Internet of Things Journal 2023 (NSGA-II DSE with SPE)"
    seeded = True

    option_specs = (
        Option("pop_size", int, 40, "NSGA-II population", ge=2, le=10**5),
        Option("generations", int, 25, "NSGA-II generations", ge=1, le=10**5),
        Option("crossover", float, 0.5, "SBX crossover probability", ge=0, le=1),
        Option("mutation", float, 0.2, "PM per-variable mutation probability", ge=0, le=1),
    )

    def search(self, instance, ctx: SolveContext):
        n = len(instance.graph.layers)
        n_dev = len(instance.devices)
        pop_size = int(self.options.get("pop_size", 40))
        generations = int(self.options.get("generations", 25))
        archive: dict[tuple, dict] = {}

        def score(key):
            hit = archive.get(key)
            if hit is None:
                plan, m = evaluate_tuples(instance, spe_stages(key, n, n_dev), self.name)
                hit = archive[key] = {
                    "F": (m.period_s, float(m.max_memory_bytes), max(m.energy_per_device_j.values())),
                    "G": _violation(instance, m), "plan": plan, "metrics": m}
            return hit

        gen, timed_out = 0, False
        space = math.comb(n + n_dev - 1, n_dev - 1)  # non-decreasing (N-1)-vectors over 0..L
        if space <= pop_size * generations:
            # the whole SPE space fits in the GA's budget: evaluate every chromosome
            for key in itertools.combinations_with_replacement(range(n + 1), n_dev - 1):
                if archive and ctx.time_limit is not None and ctx.elapsed() > ctx.time_limit:
                    timed_out = True
                    break
                score(key)
        else:
            from pymoo.algorithms.moo.nsga2 import NSGA2
            from pymoo.core.problem import Problem
            from pymoo.core.repair import Repair
            from pymoo.operators.crossover.sbx import SBX
            from pymoo.operators.mutation.pm import PM
            from pymoo.operators.sampling.rnd import IntegerRandomSampling

            class SortRepair(Repair):
                def _do(self, problem, X, **kwargs):
                    return np.sort(np.clip(np.round(X), 0, n), axis=1)

            class SPEProblem(Problem):
                def __init__(self):
                    super().__init__(n_var=n_dev - 1, n_obj=3, n_ieq_constr=1, xl=0, xu=n, vtype=int)

                def _evaluate(self, X, out, *args, **kwargs):
                    rows = [score(tuple(int(v) for v in np.sort(np.round(x)))) for x in X]
                    out["F"] = np.array([r["F"] for r in rows], dtype=float)
                    out["G"] = np.array([[r["G"]] for r in rows], dtype=float)

            algorithm = NSGA2(
                pop_size=pop_size,
                sampling=IntegerRandomSampling(),
                crossover=SBX(prob=float(self.options.get("crossover", 0.5)), eta=15, vtype=float),
                mutation=PM(prob=1.0, prob_var=float(self.options.get("mutation", 0.2)), eta=20, vtype=float),
                repair=SortRepair(),
                eliminate_duplicates=True,
            )
            algorithm.setup(SPEProblem(), termination=("n_gen", generations), seed=int(ctx.seed), verbose=False)
            while algorithm.has_next():
                algorithm.next()
                gen += 1
                best = min(archive.values(), key=lambda r: (r["G"] > 0, r["metrics"].value(ctx.objective)))
                ctx.report(incumbent=best["metrics"].value(ctx.objective), phase=f"generation {gen}/{generations}")
                if algorithm.has_next() and ctx.time_limit is not None and ctx.elapsed() > ctx.time_limit:
                    timed_out = True
                    break
        keys = sorted(archive)
        feas = [k for k in keys if archive[k]["G"] <= 0] or keys
        F = np.array([archive[k]["F"] for k in feas], dtype=float)
        pareto_keys = [feas[i] for i in _pareto(feas, F)]
        pareto_keys.sort(key=lambda k: archive[k]["F"])
        pareto = [{"period_s": archive[k]["F"][0], "max_memory_bytes": int(archive[k]["F"][1]),
                   "max_energy_j": archive[k]["F"][2], "split_points": [0, *k],
                   "plan": archive[k]["plan"].to_dict()} for k in pareto_keys]
        best_key = min(pareto_keys, key=lambda k: (archive[k]["metrics"].value(ctx.objective), archive[k]["F"]))
        plan = archive[best_key]["plan"]
        plan.meta["split_points"] = [0, *best_key]
        status = "timeout" if timed_out else "feasible"
        return PlanResult(self.name, status, ctx.objective, plan=plan,
                          info={"pareto": pareto, "evaluations": len(archive)})

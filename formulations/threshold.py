"""A period bound from thresholds: the layout relaxation with every overloaded option left out.

A plan's period is ``max_d load_d`` (``milp_planner.cost.evaluator``), and a device's load over
the plan is at least its load in any one stage: so a plan with period at most ``T`` has, in every
stage, every part's load (its compute plus its receive seconds, on its device) at most ``T``.
The layout relaxation (``formulations.relaxation``) prices each part of a stage option from a
class at a *relaxed load*, a floor of that part's load from every exact state of the class: its
compute on its device (in the coarse relaxation the least over its merged type) plus the least
it receives from the class. An option with a part whose relaxed load exceeds ``T`` is taken by
no plan of period ``<= T`` from that class, so with those options given an infinite floor
(``_FloorCost.threshold``), the relaxation's weighted bound ``L_w(T)`` (``weighted period
floors``, any weights ``w``) is a lower bound on the period of every plan with period ``<= T``.

A **probe** of ``T`` tries a few weightings; it is *refuted* when one gives ``L_w(T) > T``: then
no plan has period ``<= T``, and ``T`` is a proven lower bound. A probe that is not refuted
still proves ``min(T, L_w(T))`` (a plan has period above ``T``, or at least ``L_w(T)``).
``L_w(T)`` does not increase with ``T`` (a larger threshold leaves more options), so the
refuted thresholds are downward closed and ``threshold_search`` bisects between the bound
already proven (``lo``) and the incumbent's period (``hi``).

Why it helps: the unfiltered weighted bound cannot see the max. It is at most what the
cheapest plan by weighted load costs, and that plan may spread the work of a heavy layer over
all devices or keep it on the device that receives the graph input, as long as the weighted
*sum* is small; with the filter, a stage whose every option puts more than ``T`` on one part
(a large tensor received over a slow link, a large layer on one slow device) cannot be taken,
and weights on the devices the remaining options must load lift ``L_w(T)``.

The weights of a probe: the best of the previous refuted probe, or the relaxation's own
(``LayoutBounds.weights``, uniform when none), then multiplicative steps towards the devices
the relaxed plan of least weighted load loads most (as ``relaxation._weighted_period``), the
step halved after a pass without a gain, until refuted, ``passes`` passes or two misses. Each
pass costs the stage floors and the backward pass. The search stops at ``deadline``, after
``max_probes`` probes, once the probes took ``THRESHOLD_SHARE`` times the relaxation's build
(at least ``MIN_SECONDS``), or when ``lo`` and ``hi`` are within ``TOL``; a pass that runs out
of time proves nothing and ends the search with what the earlier probes proved.

>>> from formulations.threshold import threshold_period_bound        # doctest: +SKIP
>>> threshold_period_bound(lb, instance, lb.lower, incumbent_period)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from milp_planner.deadline import NEVER, Deadline
from milp_planner.cost.evaluator import Pricer, pricer
from milp_planner.instance import Instance

from formulations.relaxation import (STEP, LayoutBounds, _normalised, _orbit_mean, _path_loads, _period_pass,
                                     _priced_weights)
from formulations.symmetry import device_types

#: most thresholds probed
MAX_PROBES = 8
#: most weighted passes per probe
PROBE_PASSES = 5
#: the probes stop once they took this many times the relaxation's build (at least MIN_SECONDS)
THRESHOLD_SHARE = 2.0
MIN_SECONDS = 1.0
#: relative width of [lo, hi] below which no more probes run
TOL = 0.005


class ThresholdProbe(NamedTuple):
    """One threshold probed: whether it was refuted, the best ``L_w(T)`` over the weights tried
    (inf: every plan has a part over ``T``), those weights, the passes and the seconds."""

    threshold: float
    refuted: bool
    bound: float
    weights: tuple[float, ...]
    passes: int
    seconds: float


@dataclass
class ThresholdSearch:
    """What the threshold probes proved: ``lower``, a lower bound on every plan's period (at
    least the ``lo`` given), the probes, and why the search stopped (``stopped``)."""

    lower: float
    probes: list[ThresholdProbe] = field(default_factory=list)
    stopped: str = ""
    seconds: float = 0.0

    def info(self) -> dict:
        """For ``PlanResult.info``: the bound, the probes (threshold, refuted, bound, seconds)."""
        return {"lower": self.lower, "seconds": round(self.seconds, 3), "stopped": self.stopped,
                "probes": [{"threshold": p.threshold, "refuted": p.refuted,
                            "bound": p.bound if math.isfinite(p.bound) else "inf",
                            "passes": p.passes, "seconds": round(p.seconds, 3)} for p in self.probes]}


def filtered_period_bound(lb: LayoutBounds, instance: Instance, threshold: float, w=None,
                          pr: Pricer | None = None, deadline: Deadline = NEVER) -> float:
    """``L_w(T)``: the relaxation's bound with device weights ``w`` (None: uniform; normalised
    to sum 1) and every option with a part whose relaxed load exceeds ``threshold`` left out. A
    lower bound on the period of every plan with period at most ``threshold`` (inf: the
    relaxation leaves no such plan). Above ``threshold``: no plan has a period within it. ``lb`` is a period ``LayoutBounds`` (full or coarse) of ``instance``."""
    if lb.objective != "period":
        raise ValueError("threshold bounds are period bounds")
    pr = pr or pricer(instance)
    w = np.full(len(instance.devices), 1.0) if w is None else w
    cost = lb._cost
    cost.threshold = float(threshold)
    try:
        return _period_pass(lb, cost, pr, w, lb._collapsed, max(1, instance.search.fusion_limit), deadline,
                            lb._coarse)[0]
    finally:
        cost.threshold = None


def threshold_period_bound(lb: LayoutBounds, instance: Instance, lo: float, hi: float,
                           deadline: Deadline = NEVER, **options) -> float:
    """A lower bound on the period of every plan of the space, at least ``lo``: the largest
    threshold in ``[lo, hi]`` the filtered relaxation refutes (see the module). ``lb`` is a
    period ``LayoutBounds`` (full or coarse) of ``instance``; ``lo`` a bound already proven
    (``lb.lower``), ``hi`` the period of a plan (the incumbent); ``deadline`` a ``Deadline``.
    ``options``: those of ``threshold_search``."""
    return threshold_search(lb, instance, lo, hi, deadline, **options).lower


def threshold_search(lb: LayoutBounds, instance: Instance, lo: float, hi: float, deadline: Deadline = NEVER,
                     pr: Pricer | None = None, max_probes: int = MAX_PROBES, passes: int = PROBE_PASSES,
                     seconds: float | None = None) -> ThresholdSearch:
    """Bisect ``[lo, hi]`` for the largest refuted threshold (see the module). ``seconds``: the
    probes' share of the time (default ``THRESHOLD_SHARE`` x the relaxation's build, at least
    ``MIN_SECONDS``). Never raises on the deadline: it returns what it proved by then."""
    if lb.objective != "period":
        raise ValueError("threshold bounds are period bounds")
    began = time.perf_counter()
    share = max(MIN_SECONDS, THRESHOLD_SHARE * lb.build_time_s) if seconds is None else seconds
    stop_at = deadline.within(share)
    out = ThresholdSearch(float(lo))
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo or lb._cost is None:
        out.stopped = "nothing to probe"
        return out
    pr = pr or pricer(instance)
    orbits = device_types(instance, True).orbits
    n_dev = len(instance.devices)
    start = np.full(n_dev, 1.0 / n_dev) if lb.weights is None else _normalised(lb.weights)
    lo_t, hi_t = float(lo), float(hi)
    last = max((p.seconds for p in lb.passes), default=None)  # seconds of the last pass (a weighted one's)
    while len(out.probes) < max_probes:
        if hi_t - lo_t <= TOL * hi_t:
            out.stopped = "converged"
            break
        T = lo_t + (hi_t - lo_t) / 2
        t0 = time.perf_counter()
        probe = _probe(lb, instance, pr, T, start, orbits, passes, stop_at, last)
        if probe is None:
            out.stopped = "time"
            break
        (refuted, bound, w, n_passes, last) = probe
        out.probes.append(ThresholdProbe(T, refuted, bound, tuple(float(x) for x in w), n_passes,
                                         time.perf_counter() - t0))
        if refuted:
            lo_t, start = T, w
            out.lower = max(out.lower, T)
        else:
            hi_t = T
            out.lower = max(out.lower, min(T, bound))
    else:
        out.stopped = "probes"
    out.seconds = time.perf_counter() - began
    return out


def _probe(lb: LayoutBounds, instance: Instance, pr: Pricer, T: float, start: np.ndarray, orbits, passes: int,
           stop_at: Deadline, last: float | None):
    """(refuted, best bound, its weights, passes, seconds of the last pass) of threshold ``T``,
    or None when not one pass fit before ``stop_at`` (or ran out of time)."""
    cost = lb._cost
    fl = max(1, instance.search.fusion_limit)
    collapsed = lb._collapsed
    best = None  # (bound, weights, to go, floors)
    w, step, misses, n = start, STEP, 0, 0
    while n < passes:
        now = time.perf_counter()
        if last is not None and last > stop_at.left():
            break
        cost.threshold = T
        try:
            bound, to_go, floors = _period_pass(lb, cost, pr, w, collapsed, fl, stop_at, lb._coarse)
        except TimeoutError:
            break
        finally:
            cost.threshold = None
        n, last = n + 1, time.perf_counter() - now
        if best is None or bound > best[0]:
            best, misses = (bound, w, to_go, floors), 0
        else:
            step, misses = step / 2, misses + 1
        if best[0] > T or not math.isfinite(best[0]) or misses == 2 or len(orbits) <= 1:
            break
        loads = _loads(lb, cost, pr, best[1], best[2], best[3], T, collapsed, fl)
        top = float(loads.max())
        if top <= 0:
            break
        w = _orbit_mean(orbits, best[1] * np.exp(step * loads / top))
    if best is None:
        return None
    return best[0] > T, best[0], best[1], n, last


def _loads(lb, cost, pr, w, to_go, floors, T, collapsed, fl) -> np.ndarray:
    """Per device, the relaxed loads of the filtered relaxation's plan under weights ``w``."""
    cost.weights, cost.raw_weights, cost.threshold = _priced_weights(lb, w), _normalised(w), T
    try:
        return _path_loads(lb, cost, pr, floors, to_go, collapsed, fl)
    finally:
        cost.weights = cost.raw_weights = cost.threshold = None

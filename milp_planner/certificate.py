"""The one rule that turns what a planner proved into a certificate (docs/model.md section 6).

Every planner's result goes through ``certify``: status, proven bound and the bound's source
follow from the plan's value, whether it meets the caps, the proofs (proven lower bounds with
their sources), whether the time limit stopped the search, and whether the space was proven to
hold no plan within the caps. Nothing else decides a status.

>>> certify(10.0, True, [Proof(9.0, "rounds"), Proof(9.99999999, "flow")])
Certificate(status='optimal', bound=9.99999999, bound_source='flow')
>>> certify(10.0, True, [Proof(9.0, "rounds")], stopped=True)
Certificate(status='timeout', bound=9.0, bound_source='rounds')
>>> certify(None, None, [Proof(9.0, "rounds")])
Certificate(status='error', bound=9.0, bound_source='rounds')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

#: a plan that meets the caps with a proven relative gap of at most this is ``optimal``
OPTIMAL_GAP = 1e-6
STATUSES = ("optimal", "feasible", "infeasible", "timeout", "error")


@dataclass(frozen=True)
class Proof:
    """A proven lower bound on the objective over the plans of the space that meet the caps,
    and what proved it (``rounds``, ``certified``, ``coarse``, a floor's name, ``enumeration``,
    ``lp-relaxation``, ...)."""

    value: float
    source: str


@dataclass(frozen=True)
class Certificate:
    """What a result may claim: its status, its proven bound and the bound's source."""

    status: str
    bound: float | None
    bound_source: str


def relative_gap(value: float | None, bound: float | None) -> float | None:
    """(value - bound) / |value|, never below 0; None without both; 0 for a value of 0."""
    if value is None or bound is None:
        return None
    if value == 0:
        return 0.0
    return max(0.0, (value - bound) / abs(value))


def best_proof(proofs: Iterable[Proof | None]) -> Proof | None:
    """The largest finite proof (the first of equal ones), or None."""
    best = None
    for p in proofs:
        if p is None or p.value is None or not math.isfinite(p.value):
            continue
        if best is None or p.value > best.value:
            best = p
    return best


def certify(value: float | None, feasible: bool | None, proofs: Iterable[Proof | None] = (), *,
            stopped: bool = False, infeasible: bool = False, exact: bool = True) -> Certificate:
    """The status and bound a result may claim, from facts alone:

    - ``infeasible``: proven that no plan of the space meets the caps (no plan, no bound);
    - no plan (``value`` None): ``timeout`` when the time limit ``stopped`` the search, else
      ``error``; the best proof stays the bound;
    - a plan that breaks the caps (``feasible`` False): ``error`` for an exact planner (its
      solver's tolerance let it through), ``infeasible`` for a heuristic; the bound stays
      (it holds for the plans within the caps);
    - a plan within the caps: the bound is the best proof, never above the plan's value;
      ``optimal`` when the gap is at most ``OPTIMAL_GAP``, else ``timeout`` when stopped, else
      ``feasible``.
    """
    if infeasible:
        return Certificate("infeasible", None, "none")
    best = best_proof(proofs)
    bound, source = (best.value, best.source) if best is not None else (None, "none")
    if value is None:
        return Certificate("timeout" if stopped else "error", bound, source)
    if not feasible:
        return Certificate("error" if exact else "infeasible", bound, source)
    if bound is not None:
        bound = min(bound, value)
    gap = relative_gap(value, bound)
    if gap is not None and gap <= OPTIMAL_GAP:
        return Certificate("optimal", bound, source)
    return Certificate("timeout" if stopped else "feasible", bound, source)

"""The tolerances the exact models share, each named once.

A plan's cost is summed by the evaluator in one order and by a model, a label search or a
vectorised floor in another, so two sums of the same plan can differ in the last bits. A
cutoff at a value is widened (``loose``) so that it never drops a plan worth exactly that
value, and a floor used to prune is lowered (``FLOOR_MARGIN``) so that it never exceeds the
evaluator's sum. Both only keep more plans than needed; neither can make a bound wrong.

>>> loose(1.0) > 1.0 and loose(0.0) > 0.0
True
"""

from __future__ import annotations

CUTOFF_REL = 1e-9  # relative widening of a cutoff (the evaluator's cap slack is the same)
CUTOFF_ABS = 1e-12  # absolute widening, for a cutoff at 0
FLOOR_MARGIN = 1e-9  # relative: a vectorised floor is lowered by this before it prunes
STRICTLY_BETTER = 1e-9  # relative: a plan replaces another only when better by more than rounding


def loose(v: float) -> float:
    """``v`` widened by the tolerance every cutoff comparison uses."""
    return v * (1 + CUTOFF_REL) + CUTOFF_ABS

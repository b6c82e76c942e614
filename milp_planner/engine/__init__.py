"""The exact engine: what runs the formulations of ``formulations`` over an instance in time.

The exact planners (``dp``, ``milp``, ``cpsat``: ``milp_planner.planners.exact``) run one
pipeline (docs/exact.md): the anytime start (``milp_planner.planners.anytime_start``), the
sub-fleet ladder (``milp_planner.planners.subfleet``), the polish of the start's layouts
(``polish``), then the rounds (``rounds``), then, when they stopped early, the improvement
loop over restricted spaces (``restricted``), and the certificate (``milp_planner.certificate``).

- ``rounds.explore``: the rounds by upper bound over the whole space, each round's graph
  built by ``formulations.stagegraph`` and solved by a driver; ``course.Course``: where the
  next round goes (a small state machine, its transitions tested one by one);
- ``drivers.solve_dp`` / ``solve_highs`` / ``solve_cpsat``: one stage graph solved into a
  ``formulations.certificate.GraphSolve`` by the DP, the MILP with HiGHS, or CP-SAT;
- ``restricted``: exact and beam searches over restricted spaces; ``polish``: the best
  combination of the start's stage layouts; ``memory_search``: the memory objective's start.

Layering: this package imports ``formulations`` and the layers below it (instance, cost,
deadline), never the planners, the reports, the command line or deployment
(``tests/test_layering.py``).

>>> from milp_planner.engine import explore, RoundSettings, solve_dp
>>> RoundSettings().round_budget
60000
"""

from __future__ import annotations

from milp_planner.lazy import lazy_names

#: each submodule and the public names it gives this package
_HOMES = {
    "rounds": ("explore", "graph_answer"),
    "course": ("Course", "Mode", "RoundSettings", "Step"),
    "drivers": ("solve_dp", "solve_highs", "solve_cpsat"),
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())

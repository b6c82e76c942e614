"""Exact formulations of the plan space, importable by research code.

- ``build_stage_graph(instance)``: the plan space as a layered DAG of stage options
  (``stagegraph``), priced by the evaluator's own code;
- ``shortest_path(sg, objective)``: the dynamic program (``dp``);
- ``capped_shortest_path(sg, objective, caps)`` and ``lagrangian_fixing``: the exact search and
  the Lagrangian bounds with memory caps (``caps``);
- ``minmax_search(sg, "period" | "memory")``: the exact min-max label search with threshold
  probes (``minmax``);
- ``build_milp(sg, objective)``: a Pyomo ``ConcreteModel`` (``milp``), HiGHS by default;
- ``build_cpsat(sg, objective)``: an OR-Tools ``CpModel`` with handles (``cpsat``);
- ``sg.plan_from_arcs(arcs)``: a solved model back into a ``Plan``;
- ``dp_warm_start`` and ``WarmStart``: the DP's plan and bound that start every solver, and the
  arc fixing it allows (``warmstart``);
- ``GraphSolve``, ``Exploration``: what a solve of one graph and the rounds over the whole
  space proved (``certificate``); ``explain_infeasible`` (``diagnosis``);
- ``ParetoFront``, ``ParetoPoint``, ``lower_bound_set``: a Pareto front's points and the lower
  bound set its ε-steps prove (``pareto``; the ε-constraint loop over the planners that computes
  the front is ``milp_planner.pareto.pareto_front``).

What runs these over an instance in time (the rounds by upper bound, one graph's solve by the DP,
HiGHS or CP-SAT, the searches over restricted spaces) is the exact engine,
``milp_planner.engine``; the planners ``dp``, ``milp``, ``cpsat`` drive it.

The names resolve on first use (PEP 562), so ``import formulations`` loads neither Pyomo nor
OR-Tools; ``from formulations import build_milp`` imports ``formulations.milp`` then.
"""

from __future__ import annotations

from milp_planner.lazy import lazy_names

#: each submodule and the public names it gives this package
_HOMES = {
    "stagegraph": ("Arc", "StageGraph", "StageOption", "build_stage_graph", "stage_options"),
    "dp": ("shortest_path", "prefix_suffix"),
    "caps": ("capped_shortest_path", "lagrangian_fixing", "CappedPath", "Fixing"),
    "milp": ("build_milp", "solution_arcs"),
    "cpsat": ("build_cpsat", "CpsatModel"),
    "warmstart": ("WarmStart", "dp_warm_start"),
    "certificate": ("GraphSolve", "Exploration"),
    "diagnosis": ("explain_infeasible",),
    "pareto": ("ParetoFront", "ParetoPoint", "lower_bound_set"),
    "minmax": ("MinMaxResult", "minmax_search"),
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())

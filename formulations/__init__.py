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
- ``solve_dp``, ``solve_highs``, ``solve_cpsat``: one stage graph solved into a ``GraphSolve``
  (``drivers``); ``explore``: the rounds by upper bound over the whole space (``rounds``);
  ``GraphSolve``, ``Exploration``: what was proven (``certificate``); ``explain_infeasible``
  (``diagnosis``);
- ``ParetoFront``, ``ParetoPoint``, ``lower_bound_set``: a Pareto front's points and the lower
  bound set its ε-steps prove (``pareto``; the ε-constraint loop over the planners that computes
  the front is ``milp_planner.pareto.pareto_front``).
"""

from formulations.caps import CappedPath, Fixing, capped_shortest_path, lagrangian_fixing
from formulations.cpsat import CpsatModel, build_cpsat
from formulations.minmax import MinMaxResult, minmax_search
from formulations.dp import prefix_suffix, shortest_path
from formulations.milp import build_milp, solution_arcs
from formulations.stagegraph import Arc, StageGraph, StageOption, build_stage_graph, stage_options
from formulations.certificate import Exploration, GraphSolve
from formulations.warmstart import WarmStart, dp_warm_start
from formulations.drivers import solve_cpsat, solve_dp, solve_highs
from formulations.rounds import RoundSettings, explore
from formulations.diagnosis import explain_infeasible
from formulations.pareto import ParetoFront, ParetoPoint, lower_bound_set

__all__ = ["Arc", "StageGraph", "StageOption", "build_stage_graph", "stage_options", "shortest_path",
           "prefix_suffix", "capped_shortest_path", "lagrangian_fixing", "CappedPath", "Fixing", "build_milp", "solution_arcs", "build_cpsat", "CpsatModel",
           "WarmStart", "dp_warm_start", "GraphSolve", "Exploration", "solve_dp", "solve_highs", "solve_cpsat",
           "RoundSettings", "explore", "explain_infeasible",
           "ParetoFront", "ParetoPoint", "lower_bound_set", "MinMaxResult", "minmax_search"]

"""The ``pareto`` subcommand. ``add_pareto_parser(subparsers)`` registers it (wired in milp_planner.cli)."""

from __future__ import annotations

import argparse

from milp_planner.cli_args import TIME_LIMIT, integer
from milp_planner.errors import PlannerError


def _objectives(text: str) -> list[str]:
    return [o.strip() for o in text.split(",") if o.strip()]


def _reference(text: str) -> list[float]:
    import math

    try:
        ref = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not comma-separated numbers") from None
    if not all(math.isfinite(x) and x > 0 for x in ref):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be finite and > 0")
    return ref


def cmd_pareto(args) -> int:
    from formulations.pareto import check_objectives
    from milp_planner.instance import load_instance
    from milp_planner.instance.reader import resolve_instance_path
    from milp_planner.io import OutputDir, dumps_json
    from milp_planner.pareto import pareto_front
    from milp_planner.planners import get_planner, planner_class
    from milp_planner.report.pareto import render_front, write_front

    from milp_planner.planners.base import parse_option_text

    objectives = check_objectives(args.objectives)
    if not planner_class(args.planner).exact or args.planner == "dp":
        raise PlannerError(f"--planner: {args.planner!r} does not honour every cap with a proof; use milp, cpsat or bruteforce")
    options = {}
    for kv in args.option or []:
        if "=" not in kv:
            raise PlannerError(f"--option {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        options[k.strip()] = parse_option_text(v)
    get_planner(args.planner, **options)  # the planner and its options checked before any work
    inputs = [resolve_instance_path(args.instance)]
    if args.out:
        OutputDir(args.out, "pareto", inputs).check()  # new, empty or a front written before; no input in it
    inst = load_instance(args.instance)
    front = pareto_front(inst, objectives, planner=args.planner, time_limit=args.time_limit,
                         max_points=args.points, reference=args.reference, planner_options=options,
                         lexicographic=args.lexicographic)
    if args.out:
        paths = write_front(front, args.out, inputs + [p for p in _profile_files(inst)])
    if args.json:
        import sys

        sys.stdout.write(dumps_json(front.to_dict()) + "\n")
    else:
        render_front(front)
        if args.out:
            print("wrote " + ", ".join(str(p) for p in paths))
    return 0 if front.points else 1


def _profile_files(inst) -> list:
    from milp_planner.report.tasks import profile_files

    return profile_files(inst)


def add_pareto_parser(sub) -> None:
    """Register ``pareto`` on an argparse subparsers object."""
    s = sub.add_parser("pareto", help="the Pareto front over 2 or 3 objectives (ε-constraint over an exact planner)")
    s.add_argument("instance")
    s.add_argument("--objectives", type=_objectives, default=["latency", "energy"],
                   help="2 or 3 of latency, energy, memory, period, comma-separated (default latency,energy)")
    s.add_argument("--points", type=integer(1, 100_000), default=None, help="stop after N points")
    s.add_argument("--time-limit", type=TIME_LIMIT, default=None,
                   help="seconds for the whole front (the points found by then are returned, with bounds)")
    s.add_argument("--planner", default="milp", help="the exact planner of each step: milp (default), cpsat or bruteforce")
    s.add_argument("--reference", type=_reference, default=None,
                   help="hypervolume reference point in SI units (s, J, bytes), comma-separated "
                        "(default: the nadir of the points x 1.1)")
    s.add_argument("--lexicographic", choices=("auto", "steps", "lazy"), default="auto",
                   help="how a point is shown non-dominated: a lexicographic step after each ε-step (steps), "
                        "the next ε-step (lazy, two objectives), or lazy when the second objective is "
                        "period or memory (auto, the default)")
    s.add_argument("--option", "-O", action="append", metavar="KEY=VALUE",
                   help="option of the ε-steps' planner, e.g. memory_budget=8GB (repeatable; "
                        "`milp-planner planners` lists them)")
    s.add_argument("--out", help="a folder for front.csv, front.json and front.png (new, empty, or one "
                                 "pareto wrote before; replaced whole)")
    s.add_argument("--json", action="store_true", help="print the front as JSON")
    s.set_defaults(func=cmd_pareto)

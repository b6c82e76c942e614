"""Command line: ``milp-planner COMMAND ...``.

Every user error is a ``PlannerError`` (or an OS error on a named file) and is printed as one
line on stderr with exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from milp_planner import __version__
from milp_planner.errors import PlannerError


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--input-shape: {text!r} is not like N,C,H,W") from None
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"--input-shape: {text!r} must be positive integers")
    return dims


def _print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=1) + "\n")


# -- commands ----------------------------------------------------------------------------


def cmd_inspect(args) -> int:
    from milp_planner.model.inspection import inspect_json, render_inspect
    from milp_planner.instance import load_graph_or_instance
    from milp_planner.model.onnx_import import ModelWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)  # the table lists them once
        graph, dtype_bytes = load_graph_or_instance(args.target, input_shape=args.input_shape)
    if args.json:
        _print_json(inspect_json(graph, dtype_bytes))
    else:
        render_inspect(graph, dtype_bytes)
    return 0


def cmd_zoo(args) -> int:
    from milp_planner.model import zoo

    if args.zoo_cmd == "list" or args.zoo_cmd is None:
        for name in zoo.names():
            print(name)
        return 0
    zoo.export(args.name, args.out, size=args.size, seed=args.seed)
    print(f"wrote {args.out}")
    return 0


def _load_instance(args):
    from milp_planner.instance import load_instance

    return load_instance(args.instance, input_shape=getattr(args, "input_shape", None))


def cmd_evaluate(args) -> int:
    from milp_planner.cost.evaluator import evaluate
    from milp_planner.space.plan import Plan
    from milp_planner.report.terminal import render_metrics

    inst = _load_instance(args)
    plan = Plan.load(args.plan)
    metrics = evaluate(plan, inst)
    if args.json:
        _print_json(metrics.to_dict())
    else:
        render_metrics(metrics, inst)
    return 0 if metrics.feasible else 1


def cmd_show(args) -> int:
    from milp_planner.cost.evaluator import evaluate
    from milp_planner.instance import load_instance
    from milp_planner.space.plan import Plan
    from milp_planner.report.terminal import render_plan

    inst = load_instance(args.instance)
    plan = Plan.load(args.plan)
    render_plan(plan, inst, evaluate(plan, inst))
    return 0


def cmd_planners(args) -> int:
    from milp_planner.planners import planner_class, planner_names

    rows = []
    for name in planner_names():
        cls = planner_class(name)
        rows.append({"name": name, "description": cls.description, "source": cls.source,
                     "exact": cls.exact, "seeded": cls.seeded})
    if args.json:
        _print_json(rows)
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(title="planners")
        for col in ("name", "kind", "description", "source"):
            t.add_column(col, overflow="fold")
        for r in rows:
            t.add_row(r["name"], "exact" if r["exact"] else ("seeded" if r["seeded"] else "heuristic"),
                      r["description"], r["source"])
        Console().print(t)
    return 0


def cmd_solve(args) -> int:
    from milp_planner.planners import get_planner
    from milp_planner.report.terminal import progress_printer, render_result

    inst = _load_instance(args)
    options = {}
    for kv in args.option or []:
        if "=" not in kv:
            raise PlannerError(f"--option {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        try:
            options[k] = json.loads(v)
        except json.JSONDecodeError:
            options[k] = v
    planner = get_planner(args.planner, **options)
    objective = args.objective or inst.objective
    with progress_printer(enabled=not args.quiet and not args.json) as progress:
        result = planner.solve(inst, objective=objective, time_limit=args.time_limit,
                               threads=args.threads, seed=args.seed, progress=progress)
    if args.out and result.plan is not None:
        result.plan.save(args.out)
    if args.json:
        _print_json(result.to_dict())
    else:
        render_result(result, inst)
        if args.out and result.plan is not None:
            print(f"plan written to {args.out}")
    return 0 if result.status in ("optimal", "feasible", "timeout") and result.plan is not None else 1


def _add_report(sub):
    from milp_planner.report.cli import add_report_parser

    add_report_parser(sub)


# extra subcommands: name -> function(subparsers) that registers one
COMMANDS = {"report": _add_report}
COMMANDS["deploy"] = __import__("milp_planner.deploy.cli", fromlist=["cli"]).add_deploy_parsers  # deploy, run
COMMANDS["profile"] = __import__("milp_planner.deploy.profile_cli", fromlist=["_"]).add_profile_parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="milp-planner",
        description="Plan, and certify, how one neural network runs across several edge devices.",
    )
    p.add_argument("--version", action="version", version=f"milp-planner {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("inspect", help="layers of a model or an instance's model, with MACs and params")
    s.add_argument("target", help="an .onnx file, zoo:NAME[:SIZE], or an instance file")
    s.add_argument("--input-shape", type=_shape, help="fix symbolic input dims, e.g. 1,3,224,224")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("zoo", help="list the built-in models or write one as an .onnx file")
    zs = s.add_subparsers(dest="zoo_cmd")
    zs.add_parser("list", help="names of the built-in models")
    e = zs.add_parser("export", help="write a zoo model with deterministic random weights")
    e.add_argument("name")
    e.add_argument("out")
    e.add_argument("--size", type=int, default=None, help="input height and width")
    e.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_zoo)

    s = sub.add_parser("evaluate", help="every cost of a plan on an instance")
    s.add_argument("instance")
    s.add_argument("plan")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("show", help="which device computes which rows of which layer, stage by stage")
    s.add_argument("plan")
    s.add_argument("--instance", required=True)
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("planners", help="list the planners")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_planners)

    s = sub.add_parser("solve", help="plan an instance with one planner")
    s.add_argument("instance")
    s.add_argument("--planner", default="milp", help="planner name (see `milp-planner planners`)")
    s.add_argument("--objective", choices=["latency", "energy", "period", "memory"])
    s.add_argument("--time-limit", type=float, default=None, help="seconds")
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--option", "-O", action="append", metavar="KEY=VALUE", help="planner option")
    s.add_argument("--input-shape", type=_shape)
    s.add_argument("--out", help="write the plan as JSON")
    s.add_argument("--json", action="store_true")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress")
    s.set_defaults(func=cmd_solve)

    for register in COMMANDS.values():
        register(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            return args.func(args) or 0
    except PlannerError as e:
        print(f"milp-planner: error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"milp-planner: error: {e.filename}: no such file", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("milp-planner: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0

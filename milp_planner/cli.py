"""Command line: ``milp-planner COMMAND ...``.

Every user error is a ``PlannerError`` (or an OS error on a named file) and is printed as one
line on stderr with exit status 2, never a traceback. Values are checked before any work
(time limit finite and > 0, threads >= 1, seed >= 0, planner options against the planner's
declaration, ``--out`` writable and not an input file). Any other exception is printed as one
``internal error`` line (exit 2); ``MILP_PLANNER_DEBUG=1`` shows its traceback. A closed stdout
or a broken pipe ends the command quietly with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from milp_planner import __version__
from milp_planner.cli_args import Parser, SEED, THREADS, TIME_LIMIT, input_shapes, integer, named_shape
from milp_planner.errors import PlannerError






def _print_json(obj) -> None:
    from milp_planner.io import dumps_json

    sys.stdout.write(dumps_json(obj) + "\n")


# -- commands ----------------------------------------------------------------------------


def cmd_inspect(args) -> int:
    from milp_planner.model.inspection import inspect_json, render_inspect
    from milp_planner.instance import load_graph_or_instance
    from milp_planner.model.onnx import ModelWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)  # the table lists them once
        graph, dtype_bytes = load_graph_or_instance(args.target, input_shape=_input_shapes(args))
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
    from milp_planner.io import check_output_file, printable

    check_output_file(args.out, option="out")  # a regular file or nothing: never a device, FIFO or link
    zoo.export(args.name, args.out, size=args.size, seed=args.seed)
    print(f"wrote {printable(args.out)}")
    return 0


def _load_instance(args):
    from milp_planner.instance import load_instance

    return load_instance(args.instance, input_shape=_input_shapes(args))


def _input_shapes(args):
    """``--input-shape`` (repeated: once per input) as the importer's mapping, or None."""
    return input_shapes(getattr(args, "input_shape", None))


def cmd_evaluate(args) -> int:
    from milp_planner.cost.evaluator import evaluate
    from milp_planner.space.plan import Plan
    from milp_planner.report.terminal import render_metrics

    if args.trace:
        from milp_planner.io import check_output_path

        check_output_path(args.trace, option="--trace")
    inst = _load_instance(args)
    plan = Plan.load(args.plan)
    metrics = evaluate(plan, inst)
    if args.trace:
        from milp_planner.trace import predicted_events, schedule_from_metrics, trace_document, write_trace

        write_trace(args.trace, trace_document(predicted_events(schedule_from_metrics(metrics, inst))))
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
                     "exact": cls.exact, "seeded": cls.seeded,
                     "options": [{"name": o.name, "type": o.type.__name__, "default": o.default,
                                  "help": o.help, "accepts": o.describe()} for o in cls.option_specs]})
    if args.json:
        _print_json(rows)
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(title="planners")
        from rich.markup import escape

        for col in ("name", "kind", "description", "options (-O key=value; default)", "source"):
            t.add_column(col, overflow="fold")
        for r in rows:
            opts = ", ".join(o["accepts"] for o in r["options"]) or "-"
            t.add_row(r["name"], "exact" if r["exact"] else ("seeded" if r["seeded"] else "heuristic"),
                      r["description"], escape(opts), r["source"])
        Console().print(t)
    return 0


def cmd_solve(args) -> int:
    from milp_planner.planners import get_planner
    from milp_planner.report.baselines import DEFAULT_BASELINE_TIME_LIMIT, parse_baselines, run_baselines
    from milp_planner.report.terminal import bound_source, progress_printer, render_result

    from milp_planner.instance.reader import resolve_instance_path
    from milp_planner.io import check_output_path
    from milp_planner.planners.base import parse_option_text

    options = {}
    for kv in args.option or []:
        if "=" not in kv or not kv.split("=", 1)[0]:
            raise PlannerError(f"--option {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        options[k] = parse_option_text(v)
    planner = get_planner(args.planner, **options)  # options checked before any work
    compare = parse_baselines(args.compare, args.planner)
    compare_limit = args.compare_time_limit
    if compare_limit is None:  # by default the comparison takes at most the solve's own limit
        compare_limit = DEFAULT_BASELINE_TIME_LIMIT
        if args.time_limit is not None and compare:
            compare_limit = min(compare_limit, max(0.5, args.time_limit / len(compare)))
    if args.out:
        check_output_path(args.out, inputs=[resolve_instance_path(args.instance)])
    inst = _load_instance(args)
    if args.out:  # nor the model or a device profile it reads
        from milp_planner.report.tasks import input_files

        check_output_path(args.out, inputs=input_files(inst))
    objective = args.objective or inst.objective
    with progress_printer(enabled=not args.quiet and not args.json) as progress:
        result = planner.solve(inst, objective=objective, time_limit=args.time_limit,
                               threads=args.threads, seed=args.seed, progress=progress)
    if args.out and result.plan is not None:
        result.plan.save(args.out)
    baselines, compare_error = [], ""
    if compare:
        def announce(name):
            if not args.quiet and not args.json:
                print(f"comparing with {name} ...", file=sys.stderr, flush=True)

        exact = planner.exact and result.plan is not None
        try:
            baselines = run_baselines(inst, compare, result.value if result.plan is not None else None, objective,
                                      time_limit=compare_limit, threads=args.threads, seed=args.seed,
                                      progress=announce, bound=result.bound if exact else None,
                                      certified=exact and result.status == "optimal",
                                      exact_planner=args.planner if planner.exact else None,
                                      budget_s=compare_limit * len(compare))
        except Exception as err:  # noqa: BLE001 - the comparison never costs the certificate
            if os.environ.get("MILP_PLANNER_DEBUG", "") not in ("", "0"):
                raise
            compare_error = f"internal error in the comparison: {type(err).__name__}: {_one_line(err)[:300]}"
            print(f"milp-planner: {compare_error} (the certificate is printed all the same; please report it)", file=sys.stderr)
    if args.json:
        out = result.to_dict()
        out["bound_source"] = bound_source(result)
        if compare:
            out["baselines"] = [b.to_dict() for b in baselines]
            if compare_error:
                out["baselines_error"] = compare_error
        _print_json(out)
    else:
        render_result(result, inst, baselines, detail=args.detail, baseline_time_limit=compare_limit)
        if args.out and result.plan is not None:
            print(f"plan written to {args.out}")
    return 0 if result.status in ("optimal", "feasible", "timeout") and result.plan is not None else 1


def _add_report(sub):
    from milp_planner.report.cli import add_report_parser

    add_report_parser(sub)


def _add_deploy(sub):
    from milp_planner.deploy.cli import add_deploy_parsers

    add_deploy_parsers(sub)  # deploy, run


def _add_profile(sub):
    from milp_planner.deploy.profile_cli import add_profile_parser

    add_profile_parser(sub)


def _add_pareto(sub):
    from milp_planner.report.pareto_cli import add_pareto_parser

    add_pareto_parser(sub)


# extra subcommands: name -> function(subparsers) that registers them
COMMANDS = {"report": _add_report, "deploy": _add_deploy, "profile": _add_profile, "pareto": _add_pareto}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="milp-planner",
        description="Plan, and certify, how one neural network runs across several edge devices.",
    )
    p.add_argument("--version", action="version", version=f"milp-planner {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("inspect", help="layers of a model or an instance's model, with MACs and params")
    s.add_argument("target", help="an .onnx file, zoo:NAME[:SIZE], or an instance file")
    s.add_argument("--input-shape", type=named_shape, action="append", metavar="[NAME=]SHAPE",
                   help="fix symbolic input dims, e.g. 1,3,224,224 (the first input) or state=2,1,128; "
                        "once per input")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("zoo", help="list the built-in models or write one as an .onnx file")
    zs = s.add_subparsers(dest="zoo_cmd")
    zs.add_parser("list", help="names of the built-in models")
    e = zs.add_parser("export", help="write a zoo model with deterministic random weights")
    e.add_argument("name")
    e.add_argument("out")
    e.add_argument("--size", type=integer(1, 1 << 16), default=None, help="input height and width")
    e.add_argument("--seed", type=SEED, default=0)
    s.set_defaults(func=cmd_zoo)

    s = sub.add_parser("evaluate", help="every cost of a plan on an instance")
    s.add_argument("instance")
    s.add_argument("plan")
    s.add_argument("--json", action="store_true")
    s.add_argument("--trace", metavar="FILE", help="write the predicted schedule as a Chrome trace "
                                                   "(open in Perfetto or chrome://tracing)")
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
    s.add_argument("--time-limit", type=TIME_LIMIT, default=None, help="seconds (finite, > 0)")
    s.add_argument("--threads", type=THREADS, default=1, help="solver threads (>= 1)")
    s.add_argument("--seed", type=SEED, default=0, help="random seed (>= 0)")
    s.add_argument("--option", "-O", action="append", metavar="KEY=VALUE", help="planner option")
    s.add_argument("--input-shape", type=named_shape, action="append", metavar="[NAME=]SHAPE",
                   help="fix symbolic input dims: SHAPE for the first input or NAME=SHAPE, once per input")
    s.add_argument("--out", help="write the plan as JSON")
    s.add_argument("--json", action="store_true")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress")
    s.add_argument("--compare", metavar="PLANNERS",
                   help="baselines to run on the same instance and compare with the result, comma-separated "
                        "(default for exact planners: neurosurgeon,modnn,coopai; 'none' for none)")
    s.add_argument("--compare-time-limit", type=TIME_LIMIT, metavar="S", help="seconds per baseline (default 10, or --time-limit shared among them when that is less)")
    s.add_argument("--detail", action="store_true",
                   help="also every layer's rows (halos included), the transfers and every metric")
    s.set_defaults(func=cmd_solve)

    for register in COMMANDS.values():
        register(sub)
    return p


def _quiet_stdout() -> None:
    """Point fd 1 at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def _one_line(text) -> str:
    from milp_planner.io import printable

    return " ".join(printable(" ".join(str(text).split())).split())


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line naming what it is about (never the Python source line)."""
    try:
        print(f"milp-planner: warning: {_one_line(message)[:500]}", file=file or sys.stderr)
    except (OSError, ValueError):
        pass


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 infeasible/no plan, 2 bad input)."""
    stdout_closed = sys.stdout is None  # started with fd 1 closed
    if stdout_closed:
        sys.stdout = open(os.devnull, "w")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    debug = os.environ.get("MILP_PLANNER_DEBUG", "") not in ("", "0")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning
            status = args.func(args) or 0
        sys.stdout.flush()
        return 1 if stdout_closed and status == 0 else status
    except PlannerError as e:
        print(f"milp-planner: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("milp-planner: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 1
    except FileNotFoundError as e:
        print(f"milp-planner: error: {_one_line(e.filename)}: no such file", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno == 9 and e.filename is None:  # EBADF: stdout closed under us
            _quiet_stdout()
            return 1
        where = f"{_one_line(e.filename)}: " if e.filename else ""
        print(f"milp-planner: error: {where}{e.strerror or _one_line(e)}", file=sys.stderr)
        return 2
    except (RecursionError, MemoryError) as e:
        print(f"milp-planner: error: input too large or too deeply nested ({type(e).__name__})", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - one line instead of a traceback; the debug switch shows it
        if debug:
            raise
        print(f"milp-planner: internal error: {type(e).__name__}: {_one_line(e)[:300]} "
              "(set MILP_PLANNER_DEBUG=1 for the traceback; please report it)", file=sys.stderr)
        return 2

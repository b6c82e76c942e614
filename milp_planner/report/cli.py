"""The ``report`` subcommand. ``add_report_parser(subparsers)`` registers it (wired in milp_planner.cli).

Everything that can be checked is checked before the first run: the values, the planner
options, ``--out`` (a directory that can be written and is not an input), ``--cache`` and
``--dask`` (the optional extra installed).
"""

from __future__ import annotations

import signal
import sys

from milp_planner.cli_args import COUNT, TIME_LIMIT, seconds
from milp_planner.errors import PlannerError
from milp_planner.planners.base import parse_option_text





def check_report_args(args, options: dict[str, dict]) -> None:
    """``PlannerError`` for what would fail after the work: options, --out, --cache, --dask."""
    from milp_planner.instance.reader import resolve_instance_path
    from milp_planner.io import check_output_path
    from milp_planner.planners import planner_class
    from milp_planner.report import report_output

    for planner, opts in options.items():
        planner_class(planner)(**opts)  # unknown planner, unknown or bad option
    inputs = [resolve_instance_path(i) for i in args.instances]
    report_output(args.out, inputs, args.cache).check()  # new, empty or a report; no input inside
    if args.cache:
        check_output_path(args.cache, inputs, directory=True, option="--cache")
    if args.dask:
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            raise PlannerError("--dask needs the optional extra: pip install 'milp-planner[distributed]'") from None


def parse_options(items: list[str] | None) -> dict[str, dict]:
    """``PLANNER.KEY=VALUE`` items (VALUE as JSON when it parses) -> {planner: {key: value}}."""
    out: dict[str, dict] = {}
    for item in items or []:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise PlannerError(f"--option {item!r}: expected PLANNER.KEY=VALUE (e.g. milp.mip_rel_gap=0.01)")
        lhs, value = item.split("=", 1)
        planner, key = lhs.split(".", 1)
        out.setdefault(planner, {})[key] = parse_option_text(value)
    return out


def cmd_report(args) -> int:
    from milp_planner.report import run_report

    from milp_planner.report.workers import Terminated

    time_limit = None if args.time_limit == 0 else args.time_limit
    options = parse_options(args.option)
    check_report_args(args, options)
    from milp_planner.report.pareto_section import parse_pareto_spec

    args.pareto = [parse_pareto_spec(p) for p in args.pareto or []]
    try:
        outcome = run_report(
            args.instances, args.planners, time_limit=time_limit, repeats=args.repeats, out=args.out,
            workers=args.workers, dask=args.dask, cache_dir=args.cache, options=options,
            retry_failed=args.retry_failed, progress=not args.quiet, grace_s=args.grace,
            pareto=args.pareto, pareto_time_limit=args.pareto_time_limit,
        )
    except Terminated:
        print("milp-planner: report terminated (SIGTERM); its workers were stopped, finished runs are in the "
              "cache and a rerun resumes from there", file=sys.stderr)
        return 128 + signal.SIGTERM
    rows = outcome.rows
    failed = sum(r["status"] == "error" for r in rows)
    timeouts = sum(r["status"] == "timeout" and r["value"] is None for r in rows)
    note = []
    if failed:
        note.append(f"{failed} failed")
    if timeouts:
        note.append(f"{timeouts} timed out without a plan")
    print(f"{len(rows)} runs ({outcome.ran} run now, {outcome.cached} from the cache"
          + (", " + ", ".join(note) if note else "") + ")", file=sys.stderr)
    for key in ("html", "md", "csv", "pareto"):
        if key in outcome.paths:
            print(f"wrote {outcome.paths[key]}")
    return 0


def add_report_parser(sub):
    s = sub.add_parser(
        "report",
        help="run planners on instances; write results.csv, report.md and report.html",
        description="Run every chosen planner on every instance (seeded planners over several seeds), "
                    "in parallel, cached by content; then write results.csv, report.md (+ figures/) and a "
                    "self-contained report.html to --out.",
    )
    s.add_argument("instances", nargs="+", metavar="INSTANCE", help="instance files (.yaml, .yml, .json)")
    s.add_argument("--planners", default="all", help="'all' (default) or a comma-separated list of planner names")
    s.add_argument("--time-limit", type=seconds(allow_zero=True), default=60.0, metavar="S",
                   help="seconds per run (default 60; 0 = none). A run not back after S x 1.5 + --grace is killed")
    s.add_argument("--repeats", type=COUNT, default=3, metavar="N",
                   help="seeds 0..N-1 for seeded planners (default 3); other planners run once")
    s.add_argument("--out", default="report", metavar="DIR",
                   help="output directory (default ./report): new, empty, or one a report wrote before "
                        "(it is replaced whole; its cache is kept)")
    s.add_argument("--workers", type=COUNT, default=None, metavar="N",
                   help="parallel runs (default: the CPU count); with --dask local, the number of Dask workers")
    s.add_argument("--dask", metavar="ADDRESS|local",
                   help="run on a Dask distributed scheduler (tcp://host:8786) or a new LocalCluster ('local'); "
                        "needs pip install 'milp-planner[distributed]'")
    s.add_argument("--cache", metavar="DIR", help="run cache directory (default DIR/.cache)")
    s.add_argument("--option", "-O", action="append", metavar="PLANNER.KEY=VALUE",
                   help="a planner option (part of the cache key); repeatable")
    s.add_argument("--retry-failed", action="store_true", help="run again the cached runs that crashed or were killed")
    s.add_argument("--grace", type=TIME_LIMIT, default=30.0, metavar="S",
                   help="extra seconds before an overrunning run is killed (default 30)")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    s.add_argument("--pareto", action="append", metavar="[INSTANCE=]OBJ,OBJ[,OBJ]",
                   help="add a Pareto section: NSGA-II (autodice) against the ε-constraint front over these "
                        "objectives, on the named instance (name, file stem or path) or on every instance; "
                        "repeatable")
    s.add_argument("--pareto-time-limit", type=seconds(), default=None, metavar="S",
                   help="seconds for each front and each NSGA-II run of the Pareto section (default --time-limit)")
    s.set_defaults(func=cmd_report)
    return s

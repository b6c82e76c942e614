"""The ``deploy`` and ``run`` subcommands. ``add_deploy_parsers(subparsers)`` registers both
(wired in milp_planner.cli)."""

from __future__ import annotations

from pathlib import Path

from milp_planner.cli_args import COUNT, TIME_LIMIT, named_shape
from milp_planner.errors import PlannerError
from milp_planner.limits import parse_budget


def cmd_deploy(args) -> int:
    from milp_planner.deploy import deploy
    from milp_planner.instance import load_instance
    from milp_planner.space.plan import Plan

    from milp_planner.deploy.build import model_path
    from milp_planner.instance.reader import resolve_instance_path
    from milp_planner.io import OutputDir, printable

    OutputDir(args.out, "deploy", [resolve_instance_path(args.instance), args.plan]).check()  # before any work
    inst = load_instance(args.instance)
    plan = Plan.load(args.plan)
    out = deploy(inst, plan, args.out, inputs=[args.plan, model_path(inst)], memory_budget=args.memory_budget)
    from milp_planner.deploy.manifest import Manifest

    m = Manifest.load(out)
    files = sum(1 for s in m.stages for p in s.parts if p.model)
    print(f"wrote {printable(out)}: {files} sub-models on {len(m.ranks)} ranks, {len(m.messages)} messages; "
          f"run it with: milp-planner run {printable(out)} --check")
    return 0


def cmd_run(args) -> int:
    from milp_planner.cli_args import input_shapes

    shapes = input_shapes(args.input_shape)
    if args.trace:  # before any work
        from milp_planner.io import check_output_path

        check_output_path(args.trace, option="--trace")
    if shapes is None:
        if args.instance is not None:
            raise PlannerError("run: --instance is read only with --input-shape (to deploy the plan at that shape)")
        return _run(args, args.folder)
    if args.instance is None:
        raise PlannerError("run --input-shape: give --instance, the instance file the folder was deployed from "
                           "(its model is imported again at the new shape)")
    import shutil
    import tempfile

    from milp_planner.deploy.reshape import deploy_at_shape, shape_text
    from milp_planner.io import printable

    tmp = Path(tempfile.mkdtemp(prefix="milp-planner-reshape-"))
    try:
        folder = deploy_at_shape(args.folder, args.instance, shapes, tmp / "deployment",
                                 memory_budget=args.memory_budget)
        if not args.json:
            print(f"input shape {shape_text(shapes)}: the plan of {printable(args.folder)} deployed at this shape "
                  f"in a temporary folder (deleted after the run)")
        return _run(args, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(args, folder) -> int:
    from milp_planner.deploy import run_deployment

    from milp_planner.io import dumps_json, printable

    report = run_deployment(folder, input=args.input, repeat=args.repeat, check=args.check,
                            emulate_network=args.emulate_network, timeout=args.timeout,
                            memory_budget=args.memory_budget)
    if args.trace:
        from milp_planner.deploy.manifest import Manifest
        from milp_planner.trace import (measured_events, predicted_events, schedule_from_manifest,
                                        trace_document, write_trace)

        m = Manifest.load(folder)
        write_trace(args.trace, trace_document(predicted_events(schedule_from_manifest(m)),
                                               measured_events(report["timeline"])))
    if args.json:
        # strict JSON: a NaN error or an infinite time is null; the timeline goes to --trace
        print(dumps_json({k: v for k, v in report.items() if k != "timeline"}))
        return 0
    ms = 1e3
    print("ranks: " + ", ".join(f"{r}={printable(name)}" for name, r in sorted(report["ranks"].items(),
                                                                               key=lambda x: x[1])))
    print(f"latency: measured {report['measured_latency_s'] * ms:.3f} ms (median of {report['repeat']}), "
          f"predicted {report['predicted_latency_s'] * ms:.3f} ms"
          + (" [network emulated]" if report["emulate_network"] else " [network: shared memory]"))
    if report["max_abs_err"] is not None:
        print(f"check: max abs error {report['max_abs_err']:.3g} against the unsplit model")
    print(f"{'stage':>5} {'layers':>9} {'axis':>8} {'device':>12} {'compute ms':>11} {'pred':>9} {'recv ms':>9} {'pred':>9}")
    for s in report["per_stage"]:
        for d in s["devices"]:
            print(f"{s['stage']:>5} {str(s['first']) + '-' + str(s['last']):>9} {s['axis']:>8} "
                  f"{printable(d['device']):>12} "
                  f"{d['compute_s'] * ms:>11.3f} {d['predicted_compute_s'] * ms:>9.3f} "
                  f"{d['recv_s'] * ms:>9.3f} {d['predicted_recv_s'] * ms:>9.3f}")
    g = report["gather"]
    print(f"gather: measured {g['measured_s'] * ms:.3f} ms, predicted {g['predicted_s'] * ms:.3f} ms")
    if args.trace:
        print(f"timelines written to {args.trace} (open it in Perfetto or chrome://tracing)")
    return 0


def add_deploy_parsers(sub) -> None:
    """Register ``deploy`` and ``run`` on an argparse subparsers object."""
    s = sub.add_parser("deploy", help="write a plan as per-device ONNX sub-models, a message manifest and launch files")
    s.add_argument("instance")
    s.add_argument("plan", help="a plan JSON file (from solve --out)")
    s.add_argument("--out", required=True,
                   help="the deployment folder to write: new, empty, or a deployment written before "
                        "(replaced whole; nothing else is deleted)")
    s.add_argument("--memory-budget", type=parse_budget, default=None, metavar="SIZE",
                   help="memory the deploy may use, e.g. 8GB (default 4GB; checked before the model is loaded)")
    s.set_defaults(func=cmd_deploy)

    s = sub.add_parser("run", help="run a deployment with one MPI rank per device on this machine")
    s.add_argument("folder", help="a folder written by deploy")
    s.add_argument("--input", help="a .npy file with the first input, or an .npz file with inputs by name, "
                                   "numbers of each input's shape (default: seeded noise; ones for integer inputs)")
    s.add_argument("--trace", metavar="FILE", help="write the predicted and the measured (last run) timelines "
                                                   "as a Chrome trace (open in Perfetto or chrome://tracing)")
    s.add_argument("--repeat", type=COUNT, default=5, help="timed runs after one warm-up (default 5)")
    s.add_argument("--check", action="store_true", help="compare the outputs with the unsplit model")
    s.add_argument("--emulate-network", action="store_true",
                   help="hold every message for its modelled transfer time (bandwidth and latency of the instance)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--timeout", type=TIME_LIMIT, default=120.0,
                   help="seconds from the start (reading the deployment and the input included) before every "
                        "rank is stopped (default 120)")
    s.add_argument("--memory-budget", type=parse_budget, default=None, metavar="SIZE",
                   help="memory the run may use with all its ranks, e.g. 8GB (default 4GB; checked before start)")
    s.add_argument("--input-shape", type=named_shape, action="append", metavar="[NAME=]SHAPE",
                   help="run the folder's plan at another input shape, e.g. 1,3,32,32 (once per input; needs "
                        "--instance): the model is imported again and the plan deployed at that shape in a "
                        "temporary folder, rows split in the same proportions; no new solve")
    s.add_argument("--instance", help="with --input-shape: the instance file the folder was deployed from")
    s.set_defaults(func=cmd_run)



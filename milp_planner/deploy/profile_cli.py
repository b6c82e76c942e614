"""The ``profile`` subcommand: ``add_profile_parser(subparsers)`` registers it."""

from __future__ import annotations

import argparse
import sys

from milp_planner.cli_args import integer, shape


def _fractions(text: str) -> tuple[float, ...]:
    try:
        fr = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--fractions: {text!r} is not like 0.25,0.5,1") from None
    if not fr or any(not (0 < f <= 1) for f in fr):
        raise argparse.ArgumentTypeError(f"--fractions: {text!r} must be numbers in (0, 1]")
    return tuple(sorted(set(fr)))



def cmd_profile(args) -> int:
    from pathlib import Path

    from milp_planner.deploy.profile import DEVICE_FILE_SUFFIXES, ProfileSettings, profile_model, write_device_file
    from milp_planner.io import check_output_file, printable

    inputs = [] if str(args.model).startswith("zoo:") else [Path(args.model)]
    check_output_file(args.out, inputs, suffixes=DEVICE_FILE_SUFFIXES)  # before the minutes of timing
    settings = ProfileSettings(repeats=args.repeats, warmup=args.warmup, fractions=args.fractions,
                               context=not args.no_context, clock=args.clock)

    def progress(i: int, n: int, name: str) -> None:
        if not args.quiet and sys.stderr.isatty():
            from milp_planner.io import printable

            sys.stderr.write(f"\r[{i + 1}/{n}] {printable(name)[:60]:<60}")
            sys.stderr.flush()

    prof = profile_model(args.model, input_shape=args.input_shape, settings=settings, progress=progress)
    if not args.quiet and sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 72 + "\r")
    write_device_file(prof, args.out, inputs)
    total = sum((lp.rows or lp.channels)[-1].seconds for lp in prof.layers)
    print(f"wrote {printable(args.out)}: {len(prof.layers)} layers, {total * 1e3:.2f} ms for the whole model "
          f"on one thread ({len(prof.notes)} notes)")
    for note in prof.notes:
        print(f"  note: {printable(note)}")
    return 0


def add_profile_parser(sub) -> None:
    """Register ``milp-planner profile`` on the CLI's subparsers."""

    s = sub.add_parser(
        "profile",
        help="time every layer of a model on this host and write a `table` device file",
        description="Time every layer of MODEL with onnxruntime on one thread, at several row and "
                    "channel fractions, and write a device file (compute: {model: table}) that an "
                    "instance uses as `profile: FILE.yaml`.",
    )
    s.add_argument("model", help="zoo:NAME[:SIZE] or an .onnx file")
    s.add_argument("--input-shape", type=shape, help="fix the input shape, e.g. 1,3,64,64")
    s.add_argument("--out", required=True, help="the device file to write: YAML (.yaml, .yml) or JSON (.json)")
    s.add_argument("--repeats", type=integer(1, 100_000), default=20, help="timed runs (median); default 20")
    s.add_argument("--warmup", type=integer(0, 100_000), default=3, help="untimed runs first; default 3")
    s.add_argument("--fractions", type=_fractions, default=(0.25, 0.5, 1.0),
                   help="row and channel fractions to measure; default 0.25,0.5,1")
    s.add_argument("--no-context", action="store_true",
                   help="keep each layer's time run alone (default: scaled to its kernel time inside "
                        "a run of the whole model)")
    s.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="cpu (default): CPU time of the thread running the model, not inflated by other "
                        "processes on the cores; wall: elapsed time")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress")
    s.set_defaults(func=cmd_profile)

"""Argument types shared by every subcommand: each refuses a bad value with argparse's one-line error."""

from __future__ import annotations

import argparse
import math

MAX_SECONDS = 1e7


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``PROG: error: ...``, exit 2), no usage block;
    ``--help`` still prints the usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def integer(lo: int, hi: int):
    """An integer from ``lo`` to ``hi``."""
    def parse(text: str) -> int:
        try:
            x = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= x <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} must be from {lo} to {hi}")
        return x
    parse.__name__ = "integer"
    return parse


def seconds(allow_zero: bool = False):
    """A finite number of seconds, > 0 (or >= 0, where 0 means none), at most ``MAX_SECONDS``."""
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not (math.isfinite(x) and (x >= 0 if allow_zero else x > 0) and x <= MAX_SECONDS):
            low = "from 0 (none)" if allow_zero else "> 0 and"
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds, {low} <= {MAX_SECONDS:g}")
        return x
    parse.__name__ = "seconds"
    return parse


def named_shape(text: str) -> tuple[str | None, tuple[int, ...]]:
    """``SHAPE`` (the first input) or ``NAME=SHAPE`` (any input; ``NAME=`` or ``NAME=()`` for a
    scalar) -> (name or None, dims). ``--input-shape`` is given once per input."""
    name, eq, rest = text.rpartition("=")
    if not eq:
        return None, shape(text)
    if not name:
        raise argparse.ArgumentTypeError(f"--input-shape: {text!r} has no input name before '='")
    if rest.strip() in ("", "()", "[]"):
        return name, ()
    return name, shape(rest)


def input_shape_map(values) -> dict | None:
    """The ``named_shape`` values of a repeated ``--input-shape`` as a mapping (None: not given)."""
    if not values:
        return None
    out: dict = {}
    for name, dims in values:
        if name in out:
            raise argparse.ArgumentTypeError(f"--input-shape: {'input ' + repr(name) if name else 'the first input'} "
                                             f"is given twice")
        out[name] = dims
    return out


def input_shapes(values) -> dict | None:
    """``input_shape_map`` for a command's code: a bad value is a ``PlannerError`` line."""
    from milp_planner.errors import PlannerError

    try:
        return input_shape_map(values)
    except argparse.ArgumentTypeError as e:
        raise PlannerError(str(e)) from None


def shape(text: str) -> tuple[int, ...]:
    """An input shape like ``1,3,224,224`` (or ``1x3x224x224``)."""
    try:
        dims = tuple(int(x) for x in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--input-shape: {text!r} is not like N,C,H,W") from None
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"--input-shape: {text!r} must be positive integers")
    if any(d > 1 << 20 for d in dims):
        raise argparse.ArgumentTypeError(f"--input-shape: {text!r} has a dimension above {1 << 20}")
    return dims


def threads(text: str) -> int:
    """A thread count from 1 to 1024 whose stacks fit in the process's address-space limit."""
    from milp_planner.errors import PlannerError
    from milp_planner.limits import check_threads

    n = integer(1, 1024)(text)
    try:
        check_threads(n)
    except PlannerError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[1]) from None
    return n


TIME_LIMIT = seconds()
THREADS = threads
SEED = integer(0, 2**32 - 1)
COUNT = integer(1, 10_000)

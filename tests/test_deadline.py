"""The one deadline type (``milp_planner.deadline``) and its use everywhere (issue #32 item 4)."""

from __future__ import annotations

import ast
import doctest
import math
import pathlib
import time

import pytest

import milp_planner.deadline as deadline_module
from milp_planner.deadline import NEVER, Deadline, DeadlinePassed
from milp_planner.planners.base import SolveContext

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: names that hold an absolute stop moment wherever they are a parameter
DEADLINE_NAMES = {"deadline", "refine_by", "stop_at"}


def test_the_module_examples_run():
    assert doctest.testmod(deadline_module).failed == 0


def test_never_has_no_limit():
    assert NEVER.never and not NEVER.passed() and NEVER.left() == math.inf and NEVER.seconds() is None
    assert NEVER.share(0.1) is NEVER and NEVER.at_least(5.0) is NEVER and NEVER.within(None) is NEVER
    assert Deadline.after(None) is NEVER
    NEVER.check("never raises")


def test_shares_caps_and_floors_keep_their_meaning():
    d = Deadline(time.perf_counter() + 100.0)
    assert 49.0 < d.share(0.5).left() <= 50.0
    assert d.within(1.0).left() <= 1.0 and d.within(1000.0) == d
    assert d.at_least(1.0) == d and d.at_least(1000.0).left() > 999.0
    assert min(d, NEVER) == d and max(d, NEVER) is NEVER
    assert d.seconds() == pytest.approx(d.left(), abs=0.1)
    assert d.shifted(-1.0).at == d.at - 1.0 and NEVER.shifted(-1.0) is NEVER


def test_a_passed_deadline():
    d = Deadline(time.perf_counter() - 1.0)
    assert d.passed() and d.left() == 0.0 and d.seconds() == 0.0
    assert d.share(0.5).passed() and not d.at_least(10.0).passed()
    with pytest.raises(DeadlinePassed, match="the step"):
        d.check("the step")
    with pytest.raises(TimeoutError):  # what every step's time-out handler catches
        d.check()
    assert Deadline.after(-5.0).passed()  # negative seconds: already passed, not an error


def test_the_solve_context_gives_one_deadline():
    assert SolveContext("latency", None).deadline is NEVER and SolveContext("latency", None).remaining() is None
    ctx = SolveContext("latency", 10.0)
    assert ctx.deadline == Deadline(ctx.started + 10.0) and 9.0 < ctx.remaining() <= 10.0
    assert ctx.part_of_limit(0.5) == Deadline(ctx.started + 5.0)
    assert SolveContext("latency", None).part_of_limit(0.5) is NEVER


def _deadline_params():
    for path in sorted([*ROOT.joinpath("milp_planner").rglob("*.py"), *ROOT.joinpath("formulations").rglob("*.py")]):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            positional = args.posonlyargs + args.args
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
            pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
            for arg, default in pairs:
                if arg.arg in DEADLINE_NAMES:
                    yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({arg.arg})", arg, default


def test_every_deadline_parameter_is_a_deadline_defaulting_to_never():
    """No function takes a float or None for a stop moment: a hand-computed deadline is how a
    step once overran its time limit (space counting that did not check the time)."""
    found = list(_deadline_params())
    assert len(found) > 80
    wrong = [where for where, arg, default in found
             if arg.annotation is None or ast.unparse(arg.annotation) != "Deadline"
             or (default is not None and ast.unparse(default) != "NEVER")]
    assert wrong == []

"""Focused checks of the input boundary behind the fuzz suite: YAML bounds and merge keys,
declared planner options, output paths, strict JSON and the CLI's error wrapper."""

from __future__ import annotations

import json
import os
from fractions import Fraction

import pytest

from milp_planner import cli
from milp_planner.errors import PlannerError
from milp_planner.instance.reader import BadNumber, MAX_NODES, parse_text
from milp_planner.io import check_output_path, dumps_json, read_text_bounded, write_atomic
from milp_planner.planners import get_planner, planner_class, planner_names


def test_merge_keys_explicit_keys_win_and_duplicates_are_still_refused():
    data = parse_text("a: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}\n", "t.yaml", "yaml")
    assert data["c"] == {"x": 1, "y": 3}
    with pytest.raises(PlannerError, match="duplicate key 'y'"):
        parse_text("c: {x: 1, y: 2, y: 3}\n", "t.yaml", "yaml")


@pytest.mark.parametrize("text, value", [("!!bool yes", True), ("!!bool off", False), ("true", True),
                                         ("yes", "yes"), ("!!int 0x1f", 31), ("!!float 1", Fraction(1))])
def test_tagged_scalars(text, value):
    assert parse_text(f"k: {text}\n", "t.yaml", "yaml")["k"] == value


@pytest.mark.parametrize("text", ["!!bool maybe", "!!int abc", "!!float x1"])
def test_bad_tagged_scalars_are_one_line_errors(text):
    with pytest.raises(PlannerError, match=r"^t\.yaml: line 1: YAML syntax error: .* is not"):
        parse_text(f"k: {text}\n", "t.yaml", "yaml")


def test_numbers_out_of_bounds_are_kept_as_bad_numbers():
    got = parse_text("a: 1e999999999\nb: 1.5e-401\nc: 1e30\n", "t.yaml", "yaml")
    assert isinstance(got["a"], BadNumber) and isinstance(got["b"], BadNumber)
    assert got["c"] == Fraction(10) ** 30
    got = parse_text('{"a": 1e999999999, "b": ' + "9" * 200 + "}", "t.json", "json")
    assert isinstance(got["a"], BadNumber) and isinstance(got["b"], BadNumber)


def test_alias_expansion_is_bounded_but_shared_small_anchors_are_fine():
    ok = "a: &a [1, 2, 3]\nb: [*a, *a, *a]\n"
    assert parse_text(ok, "t.yaml", "yaml")["b"] == [[1, 2, 3]] * 3
    bomb = "a: &a [" + ", ".join(["x"] * 100) + "]\n" + "b: &b [" + ", ".join(["*a"] * 100) + "]\n" \
           + "c: [" + ", ".join(["*b"] * 100) + "]\n"
    with pytest.raises(PlannerError, match=f"more than {MAX_NODES:,} nodes"):
        parse_text(bomb, "t.yaml", "yaml")


def test_special_files_are_refused(tmp_path):
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    with pytest.raises(PlannerError, match="not a regular file"):
        read_text_bounded(fifo, "an instance file")
    big = tmp_path / "big.yaml"
    big.write_text("x" * 101)
    with pytest.raises(PlannerError, match="too large"):
        read_text_bounded(big, "an instance file", max_bytes=100)


def test_unknown_and_bad_options_name_the_key():
    with pytest.raises(PlannerError, match=r"^planner 'milp': unknown option 'foo' \(valid: .*max_arcs"):
        get_planner("milp", foo=1)
    with pytest.raises(PlannerError, match="did you mean 'max_arcs'"):
        get_planner("milp", max_arc=1)
    with pytest.raises(PlannerError, match="option beam must be >= 1"):
        get_planner("coedge", beam=0)
    with pytest.raises(PlannerError, match="it takes no options"):
        get_planner("offload", x=1)
    p = get_planner("milp", max_arcs="1000", log="true")
    assert p.options["max_arcs"] == 1000 and p.options["log"] is True and p.options["delta"] == 0.0025


def test_every_planner_declares_its_defaults_consistently():
    for name in planner_names():
        cls = planner_class(name)
        names = [o.name for o in cls.option_specs]
        assert len(names) == len(set(names)), name
        get_planner(name)  # the defaults pass their own checks
        for o in cls.option_specs:
            if o.default is not None:
                assert o.coerce(o.default, name) == o.default


def test_planners_json_lists_options(capsys):
    assert cli.main(["planners", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    opts = {o["name"]: o for o in rows["milp"]["options"]}
    assert opts["max_arcs"]["default"] == 3_000_000 and opts["max_arcs"]["type"] == "int"
    assert rows["offload"]["options"] == []


def test_output_paths(tmp_path):
    inst = tmp_path / "i.yaml"
    inst.write_text("x: 1\n")
    with pytest.raises(PlannerError, match="is the input file"):
        check_output_path(inst, [inst])
    with pytest.raises(PlannerError, match="is a directory"):
        check_output_path(tmp_path, [inst])
    with pytest.raises(PlannerError, match="is a file, not a directory"):
        check_output_path(inst / "plan.json", [])
    assert check_output_path(tmp_path / "new" / "plan.json", [inst]) == tmp_path / "new" / "plan.json"
    with pytest.raises(PlannerError, match="cannot"):
        write_atomic(inst / "x.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.yaml"]  # nothing left behind


def test_strict_json():
    assert json.loads(dumps_json({"a": float("inf"), "b": [float("nan"), 1.5]})) == {"a": None, "b": [None, 1.5]}


def test_internal_errors_are_one_line_unless_debugging(monkeypatch, capsys):
    def boom(args):
        raise RuntimeError("a bug\nover two lines")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["planners"].set_defaults(func=boom)
    monkeypatch.delenv("MILP_PLANNER_DEBUG", raising=False)
    assert cli.main(["planners"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: RuntimeError: a bug over two lines" in err
    monkeypatch.setenv("MILP_PLANNER_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["planners"])

"""Fuzzing the input boundary (issue #16): hostile values must give a PlannerError, never a crash.

Hypothesis mutates valid instance dicts, YAML texts, plan dicts and planner option strings;
the checks run in-process against the reader, the plan schema, the evaluator and the option
declarations. Deterministic (``derandomize=True``) and bounded (a few hundred examples in
total); ``-m slow`` runs ``test_fuzz_slow_*`` with ten times more examples.
The corpus of issue #16's cases runs through the CLI in ``test_fuzz_corpus.py``.
"""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance.reader import instance_from_dict, parse_text
from milp_planner.io import dumps_json
from milp_planner.model.loading import load_graph
from milp_planner.planners import get_planner, planner_class, planner_names
from milp_planner.planners.base import parse_option_text
from milp_planner.space.plan import Plan

from fuzz_corpus.cases import instance as instance_text

FAST = settings(max_examples=200, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(FAST, max_examples=1500)

GRAPH = load_graph("zoo:tiny_chain")
BASE_TEXT = instance_text()
BASE = parse_text(BASE_TEXT, "base.yaml", "yaml")
PLAN = {"instance": "base", "stages": [
    {"first": 0, "last": 1, "axis": "rows",
     "parts": [{"device": "pi4", "range": [0, 16]}, {"device": "pi5", "range": [16, 32]}]},
    {"first": 2, "last": 5, "axis": "none", "parts": [{"device": "pi5"}]}]}

# hostile leaves: extreme numbers, non-numbers, markup, wrong types
HOSTILE = st.one_of(
    st.sampled_from([0, -1, 1, 2**63, 10**40, -(10**40), True, False, None, "", "x", "pi5[/b]", "[bold]",
                     ".inf", ".nan", "1e400", [], {}, [[]], {"a": 1}, [1, 2, 3]]),
    st.fractions(), st.integers(), st.text(max_size=12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.builds(lambda e: Fraction(10) ** e, st.integers(-400, 400)),
)


def _paths(obj, prefix=()):
    """Every (path, value) in a nested dict/list."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value):
    if not path:
        return value
    node = obj
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return obj


@st.composite
def mutated(draw, base):
    data = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p, _ in _paths(data)]
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "delete" and path:
            parent = data
            for p in path[:-1]:
                parent = parent[p]
            del parent[path[-1]]
        elif action == "add":
            node = data
            for p in path:
                node = node[p]
            if isinstance(node, dict):
                node[draw(st.sampled_from(["extra", "name", "memory_mb", "bandwidth_mbps", 1, "<<"]))] = draw(HOSTILE)
            elif isinstance(node, list):
                node.append(draw(HOSTILE))
            else:
                data = _set(data, path, draw(HOSTILE))
        else:
            data = _set(data, path, draw(HOSTILE))
    return data


def _instance_or_error(data):
    try:
        return instance_from_dict(data, "fuzz.yaml", graph=GRAPH)
    except PlannerError as e:
        assert "\n" not in str(e) and str(e).startswith("fuzz.yaml")
        return None


def _check_instance(inst) -> None:
    for d in inst.devices:
        for x in (d.compute.macs_per_s, d.compute.overhead_s, d.compute.mem_bytes_per_s):
            assert x is None or (Fraction(0) <= Fraction(x) <= Fraction(10) ** 40)
    for row in inst.network.bandwidth_Bps:
        assert all(x > 0 for x in row)
    plan = Plan.from_dict(PLAN)
    try:
        m = evaluate(plan, inst)
    except PlannerError:
        return
    dumps_json(m.to_dict())  # strict JSON: no Infinity


def _check_instance_dict(data):
    inst = _instance_or_error(data)
    if inst is not None:
        _check_instance(inst)


@FAST
@given(mutated(BASE))
def test_fuzz_instance_dicts(data):
    _check_instance_dict(data)


@st.composite
def yaml_texts(draw):
    lines = BASE_TEXT.splitlines()
    i = draw(st.integers(0, len(lines) - 1))
    snippet = draw(st.sampled_from([
        "!!bool yes", "!!bool maybe", "!!int abc", "!!float 1e999999999", "1e-999999999", "&a [1, 2]", "*a",
        "*nope", "<<: {x: 1}", "!!python/name:os.system", "{", "[[[[[[", "1" * 200, "0x" + "f" * 200,
        "!!binary aGVsbG8=", "!!timestamp 2024-01-01", "!!set {a, b}", ".NaN", "-.inf", "1_000", "0o777",
        "~", "'pi5[/b]'", "\t", "\x00", "\ufeff",
    ]))
    where = draw(st.sampled_from(["value", "line"]))
    if where == "value" and ":" in lines[i]:
        key = lines[i].split(":", 1)[0]
        lines[i] = f"{key}: {snippet}"
    else:
        lines.insert(i, snippet)
    return "\n".join(lines) + "\n"


@FAST
@given(yaml_texts())
def test_fuzz_yaml_text(text):
    try:
        data = parse_text(text, "fuzz.yaml", "yaml")
    except PlannerError as e:
        assert "\n" not in str(e)
        return
    _check_instance_dict(data)


@FAST
@given(mutated(PLAN))
def test_fuzz_plan_dicts(data):
    inst = instance_from_dict(copy.deepcopy(BASE), "base.yaml", graph=GRAPH)
    try:
        plan = Plan.from_dict(data, "fuzz.json")
        m = evaluate(plan, inst)
    except PlannerError as e:
        assert "\n" not in str(e)
        return
    # an accepted plan covers the model with in-bounds ranges
    covered = sorted(lid for s in plan.stages for lid in s.layers)
    assert covered == list(range(len(GRAPH.layers)))
    for s, sc in zip(plan.stages, m.stages):
        for p in s.parts:
            if p.range is not None:
                assert 0 <= p.range[0] < p.range[1]
    json.loads(plan.to_json())


OPTION_VALUES = st.one_of(
    st.sampled_from(["0", "-1", "1", "abc", "1e400", "nan", "inf", "true", "null", "[]", "{}", "2.5", "1" * 30,
                     "[[0, 5]]", "[[0, 2], [3, 5]]", "appsi_highs", "capacity", "NaN", "-Infinity"]),
    st.text(max_size=8),
)
OPTION_KEYS = sorted({o.name for n in planner_names() for o in planner_class(n).option_specs} | {"foo", ""})


@FAST
@given(st.sampled_from(planner_names()), st.sampled_from(OPTION_KEYS), OPTION_VALUES)
def test_fuzz_planner_options(name, key, text):
    value = parse_option_text(text)
    try:
        planner = get_planner(name, **{key: value})
    except PlannerError as e:
        msg = str(e)
        assert "\n" not in msg and f"planner {name!r}" in msg
        return
    spec = {o.name: o for o in planner_class(name).option_specs}[key]
    got = planner.options.get(key)
    if got is None:
        return  # "auto"
    assert isinstance(got, spec.type) and not (spec.type is int and isinstance(got, bool))
    if spec.type in (int, float):
        assert math.isfinite(got)
        assert spec.ge is None or got >= spec.ge
        assert spec.gt is None or got > spec.gt
        assert spec.le is None or got <= spec.le
    if spec.choices:
        assert got in spec.choices


@pytest.mark.slow
@SLOW
@given(mutated(BASE))
def test_fuzz_slow_instance_dicts(data):
    _check_instance_dict(data)


@pytest.mark.slow
@SLOW
@given(yaml_texts())
def test_fuzz_slow_yaml_text(text):
    test_fuzz_yaml_text.hypothesis.inner_test(text)

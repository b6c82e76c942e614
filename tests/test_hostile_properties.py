"""Hypothesis suites of issue #30: any manifest, any plan file.

A deployment manifest or a plan file, mutated at random (a value replaced by any JSON value, a
key removed or added, the text cut short), is either accepted and then agrees with itself, or
refused with one ``PlannerError`` line: never another exception, never a path out of the
deployment's folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_corpus.commands import instance as instance_text
from fuzz_corpus.commands import plan as plan_text
from milp_planner.errors import PlannerError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.integers(0, 40).map(float)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
    | st.sampled_from(["..", "/etc/passwd", "../x.onnx", "external", "pi4", "pi5", "input", "float16", "rows"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _paths(doc, prefix=()):
    """Every path (tuple of keys and indexes) into ``doc``."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated(draw, doc):
    """``doc`` with 1 to 3 random edits: replace a value, delete a key or item, add a key."""
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        kind = draw(st.sampled_from(["replace", "replace", "delete", "add", "float"]))
        if kind == "float":  # 16 -> 16.0: JSON Schema counts it as an integer
            v = parent[path[-1]]
            parent[path[-1]] = float(v) if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**53 else v
        elif kind == "replace":
            parent[path[-1]] = draw(JSON)
        elif kind == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(JSON)
        else:
            parent.append(draw(JSON))
    return doc


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from milp_planner.deploy import deploy
    from milp_planner.instance import load_instance
    from milp_planner.space.plan import Plan

    d = tmp_path_factory.mktemp("prop")
    (d / "i.yaml").write_text(instance_text(ends="external"))
    (d / "p.json").write_text(plan_text(split=True))
    deploy(load_instance(d / "i.yaml"), Plan.load(d / "p.json"), d / "dep")
    return d / "dep"


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])


@SETTINGS
@given(data=st.data())
def test_any_manifest_is_accepted_consistent_or_refused_in_one_line(deployment, tmp_path_factory, data):
    from milp_planner.deploy.manifest import Manifest

    original = json.loads((deployment / "manifest.json").read_text())
    doc = data.draw(mutated(original))
    folder = tmp_path_factory.mktemp("m")
    dep = folder / "dep"
    shutil.copytree(deployment, dep, symlinks=True)
    text = json.dumps(doc)
    if data.draw(st.booleans(), label="cut short"):
        text = text[: data.draw(st.integers(0, len(text)))]
    (dep / "manifest.json").write_text(text)
    try:
        m = Manifest.load(dep)
    except PlannerError as e:
        assert "\n" not in str(e) and str(e)
        return
    # accepted: it agrees with itself and names only files inside the folder
    assert sorted(m.ranks.values()) == list(range(len(m.ranks)))
    assert m.source in m.ranks and m.sink in m.ranks
    for rel in m.model_files():
        real = (dep / rel).resolve()
        assert dep.resolve() in real.parents and real.is_file()
    for s in m.stages:
        assert all(p.device in m.ranks for p in s.parts)
    for msg in m.messages:
        assert msg.sender in m.ranks and msg.receiver in m.ranks and msg.sender != msg.receiver


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    from milp_planner.instance import load_instance

    d = tmp_path_factory.mktemp("plan")
    (d / "i.yaml").write_text(instance_text())
    return load_instance(d / "i.yaml")


VALID_PLANS = [json.loads(plan_text()), json.loads(plan_text(split=True)),
               {"stages": [{"first": 0, "last": 5, "axis": "rows", "parts": [
                   {"device": "pi4", "range": [0, 4]}, {"device": "pi5", "range": [4, 8]}]}]}]


@SETTINGS
@given(data=st.data())
def test_any_plan_file_is_evaluated_or_refused_in_one_line(inst, tmp_path_factory, data):
    from milp_planner.cost.evaluator import evaluate
    from milp_planner.space.plan import Plan, check_plan

    doc = data.draw(st.sampled_from(VALID_PLANS) | JSON)
    if data.draw(st.booleans(), label="mutate"):
        doc = data.draw(mutated(doc)) if isinstance(doc, (dict, list)) else doc
    path = Path(tmp_path_factory.mktemp("p")) / "p.json"
    path.write_text(json.dumps(doc))
    try:
        plan = Plan.load(path)
        check_plan(plan, inst)
        m = evaluate(plan, inst)
    except PlannerError as e:
        assert "\n" not in str(e) and str(e)
        return
    assert m.latency_s >= 0 and all(isinstance(s.first, int) and not isinstance(s.first, bool)
                                    for s in plan.stages)

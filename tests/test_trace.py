"""Timelines (milp_planner/trace.py): ``evaluate --trace`` and ``run --trace`` write the Chrome
Trace Event format, checked against its JSON Schema; flows are paired; the predicted schedule
ends at the evaluator's latency."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from milp_planner.cli import main
from milp_planner.cost.evaluator import evaluate
from milp_planner.instance import load_instance
from milp_planner.space.plan import Plan
from milp_planner.trace import (TRACE_SCHEMA, predicted_events, schedule_from_metrics, schedule_from_metrics_dict,
                                timeline_rows, timeline_svg)


def check_trace(doc: dict, pids: set[int]) -> list[dict]:
    jsonschema.validate(doc, TRACE_SCHEMA)
    ev = doc["traceEvents"]
    assert {e["pid"] for e in ev} == pids
    flows: dict[int, list[dict]] = {}
    for e in ev:
        if e["ph"] in ("s", "f"):
            flows.setdefault(e["id"], []).append(e)
    assert flows
    for fid, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], fid  # each flow starts once and ends once
        s, f = sorted(pair, key=lambda e: e["ph"] != "s")
        assert s["ts"] <= f["ts"] + 1e-6 and s["pid"] == f["pid"]
    return ev


@pytest.fixture(scope="module")
def edge3(tmp_path_factory):
    d = tmp_path_factory.mktemp("edge3")
    plan = d / "plan.json"
    assert main(["solve", "example:edge-3dev", "--planner", "dp", "--quiet", "--compare", "none",
                 "--out", str(plan)]) == 0
    return d, plan


def test_evaluate_trace_of_a_3_device_plan(edge3, capsys):
    d, plan = edge3
    out = d / "pred.json"
    assert main(["evaluate", "example:edge-3dev", str(plan), "--trace", str(out)]) == 0
    ev = check_trace(json.loads(out.read_text()), {1})
    inst = load_instance("example:edge-3dev")
    m = evaluate(Plan.load(plan), inst)
    tracks = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(inst.device_names) <= tracks  # one track per device
    links = {t for t in tracks if " -> " in t}
    assert links and links == {f"{t.src_name} -> {t.dst_name}" for t in _transfers(m, inst)}
    spans = [e for e in ev if e["ph"] == "X"]
    # every stage part and every message is one span; the schedule ends at the predicted latency
    assert sum(e["cat"] == "compute" for e in spans) == sum(len(s.compute_s) for s in m.stages)
    assert sum(e["cat"] == "message" for e in spans) == sum(len(s.transfers) for s in m.stages) + len(m.gather)
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(m.latency_s * 1e6, rel=1e-6, abs=0.01)
    svg = timeline_svg(schedule_from_metrics(m, inst))
    assert svg.startswith("<svg") and svg.count("<rect") == len(spans)


def test_the_schedule_of_a_metrics_record_is_the_evaluators(edge3):
    """What a report keeps of a run (``Metrics.to_dict()``) gives the same timeline as the
    evaluator's ``Metrics``; the SVG has one row per device, then one per link."""
    d, plan = edge3
    inst = load_instance("example:edge-3dev")
    m = evaluate(Plan.load(plan), inst)
    sc = schedule_from_metrics_dict(json.loads(json.dumps(m.to_dict())), inst.device_names)
    assert predicted_events(sc) == predicted_events(schedule_from_metrics(m, inst))
    rows = timeline_rows(sc)
    assert rows[:len(inst.device_names)] == inst.device_names
    assert all(" -> " in r for r in rows[len(inst.device_names):])
    svg = timeline_svg(sc, standalone=False)
    assert svg.count('<g class="row">') == len(rows) and "xmlns" not in svg and "http" not in svg


def test_timeline_svg_escapes_every_name():
    from milp_planner.trace import Msg, Schedule

    evil = ['<script>alert(1)</script>', 'a"b\'c&d', "esc\x1b[2J"]
    sc = Schedule(evil, [{"index": 0, "first": 0, "last": 0, "compute": {n: 1e-3 for n in evil}}],
                  [Msg(0, "<img src=x onerror=y>", evil[0], evil[1], 4, 1e-4)])
    svg = timeline_svg(sc)
    import xml.etree.ElementTree as ET

    ET.fromstring(svg)  # well-formed: nothing a name holds ends an element or an attribute
    for bad in ("<script", "<img", "\x1b", 'a"b'):
        assert bad not in svg
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg and "esc\\x1b[2J" in svg


class _T:
    def __init__(self, t, names):
        self.src_name = "external" if t.src < 0 else names[t.src]
        self.dst_name = "external" if t.dst < 0 else names[t.dst]


def _transfers(m, inst):
    return [_T(t, inst.device_names) for s in m.stages for t in s.transfers] + \
        [_T(t, inst.device_names) for t in m.gather]


def test_shared_medium_sends_before_computing(edge3):
    d, plan = edge3
    inst = load_instance("example:edge-3dev")
    m = evaluate(Plan.load(plan), inst)
    sc = schedule_from_metrics(m, inst)
    sc.shared = True
    ev = [e for e in predicted_events(sc) if e["ph"] == "X"]
    # no compute of a stage starts before its last message ends
    for si in range(len(m.stages)):
        msgs = [e for e in ev if e["cat"] == "message" and e["args"]["stage"] == si]
        comp = [e for e in ev if e["cat"] == "compute" and e["args"]["stage"] == si]
        if msgs:
            assert min(c["ts"] for c in comp) >= max(x["ts"] + x["dur"] for x in msgs) - 1e-3


def test_run_trace_has_both_schedules(edge3, tmp_path):
    pytest.importorskip("mpi4py")
    from milp_planner.deploy.launcher import find_mpiexec
    from milp_planner.errors import PlannerError

    try:
        find_mpiexec()
    except PlannerError:
        pytest.skip("no mpiexec")
    d, plan = edge3
    dep = tmp_path / "dep"
    assert main(["deploy", "example:edge-3dev", str(plan), "--out", str(dep)]) == 0
    out = tmp_path / "run.json"
    assert main(["run", str(dep), "--repeat", "1", "--trace", str(out)]) == 0
    ev = check_trace(json.loads(out.read_text()), {1, 2})
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names[1].startswith("predicted") and names[2].startswith("measured")
    measured = [e for e in ev if e["pid"] == 2 and e["ph"] == "X"]
    predicted = [e for e in ev if e["pid"] == 1 and e["ph"] == "X"]
    # the same stage parts and messages, measured
    assert sum(e["cat"] == "compute" for e in measured) == sum(e["cat"] == "compute" for e in predicted)
    assert sum(e["cat"] == "message" for e in measured) == sum(e["cat"] == "message" for e in predicted)
    shutil.rmtree(dep)

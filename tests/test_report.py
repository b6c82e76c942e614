"""``milp-planner report``: files, cache, resume, crashes, timeouts, Dask, and the HTML in Chromium.

The planners here are small fakes registered for the test (the real ones are tested on their
own): an exact one that certifies the best of a few simple plans, a seeded one, one that
crashes, one whose process dies, and one that sleeps past any time limit. Each call appends a
line to the file named by ``$MILP_REPORT_TEST_COUNTER``, so a test can count runs made in
worker processes.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from timing import cpu_seconds

from milp_planner.errors import PlannerError
from milp_planner.cost.evaluator import evaluate
from milp_planner.space.geometry import round_half_up
from milp_planner.space.plan import Part, Plan, Stage
from milp_planner.planners.base import Planner, PlanResult

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "instances" / "examples" / "tiny-2dev.yaml"
COUNTER_ENV = "MILP_REPORT_TEST_COUNTER"


# -- fake planners ------------------------------------------------------------------------


def _count(name: str) -> None:
    path = os.environ.get(COUNTER_ENV)
    if path:
        with open(path, "a") as f:
            f.write(name + "\n")


def single_device_plan(inst, d: int) -> Plan:
    dev = inst.devices[d].name
    return Plan(inst.name, [Stage(i, i, "none", (Part(dev),)) for i in range(len(inst.graph.layers))])


def split_plan(inst) -> Plan:
    """Every row-splittable layer cut in two equal halves over the first two devices."""
    a, b = inst.devices[0].name, inst.devices[1].name
    stages = []
    for layer in inst.graph.layers:
        h = layer.rows
        if layer.row_splittable and h >= 2:
            cut = round_half_up(h, 2)
            stages.append(Stage(layer.id, layer.id, "rows", (Part(a, (0, cut)), Part(b, (cut, h)))))
        else:
            stages.append(Stage(layer.id, layer.id, "none", (Part(a),)))
    return Plan(inst.name, stages)


class FakeExact(Planner):
    name = "fake-exact"
    description = "certifies the best of a few simple plans"
    exact = True

    def search(self, inst, ctx):
        _count(self.name)
        plans = [single_device_plan(inst, d) for d in range(len(inst.devices))] + [split_plan(inst)]
        best = min(plans, key=lambda p: evaluate(p, inst).value(ctx.objective))
        value = evaluate(best, inst).value(ctx.objective)
        return PlanResult(self.name, "optimal", ctx.objective, plan=best, bound=value)


class FakeSeeded(Planner):
    name = "fake-seeded"
    description = "one device, chosen by the seed"
    seeded = True

    def search(self, inst, ctx):
        _count(self.name)
        return single_device_plan(inst, ctx.seed % len(inst.devices))


class FakeCrash(Planner):
    name = "fake-crash"
    description = "raises"

    def search(self, inst, ctx):
        _count(self.name)
        raise RuntimeError("boom: the fake planner crashed")


class FakeDie(Planner):
    name = "fake-die"
    description = "its process dies"

    def search(self, inst, ctx):
        _count(self.name)
        os._exit(3)


class FakeSleep(Planner):
    name = "fake-sleep"
    description = "ignores its time limit"

    def search(self, inst, ctx):
        _count(self.name)
        time.sleep(120)
        return single_device_plan(inst, 0)


FAKES = {c.name: c for c in (FakeExact, FakeSeeded, FakeCrash, FakeDie, FakeSleep)}


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """Register the fakes as the only planners; returns a function counting calls by name."""
    import milp_planner.cli
    import milp_planner.planners as reg
    from milp_planner.report import add_report_parser

    original = reg.planner_class

    def planner_class(name):
        return FAKES[name] if name in FAKES else original(name)

    monkeypatch.setattr(reg, "planner_class", planner_class)
    monkeypatch.setattr(reg, "planner_names", lambda: ["fake-exact", "fake-seeded"])
    monkeypatch.setitem(milp_planner.cli.COMMANDS, "report", add_report_parser)
    counter = tmp_path / "calls.txt"
    counter.write_text("")
    monkeypatch.setenv(COUNTER_ENV, str(counter))

    def calls(name=None):
        lines = counter.read_text().split()
        return len(lines) if name is None else lines.count(name)

    return calls


SLOW_PAIR = """\
# tiny_chain on two slow devices over a fast link: splitting rows pays off here
name: tiny-2dev-slow
model: zoo:tiny_chain
dtype_bytes: 1
devices:
  - name: slow-a
    compute: {model: linear, macs_per_s: 2.0e8, overhead_s: 1e-5}
    power_w: {compute: 2, tx: 1, rx: 1}
  - name: slow-b
    compute: {model: linear, macs_per_s: 3.0e8, overhead_s: 1e-5}
    power_w: {compute: 3, tx: 1, rx: 1}
network: {bandwidth_mbps: 1000, latency_ms: 0.01, source: {device: slow-a}, sink: {device: slow-a}}
search: {fusion_limit: 1, max_parts: 2, splits: [equal], axes: [rows]}
objective: latency
"""


@pytest.fixture
def instances(tmp_path):
    """The shipped tiny-2dev example, and tiny_chain on two slow devices (written here)."""
    assert TINY.exists(), TINY
    slow = tmp_path / "tiny-2dev-slow.yaml"
    slow.write_text(SLOW_PAIR)
    return [TINY, slow]


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cli(*args) -> int:
    from milp_planner.cli import main

    return main(["report", *map(str, args)])


# -- tests ----------------------------------------------------------------------------------


def test_report_writes_every_file(fakes, instances, tmp_path):
    out = tmp_path / "rep"
    assert cli(*instances, "--planners", "all", "--repeats", "2", "--time-limit", "20", "--out", out,
               "--workers", "2", "--quiet") == 0
    for name in ("results.csv", "report.md", "report.html"):
        assert (out / name).is_file() and (out / name).stat().st_size > 500, name
    rows = read_csv(out / "results.csv")
    # 2 instances x (fake-exact once + fake-seeded over seeds 0, 1)
    assert len(rows) == 6
    assert fakes() == 6
    assert {(r["instance"], r["planner"], r["seed"]) for r in rows} == {
        (i, p, s) for i in ("tiny-2dev", "tiny-2dev-slow") for p, s in
        (("fake-exact", "0"), ("fake-seeded", "0"), ("fake-seeded", "1"))}
    for col in ("objective", "value", "latency_s", "energy_j", "period_s", "throughput_ips", "max_memory_bytes",
                "feasible", "in_space", "bound", "best_bound", "gap", "certified", "status", "runtime_s", "error",
                "milp_planner_version", "python_version", "highspy_version", "ortools_version", "torch_version"):
        assert col in rows[0], col
    for r in rows:
        assert r["status"] in ("optimal", "feasible"), r
        assert r["certified"] == "true"
        assert r["objective"] == "latency"
        value, best = float(r["value"]), float(r["best_bound"])
        assert float(r["gap"]) == pytest.approx((value - best) / value)
        assert float(r["gap"]) >= -1e-12
        if r["planner"] == "fake-exact":
            assert float(r["gap"]) == 0
    # the slow pair is solved by splitting rows over both devices
    fast = [r for r in rows if r["instance"] == "tiny-2dev-slow" and r["planner"] == "fake-exact"][0]
    assert float(fast["value"]) < min(float(r["value"]) for r in rows
                                      if r["instance"] == "tiny-2dev-slow" and r["planner"] == "fake-seeded")

    md = (out / "report.md").read_text()
    for text in ("Gap to the best proven bound", "| instance |", "fake-exact", "fake-seeded", "tiny-2dev-slow",
                 "figures/gaps.png", "figures/time_quality.png", "Best plan per instance"):
        assert text in md, text
    for img in ("gaps.png", "time_quality.png", "plan-00-tiny-2dev.png", "gantt-00-tiny-2dev.png",
                "plan-01-tiny-2dev-slow.png", "gantt-01-tiny-2dev-slow.png"):
        assert (out / "figures" / img).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", img
        assert f"figures/{img}" in md
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 6
    # self-contained: nothing is fetched from anywhere
    for bad in ("<script", "<link", "http://", "https://", 'src="figures', "@import"):
        assert bad not in html, bad
    assert "0 %" in html and "✓" in html


def test_second_report_is_cached(fakes, instances, tmp_path):
    out = tmp_path / "rep"
    args = [instances[0], "--planners", "fake-exact,fake-seeded", "--repeats", "2", "--out", out, "--quiet"]
    assert cli(*args) == 0
    assert fakes() == 3
    first = read_csv(out / "results.csv")
    assert (out / ".cache").is_dir() and len(list((out / ".cache").glob("*.json"))) == 3
    t0 = time.perf_counter()
    c0 = cpu_seconds(children=True)
    assert cli(*args) == 0
    assert fakes() == 3  # no planner ran again
    second = read_csv(out / "results.csv")
    assert all(r["cached"] == "true" for r in second)
    assert [r["value"] for r in first] == [r["value"] for r in second]
    assert cpu_seconds(children=True) - c0 < 15
    # a different time limit, seed count or option is a different run
    assert cli(*args[:-1], "--time-limit", "7", "--quiet") == 0
    assert fakes() == 6
    # an edited instance file is a different instance
    edited = tmp_path / "edited.yaml"
    edited.write_text(instances[0].read_text() + "\n# edited\n")
    assert cli(edited, *args[1:]) == 0
    assert fakes() == 9


def test_interrupted_report_resumes_from_cache(fakes, instances, tmp_path):
    from milp_planner.report import run_report

    out = tmp_path / "rep"
    seen = []

    def stop_after_two(task, rec):
        seen.append(task.key)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_report(instances, "fake-exact,fake-seeded", repeats=2, out=out, workers=1, progress=False,
                   on_result=stop_after_two)
    assert not (out / "results.csv").exists() and not (out / "report.html").exists()  # whole or not at all
    assert len(list((out / ".cache").glob("*.json"))) == 2
    ran_before = fakes()
    outcome = run_report(instances, "fake-exact,fake-seeded", repeats=2, out=out, workers=2, progress=False)
    assert outcome.cached == 2 and outcome.ran == 4
    assert fakes() - ran_before == 4
    assert len(read_csv(out / "results.csv")) == 6


def test_crashing_planner_is_recorded_and_the_report_goes_on(fakes, instances, tmp_path):
    out = tmp_path / "rep"
    assert cli(instances[0], "--planners", "fake-crash,fake-die,fake-exact", "--out", out, "--workers", "2",
               "--quiet") == 0
    rows = {r["planner"]: r for r in read_csv(out / "results.csv")}
    assert rows["fake-crash"]["status"] == "error"
    assert "RuntimeError: boom" in rows["fake-crash"]["error"]
    assert rows["fake-crash"]["value"] == ""
    assert rows["fake-die"]["status"] == "error"
    assert "died" in rows["fake-die"]["error"]
    assert rows["fake-exact"]["status"] == "optimal"
    md = (out / "report.md").read_text()
    assert "boom" in md and "Runs that failed" in md
    # crashes are cached too; --retry-failed runs them again
    n = fakes()
    assert cli(instances[0], "--planners", "fake-crash,fake-exact", "--out", out, "--quiet") == 0
    assert fakes() == n
    assert cli(instances[0], "--planners", "fake-crash,fake-exact", "--out", out, "--quiet", "--retry-failed") == 0
    assert fakes() == n + 1


def test_run_past_the_time_limit_is_killed_as_timeout(fakes, instances, tmp_path):
    from milp_planner.report import run_report

    t0 = time.perf_counter()

    c0 = cpu_seconds(children=True)
    outcome = run_report([instances[0]], "fake-sleep,fake-exact", time_limit=0.2, out=tmp_path / "rep",
                         workers=2, progress=False, grace_s=0.5)
    assert cpu_seconds(children=True) - c0 < 30
    rows = {r["planner"]: r for r in outcome.rows}
    assert rows["fake-sleep"]["status"] == "timeout"
    assert rows["fake-sleep"]["killed"] is True
    assert "killed" in rows["fake-sleep"]["error"]
    assert rows["fake-sleep"]["runtime_s"] < 20
    assert rows["fake-exact"]["status"] == "optimal"
    assert "timeout" in (tmp_path / "rep" / "report.md").read_text()


def test_user_errors(fakes, instances, tmp_path):
    from milp_planner.report import run_report

    with pytest.raises(PlannerError, match="unknown planner"):
        run_report([instances[0]], "nope", out=tmp_path / "r", progress=False)
    with pytest.raises(PlannerError):
        run_report([tmp_path / "missing.yaml"], "fake-exact", out=tmp_path / "r", progress=False)
    assert cli(instances[0], "--planners", "fake-exact", "--out", tmp_path / "r", "-O", "nope", "--quiet") == 2
    assert cli(instances[0], "--planners", "fake-exact", "--out", tmp_path / "r", "-O", "other.k=1", "--quiet") == 2
    assert not (tmp_path / "r" / "results.csv").exists()


def test_dask_local_cluster(fakes, instances, tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    from milp_planner.report import run_report

    # The Dask workers are separate processes that import this module by name.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), str(ROOT)]))
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        outcome = run_report([instances[0]], "fake-exact,fake-seeded,fake-crash,fake-sleep", repeats=2,
                             time_limit=0.5, grace_s=5, out=tmp_path / "rep", dask=cluster.scheduler_address,
                             progress=False)
    rows = {(r["planner"], r["seed"]): r for r in outcome.rows}
    assert len(rows) == 5 and outcome.ran == 5
    assert rows[("fake-exact", 0)]["status"] == "optimal"
    assert rows[("fake-seeded", 1)]["status"] == "feasible"
    assert rows[("fake-crash", 0)]["status"] == "error" and "boom" in rows[("fake-crash", 0)]["error"]
    assert rows[("fake-sleep", 0)]["status"] == "timeout" and rows[("fake-sleep", 0)]["killed"]
    assert (tmp_path / "rep" / "report.html").is_file()
    # the same runs are now in the cache: a local rerun runs nothing
    n = fakes()
    again = run_report([instances[0]], "fake-exact,fake-seeded,fake-crash,fake-sleep", repeats=2, time_limit=0.5,
                       grace_s=5, out=tmp_path / "rep", progress=False)
    assert again.ran == 0 and fakes() == n


CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="headless Chromium not installed (/usr/bin/chromium)")
def test_html_renders_in_headless_chromium(fakes, instances, tmp_path):
    import numpy as np
    from matplotlib import image

    out = tmp_path / "rep"
    assert cli(*instances, "--planners", "fake-exact,fake-seeded,fake-crash", "--repeats", "2", "--out", out,
               "--quiet") == 0
    shot = tmp_path / "shot.png"
    profile = tmp_path / "chrome-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1280,2000",
           (out / "report.html").resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, timeout=60)
    assert shot.is_file(), proc.stderr.decode(errors="replace")[-2000:]
    img = image.imread(str(shot))
    assert img.shape[0] >= 1900 and img.shape[1] >= 1200, img.shape
    pixels = (img[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    colors = np.unique(pixels, axis=0)
    assert len(colors) > 200, len(colors)  # text, tables and figures, not a blank page
    nonwhite = (pixels < 245).any(axis=1).mean()
    assert nonwhite > 0.05, nonwhite
    if os.environ.get("MILP_REPORT_SCREENSHOT"):
        shutil.copy(shot, os.environ["MILP_REPORT_SCREENSHOT"])


HOSTILE_NAMES = SLOW_PAIR.replace("tiny-2dev-slow", "hostile-names").replace("slow-a", "'<script>'") \
    .replace("slow-b", "'x&y \"b\"'")


def test_html_embeds_the_predicted_timeline_with_names_escaped(fakes, tmp_path):
    """Each instance's best plan is drawn inline as the SVG of ``trace.timeline_svg`` (one row per
    device, then one per link), its trace is written under traces/ and the HTML says how to open
    it; a device named ``<script>`` is text everywhere, never markup."""
    import json
    import re
    import xml.etree.ElementTree as ET
    from html import unescape

    import jsonschema

    from milp_planner.instance import load_instance
    from milp_planner.trace import TRACE_SCHEMA

    inst_file = tmp_path / "hostile.yaml"
    inst_file.write_text(HOSTILE_NAMES)
    devices = load_instance(inst_file).device_names
    assert devices == ["<script>", 'x&y "b"']
    out = tmp_path / "rep"
    assert cli(inst_file, TINY, "--planners", "fake-exact", "--repeats", "1", "--out", out, "--workers", "1",
               "--quiet") == 0
    html = (out / "report.html").read_text()
    assert "<script" not in html and "http://" not in html and "https://" not in html
    svgs = re.findall(r'<svg class="timeline".*?</svg>', html, re.S)
    assert len(svgs) == 2  # one per instance
    svg = svgs[0]  # hostile-names: the first instance given
    rows = [unescape(t) for t in re.findall(r'<g class="row">.*?<title>(.*?)</title>', svg, re.S)]
    assert rows[:2] == devices  # one row per device, in the instance's order ...
    assert len(rows) > 2 and all(" -> " in r for r in rows[2:])  # ... then one per link
    assert len(set(rows)) == len(rows)
    assert "&lt;script&gt; -&gt; " in svg or " -&gt; &lt;script&gt;" in svg  # its links too
    assert "x&amp;y &quot;b&quot;" in svg
    assert svg.count('fill="#4a7fbf"') >= 2  # compute bars on both devices (the rows are split)
    # the same timeline as a file for report.md and as a trace for Perfetto
    svg_file = out / "figures" / "timeline-00-hostile-names.svg"
    root = ET.fromstring(svg_file.read_text())  # well-formed XML on its own
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "figures/timeline-00-hostile-names.svg" in (out / "report.md").read_text()
    trace = json.loads((out / "traces" / "timeline-00-hostile-names.json").read_text())
    jsonschema.validate(trace, TRACE_SCHEMA)
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert set(rows) == tracks
    assert "traces/timeline-00-hostile-names.json" in html and "ui.perfetto.dev" in html
    assert (out / "traces" / "timeline-01-tiny-2dev.json").is_file()

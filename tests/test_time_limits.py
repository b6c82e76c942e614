"""Every planner honours its time limit, and the plan space's enumeration stops at it.

A planner given ``time_limit`` must return within 5 % + 2 s of it, with the measured solve
time (never the limit) as ``solve_time_s``. The instances here are small networks on many
devices, where several planners would otherwise run for minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from timing import cpu_seconds, limit_clock, slack
import yaml

from milp_planner.deadline import NEVER, Deadline
from milp_planner.errors import PlannerError
from milp_planner.instance import load_instance
from milp_planner.planners import get_planner, planner_names
from milp_planner.space import cuts

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "instances" / "examples" / "tiny-2dev.yaml"
LIMIT = 3.0


def write_instance(tmp_path: Path, name: str, n_devices: int = 2, **search) -> Path:
    """tiny-2dev's network on ``n_devices`` devices (alternately a Pi 4 and a Pi 5)."""
    doc = yaml.safe_load(TINY.read_text())
    doc["name"] = name
    if n_devices != 2:
        doc["devices"] = [{"name": f"d{i}", "profile": "rpi4" if i % 2 else "rpi5"} for i in range(n_devices)]
        doc["network"]["source"] = {"device": "d0"}
        doc["network"]["sink"] = {"device": "d0"}
    doc["search"].update(search)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def many_devices(tmp_path_factory):
    """200 devices: hundreds of thousands of stage options, and every single-device plan to score."""
    return load_instance(write_instance(tmp_path_factory.mktemp("many"), "tiny-200dev", 200))


@pytest.mark.slow
@pytest.mark.parametrize("name", planner_names())
def test_every_planner_honours_the_time_limit(name, many_devices):
    # imports are not the planner's time (torch alone takes seconds on a loaded machine)
    import pyomo.environ  # noqa: F401
    from ortools.sat.python import cp_model  # noqa: F401
    try:
        import torch  # noqa: F401
    except ImportError:
        pass

    planner = get_planner(name)
    with limit_clock() as clock:
        res = planner.solve(many_devices, time_limit=LIMIT)
    wall = clock.wall
    assert clock.within(LIMIT), f"{name} took {clock} on a {LIMIT} s limit"
    assert res.solve_time_s <= wall + 1e-6
    assert res.solve_time_s >= 0.5 * min(wall, LIMIT) or wall < 0.5  # measured, not made up
    assert res.status in ("optimal", "feasible", "infeasible", "timeout"), res.message


def test_bruteforce_returns_its_best_plan_at_the_limit():
    """The README's tiny example has 451,072 plans: far more than bruteforce sees in 2 s."""
    inst = load_instance(TINY)
    with limit_clock() as clock:
        res = get_planner("bruteforce").solve(inst, time_limit=2.0)
    wall = clock.wall
    assert clock.within(2.0), str(clock)
    assert res.status == "timeout" and res.bound is None and "no bound" in res.message
    assert res.plan is not None and res.metrics.feasible
    assert 0 < res.info["plans"] < res.info["plans_total"] == 451_072
    assert 1.9 <= res.solve_time_s <= wall
    assert res.value >= get_planner("dp").solve(inst).value * (1 - 1e-9)


def test_bruteforce_without_a_limit_refuses_a_large_space_at_once():
    c0 = cpu_seconds()
    with pytest.raises(PlannerError, match="451072 plans, more than max_plans 200000"):
        get_planner("bruteforce").solve(load_instance(TINY))
    assert cpu_seconds() - c0 < 10


def test_fallback_reports_the_measured_solve_time(many_devices):
    """Out of time while enumerating: the single-device fallback, timed, not the limit."""
    with limit_clock() as clock:
        res = get_planner("dp").solve(many_devices, time_limit=0.2)
    assert res.status == "timeout" and res.plan is not None
    assert res.solve_time_s != 0.2 and res.solve_time_s <= clock.wall
    assert clock.within(0.2), str(clock)


def test_an_absurd_grid_is_one_line_error(tmp_path):
    inst = load_instance(write_instance(tmp_path, "huge-grid", 4, splits=["grid:99999999999999999999"], max_parts=4))
    with pytest.raises(PlannerError, match=r"grid:99999999999999999999 gives 1.82e\+06 cut vectors for 4 parts"):
        cuts.cut_vectors(inst, 224, 4)  # C(223, 3) vectors: no planner can search them
    c0 = cpu_seconds()
    with pytest.raises(PlannerError, match="reduce search.splits or max_parts") as err:
        # tiny rows: the cut vectors fit, their bounds do not
        # 3 CPU s to refuse: a generous limit so that a loaded machine still sees the refusal
        get_planner("dp", anytime=False, relaxation="full").solve(inst, time_limit=60)
    assert "\n" not in str(err.value)
    assert cpu_seconds() - c0 < slack(60)
    c0 = cpu_seconds()
    # relaxation=auto: the coarse relaxation tries to bound the space (here it runs out of
    # time too); the best single-device plan and a floor, within the limit
    res = get_planner("dp", anytime=False).solve(inst, time_limit=10)
    assert res.plan is not None and res.bound is not None and res.bound <= res.value
    assert cpu_seconds() - c0 < slack(10)
    c0 = cpu_seconds()
    res = get_planner("dp", relaxation="full").solve(inst, time_limit=60)  # the anytime start's plan, the refusal said
    assert res.plan is not None and res.bound is not None and "reduce search.splits or max_parts" in res.message
    assert cpu_seconds() - c0 < slack(60)


def test_a_grid_finer_than_the_rows_is_every_row(tmp_path):
    """grid:G with G >= the rows cuts at every row: listed without counting to G."""
    inst = load_instance(write_instance(tmp_path, "fine-grid", splits=["grid:99999999999999999999"]))
    c0 = cpu_seconds()
    res = get_planner("dp").solve(inst, time_limit=10)
    assert cpu_seconds() - c0 < slack(10)
    assert res.status == "optimal"
    assert cuts.grid_points(7, 10**20) == range(1, 7)
    assert list(cuts.grid_points(10, 4)) == [3, 5, 8]  # round_half_up(10 j / 4), j = 1..3


def test_cut_enumeration_stops_at_the_deadline(tmp_path):
    inst = load_instance(write_instance(tmp_path, "deadline-grid", 4, splits=["grid:400"], max_parts=3))
    cuts._CACHE.clear()
    n = 400  # C(399, 2) = 79,401 cut vectors: allowed, and long enough to pass a deadline
    with pytest.raises(TimeoutError):
        cuts.cut_vectors(inst, n, 3, deadline=Deadline(time.perf_counter() - 1.0))
    assert len(cuts.cut_vectors(inst, n, 3)) == 399 * 398 // 2


def test_many_devices_with_capacity_splits_count_speeds_not_orders(tmp_path):
    """Capacity cuts depend on the devices' speeds only: 200 devices of two kinds give the cut
    vectors of two speeds (not 200 x 199 x 198 device orders)."""
    inst = load_instance(write_instance(tmp_path, "cap-200", 200, max_parts=3))
    cuts._CACHE.clear()
    c0 = cpu_seconds()
    vectors = cuts.cut_vectors(inst, 28, 3)
    assert cpu_seconds() - c0 < 10  # device orders would take hours
    assert 1 <= len(vectors) <= 2 ** 3 + 1


@pytest.mark.slow
def test_cli_with_a_huge_space_answers_in_one_line_within_the_limit(tmp_path):
    """200 identical devices, up to 3 parts: once refused (millions of device orders), now one
    device type; within the limit the CLI answers with a plan and a proven bound (or, should
    the space still be refused, one line and exit 2)."""
    path = write_instance(tmp_path, "tiny-200dev-p3", 200, max_parts=3)
    c0 = cpu_seconds(children=True)
    out = subprocess.run([sys.executable, "-m", "milp_planner", "solve", str(path), "--planner", "milp",
                          "--time-limit", "10", "--quiet", "--json", "--compare-time-limit", "1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert cpu_seconds(children=True) - c0 < slack(10) + 3 * slack(1) + 5  # + the interpreter's start-up
    assert "Traceback" not in out.stderr
    if out.returncode == 2:
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "options" in lines[0]
        return
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["status"] in ("optimal", "feasible", "timeout") and res["plan"] is not None
    assert res["bound"] is not None and res["bound"] <= res["objective"] * (1 + 1e-9) and res["bound_source"]


WIDE = ROOT / "instances" / "autodice" / "densenet121-xaviernx-5.yaml"


@pytest.fixture(scope="module")
def wide_dag():
    """DenseNet-121 on five Xavier NX: a wide DAG whose layout relaxation alone outlasts 10 s
    (millions of classes where dense blocks concatenate)."""
    return load_instance(WIDE)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dp", "milp", "cpsat"])
def test_exact_planners_stop_at_the_limit_on_a_wide_dag(name, wide_dag):
    """The relaxation's class merge ran 3-7 s past a 10 s limit before it checked the deadline
    every few thousand classes; the run still returns a plan and a proven bound."""
    import pyomo.environ  # noqa: F401  (imports are not the planner's time)
    from ortools.sat.python import cp_model  # noqa: F401

    limit = 10.0
    with limit_clock() as clock:
        res = get_planner(name).solve(wide_dag, objective="latency", time_limit=limit)
    assert clock.within(limit), f"{name} took {clock} on a {limit} s limit"
    assert res.solve_time_s <= clock.wall + 1e-6
    assert res.plan is not None and res.metrics.feasible and res.metrics.in_space
    assert res.bound is not None and 0 < res.bound <= res.value * (1 + 1e-9)


class _LateContext:
    """A solve context whose time ran out."""

    objective, threads, seed = "latency", 1, 0
    deadline = Deadline(0.0)  # long passed

    def report(self, **info) -> None:
        pass


@pytest.mark.parametrize("driver", ["solve_highs", "solve_cpsat"])
def test_a_driver_past_the_deadline_returns_the_warm_start_without_building(driver, monkeypatch):
    """Building a MILP or CP-SAT model over many arcs takes seconds: past the deadline the
    driver returns the warm start, stopped, and builds nothing."""
    from formulations import milp, cpsat
    from milp_planner.engine import drivers
    from formulations.stagegraph import build_stage_graph
    from formulations.warmstart import dp_warm_start

    def never(*a, **k):
        raise AssertionError("a model was built past the deadline")

    monkeypatch.setattr(milp, "build_milp", never)
    monkeypatch.setattr(cpsat, "build_cpsat", never)
    inst = load_instance(TINY)
    sg = build_stage_graph(inst)
    ws = dp_warm_start(sg, "latency")
    out = getattr(drivers, driver)(sg, _LateContext(), ws, fix_arcs=False)
    assert out.stopped and not out.optimal and out.arcs == list(ws.arcs)
    assert out.value == pytest.approx(sg.path_value(ws.arcs, "latency")) and out.bound == ws.bound


@pytest.mark.parametrize("every", [1, 3, 4096])
def test_class_merge_in_chunks_is_the_plain_merge(every, monkeypatch):
    """The layout relaxation merges classes in chunks (to check the deadline between them):
    the same ids, in the same order, as one pass."""
    from formulations import relaxation

    monkeypatch.setattr(relaxation, "CHECK_EVERY", every)
    exits = [(("a", 1),), (("b", 2), ("c", 0)), ()]
    carries = [(("d", i),) for i in range(7)] + [()]
    plain: dict = {(): 0}
    want = [[plain.setdefault(tuple(sorted(x + y)), len(plain)) for y in carries] for x in exits]
    nxt: dict = {(): 0}
    got = relaxation._merge_classes(nxt, exits, carries, NEVER)
    assert got.tolist() == want and list(nxt) == list(plain)
    with pytest.raises(TimeoutError):
        relaxation._merge_classes({}, exits, carries, Deadline(time.perf_counter() - 1.0))

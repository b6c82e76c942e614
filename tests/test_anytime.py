"""Anytime exact planners: floors valid for every plan, the baseline start, bound sources, the
memory budget (docs/exact.md, "Anytime")."""

import json
from dataclasses import replace
from fractions import Fraction as F
from pathlib import Path

import pytest
from timing import limit_clock
from builders import chain_graph, device, fc_graph, make_instance, residual_graph

from formulations.budget import (DEFAULT_HEADROOM, STOP_SHARE, MemoryBudgetExceeded, active_budget, check_memory,
                                 memory_budget, parse_size, rss_bytes)
from milp_planner.cost.floors import Floor, lower_floor
from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance import SearchSpace
from milp_planner.instance.devices import CostModel, Device, Power
from milp_planner.instance.network import Endpoint
from milp_planner.instance.reader import load_instance
from milp_planner.planners import get_planner
from milp_planner.planners.anytime_start import (PATIENCE_S, START_BASELINES, project, run_start, start_budget,
                                                 start_patience)

OBJECTIVES = ["latency", "energy", "period", "memory"]


def _tiny(graph, devs, medium="switched", external=False, search=None):
    n = len(devs)
    bw = [[0.0 if i == j else 100.0 + 50 * i + 30 * j for j in range(n)] for i in range(n)]
    src = Endpoint(None, tuple(150.0 - 20 * i for i in range(n)), tuple(0.02 for _ in range(n))) if external else 0
    return make_instance(graph, devs, bw=bw, lat=0.05, medium=medium, source=src, sink=n - 1,
                         search=search or SearchSpace(2, n, ("equal", "grid:4"), ("rows", "channels")))


def _table_device(name, graph, speed, bend):
    """A ``table`` device whose time is not proportional to the fraction (bend != 1)."""
    table = {l.name: ((F(1, 2), F(l.work + 5) / speed * bend), (F(1), F(l.work + 5) / speed)) for l in graph.layers}
    return Device(name, CostModel("table", F(speed), F(1, 100), table=table), power=Power(F(3), F(1), F(1)))


def _roof_device(name):
    return Device(name, CostModel("roofline", F(3000), F(1, 200), mem_bytes_per_s=F(400)), power=Power(F(5), F(1), F(2)))


def _crossed_tables():
    """Each device is fast on the layer the other is slow on: the per-device whole-model times
    (the evaluator's ``lower_bound_s``) say nothing about a plan that uses each for its layer."""
    g = chain_graph(2)
    t = Device("t", CostModel("table", None, F(0), table={"c0": ((F(1), F(1, 100)),), "c1": ((F(1), F(1)),)}),
               power=Power(F(1), F(1), F(1)))
    u = Device("u", CostModel("table", None, F(0), table={"c0": ((F(1), F(1)),), "c1": ((F(1), F(1, 100)),)}),
               power=Power(F(2), F(1), F(1)))
    return _tiny(g, [t, u])


FLOOR_CASES = {
    "table-crossed": _crossed_tables,
    "chain-linear": lambda: _tiny(chain_graph(3), [device("a", 1000, "0.01"), device("b", 2500, "0.02", power=(4, 1, 2))]),
    "residual-shared": lambda: _tiny(residual_graph(), [device("a", 1000), device("b", 2000, power=(1, 1, 1))],
                                     medium="shared"),
    "residual-external-3": lambda: _tiny(residual_graph(), [device("a", 1000), device("b", 2000), _roof_device("c")],
                                         external=True, search=SearchSpace(1, 3, ("equal",), ("rows", "channels"))),
    "fc": lambda: _tiny(fc_graph(), [device("a", 1000, "0.001"), device("b", 3000, "0.002")]),
    "table-concave": lambda: _tiny(chain_graph(2), [_table_device("t", chain_graph(2), 2000, F(7, 10)),
                                                    device("b", 1500)]),
    "table-convex": lambda: _tiny(chain_graph(2), [_table_device("t", chain_graph(2), 2000, F(3, 10)),
                                                   _table_device("u", chain_graph(2), 900, F(9, 10))]),
    "rows-only-1part": lambda: _tiny(chain_graph(3), [device("a", 1000), device("b", 3000)],
                                     search=SearchSpace(1, 1, ("equal",), ("rows",))),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.endswith("-3") else c
                                  for c in sorted(FLOOR_CASES)])
def test_floor_below_brute_force_and_random_plans(case):
    inst = FLOOR_CASES[case]()
    for objective in OBJECTIVES:
        floor = lower_floor(inst, objective)
        assert isinstance(floor, Floor) and floor.value >= 0 and floor.source
        best = get_planner("bruteforce").solve(replace(inst, constraints=replace(inst.constraints, memory=False)),
                                               objective=objective)
        assert floor.value <= best.value * (1 + 1e-9), (objective, floor, best.value)
        rnd = get_planner("random", samples=40).solve(inst, objective=objective, seed=3)
        assert floor.value <= rnd.value * (1 + 1e-9), (objective, floor, rnd.value)


def test_floor_is_not_trivial():
    inst = FLOOR_CASES["chain-linear"]()
    for objective in OBJECTIVES:
        best = get_planner("bruteforce").solve(inst, objective=objective).value
        assert lower_floor(inst, objective).value >= 0.2 * best, objective


# -- the anytime start, the bound and its source ------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
FLOOR_SOURCES = ("fluid", "compute-only", "flow", "weights")
SOURCES = ("certified", "rounds", "coarse") + FLOOR_SOURCES


@pytest.mark.slow
def test_one_second_on_seven_pis_is_no_worse_than_the_fast_baselines():
    """The issue's case: dp used to return the single-device plan at 2.58 s (coopai: 0.477 s)."""
    inst = load_instance(ROOT / "instances/coopai/vgg16-rpi4-7.yaml")
    with limit_clock() as clock:
        res = get_planner("dp").solve(inst, time_limit=1.0)
    assert clock.within(1.0), (str(clock), res.info.get("anytime"))
    assert res.plan is not None and res.metrics.in_space and res.metrics.feasible
    start = res.info["anytime"]
    ran = start["values"]
    assert "offload" in ran and "coedge" in ran, start
    assert res.value <= min(ran.values()) * (1 + 1e-12)
    # the baselines on their own, where they are in the space (coedge) or single-device (offload)
    for name in ("offload", "coedge"):
        alone = get_planner(name).solve(inst)
        assert alone.metrics.in_space and res.value <= alone.value * (1 + 1e-12), name
    assert res.value < 0.5  # not the single-device plan (2.58 s)
    assert res.bound is not None and 0 < res.bound <= res.value
    assert res.bound_source in SOURCES


def test_a_tiny_limit_still_returns_a_plan_and_a_bound():
    inst = FLOOR_CASES["chain-linear"]()
    for planner in ("dp", "milp", "cpsat"):
        res = get_planner(planner).solve(inst, objective="latency", time_limit=0.05)
        assert res.plan is not None and res.bound is not None and res.bound <= res.value
        assert res.bound_source in SOURCES


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_anytime_on_or_off_same_optimum(objective):
    inst = FLOOR_CASES["residual-shared"]()
    on = get_planner("dp").solve(inst, objective=objective)
    off = get_planner("dp", anytime=False).solve(inst, objective=objective)
    assert "anytime" in on.info and "anytime" not in off.info
    if objective in ("latency", "energy"):
        assert on.status == off.status == "optimal"
        assert on.value == pytest.approx(off.value, rel=1e-9)
        assert on.bound_source in ("certified", "rounds")
    else:  # dp is not exact there: the start may only improve its plan
        assert on.value <= off.value * (1 + 1e-12)
    for res in (on, off):
        assert res.bound <= res.value * (1 + 1e-12) and res.bound_source in SOURCES


def test_the_start_never_beats_a_certified_optimum():
    inst = FLOOR_CASES["chain-linear"]()
    ref = get_planner("bruteforce").solve(inst, objective="latency")
    res = get_planner("milp").solve(inst, objective="latency")
    assert res.status == "optimal" and res.value == pytest.approx(ref.value, rel=1e-6)
    for v in res.info["anytime"]["values"].values():
        assert v >= ref.value * (1 - 1e-9)


def test_start_order_runs_hybrid_after_coopai_only_on_small_fleets():
    from milp_planner.planners.anytime_start import start_order

    small, large = start_order("energy", 4), start_order("energy", 16)
    assert small.index("coopai") < small.index("hybrid") and large.index("hybrid") < large.index("coopai")
    assert start_order("period", 4).index("hybrid") == 4 == start_order("period", 16).index("hybrid")
    assert start_order("period", 16).index("pipeedge") == 3
    assert sorted(small) == sorted(large) == sorted(START_BASELINES)
    # the baselines of a few milliseconds run before pipeedge's DP over device multisets
    for objective in ("latency", "energy", "period", "memory"):
        for n in (2, 4, 16):
            order = start_order(objective, n)
            assert order[:4] == ("offload", "modnn", "coedge", "pipeedge"), (objective, n, order)


def test_a_short_start_on_a_large_fleet_runs_the_cheap_splits_before_pipeedge():
    """A 6-layer chain over 16 devices: pipeedge takes about 0.66 s there. Run second (before
    modnn and coedge), it spent a 0.5 s start alone, and ``dp`` returned the one-device plan
    (3.98 s) at every limit up to 2.5 s; now modnn's plan (1.31 s, projected into the space)
    comes first. (offload, run before modnn, takes about 0.12 s: the budget leaves it 4x.)"""
    devs = [device(f"d{i}", 1000 + 37 * i, "0.01") for i in range(16)]
    bw = [[0.0 if i == j else 3000.0 + 10 * i for j in range(16)] for i in range(16)]
    inst = make_instance(chain_graph(6), devs, bw=bw, lat=0.001,
                         search=SearchSpace(3, 4, ("equal", "capacity"), ("rows", "channels")))
    rep = run_start(inst, "latency", 0.5, time_limit=1.0)
    assert rep.outcomes["modnn"].endswith("(projected into the space)"), rep.outcomes
    assert rep.start is not None and rep.start.value < 1.35 < 3.98 <= rep.values["offload"]


def test_start_budget():
    assert start_budget(None) == 2.0
    assert start_budget(60) == 2.0 and start_budget(10) == 1.0
    assert start_budget(1) == 0.5 and start_budget(0.2) == 0.2 and start_budget(0) == 0
    # larger fleets: 0.25 s more per device beyond 4, still within 10 % of the limit
    assert start_budget(60, 4) == 2.0 and start_budget(60, 8) == 3.0 and start_budget(60, 16) == 5.0
    assert start_budget(30, 16) == 3.0 and start_budget(None, 16) == 2.0


@pytest.mark.parametrize("path", ["instances/examples/edge-3dev.yaml", "instances/examples/tiny-residual-3dev.yaml"])
def test_projection_puts_every_baseline_plan_into_the_space(path):
    inst = load_instance(ROOT / path)
    outside = 0
    for name in START_BASELINES:
        res = get_planner(name).solve(inst, time_limit=5)
        if res.plan is None:
            continue
        moved = project(res.plan, inst)
        m = evaluate(moved, inst)
        assert m.in_space, (name, m.space_reasons)
        if not res.metrics.in_space:
            outside += 1
        else:  # a plan already in the space keeps its stages
            assert [(s.first, s.last) for s in moved.stages] == [(s.first, s.last) for s in res.plan.stages]
    assert outside >= 1  # the projection had something to do


# -- the memory budget --------------------------------------------------------------------

def test_parse_size_and_option():
    assert parse_size("4GB") == 4 * 10**9 and parse_size("512 MB") == 512 * 10**6
    assert parse_size("2GiB") == 2 * 2**30 and parse_size(1000) == 1000 and parse_size("1e9") == 10**9
    for bad in ("4XB", "-1GB", "0", "GB", True, "0.5", "0.9B", "2e18", 2**61, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert parse_size(1) == 1 and parse_size("1.5") == 1 and parse_size(2**60) == 2**60  # the two ends
    with pytest.raises(PlannerError, match="memory_budget"):
        get_planner("dp", memory_budget="lots")
    assert get_planner("milp", memory_budget="3GB").memory_budget() == 3 * 10**9
    assert get_planner("cpsat").memory_budget() == 2 * 10**9
    for auto in (None, "auto", " AUTO "):  # what `milp-planner planners` shows as the default, given back
        planner = get_planner("dp") if auto is None else get_planner("dp", memory_budget=auto)
        assert planner.memory_budget() == 2 * 10**9 and planner.memory_headroom() == DEFAULT_HEADROOM
    assert get_planner("dp", memory_budget="2GB").memory_headroom() == 0


def test_check_memory_raises_only_inside_a_budget():
    check_memory()  # no budget: nothing
    with memory_budget(rss_bytes() // 2):
        with pytest.raises(MemoryBudgetExceeded, match="memory budget"):
            check_memory()
    with memory_budget(rss_bytes() + 10**12):
        check_memory()
    with memory_budget(int(rss_bytes() / STOP_SHARE * 0.99)):  # under the budget, past the share: stop
        with pytest.raises(MemoryBudgetExceeded):
            check_memory()
    check_memory()


@pytest.mark.parametrize("anytime", [True, False])
def test_a_budget_below_the_current_memory_stops_with_a_plan_and_a_bound(anytime):
    inst = FLOOR_CASES["chain-linear"]()
    res = get_planner("dp", memory_budget=max(1, rss_bytes() // 2), anytime=anytime).solve(inst, objective="latency")
    assert res.info.get("stopped_by") == "memory budget" and "memory budget" in res.message
    assert res.plan is not None and res.metrics.in_space and res.metrics.feasible
    assert res.bound is not None and res.bound <= res.value and res.bound_source in SOURCES
    if anytime:
        assert res.info["plan_from"].startswith("anytime start")


def test_the_default_budget_keeps_its_headroom_above_what_the_process_holds(monkeypatch):
    """A host holding 1.5 GB (after its release) gets 1 GB more under the default budget, and
    the whole-process budget it asked for when it gave one; a fresh process keeps 2 GB."""
    import formulations.budget as budget

    rss = [1_500_000_000]
    monkeypatch.setattr(budget, "rss_bytes", lambda: rss[0])
    monkeypatch.setattr(budget, "release_memory", lambda: rss[0])
    with memory_budget(2 * 10**9, DEFAULT_HEADROOM):
        assert active_budget() == 2_500_000_000
        rss[0] = 2_200_000_000  # past 90 % of 2 GB, under 90 % of 2.5
        check_memory(force=True)
        rss[0] = 2_300_000_000
        with pytest.raises(MemoryBudgetExceeded) as err:
            check_memory(force=True)
    msg = str(err.value)
    assert msg.startswith("the default memory budget, 1 GB above what the process held, 2.5 GB, was hit"), msg
    assert "held 1.5 GB when the budget began" in msg and err.value.grown and err.value.budget == 2_500_000_000
    assert active_budget() is None
    rss[0] = 1_500_000_000
    with memory_budget(2 * 10**9):  # a budget given: the whole process
        assert active_budget() == 2 * 10**9
        rss[0] = 1_900_000_000
        with pytest.raises(MemoryBudgetExceeded, match="^the memory budget of 2 GB was hit") as err:
            check_memory(force=True)
    assert not err.value.grown
    rss[0] = 3 * 10**9
    with memory_budget(2 * 10**9):  # held past a given budget: it stays, and the search stops
        assert active_budget() == 2 * 10**9
        with pytest.raises(MemoryBudgetExceeded, match="^the memory budget of 2 GB was hit"):
            check_memory(force=True)
    rss[0] = 150_000_000  # a solve from the command line: the default stays 2 GB
    with memory_budget(2 * 10**9, DEFAULT_HEADROOM):
        assert active_budget() == 2 * 10**9
    rss[0] = 10**9  # the headroom exactly reaches the budget: not grown, and the stop says so
    with memory_budget(2 * 10**9, 10**9):
        rss[0] = 1_900_000_000
        with pytest.raises(MemoryBudgetExceeded, match="^the memory budget of 2 GB was hit") as err:
            check_memory(force=True)
    assert not err.value.grown


def test_a_planner_in_a_process_that_holds_memory_searches_under_its_default_budget(monkeypatch):
    """A research loop or a test run may hold 1.85 GB before it calls a planner (the slow suite's
    worker did, and the 2 GB default stopped dp on VGG16 with 0.2 GB to spare): the default
    budget then leaves it 1 GB, and only a budget the caller gives counts the whole process."""
    import formulations.budget as budget

    real = budget.rss_bytes
    base = real()
    monkeypatch.setattr(budget, "rss_bytes", lambda: real() - base + 1_850_000_000)  # the host's own data
    inst = FLOOR_CASES["chain-linear"]()
    res = get_planner("dp").solve(inst, objective="latency", time_limit=30)
    assert res.status == "optimal" and "stopped_by" not in res.info, res.message
    res = get_planner("dp", memory_budget="2GB").solve(inst, objective="latency", time_limit=30)
    assert res.info.get("stopped_by") == "memory budget" and "the memory budget of 2 GB" in res.message


@pytest.mark.parametrize("released", [True, False])
def test_after_a_memory_stop_the_improvement_loop_runs_only_when_the_memory_was_released(monkeypatch, released):
    import milp_planner.planners.exact as exact

    budget = max(1, rss_bytes() // 2)
    monkeypatch.setattr(exact, "release_memory", lambda: 0 if released else budget)
    inst = FLOOR_CASES["chain-linear"]()
    res = get_planner("dp", memory_budget=budget).solve(inst, objective="latency", time_limit=10)
    assert res.info.get("stopped_by") == "memory budget" and res.plan is not None
    if released:  # the loop's first search stops at the budget too, and the loop with it
        assert [t["settled"] for t in res.info["improve"]["tried"]] == [False]
    else:
        assert "above 60% of the" in res.info["improve"]["skipped"]


@pytest.mark.slow
def test_a_budget_50mb_above_the_current_memory_on_a_hard_instance():
    inst = load_instance(ROOT / "instances/coopai/vgg16-rpi4-7.yaml")
    budget = rss_bytes() + 50 * 10**6
    res = get_planner("dp", memory_budget=budget).solve(inst, time_limit=30)
    assert res.plan is not None and res.metrics.in_space and res.bound is not None and res.bound <= res.value
    assert res.bound_source in SOURCES
    if res.info.get("stopped_by") == "memory budget":
        assert "memory budget" in res.message
    else:
        assert res.status in ("optimal", "timeout", "feasible")


# -- JSON -----------------------------------------------------------------------------------

def test_solve_json_carries_bound_source(capsys):
    from milp_planner.cli import main

    def run(*extra):
        assert main(["solve", "example:tiny-2dev", "--planner", "dp", "--json", "--quiet", "--compare", "none",
                     *extra]) == 0
        return json.loads(capsys.readouterr().out)

    out = run("--time-limit", "60")
    assert out["status"] == "optimal" and out["bound_source"] in ("certified", "rounds")
    assert out["info"]["anytime"]["start"] in START_BASELINES
    out = run("-O", "memory_budget=1MB")
    assert out["bound_source"] in FLOOR_SOURCES + ("rounds",) and out["bound"] <= out["objective"]
    assert out["info"]["stopped_by"] == "memory budget"


@pytest.mark.slow
@pytest.mark.parametrize("planner", ["dp", "milp", "cpsat"])
def test_one_second_on_sixteen_devices_returns_a_plan_and_a_bound_in_time(planner):
    """16 devices of 4 types with memory caps: the relaxation cannot finish within 1 s and most
    baselines' plans break a cap, yet the start finds one that fits (modnn's, projected)."""
    import pyomo.environ  # noqa: F401 - imports are not the planner's time
    from ortools.sat.python import cp_model  # noqa: F401

    inst = load_instance(ROOT / "instances/fleet/vgg16-16dev-4types.yaml")
    with limit_clock() as clock:
        res = get_planner(planner).solve(inst, objective="latency", time_limit=1.0)
    assert clock.within(1.0), (str(clock), res.info.get("anytime"))
    assert res.solve_time_s <= clock.wall
    assert res.plan is not None and res.metrics.in_space and res.metrics.feasible, res.message
    assert res.bound is not None and 0 < res.bound <= res.value
    assert res.bound_source in SOURCES


def test_the_start_goes_on_while_no_plan_fits():
    inst = load_instance(ROOT / "instances/fleet/vgg16-16dev-4types.yaml")
    # offload's single device overflows its memory; with time to spare the next baselines run
    report = run_start(inst, "latency", budget=0.0, time_limit=30.0)
    assert report.start is not None and "not usable" in report.outcomes["offload"]
    assert start_patience(0.0, 30.0) == PATIENCE_S and start_patience(1.0, 1.0) == 0.0
    assert start_patience(2.0, None) == PATIENCE_S
    # without a limit to spare nothing is started
    report = run_start(inst, "latency", budget=0.0, time_limit=0.0)
    assert report.start is None and all("not run" in o for o in report.outcomes.values())


def test_coedge_energy_lp_filled_cheapest_first_is_scipys_optimum():
    from scipy.optimize import linprog

    from milp_planner.planners.coedge import _fill, energy_shares

    rng = __import__("random").Random(7)
    decided = 0
    for _ in range(300):
        n = rng.randint(1, 6)
        A = [rng.uniform(0.1, 2.0) for _ in range(n)]
        K = [rng.uniform(0.0, 0.5) for _ in range(n)]
        E = [rng.choice([1.0, 2.0, rng.uniform(0.5, 3.0)]) for _ in range(n)]
        deadline = rng.uniform(0.2, 2.5)
        bounds = [(0.0, (deadline - K[i]) / A[i]) if K[i] < deadline else (0.0, 0.0) for i in range(n)]
        ref = linprog(E, A_eq=[[1.0] * n], b_eq=[1.0], bounds=bounds, method="highs")
        ok, x = _fill(E, [hi for _, hi in bounds])
        if not ok:
            continue
        decided += 1
        assert (x is None) == (not ref.success)
        if x is not None:
            assert max(abs(a - b) for a, b in zip(x, ref.x)) < 1e-9
            assert energy_shares(A, K, E, deadline) == x
    assert decided > 100


def test_a_budget_begun_above_half_its_size_releases_garbage_and_says_what_was_held(monkeypatch):
    """The budget counts the whole process: one that begins holding more than
    ``RELEASE_SHARE`` of it (a host's earlier work) collects its garbage first, and a stop
    names what the process held when the budget began."""
    import formulations.budget as budget

    rss, released = [300], []

    def release():
        released.append(1)
        rss[0] = 250
        return rss[0]

    monkeypatch.setattr(budget, "rss_bytes", lambda: rss[0])
    monkeypatch.setattr(budget, "release_memory", release)
    with memory_budget(1000):  # 300 of 1000: below the share, nothing released
        check_memory(force=True)
    with memory_budget(600):  # exactly the share: nothing released either
        pass
    assert released == []
    with memory_budget(400):  # 300 of 400: released first, 250 held, under the stop share
        check_memory(force=True)
        rss[0] = 380
        with pytest.raises(MemoryBudgetExceeded, match="held 2.5e-07 GB when the budget began") as err:
            check_memory(force=True)
    assert released == [1] and err.value.held == 250
    rss[0] = 100
    with memory_budget(400):  # held 100 of 400: the message leaves it out
        rss[0] = 390
        with pytest.raises(MemoryBudgetExceeded) as err:
            check_memory(force=True)
    assert "held" not in str(err.value) and err.value.held == 100


def test_a_forced_memory_check_reads_within_the_period(monkeypatch):
    """After a large allocation a check reads the RSS even right after another read."""
    import formulations.budget as budget

    reads = []
    monkeypatch.setattr(budget, "rss_bytes", lambda: reads.append(1) or 10)
    with memory_budget(10**12):
        check_memory()
        check_memory()  # within the period: not read
        check_memory(force=True)
        check_memory(need=int(STOP_SHARE * 10**12) - 10)  # what is about to be allocated counts, and is read now
        with pytest.raises(MemoryBudgetExceeded):
            check_memory(need=10**12)
    assert len(reads) == 5  # and one on entering the budget


def test_a_stop_before_a_large_step_says_what_was_resident_and_what_the_step_needed(monkeypatch):
    """The stop's message gives the memory the process held, not that plus the step it did not
    start (a table row once said "resident memory 2.34 GB" for a process that never passed 1.6)."""
    import formulations.budget as budget

    rss = [100_000_000]  # on entering the budget: well under it
    monkeypatch.setattr(budget, "rss_bytes", lambda: rss[0])
    with memory_budget(2 * 10**9):
        rss[0] = 1_500_000_000
        check_memory(force=True)  # 1.5 of 2 GB: under the stop share
        with pytest.raises(MemoryBudgetExceeded) as err:
            check_memory(need=800_000_000)
    msg = str(err.value)
    assert "resident memory 1.5 GB, and the next step would allocate 0.8 GB more" in msg, msg
    assert (err.value.rss, err.value.need) == (1_500_000_000, 800_000_000)
    rss[0] = 100_000_000
    with memory_budget(10**9):  # over the share with nothing asked: no step named
        rss[0] = 950_000_000
        with pytest.raises(MemoryBudgetExceeded) as err:
            check_memory(force=True)
    assert "next step" not in str(err.value) and "resident memory 0.95 GB" in str(err.value), str(err.value)

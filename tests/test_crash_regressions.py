"""The causes of the two crashes of the default ``solve`` path (issue #29), each reproduced.

1. The baselines' plans that break the memory caps were measured against a floor that only
   holds within the caps (the flow MIP stores at most a device's memory): ``covering_gap``
   found a plan below it and raised, after the certificate had been found.
2. ``lower_floor`` for the period, its flow LP stopped by a deadline, wrote its "not complete"
   flag into a list of the layers no plan can split (a shadowed name): ``IndexError`` when
   every layer is splittable, reached from the baselines' any-cut reference through the ladder.
"""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace

import pytest

from milp_planner.deadline import Deadline
from milp_planner.cli import main
from milp_planner.cost.floors import lower_floor
from milp_planner.instance.generate import build_instance, random_spec, with_caps, write_case
from milp_planner.planners import get_planner
from milp_planner.report.baselines import floor_reference, run_baselines


def test_the_period_floor_with_its_lp_out_of_time_does_not_crash():
    inst = build_instance(random_spec(0))  # every layer splittable
    fl = lower_floor(inst, "period", deadline=Deadline(time.perf_counter() - 1.0))  # the flow LP gets no time
    assert fl.value >= 0 and fl.source in ("fluid", "compute-only")
    # not remembered: with time, the flow floor may be higher
    assert lower_floor(inst, "period").value >= fl.value


def _capped_below_every_plan():
    """A random instance whose devices are capped below what any plan needs: every baseline's
    plan breaks the caps."""
    spec = random_spec(6)
    spec = with_caps(spec, {d["name"]: 24 for d in spec["instance"]["devices"]})
    return spec, build_instance(spec)


def test_a_floor_within_the_caps_covers_no_plan_over_them():
    spec, inst = _capped_below_every_plan()
    refs = floor_reference(inst, "energy", inst.search)
    assert any(r.feasible_only for r in refs) and any(not r.feasible_only for r in refs)
    plan = get_planner("offload").solve(inst, objective="energy").plan
    free = replace(inst, constraints=replace(inst.constraints, memory=False))
    value = get_planner("offload").solve(free, objective="energy").value
    for r in refs:
        if r.covers(plan, inst, feasible=False):
            assert not r.feasible_only and r.value <= value * (1 + 1e-9)


def test_baselines_that_break_the_caps_never_cost_the_result():
    spec, inst = _capped_below_every_plan()
    rows = run_baselines(inst, ["offload", "coopai", "neurosurgeon", "modnn"], None, "energy", time_limit=5,
                         exact_planner="milp")
    assert [r.planner for r in rows] == ["offload", "coopai", "neurosurgeon", "modnn"]
    for r in rows:
        assert "internal error" not in r.message
        if r.vs_reference is not None:
            assert r.vs_reference >= 0


@pytest.mark.parametrize("objective", ["energy", "period"])
def test_solve_with_its_default_baselines_prints_the_certificate(tmp_path, objective):
    spec, _ = _capped_below_every_plan()
    path = write_case(spec, tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(["solve", str(path), "--objective", objective, "--json", "--quiet", "--compare-time-limit", "3"])
    assert "internal error" not in err.getvalue()
    data = json.loads(out.getvalue())
    assert rc == 1 and data["status"] == "infeasible"  # no plan fits the caps: proven, and said
    assert len(data["baselines"]) == 3


def test_a_failing_comparison_is_reported_on_its_line(monkeypatch):
    import milp_planner.report.baselines as bl

    def broken(*a, **k):
        raise ZeroDivisionError("a bug in a reference")

    monkeypatch.setattr(bl, "floor_reference", broken)
    inst = build_instance(random_spec(3))
    best = get_planner("dp").solve(inst, objective="latency")
    rows = run_baselines(inst, ["modnn"], best.value, "latency", time_limit=5, certified=True)
    (row,) = rows
    assert row.value is not None
    if row.in_space is False:
        assert "internal error computing the reference" in row.message


def test_the_infeasibility_explanation_without_time_to_list_the_space():
    """A run out of time explains an infeasible space from a bounded graph with no plan in it
    (min() of no terminals, seen under a 6 ms limit on a random instance): a sentence, no crash."""
    from formulations.diagnosis import explain_infeasible
    from formulations.stagegraph import build_stage_graph

    inst = build_instance(random_spec(3))
    sg = build_stage_graph(inst, objective="latency", upper=1e-12, drop_overflow=True)
    assert not sg.terminals
    text = explain_infeasible(sg, deadline=Deadline(time.perf_counter() - 1.0))
    assert "no plan of the space meets the caps" in text

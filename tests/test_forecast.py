"""The full relaxation's forecast (``relaxation.FORECAST_AT``, ``FORECAST_DONE``): under
``relaxation=auto`` a relaxation forecast to run out of its time gives it to the coarse one at
once. The thresholds are set so that the forecast always (or never) fires, so nothing here
depends on the machine's speed."""

from __future__ import annotations

import time

import pytest
from builders import chain_graph, device, make_instance

from formulations import relaxation
from formulations.relaxation import RelaxationOverrun, layout_bounds
from milp_planner.instance import SearchSpace
from milp_planner.planners import get_planner


def _instance():
    devs = [device("a", 1000, "0.01"), device("b", 2500, "0.02"), device("c", 1800, "0.01")]
    return make_instance(chain_graph(3), devs, bw=[[0, 100.0, 80.0], [250.0, 0, 90.0], [60.0, 70.0, 0]],
                         search=SearchSpace(2, 3, ("equal",), ("rows",)))


@pytest.fixture
def always(monkeypatch):
    """Every relaxation with a forecast and a deadline is forecast to run out."""
    monkeypatch.setattr(relaxation, "FORECAST_AT", 0.0)
    monkeypatch.setattr(relaxation, "FORECAST_DONE", 1.0)


def test_a_forecast_overrun_stops_the_relaxation_early(always):
    inst = _instance()
    with pytest.raises(RelaxationOverrun, match="forecast to run out of its time: 0 of 3 boundaries"):
        layout_bounds(inst, "latency", deadline=time.perf_counter() + 3600, forecast=True)


def test_without_forecast_or_deadline_the_relaxation_runs(always):
    inst = _instance()
    a = layout_bounds(inst, "latency", deadline=time.perf_counter() + 3600)
    b = layout_bounds(_instance(), "latency", forecast=True)  # no deadline: nothing to forecast
    assert a.lower == pytest.approx(b.lower) and a.lower > 0


def test_an_auto_solve_forecast_to_overrun_proves_the_coarse_bound(always):
    """The solve goes to the coarse relaxation at once and says why; its bound stays at most
    the optimum (brute force); ``relaxation=full`` does not forecast and certifies."""
    inst = _instance()
    best = get_planner("bruteforce").solve(inst, objective="latency").value
    res = get_planner("dp").solve(inst, objective="latency", time_limit=600)
    if res.status == "optimal" and res.bound_source != "coarse":  # proven before the rounds (a floor)
        pytest.skip("the anytime start was proven optimal before the relaxation")
    assert "forecast to run out" in res.message and res.info.get("relaxation") == "coarse"
    assert res.bound <= best * (1 + 1e-9) and res.value >= best * (1 - 1e-9)
    full = get_planner("dp", relaxation="full").solve(inst, objective="latency", time_limit=600)
    assert full.status == "optimal" and full.value == pytest.approx(best, rel=1e-9)

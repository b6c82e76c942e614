"""Anytime exact planners: floors valid for every plan, the baseline start, bound sources, the
memory budget (docs/exact.md, "Anytime")."""

from dataclasses import replace
from fractions import Fraction as F

import pytest
from builders import chain_graph, device, fc_graph, make_instance, residual_graph

from formulations.floors import Floor, lower_floor
from milp_planner.instance import SearchSpace
from milp_planner.instance.devices import CostModel, Device, Power
from milp_planner.instance.network import Endpoint
from milp_planner.planners import get_planner

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


FLOOR_CASES = {
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


@pytest.mark.parametrize("case", sorted(FLOOR_CASES))
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

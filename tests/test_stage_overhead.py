"""The per-stage fixed cost ``stage_overhead_s`` (docs/model.md section 4): read, priced once per
stage and device that computes a part, and priced the same by the exact planners."""

from __future__ import annotations

import copy

import pytest
import yaml

from milp_planner.cost.evaluator import evaluate
from milp_planner.errors import PlannerError
from milp_planner.instance.reader import instance_from_dict, resolve_instance_path
from milp_planner.planners import get_planner
from milp_planner.space.plan import Part, Plan, Stage

OV = 3e-3


def tiny(overheads):
    path = resolve_instance_path("example:tiny-2dev")
    data = yaml.safe_load(path.read_text())
    data = copy.deepcopy(data)
    for dev, ov in zip(data["devices"], overheads):
        dev.setdefault("compute", {})
        if ov is not None:
            dev["compute"]["stage_overhead_s"] = ov
    return instance_from_dict(data, "tiny", base_dir=path.parent)


def test_charged_once_per_stage_to_each_device_that_computes():
    base, inst = tiny([None, None]), tiny([OV, 2 * OV])
    a, b = inst.device_names
    n = len(inst.graph.layers)
    plans = [
        Plan("t", [Stage(0, n - 1, "none", (Part(a),))]),  # one stage on a
        Plan("t", [Stage(l, l, "none", (Part(a if l % 2 else b),)) for l in range(n)]),
    ]
    for plan in plans:
        m0, m1 = evaluate(plan, base), evaluate(plan, inst)
        for s0, s1 in zip(m0.stages, m1.stages):
            for d, c in s0.compute_s.items():
                assert s1.compute_s[d] == pytest.approx(c + (OV, 2 * OV)[d])
        extra = sum((OV, 2 * OV)[d] for s in m1.stages for d in s.compute_s)
        assert m1.latency_s == pytest.approx(m0.latency_s + extra)  # one part per stage: tau grows by it
        assert m1.energy_j > m0.energy_j


def test_a_split_stage_charges_every_part_once():
    inst = tiny([OV, OV])
    a, b = inst.device_names
    layer = next(l for l in inst.graph.layers if l.row_splittable)
    n = len(inst.graph.layers)
    h = layer.rows
    stages = [Stage(l, l, "none", (Part(a),)) for l in range(n)]
    stages[layer.id] = Stage(layer.id, layer.id, "rows", (Part(a, (0, h // 2)), Part(b, (h // 2, h))))
    m1, m0 = evaluate(Plan("t", stages), inst), evaluate(Plan("t", stages), tiny([None, None]))
    s1, s0 = m1.stages[layer.id], m0.stages[layer.id]
    assert [s1.compute_s[d] - s0.compute_s[d] for d in (0, 1)] == pytest.approx([OV, OV])


@pytest.mark.parametrize("planner", ["dp", "milp"])
def test_exact_planners_price_it_like_the_evaluator(planner):
    inst = tiny([OV, OV])
    r = get_planner(planner).solve(inst, objective="latency", time_limit=60, threads=1, seed=0)
    m = evaluate(r.plan, inst)
    assert r.value == pytest.approx(m.latency_s, rel=1e-6)
    assert r.status == "optimal" and r.bound <= m.latency_s * (1 + 1e-6)
    # a plan of one stage per layer pays the overhead on every stage: the optimum fuses more
    free = get_planner(planner).solve(tiny([None, None]), objective="latency", time_limit=60, threads=1, seed=0)
    assert len(r.plan.stages) <= len(free.plan.stages)
    assert r.value >= free.value


def test_a_negative_stage_overhead_is_refused():
    with pytest.raises(PlannerError, match=r"stage_overhead_s"):
        tiny([-1e-3, None])

"""The plain numpy DP of ``benchmarks/reference_dp.py``: a check of the pricing that does not use it.

The reference takes the plan space from ``stage_options`` and prices every stage itself from
docs/model.md (halo rows, fractions, cost models, receives, tau, gather), apart from
``milp_planner.cost``. Its optimum must equal the evaluator's brute force over every plan of
random chain instances of the differential bed, and ``dp``'s certified optimum on VGG16 (the
issue's speed case and a held-out twin)."""

from __future__ import annotations

from collections import Counter

import pytest

from milp_planner.instance.generate import random_spec
from milp_planner.planners import get_planner

from bed_cases import ROOT, bed, small_cases

import reference_dp  # noqa: E402  (benchmarks/ is on the path through bed_cases)

REL = 1e-9


def _in_scope(inst) -> bool:
    try:
        reference_dp.ChainSpace(inst)
    except ValueError:
        return False
    return True


CASES = list(small_cases(random_spec, 40, 27000, keep=_in_scope))


@pytest.mark.parametrize("seed,inst,table", CASES, ids=[f"seed{c[0]}" for c in CASES])
def test_the_reference_optimum_is_the_brute_force_optimum(seed, inst, table):
    value, plan = reference_dp.solve(inst)
    assert value == pytest.approx(table[:, 0].min(), rel=REL)
    assert len(plan) >= 1 and plan[0].first == 0 and plan[-1].last == len(inst.graph.layers) - 1


def test_the_random_chains_cover_what_the_reference_prices():
    """Both media, every cost model, stage overheads, channel parts and fused row stages."""
    seen = Counter()
    for _, inst, _ in CASES:
        seen[inst.network.medium] += 1
        seen.update(d.compute.kind for d in inst.devices)
        seen["stage overhead"] += any(d.compute.stage_overhead_s for d in inst.devices)
        seen["channels"] += "channels" in inst.search.axes
        seen["fusion"] += inst.search.fusion_limit > 1
    for what in ("switched", "shared", "linear", "roofline", "table", "stage overhead", "channels", "fusion"):
        assert seen[what] > 0, what


def test_the_reference_refuses_what_it_does_not_price():
    seed = 27000
    while True:  # the first bed instance that is not a chain
        spec = random_spec(seed)
        inst = bed.build_instance(spec, bed.build_graph(spec))
        seed += 1
        layers = inst.graph.layers
        if any(b.inputs != (a.output,) for a, b in zip(layers, layers[1:])):
            break
    with pytest.raises(ValueError, match="not a chain|one model input"):
        reference_dp.solve(inst)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["file", "twin"])
def test_the_reference_and_dp_agree_on_vgg16(which):
    from milp_planner.instance import load_instance

    inst = (load_instance(ROOT / "instances/fleet/vgg16-4dev-uncapped.yaml") if which == "file"
            else reference_dp.twin(3201))
    value, _ = reference_dp.solve(inst)
    res = get_planner("dp").solve(inst, objective="latency", time_limit=120)
    assert res.status == "optimal", res.message
    assert res.value == pytest.approx(value, rel=REL)

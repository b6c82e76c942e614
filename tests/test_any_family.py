"""The split family ``any`` (every integer cut) and baseline gaps that are never negative."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from builders import chain_graph, device, make_instance

from milp_planner.errors import PlannerError
from milp_planner.instance import SearchSpace, load_instance
from milp_planner.planners import get_planner
from milp_planner.space import cuts
from milp_planner.space.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "instances" / "examples" / "tiny-2dev.yaml"


def tiny_any(n_layers=2, splits=("any",), max_parts=2, n_devices=2):
    devs = [device("a", 1000, "0.01", power=(2, 1, 1)), device("b", 2500, "0.02", power=(4, 1, 2)),
            device("c", 1700, "0.015", power=(3, 1, 1))][:n_devices]
    bw = [[0.0 if i == j else (5000.0 if i < j else 12500.0) for j in range(n_devices)] for i in range(n_devices)]
    return make_instance(chain_graph(n_layers), devs, bw=bw, lat=0.001, source=0, sink=1 % n_devices,
                         search=SearchSpace(2, max_parts, tuple(splits), ("rows", "channels")))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 11])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_any_lists_every_cut_vector(n, k):
    inst = tiny_any(splits=("any",), max_parts=4)
    got = cuts.cut_vectors(inst, n, k)
    want = [()] if k == 1 else ([] if k > n else sorted(combinations(range(1, n), k - 1)))
    assert got == want
    for c in combinations(range(0, n + 1), k - 1):  # every candidate, also invalid ones
        assert cuts.cuts_in_space(inst, n, c) == (c in set(want) or (k == 1 and c == ())), c


def test_any_contains_the_other_families():
    inst = tiny_any(splits=("any", "equal", "capacity", "grid:3"), max_parts=3, n_devices=3)
    assert cuts.cut_vectors(inst, 9, 3) == sorted(combinations(range(1, 9), 2))
    narrow = replace(inst, search=replace(inst.search, splits=("equal", "capacity", "grid:3")))
    assert set(cuts.cut_vectors(narrow, 9, 3)) < set(cuts.cut_vectors(inst, 9, 3))


def test_any_too_many_vectors_is_one_line_naming_the_fix():
    inst = tiny_any(splits=("any",), max_parts=4)
    cuts._CACHE.clear()
    with pytest.raises(PlannerError) as err:
        cuts.cut_vectors(inst, 224, 4)  # C(223, 3) = 1.8 million
    msg = str(err.value)
    assert "\n" not in msg and "search.splits any gives 1.82e+06 cut vectors for 4 parts of 224" in msg
    assert "grid:G" in msg and "max_parts" in msg
    assert len(cuts.cut_vectors(inst, 224, 3)) == 223 * 222 // 2  # 3 parts: affordable
    assert cuts.cuts_in_space(inst, 224, (1, 2, 223))  # checked without listing


def _write(tmp_path, splits) -> Path:
    doc = yaml.safe_load(TINY.read_text())
    doc["search"]["splits"] = splits
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_reader_accepts_any(tmp_path):
    inst = load_instance(_write(tmp_path, ["any", "equal", "any"]))
    assert inst.search.splits == ("any", "equal")


@pytest.mark.parametrize("bad, why", [
    (["anything"], "unknown split 'anything' (known: equal, capacity, grid:G, any)"),
    (["Any"], "unknown split 'Any'"),
    (["any:3"], "unknown split 'any:3'"),
])
def test_reader_refuses_other_names_in_one_line(tmp_path, bad, why):
    with pytest.raises(PlannerError) as err:
        load_instance(_write(tmp_path, bad))
    msg = str(err.value)
    assert "\n" not in msg and "search.splits[0]" in msg and why in msg and "t.yaml" in msg


_BRUTE: dict = {}


def brute(splits, objective):
    """Brute force on ``tiny_any`` with ``splits`` (cached: it is the slow half of each case)."""
    key = (splits, objective)
    if key not in _BRUTE:
        inst = tiny_any(splits=splits)
        _BRUTE[key] = get_planner("bruteforce").solve(inst, objective=objective)
    return _BRUTE[key]


SLOW = pytest.mark.slow


@pytest.mark.parametrize("planner, objective", [
    ("dp", "latency"), pytest.param("dp", "energy", marks=SLOW),
    pytest.param("milp", "latency", marks=SLOW), pytest.param("milp", "energy", marks=SLOW),
    pytest.param("cpsat", "latency", marks=SLOW), pytest.param("cpsat", "energy", marks=SLOW)])
def test_exact_planners_with_any_equal_bruteforce(planner, objective):
    ref = brute(("any",), objective)
    assert ref.status == "optimal"
    res = get_planner(planner).solve(tiny_any(), objective=objective)
    assert res.status == "optimal", res.message
    tol = 1e-6 * ref.value + res.info.get("tolerance", 0.0)
    assert res.value == pytest.approx(ref.value, abs=tol)
    assert res.metrics.in_space
    # the any-space contains the equal-split space: its optimum is never worse, here strictly better
    eq = brute(("equal",), objective)
    assert ref.value <= eq.value + 1e-12
    if objective == "latency":
        assert ref.value < eq.value * (1 - 1e-6)


# -- baseline gaps: never negative -------------------------------------------------------------

from milp_planner.report.baselines import enclosing_space, run_baselines  # noqa: E402
from milp_planner.report.results import fill_gaps  # noqa: E402
from milp_planner.space.cuts import out_of_space  # noqa: E402


def narrow_instance():
    """Equal splits, no fusion, rows only: MoDNN's speed-biased cuts leave this space and beat
    its optimum (1.170 s against 1.274 s)."""
    inst = tiny_any(splits=("equal",), max_parts=2)
    return replace(inst, search=replace(inst.search, fusion_limit=1, axes=("rows",)))


@pytest.fixture(scope="module")
def narrow_optimum():
    inst = narrow_instance()
    res = get_planner("dp").solve(inst, objective="latency")
    assert res.status == "optimal"
    return res


@pytest.mark.parametrize("exact", [pytest.param("dp", marks=SLOW), None])
def test_out_of_space_baseline_beating_the_optimum_has_a_non_negative_gap(narrow_optimum, exact):
    inst = narrow_instance()
    (row,) = run_baselines(inst, ["modnn"], narrow_optimum.value, "latency", time_limit=10, certified=True,
                           exact_planner=exact)
    assert row.in_space is False and row.feasible
    assert row.vs_in_space < -0.05  # beats the in-space optimum, and says so
    assert row.reference is not None and row.vs_reference >= 0
    plan = get_planner("modnn").solve(inst, objective="latency").plan
    space = enclosing_space(inst.search, plan, len(inst.devices))
    assert space.splits == ("any",) and not out_of_space(plan, replace(inst, search=space))
    if exact == "dp":  # the any-cut optimum over the space that holds MoDNN's plan, checked by brute force
        assert row.reference.kind == "any-cut optimum"
        brute = get_planner("bruteforce").solve(replace(inst, search=space), objective="latency")
        assert row.reference.value == pytest.approx(brute.value, rel=1e-9)
        assert row.value >= brute.value
    else:  # no exact run: the floor of milp_planner.cost.floors, valid for every such plan
        assert row.reference.kind == "floor"
        assert row.reference.value <= row.value
    d = row.to_dict()
    assert d["vs_reference"] >= 0 and d["reference"]["kind"] == row.reference.kind


def test_a_spent_comparison_budget_leaves_the_exact_reference_out_and_says_so(narrow_optimum):
    """``solve``'s comparison holds its total budget: with nothing left after the baselines, a
    plan outside the space is measured against the floors alone, and its row says why."""
    inst = narrow_instance()
    (row,) = run_baselines(inst, ["modnn"], narrow_optimum.value, "latency", time_limit=10, certified=True,
                           exact_planner="dp", budget_s=0.0)
    assert row.in_space is False
    assert row.reference is not None and row.reference.kind == "floor" and row.vs_reference >= 0
    assert "no time left in the comparison for dp over splits any" in row.message


def test_in_space_baseline_keeps_the_in_space_optimum(narrow_optimum):
    (row,) = run_baselines(narrow_instance(), ["offload"], narrow_optimum.value, "latency", certified=True)
    assert row.in_space and row.reference.kind == "in-space optimum" and row.vs_reference >= 0


def test_report_rows_outside_the_space_are_measured_against_a_floor(narrow_optimum, tmp_path):
    inst = narrow_instance()
    modnn = get_planner("modnn").solve(inst, objective="latency")
    f = str(tmp_path / "narrow.yaml")

    def row(planner, res, exact):
        m = res.metrics
        return {"instance": "narrow", "instance_file": f, "planner": planner, "objective": "latency",
                "value": res.value, "feasible": m.feasible, "in_space": m.in_space, "bound": res.bound,
                "status": res.status, "_exact": exact, "_plan": res.plan.to_dict()}

    rows = [row("dp", narrow_optimum, True), row("modnn", modnn, False)]
    fill_gaps(rows, {f: inst})
    dp, mo = rows
    assert dp["ref_kind"] == "in-space optimum" and dp["gap"] == 0
    assert mo["vs_in_space"] < 0  # below the certified in-space optimum ...
    assert mo["ref_kind"] == "floor" and 0 <= mo["gap"] < 1  # ... and its gap to a floor that holds for it
    assert mo["ref_value"] <= mo["value"]


def test_seed_rows_outside_the_space_get_a_covering_reference(tmp_path):
    """benchmarks/seeds_refs.py: the dp-any optimum where it holds for the plan, else the floor;
    every gap >= 0, and a plan below the in-space optimum is flagged by vs_in_space."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from seeds_refs import attach_references

    doc = yaml.safe_load(TINY.read_text())
    doc["network"]["bandwidth_mbps"] = 1000
    doc["search"] = {"fusion_limit": 1, "max_parts": 2, "splits": ["equal"], "axes": ["rows"]}
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(doc, sort_keys=False))
    doc["search"]["splits"] = ["any"]
    copy = tmp_path / "base-any.yaml"
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    inst, inst_any = load_instance(base), load_instance(copy)
    opt = get_planner("dp").solve(inst)
    any_opt = get_planner("dp").solve(inst_any)
    assert opt.status == any_opt.status == "optimal" and any_opt.value <= opt.value

    def row(variant, res, f, exact):
        m = res.metrics
        return {"instance": "base", "instance_file": str(f), "base_file": str(base), "variant": variant,
                "objective": "latency", "value": res.value, "bound": res.bound, "status": res.status,
                "feasible": m.feasible, "in_space": m.in_space, "best_bound": opt.value, "certified": True,
                "gap": 0.0 if exact else None, "_plan": res.plan.to_dict()}

    rows = [row("dp", opt, base, True), row("dp-any", any_opt, copy, True)]
    for name in ("modnn", "aofl", "coedge", "deepthings"):
        rows.append(row(name, get_planner(name).solve(inst, time_limit=10), base, False))
    attach_references(rows, tmp_path)
    assert rows[0]["ref_kind"] == "in-space optimum" and rows[1]["ref_kind"] is None
    outside = [r for r in rows[2:] if r["in_space"] is False]
    assert outside, "no baseline left the space: the test checks nothing"
    assert {r["ref_kind"] for r in outside} == {"any-cut optimum", "floor"}  # both paths are taken here
    for r in outside:
        assert r["ref_kind"] in ("any-cut optimum", "floor") and r["ref_gap"] >= 0
        assert r["ref_value"] <= r["value"]
        plan = Plan.from_dict(r["_plan"])
        if not cuts.out_of_space(plan, inst_any) and r["feasible"]:
            assert r["ref_kind"] == "any-cut optimum" and r["ref_value"] == any_opt.value


def test_the_caches_hold_at_most_their_budget_of_vectors_and_answer_the_same(monkeypatch):
    """The caches are bounded by the vectors they hold, not by entries (4,096 entries of up to
    200,000 vectors each could hold tens of GB); evicted lists are listed again, the same."""
    from cachetools import LRUCache

    budget = 3_000
    monkeypatch.setattr(cuts, "MAX_CACHED_VECTORS", budget)
    monkeypatch.setattr(cuts, "_CACHE", LRUCache(budget, getsizeof=len))
    inst = tiny_any(splits=("any",), max_parts=3)
    first = {n: cuts.cut_vectors(inst, n, 3) for n in range(20, 80, 5)}  # C(n - 1, 2): 171 to 2,926
    assert sum(map(len, first.values())) > budget and cuts._CACHE.currsize <= budget
    assert 0 < len(cuts._CACHE) < len(first)  # the oldest went first
    assert all(cuts.cut_vectors(inst, n, 3) == v for n, v in first.items())
    assert len(cuts.cut_vectors(inst, 90, 3)) == 88 * 89 // 2 and cuts._CACHE.currsize <= budget  # too large to keep


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fractions(min_value=Fraction(1, 10**9), max_value=10**6), min_size=1, max_size=6),
       st.integers(1, 400), st.data())
def test_capacity_cuts_in_integers_equal_the_rational_definition(spd, n, data):
    """``integer_speeds`` scales the speeds to integers for speed (3 s in fractions for 43,680 orders
    of 4 of 16 devices); the cuts must be docs/model.md's, computed here on the rationals:
    cut i = floor(n x (s_1 + ... + s_i) / total + 1/2)."""
    import math

    order = data.draw(st.permutations(spd))
    total = sum(order, Fraction(0))
    want = tuple(math.floor(Fraction(n) * sum(order[:i + 1], Fraction(0)) / total + Fraction(1, 2))
                 for i in range(len(order) - 1))
    ints = cuts.integer_speeds(order)
    assert all(isinstance(v, int) and v > 0 for v in ints)
    assert cuts.capacity_cuts(n, list(ints)) == want == cuts.capacity_cuts(n, list(order))

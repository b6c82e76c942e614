"""The split family ``any`` (every integer cut) and baseline gaps that are never negative."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest
import yaml
from builders import chain_graph, device, make_instance

from milp_planner.errors import PlannerError
from milp_planner.instance import SearchSpace, load_instance
from milp_planner.planners import get_planner
from milp_planner.space import cuts

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "instances" / "examples" / "tiny-2dev.yaml"


def tiny_any(n_layers=3, splits=("any",), max_parts=2, n_devices=2):
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


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("planner", ["dp", "milp", "cpsat"])
def test_exact_planners_with_any_equal_bruteforce(planner, objective):
    inst = tiny_any()
    ref = get_planner("bruteforce").solve(inst, objective=objective)
    assert ref.status == "optimal"
    res = get_planner(planner).solve(inst, objective=objective)
    assert res.status == "optimal", res.message
    tol = 1e-6 * ref.value + res.info.get("tolerance", 0.0)
    assert res.value == pytest.approx(ref.value, abs=tol)
    assert res.metrics.in_space
    # the any-space contains the equal-split space: its optimum is never worse, here strictly better
    eq = get_planner("bruteforce").solve(replace(inst, search=replace(inst.search, splits=("equal",))),
                                         objective=objective)
    assert ref.value <= eq.value + 1e-12
    if objective == "latency":
        assert ref.value < eq.value * (1 - 1e-6)

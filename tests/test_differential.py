"""The differential test bed (benchmarks/differential.py): every planner, objective and front
against brute force on random instances, and the default ``solve`` path end to end.

The corpus (``tests/differential_corpus/``: every case that ever failed, as its spec) runs in
the default suite; 300 seeded random cases run with the slow tests (CI). More:
``python benchmarks/differential.py --seed 1000 --count 3000 --workers 2``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import differential as bed  # noqa: E402

from milp_planner.instance.generate import load_spec  # noqa: E402

CORPUS = sorted((ROOT / "tests" / "differential_corpus").glob("*.json"))
SEEDS = 300
CHUNK = 10


def _report(tally) -> str:
    return "\n".join(f"{f.case} {f.check} {f.what}: {f.detail}" for f in tally.findings)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_case(path):
    tally = bed.run_case(spec=load_spec(path))
    assert not tally.findings, _report(tally)


QUICK = (0, 6, 12, 78)  # a latency cap, every device capped below any plan, a period cap, memory + latency caps


@pytest.mark.parametrize("seed", QUICK)
def test_quick_cases(seed):
    """The planners alone (no front, no command line) on a few cases: the mutation gate's check."""
    import random

    case = bed.make_case(seed, boards=0)  # (the cases the comment above describes)
    tally = bed.Tally()
    bed.check_planners(case, tally, random.Random(seed))
    assert not tally.findings, _report(tally)


@pytest.mark.parametrize("seed", (12, 78))
def test_quick_cases_on_boards(seed):
    """The same seeds with their devices on boards (link groups): the planners still match
    brute force."""
    import random

    case = bed.make_case(seed, boards=1)
    assert case.name.startswith("boards-") and {d.node for d in case.inst.devices} >= {"board0"}
    tally = bed.Tally()
    bed.check_planners(case, tally, random.Random(seed))
    assert not tally.findings, _report(tally)


@pytest.mark.parametrize("seed", (1, 2, 5))
def test_quick_fronts(seed):
    case = bed.make_case(seed, boards=0)
    tally = bed.Tally()
    bed.check_front(case, tally, ["latency", "energy"])
    bed.check_front(case, tally, ["energy", "memory", "period"])
    assert not tally.findings, _report(tally)


@pytest.mark.slow
@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_random_cases(first):
    tally = bed.Tally()
    for seed in range(first, first + CHUNK):
        tally.add(bed.run_case(seed))
    assert tally.cases == CHUNK
    assert not tally.findings, _report(tally)


def test_the_bed_lists_the_space_the_planners_search():
    """The bed's own listing of the space (from docs/model.md) is what stage_options lists, and
    its optimum is what bruteforce finds: the reference is not the planners' own code."""
    from milp_planner.planners import get_planner

    case = bed.make_case(3)
    assert case.space_mismatch == ""
    for objective in bed.OBJECTIVES:
        ref = case.optimum(objective)
        res = get_planner("bruteforce").solve(case.inst, objective=objective)
        assert (ref is None) == (res.status == "infeasible")
        if ref is not None:
            assert res.value == pytest.approx(ref, rel=1e-12)


def test_the_bed_catches_a_wrong_certificate(monkeypatch):
    """A planner that proves its single-device plan optimal (a bound at its value) is a finding:
    the bound lies above the optimum, and so does the claimed optimum."""
    from milp_planner.certificate import Proof
    from milp_planner.planners import exact, get_planner

    def single_device(self, instance, ctx):
        res = get_planner("offload").solve(instance, objective=ctx.objective)
        res.proofs = [Proof(res.value, "bug")]
        return res

    monkeypatch.setattr(exact.ExactPlanner, "run_search", single_device)
    case = next(c for c in (bed.make_case(s) for s in range(40))
                if c.optimum("latency") is not None
                and get_planner("offload").solve(c.inst, objective="latency").value > 1.01 * c.optimum("latency"))
    tally = bed.Tally()
    bed._run(tally, case, "dp", "latency", "exact")
    details = _report(tally)
    assert "above the optimum" in details and "status optimal at" in details, details


def test_the_bed_catches_a_missing_front_point(monkeypatch):
    """A front that skips a non-dominated point and still says certified is a finding."""
    import milp_planner.pareto as pareto

    case = next(c for c in (bed.make_case(s) for s in range(40)) if len(c.front(["latency", "energy"])) >= 3)
    monkeypatch.setattr(pareto, "next_cap", lambda objective, value: value * 0.5)  # steps far too large
    tally = bed.Tally()
    bed.check_front(case, tally, ["latency", "energy"])
    assert any("missing" in f.detail for f in tally.findings), _report(tally)

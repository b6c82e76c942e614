"""Memory caps on the stage graph: the Lagrangian bounds, arc fixing and the label search,
checked against every path of the tiny graphs."""

from dataclasses import replace

import numpy as np
import pytest
from test_exact import CASES, brute

from formulations.caps import _undominated, capped_shortest_path, lagrangian_fixing
from formulations.stagegraph import build_stage_graph


def all_paths(sg, objective):
    """(arcs, value, per-device memory) of every source-to-terminal path."""
    out, stack = [], [(sg.source, [])]
    while stack:
        v, path = stack.pop()
        if v in sg.terminals and path:
            arcs = [sg.arcs[a] for a in path]
            n_dev = len(sg.instance.devices)
            mem = [sum(a.weights[d] for a in arcs) + max(a.working[d] for a in arcs) for d in range(n_dev)]
            out.append((path, sg.path_value(path, objective), mem))
        for a in sg.out_arcs[v]:
            stack.append((sg.arcs[a].head, path + [a]))
    return out


def capped_graph(case, objective, share):
    free = brute(case, objective)
    cap = int(share * max(free.metrics.memory_bytes.values()))
    inst = CASES[case]()
    inst.devices = [replace(d, memory_bytes=cap) for d in inst.devices]
    sg = build_stage_graph(inst, objective=objective, drop_overflow=True)
    caps = [cap] * len(inst.devices)
    paths = [(p, v) for p, v, mem in all_paths(sg, objective) if all(m <= cap for m in mem)]
    return sg, caps, paths


def test_undominated_keeps_exactly_one_label_per_pareto_point():
    rng = np.random.default_rng(7)
    for n in (1, 5, 300, 700):
        cost = rng.integers(0, 6, n).astype(float)
        res = rng.integers(0, 4, (n, 3)).astype(float)
        v = np.column_stack([cost, res])
        kept = _undominated(cost, res)
        kv = v[kept]
        # no kept label is nowhere worse than another kept one (ties are kept once) ...
        le = (kv[:, None, :] <= kv[None, :, :]).all(axis=2)
        assert not (le & ~np.eye(len(kv), dtype=bool)).any()
        # ... and every label dropped has a kept one nowhere worse
        assert all((kv <= v[i]).all(axis=1).any() for i in range(n))


@pytest.mark.parametrize("share", [0.9, 0.75])
@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_lagrangian_bounds_hold_for_every_capped_path(case, objective, share):
    sg, caps, paths = capped_graph(case, objective, share)
    fix = lagrangian_fixing(sg, objective, caps)
    if not paths:
        assert capped_shortest_path(sg, objective, caps, fixing=fix).arcs == []
        return
    opt = min(v for _, v in paths)
    assert fix.bound <= opt * (1 + 1e-9)
    for path, value in paths:
        assert all(fix.through[a] <= value * (1 + 1e-9) + 1e-15 for a in path)
    assert np.isfinite(fix.through).sum() <= len(sg.arcs)


@pytest.mark.parametrize("share", [0.9, 0.75])
@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_label_search_finds_the_capped_optimum_and_supports_every_path_within_its_bound(case, objective, share):
    sg, caps, paths = capped_graph(case, objective, share)
    if not paths:
        pytest.skip("no plan fits these caps")
    opt = min(v for _, v in paths)
    fix = lagrangian_fixing(sg, objective, caps)
    for upper in (np.inf, opt * (1 + 1e-9), sorted(v for _, v in paths)[len(paths) // 2]):
        for fixing in (None, fix):
            found = capped_shortest_path(sg, objective, caps, upper=upper, fixing=fixing)
            assert found.value == pytest.approx(opt, rel=1e-9)
            assert sg.path_value(found.arcs, objective) == pytest.approx(opt, rel=1e-9)
            for path, value in paths:
                if value <= upper:
                    assert found.support[path].all()
    below = capped_shortest_path(sg, objective, caps, upper=opt * (1 - 1e-6), fixing=fix)
    assert below.arcs == [] and not below.support.any()


@pytest.mark.parametrize("objective", ["latency", "energy"])
@pytest.mark.parametrize("case", list(CASES))
def test_prior_multipliers_keep_every_path_within_the_bound(case, objective):
    sg, caps, paths = capped_graph(case, objective, 0.9)
    if not paths:
        pytest.skip("no plan fits these caps")
    values = sorted(v for _, v in paths)
    upper = values[len(values) // 2]
    first = lagrangian_fixing(sg, objective, caps)
    again = lagrangian_fixing(sg, objective, caps, prior=first, upper=upper)
    assert again.within == upper
    assert again.bound <= values[0] * (1 + 1e-9)
    keep = again.keep(upper)
    for path, value in paths:
        if value <= upper:
            assert keep[path].all()
    with pytest.raises(ValueError):
        again.keep(upper * 1.01 + 1)


def test_exact_planners_report_the_caps_bound():
    """The warm start's bound under binding caps is the Lagrangian's, never above the optimum."""
    from milp_planner.planners import get_planner
    sg, caps, paths = capped_graph("residual-shared", "latency", 0.75)
    inst = sg.instance
    ref = get_planner("bruteforce").solve(inst, objective="latency")
    assert ref.status == "optimal" and paths
    for name in ("dp", "milp", "cpsat"):
        res = get_planner(name).solve(inst, objective="latency")
        assert res.status == ref.status
        if ref.status == "optimal":
            assert res.bound <= ref.value * (1 + 1e-6) + res.info.get("tolerance", 0.0)


def test_milp_with_two_threads_after_the_caps_lp():
    """The caps' LP runs HiGHS first in the process; a MILP with another thread count after it
    must still solve (HiGHS sizes one global scheduler by its first run)."""
    from milp_planner.planners import get_planner
    sg, caps, paths = capped_graph("chain", "latency", 0.9)
    assert paths
    get_planner("dp").solve(sg.instance, objective="latency", threads=1)
    res = get_planner("milp").solve(sg.instance, objective="latency", threads=2)
    assert res.status == "optimal", res.message


@pytest.mark.parametrize("status", ["kUnknown", "kInfeasible"])
def test_an_lp_that_does_not_finish_proves_nothing(monkeypatch, status):
    """HiGHS stopping without an optimum (or claiming infeasibility it cannot back with a
    ray) must not become a proof that no plan meets the caps."""
    import highspy
    sg, caps, paths = capped_graph("chain", "latency", 0.9)
    opt = min(v for _, v in paths)
    monkeypatch.setattr(highspy.Highs, "getModelStatus", lambda self: getattr(highspy.HighsModelStatus, status))
    monkeypatch.setattr(highspy.Highs, "getDualRay", lambda self: (None, False, []))
    fix = lagrangian_fixing(sg, "latency", caps)
    assert fix.bound <= opt * (1 + 1e-9)
    if status == "kInfeasible":  # unproven: no prices at all
        assert not fix.lam.any()
    found = capped_shortest_path(sg, "latency", caps, fixing=fix)
    assert found.value == pytest.approx(opt, rel=1e-9)


def test_the_cap_rule_at_its_boundary():
    """A value exactly at its cap meets it, up to CAP_SLACK relative and no further; a search's
    limit ``cap_limit`` lies just above the evaluator's (never below it, never by an absolute amount)."""
    from milp_planner.cost.evaluator import CAP_SLACK, SUM_NOISE, cap_limit, within_cap

    for cap in (2.5e-3, 1.0, 7.0e4):
        assert within_cap(cap, cap) and within_cap(cap * (1 + 0.5 * CAP_SLACK), cap)
        assert within_cap(cap * (1 + CAP_SLACK), cap)  # the boundary itself
        assert not within_cap(cap * (1 + 3 * CAP_SLACK), cap)
        assert cap_limit(cap) == cap * (1 + CAP_SLACK) * (1 + SUM_NOISE)
        assert cap * (1 + CAP_SLACK) < cap_limit(cap) < cap * (1 + 2 * CAP_SLACK)

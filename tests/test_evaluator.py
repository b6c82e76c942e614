"""The evaluator against hand-computed plans (docs/model.md sections 3 and 4).

Conventions of tests/builders.py: dtype 1 byte; conv layers 3x3 stride 1 pad 1 with 1000 MACs
and 10 params, output (1, 2, 8, 8) = 8 rows of 2 x 8 = 16 bytes; the input x is (1, 1, 8, 8)
= 8 rows of 8 bytes. Devices: 1000 MAC/s + 0.01 s per layer touched, power 2 W compute,
1 W tx, 1 W rx. Links: 100 B/s from device 0 to 1, 200 B/s from 1 to 0, 0.1 s per message.
"""

import json

import pytest
from builders import chain_graph, device, fc_graph, make_instance, residual_graph

from milp_planner.errors import PlannerError
from milp_planner.cost.evaluator import evaluate, lower_bound_latency
from milp_planner.instance import Constraints, SearchSpace
from milp_planner.instance.network import Endpoint
from milp_planner.space.plan import Part, Plan, Stage

A, B = device("a"), device("b")


def plan(*stages):
    return Plan("t", [Stage(f, l, ax, tuple(Part(d, r) for d, r in parts)) for f, l, ax, parts in stages])


def close(x, y):
    assert x == pytest.approx(y, rel=1e-12, abs=1e-12)


def test_single_device():
    inst = make_instance(chain_graph(2), [A, B])
    m = evaluate(plan((0, 1, "none", [("a", None)])), inst)
    # compute = 2 layers x (1000/1000 + 0.01) = 2.02 s; source and sink are a: no transfers
    close(m.latency_s, 2.02)
    close(m.period_s, 2.02)
    close(m.energy_j, 2 * 2.02)  # 2 W
    # memory a: weights 2 x 10 B + working set x 64 B + t0 128 B + t1 128 B = 340 B
    assert m.memory_bytes == {"a": 340, "b": 0}
    assert m.feasible and m.in_space


def test_two_device_row_split_with_halo():
    inst = make_instance(chain_graph(2), [A, B])
    p = plan((0, 0, "rows", [("a", (0, 4)), ("b", (4, 8))]), (1, 1, "none", [("a", None)]))
    m = evaluate(p, inst)
    s0, s1 = m.stages
    # stage 0: b computes t0 rows [4, 8), reading x rows [3, 8): 5 rows x 8 B = 40 B from a:
    # 40 / 100 + 0.1 = 0.5 s; each part computes 4/8 of 1 s + 0.01 = 0.51 s
    close(s0.recv_s[1], 0.5)
    close(s0.compute_s[0], 0.51)
    close(s0.tau_s, 1.01)
    # stage 1 on a: needs t0 rows [0, 8); owns [0, 4); b sends [4, 8) = 4 x 16 = 64 B:
    # 64 / 200 + 0.1 = 0.42 s; compute 1.01 s
    assert s1.bytes_in[0] == 64
    close(s1.tau_s, 1.43)
    close(m.latency_s, 2.44)
    # energy: compute 2 W x (0.51 + 0.51 + 1.01) + transfers (1 + 1) W x (0.5 + 0.42)
    close(m.energy_j, 2 * 2.03 + 2 * 0.92)


def test_fused_stage_part_computes_more_rows_than_it_owns():
    inst = make_instance(chain_graph(2), [A, B])
    m = evaluate(plan((0, 1, "rows", [("a", (0, 4)), ("b", (4, 8))])), inst)
    (s,) = m.stages
    # part a owns t1 [0, 4): computes t1 [0, 4), t0 [0, 5) (one halo row), reads x [0, 6)
    # compute a = 5/8 + 0.01 + 4/8 + 0.01 = 1.145 s (same for b, by symmetry)
    close(s.compute_s[0], 1.145)
    close(s.compute_s[1], 1.145)
    # b reads x [2, 8) = 6 rows x 8 B = 48 B from a: 0.48 + 0.1 = 0.58 s
    assert s.bytes_in[1] == 48
    close(s.tau_s, 1.725)
    # gather: b's t1 [4, 8) = 64 B to the sink a: 0.42 s
    close(m.gather_s, 0.42)
    close(m.latency_s, 2.145)
    # memory b: weights 20 B + reads x 48 B + computes t0 5 x 16 + t1 4 x 16 = 20 + 48 + 144
    assert m.memory_bytes["b"] == 212


def test_channel_split_of_a_gemm():
    inst = make_instance(fc_graph(), [A, B])
    m = evaluate(plan((0, 0, "channels", [("a", (0, 5)), ("b", (5, 10))])), inst)
    (s,) = m.stages
    # each part computes half of 160 MACs: 0.08 + 0.01 = 0.09 s; b reads all of x (16 B)
    # from a: 0.16 + 0.1 = 0.26 s
    close(s.compute_s[1], 0.09)
    close(s.recv_s[1], 0.26)
    close(s.tau_s, 0.35)
    # gather b's 5 features (5 B) to a: 5/200 + 0.1 = 0.125 s
    close(m.latency_s, 0.475)
    # a stores half the weights (170 x 5/10 = 85 B), reads x 16 B, computes 5 B
    assert m.memory_bytes["a"] == 85 + 16 + 5


@pytest.mark.parametrize("medium", ["switched", "shared"])
def test_shared_medium_stage(medium):
    src = Endpoint(device=None, bandwidth_Bps=(100.0, 100.0), latency_s=(0.0, 0.0))
    inst = make_instance(chain_graph(1), [A, B], medium=medium, source=src)
    m = evaluate(plan((0, 0, "rows", [("a", (0, 4)), ("b", (4, 8))])), inst)
    (s,) = m.stages
    # both parts read 5 input rows (40 B) from the external source: 0.4 s each; compute 0.51 s
    if medium == "switched":
        close(s.tau_s, 0.4 + 0.51)  # each receiver takes its own message
    else:
        close(s.tau_s, 0.8 + 0.51)  # one medium: transfers in sequence, no overlap
    # gather b's t0 [4, 8) = 64 B to a: 0.42 s
    close(m.latency_s, s.tau_s + 0.42)
    # period: a = 0.4 + 0.51 + 0.42 (gather at sink a) = 1.33; shared: >= 0.8 + 0.42
    close(m.period_s, 1.33)
    # external source draws no power: energy = 2 x 1.02 + rx 1 W x 0.8 + (tx + rx) x 0.42
    close(m.energy_j, 2.04 + 0.8 + 2 * 0.42)


def test_memory_violation():
    a = device("a", memory=300)
    inst = make_instance(chain_graph(2), [a, B])
    m = evaluate(plan((0, 1, "none", [("a", None)])), inst)
    assert m.memory_bytes["a"] == 340
    assert not m.feasible
    assert m.violations == ["memory of a: 340 bytes exceed its 300 bytes"]
    inst.constraints = Constraints(memory=False)
    assert evaluate(plan((0, 1, "none", [("a", None)])), inst).feasible


def test_residual_skip_crosses_stage_boundary():
    inst = make_instance(residual_graph(), [A, B])
    p = plan((0, 0, "none", [("a", None)]), (1, 1, "none", [("b", None)]), (2, 2, "none", [("a", None)]))
    m = evaluate(p, inst)
    s0, s1, s2 = m.stages
    close(s0.tau_s, 1.01)
    # stage 1 on b: t0 whole (128 B) from a: 1.28 + 0.1 = 1.38 s; compute 1.01 s
    close(s1.tau_s, 2.39)
    # stage 2 on a: t1 (128 B) from b: 0.64 + 0.1 = 0.74 s; the skip t0 is a's own;
    # Add: 128 ops / 1000 + 0.01 = 0.138 s
    assert [(t.tensor, t.src, t.dst) for t in s2.transfers] == [("t1", 1, 0)]
    close(s2.tau_s, 0.878)
    close(m.latency_s, 1.01 + 2.39 + 0.878)
    # memory a: weights 10 B; working sets: stage 0: x 64 + t0 128 = 192; stage 1 (no part):
    # owns t0, still live = 128; stage 2: t1 128 + t0 128 + y 128 = 384 -> 394
    assert m.stages[1].working_set[0] == 128
    assert m.memory_bytes == {"a": 394, "b": 10 + 256}


def test_out_of_space_is_flagged_not_refused():
    inst = make_instance(chain_graph(2), [A, B], search=SearchSpace(1, 2, ("equal",), ("rows",)))
    p = plan((0, 1, "rows", [("a", (0, 3)), ("b", (3, 8))]))
    m = evaluate(p, inst)
    assert not m.in_space
    assert any("fusion_limit" in r for r in m.space_reasons)
    assert any("not from splits" in r for r in m.space_reasons)


@pytest.mark.parametrize("stages, message", [
    ([(0, 0, "none", [("a", None)])], "layers 1-1 are in no stage"),
    ([(0, 1, "none", [("a", None)]), (1, 1, "none", [("a", None)])], "overlaps"),
    ([(0, 0, "none", [("a", None)]), (1, 2, "none", [("a", None)])], "model has only 2 layers"),
    ([(0, 1, "none", [("z", None)])], "unknown device 'z'"),
    ([(0, 1, "rows", [("a", (0, 4)), ("a", (4, 8))])], "two parts"),
    ([(0, 1, "rows", [("a", (0, 4)), ("b", (4, 4))])], "empty range"),
    ([(0, 1, "rows", [("a", (0, 5)), ("b", (4, 8))])], "overlap"),
    ([(0, 1, "rows", [("a", (0, 4)), ("b", (5, 8))])], "belong to no part"),
    ([(0, 1, "rows", [("a", (0, 4)), ("b", (4, 7))])], "must cover"),
    ([(0, 1, "channels", [("a", (0, 1)), ("b", (1, 2))])], "exactly one layer"),
    ([(0, 1, "none", [("a", None), ("b", None)])], "exactly one part"),
])
def test_broken_plans(stages, message):
    inst = make_instance(chain_graph(2), [A, B])
    with pytest.raises(PlannerError, match=message):
        evaluate(plan(*stages), inst)


def test_rows_on_a_layer_that_is_not_row_splittable():
    inst = make_instance(fc_graph(), [A, B])
    with pytest.raises(PlannerError, match="not row-splittable"):
        evaluate(plan((0, 0, "rows", [("a", (0, 1)), ("b", (1, 1))])), inst)


def test_plan_json_round_trip(tmp_path):
    p = plan((0, 0, "rows", [("a", (0, 4)), ("b", (4, 8))]), (1, 1, "none", [("a", None)]))
    p.save(tmp_path / "p.json")
    q = Plan.load(tmp_path / "p.json")
    assert q.to_dict() == p.to_dict()
    with pytest.raises(PlannerError, match="not valid JSON"):
        Plan.from_json("{", "x.json")
    with pytest.raises(PlannerError, match="unknown key 'rangez'"):
        Plan.from_dict({"stages": [{"first": 0, "last": 0, "axis": "none", "parts": [{"device": "a", "rangez": 1}]}]})


def test_lower_bound():
    inst = make_instance(chain_graph(2), [A, device("b", macs_per_s=3000)])
    # 2000 MACs over 1000 + 3000 MAC/s, overheads left out: 0.5 s; the floor is at least that
    # (it also counts what no plan of this space can split) and at most every plan's latency
    lb = lower_bound_latency(inst)
    assert lb >= 0.5 * (1 - 1e-12)
    m = evaluate(plan((0, 1, "none", [("b", None)])), inst)
    assert m.lower_bound_s == lb <= m.latency_s


def test_cli_evaluate_json(tmp_path, capsys):
    """`milp-planner evaluate` via an instance dict saved by the instance loader."""
    pytest.importorskip("milp_planner.instance.reader")
    from milp_planner.cli import main

    inst_file = tmp_path / "i.yaml"
    inst_file.write_text(
        "name: t\nmodel: zoo:tiny_chain\ndevices:\n  - {name: a, compute: {model: linear, macs_per_s: 1.0e9}}\n"
        "  - {name: b, compute: {model: linear, macs_per_s: 2.0e9}}\nnetwork: {bandwidth_mbps: 100}\n")
    from milp_planner.instance import load_instance

    inst = load_instance(inst_file)
    n = len(inst.graph.layers)
    pf = tmp_path / "p.json"
    pf.write_text(json.dumps({"instance": "t", "stages": [{"first": 0, "last": n - 1, "axis": "none",
                                                           "parts": [{"device": "b"}]}]}))
    assert main(["evaluate", str(inst_file), str(pf), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("latency_s", "energy_j", "energy_per_device_j", "period_s", "throughput_ips", "memory_bytes",
                "feasible", "violations", "in_space", "stages"):
        assert key in out
    assert main(["show", str(pf), "--instance", str(inst_file)]) == 0
    pf.write_text('{"stages": [{"first": 0, "last": 0, "axis": "none", "parts": [{"device": "q"}]}]}')
    assert main(["evaluate", str(inst_file), str(pf)]) == 2
    err = capsys.readouterr().err
    assert "unknown device 'q'" in err and "Traceback" not in err

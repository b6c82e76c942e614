"""Deployments run end to end under mpiexec (one rank per device, ~1 s of start-up each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest

from deploy_models import features_model
from milp_planner.deploy import deploy, run_deployment
from milp_planner.deploy.launcher import find_mpiexec
from milp_planner.errors import PlannerError
from milp_planner.instance import load_instance
from milp_planner.space.plan import Plan
from test_deploy import FEATURE_PLANS, make_instance, plan_of

pytest.importorskip("mpi4py")


@pytest.fixture(scope="module")
def feat_dep(tmp_path_factory):
    d = tmp_path_factory.mktemp("mpi")
    onnx.save(features_model(), str(d / "f.onnx"))
    inst = make_instance(str(d / "f.onnx"))
    return deploy(inst, plan_of(inst, *FEATURE_PLANS["rows-fused"]), d / "dep")


def test_run_external_source_and_sink(feat_dep):
    r = run_deployment(feat_dep, repeat=2, check=True, timeout=60)
    assert r["max_abs_err"] <= 1e-4
    assert r["ranks"] == {"d0": 0, "d1": 1, "d2": 2, "external": 3}
    assert len(r["latencies_s"]) == 2 and r["measured_latency_s"] > 0
    assert r["predicted_latency_s"] > 0
    st = r["per_stage"][0]
    assert [d["device"] for d in st["devices"]] == ["d0", "d1", "d2"]
    assert all(d["compute_s"] > 0 and d["predicted_compute_s"] > 0 for d in st["devices"])


def test_run_emulated_network_holds_messages(tmp_path):
    """tiny-2dev: in stage 0 pi5 receives its input halo from the source pi4, sent at the
    start; the emulated network holds it for its modelled time. (Later messages are sent as
    soon as their data exists, so they may overlap the receiver's compute: measured receive
    times can be below the evaluator's stage-by-stage ones.)"""
    inst = load_instance("example:tiny-2dev")
    plan = Plan.from_dict({"stages": [
        {"first": 0, "last": 2, "axis": "rows", "parts": [{"device": "pi4", "range": [0, 8]},
                                                          {"device": "pi5", "range": [8, 16]}]},
        {"first": 3, "last": 5, "axis": "none", "parts": [{"device": "pi5"}]}]})
    dep = deploy(inst, plan, tmp_path / "dep")
    r = run_deployment(dep, repeat=3, check=True, emulate_network=True, timeout=60)
    assert r["max_abs_err"] == 0.0
    pi5 = r["per_stage"][0]["devices"][1]
    assert pi5["device"] == "pi5" and pi5["predicted_recv_s"] > 1e-3
    # The message is held until its send time + its modelled transfer time, and the run starts
    # before the send: no run can be shorter than that transfer. (pi5's own measured receive
    # starts when pi5 begins waiting, which may be after the send, so it may be shorter.)
    assert min(r["latencies_s"]) >= pi5["predicted_recv_s"]
    assert pi5["recv_s"] > 0


def test_cli_run_json(feat_dep, capsys, tmp_path):
    from milp_planner.cli import main

    x = np.random.default_rng(5).uniform(-2, 2, (1, 3, 24, 20)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(feat_dep), "--repeat", "1", "--check", "--json", "--input", str(tmp_path / "x.npy")]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("max_abs_err", "measured_latency_s", "predicted_latency_s", "per_stage", "ranks"):
        assert key in r
    assert r["max_abs_err"] <= 1e-4
    np.save(tmp_path / "bad.npy", x[:, :2])
    assert main(["run", str(feat_dep), "--input", str(tmp_path / "bad.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.npy: shape (1, 2, 24, 20)" in err


def _leftovers(folder) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(folder) in line and "ps -eo" not in line]


@pytest.mark.parametrize("fault", ["fail:1", "hang:2"])
def test_failing_or_hanging_rank_ends_the_run(feat_dep, monkeypatch, fault):
    monkeypatch.setenv("MILP_PLANNER_DEPLOY_FAULT", fault)
    t0 = time.monotonic()
    with pytest.raises(PlannerError) as e:
        run_deployment(feat_dep, repeat=1, timeout=8)
    msg = str(e.value)
    assert "\n" not in msg
    if fault.startswith("fail"):
        assert "rank 1 (d1) failed" in msg and "injected failure" in msg
    else:
        assert "timed out after 8 s" in msg and "2 (d2)" in msg
    assert time.monotonic() - t0 < 30
    time.sleep(0.5)
    assert _leftovers(feat_dep) == []


def test_missing_mpiexec(monkeypatch, tmp_path, feat_dep):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PlannerError, match="mpiexec not found"):
        find_mpiexec()
    with pytest.raises(PlannerError, match="mpiexec not found"):
        run_deployment(feat_dep, repeat=1)
    assert os.environ["PATH"] == str(tmp_path)

"""``run --input-shape``: a deployment's plan carried to another input shape, no new solve."""

from __future__ import annotations

import json

import onnx
import pytest
import yaml

from deploy_models import _M, features_model, residual_model
from milp_planner.cli import main
from milp_planner.deploy import Manifest, deploy, execute_sequential, make_inputs, max_abs_err, reference_outputs
from milp_planner.deploy.reshape import carry_ranges, deploy_at_shape, plan_of_manifest
from milp_planner.errors import PlannerError
from milp_planner.instance import load_instance
from milp_planner.space.plan import Plan


@pytest.mark.parametrize("ranges, old, new, want", [
    ([(0, 32), (32, 64)], 64, 20, [(0, 10), (10, 20)]),
    ([(0, 3), (3, 6)], 6, 3, [(0, 2), (2, 3)]),  # 1.5 rows: half up
    ([(0, 5), (5, 9), (9, 12)], 12, 24, [(0, 10), (10, 18), (18, 24)]),
    ([(0, 4), (4, 8)], 8, 8, [(0, 4), (4, 8)]),
    ([(0, 1), (1, 2), (2, 3)], 3, 2, None),  # a part would get no row
    ([(0, 7), (7, 8)], 8, 4, None),  # the last part: 3.5 -> 4 leaves it nothing
])
def test_carry_ranges_golden(ranges, old, new, want):
    assert carry_ranges(ranges, old, new) == want


def _instance_file(tmp_path, model_path, n_dev=3, name="rs"):
    devices = [{"name": f"d{i}", "compute": {"model": "linear", "macs_per_s": 1e9 * (i + 1)}} for i in range(n_dev)]
    data = {"name": name, "model": str(model_path), "devices": devices,
            "network": {"bandwidth_mbps": 100, "latency_ms": 0.5, "source": {"device": "d0"}, "sink": {"device": "d0"}},
            "search": {"fusion_limit": 3, "max_parts": n_dev, "splits": ["equal"], "axes": ["rows", "channels"]}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


RESIDUAL_PLAN = {"stages": [
    {"first": 0, "last": 0, "axis": "channels", "parts": [{"device": "d1", "range": [0, 1]},
                                                          {"device": "d0", "range": [1, 2]}]},
    {"first": 1, "last": 2, "axis": "rows", "parts": [{"device": "d0", "range": [0, 3]}, {"device": "d1", "range": [3, 5]},
                                                      {"device": "d2", "range": [5, 8]}]}]}


@pytest.fixture
def residual_dep(tmp_path):
    onnx.save(residual_model(), str(tmp_path / "r.onnx"))
    inst_path = _instance_file(tmp_path, tmp_path / "r.onnx")
    dep = deploy(load_instance(inst_path), Plan.from_dict(RESIDUAL_PLAN), tmp_path / "dep")
    return inst_path, dep


def test_plan_read_back_from_the_manifest(residual_dep):
    _, dep = residual_dep
    assert plan_of_manifest(Manifest.load(dep)).to_dict()["stages"] == Plan.from_dict(RESIDUAL_PLAN).to_dict()["stages"]


@pytest.mark.parametrize("h, w, rows", [(16, 12, [(0, 6), (6, 10), (10, 16)]), (3, 5, [(0, 1), (1, 2), (2, 3)])])
def test_deployed_at_another_shape_matches_the_unsplit_model(residual_dep, tmp_path, h, w, rows):
    inst_path, dep = residual_dep
    new = deploy_at_shape(dep, inst_path, {None: (1, 1, h, w)}, tmp_path / "new")
    m = Manifest.load(new)
    assert m.inputs == {"x": [1, 1, h, w]}
    assert [tuple(p.range) for p in m.stages[0].parts] == [(0, 1), (1, 2)]  # channels kept
    assert [tuple(p.range) for p in m.stages[1].parts] == rows
    out = execute_sequential(new)
    assert max_abs_err(out, reference_outputs(new, make_inputs(m))) <= 1e-5
    assert Manifest.load(dep).inputs == {"x": [1, 1, 8, 8]}  # the folder given is untouched


def test_too_few_rows_for_the_parts_is_refused(residual_dep, tmp_path):
    inst_path, dep = residual_dep
    with pytest.raises(PlannerError, match="stage 1 splits 8 rows over 3 devices.*has 2 row"):
        deploy_at_shape(dep, inst_path, {None: (1, 1, 2, 8)}, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def _flatten_model() -> onnx.ModelProto:
    """A convolution flattened into a Gemm of fixed width: only the 8 x 8 input fits."""
    m = _M(7)
    x = m.conv("x", "c", 1, 2)
    f = m.n("Flatten", [x], "flat", axis=1)
    m.n("Gemm", [f, m.w("fc.w", (4, 2 * 8 * 8)), m.w("fc.b", (4,))], "y", transB=1)
    return m.model("x", [1, 1, 8, 8], ["y"])


def test_a_graph_that_changes_with_the_shape_is_refused(tmp_path, capsys):
    onnx.save(_flatten_model(), str(tmp_path / "f.onnx"))
    inst_path = _instance_file(tmp_path, tmp_path / "f.onnx")
    plan = {"stages": [{"first": 0, "last": len(load_instance(inst_path).graph.layers) - 1, "axis": "none",
                        "parts": [{"device": "d0"}]}]}
    dep = deploy(load_instance(inst_path), Plan.from_dict(plan), tmp_path / "dep")
    assert main(["run", str(dep), "--input-shape", "1,1,16,16", "--instance", str(inst_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "f.onnx" in err, err


def test_fixed_size_resize_runs_at_another_shape(tmp_path):
    """features_model resizes to fixed sizes (36 x 30): the layers after it keep their shapes."""
    onnx.save(features_model(), str(tmp_path / "f.onnx"))
    inst_path = _instance_file(tmp_path, tmp_path / "f.onnx")
    plan = {"stages": [{"first": 0, "last": 3, "axis": "rows", "parts": [{"device": "d0", "range": [0, 6]},
                                                                          {"device": "d1", "range": [6, 12]}]},
                       {"first": 4, "last": len(load_instance(inst_path).graph.layers) - 1, "axis": "none",
                        "parts": [{"device": "d2"}]}]}
    dep = deploy(load_instance(inst_path), Plan.from_dict(plan), tmp_path / "dep")
    new = deploy_at_shape(dep, inst_path, {None: (1, 3, 48, 40)}, tmp_path / "new")
    m = Manifest.load(new)
    assert [tuple(p.range) for p in m.stages[0].parts] == [(0, 12), (12, 24)]
    assert max_abs_err(execute_sequential(new), reference_outputs(new, make_inputs(m))) <= 1e-4


def test_cli_refusals_are_one_line(residual_dep, tmp_path, capsys):
    inst_path, dep = residual_dep
    other = _instance_file(tmp_path, tmp_path / "r.onnx", n_dev=2, name="other")
    cases = [
        (["--input-shape", "1,1,16,16"], "give --instance"),
        (["--instance", str(inst_path)], "--instance is read only with --input-shape"),
        (["--input-shape", "1,1,16,16", "--instance", str(other)], "not the instance"),
        (["--input-shape", "1,1,16,16", "--input-shape", "1,1,8,8", "--instance", str(inst_path)], "given twice"),
    ]
    for extra, message in cases:
        assert main(["run", str(dep), *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, (extra, err)


def test_cli_run_at_another_shape(residual_dep, tmp_path, capsys, monkeypatch):
    pytest.importorskip("mpi4py")
    import tempfile

    inst_path, dep = residual_dep
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert main(["run", str(dep), "--input-shape", "1,1,12,10", "--instance", str(inst_path),
                 "--check", "--repeat", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["max_abs_err"] <= 1e-5
    assert not any(p.name.startswith("milp-planner-reshape-") for p in scratch.iterdir())  # deleted after the run

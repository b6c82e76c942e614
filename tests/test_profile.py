"""Host profiling (`milp-planner profile`), device files as `profile:`, and channel tables."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx.utils import Extractor

from milp_planner.cli import main
from milp_planner.cost.evaluator import evaluate
from milp_planner.deploy.profile import (
    ProfileSettings, channel_cut, context_times, load_model_with_weights, profile_model, row_cut,
    time_model, write_device_file,
)
from milp_planner.errors import PlannerError
from milp_planner.instance import load_instance
from milp_planner.instance.reader import instance_from_dict
from milp_planner.space.plan import Part, Plan, Stage

FAST = ProfileSettings(repeats=3, warmup=1, fractions=(0.25, 0.5, 1.0))


@pytest.fixture(scope="module")
def host_file(tmp_path_factory) -> Path:
    """tiny_chain profiled quickly, written as a device file."""
    prof = profile_model("zoo:tiny_chain", settings=FAST)
    path = tmp_path_factory.mktemp("profiles") / "host.yaml"
    return write_device_file(prof, path)


def inst_shape(ref: str) -> tuple:
    from milp_planner.model.loading import load_graph

    return next(iter(load_graph(ref).inputs.values()))


def _instance_file(folder: Path, profile_ref: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "inst.yaml"
    path.write_text(
        "model: zoo:tiny_chain\n"
        "devices:\n"
        f"  - {{name: a, profile: {profile_ref}{extra}}}\n"
        f"  - {{name: b, profile: {profile_ref}}}\n"
        "network: {bandwidth_mbps: 100}\n"
        "search: {fusion_limit: 2, axes: [rows, channels]}\n"
    )
    return path


# -- the profile itself -----------------------------------------------------------------------


def test_profile_file_loads_as_a_table_device_and_prices_plans(host_file, tmp_path):
    data = yaml.safe_load(host_file.read_text())
    assert set(data) == {"source", "assumptions", "measured", "compute"}
    assert data["measured"] == {"model": "zoo:tiny_chain", "input_shape": list(inst_shape("zoo:tiny_chain"))}
    assert data["compute"]["model"] == "table"
    assert "1 intra-op" in data["assumptions"] and "median of 3 runs" in data["assumptions"]
    inst = load_instance(_instance_file(tmp_path, str(host_file)))
    dev = inst.devices[0]
    assert dev.compute.kind == "table" and dev.compute.macs_per_s is None
    assert set(dev.compute.table) == {layer.name for layer in inst.graph.layers}
    # a channel-splittable conv has its own channel table
    assert "conv2" in dev.compute.channel_table
    # the per-stage cost measured in a deployment, charged once per stage
    assert data["compute"]["stage_overhead_s"] > 0
    assert "with 1 to 4 layers a stage" in data["assumptions"]
    ov = float(dev.compute.stage_overhead_s)
    assert ov == pytest.approx(data["compute"]["stage_overhead_s"])
    # one device, whole layers: latency = the table's whole-layer times + one overhead per stage
    one = Plan(inst.name, list(Stage(l.id, l.id, "none", (Part("a"),)) for l in inst.graph.layers))
    whole = sum(float(dev.compute.table[l.name][-1][1]) for l in inst.graph.layers)
    assert evaluate(one, inst).latency_s == pytest.approx(whole + len(inst.graph.layers) * ov, rel=1e-9)
    fused = Plan(inst.name, [Stage(0, len(inst.graph.layers) - 1, "none", (Part("a"),))])
    assert evaluate(fused, inst).latency_s == pytest.approx(whole + ov, rel=1e-9)
    # two devices on halves of the rows of conv2: each part costs less than the whole layer
    stages = [Stage(l.id, l.id, "none", (Part("a"),)) for l in inst.graph.layers]
    stages[1] = Stage(1, 1, "rows", (Part("a", (0, 16)), Part("b", (16, 32))))
    m = evaluate(Plan(inst.name, list(stages)), inst)
    assert 0 < m.stages[1].compute_s[0] - ov < float(dev.compute.table["conv2"][-1][1])


def test_the_stage_cost_is_the_deployment_excess_per_stage(monkeypatch):
    """Golden arithmetic with the two timings replaced: a whole-model run of 1 ms and the model
    deployed a stage per layer (6 stages) in 1.6 ms give 0.1 ms a stage; a deployment faster
    than the whole model leaves one run call; a deployment that fails is said and leaves one
    run call too."""
    import milp_planner.deploy.profile as prof

    monkeypatch.setattr(prof, "time_model", lambda model, settings, rng: (1e-3 + 5e-6, (1,)))
    monkeypatch.setattr(prof, "run_overhead", lambda settings: 5e-6)
    monkeypatch.setattr(prof, "deployed_stage_cost", lambda ref, graph, settings, depth=1: (1.6e-3, 6))
    p = profile_model("zoo:tiny_chain", settings=FAST)
    assert p.stage_cost_s == pytest.approx(1e-4) and p.staged_total_s == pytest.approx(1.6e-3)
    assert p.device_entry()["compute"]["stage_overhead_s"] == pytest.approx(1e-4)
    monkeypatch.setattr(prof, "deployed_stage_cost", lambda ref, graph, settings, depth=1: (0.9e-3, 6))
    assert profile_model("zoo:tiny_chain", settings=FAST).stage_cost_s == pytest.approx(5e-6)
    # deeper stages cost more: 1 layer a stage 6 stages in 1.6 ms (excess 0.6 ms), 2 layers 3
    # stages in 1.45 ms (0.45), 3 layers 2 stages in 1.4 ms (0.4), 4 layers 2 stages in 1.5 ms
    # (0.5). By hand: mean stages 3.25, mean excess 0.4875 ms; sum of (n - 3.25)(e - 0.4875) =
    # 0.4125 ms, sum of (n - 3.25)^2 = 10.75; per stage 0.4125 / 10.75 = 0.0383721 ms, the rest
    # 0.4875 - 3.25 x 0.0383721 = 0.3627907 ms over the 6 layers: 0.0604651 ms a layer
    runs = {1: (1.6e-3, 6), 2: (1.45e-3, 3), 3: (1.4e-3, 2), 4: (1.5e-3, 2)}
    monkeypatch.setattr(prof, "deployed_stage_cost", lambda ref, graph, settings, depth=1: runs[depth])
    p = profile_model("zoo:tiny_chain", settings=FAST)
    assert p.stage_cost_s == pytest.approx(3.83721e-5, rel=1e-5)
    assert p.layer_overhead_s == pytest.approx(6.04651e-5, rel=1e-5)
    assert [k for k, *_ in p.staged] == [1, 2, 3, 4]
    entry = p.device_entry()
    assert "4 layers a stage, 2 stages: 1.500 ms, 250.0 us a stage" in entry["assumptions"]
    assert "per layer (60.5 us, in every point of the table)" in entry["assumptions"]
    # every point of every layer's table carries the per-layer cost
    for lp in p.layers:
        table = entry["compute"]["table"][lp.name]
        points = table["rows"] + table["channels"] if isinstance(table, dict) else table
        measured = [pt.seconds for pt in lp.rows] + [pt.seconds for pt in lp.channels]
        assert [s for _, s in points] == pytest.approx([m + p.layer_overhead_s for m in measured], rel=1e-3)
    # stages that cost less when deeper (excess 0.9, 0.3, 0.1, 0.1 ms): the fit's rest would be
    # negative (slope 2.15 / 10.75 = 0.2 ms, rest 0.35 - 3.25 x 0.2 = -0.3 ms), so it is 0 and the
    # excess is all per stage: sum n e / sum n^2 = (6 x 0.9 + 3 x 0.3 + 2 x 0.1 + 2 x 0.1) / 53 ms
    runs.update({1: (1.9e-3, 6), 2: (1.3e-3, 3), 3: (1.1e-3, 2), 4: (1.1e-3, 2)})
    p = profile_model("zoo:tiny_chain", settings=FAST)
    assert p.stage_cost_s == pytest.approx((5.4 + 0.9 + 0.2 + 0.2) / 53 * 1e-3, rel=1e-9)
    assert p.layer_overhead_s == 0.0

    def fails(ref, graph, settings, depth=1):
        raise PlannerError("deploy: no room")

    monkeypatch.setattr(prof, "deployed_stage_cost", fails)
    p = profile_model("zoo:tiny_chain", settings=FAST)
    assert p.stage_cost_s == pytest.approx(5e-6) and p.staged_total_s is None
    assert any("per-stage cost was not measured in a deployment (deploy: no room)" in n for n in p.notes)
    assert "Per stage (stage_overhead_s): one run call" in p.device_entry()["assumptions"]


def test_without_context_or_stages_the_stage_cost_is_one_run_call():
    from dataclasses import replace

    for settings in (replace(FAST, context=False), replace(FAST, stages=False)):
        p = profile_model("zoo:tiny_chain", settings=settings)
        assert p.stage_overhead_s is None and p.stage_cost_s == p.run_overhead_s


def test_deployed_stage_cost_runs_every_layer_as_a_stage():
    from milp_planner.deploy.profile import deployed_stage_cost

    graph = load_model_with_weights("zoo:tiny_chain")[1]
    seconds, stages = deployed_stage_cost("zoo:tiny_chain", graph, FAST)
    assert stages == len(graph.layers) and seconds > 0
    n = len(graph.layers)
    seconds, stages = deployed_stage_cost("zoo:tiny_chain", graph, FAST, depth=4)
    assert stages == -(-n // 4) and seconds > 0


def test_fractions_ascend_and_times_do_not_decrease(host_file):
    table = yaml.safe_load(host_file.read_text())["compute"]["table"]
    model_graph = load_model_with_weights("zoo:tiny_chain")[1]
    for layer in model_graph.layers:
        entry = table[layer.name]
        series = list(entry.values()) if isinstance(entry, dict) else [entry]
        for points in series:
            fr = [f for f, _ in points]
            ts = [t for _, t in points]
            assert fr == sorted(set(fr)) and fr[-1] == 1 and all(0 < f <= 1 for f in fr)
            assert all(t > 0 for t in ts) and ts == sorted(ts)
            if layer.row_splittable and layer.rows >= 4:
                assert len(points) == 3  # 1/4, 1/2 and the whole layer


def test_row_cut_computes_the_rows_asked_for_with_their_halo():
    model, graph = load_model_with_weights("zoo:tiny_chain")
    ex = Extractor(onnx.shape_inference.infer_shapes(model))
    conv2 = graph.layers[1]  # 3x3 conv, 32 rows
    sub = ex.extract_model(list(conv2.inputs), [conv2.output])
    cut = row_cut(sub, conv2, 8)
    x = [vi for vi in cut.graph.input if vi.name == conv2.inputs[0]][0]
    assert x.type.tensor_type.shape.dim[2].dim_value == 10  # 8 rows + a halo row on each side
    _, shape = time_model(cut, FAST, np.random.default_rng(0))
    assert shape == (1, 16, 8, 32)
    pool = graph.layers[2]  # 2x2 max pool, stride 2
    cut = row_cut(ex.extract_model(list(pool.inputs), [pool.output]), pool, 4)
    assert time_model(cut, FAST, np.random.default_rng(0))[1] == (1, 16, 4, 16)


def test_channel_cut_of_a_depthwise_conv_with_folded_batch_norm():
    model, graph = load_model_with_weights("zoo:mobilenetv2:32")
    ex = Extractor(onnx.shape_inference.infer_shapes(model))
    dw = next(l for l in graph.layers if l.groups > 1)
    sub = ex.extract_model(list(dw.inputs), [dw.output])
    cut, c = channel_cut(sub, dw, dw.channels // 4)
    assert c == dw.channels // 4
    assert time_model(cut, FAST, np.random.default_rng(0))[1][1] == c
    gemm = next(l for l in graph.layers if l.op == "Gemm")
    cut, c = channel_cut(ex.extract_model(list(gemm.inputs), [gemm.output]), gemm, 250)
    assert time_model(cut, FAST, np.random.default_rng(0))[1] == (1, 250)


def test_context_times_assign_every_kernel_of_the_whole_model_to_its_layer():
    model, graph = load_model_with_weights("zoo:tiny_residual")
    times, rest = context_times(model, graph, FAST, np.random.default_rng(0))
    convs = [l.name for l in graph.layers if l.op == "Conv"]
    assert set(convs) <= set(times) and all(times[c] > 0 for c in convs)
    assert set(times) <= {l.name for l in graph.layers}
    assert rest < sum(times.values())  # only layout reorders are left unassigned


def test_context_scaling_keeps_the_shape_of_each_curve():
    iso = profile_model("zoo:tiny_chain", settings=ProfileSettings(repeats=3, warmup=1, context=False, seed=1))
    ctx = profile_model("zoo:tiny_chain", settings=ProfileSettings(repeats=3, warmup=1, context=True, seed=1))
    assert iso.context_total_s is None and ctx.context_total_s > 0
    assert "in context" in ctx.device_entry()["assumptions"]
    for lp in ctx.layers:
        for p in lp.rows + lp.channels:
            assert 0 < p.fraction <= 1 and p.seconds > 0


# -- profile files in instances ---------------------------------------------------------------


def test_relative_profile_path_is_taken_from_the_instance_folder(host_file, tmp_path):
    shared = tmp_path / "profiles"
    shared.mkdir()
    (shared / "pi.yaml").write_text(host_file.read_text())
    inst = load_instance(_instance_file(tmp_path / "deep" / "er", "../../profiles/pi.yaml"))
    assert inst.devices[0].compute.kind == "table"
    assert inst.devices[0].profile == "../../profiles/pi.yaml"
    # the same file from instance_from_dict: relative to base_dir
    data = yaml.safe_load(_instance_file(tmp_path / "x", "profiles/pi.yaml").read_text())
    inst = instance_from_dict(data, "mem.yaml", base_dir=tmp_path)
    assert inst.devices[1].compute.kind == "table"


def test_instance_keys_override_the_profile_file(host_file, tmp_path):
    path = _instance_file(tmp_path, str(host_file),
                          ", memory_mb: 50, compute: {model: linear, macs_per_s: 1.0e9}")
    inst = load_instance(path)
    a, b = inst.devices
    assert a.memory_bytes == 50 * 10**6 and a.compute.kind == "linear" and a.compute.table == {}
    assert b.compute.kind == "table" and b.memory_bytes is None


def test_builtin_profile_names_keep_working(tmp_path):
    inst = load_instance(_instance_file(tmp_path, "rpi4"))
    assert inst.devices[0].compute.kind == "linear"


BAD_PROFILES = [
    ("unknown key", "compute: {model: table, table: {conv1: 1.0e-4}}\nspeed: 3\n", "host.yaml: speed: unknown key"),
    ("no such layer", "compute:\n  model: table\n  table: {conv9: 1.0e-4}\n",
     "host.yaml: compute.table.conv9: no layer named 'conv9'"),
    ("missing layers", "compute:\n  model: table\n  table: {conv1: 1.0e-4}\n",
     "host.yaml: compute.table: has no entry for layer 'conv2'"),
    ("descending", "compute:\n  model: table\n  table: {conv1: [[1, 1.0e-4], [0.5, 1.0e-5]]}\n  macs_per_s: 1.0e9\n",
     "host.yaml: compute.table.conv1[1][0]: fractions must be strictly ascending"),
    ("bad axis", "compute:\n  model: table\n  table: {conv1: {width: [[1, 1.0e-4]]}}\n  macs_per_s: 1.0e9\n",
     "host.yaml: compute.table.conv1.width: unknown key"),
    ("syntax", "compute: {model: table\n", "host.yaml: line"),
    ("bad power", "compute: {model: linear, macs_per_s: 1.0e9}\npower_w: {compute: -1}\n",
     "host.yaml: power_w.compute: must be >= 0"),
    ("bad memory", "compute: {model: linear, macs_per_s: 1.0e9}\nmemory_mb: zero\n",
     "host.yaml: memory_mb: must be a number"),
    ("source not text", "compute: {model: linear, macs_per_s: 1.0e9}\nsource: [1]\n",
     "host.yaml: source: must be text"),
    ("empty", "", "host.yaml: the profile file is empty"),
    ("not a mapping", "- 1\n", "host.yaml: must be a mapping"),
]


@pytest.mark.parametrize("label,text,message", BAD_PROFILES, ids=[b[0] for b in BAD_PROFILES])
def test_bad_profile_file_is_one_line_naming_the_file_and_key(tmp_path, label, text, message):
    (tmp_path / "host.yaml").write_text(text)
    with pytest.raises(PlannerError) as e:
        load_instance(_instance_file(tmp_path, "host.yaml"))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_json_device_file(tmp_path):
    (tmp_path / "dev.json").write_text('{"compute": {"model": "linear", "macs_per_s": 2.5e9}, "memory_mb": 64}')
    inst = load_instance(_instance_file(tmp_path, "dev.json"))
    assert inst.devices[0].compute.macs_per_s == 2500000000 and inst.devices[0].memory_bytes == 64 * 10**6


def test_missing_profile_file_names_the_instance_and_key(tmp_path):
    path = _instance_file(tmp_path, "nowhere.yaml")
    with pytest.raises(PlannerError, match=r"inst\.yaml: devices\[0\]\.profile: no such profile file 'nowhere.yaml'"):
        load_instance(path)


# -- the channel table in the evaluator ---------------------------------------------------------


def test_channel_parts_are_priced_from_the_channel_table(tmp_path):
    table = {"conv1": 1e-3, "conv2": {"rows": [[0.5, 2e-3], [1, 4e-3]], "channels": [[0.5, 3e-3], [1, 4e-3]]},
             "pool1": 1e-3, "conv3": 1e-3, "pool2": 1e-3, "conv4": 1e-3}
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump({"compute": {"model": "table", "table": table}}))
    inst = load_instance(_instance_file(tmp_path, "dev.yaml"))
    rest = [Stage(i, i, "none", (Part("a"),)) for i in (0, 2, 3, 4, 5)]

    def conv2_compute(axis: str, extent: int) -> list[float]:
        half = extent // 2
        st = Stage(1, 1, axis, (Part("a", (0, half)), Part("b", (half, extent))))
        m = evaluate(Plan(inst.name, list(rest[:1] + [st] + rest[1:])), inst)
        return [m.stages[1].compute_s[d] for d in (0, 1)]

    assert conv2_compute("rows", 32) == pytest.approx([2e-3, 2e-3])
    assert conv2_compute("channels", 16) == pytest.approx([3e-3, 3e-3])


# -- the command line ---------------------------------------------------------------------------


def test_cli_writes_the_device_file(tmp_path, capsys):
    out = tmp_path / "dev" / "host.yaml"
    code = main(["profile", "zoo:tiny_chain", "--out", str(out), "--repeats", "2", "--warmup", "0",
                 "--fractions", "0.5,1", "-q"])
    assert code == 0 and out.exists()
    assert "wrote" in capsys.readouterr().out
    table = yaml.safe_load(out.read_text())["compute"]["table"]
    assert [f for f, _ in table["conv3"]["rows"]] == [0.5, 1]
    assert not list(out.parent.glob(".*.tmp"))


def test_cli_profile_of_an_onnx_file_with_an_input_shape(tmp_path, capsys):
    from milp_planner.model import zoo

    onnx_path = tmp_path / "m.onnx"
    zoo.export("tiny_chain", onnx_path, size=16)
    out = tmp_path / "h.yaml"
    assert main(["profile", str(onnx_path), "--input-shape", "1,3,16,16", "--out", str(out),
                 "--repeats", "2", "-q"]) == 0
    assert "input [1, 3, 16, 16]" in yaml.safe_load(out.read_text())["source"]


def test_cli_bad_model_is_one_line(tmp_path, capsys):
    assert main(["profile", "zoo:nope", "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zoo:nope" in err
    assert not (tmp_path / "x.yaml").exists()


def test_bad_settings_are_refused():
    with pytest.raises(PlannerError, match="repeats"):
        profile_model("zoo:tiny_chain", settings=ProfileSettings(repeats=0))
    with pytest.raises(PlannerError, match="clock"):
        profile_model("zoo:tiny_chain", settings=ProfileSettings(clock="sundial"))


def test_both_clocks_time_a_run():
    model, _ = load_model_with_weights("zoo:tiny_chain")
    for clock in ("cpu", "wall"):
        t, shape = time_model(model, ProfileSettings(repeats=3, warmup=1, clock=clock), np.random.default_rng(0))
        assert 0 < t < 1 and shape == (1, 8, 8, 8)


def test_a_layer_slower_in_context_adds_its_excess_by_the_bytes_a_part_reads():
    """Golden values, counted by hand: 300 weights, 50 input and 50 output elements (400 in
    all); alone the whole layer takes 2 s, in context 4 s, so the excess is 2 s. Half the rows
    read every weight and half the activations: 2 x (300 + 50) / 400 = 1.75 s more; half the
    channels half the weights, the whole input and half the output: 2 x (150 + 50 + 25) / 400
    = 1.125 s more. A layer faster in context is scaled."""
    from milp_planner.deploy.profile import LayerProfile, Point, in_context
    from milp_planner.model.graph import Layer, LayerGraph

    layer = Layer(0, "conv", "Conv", ("x",), "y", (1, 2, 5, 5), params=300)
    graph = LayerGraph("g", [layer], {"x": (1, 2, 5, 5)}, ["y"])

    def profile():
        return LayerProfile("conv", "Conv", rows=[Point(Fraction(1, 2), 1.0), Point(Fraction(1), 2.0)],
                            channels=[Point(Fraction(1, 2), 1.2), Point(Fraction(1), 2.0)])

    slower = profile()
    in_context(slower, layer, graph, 4.0)
    assert [p.seconds for p in slower.rows] == pytest.approx([2.75, 4.0])
    assert [p.seconds for p in slower.channels] == pytest.approx([2.325, 4.0])
    faster = profile()
    in_context(faster, layer, graph, 1.0)
    assert [p.seconds for p in faster.rows] == pytest.approx([0.5, 1.0])
    assert [p.seconds for p in faster.channels] == pytest.approx([0.6, 1.0])

"""The built-in models: published parameter and MAC counts, structure, and runnable exports."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from milp_planner.model import zoo
from milp_planner.errors import PlannerError
from milp_planner.instance import load_graph_or_instance
from milp_planner.model.loading import load_graph
from milp_planner.model.onnx import import_onnx

# name: (params, exact MACs, published GMACs to 3 decimals). Params are torchvision's
# trainable counts (BN = 2 x C); MACs are Conv/Gemm multiplications only.
PUBLISHED = {
    "vgg16": (138_357_544, 15_470_264_320, 15.470),
    "vgg19": (143_667_240, 19_632_062_464, 19.632),
    "resnet50": (25_557_032, 4_089_184_256, 4.089),
    "resnet101": (44_549_160, 7_801_405_440, 7.801),
    "mobilenetv2": (3_504_872, 300_774_272, 0.301),
    # extras (torchvision docs: 11.69M/1.81G, 21.80M/3.66G, 60.19M/11.51G, 61.10M/0.71G, 7.98M/2.83G)
    "resnet18": (11_689_512, 1_814_073_344, 1.814),
    "resnet34": (21_797_672, 3_663_761_408, 3.664),
    "resnet152": (60_192_808, 11_513_626_624, 11.514),
    "alexnet": (61_100_840, 714_188_480, 0.714),
    "densenet121": (7_978_856, 2_834_161_664, 2.834),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_counts(name):
    params, macs, gmacs = PUBLISHED[name]
    g = load_graph(f"zoo:{name}")
    assert g.totals["params"] == params
    assert g.totals["macs"] == macs
    assert round(g.totals["macs"] / 1e9, 3) == gmacs
    assert g.inputs == {"input": (1, 3, 224, 224)} and g.outputs == ["output"]
    assert g.layers[-1].shape == (1, 1000) and g.layers[-1].output == "output"
    assert not g.warnings


def test_vgg16_macs_by_formula():
    """15,470,264,320 = sum over convs of H*W*Cout*Cin*9 + the three FC layers."""
    convs = [(224, 3, 64), (224, 64, 64), (112, 64, 128), (112, 128, 128)] + \
        [(56, 128, 256), (56, 256, 256), (56, 256, 256)] + \
        [(28, 256, 512), (28, 512, 512), (28, 512, 512)] + [(14, 512, 512)] * 3
    conv_macs = sum(h * h * cout * cin * 9 for h, cin, cout in convs)
    fc_macs = 25088 * 4096 + 4096 * 4096 + 4096 * 1000
    assert conv_macs + fc_macs == 15_470_264_320 == load_graph("zoo:vgg16").totals["macs"]
    conv_params = sum(cout * cin * 9 + cout for _, cin, cout in convs)
    fc_params = 25088 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 1000 + 1000
    assert conv_params + fc_params == 138_357_544


def test_resnet50_structure():
    g = load_graph("zoo:resnet50")
    # conv1, maxpool, 16 blocks of 3 convs + Add, 4 downsample convs, GAP, Flatten, FC
    assert len(g) == 2 + 16 * 4 + 4 + 3
    conv1 = g.layers[0]
    assert conv1.op == "Conv" and conv1.folded == ("BatchNormalization", "Relu")
    assert conv1.params == 64 * 3 * 49 + 2 * 64
    adds = [layer for layer in g.layers if layer.op == "Add"]
    assert len(adds) == 16 and all(a.folded == ("Relu",) and len(a.inputs) == 2 for a in adds)
    # v1.5: the stride is in the 3x3 conv
    assert g.layers[16].name == "layer2.0.conv2" and g.layers[16].rowdep.stride == 2
    assert g.layers[15].rowdep.stride == 1
    assert all(layer.row_splittable for layer in g.layers[:-3])
    assert [layer.row_splittable for layer in g.layers[-3:]] == [False, False, False]


def test_mobilenetv2_structure():
    g = load_graph("zoo:mobilenetv2")
    dw = [layer for layer in g.layers if layer.groups > 1]
    assert len(dw) == 17 and all(layer.groups == layer.shape[1] for layer in dw)
    assert all(layer.folded == ("BatchNormalization", "Clip") for layer in dw)
    assert sum(layer.op == "Add" for layer in g.layers) == 10


def test_densenet_bn_alone_and_concat():
    g = load_graph("zoo:densenet121")
    alone = [layer for layer in g.layers if layer.op == "BatchNormalization"]
    assert len(alone) == 4 and all(layer.folded == ("Relu",) and layer.rowdep.kind == "identity" for layer in alone)
    cats = [layer for layer in g.layers if layer.op == "Concat"]
    assert cats and all(layer.rowdep.kind == "identity" and layer.row_splittable for layer in cats)


TINY = {
    "tiny_chain": (6, (1, 8, 8, 8)),
    "tiny_residual": (6, (1, 4, 16, 16)),
    "tiny_fc": (4, (1, 10)),
    "tiny_unet": (12, (1, 2, 32, 32)),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_networks(name):
    n_layers, out_shape = TINY[name]
    g = load_graph(f"zoo:{name}")
    assert len(g) == n_layers and g.layers[-1].shape == out_shape
    assert g.inputs == {"input": (1, 3, 32, 32)}
    assert g.totals["macs"] > 0 and g.totals["params"] > 0


def test_tiny_chain_is_row_splittable_throughout():
    g = load_graph("zoo:tiny_chain")
    assert all(layer.row_splittable for layer in g.layers)
    assert [layer.op for layer in g.layers] == ["Conv", "Conv", "MaxPool", "Conv", "MaxPool", "Conv"]


def test_tiny_fc_and_unet_kinds():
    fc = load_graph("zoo:tiny_fc")
    assert [layer.rowdep.kind for layer in fc.layers] == ["window", "window", "none", "none"]
    unet = load_graph("zoo:tiny_unet")
    kinds = {layer.op: layer.rowdep.kind for layer in unet.layers}
    assert kinds["Resize"] == "resize" and kinds["ConvTranspose"] == "transpose" and kinds["Concat"] == "identity"
    assert all(layer.row_splittable for layer in unet.layers)


def test_names():
    names = zoo.names()
    assert set(PUBLISHED) | set(TINY) <= set(names)
    assert names == sorted(names) and all(n == n.lower() for n in names)


def test_weightless_build_is_light_and_has_no_data():
    m = zoo.build("vgg19")
    assert m.ByteSize() < 100_000
    floats = [t for t in m.graph.initializer if t.data_type == TensorProto.FLOAT]
    assert floats and all(t.data_location == TensorProto.EXTERNAL and not t.raw_data for t in floats)
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    assert inferred.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 1000


def test_sizes_and_input_shape():
    small = load_graph("zoo:vgg16:64")  # features 2x2: a Resize stands in for the adaptive pool
    assert small.totals["params"] == 138_357_544 and small.inputs["input"] == (1, 3, 64, 64)
    big = load_graph("zoo:vgg16:448")  # features 14x14: AveragePool 2
    assert big.totals["params"] == 138_357_544 and any(layer.op == "AveragePool" for layer in big.layers)
    r = load_graph("zoo:resnet50", input_shape=(2, 3, 160, 128))
    assert r.inputs["input"] == (2, 3, 160, 128) and r.layers[0].shape == (2, 64, 80, 64)
    assert r.totals["params"] == 25_557_032
    g, dtype_bytes = load_graph_or_instance("zoo:mobilenetv2:96")
    assert dtype_bytes == 4 and g.inputs["input"] == (1, 3, 96, 96)


@pytest.mark.parametrize("ref, message", [
    ("zoo:vgg16:8", "input size 8 is not supported"),
    ("zoo:nosuchnet", "no such zoo model"),
    ("zoo:vgg16:abc", "SIZE must be an integer"),
    ("zoo:tiny_unet:30", "multiple of 4"),
])
def test_bad_zoo_references(ref, message):
    with pytest.raises(PlannerError, match=message):
        load_graph(ref)


def test_bare_zoo_name_hint():
    with pytest.raises(PlannerError, match="did you mean zoo:vgg16"):
        load_graph("vgg16")


def _run(path, shape, seed=1):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return sess.run(None, {"input": x})[0]


@pytest.mark.parametrize("name, size, out_shape", [
    ("tiny_chain", None, (1, 8, 8, 8)),
    ("tiny_residual", None, (1, 4, 16, 16)),
    ("tiny_fc", None, (1, 10)),
    ("tiny_unet", None, (1, 2, 32, 32)),
    ("mobilenetv2", 64, (1, 1000)),
])
def test_export_runs_under_onnxruntime(tmp_path, name, size, out_shape):
    path = zoo.export(name, tmp_path / f"{name}.onnx", size=size, seed=3)
    s = size or 32
    y = _run(path, (1, 3, s, s))
    assert y.shape == out_shape and np.isfinite(y).all() and np.abs(y).max() > 0
    # the exported file imports to the same counts as the weightless build
    g = import_onnx(path)
    ref = load_graph(f"zoo:{name}" + (f":{size}" if size else ""))
    assert g.totals == ref.totals and [layer.name for layer in g.layers] == [layer.name for layer in ref.layers]


def test_export_is_deterministic(tmp_path):
    a = zoo.export("tiny_residual", tmp_path / "a.onnx", seed=7).read_bytes()
    b = zoo.export("tiny_residual", tmp_path / "b.onnx", seed=7).read_bytes()
    c = zoo.export("tiny_residual", tmp_path / "c.onnx", seed=8).read_bytes()
    assert a == b != c
    assert not list(tmp_path.glob(".*.tmp"))


def test_cli_zoo_list_and_export(tmp_path, capsys):
    from milp_planner.cli import main

    assert main(["zoo", "list"]) == 0
    assert "resnet50" in capsys.readouterr().out.split()
    out = tmp_path / "chain.onnx"
    assert main(["zoo", "export", "tiny_chain", str(out), "--size", "16"]) == 0
    assert _run(out, (1, 3, 16, 16)).shape == (1, 8, 4, 4)

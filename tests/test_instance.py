"""Instance files: parsing, exact numbers, defaults, profiles and one-line validation errors."""

from __future__ import annotations

import copy
from fractions import Fraction
from importlib import resources
from pathlib import Path

import pytest

from milp_planner.instance.devices import layer_time
from milp_planner.errors import PlannerError
from milp_planner.model.graph import Layer, LayerGraph, RowDep
from milp_planner.instance import load_instance
from milp_planner.instance.reader import instance_from_dict, parse_text, read_instance
from milp_planner.instance.profiles import PROFILES, profile

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = ROOT / "instances"
SRC = "inst/x.yaml"


def tiny_graph() -> LayerGraph:
    conv = RowDep(kind="window", kernel=3, stride=1, pad_top=1)
    layers = [
        Layer(0, "conv1", "Conv", ("input",), "t1", (1, 8, 16, 16), macs=55296, params=224,
              rowdep=conv, row_splittable=True, channel_splittable=True),
        Layer(1, "conv2", "Conv", ("t1",), "t2", (1, 8, 16, 16), macs=147456, params=584,
              rowdep=conv, row_splittable=True, channel_splittable=True),
        Layer(2, "pool", "GlobalAveragePool", ("t2",), "t3", (1, 8, 1, 1), ops=2048),
    ]
    return LayerGraph("tiny", layers, {"input": (1, 3, 16, 16)}, ["t3"])


GRAPH = tiny_graph()


def base() -> dict:
    return {
        "name": "t",
        "model": "zoo:tiny_chain",
        "devices": [
            {"name": "a", "compute": {"model": "linear", "macs_per_s": 1000000000}, "memory_mb": 1024},
            {"name": "b", "compute": {"model": "linear", "macs_per_s": 2000000000, "overhead_s": Fraction(1, 10000)}},
        ],
        "network": {"bandwidth_mbps": 100, "latency_ms": Fraction(1, 2)},
    }


def build(data: dict, **kw):
    return instance_from_dict(data, SRC, base_dir=Path("."), graph=GRAPH, **kw)


# -- good instances ------------------------------------------------------------------------


def test_minimal_instance_base_units_and_defaults():
    inst = build(base())
    assert inst.name == "t" and inst.model == "zoo:tiny_chain"
    assert inst.graph is GRAPH
    assert inst.device_names == ["a", "b"]
    a, b = inst.devices
    assert a.compute.kind == "linear" and a.compute.macs_per_s == 10**9
    assert isinstance(a.compute.macs_per_s, Fraction)
    assert a.compute.overhead_s == 0
    assert b.compute.overhead_s == Fraction(1, 10000)
    assert a.memory_bytes == 1_024_000_000 and b.memory_bytes is None
    assert a.node == "a" and b.node == "b"
    assert a.power.compute_w == 0 and a.profile is None
    net = inst.network
    assert net.bandwidth_Bps[0][1] == net.bandwidth_Bps[1][0] == 12_500_000.0
    assert net.latency_s[0][1] == pytest.approx(0.0005)
    assert net.latency_s[0][0] == 0.0
    assert net.transfer_time(0, 1, 12_500_000) == pytest.approx(1.0005)
    assert net.transfer_time(1, 1, 10**6) == 0.0
    assert net.medium == "switched"
    assert net.source.device == 0 and net.sink.device == 0
    assert inst.dtype_bytes == 4
    assert inst.objective == "latency"
    assert inst.search.fusion_limit == 1 and inst.search.max_parts == 2
    assert inst.search.splits == ("equal",) and inst.search.axes == ("rows",)
    assert inst.constraints.memory is True
    assert inst.constraints.latency_s is None and inst.constraints.energy_j is None


def test_full_instance_from_yaml_text():
    text = """
name: full
model: zoo:tiny_chain
input_shape: [1, 3, 16, 16]
dtype_bytes: 1
devices:
  - name: a
    compute: {model: linear, macs_per_s: 6.0e9, overhead_s: 1e-4}
    memory_mb: .5
    power_w: {compute: 6.4, tx: 1.5, rx: 1.2}
    node: box
  - name: b
    compute: {model: roofline, macs_per_s: 1e10, mem_gbps: 25.6}
    node: box
  - name: c
    compute:
      model: table
      table: {conv1: 0.001, conv2: [[0.5, 0.0011], [1, 0.002]], pool: 1e-5}
network:
  bandwidth_mbps:
    - [0, 100, 50]
    - [80, null, 50]
    - [50, 50, 0]
  latency_ms: [[0, 1, 2], [1, 0, 2], [2, 2, 0]]
  medium: shared
  source: {bandwidth_mbps: [10, 20, 30], latency_ms: 2}
  sink: {device: c}
search: {fusion_limit: 3, max_parts: 9, splits: [equal, capacity, grid:8, equal], axes: [rows, channels]}
objective: energy
constraints: {memory: false, latency_ms: 250, energy_j: 1.5}
"""
    inst = build(parse_text(text, SRC, "yaml"))
    a, b, c = inst.devices
    assert a.compute.macs_per_s == Fraction(6_000_000_000)
    assert a.compute.overhead_s == Fraction(1, 10_000)
    assert a.memory_bytes == 500_000
    assert a.power.compute_w == Fraction(32, 5) and a.power.tx_w == Fraction(3, 2)
    assert a.node == b.node == "box" and c.node == "c"
    assert b.compute.kind == "roofline" and b.compute.mem_bytes_per_s == Fraction(25_600_000_000)
    assert c.compute.kind == "table" and c.compute.macs_per_s is None
    assert c.compute.table["conv1"] == ((1, Fraction(1, 1000)),)
    assert c.compute.table["conv2"] == ((Fraction(1, 2), Fraction(11, 10000)), (1, Fraction(1, 500)))
    assert layer_time(c.compute, GRAPH.layers[1], Fraction(1, 4)) == Fraction(11, 20000)
    net = inst.network
    assert net.bandwidth_Bps[1][0] == 10_000_000.0 and net.bandwidth_Bps[0][2] == 6_250_000.0
    assert net.latency_s[1][2] == pytest.approx(0.002)
    assert net.medium == "shared"
    assert net.source.external and net.source.bandwidth_Bps == (1_250_000.0, 2_500_000.0, 3_750_000.0)
    assert net.source.latency_s == (0.002, 0.002, 0.002)
    assert net.source.link_time(1, 2_500_000) == pytest.approx(1.002)
    assert net.sink.device == 2
    assert inst.search.max_parts == 3  # capped at the number of devices
    assert inst.search.splits == ("equal", "capacity", "grid:8")
    assert inst.search.axes == ("rows", "channels")
    assert inst.objective == "energy" and inst.dtype_bytes == 1
    assert inst.constraints == type(inst.constraints)(memory=False, latency_s=Fraction(1, 4), energy_j=Fraction(3, 2))


@pytest.mark.parametrize(
    "text, value",
    [
        ("6.0e9", Fraction(6_000_000_000)),
        ("1e-4", Fraction(1, 10_000)),
        ("1E+3", Fraction(1000)),
        (".5", Fraction(1, 2)),
        ("0.1", Fraction(1, 10)),
        ("-2.5", Fraction(-5, 2)),
        ("3.", Fraction(3)),
        ("7", 7),
        ("0x10", 16),
    ],
)
def test_yaml_numbers_are_exact(text, value):
    got = parse_text(f"x: {text}\n", SRC, "yaml")["x"]
    assert got == value and type(got) is type(value)


def test_yaml_strings_bools_nulls():
    data = parse_text("a: yes\nb: true\nc: ~\nd: 2024-01-01\ne: '6.0e9'\nf: .inf\n", SRC, "yaml")
    assert data == {"a": "yes", "b": True, "c": None, "d": "2024-01-01", "e": "6.0e9", "f": ".inf"}


def test_json_decimals_are_exact():
    data = parse_text('{"x": 0.1, "y": 6.0e9, "z": 3}', SRC, "json")
    assert data == {"x": Fraction(1, 10), "y": Fraction(6_000_000_000), "z": 3}
    assert type(data["z"]) is int and type(data["x"]) is Fraction


def test_profile_and_override():
    data = base()
    data["devices"][0] = {"name": "a", "profile": "rpi4", "compute": {"macs_per_s": Fraction(7_000_000_000)},
                          "power_w": {"tx": 2}}
    data["devices"][1] = {"name": "b", "profile": "xavier-nx-gpu", "memory_mb": None, "node": "nx"}
    inst = build(data)
    a, b = inst.devices
    p = PROFILES["rpi4"]
    assert a.profile == "rpi4"
    assert a.compute.kind == "linear"
    assert a.compute.macs_per_s == 7_000_000_000  # overridden
    assert a.compute.overhead_s == p["compute"]["overhead_s"]  # from the profile
    assert a.memory_bytes == int(p["memory_mb"] * 10**6)
    assert a.power.tx_w == 2 and a.power.compute_w == p["power_w"]["compute"]
    assert b.memory_bytes is None  # an explicit null removes the profile's capacity
    assert b.node == "nx"
    assert b.compute.macs_per_s == Fraction("2.84e11")


def test_profile_switch_to_linear_drops_roofline_bandwidth():
    data = base()
    data["devices"][0] = {"name": "a", "profile": "gemmini-500mhz", "compute": {"model": "linear"}}
    a = build(data).devices[0]
    assert a.compute.kind == "linear" and a.compute.mem_bytes_per_s is None
    assert a.compute.macs_per_s == PROFILES["gemmini-500mhz"]["compute"]["macs_per_s"]


def test_profiles_are_complete_and_copied():
    required = {"rpi3", "rpi4", "rpi5", "jetson-nano", "jetson-tx2", "xavier-nx-cpu", "xavier-nx-gpu",
                "orin-nx", "gemmini-100mhz", "gemmini-500mhz", "jetson-nano-cpu", "jetson-tx2-cpu",
                "orin-nx-cpu"}
    assert required <= set(PROFILES)
    for name, p in PROFILES.items():
        assert p["source"] and p["assumptions"], name
        assert p["compute"]["macs_per_s"] > 0, name
        data = base()
        data["devices"][0] = {"name": "a", "profile": name}
        build(data)  # every profile is a valid device
    p = profile("rpi4")
    p["compute"]["macs_per_s"] = 1
    assert PROFILES["rpi4"]["compute"]["macs_per_s"] != 1
    with pytest.raises(PlannerError, match="unknown profile"):
        profile("nope")


@pytest.mark.parametrize(
    "unit, net, macs, layers, measured_fps, bound",
    [
        ("cpu", "vgg19", 19.632e9, 25, 7.273, 0.07),
        ("cpu", "resnet101", 7.80e9, 141, 5.786, 0.18),
        ("cpu", "densenet121", 2.87e9, 189, 7.987, 0.15),
        ("gpu", "vgg19", 19.632e9, 25, 11.664, 0.12),
        ("gpu", "resnet101", 7.80e9, 141, 21.767, 0.44),
        ("gpu", "densenet121", 2.87e9, 189, 12.807, 0.22),
    ],
)
def test_xavier_profiles_match_autodice_table_ii(unit, net, macs, layers, measured_fps, bound):
    c = PROFILES[f"xavier-nx-{unit}"]["compute"]
    pred = macs / float(c["macs_per_s"]) + layers * float(c["overhead_s"])
    assert abs(pred * measured_fps - 1) < bound  # the errors stated in docs/profiles.md


def test_input_shape_argument_overrides_file(monkeypatch):
    import milp_planner.instance.reader as models

    seen = {}

    def fake_load_graph(ref, base_dir=None, input_shape=None):
        seen.update(ref=ref, base_dir=base_dir, input_shape=input_shape)
        return GRAPH

    monkeypatch.setattr(models, "load_graph", fake_load_graph)
    data = base()
    data["input_shape"] = [1, 3, 32, 32]
    inst = instance_from_dict(data, SRC, base_dir=Path("/some/dir"))
    assert seen == {"ref": "zoo:tiny_chain", "base_dir": Path("/some/dir"), "input_shape": (1, 3, 32, 32)}
    assert inst.graph is GRAPH
    instance_from_dict(data, SRC, base_dir=Path("/some/dir"), input_shape=(1, 3, 8, 8))
    assert seen["input_shape"] == (1, 3, 8, 8)


def test_model_path_is_relative_to_the_file(tmp_path, monkeypatch):
    import milp_planner.instance.reader as models

    seen = {}
    monkeypatch.setattr(models, "load_graph",
                        lambda ref, base_dir=None, input_shape=None: seen.update(base=base_dir) or GRAPH)
    sub = tmp_path / "sub"
    sub.mkdir()
    f = sub / "i.yaml"
    f.write_text("model: net.onnx\ndevices: [{name: a, compute: {macs_per_s: 1e9}}]\n")
    inst = read_instance(f)
    assert seen["base"] == sub and inst.path == f and inst.name == "i" and inst.model == "net.onnx"


# -- validation errors ---------------------------------------------------------------------


def _set(path, value):
    def mutate(d):
        keys = path
        for k in keys[:-1]:
            d = d[k]
        if value is _DELETE:
            del d[keys[-1]]
        else:
            d[keys[-1]] = value
    return mutate


_DELETE = object()


BAD = [
    # (id, mutation, key in the message, reason fragment)
    ("unknown top key", _set(["colour"], 1), "colour", "unknown key"),
    ("unknown device key", _set(["devices", 0, "memroy_mb"], 1), "devices[0].memroy_mb", "did you mean 'memory_mb'"),
    ("unknown compute key", _set(["devices", 1, "compute", "macs"], 1), "devices[1].compute.macs", "unknown key"),
    ("unknown power key", _set(["devices", 0, "power_w"], {"idle": 1}), "devices[0].power_w.idle", "unknown key"),
    ("unknown network key", _set(["network", "bw"], 1), "network.bw", "unknown key"),
    ("unknown search key", _set(["search"], {"fusion": 2}), "search.fusion", "unknown key"),
    ("unknown constraint key", _set(["constraints"], {"mem": True}), "constraints.mem", "unknown key"),
    ("unknown endpoint key", _set(["network", "source"], {"dev": "a"}), "network.source.dev", "unknown key"),
    ("missing devices", _set(["devices"], _DELETE), "devices", "required"),
    ("empty devices", _set(["devices"], []), "devices", "must not be empty"),
    ("devices not a list", _set(["devices"], {"a": 1}), "devices", "must be a list"),
    ("device without name", _set(["devices", 0, "name"], _DELETE), "devices[0].name", "required"),
    ("device named twice", _set(["devices", 1, "name"], "a"), "devices[1].name", "named twice"),
    ("device without compute", _set(["devices", 0, "compute"], _DELETE), "devices[0].compute", "required"),
    ("zero bandwidth", _set(["network", "bandwidth_mbps"], 0), "network.bandwidth_mbps", "must be > 0"),
    ("negative bandwidth in matrix", _set(["network", "bandwidth_mbps"], [[0, -5], [100, 0]]),
     "network.bandwidth_mbps[0][1]", "must be > 0 (got -5)"),
    ("matrix wrong size", _set(["network", "bandwidth_mbps"], [[0, 1, 1], [1, 0, 1], [1, 1, 0]]),
     "network.bandwidth_mbps", "must be 2x2"),
    ("matrix ragged", _set(["network", "bandwidth_mbps"], [[0, 1], [1]]), "network.bandwidth_mbps", "must be 2x2"),
    ("missing bandwidth", _set(["network", "bandwidth_mbps"], _DELETE), "network.bandwidth_mbps", "required"),
    ("negative latency", _set(["network", "latency_ms"], Fraction(-1, 10)), "network.latency_ms", "must be >= 0"),
    ("negative latency in matrix", _set(["network", "latency_ms"], [[0, 1], [-1, 0]]),
     "network.latency_ms[1][0]", "must be >= 0"),
    ("latency matrix wrong size", _set(["network", "latency_ms"], [[0]]), "network.latency_ms", "must be 2x2"),
    ("string bandwidth", _set(["network", "bandwidth_mbps"], "fast"), "network.bandwidth_mbps", "must be a number"),
    ("unknown medium", _set(["network", "medium"], "radio"), "network.medium", "switched"),
    ("source unknown device", _set(["network", "source"], {"device": "zz"}), "network.source.device",
     "no device named 'zz'"),
    ("sink unknown device", _set(["network", "sink"], {"device": "zz"}), "network.sink.device", "no device named"),
    ("sink device and bandwidth", _set(["network", "sink"], {"device": "a", "bandwidth_mbps": 5}),
     "network.sink", "not both"),
    ("source bandwidth list wrong length", _set(["network", "source"], {"bandwidth_mbps": [1, 2, 3]}),
     "network.source.bandwidth_mbps", "must have 2 entries"),
    ("source zero bandwidth", _set(["network", "source"], {"bandwidth_mbps": [1, 0]}),
     "network.source.bandwidth_mbps[1]", "must be > 0"),
    ("source negative latency", _set(["network", "source"], {"bandwidth_mbps": 10, "latency_ms": -1}),
     "network.source.latency_ms", "must be >= 0"),
    ("unknown profile", _set(["devices", 0, "profile"], "rpi9"), "devices[0].profile", "known: "),
    ("unknown cost model", _set(["devices", 0, "compute", "model"], "quadratic"), "devices[0].compute.model",
     "unknown cost model"),
    ("non-numeric macs", _set(["devices", 0, "compute", "macs_per_s"], "6.0e9"), "devices[0].compute.macs_per_s",
     "must be a number (got '6.0e9')"),
    ("bool is not a number", _set(["devices", 0, "compute", "macs_per_s"], True), "devices[0].compute.macs_per_s",
     "must be a number"),
    ("inf is not a number", _set(["devices", 0, "compute", "macs_per_s"], ".inf"), "devices[0].compute.macs_per_s",
     "must be a number"),
    ("zero macs", _set(["devices", 0, "compute", "macs_per_s"], 0), "devices[0].compute.macs_per_s", "must be > 0"),
    ("negative macs", _set(["devices", 0, "compute", "macs_per_s"], -3), "devices[0].compute.macs_per_s",
     "must be > 0"),
    ("linear without macs", _set(["devices", 0, "compute"], {"model": "linear"}), "devices[0].compute.macs_per_s",
     "required"),
    ("negative overhead", _set(["devices", 0, "compute", "overhead_s"], -1), "devices[0].compute.overhead_s",
     "must be >= 0"),
    ("roofline without bandwidth", _set(["devices", 0, "compute", "model"], "roofline"),
     "devices[0].compute.mem_bytes_per_s", "required"),
    ("two memory bandwidths", _set(["devices", 0, "compute"], {"model": "roofline", "macs_per_s": 1,
                                                                "mem_gbps": 1, "mem_bytes_per_s": 1}),
     "devices[0].compute.mem_gbps", "not both"),
    ("zero memory", _set(["devices", 0, "memory_mb"], 0), "devices[0].memory_mb", "must be > 0"),
    ("negative memory", _set(["devices", 0, "memory_mb"], -1), "devices[0].memory_mb", "must be > 0"),
    ("negative power", _set(["devices", 0, "power_w"], {"compute": -1}), "devices[0].power_w.compute",
     "must be >= 0"),
    ("dtype 3", _set(["dtype_bytes"], 3), "dtype_bytes", "must be one of 1, 2, 4, 8"),
    ("dtype string", _set(["dtype_bytes"], "int8"), "dtype_bytes", "must be one of"),
    ("unknown objective", _set(["objective"], "speed"), "objective", "latency, energy, period, memory"),
    ("unknown axis", _set(["search"], {"axes": ["rows", "cols"]}), "search.axes[1]", "unknown axis 'cols'"),
    ("unknown split", _set(["search"], {"splits": ["equal", "random"]}), "search.splits[1]", "unknown split"),
    ("grid too small", _set(["search"], {"splits": ["grid:1"]}), "search.splits[0]", "G >= 2"),
    ("grid not integer", _set(["search"], {"splits": ["grid:x"]}), "search.splits[0]", "unknown split"),
    ("empty splits", _set(["search"], {"splits": []}), "search.splits", "non-empty"),
    ("fusion limit 0", _set(["search"], {"fusion_limit": 0}), "search.fusion_limit", "must be >= 1"),
    ("fusion limit fraction", _set(["search"], {"fusion_limit": Fraction(3, 2)}), "search.fusion_limit",
     "must be an integer"),
    ("max_parts 0", _set(["search"], {"max_parts": 0}), "search.max_parts", "must be >= 1"),
    ("memory constraint not bool", _set(["constraints"], {"memory": "yes"}), "constraints.memory", "true or false"),
    ("latency cap zero", _set(["constraints"], {"latency_ms": 0}), "constraints.latency_ms", "must be > 0"),
    ("energy cap string", _set(["constraints"], {"energy_j": "1J"}), "constraints.energy_j", "must be a number"),
    ("table unknown layer", _set(["devices", 0, "compute"], {"model": "table", "macs_per_s": 1,
                                                             "table": {"conv9": 1}}),
     "devices[0].compute.table.conv9", "no layer named 'conv9'"),
    ("table without macs missing layer", _set(["devices", 0, "compute"], {"model": "table",
                                                                          "table": {"conv1": 1, "pool": 1}}),
     "devices[0].compute.table", "no entry for layer 'conv2'"),
    ("table fractions not ascending", _set(["devices", 0, "compute"], {"model": "table", "macs_per_s": 1,
                                                                       "table": {"conv1": [[1, 2], [Fraction(1, 2), 1]]}}),
     "devices[0].compute.table.conv1[1][0]", "ascending"),
    ("table fraction above one", _set(["devices", 0, "compute"], {"model": "table", "macs_per_s": 1,
                                                                  "table": {"conv1": [[2, 1]]}}),
     "devices[0].compute.table.conv1[0][0]", "<= 1"),
    ("table on a linear model", _set(["devices", 0, "compute", "table"], {"conv1": 1}), "devices[0].compute.table",
     "only read by model: table"),
    ("input_shape not a list", _set(["input_shape"], 224), "input_shape", "list of positive integers"),
    ("input_shape negative", _set(["input_shape"], [1, 3, -224, 224]), "input_shape[2]", "positive integer"),
    ("input_shape fraction", _set(["input_shape"], [1, 3, Fraction(1, 2)]), "input_shape[2]", "positive integer"),
    ("name not text", _set(["name"], 5), "name", "non-empty string"),
    ("node not text", _set(["devices", 0, "node"], 5), "devices[0].node", "non-empty string"),
]


@pytest.mark.parametrize("mutate, key, reason", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_validation_errors_name_file_key_and_reason(mutate, key, reason):
    data = copy.deepcopy(base())
    mutate(data)
    with pytest.raises(PlannerError) as err:
        build(data)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{SRC}: ")
    assert f" {key}: " in msg or f" {key}." in msg, msg
    assert reason in msg, msg


def test_missing_model_key():
    data = base()
    del data["model"]
    with pytest.raises(PlannerError, match=rf"^{SRC}: model: required"):
        instance_from_dict(data, SRC, base_dir=Path("."))
    # with a graph given, the model key may be absent
    assert build(data).model == ""


def test_missing_model_file(tmp_path):
    f = tmp_path / "inst.yaml"
    f.write_text("model: missing.onnx\ndevices: [{name: a, compute: {macs_per_s: 1e9}}]\n")
    with pytest.raises(PlannerError) as err:
        read_instance(f)
    msg = str(err.value)
    assert msg.startswith(f"{f}: model: ") and "missing.onnx" in msg and "\n" not in msg


def test_unknown_zoo_model(tmp_path):
    f = tmp_path / "inst.yaml"
    f.write_text("model: zoo:no_such_net\ndevices: [{name: a, compute: {macs_per_s: 1e9}}]\n")
    with pytest.raises(PlannerError, match=r"inst\.yaml: model: "):
        read_instance(f)


def test_yaml_syntax_error_has_line_number(tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("name: x\ndevices:\n  - name: a\n    compute: {macs_per_s: 1e9\nnetwork: {}\n")
    with pytest.raises(PlannerError) as err:
        read_instance(f)
    msg = str(err.value)
    assert msg.startswith(f"{f}: line ") and "YAML syntax error" in msg and "\n" not in msg


def test_yaml_duplicate_key(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("name: x\nname: y\n")
    with pytest.raises(PlannerError, match=r"line 2: YAML syntax error: duplicate key 'name'"):
        read_instance(f)


def test_json_syntax_error(tmp_path):
    f = tmp_path / "broken.json"
    f.write_text('{"name": "x",\n "devices": [}\n')
    with pytest.raises(PlannerError, match=r"broken\.json: line 2: JSON syntax error"):
        read_instance(f)


@pytest.mark.parametrize("content, reason", [("", "empty"), ("- 1\n- 2\n", "must be a mapping")])
def test_empty_or_non_mapping_file(tmp_path, content, reason):
    f = tmp_path / "odd.yaml"
    f.write_text(content)
    with pytest.raises(PlannerError, match=reason):
        read_instance(f)


def test_bad_file_names(tmp_path):
    with pytest.raises(PlannerError, match="no such file"):
        read_instance(tmp_path / "nope.yaml")
    (tmp_path / "x.txt").write_text("model: zoo:vgg16\n")
    with pytest.raises(PlannerError, match=r"expected \.yaml, \.yml or \.json"):
        read_instance(tmp_path / "x.txt")


# -- the shipped files ---------------------------------------------------------------------

ALL_FILES = sorted(p for p in INSTANCES.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def test_instances_dir_is_populated_and_listed():
    assert len(ALL_FILES) >= 40
    readme = (INSTANCES / "README.md").read_text()
    for p in ALL_FILES:
        assert f"`{p.relative_to(INSTANCES).as_posix()}`" in readme, p


@pytest.mark.parametrize("path", ALL_FILES, ids=[p.relative_to(INSTANCES).as_posix() for p in ALL_FILES])
def test_every_instance_file_loads(path):
    if path.suffix != ".json":
        assert path.read_text().startswith("#"), "a leading comment says where the file comes from"
    inst = load_instance(path)
    assert len(inst.graph.layers) > 0
    assert inst.search.max_parts <= len(inst.devices)
    nodes = {d.node for d in inst.devices}
    assert nodes and all(nodes)


def test_packaged_example_loads():
    ref = resources.files("milp_planner") / "instance" / "examples" / "tiny-2dev.yaml"
    with resources.as_file(ref) as path:
        inst = load_instance(path)
    assert inst.name == "tiny-2dev" and len(inst.devices) == 2
    twin = load_instance(INSTANCES / "examples" / "tiny-2dev.yaml")
    assert [d.compute for d in inst.devices] == [d.compute for d in twin.devices]
    js = load_instance(INSTANCES / "examples" / "tiny-2dev.json")
    assert [d for d in js.devices] == [d for d in twin.devices]
    assert js.network == twin.network and js.search == twin.search


def test_packaged_example_is_in_package_data():
    text = (ROOT / "pyproject.toml").read_text()
    assert "\"instance/examples/*.yaml\"" in text


def test_every_profile_is_documented():
    table = (ROOT / "docs" / "instance-format.md").read_text()
    for name, p in PROFILES.items():
        assert f"| `{name}` | {p['compute']['model']} |" in table, name

"""Host profiling: per-layer onnxruntime timings written as a ``table`` device file.

``profile_model(ref)`` times every layer of the layer graph of ``ref`` (``zoo:NAME[:SIZE]``
or an ``.onnx`` path) on this host and returns a ``HostProfile``; ``write_device_file``
writes it as a device entry (``compute: {model: table, table: ...}``) that an instance uses
with ``profile: FILE.yaml``.

Method (docs/profiles.md, "Profiling this host"):

* A layer is timed as a small ONNX model cut out of the original one with
  ``onnx.utils.Extractor`` between the layer's activation inputs and its output tensor, so
  it holds exactly the layer's original node(s) (the root node, the nodes folded into it,
  aliases and the constants they read), with the original weights (zoo models: the zoo's
  seeded random weights). Inputs are random, of the right shape.
* onnxruntime runs it on one intra-op and one inter-op thread (one thread per rank, as a
  deployment runs), default graph optimisations, after ``warmup`` runs; the time is the
  median of ``repeats`` runs, minus the median time of a run of a one-element Identity
  model (the fixed cost of one ``InferenceSession.run`` call, paid once per stage part
  rather than once per layer). The clock is the CPU time of the calling thread (which
  runs the kernels when there is one intra-op thread), so that other processes sharing
  the cores do not inflate the table; ``clock='wall'`` times elapsed time instead.
* Rows: fraction f of a row-splittable layer is ``r = round(f x H)`` output rows from the
  middle of the map: its inputs hold exactly the rows those outputs read (halo included;
  conv and pool pads along H are recomputed for the cut), so the point is at r / H.
  Channels: fraction f of a channel-splittable layer (Conv, ConvTranspose, Gemm, MatMul with
  constant weights) keeps the first ``round(f x C)`` output channels (a whole number of
  groups for grouped convolutions, whose input channels are cut to match), slicing the
  weights, bias and the folded per-channel constants.
* Context (on by default): a layer run alone, again and again, finds its weights in the
  cache; inside the whole model they were evicted by the other layers since, and
  onnxruntime fuses some layers (a residual Add into the convolution before it). So the
  whole model is also run once per repeat under onnxruntime's profiler, each kernel is
  assigned to the layer of its node, and each layer's whole-layer time becomes its share of
  the kernel time in context times one run of the whole model on the profile's clock. A
  layer slower in context (cold weights) adds the excess to every point in proportion to the
  bytes that part reads (``in_context``: every weight along rows, every input along
  channels); a faster one (a fused neighbour) is scaled, keeping the shape measured alone. A
  layer with no kernel of its own there keeps its time alone.
* Per stage (with context): the model is deployed on one device with 1, 2, 3 and 4 layers a
  stage (``stage_depths``) and run by the deployment's rank program (``deployed_stage_cost``);
  the excess of each run over one run of the whole model is fitted as a cost per stage plus a
  cost per layer (``fit_stage_costs``): the first is the device's ``stage_overhead_s`` (what a
  rank pays per stage beyond its layers' kernels, at least one run call), the second is added
  to every point of every layer's table (what a layer costs more deployed than inside the whole
  model).
* Points are made non-decreasing in the fraction (a running minimum from the whole layer
  down), so the interpolation never makes a smaller part dearer than a larger one. A cut that cannot be
  built or run is left out and said in ``notes``; a layer that cannot be timed at all is
  left out of the table and priced by the ``macs_per_s`` fallback the file then carries (the
  host's rate on the layers that were timed).
"""

from __future__ import annotations

import datetime as _dt
import platform
import statistics
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import helper, numpy_helper

from milp_planner.deploy.runtime import session_options  # the same settings as a deployed rank
from milp_planner.errors import PlannerError
from milp_planner.io import write_atomic
from milp_planner.model.graph import Layer, LayerGraph, input_rows, length

DEFAULT_FRACTIONS = (0.25, 0.5, 1.0)
POOL_OPS = ("MaxPool", "AveragePool", "LpPool")
WINDOW_OPS = ("Conv",) + POOL_OPS
MIN_SECONDS = 1e-7  # a layer never costs less than this (the overhead subtraction can undershoot)
PROFILE_COPIES = 4  # the model, its shape-inferred copy, a session of the whole model, one layer's cut
PROFILE_BASE_BYTES = 400 * 10**6


@dataclass(frozen=True)
class ProfileSettings:
    """How to measure: runs before timing, timed runs (median), fractions, input seed."""

    repeats: int = 20
    warmup: int = 3
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    seed: int = 0
    context: bool = True  # scale each layer's points to its kernel time inside the whole model
    clock: str = "cpu"  # "cpu": CPU time of the thread that runs the model; "wall": elapsed time
    stages: bool = True  # with context: measure the per-stage cost in a deployment (stage_overhead_s)
    #: layers a stage in the deployments that measure the per-stage cost (their mean is charged)
    stage_depths: tuple[int, ...] = (1, 2, 3, 4)


@dataclass(frozen=True)
class Point:
    """One measurement: ``seconds`` for computing ``fraction`` of a layer."""

    fraction: Fraction
    seconds: float


@dataclass
class LayerProfile:
    """The points measured for one layer along rows and along output channels."""

    name: str
    op: str
    rows: list[Point] = field(default_factory=list)
    channels: list[Point] = field(default_factory=list)


@dataclass
class HostProfile:
    """Per-layer timings of one model on this host, and how they were taken."""

    model: str
    input_shape: tuple[int, ...]
    layers: list[LayerProfile]
    settings: ProfileSettings
    host: str
    date: str
    run_overhead_s: float
    fallback_macs_per_s: float | None = None
    notes: list[str] = field(default_factory=list)
    context_total_s: float | None = None  # kernel time of one whole-model run (context on)
    isolated_total_s: float | None = None  # the layers' whole-layer times, each run alone
    stage_overhead_s: float | None = None  # charged per stage part (None: one run call, run_overhead_s)
    layer_overhead_s: float = 0.0  # added to every table point: a layer's extra cost when deployed
    staged_total_s: float | None = None  # one run of the model deployed a stage per layer (context on)
    #: per depth measured: (layers a stage, stages, seconds of one run, excess per stage)
    staged: list[tuple[int, int, float, float]] = field(default_factory=list)

    @property
    def stage_cost_s(self) -> float:
        """What the device file charges per stage: the deployed per-stage cost when measured,
        else one run call."""
        return self.run_overhead_s if self.stage_overhead_s is None else self.stage_overhead_s

    def device_entry(self) -> dict:
        """The device-file content: ``compute`` (a ``table`` model) plus ``source``/``assumptions``."""
        table: dict = {}
        extra = self.layer_overhead_s
        for lp in self.layers:
            rows = [[_frac_out(p.fraction), _sec_out(p.seconds + extra)] for p in lp.rows]
            chans = [[_frac_out(p.fraction), _sec_out(p.seconds + extra)] for p in lp.channels]
            if chans and rows:
                table[lp.name] = {"rows": rows, "channels": chans}
            else:  # one axis measured: the layer's only table
                table[lp.name] = rows or chans
        compute: dict = {"model": "table", "table": table,
                         # the fixed cost of running one stage (docs/model.md section 4)
                         "stage_overhead_s": _sec_out(self.stage_cost_s)}
        if self.fallback_macs_per_s is not None:
            compute["macs_per_s"] = float(f"{self.fallback_macs_per_s:.4g}")
        s = self.settings
        assumptions = (
            f"onnxruntime, 1 intra-op and 1 inter-op thread, CPUExecutionProvider; each layer cut out "
            f"of the model as its own ONNX model with random inputs; {s.warmup} warm-up runs, median of "
            f"{s.repeats} runs ({'CPU time of the running thread' if s.clock == 'cpu' else 'wall time'}); requested fractions {', '.join(f'{f:g}' for f in s.fractions)} "
            f"(rows: round(f x H) output rows from the middle of the map, halo included; channels: "
            f"round(f x C) output channels); the fixed cost of one run call "
            f"({self.run_overhead_s * 1e6:.1f} us) is subtracted from every point; points made non-decreasing "
            f"(a running minimum from the whole layer down)."
        )
        if self.context_total_s is not None:
            assumptions += (
                f" Context: each layer's whole-layer time is its share of the kernel time inside a run of the "
                f"whole model (onnxruntime profiling, median of {s.repeats} runs; cold weights, fused "
                f"neighbours) times one run of the whole model; a layer slower there adds the excess to its "
                f"points in proportion to the bytes a part reads (all weights along rows, all inputs along "
                f"channels), a faster one is scaled: whole model {self.context_total_s * 1e3:.3f} ms in context, "
                f"{self.isolated_total_s * 1e3:.3f} ms as the sum of the layers run alone."
            )
        if self.staged:
            runs = "; ".join(f"{k} layer{'s' if k > 1 else ''} a stage, {n} stages: {t * 1e3:.3f} ms, "
                             f"{x * 1e6:.1f} us a stage" for k, n, t, x in self.staged)
            assumptions += (
                f" Per stage (stage_overhead_s, {self.stage_cost_s * 1e6:.1f} us) and per layer "
                f"({self.layer_overhead_s * 1e6:.1f} us, in every point of the table): the least-squares fit of "
                f"the excess over the whole model of deployments of the model with 1 to "
                f"{max(k for k, *_ in self.staged)} layers a stage, run by the deployment's rank program "
                f"({runs}), as a cost per stage (at least one run call) plus a cost per layer (at least 0): what "
                f"a rank pays per stage beyond its layers' kernels (the run call, inputs assembled, outputs "
                f"stored, caches the switch between sub-models leaves cold) and what a layer costs more "
                f"deployed than inside the whole model."
            )
        else:
            assumptions += f" Per stage (stage_overhead_s): one run call, {self.stage_cost_s * 1e6:.1f} us."
        if self.notes:
            assumptions += " Notes: " + " ".join(self.notes)
        return {
            "source": f"measured on {self.host} on {self.date} with milp-planner profile "
                      f"({self.model}, input {list(self.input_shape)})",
            "assumptions": assumptions,
            "measured": {"model": str(self.model), "input_shape": [int(d) for d in self.input_shape]},
            "compute": compute,
        }

    def to_yaml(self) -> str:
        from milp_planner.io import printable

        head = (f"# Device profile measured by `milp-planner profile` for {printable(self.model)} "
                f"(input {list(self.input_shape)}).\n"
                "# Use it in an instance as a device's `profile: THIS_FILE.yaml` (relative to the instance).\n")
        return head + yaml.dump(self.device_entry(), Dumper=_Dumper, sort_keys=False, width=100,
                                default_flow_style=None, allow_unicode=False)

    def to_json(self) -> str:
        import json

        return json.dumps(self.device_entry(), indent=1, allow_nan=False) + "\n"


class _Dumper(yaml.SafeDumper):
    """Writes a string in quotes whenever the instance reader would read it back as something
    else: a layer named ``1e3``, ``0x10``, ``true`` or ``null`` stays a name."""


def _represent_str(dumper: yaml.SafeDumper, text: str):
    from milp_planner.instance.reader import ExactLoader

    plain = ExactLoader.resolve(ExactLoader, yaml.ScalarNode, text, (True, False))
    style = None if plain == "tag:yaml.org,2002:str" and text == text.strip() and text else '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)


def _frac_out(f: Fraction) -> float | int:
    return 1 if f == 1 else float(f"{float(f):.6g}")


def _sec_out(t: float) -> float:
    return float(f"{t:.4g}")


# -- the model with weights ----------------------------------------------------------------


def host_description() -> str:
    """A one-line description of this machine (CPU model, cores, OS, onnxruntime version)."""
    import os

    import onnxruntime as ort

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.node() or 'host'} ({cpu}, {os.cpu_count()} cores, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, onnxruntime {ort.__version__})")


def load_model_with_weights(ref: str, input_shape=None) -> tuple[onnx.ModelProto, LayerGraph]:
    """The ONNX model behind ``ref`` with weights, and its layer graph (same input shape)."""
    from milp_planner.model.loading import load_graph, parse_zoo_ref

    ref = str(ref)
    graph = load_graph(ref, input_shape=input_shape)
    if ref.startswith("zoo:"):
        from milp_planner.model import zoo

        name, size = parse_zoo_ref(ref)
        hw = size
        batch = 1
        if input_shape is not None:
            batch, hw = int(input_shape[0]), tuple(int(d) for d in input_shape[2:])
        model = zoo.build(name, size=hw, weights=True, batch=batch)
    else:
        from milp_planner.limits import check_need
        from milp_planner.model.onnx.reading import model_file_bytes

        path = Path(ref).expanduser()
        size = model_file_bytes(path)  # a regular file; external data inside its folder, present
        check_need(PROFILE_COPIES * size + PROFILE_BASE_BYTES, f"profile of {path} ({size / 1e9:.3g} GB with "
                   "its weights)")
        try:
            model = onnx.load(str(path))
        except Exception as e:  # the graph loaded, so this is about the weights' data
            raise PlannerError(f"{ref}: cannot read the weights ({str(e).splitlines()[0][:120]})") from None
        from milp_planner.deploy.source import runtime_opset

        model = runtime_opset(_with_input_shapes(model, graph), path)
    return model, graph


def _with_input_shapes(model: onnx.ModelProto, graph: LayerGraph) -> onnx.ModelProto:
    """``model`` with its activation inputs fixed to the graph's shapes and stale shapes dropped."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        shape = graph.inputs.get(vi.name)
        if shape is None:
            continue
        dims = vi.type.tensor_type.shape.dim
        del dims[:]
        for d in shape:
            dims.add().dim_value = int(d)
    del m.graph.value_info[:]
    for o in m.graph.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    return m


# -- one layer as a model -------------------------------------------------------------------


def _root_node(sub: onnx.ModelProto, layer: Layer) -> onnx.NodeProto | None:
    """The node the layer is named after (its name, or its first output when it has none)."""
    for n in sub.graph.node:
        if (n.name or (n.output[0] if n.output else "")) == layer.name:
            return n
    return None


def _set_attr(node: onnx.NodeProto, name: str, value) -> None:
    for i, a in enumerate(node.attribute):
        if a.name == name:
            del node.attribute[i]
            break
    node.attribute.append(helper.make_attribute(name, value))


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _set_input_shape(sub: onnx.ModelProto, name: str, shape) -> None:
    for vi in sub.graph.input:
        if vi.name == name:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in shape:
                dims.add().dim_value = int(d)
            return


def _clear_shapes(sub: onnx.ModelProto) -> None:
    del sub.graph.value_info[:]
    for o in sub.graph.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")


def _input_shapes(sub: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    init = {t.name for t in sub.graph.initializer}
    out = {}
    for vi in sub.graph.input:
        if vi.name in init:
            continue
        out[vi.name] = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    return out


def row_cut(sub: onnx.ModelProto, layer: Layer, r: int) -> onnx.ModelProto:
    """``sub`` computing ``r`` output rows from the middle of the map, reading only the rows
    (halo included) those rows need. Raises ``ValueError`` where the layer is not cut this way."""
    h_out = layer.rows
    if r >= h_out:
        return sub
    a = (h_out - r) // 2
    out = (a, a + r)
    m = onnx.ModelProto()
    m.CopyFrom(sub)
    dep = layer.rowdep
    if dep.kind not in ("window", "identity"):
        raise ValueError(f"row dependency {dep.kind!r} is not cut by the profiler")
    if dep.kind == "window":
        root = _root_node(m, layer)
        if root is None or root.op_type not in WINDOW_OPS:
            raise ValueError(f"windowed layer whose root is not one of {', '.join(WINDOW_OPS)}")
        if _attr(root, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise ValueError("auto_pad is not NOTSET")
        if _attr(root, "ceil_mode", 0):
            raise ValueError("ceil_mode pooling")
    shapes = _input_shapes(m)
    for t, shape in shapes.items():
        if len(shape) != 4 or t not in layer.inputs:
            raise ValueError(f"input {t!r} is not a 4-D activation of the layer")
        h_in = shape[2]
        if dep.kind == "identity" and h_in != h_out:
            continue  # broadcast along H (e.g. a [N, C, 1, 1] scale): read whole
        iv = input_rows(dep, out, h_in)
        if not length(iv):
            raise ValueError("the cut reads no rows")
        _set_input_shape(m, t, (shape[0], shape[1], length(iv), shape[3]))
        if dep.kind == "window":
            s, p, k, d = dep.stride, dep.pad_top, dep.kernel, dep.dilation
            lo, hi = a * s - p, (a + r - 1) * s - p + (k - 1) * d + 1
            pads = list(_attr(root, "pads", [0, 0, 0, 0]))
            if len(pads) != 4:
                raise ValueError("not a 2-D window")
            pads[0], pads[2] = iv[0] - lo, hi - iv[1]
            _set_attr(root, "pads", pads)
    _clear_shapes(m)
    return m


def _channel_axis(node: onnx.NodeProto) -> int:
    """Axis of the output channels in the root's weight."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "Gemm":
        return 0 if _attr(node, "transB", 0) else 1
    return -1  # MatMul: B is [..., K, N]


def channel_cut(sub: onnx.ModelProto, layer: Layer, c: int) -> tuple[onnx.ModelProto, int]:
    """``sub`` computing the first ``c`` output channels (rounded to whole groups); returns the
    model and the channels it computes. Raises ``ValueError`` where the layer is not cut this way."""
    c_out = layer.channels
    if c >= c_out:
        return sub, c_out
    m = onnx.ModelProto()
    m.CopyFrom(sub)
    root = _root_node(m, layer)
    if root is None or root.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
        raise ValueError("no Conv, ConvTranspose, Gemm or MatMul root")
    inits = {t.name: t for t in m.graph.initializer}
    if len(root.input) < 2 or root.input[1] not in inits:
        raise ValueError("the weight is not an initializer")
    groups = int(_attr(root, "group", 1)) if root.op_type in ("Conv", "ConvTranspose") else 1
    per_out = c_out // groups
    if groups > 1:
        c = max(per_out, round(c / per_out) * per_out)
        if c >= c_out:
            return sub, c_out
        new_groups = c // per_out
        if root.op_type == "ConvTranspose":
            raise ValueError("grouped ConvTranspose")
        x = root.input[0]
        shape = _input_shapes(m).get(x)
        if shape is None or len(shape) != 4:
            raise ValueError("grouped conv without a 4-D input")
        _set_input_shape(m, x, (shape[0], shape[1] // groups * new_groups, shape[2], shape[3]))
        _set_attr(root, "group", new_groups)

    def cut(name: str, axis: int, keep: int) -> None:
        t = inits[name]
        arr = numpy_helper.to_array(t)
        sl = [slice(None)] * arr.ndim
        sl[axis] = slice(0, keep)
        t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(arr[tuple(sl)]), name))

    w_axis = _channel_axis(root)
    w = numpy_helper.to_array(inits[root.input[1]])
    if root.op_type == "ConvTranspose":
        cut(root.input[1], 1, c // groups)
    else:
        if w.shape[w_axis] != c_out:
            raise ValueError("weight shape does not match the output channels")
        cut(root.input[1], w_axis, c)
    if root.op_type in ("Conv", "ConvTranspose", "Gemm") and len(root.input) > 2 and root.input[2] in inits:
        b = inits[root.input[2]]
        if b.dims and b.dims[-1] == c_out:
            cut(root.input[2], len(b.dims) - 1, c)
    # folded per-channel constants downstream of the root: aligned with the output's channel axis
    rank = len(layer.shape)
    ch_axis = 1 if rank == 4 else rank - 1
    done = {root.input[1]} | ({root.input[2]} if len(root.input) > 2 else set())
    for n in m.graph.node:
        if n is root:
            continue
        for i, name in enumerate(n.input):
            if name not in inits or name in done:
                continue
            dims = list(inits[name].dims)
            if n.op_type == "BatchNormalization" and i >= 1:
                axis = 0 if len(dims) == 1 and dims[0] == c_out else None
            else:
                axis = ch_axis - (rank - len(dims))
                axis = axis if axis >= 0 and dims[axis] == c_out else None
            if axis is not None:
                cut(name, axis, c)
                done.add(name)
    _clear_shapes(m)
    return m, c


# -- timing -------------------------------------------------------------------------------


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])


_NP_TYPES = {1: np.float32, 10: np.float16, 11: np.float64, 6: np.int32, 7: np.int64}


def _feeds(sess, rng: np.random.Generator) -> dict:
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "float" in i.type:
            dt = np.float16 if "float16" in i.type else (np.float64 if "double" in i.type else np.float32)
            feeds[i.name] = rng.standard_normal(shape).astype(dt)
        elif "int64" in i.type:
            feeds[i.name] = np.zeros(shape, np.int64)
        else:
            feeds[i.name] = np.zeros(shape, np.int32)
    return feeds


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def time_model(model: onnx.ModelProto, settings: ProfileSettings, rng: np.random.Generator) -> tuple[float, tuple]:
    """Median time of one run of ``model`` (warm-up first) on ``settings.clock``, and its
    first output's shape. With one intra-op thread onnxruntime computes in the calling
    thread, so its CPU time is the run's compute time without the time other processes
    held the core."""
    clock = CLOCKS[settings.clock]
    sess = _session(model)
    feeds = _feeds(sess, rng)
    out = None
    for _ in range(settings.warmup):
        out = sess.run(None, feeds)
    times = []
    for _ in range(settings.repeats):
        t0 = clock()
        out = sess.run(None, feeds)
        times.append(clock() - t0)
    if out is None:
        out = sess.run(None, feeds)
    return statistics.median(times), tuple(out[0].shape)


def run_overhead(settings: ProfileSettings) -> float:
    """Median time of one run of a one-element Identity model: the fixed cost of a run call."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "overhead", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    s = ProfileSettings(repeats=max(settings.repeats, 50), warmup=max(settings.warmup, 5), clock=settings.clock)
    return time_model(m, s, np.random.default_rng(0))[0]


def _monotone(points: list[Point]) -> list[Point]:
    """Points ascending in fraction with non-decreasing times: a running minimum from the
    whole layer down, so the whole-layer measurement is kept and a noisy small cut never
    costs more than a larger one."""
    out: list[Point] = []
    best = float("inf")
    for p in sorted(points, key=lambda p: p.fraction, reverse=True):
        if out and p.fraction == out[-1].fraction:
            continue
        best = max(min(best, p.seconds), MIN_SECONDS)
        out.append(Point(p.fraction, best))
    return out[::-1]


def profile_layer(sub: onnx.ModelProto, layer: Layer, settings: ProfileSettings,
                  overhead: float, rng: np.random.Generator, notes: list[str]) -> LayerProfile:
    """Time one layer's model whole and at the row and channel fractions of ``settings``."""
    lp = LayerProfile(layer.name, layer.op)
    whole, shape = time_model(sub, settings, rng)
    whole = max(whole - overhead, MIN_SECONDS)
    if tuple(shape) != tuple(layer.shape):
        notes.append(f"layer {layer.name}: output {list(shape)} is not the graph's {list(layer.shape)}.")
    one = Point(Fraction(1), whole)
    axes = []
    if layer.row_splittable and layer.rows > 1:
        axes.append("rows")
    if layer.channel_splittable and layer.channels > 1:
        axes.append("channels")
    for axis in axes:
        points = [one]
        total = layer.rows if axis == "rows" else layer.channels
        for f in settings.fractions:
            k = max(1, min(total, int(Fraction(f) * total + Fraction(1, 2))))
            if k >= total:
                continue
            try:
                if axis == "rows":
                    m, got = row_cut(sub, layer, k), k
                else:
                    m, got = channel_cut(sub, layer, k)
                if got >= total:
                    continue
                t, shape = time_model(m, settings, rng)
                want = (shape[2] if axis == "rows" else (shape[1] if len(shape) == 4 else shape[-1]))
                if want != got:
                    raise ValueError(f"the cut computes {want} {axis}, not {got}")
            except Exception as e:  # noqa: BLE001 - any failure of one cut only drops that point
                notes.append(f"layer {layer.name}: {axis} fraction {f:g} not measured "
                             f"({str(e).splitlines()[0][:100]}).")
                continue
            points.append(Point(Fraction(got, total), max(t - overhead, MIN_SECONDS)))
        pts = _monotone(points)
        if axis == "rows":
            lp.rows = pts
        else:
            lp.channels = pts
    if not axes:
        lp.rows = [one]
    return lp


def _layer_of_node(graph: LayerGraph) -> dict[str, str]:
    """ONNX node display name -> the layer it belongs to (root, folded and pattern nodes)."""
    out = {}
    for layer in graph.layers:
        for n in [layer.name, *layer.attrs.get("folded_nodes", ()), *layer.attrs.get("pattern_nodes", ())]:
            out.setdefault(n, layer.name)
    return out


def context_times(model: onnx.ModelProto, graph: LayerGraph, settings: ProfileSettings,
                  rng: np.random.Generator) -> tuple[dict[str, float], float]:
    """Kernel seconds of each layer inside a run of the whole model, and the unassigned rest.

    onnxruntime's profiler times every kernel of ``repeats`` runs (after ``warmup``); a
    kernel is assigned to the layer of the node it was made from (onnxruntime names fused
    and re-laid-out nodes after one of their nodes or its output: ``NAME_nchwc``,
    ``fused NAME``). A layer
    whose nodes were fused into a neighbour's kernel gets no entry.
    """
    import json
    import tempfile

    import onnxruntime as ort

    owner = _layer_of_node(graph)
    for node in model.graph.node:  # onnxruntime may name a rewritten node after its output
        layer = owner.get(node.name or (node.output[0] if node.output else ""))
        for o in node.output:
            if layer is not None and o:
                owner.setdefault(o, layer)
    for layer in graph.layers:
        owner.setdefault(layer.output, layer.name)
    with tempfile.TemporaryDirectory(prefix="milp-profile-") as tmp:
        so = session_options()
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(tmp) / "ort")
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feeds = _feeds(sess, rng)
        for _ in range(settings.warmup + settings.repeats):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    per_node: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"):
            per_node.setdefault(e["name"][: -len("_kernel_time")], []).append(e["dur"] * 1e-6)
    times: dict[str, float] = {}
    rest = 0.0
    for node, durs in per_node.items():
        t = statistics.median(durs[settings.warmup:] or durs)
        base = node[len("fused "):] if node.startswith("fused ") else node
        base = base[: -len("_nchwc")] if base.endswith("_nchwc") else base
        layer = owner.get(base)
        if layer is None:
            rest += t
        else:
            times[layer] = times.get(layer, 0.0) + t
    return times, rest


def per_stage_costs(ref: str, graph: LayerGraph, settings: ProfileSettings, whole_run: float,
                    overhead: float) -> list[tuple[int, int, float, float]]:
    """(layers a stage, stages, seconds of one run, excess per stage) of the model deployed at each
    of ``settings.stage_depths`` (``deployed_stage_cost``); each excess at least one run call.

    The excess per stage depends on the layers a stage holds, and not one way: MobileNetV2 at
    96 px here, 52 us a stage with one layer a stage, 58 with two, 69 with four; ShuffleNet
    (the onnx package's ``light_shufflenet``) 80 us with one, 194 with four; SqueezeNet
    (``light_squeezenet``) 188 us with one, 48 with four. A plan's stages hold 1 to its fusion
    limit, so the excess is fitted as a cost per stage plus a cost per layer
    (``fit_stage_costs``). Measured with one layer a stage only, MobileNetV2's 17-stage plan of
    four-layer stages was predicted at 2.17 ms and took 2.69 to 2.98 ms in the rank program."""
    depths = sorted({max(1, min(int(k), len(graph.layers))) for k in settings.stage_depths}) or [1]
    out = []
    for k in depths:
        t, n = deployed_stage_cost(ref, graph, settings, depth=k)
        out.append((k, n, t, max((t - whole_run) / n, overhead)))
    return out


def fit_stage_costs(staged: list[tuple[int, int, float, float]], whole_run: float, overhead: float,
                    n_layers: int) -> tuple[float, float]:
    """(seconds per stage, seconds per layer): the least-squares fit of each deployment's excess
    over the whole model (``per_stage_costs``: stages ``n``, one run ``t``) as ``a n + c``, with
    ``a`` at least one run call (``overhead``) and ``c`` at least 0, ``c`` spread over the
    ``n_layers`` layers (every deployment runs each layer once; a layer left out of the table,
    priced by the file's ``macs_per_s``, does not carry its share).

    The per-stage excess grows with the layers a stage holds on most models (profiles of
    2026-11-29, 1 to 4 layers a stage: MobileNetV2 54 to 100 us, ResNet-18 42 to 62, VGG-16 96
    to 297): part of the excess is paid per layer, not per stage, and the mean per stage
    charged a plan of 17 four-layer stages 0.26 ms less than the deployments measured.

    >>> fit_stage_costs([(1, 6, 1.6e-3, 0), (2, 3, 1.45e-3, 0), (3, 2, 1.4e-3, 0), (4, 2, 1.5e-3, 0)],
    ...                 1e-3, 5e-6, 6)  # doctest: +ELLIPSIS
    (3.837...e-05, 6.046...e-05)
    """
    n = np.array([float(s[1]) for s in staged])
    e = np.array([s[2] - whole_run for s in staged])
    if len(set(n.tolist())) > 1:  # two unknowns: the least squares, then the bounds
        a, c = np.polyfit(n, e, 1)
    else:  # one stage count: the excess per stage
        a, c = float(np.mean(e) / n[0]), 0.0
    if c < 0:
        c, a = 0.0, float(n @ e / (n @ n))
    if a < overhead:
        a, c = overhead, max(0.0, float(np.mean(e - overhead * n)))
    return float(a), float(c) / max(1, n_layers)


def deployed_stage_cost(ref: str, graph: LayerGraph, settings: ProfileSettings, depth: int = 1
                        ) -> tuple[float, int]:
    """(seconds of one run, stages) of the model deployed on this host with ``depth`` consecutive
    layers a stage, run by the deployment's own rank program (``deploy.runtime.RankProgram``, in
    this process, no messages) on the profile's clock: what a rank pays per stage beyond its
    layers' kernels (the run call, assembling inputs, storing outputs, the caches the switch
    between sub-models leaves cold) is this run's excess over one run of the whole model."""
    import tempfile

    from milp_planner.deploy.build import deploy
    from milp_planner.deploy.manifest import Manifest
    from milp_planner.deploy.runtime import Mailbox, RankProgram, make_inputs
    from milp_planner.instance.reader import instance_from_dict
    from milp_planner.space.plan import Part, Plan, Stage

    host = {"name": "host", "compute": {"model": "linear", "macs_per_s": 1e9}}
    data = {"name": "profile-stages", "model": str(ref), "devices": [host],
            "network": {"bandwidth_mbps": 1000, "latency_ms": 0, "source": {"device": "host"},
                        "sink": {"device": "host"}},
            "search": {"fusion_limit": 1, "max_parts": 1}}
    inst = instance_from_dict(data, "profile", graph=graph)
    n = len(graph.layers)
    plan = Plan(inst.name, [Stage(i, min(i + depth, n) - 1, "none", (Part("host"),)) for i in range(0, n, depth)])
    clock = CLOCKS[settings.clock]
    with tempfile.TemporaryDirectory(prefix="milp-profile-stages-") as tmp:
        folder = deploy(inst, plan, Path(tmp) / "deployment")
        m = Manifest.load(folder)
        prog, box, inputs = RankProgram(folder, m, "host"), Mailbox(), make_inputs(m)
        prog.load()
        times = []
        for r in range(settings.warmup + settings.repeats):
            prog.start(inputs)
            t0 = clock()
            for stage in m.stages:
                prog.send_stage(stage.index, box)
                prog.run_stage(stage.index, box)
            if r >= settings.warmup:
                times.append(clock() - t0)
    return statistics.median(times), len(m.stages)


def _scaled(points: list[Point], factor: float) -> list[Point]:
    return [Point(p.fraction, max(p.seconds * factor, MIN_SECONDS)) for p in points]


def layer_elements(layer: Layer, graph: LayerGraph) -> tuple[int, int, int]:
    """The elements of a layer's weights, of its activation inputs and of its output."""
    inputs = sum(int(np.prod(graph.shape(t), dtype=np.int64)) for t in dict.fromkeys(layer.inputs))
    return int(layer.params), inputs, int(np.prod(layer.shape, dtype=np.int64))


def in_context(lp: LayerProfile, layer: Layer, graph: LayerGraph, t_ctx: float) -> None:
    """Move ``lp``'s points to the layer's time in context ``t_ctx`` (its whole-layer point).

    When the layer is slower in context, the excess is what its cold bytes cost, spread over
    them: a part of fraction f pays for every weight and f of the activations along rows (each
    row part reads the whole kernel), for f of the weights and of the output but all of the
    input along channels. The half-rows parts of ResNet-18's last block, scaled as a whole
    (``_scaled``), were predicted at 58 to 67 % of their time in a deployment: their weights
    are as cold as the whole layer's. A layer faster in context (a neighbour fused
    into its kernel, no copies) keeps the shape of its curve (``_scaled``)."""
    whole = (lp.rows or lp.channels)[-1].seconds
    excess = t_ctx - whole
    if excess <= 0:
        lp.rows, lp.channels = _scaled(lp.rows, t_ctx / whole), _scaled(lp.channels, t_ctx / whole)
        return
    weights, inputs, output = layer_elements(layer, graph)
    total = max(weights + inputs + output, 1)

    def rows(f: float) -> float:
        return (weights + f * (inputs + output)) / total

    def channels(f: float) -> float:
        return (f * weights + inputs + f * output) / total

    lp.rows = [Point(p.fraction, max(p.seconds + excess * rows(float(p.fraction)), MIN_SECONDS)) for p in lp.rows]
    lp.channels = [Point(p.fraction, max(p.seconds + excess * channels(float(p.fraction)), MIN_SECONDS))
                   for p in lp.channels]


def profile_model(ref: str, input_shape=None, settings: ProfileSettings | None = None,
                  progress=None) -> HostProfile:
    """Profile every layer of ``ref`` on this host (see the module docstring).

    ``progress(i, n, name)`` is called before each layer when given.
    """
    from onnx.utils import Extractor

    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise PlannerError("profile needs onnxruntime: pip install 'milp-planner[runtime]'") from None
    settings = settings or ProfileSettings()
    if settings.repeats < 1 or settings.warmup < 0:
        raise PlannerError("profile: repeats must be >= 1 and warmup >= 0")
    if not settings.fractions or any(not (0 < f <= 1) for f in settings.fractions):
        raise PlannerError("profile: fractions must be in (0, 1]")
    if settings.clock not in CLOCKS:
        raise PlannerError(f"profile: clock must be one of {', '.join(CLOCKS)} (got {settings.clock!r})")
    model, graph = load_model_with_weights(ref, input_shape)
    shape = next(iter(graph.inputs.values()), ())
    try:
        extractor = Extractor(onnx.shape_inference.infer_shapes(model))
    except Exception as e:  # noqa: BLE001 - shape inference of an unusual model
        raise PlannerError(f"{ref}: cannot prepare the model for profiling ({str(e).splitlines()[0][:120]})") from None
    overhead = run_overhead(settings)
    rng = np.random.default_rng(settings.seed)
    layers: list[LayerProfile] = []
    notes: list[str] = []
    missing: list[Layer] = []
    for i, layer in enumerate(graph.layers):
        if progress is not None:
            progress(i, len(graph.layers), layer.name)
        try:
            sub = extractor.extract_model(list(layer.inputs), [layer.output])
            sub.ir_version = model.ir_version
            layers.append(profile_layer(sub, layer, settings, overhead, rng, notes))
        except Exception as e:  # noqa: BLE001 - reported in the file, priced by the fallback rate
            notes.append(f"layer {layer.name} ({layer.op}) not timed ({str(e).splitlines()[0][:100]}); "
                         "priced by macs_per_s.")
            missing.append(layer)
    context_total = isolated_total = staged_total = stage_overhead = None
    layer_overhead = 0.0
    staged: list = []
    if settings.context:
        ctx, rest = context_times(model, graph, settings, rng)
        # the profiler's kernel times are elapsed times: they give each layer's share of a run,
        # and the run itself is timed on the profile's clock
        whole_run = max(time_model(model, settings, rng)[0] - overhead, MIN_SECONDS)
        kernels = sum(ctx.values()) + rest
        ctx = {name: t / kernels * whole_run for name, t in ctx.items()}
        isolated_total = sum((lp.rows or lp.channels)[-1].seconds for lp in layers)
        by_name = {layer.name: layer for layer in graph.layers}
        for lp in layers:
            t_ctx = ctx.get(lp.name)
            whole = (lp.rows or lp.channels)[-1].seconds
            if t_ctx is None or whole <= 0:
                continue  # fused into a neighbour's kernel in the whole model: its own time stays
            in_context(lp, by_name[lp.name], graph, t_ctx)
        context_total = whole_run
        if settings.stages:
            try:
                staged = per_stage_costs(ref, graph, settings, whole_run, overhead)
                stage_overhead, layer_overhead = fit_stage_costs(staged, whole_run, overhead, len(graph.layers))
                staged_total = staged[0][2]
            except Exception as e:  # noqa: BLE001 - reported in the file; the run call alone is charged
                notes.append(f"the per-stage cost was not measured in a deployment ({str(e).splitlines()[0][:100]}); "
                             "stage_overhead_s is one run call.")
        alone = [lp.name for lp in layers if lp.name not in ctx]
        if alone:
            notes.append(f"{len(alone)} layer(s) have no kernel of their own in the whole model (fused into "
                         f"a neighbour) and keep their time run alone: {', '.join(alone[:6])}"
                         f"{', ...' if len(alone) > 6 else ''}.")
    fallback = None
    if missing:
        timed = {lp.name: lp for lp in layers}
        work = sum(l.work for l in graph.layers if l.name in timed)
        secs = sum((timed[l.name].rows or timed[l.name].channels)[-1].seconds
                   for l in graph.layers if l.name in timed)
        if not timed or work <= 0 or secs <= 0:
            raise PlannerError(f"{ref}: no layer could be timed ({notes[0] if notes else 'unknown reason'})")
        fallback = work / secs
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return HostProfile(model=ref, input_shape=tuple(shape), layers=layers, settings=settings,
                       host=host_description(), date=date, run_overhead_s=overhead,
                       fallback_macs_per_s=fallback, notes=notes, context_total_s=context_total,
                       isolated_total_s=isolated_total, stage_overhead_s=stage_overhead, staged_total_s=staged_total,
                       staged=staged, layer_overhead_s=layer_overhead)


DEVICE_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def write_device_file(profile: HostProfile, path, inputs=()) -> Path:
    """Write ``profile`` as a device file, atomically: JSON for a ``.json`` path, else YAML
    (``.yaml``/``.yml``; another suffix is refused, as the instance reader would not read it);
    never onto one of ``inputs`` or through a link. Returns the path."""
    from milp_planner.io import check_output_file

    path = check_output_file(path, inputs, suffixes=DEVICE_FILE_SUFFIXES)
    write_atomic(path, profile.to_json() if path.suffix.lower() == ".json" else profile.to_yaml())
    return path

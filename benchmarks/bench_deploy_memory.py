"""Peak memory of ``milp-planner deploy`` on a model with many weights (docs/deploy.md, "Memory").

    python benchmarks/bench_deploy_memory.py [--mb 320] [--layers 16] [--stages 4] [--split]
                                             [--external] [--keep DIR]

Builds a chain of Gemm layers (1 x D activations, D x D float32 weights) holding about ``--mb``
MB of weights, an instance of ``--stages`` devices and a plan of as many stages of consecutive
layers, one device each (``--split``: one stage per layer, each split by output columns over
every device), and runs ``python -m milp_planner deploy`` in a fresh process under
``/usr/bin/time -f %M`` (peak RSS of the process, the interpreter and its imports included).
The same deploy of a 1 MB model of the same shape is the baseline: what any deploy costs.
``--external``: the weights in an external-data file beside the model. The deploy runs the
``milp_planner`` that the interpreter imports (set ``PYTHONPATH`` to measure another checkout).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def build(folder: Path, mb: float, n_layers: int, stages: int, split: bool, external: bool) -> tuple[int, int]:
    """The model, instance and plan in ``folder``; returns (weight bytes, largest stage's)."""
    import onnx
    import yaml
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    d = max(8, int((mb * 1e6 / n_layers / 4) ** 0.5))
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for i in range(n_layers):
        w = (rng.standard_normal((d, d), dtype=np.float32) / np.float32(d ** 0.5)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Gemm", [x, f"w{i}"], [f"g{i}"], name=f"g{i}", transB=1))
        x = f"g{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, d])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    if external:
        onnx.save(m, str(folder / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                  location="m.data", size_threshold=1024)
    else:
        onnx.save(m, str(folder / "m.onnx"))
    devices = [{"name": f"d{i}", "compute": {"model": "linear", "macs_per_s": 1e9, "overhead_s": 1e-4}}
               for i in range(stages)]
    inst = {"name": "chain", "model": "m.onnx", "devices": devices,
            "network": {"bandwidth_mbps": 100, "latency_ms": 0.5, "source": {"device": "d0"},
                        "sink": {"device": f"d{stages - 1}"}},
            "search": {"fusion_limit": n_layers, "max_parts": stages, "splits": ["equal"],
                       "axes": ["rows", "channels"]}}
    (folder / "i.yaml").write_text(yaml.safe_dump(inst))
    layer = d * d * 4
    if split:
        cuts = [round(d * k / stages) for k in range(stages + 1)]
        parts = [{"device": f"d{k}", "range": [cuts[k], cuts[k + 1]]} for k in range(stages)]
        plan = [{"first": i, "last": i, "axis": "channels", "parts": parts} for i in range(n_layers)]
        largest = layer
    else:
        per = -(-n_layers // stages)
        plan = [{"first": s * per, "last": min(n_layers, (s + 1) * per) - 1, "axis": "none",
                 "parts": [{"device": f"d{s}"}]} for s in range(stages)]
        largest = per * layer
    (folder / "p.json").write_text(json.dumps({"stages": plan}))
    return n_layers * layer, largest


def peak_rss(folder: Path) -> int:
    """Peak RSS in bytes of ``deploy`` on the model in ``folder``."""
    cmd = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "milp_planner", "deploy", str(folder / "i.yaml"),
           str(folder / "p.json"), "--out", str(folder / "dep"), "--memory-budget", "64GB"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"deploy failed:\n{p.stdout}\n{p.stderr}")
    return int(p.stderr.strip().splitlines()[-1]) * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=320)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--split", action="store_true", help="one stage per layer, split by columns over every device")
    ap.add_argument("--external", action="store_true", help="the weights as external data")
    ap.add_argument("--keep", type=Path, default=None, help="build in this folder and keep it")
    args = ap.parse_args()
    where = subprocess.run([sys.executable, "-c", "import milp_planner; print(milp_planner.__file__)"],
                           capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        base_w, _ = build(folder / "small", 1, args.layers, args.stages, args.split, args.external)
        weights, largest = build(folder / "big", args.mb, args.layers, args.stages, args.split, args.external)
        base, peak = peak_rss(folder / "small"), peak_rss(folder / "big")
    shape = f"{args.layers} layers, {args.stages} devices, " + (
        "one stage per layer split by columns" if args.split else f"{args.stages} stages of one device")
    print(f"milp_planner: {where}")
    print(f"{shape}{', external data' if args.external else ''}: weights {weights / 1e6:.0f} MB, largest stage "
          f"{largest / 1e6:.0f} MB; peak RSS of deploy {peak / 1e6:.0f} MB (a {base_w / 1e6:.0f} MB model: "
          f"{base / 1e6:.0f} MB), so {(peak - base) / 1e6:.0f} MB for the weights = "
          f"{(peak - base) / weights:.2f} x the model, {(peak - base) / largest:.2f} x the largest stage")
    return 0


if __name__ == "__main__":
    sys.exit(main())

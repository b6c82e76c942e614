"""Time-to-certify of the exact planners (dp, milp, cpsat) across models, devices and spaces.

Each configuration runs in its own process with a wall-clock budget; results go to
``benchmarks/results/exact.json`` and a table to ``benchmarks/results/exact.md``.

    python benchmarks/bench_exact.py --models vgg16,resnet50,mobilenetv2 --devices 2,4 \
        --fusion 1,2,3,4 --splits equal "equal,capacity" "equal,grid:8" --time-limit 60

``--caps binding`` sets every device's memory to 90 % of the largest per-device memory of the
unconstrained latency optimum (found by ``dp`` within the same time limit), so the caps bind.
``--append`` adds rows to ``--out``; the table goes to ``<out>-table.md`` and the narrative with
the conclusions is ``benchmarks/results/exact.md`` (written by hand from the table).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPEEDS = [6e9, 13e9, 4e9, 20e9, 8e9, 10e9, 5e9, 16e9]  # heterogeneous MAC/s
RESULTS = Path(__file__).parent / "results"


def make_instance(model: str, n_dev: int, fusion: int, splits: list[str], caps_mb=None):
    from milp_planner.instance.reader import instance_from_dict

    devices = []
    for i in range(n_dev):
        d = {"name": f"d{i}", "compute": {"model": "linear", "macs_per_s": SPEEDS[i], "overhead_s": 1e-4},
             "power_w": {"compute": 5.0 + i, "tx": 1.0, "rx": 1.0}}
        if caps_mb is not None:
            d["memory_mb"] = caps_mb
        devices.append(d)
    data = {"name": f"{model}-{n_dev}dev-f{fusion}-{'+'.join(splits)}", "model": f"zoo:{model}", "dtype_bytes": 1,
            "devices": devices, "network": {"bandwidth_mbps": 100.0, "latency_ms": 0.5},
            "search": {"fusion_limit": fusion, "max_parts": n_dev, "splits": splits, "axes": ["rows", "channels"]}}
    return instance_from_dict(data, "bench", Path("."))


def run_config(cfg: dict, queue) -> None:
    from milp_planner.cost.evaluator import evaluate
    from milp_planner.planners import get_planner

    out = dict(cfg)
    try:
        inst = make_instance(cfg["model"], cfg["devices"], cfg["fusion"], cfg["splits"])
        if cfg["caps"] == "binding":
            t0 = time.perf_counter()
            free = get_planner("dp").solve(inst, objective="latency", time_limit=cfg["time_limit"])
            out["uncapped"] = {"status": free.status, "objective": free.value, "time_s": time.perf_counter() - t0}
            if free.plan is None:
                raise RuntimeError(f"no uncapped plan to set the caps from ({free.status}: {free.message[:120]})")
            peak = max(evaluate(free.plan, inst).memory_bytes.values())
            caps_mb = round(0.9 * peak / 1e6, 3)
            inst = make_instance(cfg["model"], cfg["devices"], cfg["fusion"], cfg["splits"], caps_mb)
            out["caps_mb"] = caps_mb
        for name in cfg["planners"]:
            t0 = time.perf_counter()
            r = get_planner(name).solve(inst, objective=cfg["objective"], time_limit=cfg["time_limit"],
                                        threads=cfg["threads"])
            out[name] = {"status": r.status, "objective": r.value, "bound": r.bound, "gap": r.gap,
                         "time_s": time.perf_counter() - t0, "message": r.message[:200],
                         "rounds": r.info.get("rounds"), "arcs": r.info.get("stage_arcs"),
                         "model_arcs": r.info.get("model_arcs")}
            queue.put(dict(out))
    except Exception as e:  # recorded, the benchmark goes on
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    queue.put(out)


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="vgg16,resnet50,mobilenetv2")
    ap.add_argument("--devices", default="2,4")
    ap.add_argument("--fusion", default="1,2,3,4")
    ap.add_argument("--splits", nargs="+", default=["equal"])
    ap.add_argument("--planners", default="dp,milp,cpsat")
    ap.add_argument("--objective", default="latency")
    ap.add_argument("--caps", choices=["none", "binding"], default="binding")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--budget", type=float, default=600.0, help="wall seconds per configuration")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "exact.json"))
    ap.add_argument("--append", action="store_true", help="add to the rows already in --out")
    args = ap.parse_args()
    rows = json.loads(Path(args.out).read_text())["rows"] if args.append and Path(args.out).exists() else []
    for model in args.models.split(","):
        for n_dev in map(int, args.devices.split(",")):
            for fusion in map(int, args.fusion.split(",")):
                for splits in args.splits:
                    cfg = {"model": model, "devices": n_dev, "fusion": fusion, "splits": splits.split(","),
                           "planners": args.planners.split(","), "objective": args.objective, "caps": args.caps,
                           "time_limit": args.time_limit, "threads": args.threads}
                    q = mp.Queue()
                    p = mp.Process(target=run_config, args=(cfg, q))
                    t0 = time.perf_counter()
                    p.start()
                    last = dict(cfg)
                    while p.is_alive() and time.perf_counter() - t0 < args.budget:
                        p.join(timeout=1.0)
                        while not q.empty():
                            last = q.get()
                    if p.is_alive():
                        p.kill()
                        last["error"] = last.get("error") or f"budget of {args.budget:.0f} s exceeded"
                    while not q.empty():
                        last = q.get()
                    last["wall_s"] = time.perf_counter() - t0
                    rows.append(last)
                    print(json.dumps(last), flush=True)
                    Path(args.out).write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))
    write_markdown(Path(args.out))


def write_markdown(path: Path) -> None:
    data = json.loads(path.read_text())
    lines = ["| model | dev | fusion | splits | limit s | uncapped ms | caps MB | dp | milp | cpsat |",
             "|---|---:|---:|---|---:|---:|---:|---|---|---|"]

    def cell(r):
        if not r:
            return "-"
        gap = "-" if r["gap"] is None else f"{r['gap'] * 100:.3f}%"
        arcs = f", {r['arcs']} arcs" if r.get("arcs") is not None else ""
        return f"{r['status']} {r['time_s']:.1f}s gap {gap}{arcs}"

    for r in data["rows"]:
        err = f" ({r['error']})" if r.get("error") else ""
        free = r.get("uncapped") or {}
        fv = f"{free['objective'] * 1e3:.3f}" if free.get("objective") is not None else "-"
        lines.append(f"| {r['model']} | {r['devices']} | {r['fusion']} | {'+'.join(r['splits'])} | "
                     f"{r['time_limit']:.0f} | {fv} | {r.get('caps_mb', '-')} | "
                     f"{cell(r.get('dp'))} | {cell(r.get('milp'))} | {cell(r.get('cpsat'))}{err} |")
    table = path.with_name(path.stem + "-table.md")
    table.write_text(f"Machine: {data['machine']}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""DIAPASON against the certified optimum on DIAPASON's own setups, with the paper's ablations.

Setups: ``instances/diapason/*.yaml`` (VGG16, ResNet50, MobileNetV2; two 500 MHz Gemminis,
and the heterogeneous 100 + 500 MHz pair; 100 Mbps; fusion limit 2). For each setup:

- the certified optimum of the instance's space: ``dp`` (exact for latency and energy when
  there are no caps; its status is checked to be ``optimal``, otherwise ``milp`` is used);
- DIAPASON (``diapason`` planner, the paper's defaults) over ``--seeds`` seeds: mean, std,
  min, max and gap to the optimum;
- ``lp-round``: its plan's cost and its LP bound;
- ablations, each over ``--ablation-seeds`` seeds, with heuristic (the default) and random
  weight initialisation: ``weightsinit``, ``fusionlimit`` 0..4 (references: the ``dp``
  optimum at search.fusion_limit 1..4), latency vs energy objective, ``parttype`` naive vs
  capability on the heterogeneous pair;
- with ``--period``: ``lp-round`` against ``milp`` for the period objective, where the LP is
  not integral.

Results go to ``benchmarks/results/diapason.json`` (with the machine) and a readable
``benchmarks/results/diapason.md``.

    python benchmarks/bench_diapason.py --seeds 10 --ablation-seeds 10 --period
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_exact import machine  # noqa: E402

RESULTS = Path(__file__).parent / "results"
SETUPS = ["vgg16-gemmini500x2", "vgg16-gemmini100-500", "resnet50-gemmini500x2", "resnet50-gemmini100-500",
          "mobilenetv2-gemmini500x2", "mobilenetv2-gemmini100-500"]
UNIT = {"latency": ("ms", 1e3), "energy": ("mJ", 1e3), "period": ("ms", 1e3)}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def stats(values: list[float], ref: float | None) -> dict:
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)  # population std, as diapason's value_std
    out = {"n": n, "mean": mean, "std": std, "min": min(values), "max": max(values)}
    if ref:
        out["gap_mean_pct"] = (mean - ref) / ref * 100
        out["gap_min_pct"] = (min(values) - ref) / ref * 100
        out["gap_max_pct"] = (max(values) - ref) / ref * 100
    return out


class Bench:
    def __init__(self, args):
        self.args = args
        self.instances = {}

    def instance(self, setup: str, fusion_limit: int | None = None):
        from milp_planner.instance import load_instance

        if setup not in self.instances:
            self.instances[setup] = load_instance(ROOT / "instances" / "diapason" / f"{setup}.yaml")
        inst = self.instances[setup]
        if fusion_limit is not None and fusion_limit != inst.search.fusion_limit:
            inst = replace(inst, search=replace(inst.search, fusion_limit=fusion_limit))
        return inst

    def optimum(self, inst, objective: str, time_limit: float | None = None) -> dict:
        """The certified optimum: dp when it says optimal, else milp."""
        from milp_planner.planners import get_planner

        t0 = time.perf_counter()
        planner = "dp" if objective in ("latency", "energy") else "milp"
        r = get_planner(planner).solve(inst, objective=objective, time_limit=time_limit, threads=1)
        if planner == "dp" and r.status != "optimal":
            log(f"  dp says {r.status} ({r.message}); using milp")
            planner = "milp"
            r = get_planner("milp").solve(inst, objective=objective, time_limit=time_limit, threads=1)
        return {"planner": planner, "status": r.status, "value": r.value, "bound": r.bound, "gap": r.gap,
                "stage_arcs": r.info.get("stage_arcs"), "time_s": time.perf_counter() - t0,
                "latency_s": r.metrics.latency_s if r.metrics else None,
                "energy_j": r.metrics.energy_j if r.metrics else None}

    def lp_round(self, inst, objective: str) -> dict:
        from milp_planner.planners import get_planner

        t0 = time.perf_counter()
        r = get_planner("lp-round").solve(inst, objective=objective, threads=1)
        return {"status": r.status, "value": r.value, "bound": r.bound, "time_s": time.perf_counter() - t0,
                "message": r.message, **{k: r.info.get(k) for k in
                                         ("lp_value", "lp_time_s", "fractional_arcs", "support_arcs",
                                          "stage_arcs", "model_arcs", "rounding")}}

    def diapason(self, inst, objective: str, seeds: int, ref: float | None, **options) -> dict:
        from milp_planner.planners import get_planner

        options = {"iterations": self.args.iterations, **options}
        runs = []
        for seed in range(seeds):
            t0 = time.perf_counter()
            r = get_planner("diapason", **options).solve(inst, objective=objective, seed=seed, threads=1)
            runs.append({"seed": seed, "value": r.value, "in_space": r.metrics.in_space,
                         "latency_s": r.metrics.latency_s, "energy_j": r.metrics.energy_j,
                         "loss": r.info["loss"], "repairs": len(r.info["repairs"]),
                         "time_s": time.perf_counter() - t0})
        out = stats([x["value"] for x in runs], ref)
        out["options"] = options
        out["objective"] = objective
        out["in_space_runs"] = sum(x["in_space"] for x in runs)
        out["distinct_plans_values"] = len({round(x["value"], 15) for x in runs})
        out["time_s"] = sum(x["time_s"] for x in runs)
        out["runs"] = runs
        return out


def run(args) -> dict:
    b = Bench(args)
    t_start = time.perf_counter()
    setups = [s for s in SETUPS if not args.setups or s in args.setups.split(",")]
    data = {"machine": machine(), "code": args.code, "command": " ".join(["python", "benchmarks/bench_diapason.py"] + sys.argv[1:]),
            "settings": {"seeds": args.seeds, "ablation_seeds": args.ablation_seeds, "iterations": args.iterations,
                         "fusion_limits": [0, 1, 2, 3, 4], "threads": 1, "period": args.period,
                         "period_time_limit_s": args.period_time_limit,
                         "std": "population (ddof 0), as the diapason planner's value_std"},
            "setups": {}}
    out_path = Path(args.out)

    def save():
        data["elapsed_s"] = time.perf_counter() - t_start
        out_path.write_text(json.dumps(data, indent=1))

    for setup in setups:
        log(f"== {setup}")
        inst = b.instance(setup)
        row = {"instance": f"instances/diapason/{setup}.yaml", "model": setup.split("-")[0],
               "devices": [d.name for d in inst.devices], "heterogeneous": "100-500" in setup,
               "search": {"fusion_limit": inst.search.fusion_limit, "max_parts": inst.search.max_parts,
                          "splits": list(inst.search.splits), "axes": list(inst.search.axes)}}
        data["setups"][setup] = row
        # certified optima and lp-round
        row["optimum"] = {obj: b.optimum(inst, obj) for obj in ("latency", "energy")}
        row["lp_round"] = {obj: b.lp_round(inst, obj) for obj in ("latency", "energy")}
        log(f"  optimum latency {row['optimum']['latency']['value'] * 1e3:.3f} ms "
            f"({row['optimum']['latency']['status']}), lp-round {row['lp_round']['latency']['value'] * 1e3:.3f} ms "
            f"bound {row['lp_round']['latency']['bound'] * 1e3:.3f} ms")
        opt_lat = row["optimum"]["latency"]["value"]
        opt_en = row["optimum"]["energy"]["value"]
        # the optimum at every fusion limit (references for the fusion ablation)
        row["optimum_by_fusion_limit"] = {}
        for fl in (1, 2, 3, 4):
            row["optimum_by_fusion_limit"][str(fl)] = (row["optimum"]["latency"] if fl == inst.search.fusion_limit
                                                       else b.optimum(b.instance(setup, fl), "latency"))
        save()
        d = row["diapason"] = {}
        # the main comparison: the paper's defaults over seeds
        d["default"] = b.diapason(inst, "latency", args.seeds, opt_lat)
        log(f"  diapason default {d['default']['mean'] * 1e3:.3f} +- {d['default']['std'] * 1e3:.3f} ms")
        ab = args.ablation_seeds
        d["weightsinit_random"] = b.diapason(inst, "latency", max(ab, args.seeds), opt_lat, weightsinit="random")
        log(f"  random init {d['weightsinit_random']['mean'] * 1e3:.3f} +- {d['weightsinit_random']['std'] * 1e3:.3f}")
        save()
        for fl in (0, 1, 2, 3, 4):
            ref = row["optimum_by_fusion_limit"][str(max(1, fl))]["value"]
            for init in ("heuristic", "random"):
                d[f"fusionlimit_{fl}_{init}"] = b.diapason(inst, "latency", ab, ref, fusionlimit=fl, weightsinit=init)
        save()
        for init in ("heuristic", "random"):
            d[f"energy_{init}"] = b.diapason(inst, "energy", ab, opt_en, weightsinit=init)
        if row["heterogeneous"]:
            for pt in ("naive", "capability"):
                for init in ("heuristic", "random"):
                    d[f"parttype_{pt}_{init}"] = b.diapason(inst, "latency", ab, opt_lat, parttype=pt, weightsinit=init)
        save()
        if args.period:
            row["period"] = {"optimum": b.optimum(inst, "period", time_limit=args.period_time_limit),
                             "lp_round": b.lp_round(inst, "period")}
            p = row["period"]
            log(f"  period: milp {p['optimum']['status']} {p['optimum']['value'] * 1e3:.3f} ms, lp-round "
                f"{p['lp_round']['value'] * 1e3:.3f} bound {p['lp_round']['bound'] * 1e3:.3f}")
            save()
        log(f"  elapsed {time.perf_counter() - t_start:.0f} s")
    save()
    return data


# ------------------------------------------------------------------------------------------
# markdown


def f(v, scale=1e3, nd=1):
    return "-" if v is None else f"{v * scale:.{nd}f}"


def pm(s, scale=1e3, nd=1):
    return f"{s['mean'] * scale:.{nd}f} ± {s['std'] * scale:.{nd}f}"


def gap(p):
    return "-" if p is None else f"{p:+.1f} %"


def determinism(data: dict) -> str:
    bad = [f"{s} {k}" for s, r in data["setups"].items() for k, x in r["diapason"].items()
           if (k == "default" or k.endswith("_heuristic")) and x["distinct_plans_values"] != 1]
    return "checked, one value per heuristic configuration" if not bad else "NOT so for " + ", ".join(bad)


def runtime(data: dict) -> str:
    times = sorted(x["time_s"] for r in data["setups"].values() for d in r["diapason"].values() for x in d["runs"])
    n = len(times)
    fl4 = [r["optimum_by_fusion_limit"]["4"]["time_s"] for r in data["setups"].values()]
    fl2 = [r["optimum"]["latency"]["time_s"] for r in data["setups"].values()]
    lp = [r["lp_round"][o]["time_s"] for r in data["setups"].values() for o in ("latency", "energy")]
    return (f"Runtime: {n} DIAPASON runs, median {times[n // 2]:.2f} s, max {times[-1]:.1f} s (the first "
            f"imports PyTorch); `dp` optimum {min(fl2):.1f} to {max(fl2):.1f} s at fusion limit 2 and up to "
            f"{max(fl4):.1f} s at fusion limit 4; `lp-round` {min(lp):.1f} to {max(lp):.1f} s (latency, energy). "
            f"A first timing run (2 seeds) showed that the paper's settings (20 iterations, 10 seeds, every "
            f"ablation over 10 seeds) fit the 40-minute budget, so nothing was reduced.")


def write_markdown(data: dict, path: Path) -> None:
    st = data["settings"]
    L = [
        "# DIAPASON against the certified optimum",
        "",
        "Recorded with",
        "",
        f"    {data['command']}",
        "",
        f"Machine: {data['machine']['nproc']} cores ({data['machine']['cpu']}), Python {data['machine']['python']}, "
        f"{data['machine']['date']}; shared with other jobs. Whole run: {data['elapsed_s'] / 60:.1f} min, "
        f"one thread everywhere. Code: {data.get('code', 'unknown')}.",
        "",
        "Setups: `instances/diapason/*.yaml`, DIAPASON's Sec. V-A: int8 VGG16, ResNet50 and MobileNetV2 at "
        "224x224, 100 Mbps between the devices and to the external source and sink, fusion limit 2, "
        "splits equal + capacity, axes rows + channels. `2x500` is two 500 MHz Gemminis, `100+500` the "
        "heterogeneous pair (g0 100 MHz, g1 500 MHz). No memory caps.",
        "",
        "- **Optimum**: the `dp` planner (exact for latency and energy without caps); its status was "
        "`optimal` on every setup (column `status`). Values are the evaluator's.",
        f"- **DIAPASON**: the `diapason` planner with the paper's defaults (lr 0.4, {st['iterations']} "
        "iterations, heuristic initialisation, fusion limit 2, parttype naive, loss in ms), one run per "
        f"seed, seeds 0..{st['seeds'] - 1}. Mean ± std (population std) over the seeds, min and max; "
        "gap = (value − optimum) / optimum.",
        "- **lp-round**: the LP relaxation of the MILP, rounded (docs/planners.md); `bound` is the LP optimum.",
        f"- **Ablations**: {st['ablation_seeds']} seeds each (seeds 0..{st['ablation_seeds'] - 1}), other options "
        "at their defaults, each with heuristic and with random initialisation. Heuristic initialisation "
        "draws no random numbers, so all its seeds give the same plan: " + determinism(data) + ".",
        "",
        runtime(data),
        "",
    ]
    setups = data["setups"]

    def name(s):
        m, pair = s.split("-", 1)
        return f"{m} {'100+500' if '100-500' in pair else '2x500'}"

    L += ["## DIAPASON (paper defaults) vs the optimum, latency", "",
          "| setup | optimum ms (dp status) | DIAPASON mean ± std ms | min | max | gap of mean | gap of best "
          "| in space | lp-round ms | LP bound ms | fractional arcs |",
          "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s, r in setups.items():
        o, d, lr = r["optimum"]["latency"], r["diapason"]["default"], r["lp_round"]["latency"]
        L.append(f"| {name(s)} | {f(o['value'], nd=3)} ({o['status']}) | {pm(d, nd=2)} | {f(d['min'], nd=2)} | "
                 f"{f(d['max'], nd=2)} | {gap(d['gap_mean_pct'])} | {gap(d['gap_min_pct'])} | "
                 f"{d['in_space_runs']}/{d['n']} | {f(lr['value'], nd=3)} | {f(lr['bound'], nd=3)} | "
                 f"{lr['fractional_arcs']} |")
    L += ["", "## Ablation: weight initialisation (latency)", "",
          "| setup | optimum ms | heuristic | gap | random mean ± std | min | max | gap of mean | gap of best |",
          "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for s, r in setups.items():
        o, h, rd = r["optimum"]["latency"], r["diapason"]["default"], r["diapason"]["weightsinit_random"]
        L.append(f"| {name(s)} | {f(o['value'], nd=2)} | {f(h['mean'], nd=2)} | {gap(h['gap_mean_pct'])} | "
                 f"{pm(rd, nd=2)} | {f(rd['min'], nd=2)} | {f(rd['max'], nd=2)} | {gap(rd['gap_mean_pct'])} | "
                 f"{gap(rd['gap_min_pct'])} |")
    L += ["", "## Ablation: fusion limit (latency)", "",
          "DIAPASON's `fusionlimit` k (0 and 1 both mean no fusion). Each cell: ms, gap to the optimum of "
          "the space with search.fusion_limit = max(1, k) (the `dp` optimum at that fusion limit, "
          "given in the first rows). Plans with k > 2 lie outside the instances' space (fusion limit 2).", "",
          "| setup | opt fl 1 | opt fl 2 | opt fl 3 | opt fl 4 |", "|---|---:|---:|---:|---:|"]
    for s, r in setups.items():
        ob = r["optimum_by_fusion_limit"]
        L.append(f"| {name(s)} | " + " | ".join(f(ob[str(k)]["value"], nd=2) for k in (1, 2, 3, 4)) + " |")
    for init in ("heuristic", "random"):
        L += ["", f"{init} initialisation" + (" (mean ± std over seeds)" if init == "random" else "") + ":", "",
              "| setup | k=0 | k=1 | k=2 | k=3 | k=4 |", "|---|---|---|---|---|---|"]
        for s, r in setups.items():
            cells = []
            for k in range(5):
                x = r["diapason"][f"fusionlimit_{k}_{init}"]
                v = f(x["mean"], nd=1) if init == "heuristic" else pm(x)
                cells.append(f"{v} ({gap(x['gap_mean_pct'])})")
            L.append(f"| {name(s)} | " + " | ".join(cells) + " |")
    L += ["", "## Ablation: latency vs energy objective", "",
          "DIAPASON optimising each objective (loss in ms or mJ), against the optimum of that objective; "
          "the other metric of the same plans beside it.", "",
          "| setup | objective | optimum | DIAPASON heuristic | gap | DIAPASON random mean ± std | gap | "
          "lp-round | LP bound | heuristic plan's other metric |",
          "|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for s, r in setups.items():
        for obj, hkey, rkey in (("latency", "default", "weightsinit_random"), ("energy", "energy_heuristic", "energy_random")):
            o, h, rd, lr = r["optimum"][obj], r["diapason"][hkey], r["diapason"][rkey], r["lp_round"][obj]
            unit = UNIT[obj][0]
            other = (f"{h['runs'][0]['energy_j'] * 1e3:.1f} mJ" if obj == "latency"
                     else f"{h['runs'][0]['latency_s'] * 1e3:.1f} ms")
            L.append(f"| {name(s)} | {obj} ({unit}) | {f(o['value'], nd=2)} | {f(h['mean'], nd=2)} | "
                     f"{gap(h['gap_mean_pct'])} | {pm(rd, nd=2)} | {gap(rd['gap_mean_pct'])} | "
                     f"{f(lr['value'], nd=2)} | {f(lr['bound'], nd=2)} | {other} |")
    L += ["", "## Ablation: parttype on the heterogeneous pair (latency)", "",
          "`naive` = equal slices, `capability` = slices proportional to device speed (MoDNN's BODP).", "",
          "| setup | optimum ms | naive heuristic | capability heuristic | naive random mean ± std | "
          "capability random mean ± std |", "|---|---:|---:|---:|---|---|"]
    for s, r in setups.items():
        if not r["heterogeneous"]:
            continue
        dd = r["diapason"]
        cells = [f"{f(dd[f'parttype_{pt}_heuristic']['mean'], nd=1)} ({gap(dd[f'parttype_{pt}_heuristic']['gap_mean_pct'])})"
                 for pt in ("naive", "capability")]
        cells += [f"{pm(dd[f'parttype_{pt}_random'])} ({gap(dd[f'parttype_{pt}_random']['gap_mean_pct'])})"
                  for pt in ("naive", "capability")]
        L.append(f"| {name(s)} | {f(r['optimum']['latency']['value'], nd=2)} | " + " | ".join(cells) + " |")
    if any("period" in r for r in setups.values()):
        L += ["", "## lp-round where the LP is not integral: period objective", "",
              f"`milp` with a {st['period_time_limit_s']:.0f} s limit (status, value, proven bound) against "
              "`lp-round` (rounded plan, LP bound).", "",
              "| setup | milp status | milp ms | milp bound ms | lp-round ms | LP bound ms | fractional arcs | "
              "rounding | lp-round s | milp s |", "|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
        for s, r in setups.items():
            if "period" not in r:
                continue
            o, lr = r["period"]["optimum"], r["period"]["lp_round"]
            L.append(f"| {name(s)} | {o['status']} | {f(o['value'], nd=2)} | {f(o['bound'], nd=2)} | "
                     f"{f(lr['value'], nd=2)} | {f(lr['bound'], nd=2)} | {lr['fractional_arcs']} | "
                     f"{lr['rounding']} | {lr['time_s']:.1f} | {o['time_s']:.1f} |")
    L += ["", "## What it shows", "", "WHAT_IT_SHOWS", ""]
    path.write_text("\n".join(L))


def git_head() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return f"commit {head}" + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="seeds of the main comparison")
    ap.add_argument("--ablation-seeds", type=int, default=10, help="seeds of each ablation")
    ap.add_argument("--iterations", type=int, default=20, help="DIAPASON gradient steps (paper: 20)")
    ap.add_argument("--setups", default="", help="comma-separated subset of " + ",".join(SETUPS))
    ap.add_argument("--period", action="store_true", help="also lp-round vs milp on the period objective")
    ap.add_argument("--period-time-limit", type=float, default=60.0)
    ap.add_argument("--out", default=str(RESULTS / "diapason.json"))
    ap.add_argument("--code", default=git_head(), help="the code version, recorded with the results")
    ap.add_argument("--markdown-only", action="store_true", help="rewrite the .md from an existing .json")
    args = ap.parse_args()
    out = Path(args.out)
    data = json.loads(out.read_text()) if args.markdown_only else run(args)
    md = out.with_suffix(".md")
    text_prev = md.read_text() if md.exists() else ""
    write_markdown(data, md)
    # keep a hand-written "what it shows" paragraph across re-renders
    if "## What it shows" in text_prev and "WHAT_IT_SHOWS" not in text_prev:
        shows = text_prev.split("## What it shows", 1)[1]
        md.write_text(md.read_text().replace("\n\nWHAT_IT_SHOWS\n", shows.rstrip("\n").lstrip("\n").join(["\n\n", "\n"])))


if __name__ == "__main__":
    main()

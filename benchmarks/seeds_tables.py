"""The seed benchmark's tables: rows indexed by instance and variant, cell formatting, and one
analysis per group (markdown lines and the JSON figures they show)."""

from __future__ import annotations

import statistics
from pathlib import Path

from seeds_setup import (AUTODICE_TABLE2, BASELINES_DISTREDGE, DIAPASON_CLAIMS, DISTREDGE_CLAIMS, GROUPS)

def fmean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def ms(x):
    return "-" if x is None else f"{x * 1e3:.1f}"


def pct(x, digits=1):
    return "-" if x is None else f"{x * 100:+.{digits}f} %"


def gap_text(g):
    if g is None:
        return ""
    if abs(g) < 5e-5:
        return "0 %"
    d = 2 if abs(g) < 0.01 else 1
    return f"{g * 100:.{d}f} %"


REF_SHORT = {"any-cut optimum": "any-cut opt.", "any-cut bound": "any-cut bound", "floor": "floor"}


def ref_text(rs) -> str:
    """The bracket of a cell: the gap to a proven value that holds for the plan, never negative.

    In-space plans: the gap to the best in-space bound. Plans outside the space (or breaking a
    cap): the gap to the reference of benchmarks/seeds_refs.py, named, and by how much the plan
    beats the in-space optimum when it does."""
    with_ref = [r for r in rs if r.get("ref_gap") is not None]
    if not with_ref:
        out = [r for r in rs if r["value"] is not None and (r["in_space"] is False or not r["feasible"])]
        return " (no covering bound recorded)" if out else ""
    kinds = sorted({r["ref_kind"] for r in with_ref})
    g = fmean([r["ref_gap"] for r in with_ref])
    text = gap_text(g)
    named = [REF_SHORT[k] for k in kinds if k in REF_SHORT]
    if named:
        text += " vs " + "/".join(named)
    beat = [r["vs_in_space"] for r in with_ref if r.get("vs_in_space") is not None and r["vs_in_space"] < -5e-5]
    if beat:
        what = "optimum" if all(r["certified"] for r in with_ref) else "bound"
        text += f"; {-fmean(beat) * 100:.1f} % below the in-space {what}"
    return f" ({text})"


REFERENCE_LABELS = {v.label for g in GROUPS.values() for v in g["variants"] if v.reference}


def file_of(r) -> str:
    """The instance file a row belongs to: the one in instances/ its copy (if any) was made from."""
    return r.get("base_file") or r["instance_file"]


class Cells:
    """Rows indexed by (instance file, variant label)."""

    def __init__(self, rows):
        self.rows = rows
        self.by = {}
        for r in rows:
            self.by.setdefault((file_of(r), r["variant"]), []).append(r)

    def get(self, f, label):
        return self.by.get((f, label), [])

    def value(self, f, label):
        """Mean evaluator value over seeds (runs with a plan)."""
        return fmean([r["value"] for r in self.get(f, label) if r["value"] is not None])

    def values(self, f, label):
        return [r["value"] for r in self.get(f, label) if r["value"] is not None]

    def status(self, f, label):
        st = sorted({r["status"] for r in self.get(f, label)})
        return "/".join(st) if st else ""

    def runtime(self, f, label):
        return fmean([r["runtime_s"] for r in self.get(f, label)])

    def in_space(self, f, label):
        rs = [r for r in self.get(f, label) if r["value"] is not None]
        return all(r["in_space"] for r in rs) if rs else None

    def first(self, f):
        """A row of instance ``f`` from the instance itself (not a reference copy): it carries the
        instance's best in-space bound and whether it is certified."""
        for (ff, lab), rs in self.by.items():
            if ff == f and lab not in REFERENCE_LABELS:
                return rs[0]
        return None


def cell(cells: Cells, f, label, unit=ms):
    rs = cells.get(f, label)
    if not rs:
        return "n/r"
    vals = cells.values(f, label)
    if not vals:
        st = cells.status(f, label)
        return st or "-"
    v = fmean(vals)
    text = unit(v)
    if label in REFERENCE_LABELS:  # the reference column itself: what it proved
        st = {r["status"] for r in rs}
        return text + (" (optimal)" if st == {"optimal"} else f" ({'/'.join(sorted(st))})")
    if len(vals) > 1 and max(vals) - min(vals) > 1e-9 * abs(v):
        text += f" ± {unit(statistics.pstdev(vals)).strip()}"
    text += ref_text(rs)
    if cells.in_space(f, label) is False:
        text += " †"
    if any(r["status"] == "timeout" for r in rs):
        text += " ⏱"
    if any(r["status"] in ("infeasible", "error") for r in rs):
        text += " ✗"
    return text


def md_table(header, rows) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def exact_note(cells: Cells, f, labels) -> str:
    msgs = []
    for lab in labels:
        for r in cells.get(f, lab):
            if r["status"] in ("timeout", "error") and r["error"]:
                if r["killed"]:
                    msgs.append(f"{lab}: killed at the deadline (1.5 x the time limit + 30 s) while enumerating")
                else:
                    msgs.append(f"{lab}: {r['error'][:120]}")
    return "; ".join(msgs)


def distinct_notes(cells: Cells, files) -> list[str]:
    out = []
    for f in files:
        for n in exact_note(cells, f, ["dp", "milp"]).split("; "):
            if n and n not in out:
                out.append(n)
    return out


# -- group analyses: each returns (markdown lines, json dict) ---------------------------------


def inst_files(rows, group):
    seen = []
    for r in rows:
        if r["group"] == group and file_of(r) not in seen:
            seen.append(file_of(r))
    return seen


def labels_present(rows, group):
    order = [v.label for v in GROUPS[group]["variants"]]
    have = {r["variant"] for r in rows if r["group"] == group}
    return [lab for lab in order if lab in have]


def main_table(cells, files, labels, name_of) -> list[str]:
    header = ["instance", "certified", "best bound (ms)"] + labels
    body = []
    for f in files:
        r0 = cells.first(f)
        cert = "yes" if r0 and r0["certified"] else "no"
        bb = ms(r0["best_bound"]) if r0 and r0["best_bound"] is not None else "-"
        body.append([name_of(f), cert, bb] + [cell(cells, f, lab) for lab in labels])
    return md_table(header, body)


def analyse_coopai(rows, cells) -> tuple[list[str], dict]:
    files = [f for f in inst_files(rows, "coopai") if cells.first(f)["objective"] == "latency"]
    labels = labels_present(rows, "coopai")
    md, js = [], {"speedups": {}, "summary": {}}

    def key(f):
        stem = Path(f).stem  # vgg16-rpi3-4
        _, pi, n = stem.split("-")
        return pi, int(n)

    md += [f"## (a) {GROUPS['coopai']['title']}", ""]
    md += ["Latency of each planner's plan in ms as our evaluator computes it (mean ± std over seeds), "
           "with the gap to the best proven bound in brackets.", ""]
    md += main_table(cells, files, labels, lambda f: Path(f).stem)
    md += [""]
    notes = [f"- {Path(f).stem}: {exact_note(cells, f, ['dp', 'milp'])}" for f in files if exact_note(cells, f, ['dp', 'milp'])]
    if notes:
        md += ["Exact runs that did not finish:", ""] + notes + [""]

    # speed-ups: s = T_base / T_diapason - 1 (the paper's "139 %" can only be read this way)
    diap_labels = [lab for lab in labels if lab.startswith("diapason")]
    cand = diap_labels + (["optimum"] if any(cells.first(f)["certified"] for f in files) else [])
    per = []
    for f in files:
        pi, n = key(f)
        r0 = cells.first(f)
        opt = r0["best_bound"] if r0["certified"] else None
        ent = {"instance": Path(f).stem, "device": pi, "n": n, "modnn": cells.value(f, "modnn"),
               "coopai": cells.value(f, "coopai"), "optimum": opt}
        for lab in diap_labels:
            ent[lab] = cells.value(f, lab)
        for who in cand:
            t = ent.get(who)
            for base in ("modnn", "coopai"):
                b = ent[base]
                ent[f"{who}/{base}"] = (b / t - 1) if (t and b) else None
        per.append(ent)
    js["speedups"] = per

    def spd_table():
        header = ["instance", "MoDNN ms", "CoopAI ms", "optimum ms"]
        for who in cand:
            header += [f"{who} vs MoDNN", f"{who} vs CoopAI"]
        body = []
        for e in per:
            body.append([e["instance"], ms(e["modnn"]), ms(e["coopai"]), ms(e["optimum"])]
                        + [pct(e[f"{who}/{b}"]) for who in cand for b in ("modnn", "coopai")])
        return md_table(header, body)

    md += ["### Speed-ups", "",
           "Speed-up of A over B = latency(B) / latency(A) - 1. DIAPASON never defines it, but its "
           "'maximum speed-up of 139 %' only fits this reading (a latency reduction cannot exceed 100 %). "
           "'optimum' is the certified optimum of the instance's plan space (only where certified): the "
           "largest speed-up any in-space plan can have.", ""]
    md += spd_table() + [""]

    summary = {}
    for (pi, base), (c_mean, c_max, c_n) in DIAPASON_CLAIMS.items():
        for who in cand:
            xs = [(e[f"{who}/{base}"], e["n"]) for e in per if e["device"] == pi and e[f"{who}/{base}"] is not None]
            if not xs:
                continue
            mean = statistics.fmean(x for x, _ in xs)
            mx, mn = max(xs)
            summary[f"{pi}/{who}/{base}"] = {"mean": mean, "max": mx, "n_at_max": mn, "cases": len(xs),
                                             "claim_mean": c_mean / 100, "claim_max": c_max / 100, "claim_n": c_n}
    js["summary"] = summary
    header = ["devices", "vs", "paper: mean (max, at n)"] + [f"{who}: mean (max, at n) [cases]" for who in cand]
    body = []
    for (pi, base), (c_mean, c_max, c_n) in DIAPASON_CLAIMS.items():
        row = [pi.upper().replace("RPI", "RPi "), base, f"{c_mean} % ({c_max} %, n={c_n})"]
        for who in cand:
            s = summary.get(f"{pi}/{who}/{base}")
            row.append("-" if s is None else f"{s['mean'] * 100:+.1f} % ({s['max'] * 100:+.1f} %, n={s['n_at_max']}) [{s['cases']}]")
        body.append(row)
    md += ["### Mean speed-ups against the paper's claims", "",
           "Means are over the device counts 2..7 (the paper's 'across all experiments'); the optimum's "
           "column averages only the instances where it is certified, so it is not comparable with the "
           "others when [cases] differs.", ""]
    md += md_table(header, body) + [""]
    return md, js


def group_of_distredge(stem: str) -> str:
    return stem.split("-")[1].upper()  # vgg16-da-50mbps -> DA


def latency_section(cells, files, labels, heading: str, why: str) -> list[str]:
    """A group's heading, its latency table and the exact runs that did not finish."""
    md = [heading, "",
          "Latency in ms (mean ± std over seeds; gap to the best proven bound in brackets where one "
          "exists). " + why, ""]
    md += main_table(cells, files, labels, lambda f: Path(f).stem)
    md += [""]
    notes = distinct_notes(cells, files)
    if notes:
        md += ["Exact runs that did not finish (distinct messages): " + " | ".join(f"`{n}`" for n in notes), ""]
    return md


def analyse_distredge(rows, cells) -> tuple[list[str], dict]:
    files = inst_files(rows, "distredge")
    labels = labels_present(rows, "distredge")
    md, js = [], {}
    md += latency_section(cells, files, labels, f"## (b) {GROUPS['distredge']['title']}",
                          "DistrEdge reports images per second with one image in flight at a time "
                          "(Sec. V-A), i.e. 1 / latency, so our latency ratio is its speed-up.")

    per = []
    for f in files:
        stem = Path(f).stem
        ent = {"instance": stem, "group": group_of_distredge(stem)}
        base_vals = {b: cells.value(f, b) for b in BASELINES_DISTREDGE if cells.value(f, b) is not None}
        best_b = min(base_vals, key=base_vals.get) if base_vals else None
        ent["best_baseline"] = best_b
        ent["best_baseline_ms"] = base_vals.get(best_b) if best_b else None
        ent["aofl_ms"] = base_vals.get("aofl")
        aofl = [r for r in cells.get(f, "aofl") if r.get("ref_gap") is not None]
        ent["aofl_ref_gap"] = fmean([r["ref_gap"] for r in aofl])
        ent["aofl_ref_kind"] = "/".join(sorted({r["ref_kind"] for r in aofl})) or None
        ent["aofl_vs_in_space"] = fmean([r.get("vs_in_space") for r in aofl])
        all_vals = [r["value"] for r in rows if file_of(r) == f and r["value"] is not None and r["feasible"]]
        ent["best_found_ms"] = min(all_vals) if all_vals else None
        for who in ("distredge", "distredge-lcpss"):
            t = cells.value(f, who)
            ent[f"{who}_ms"] = t
            ent[f"{who}/aofl"] = ent["aofl_ms"] / t if t and ent["aofl_ms"] else None
            ent[f"{who}/best"] = ent["best_baseline_ms"] / t if t and ent["best_baseline_ms"] else None
            vals = cells.values(f, who)
            ent[f"{who}/aofl_range"] = ([ent["aofl_ms"] / max(vals), ent["aofl_ms"] / min(vals)]
                                        if vals and ent["aofl_ms"] else None)
            st = [r for r in cells.get(f, who)]
            ent[f"{who}_status"] = cells.status(f, who)
            ent[f"{who}_episodes"] = [r.get("_info", {}).get("episodes_done") for r in st] if who == "distredge" else None
        r0 = cells.first(f)
        ent["certified"] = bool(r0["certified"])
        ent["best_bound_ms"] = r0["best_bound"]
        per.append(ent)
    js["speedups"] = per

    def x(v):
        return "-" if v is None else f"{v:.2f}x"

    header = ["instance", "AOFL ms", "best baseline (ms)", "DistrEdge ms", "DistrEdge / AOFL", "DistrEdge / best",
              "LC-PSS ms", "LC-PSS / AOFL", "LC-PSS / best", "best plan found ms"]
    body = []
    for e in per:
        body.append([e["instance"], ms(e["aofl_ms"]),
                     f"{e['best_baseline']} ({ms(e['best_baseline_ms'])})" if e["best_baseline"] else "-",
                     ms(e["distredge_ms"]), x(e["distredge/aofl"]), x(e["distredge/best"]),
                     ms(e["distredge-lcpss_ms"]), x(e["distredge-lcpss/aofl"]), x(e["distredge-lcpss/best"]),
                     ms(e["best_found_ms"])])
    md += ["### Speed-ups", "", "Speed-up of A over B = latency(B) / latency(A) (DistrEdge's IPS ratio); "
           "above 1 means A is faster. 'DistrEdge' is the DDPG planner (`distredge`), 'LC-PSS' the "
           "search-based splitter over the same layer-volumes (`distredge-lcpss`); both are means over seeds.", ""]
    md += md_table(header, body) + [""]

    claims = []
    for groups, lo, hi, text in DISTREDGE_CLAIMS:
        sel = [e for e in per if e["group"] in groups]
        ent = {"groups": list(groups), "claim": [lo, hi], "source": text}
        for who in ("distredge", "distredge-lcpss"):
            xs = [e[f"{who}/aofl"] for e in sel if e[f"{who}/aofl"] is not None]
            ent[who] = [min(xs), max(xs)] if xs else None
        claims.append(ent)
    overall = {}
    for who in ("distredge", "distredge-lcpss"):
        xs = [e[f"{who}/best"] for e in per if e[f"{who}/best"] is not None]
        wins = sum(1 for v in xs if v > 1)
        overall[who] = {"range_vs_best": [min(xs), max(xs)] if xs else None, "beats_best_baseline": wins, "cases": len(xs)}
    js["claims"] = claims
    js["overall"] = overall

    def rng(r):
        return "-" if r is None else f"{r[0]:.2f}x to {r[1]:.2f}x"

    body = [[", ".join(c["groups"]), f"{c['claim'][0]}x to {c['claim'][1]}x", rng(c["distredge"]),
             rng(c["distredge-lcpss"])] for c in claims]
    body.append(["all (vs the best baseline)", "1.1x to 3x (abstract, Sec. VII)",
                 rng(overall["distredge"]["range_vs_best"]) + f"; faster in {overall['distredge']['beats_best_baseline']}/{overall['distredge']['cases']}",
                 rng(overall["distredge-lcpss"]["range_vs_best"]) + f"; faster in {overall['distredge-lcpss']['beats_best_baseline']}/{overall['distredge-lcpss']['cases']}"])
    md += ["### Speed-up ranges against the paper's claims", ""]
    md += md_table(["groups", "paper (over AOFL)", "DistrEdge (DDPG) here", "LC-PSS here"], body) + [""]
    return md, js


def model_of(stem):  # vgg19-xaviernx-4 -> (vgg19, 4)
    m, _, n = stem.split("-")[:3]
    return m, int(n)


def pareto_front(points):
    """Non-dominated (period, memory, energy) points, all minimised."""
    pts = sorted({(p["period_s"], p["max_memory_bytes"], p["max_energy_j"]) for p in points})
    front = []
    for p in pts:
        if not any(all(q[i] <= p[i] for i in range(3)) and q != p for q in pts):
            front.append(p)
    return front


def pareto_entries(cells, files, records) -> dict[str, dict]:
    """Per instance stem: the union of the seeds' AutoDiCE Pareto sets (non-dominated again),
    its extreme points, and the single-PE reference (``offload``'s plan), from the run records."""
    out = {}
    for f in files:
        stem = Path(f).stem
        pts, evals, sts = [], [], []
        for r in cells.get(f, "autodice"):
            rec = records.get(r["key"]) or {}
            info = ((rec.get("result") or {}).get("info") or {})
            pts += info.get("pareto") or []
            evals.append(info.get("evaluations"))
            sts.append(r["status"])
        front = pareto_front(pts) if pts else []
        ref = None
        for r in cells.get(f, "offload"):
            m = r.get("_metrics") or {}
            if r["value"] is not None:
                ref = {"period_s": m.get("period_s"), "memory_bytes": r["max_memory_bytes"],
                       "energy_j": max((m.get("energy_per_device_j") or {"x": r["energy_j"]}).values())}
        ent = {"instance": stem, "points": [{"period_s": p[0], "max_memory_bytes": p[1], "max_energy_j": p[2]} for p in front],
               "evaluations": evals, "statuses": sts, "single_pe_reference": ref}
        if front:
            ent["best_period_s"] = min(p[0] for p in front)
            ent["min_memory_bytes"] = min(p[1] for p in front)
            ent["min_energy_j"] = min(p[2] for p in front)
        out[stem] = ent
    return out


def autodice_files(rows, cells) -> list[str]:
    """The AutoDiCE instance files with the latency objective (the others are objective copies)."""
    return [f for f in inst_files(rows, "autodice") if cells.first(f)["objective"] == "latency"]


def analyse_autodice(rows, cells, pareto: dict[str, dict]) -> tuple[list[str], dict]:
    """``pareto``: ``pareto_entries(...)`` of the run records, or as recorded in seeds.json."""
    files_all = inst_files(rows, "autodice")
    files = autodice_files(rows, cells)
    labels = [lab for lab in labels_present(rows, "autodice") if not any(lab == v.label and v.objectives != ("latency",)
                                                                       for v in GROUPS["autodice"]["variants"])]
    md, js = [], {"pareto": {}, "scaling": {}, "exact_points": {}}
    md += latency_section(cells, files, labels, f"## (c) {GROUPS['autodice']['title']}",
                          "AutoDiCE optimises throughput, memory and energy, not latency: its column is the "
                          "lowest-latency point of its Pareto set, to set beside the exact latency optimum.")

    header = ["instance", "seeds (status)", "evaluations", "Pareto points", "best throughput (img/s)",
              "min max-memory per device (MB)", "min max-energy per device (J/img)",
              "1-PE reference: throughput, memory, energy"]
    body = []
    for f in files:
        stem = Path(f).stem
        ent = pareto[stem]
        js["pareto"][stem] = ent
        sts, evals, ref = ent["statuses"], ent["evaluations"], ent["single_pe_reference"]
        if ent["points"]:
            refs = "-" if ref is None else f"{1 / ref['period_s']:.2f}, {ref['memory_bytes'] / 1e6:.0f}, {ref['energy_j']:.3f}"
            body.append([stem, f"{len(sts)} ({'/'.join(sorted(set(sts)))})", "/".join(str(e) for e in evals),
                         len(ent["points"]), f"{1 / ent['best_period_s']:.2f}", f"{ent['min_memory_bytes'] / 1e6:.0f}",
                         f"{ent['min_energy_j']:.3f}", refs])
        else:
            body.append([stem, f"{len(sts)} ({'/'.join(sorted(set(sts)))})", "-", 0, "-", "-", "-", "-"])
    md += ["### AutoDiCE's Pareto sets", "",
           "The union of the seeds' Pareto sets (non-dominated again), by its extreme points. Energy per "
           "device is our evaluator's (compute power x compute time + tx/rx shares), memory per device "
           "is weights + working set (docs/model.md section 4). The 1-PE reference is `offload`'s plan: the "
           "whole network on the single fastest processing unit (a GPU), our stand-in for the paper's "
           "'1-Device GPU' row.", ""]
    md += md_table(header, body) + [""]

    # exact single-objective points, where they were run
    exact_rows = []
    for f in files_all:
        obj = cells.first(f)["objective"]
        if obj == "latency":
            continue
        for v in GROUPS["autodice"]["variants"]:
            if obj in v.objectives and cells.get(f, v.label):
                exact_rows.append([Path(f).stem, v.label, cells.status(f, v.label), cell(cells, f, v.label, unit=lambda x: f"{x:.6g}")])
                js["exact_points"].setdefault(Path(f).stem, {})[v.label] = {
                    "status": cells.status(f, v.label), "value": cells.value(f, v.label),
                    "bound": cells.first(f)["best_bound"]}
    if exact_rows:
        md += ["### Exact single-objective points", "",
               "Period in s, energy in J (total over devices: our `energy` objective is the total, "
               "AutoDiCE's is the largest per device), memory in bytes.", ""]
        md += md_table(["instance (objective copy)", "variant", "status", "value (gap)"], exact_rows) + [""]

    # scaling with the number of boards, against Fig. 7
    scal = {}
    for stem, ent in js["pareto"].items():
        m, n = model_of(stem)
        ref = ent["single_pe_reference"]
        if "best_period_s" not in ent or ref is None:
            continue
        scal.setdefault(m, {})[n] = {
            "throughput_gain": ref["period_s"] / ent["best_period_s"] - 1,
            "memory_change": ent["min_memory_bytes"] / ref["memory_bytes"] - 1,
            "energy_change": ent["min_energy_j"] / ref["energy_j"] - 1,
            "throughput_ips": 1 / ent["best_period_s"],
        }
    js["scaling"] = scal
    header = ["model", "boards", "best throughput (img/s)", "vs 1 PE", "min max-memory vs 1 PE", "min max-energy vs 1 PE"]
    body = []
    for m in sorted(scal):
        for n in sorted(scal[m]):
            s = scal[m][n]
            body.append([m, n, f"{s['throughput_ips']:.2f}", pct(s["throughput_gain"]), pct(s["memory_change"]),
                         pct(s["energy_change"])])
    md += ["### Scaling with the number of boards (the paper's Fig. 7)", "",
           "Each column is the best value over the Pareto set at that board count (as the paper's Fig. 7 "
           "does, the three may come from different mappings), relative to the 1-PE reference.", ""]
    md += md_table(header, body) + [""]

    # Table II side by side
    body = []
    for m, pts in AUTODICE_TABLE2.items():
        ours = [e for s, e in js["pareto"].items() if s.startswith(m + "-") and "best_period_s" in e]
        if ours:
            o_thr = max(1 / e["best_period_s"] for e in ours)
            o_mem = min(e["min_memory_bytes"] for e in ours) / 1e6
            o_en = min(e["min_energy_j"] for e in ours)
            ours_txt = f"{o_en:.3f}, {o_thr:.2f}, {o_mem:.0f}"
        else:
            ours_txt = "-"
        best_paper = (min(p[0] for p in pts.values()), max(p[1] for p in pts.values()), min(p[2] for p in pts.values()))
        ref = [e["single_pe_reference"] for s, e in js["pareto"].items() if s.startswith(m + "-") and e["single_pe_reference"]]
        ref_txt = (f"{ref[0]['energy_j']:.3f}, {1 / ref[0]['period_s']:.3f}, {ref[0]['memory_bytes'] / 1e6:.1f}"
                   if ref else "-")
        body.append([m, "1-Device GPU (1) / ours: 1-PE reference (offload)",
                     "{:.3f}, {:.3f}, {:.1f}".format(*pts["1-Device GPU"][:3]), ref_txt])
        paper_pts = ", ".join(f"{name} ({nb}): {e:.3f}, {thr:.3f}, {mem:.1f}" for name, (e, thr, mem, nb) in pts.items()
                              if not name.startswith("1-Device"))
        body.append([m, "best of the paper's Pareto points " + paper_pts + " / ours: best of the Pareto sets",
                     f"{best_paper[0]:.3f}, {best_paper[1]:.3f}, {best_paper[2]:.1f}", ours_txt])
        js.setdefault("table2", {})[m] = {
            "paper_best": best_paper, "ours_best": ours_txt, "ours_1pe": ref_txt,
            "ours_best_num": [o_en, o_thr, o_mem] if ours else None,
            "ours_1pe_num": [ref[0]["energy_j"], 1 / ref[0]["period_s"], ref[0]["memory_bytes"] / 1e6] if ref else None}
    md += ["### Against the paper's Table II", "",
           "Table II lists selected Pareto points measured on the boards (energy of the whole board, "
           "memory of the whole process). Ours are model figures; only the order of magnitude and the "
           "direction of the trade-offs are comparable. Each objective's best is taken separately.", ""]
    md += md_table(["model", "point", "paper: energy J/img, img/s, MB", "ours: energy J/img, img/s, MB"], body) + [""]
    return md, js


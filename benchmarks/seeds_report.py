"""The seed benchmark's documents: ``seeds.md`` (run, variants, the groups' tables and the closing
discussion: each claim of the papers, our figure and a verdict by a stated rule) and
``results.csv``. Every figure in them is computed from the rows and the analyses; the lasting
explanations of why the figures differ from the papers are in docs/benchmarks.md."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from milp_planner.io import write_atomic
from seeds_refs import REF_COLUMNS
from seeds_setup import AUTODICE_FIG7, AUTODICE_TABLE2, DIAPASON_CLAIMS


VERDICT_RULE = ("A mean or a single figure agrees when ours has the same sign and lies within a factor of 2 "
                "of the paper's; a range agrees when it overlaps the paper's range.")


def factor_verdict(ours, claim) -> str:
    if ours is None:
        return "not measured"
    if claim == 0:
        return "agrees" if abs(ours) < 0.05 else "does not agree"
    r = ours / claim
    return "agrees" if 0.5 <= r <= 2 else "does not agree"


def range_verdict(ours, lo, hi) -> str:
    if not ours:
        return "not measured"
    if ours[1] < lo:
        return "does not agree (ours is lower)"
    if ours[0] > hi:
        return "does not agree (ours is higher)"
    return "agrees (the ranges overlap)"


def overruns(rows) -> list[str]:
    """Exact runs that did not stop at their time limit (killed, or back more than 5 % late)."""
    killed = [r for r in rows if r["_exact"] and r["killed"]]
    late = [r for r in rows if r["_exact"] and not r["killed"] and r["runtime_s"] and r["time_limit_s"]
            and r["runtime_s"] > 1.05 * r["time_limit_s"]]
    out = []
    if killed:
        out.append(f"{len(killed)} exact runs did not return by the runner's deadline (1.5 x the limit + 30 s) and were "
                   "killed: "
                   + ", ".join(f"{r['planner']} on {r['instance']}" for r in killed) + ".")
    if late:
        worst = max(late, key=lambda r: r["runtime_s"] / r["time_limit_s"])
        out.append(f"{len(late)} more returned late (worst: {worst['planner']} on {worst['instance']}, "
                   f"{worst['runtime_s']:.0f} s for a {worst['time_limit_s']:g} s limit).")
    return out


WHY = "docs/benchmarks.md ('Why the seed figures differ from the papers')"


def _span(xs, fmt) -> str:
    """'a to b' (or 'a' when equal) of the values in xs, formatted by fmt."""
    lo, hi = min(xs), max(xs)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


def _coopai_figures(a, rows) -> list[str]:
    """The figures behind the CoopAI verdicts, from the rows and the speed-ups."""
    out = []
    gaps = [r["ref_gap"] for r in rows if r["group"] == "coopai" and r["variant"] == "coopai" and r["certified"]
            and r.get("ref_kind") == "in-space optimum"]
    if gaps:
        out.append(f"- Our `coopai` (an exact DP over DIAPASON's own menu of partition and fusion opportunities) is "
                   f"within {max(gaps) * 100:.1f} % of the certified optimum on the {len(gaps)} instances where one is "
                   "proven, so a gradient descent over a relaxation of the same menu cannot beat it there.")
    per = a["speedups"]
    for pi in ("rpi3", "rpi4"):
        mine = [e for e in per if e["device"] == pi and e["modnn"] and e["coopai"]]
        if not mine:
            continue
        e = max(mine, key=lambda e: e["n"])
        name = pi.upper().replace("RPI", "RPi ")
        d = e["modnn"] / e["coopai"] - 1
        text = (f"- At {e['n']} {name}: MoDNN {e['modnn'] * 1e3:.0f} ms, CoopAI {e['coopai'] * 1e3:.0f} ms "
                f"(MoDNN {'slower' if d > 0 else 'faster'} by {abs(d) * 100:.1f} %)")
        if e.get("diapason"):
            text += (f"; DIAPASON with the Sec. V-B settings {e['diapason'] * 1e3:.0f} ms "
                     f"({e['diapason'] / e['coopai']:.2f}x CoopAI's latency)")
        out.append(text + ".")
    seeded = [r for r in rows if r["group"] == "coopai" and r["variant"].startswith("diapason") and r["value"] is not None]
    by_cell: dict = {}
    for r in seeded:
        by_cell.setdefault((r["instance_file"], r["variant"]), []).append(r["value"])
    multi = [v for v in by_cell.values() if len(v) > 1]
    if multi:
        same = sum(1 for v in multi if max(v) - min(v) <= 1e-12 * max(v))
        out.append(f"- DIAPASON's seeds give the same latency in {same} of {len(multi)} (instance, variant) cells "
                   "with more than one seed.")
    return out


def _distredge_figures(b) -> list[str]:
    sp = b["speedups"]
    out = []

    def aofl_gaps(kind):
        parts = []
        for e in sp:
            if not (e["certified"] and e.get("aofl_ref_gap") is not None and e["instance"].endswith(kind)):
                continue
            text = f"{e['instance'].replace('vgg16-', '')} +{e['aofl_ref_gap'] * 100:.1f} %"
            if e["aofl_ref_kind"] != "in-space optimum":
                text += f" vs the {e['aofl_ref_kind']}"
                if e.get("aofl_vs_in_space") is not None and e["aofl_vs_in_space"] < 0:
                    text += f" ({-e['aofl_vs_in_space'] * 100:.1f} % below the in-space optimum)"
            parts.append(text)
        return ", ".join(parts)
    for kind, name in (("nano", "Jetson Nano"), ("xavier", "Xavier")):
        if aofl_gaps(kind):
            out.append(f"- AOFL's gap on the {name} groups, to the certified optimum when its plan is in the space, "
                       f"else to the best proven value over a space that holds its plan: {aofl_gaps(kind)}.")
    both = [e for e in sp if e["distredge_ms"] and e["distredge-lcpss_ms"]]
    if both:
        n_lose = sum(1 for e in both if e["distredge_ms"] > e["distredge-lcpss_ms"])
        out.append(f"- The DDPG planner is slower than the plain local search over the same layer-volumes (LC-PSS) on "
                   f"{n_lose} of {len(both)} instances.")
    big = [e["distredge_ms"] / e["best_baseline_ms"] for e in sp
           if e["group"] in ("LB", "LC", "LD") and e["distredge_ms"] and e["best_baseline"] == "offload"]
    if big:
        out.append(f"- On the 16-device groups LB to LD, where one device alone is the best baseline, DDPG's plan is "
                   f"{_span(big, lambda v: f'{v:.1f}x')} slower than it.")
    with_base = [e for e in sp if e["best_baseline"]]
    if with_base:
        n_off = sum(1 for e in with_base if e["best_baseline"] == "offload")
        out.append(f"- `offload` (one device alone) is the best baseline on {n_off} of {len(with_base)} instances.")
    dc_x = [e[k] for e in sp if e["group"] == "DC" for k in ("distredge/aofl", "distredge-lcpss/aofl") if e[k]]
    if dc_x:
        out.append(f"- In DC, where AOFL and DeeperThings split over every device including the Pi 3, the DistrEdge "
                   f"planners beat AOFL by {_span(dc_x, lambda v: f'{v:.1f}x')}.")
    return out


def _exact_figures(rows) -> list[str]:
    """Which instances an exact planner certified (and how fast), and which none did."""
    out = []
    for g in ("coopai", "distredge", "autodice"):
        mine = [r for r in rows if r["group"] == g and r["objective"] == "latency" and r["variant"] != "dp-any"]
        if not mine:
            continue
        files = list(dict.fromkeys(r["instance"] for r in mine))
        cert = [f for f in files if any(r["certified"] for r in mine if r["instance"] == f)]
        times = [r["runtime_s"] for r in mine if r["_exact"] and r["status"] == "optimal" and r["runtime_s"]]
        text = f"- {g}: {len(cert)} of {len(files)} instances certified"
        if cert:
            text += f" ({', '.join(sorted(cert))}; exact runs that proved an optimum took {_span(times, lambda v: f'{v:.1f} s')})"
        out.append(text + ".")
    return out


def discussion(analysis, rows=()) -> list[str]:
    """The closing section: each claim, our figure and a verdict; the figures behind the verdicts."""
    md = ["## Where our figures agree with the papers, and where they do not", "", VERDICT_RULE,
          f"Why they differ is explained, without figures, in {WHY}.", ""]
    a = analysis.get("coopai")
    if a:
        md += ["### DIAPASON (DATE 2024): 44 % and 12 % mean speed-ups over MoDNN and CoopAI", ""]
        s = a["summary"]
        for (pi, base), (c_mean, c_max, c_n) in DIAPASON_CLAIMS.items():
            d = s.get(f"{pi}/diapason/{base}")
            if d is None:
                continue
            md.append(f"- {pi.upper().replace('RPI', 'RPi ')}, over {'MoDNN' if base == 'modnn' else 'CoopAI'}: paper mean "
                      f"{c_mean} % (max {c_max} % at {c_n} devices); ours {d['mean'] * 100:+.1f} % (max "
                      f"{d['max'] * 100:+.1f} % at {d['n_at_max']}): **{factor_verdict(d['mean'], c_mean / 100)}**.")
        opt = [v for k, v in s.items() if k.split("/")[1] == "optimum"]
        if opt:
            ns = sorted({e["n"] for e in a["speedups"] if e["optimum"]})
            md.append(f"- The certified optimum itself ({ns[0]} to {ns[-1]} devices) is at most "
                      f"{max(o['max'] for o in opt) * 100:+.1f} % faster than MoDNN or CoopAI: where we can prove it, no "
                      "planner could show the paper's gains on these instances.")
        md += ["", "The figures behind these verdicts:", ""] + _coopai_figures(a, rows) + [""]
    b = analysis.get("distredge")
    if b:
        md += ["### DistrEdge (IPDPS 2022): 1.1x to 3x over the best baseline; per-group gains over AOFL", ""]
        for c in b["claims"]:
            md.append(f"- {', '.join(c['groups'])}: paper {c['claim'][0]}x to {c['claim'][1]}x over AOFL; DDPG "
                      + (f"{c['distredge'][0]:.2f}x to {c['distredge'][1]:.2f}x" if c["distredge"] else "-")
                      + f": **{range_verdict(c['distredge'], *c['claim'])}**; LC-PSS "
                      + (f"{c['distredge-lcpss'][0]:.2f}x to {c['distredge-lcpss'][1]:.2f}x" if c["distredge-lcpss"] else "-")
                      + f": **{range_verdict(c['distredge-lcpss'], *c['claim'])}**.")
        o = b["overall"]
        for who, name in (("distredge", "DDPG"), ("distredge-lcpss", "LC-PSS")):
            if o.get(who) and o[who]["range_vs_best"]:
                r = o[who]["range_vs_best"]
                md.append(f"- All groups, over the best baseline: paper 1.1x to 3x; {name} {r[0]:.2f}x to {r[1]:.2f}x, "
                          f"faster than every baseline in {o[who]['beats_best_baseline']} of {o[who]['cases']} instances: "
                          f"**{range_verdict(r, 1.1, 3.0)}**.")
        cert = [e for e in b["speedups"] if e["certified"]]
        if cert:
            md.append(f"- Certified optimum ({len(cert)} instances): "
                      + ", ".join(f"{e['instance'].replace('vgg16-', '')} {e['aofl_ms'] / e['best_bound_ms']:.2f}x over AOFL"
                                  for e in cert if e["aofl_ms"] and e["best_bound_ms"]) + ".")
        md += ["", "The figures behind these verdicts:", ""] + _distredge_figures(b) + [""]
    c = analysis.get("autodice")
    if c:
        md += ["### AutoDiCE (IEEE IoT-J 2023): throughput, memory and energy when distributing", ""]
        sc = c.get("scaling", {})
        for m, claim in AUTODICE_FIG7.items():
            if m in sc and 4 in sc[m]:
                g = sc[m][4]["throughput_gain"]
                md.append(f"- {m}: throughput gain with 4 devices over one (Fig. 7, Sec. V-C): paper up to +{claim} %; "
                          f"ours +{g * 100:.0f} % at 4 boards over one GPU: **{factor_verdict(g, claim / 100)}**.")
        slow = []
        for m in sc:
            if 4 in sc[m] and 8 in sc[m]:
                slow.append(f"{m} {sc[m][4]['throughput_ips']:.1f} -> {sc[m][8]['throughput_ips']:.1f} img/s")
        if slow:
            dirs = [sc[m][8]["throughput_ips"] < sc[m][4]["throughput_ips"] for m in sc if 4 in sc[m] and 8 in sc[m]]
            v = "agrees" if all(dirs) else ("agrees for some models" if any(dirs) else "does not agree")
            md.append(f"- Slowdown from 4 to 8 devices (Sec. V-C): ours {', '.join(slow)}: **{v}** in direction.")
        if "resnet101" in sc and 8 in sc["resnet101"]:
            r8 = sc["resnet101"][8]
            md.append(f"- ResNet-101 on 8 devices against one (Sec. V-C): paper about -40 % max energy and -80 % max "
                      f"memory per device; ours {r8['energy_change'] * 100:.0f} % energy: "
                      f"**{factor_verdict(r8['energy_change'], -0.40)}**, {r8['memory_change'] * 100:.0f} % memory: "
                      f"**{factor_verdict(r8['memory_change'], -0.80)}**.")
        t2 = c.get("table2", {})
        ratios, refr = [], []
        for m, t in t2.items():
            if t.get("ours_best_num"):
                pe, pt, pm = t["paper_best"]
                oe, ot, om = t["ours_best_num"]
                ratios += [pe / oe, ot / pt, pm / om]
            if t.get("ours_1pe_num"):
                refr.append(t["ours_1pe_num"][1] / AUTODICE_TABLE2[m]["1-Device GPU"][1])
        if ratios:
            md.append(f"- Table II absolute figures: in each objective our best Pareto point is {min(ratios):.1f}x to "
                      f"{max(ratios):.1f}x better than the paper's best point: **does not agree** in magnitude. "
                      + (f"Our 1-PE reference reaches {min(refr):.2f}x to {max(refr):.2f}x the throughput of the paper's "
                         "1-Device GPU row (the Xavier NX profiles were fitted to Table II)." if refr else ""))
        dp_rows = [r for r in rows if r["group"] == "autodice" and r["variant"] == "dp"]
        cert = {r["instance"] for r in dp_rows if r["certified"]}
        if dp_rows:
            n = len({r["instance"] for r in dp_rows})
            md.append(f"- The exact latency optimum: certified on {len(cert)} of {n} AutoDiCE instances"
                      + ("; elsewhere AutoDiCE's latency can only be set beside the best known plan." if len(cert) < n
                         else "."))
        md += [""]
    md += ["### The exact planners at these sizes", "",
           "Within the recorded exact time limit (see Run):", ""] + _exact_figures(rows) + [
           "", "Rerun the exact columns alone with `python benchmarks/bench_seeds.py --planners dp,milp --refresh "
           "dp,milp --exact-time-limit S`; docs/exact.md and benchmarks/results/exact.md follow how far the exact "
           "planners scale."]
    ov = overruns(rows)
    if ov:
        md += ["", "The time limit was not honoured by every exact run: " + " ".join(ov)]
    md += [""]
    return md


CSV_EXTRA = ("group", "variant", "variant_options", *REF_COLUMNS)


def write_csv(rows, path: Path):
    from milp_planner.report.results import COLUMNS, _csv_value

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_EXTRA + COLUMNS)
    for r in rows:
        w.writerow([_csv_value(r.get(c)) for c in CSV_EXTRA + COLUMNS])
    write_atomic(path, buf.getvalue())


def public_row(r) -> dict:
    from milp_planner.report.results import COLUMNS

    return {c: r.get(c) for c in CSV_EXTRA + COLUMNS}



def markdown(parts, meta, rows, analysis) -> str:
    """The text of seeds.md: the run, the variants, each group's tables, the discussion."""
    m = meta["machine"]
    lines = ["# The seed papers' headline comparisons on our evaluator", "",
             "Written by `benchmarks/bench_seeds.py` (issue #7). Every number is our evaluator's "
             "(docs/model.md section 4) on the instance files in `instances/`, whose comments state what was "
             "taken from each paper and what was assumed; the papers measured real boards or used their own "
             "simulators, so only trends and ratios are comparable, never absolute times.", "",
             "Legend for the tables: value (gap). 'certified': an exact planner proved the optimum of the "
             "instance's plan space. A gap is always to a proven value that holds for the plan, so it is never "
             "negative: for a plan inside the space, the best in-space bound ('best bound', the certified "
             "optimum where there is one); for a plan outside it (the baselines may cut anywhere, fuse deeper, "
             "use more parts or the channel axis) or one that breaks a cap, the largest of the `dp-any` "
             "column (dp over every integer cut: 'any-cut opt.' where it certified, 'any-cut bound' otherwise; "
             "it holds for plans within the instance's fusion_limit, max_parts and axes) and the "
             "floor of milp_planner/cost/floors.py over the smallest space with every cut that holds the plan "
             "('floor'), as the bracket names. The floor leaves out communication, so on slow networks it "
             "is far below any plan and its gaps say little beyond 'not negative'. A plan outside the space "
             "that beats the in-space optimum (or bound) says by how much ('below the in-space optimum'); 'no covering bound recorded': no proven value that "
             "holds for that plan was recorded. † plan outside the space; ⏱ a run stopped at its time limit (an exact one without "
             "a plan shows `timeout`); ✗ infeasible or crashed; n/r: not run. Values of seeded planners are "
             "means over seeds ± their standard deviation. docs/reports.md ('Baselines outside the space') "
             "states what each reference proves.", ""]
    budget = meta["budget"]
    lines += ["## Run", "",
              f"- Command: `{meta['command']}`",
              f"- Machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, {m['platform']}; load average at "
              f"start {', '.join(f'{x:.2f}' for x in m['loadavg_at_start']) if m['loadavg_at_start'] else '?'} "
              "(the machine is shared with other jobs, so run times are indicative)",
              f"- Date: {m['date']}",
              f"- Budget: {budget['time_limit_s']:g} s per heuristic run, {budget['exact_time_limit_s']:g} s per exact "
              f"run, seeds 0..{budget['repeats'] - 1} for seeded planners, {budget['workers']} worker processes "
              "(one thread each); a run not back after 1.5 x its limit + 30 s is killed.",
              f"- This invocation: {meta['runs']} runs reported, {meta['ran_now']} run now "
              f"(sum of their run times {meta['run_time_s_sum_now'] / 60:.1f} min), the others from the cache; "
              f"wall time {meta['wall_s'] / 60:.1f} min. All {meta['runs']} runs together: "
              f"{meta['run_time_s_sum_all'] / 60:.1f} min of run time (on {budget['workers']} workers)"
              + (f"; the invocations that ran them (log in the cache) took {sum(i['wall_s'] for i in meta['invocations']) / 60:.1f} "
                 f"min of wall time in all: " + "; ".join(f"{i['start']}, {i['wall_s'] / 60:.1f} min, {i['ran']} runs"
                                                            + (f" ({i['note']})" if i.get('note') else "")
                                                            for i in meta["invocations"]) if meta["invocations"] else "") + ".",
              (f"- Code: git HEAD {meta['git'].get('head')}"
               + (f"; uncommitted planner code when this file was written: {', '.join(meta['git']['dirty'])}. The cache "
                  "key holds the milp-planner version, not the code, so cached runs may predate such changes: "
                  "refresh the affected variants (`--refresh`) after they land" if meta["git"].get("dirty") else "")
               + "." if meta.get("git") else "- Code: not a git checkout."),
              f"- Cache: `{meta['cache_dir']}` (not committed). Versions: " +
              ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v), ""]
    for g, k in (meta.get("kept_groups") or {}).items():
        lines[-1:-1] = [f"- Group {g}: not rerun by this invocation; its {k['runs']} rows are those recorded on "
                        f"{k['date']} (git {k['git']}), taken from `{k['from']}` (`--keep-groups-from`). Their plans "
                        "were not recorded, so the gaps of their plans outside the space are not computed "
                        "('no covering bound recorded')."]
    lines += ["Variants (columns):", ""]
    for g, vs in meta["variants"].items():
        for v in vs:
            opt = ", ".join(f"{k}={v2}" for k, v2 in v["options"].items())
            extra = []
            if opt:
                extra.append(f"options {opt}")
            if v["objectives"] != ["latency"]:
                extra.append(f"on copies of the instances with objective {'/'.join(v['objectives'])}")
            if not v["default"]:
                extra.append("not run by default")
            if v["note"]:
                extra.append(v["note"])
            lines.append(f"- {g} / `{v['label']}` = planner `{v['planner']}`" + (f": {'; '.join(extra)}" if extra else ""))
    lines += [""]
    for _, md in parts:
        lines += md
    lines += discussion(analysis, rows)
    return "\n".join(lines) + "\n"



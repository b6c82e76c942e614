"""What the seed benchmark runs: its instance groups, their variants (planner + options), and
the papers' claims it checks (numbers quoted from the papers, see instances/README.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Variant:
    """One column: a planner with options. ``default``: run unless --planners says otherwise."""

    label: str
    planner: str
    options: tuple = ()
    default: bool = True
    objectives: tuple = ("latency",)  # instance objectives (autodice group) it runs on
    note: str = ""
    any_cuts: bool = False  # runs on copies of the instances with splits [any]

    @property
    def reference(self) -> bool:
        """A reference column for the baselines outside the space, not a planner under test."""
        return self.any_cuts

    @property
    def opts(self) -> dict:
        return dict(self.options)


def V(label, planner=None, options=None, **kw) -> Variant:
    return Variant(label, planner or label, tuple(sorted((options or {}).items())), **kw)


DIAPASON_VB = {"lr": 0.8, "fusionlimit": 4}  # Sec. V-B: lr 0.8, fusionlimit 4, heuristics, 20 iterations

# The exact reference over a space that contains the baselines' cuts (docs/reports.md, "Baselines
# outside the space"): dp over every integer cut, with the instance's fusion_limit, max_parts and
# axes (adding the channel axis makes even the 2-device VGG16 instances time out: 4096 channel
# layouts per classifier layer). Where it certifies, or proves a bound, the out-of-space
# baselines it covers are measured against it; elsewhere (and for baselines that fuse deeper,
# use more parts or another axis) against the floor of milp_planner.cost.floors.
ANY = V("dp-any", "dp", any_cuts=True,
        note="dp on copies of the instances with splits [any]: the reference for the baselines outside "
             "the space")

GROUPS = {
    "coopai": {
        "title": "DIAPASON vs MoDNN vs CoopAI: VGG16 on 2 to 7 Raspberry Pi 3 / Pi 4 (DIAPASON Sec. V-B, Fig. 7)",
        "instances": [f"instances/coopai/vgg16-{pi}-{n}.yaml" for pi in ("rpi3", "rpi4") for n in range(2, 8)],
        "variants": [
            V("diapason", "diapason", DIAPASON_VB,
              note="the paper's Sec. V-B settings: lr 0.8, fusionlimit 4, heuristic init, 20 iterations, loss in ms"),
            V("diapason-va", "diapason", {}, note="the planner's defaults (Sec. V-A): lr 0.4, fusionlimit 2, loss in ms"),
            V("diapason-s", "diapason", {**DIAPASON_VB, "loss_unit": "s"},
              note="Sec. V-B settings with the loss in seconds (the other reading of the unit)"),
            V("modnn"), V("coopai"), V("dp"), V("milp"), ANY,
        ],
    },
    "distredge": {
        "title": "DistrEdge vs its baselines: VGG16 on groups DA-DC, NA-ND, LA-LD (DistrEdge Figs. 7-9)",
        "instances": [f"instances/distredge/vgg16-{g}.yaml" for g in (
            "da-50mbps", "da-300mbps", "db-50mbps", "db-300mbps", "dc-50mbps", "dc-300mbps",
            "na-nano", "nb-nano", "nc-nano", "nd-nano", "na-xavier", "nb-xavier", "nc-xavier", "nd-xavier",
            "la-16dev", "lb-16dev", "lc-16dev", "ld-16dev")],
        "variants": [
            V("distredge", note="DDPG splitter over LC-PSS volumes; 300 episodes (the planner's default), stopped by the time limit"),
            V("distredge-lcpss", note="LC-PSS volumes + seeded local search (300 evaluations)"),
            V("coedge"), V("modnn"), V("deepthings"), V("deeperthings"), V("aofl"), V("offload"),
            V("dp"),
            V("milp", default=False, note="left out by default: it first builds the same stage graph as dp, which "
                                          "does not finish on these instances"),
            ANY,
        ],
    },
    "autodice": {
        "title": "AutoDiCE's NSGA-II Pareto sets: VGG-19, ResNet-101, DenseNet-121 on 4 to 8 Xavier NX boards",
        "instances": [f"instances/autodice/{m}-xaviernx-{n}.yaml" for m in ("vgg19", "resnet101", "densenet121")
                      for n in range(4, 9)],
        "variants": [
            V("autodice", note="NSGA-II, pop 40 x 25 generations (the planner's default budget), stopped by the time limit"),
            V("offload", note="best single processing unit: the 1-device reference"),
            V("dp"),
            V("milp", default=False, note="left out by default: it first builds the same stage graph as dp"),
            ANY,
            # exact single-objective points beside the Pareto set (generated instance copies with
            # another objective); not run by default: the stage graph does not finish here yet
            V("milp-period", "milp", default=False, objectives=("period",)),
            V("dp-energy", "dp", default=False, objectives=("energy",)),
            V("milp-memory", "milp", default=False, objectives=("memory",)),
        ],
    },
}

BASELINES_DISTREDGE = ("coedge", "modnn", "deepthings", "deeperthings", "aofl", "offload")

# The papers' claims this benchmark checks (quoted in seeds.md).
DIAPASON_CLAIMS = {  # (device, baseline) -> (mean %, max %, n at max)
    ("rpi3", "modnn"): (20, 64, 7), ("rpi4", "modnn"): (44, 139, 7),
    ("rpi3", "coopai"): (7, 12, 4), ("rpi4", "coopai"): (12, 24, 4),
}
DISTREDGE_CLAIMS = [  # (groups, low x, high x, text)
    (("DA",), 1.2, 1.5, "Sec. V-D1: 'in Group-DA (e.g., 1.2 to 1.5x over AOFL)'"),
    (("DB", "DC"), 1.5, 3.0, "Sec. V-D1: 'in Group-DB, and DC (e.g., 1.5 to 3x over AOFL)'"),
    (("NA", "ND"), 1.2, 1.7, "Sec. V-D2: 'in Group-NA, and ND (e.g., 1.2 to 1.7x over AOFL)'"),
    (("NB", "NC"), 1.1, 1.3, "Sec. V-D2: 'Group-NB and NC (e.g., 1.1 to 1.3x over AOFL)'"),
    (("LA", "LB", "LC", "LD"), 1.3, 3.0, "Sec. V-D3: 'e.g., 1.3 to 3x over AOFL'"),
]
AUTODICE_TABLE2 = {  # model -> {point: (max energy J/img, throughput img/s, max memory MB, boards)}
    "vgg19": {"1-Device CPU": (1.471, 7.273, 1310.91, 1), "1-Device GPU": (1.523, 11.664, 1666.418, 1),
              "G": (0.680, 11.651, 998.273, 6), "H": (0.791, 17.385, 868.496, 6), "I": (1.035, 7.194, 604.504, 7)},
    "resnet101": {"1-Device CPU": (1.635, 5.786, 656.527, 1), "1-Device GPU": (1.031, 21.767, 955.012, 1),
                  "D": (0.425, 26.406, 360.766, 7), "E": (0.488, 30.048, 329.641, 7), "F": (0.886, 12.123, 127.883, 8)},
    "densenet121": {"1-Device CPU": (0.905, 7.987, 129.984, 1), "1-Device GPU": (0.650, 12.807, 251.172, 1),
                    "A": (0.430, 27.941, 152.336, 4), "B": (0.408, 23.551, 149.941, 6), "C": (0.977, 7.546, 51.066, 8)},
}
AUTODICE_FIG7 = {"vgg19": 18, "resnet101": 18, "densenet121": 38}  # % throughput gain, up to 4 devices vs 1


def is_exact(planner: str) -> bool:
    from milp_planner.planners import planner_class

    return bool(getattr(planner_class(planner), "exact", False))


def objective_copy(path: Path, objective: str, cache: Path) -> Path:
    """A copy of ``path`` with another objective (and name), under the cache directory."""
    if objective == "latency":
        return path
    lines = path.read_text().splitlines(keepends=True)
    out, seen_obj, seen_name = [], False, False
    for line in lines:
        if line.startswith("objective:"):
            line, seen_obj = f"objective: {objective}\n", True
        elif line.startswith("name:"):
            line, seen_name = line.rstrip("\n") + f"-{objective}\n", True
        out.append(line)
    if not seen_obj:
        out.append(f"objective: {objective}\n")
    if not seen_name:
        raise SystemExit(f"{path}: no top-level 'name:' line to rename")
    return _generated(path, f"objective {objective}", f"{path.stem}-{objective}.yaml", out, cache)



def any_cuts_copy(path: Path, cache: Path) -> Path:
    """A copy of ``path`` whose search space has every integer cut (``splits: [any]``),
    fusion_limit, max_parts and axes unchanged, under the cache directory. The seed instances
    write ``search`` on one line as a flow mapping; anything else is refused."""
    import re

    lines = path.read_text().splitlines(keepends=True)
    out, seen_search, seen_name = [], False, False
    for line in lines:
        if line.startswith("search:"):
            if "splits:" not in line:
                raise SystemExit(f"{path}: 'search:' must be one line with splits to make an any-cut copy")
            line = re.sub(r"splits: \[[^\]]*\]", "splits: [any]", line)
            seen_search = True
        elif line.startswith("name:"):
            line, seen_name = line.rstrip("\n") + "-any\n", True
        out.append(line)
    if not (seen_search and seen_name):
        raise SystemExit(f"{path}: no top-level 'name:' and one-line 'search:' to make an any-cut copy")
    return _generated(path, "splits any", f"{path.stem}-any.yaml", out, cache)


def _generated(path: Path, what: str, name: str, lines: list[str], cache: Path) -> Path:
    """Write a generated copy of ``path`` (its ``lines`` changed as ``what`` says) under the
    cache directory, rewriting it only when its text changed; return its path."""
    text = f"# Generated by benchmarks/bench_seeds.py from {path.relative_to(ROOT)} ({what}).\n" + "".join(lines)
    dest = cache.parent / "instances" / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists() or dest.read_text() != text:
        dest.write_text(text)
    return dest

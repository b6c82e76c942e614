"""Write the instance files in instances/ that reproduce the seed papers' setups.

Every file starts with a comment saying where it comes from and what is assumed; the
generated instances/README.md lists them all. Run from the repository root:

    python scripts/make_instances.py

The files are committed; this script only documents how they were made (and remakes them
identically). Hand-written files (instances/examples/) are not touched.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "instances"

GIB = "1073.741824"  # MB in one GiB
HALF = {4: "2147.483648", 8: "4294.967296"}  # half a board's RAM, in MB (4 GiB, 8 GiB boards)
INTRA_NODE_MBPS = 80000  # CPU <-> GPU of one Jetson through shared memory: 10 GB/s (assumed)

ROWS: list[tuple[str, str, str]] = []  # (file, source, setup) for README


def _flow(xs) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


def _matrix(rows: list[list], indent: str = "    ") -> str:
    width = max(len(str(x)) for r in rows for x in r)
    return "\n".join(f"{indent}- [" + ", ".join(str(x).rjust(width) for x in r) + "]" for r in rows)


def write(rel: str, header: list[str], body: str, source: str, setup: str) -> None:
    path = OUT / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"# {h}\n" if h else "#\n" for h in header) + body.rstrip() + "\n"
    path.write_text(text)
    ROWS.append((rel, source, setup))


def device(name: str, profile: str, node: str | None = None, memory_mb: str | None = None) -> str:
    s = f"  - {{name: {name}, profile: {profile}"
    if node:
        s += f", node: {node}"
    if memory_mb:
        s += f", memory_mb: {memory_mb}"
    return s + "}"


# ---------------------------------------------------------------------------------------
# DIAPASON (DATE 2024)


def diapason() -> None:
    nets = {"vgg16": "VGG16", "resnet50": "ResNet50", "mobilenetv2": "MobileNetV2"}
    pairs = {
        "gemmini500x2": (["gemmini-500mhz", "gemmini-500mhz"],
                         "two homogeneous Gemmini devices (Sec. V-A default); the paper does not "
                         "state their clock: 500 MHz is assumed"),
        "gemmini100-500": (["gemmini-100mhz", "gemmini-500mhz"],
                           "one Gemmini at 100 MHz and one at 500 MHz (Sec. V-A4, Fig. 6)"),
    }
    for net, label in nets.items():
        for tag, (profs, what) in pairs.items():
            rel = f"diapason/{net}-{tag}.yaml"
            header = [
                f"DIAPASON (DATE 2024), Sec. V-A: {label} (Keras), 224x224x3 input,",
                "8-bit quantized (dtype_bytes 1), 100 Mbps between the devices, fusion limit 2,",
                f"{what}.",
                "Device models: built-in Gemmini profiles (16x16 systolic array, 75 % utilisation,",
                "roofline with a 16 B/cycle memory interface; see docs/profiles.md): the paper used",
                "Timeloop, whose per-layer numbers it does not print.",
                "Assumed: the input sensor and the output consumer are external nodes with 100 Mbps",
                "links to every device (the paper's B_in/B_out vectors, values not stated); no",
                "per-message latency; splits equal + capacity (the paper's parttype naive / MoDNN",
                "compute-based); axes rows + channels.",
            ]
            body = f"""name: diapason-{net}-{tag}
model: zoo:{net}
dtype_bytes: 1
devices:
{device("g0", profs[0])}
{device("g1", profs[1])}
network:
  bandwidth_mbps: 100
  medium: switched
  source: {{bandwidth_mbps: 100}}
  sink: {{bandwidth_mbps: 100}}
search: {{fusion_limit: 2, max_parts: 2, splits: [equal, capacity], axes: [rows, channels]}}
objective: latency
"""
            write(rel, header, body, "DIAPASON Sec. V-A" + (" (V-A4)" if "100" in tag else ""),
                  f"{label}, 2 Gemmini ({'500 MHz x2' if tag == 'gemmini500x2' else '100 + 500 MHz'}), 100 Mbps, int8")


# ---------------------------------------------------------------------------------------
# CoopAI-style Raspberry Pi clusters (DIAPASON Sec. V-B)


def coopai() -> None:
    for pi in ("rpi3", "rpi4"):
        for n in range(2, 8):
            rel = f"coopai/vgg16-{pi}-{n}.yaml"
            header = [
                f"DIAPASON (DATE 2024) Sec. V-B / Fig. 7: VGG16 on {n} Raspberry Pi {pi[-1]} devices, the",
                "comparison against MoDNN and CoopAI (2 to 7 devices), fusion limit 4.",
                f"Device model: the built-in {pi} profile (our estimate from the vendor spec: CoopAI's",
                "linear model is not printed in DIAPASON; see docs/profiles.md).",
                "Assumed: CoopAI's network conditions are not stated in DIAPASON; 100 Mbps between every",
                "pair (DIAPASON's default bandwidth), switched, no per-message latency; float32",
                "(dtype_bytes 4); the first Pi holds the input and receives the output.",
            ]
            devs = "\n".join(device(f"pi{i + 1}", pi) for i in range(n))
            body = f"""name: coopai-vgg16-{pi}-{n}
model: zoo:vgg16
dtype_bytes: 4
devices:
{devs}
network:
  bandwidth_mbps: 100
  medium: switched
  source: {{device: pi1}}
  sink: {{device: pi1}}
search: {{fusion_limit: 4, max_parts: {n}, splits: [equal, capacity], axes: [rows]}}
objective: latency
"""
            write(rel, header, body, "DIAPASON Sec. V-B, Fig. 7 (CoopAI setup)",
                  f"VGG16, {n} x Raspberry Pi {pi[-1]}, 100 Mbps (assumed)")


# ---------------------------------------------------------------------------------------
# DistrEdge (IPDPS 2022)

DISTREDGE_PROFILE = {"Nano": "jetson-nano-fp16", "TX2": "jetson-tx2-fp16",
                     "Xavier": "xavier-agx-fp16", "Pi3": "rpi3"}
DISTREDGE_NOTE = [
    "Devices: TensorRT FP16 (Sec. V-A), so dtype_bytes 2 and the -fp16 Jetson profiles; 'Nvidia",
    "Xavier' is taken to be the Jetson AGX Xavier; the Pi3 runs on its CPU (rpi3 profile, fp32).",
    "Network: each device has its own WiFi bandwidth to the 5 GHz router (shaped with OpenWrt);",
    "assumed: a transfer between two devices runs at the smaller of their two bandwidths, the",
    "service requester (a phone) is an external source and sink with each device's own bandwidth,",
    "switched medium, no per-message latency. Search: fusion limit 4 (layer-volumes), rows only",
    "(DistrEdge splits along the height), splits equal + capacity.",
]


def _distredge(rel: str, name: str, kinds: list[str], bws: list[int], header: list[str],
               source: str, setup: str, max_parts: int = 4) -> None:
    n = len(kinds)
    counts: dict[str, int] = {}
    names = []
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
        names.append(f"{k.lower()}{counts[k]}")
    devs = "\n".join(device(nm, DISTREDGE_PROFILE[k]) for nm, k in zip(names, kinds))
    if len(set(bws)) == 1:
        net = f"""network:
  bandwidth_mbps: {bws[0]}
  medium: switched
  source: {{bandwidth_mbps: {bws[0]}}}
  sink: {{bandwidth_mbps: {bws[0]}}}"""
    else:
        mat = [[0 if i == j else min(bws[i], bws[j]) for j in range(n)] for i in range(n)]
        net = f"""network:
  bandwidth_mbps:   # row = sender; min of the two devices' WiFi bandwidths; diagonal ignored
{_matrix(mat)}
  medium: switched
  source: {{bandwidth_mbps: {_flow(bws)}}}
  sink: {{bandwidth_mbps: {_flow(bws)}}}"""
    body = f"""name: {name}
model: zoo:vgg16
dtype_bytes: 2
devices:
{devs}
{net}
search: {{fusion_limit: 4, max_parts: {max_parts}, splits: [equal, capacity], axes: [rows]}}
objective: latency
"""
    write(rel, header + DISTREDGE_NOTE, body, source, setup)


def distredge() -> None:
    groups = {
        "DA": ["TX2", "TX2", "Nano", "Nano"],
        "DB": ["Xavier", "Xavier", "Nano", "Nano"],
        "DC": ["Xavier", "TX2", "Nano", "Pi3"],
    }
    for g, kinds in groups.items():
        for bw in (50, 300):
            rel = f"distredge/vgg16-{g.lower()}-{bw}mbps.yaml"
            header = [
                f"DistrEdge (Hou et al., IPDPS 2022) Table I group {g} ({' + '.join(kinds)}), VGG-16,",
                f"{bw} Mbps WiFi for every device (Sec. V-D1, Fig. 7{'a' if bw == 50 else 'b'}).",
            ]
            _distredge(rel, f"distredge-vgg16-{g.lower()}-{bw}mbps", kinds, [bw] * 4, header,
                       f"DistrEdge Table I, Fig. 7", f"VGG16, {g}: {', '.join(kinds)}, {bw} Mbps")
    nets = {"NA": [50, 50, 200, 200], "NB": [100, 100, 200, 200], "NC": [200, 200, 300, 300],
            "ND": [50, 100, 200, 300]}
    for g, bws in nets.items():
        for kind in ("Nano", "Xavier"):
            rel = f"distredge/vgg16-{g.lower()}-{kind.lower()}.yaml"
            header = [
                f"DistrEdge (IPDPS 2022) Table II group {g}: four {kind} devices with WiFi bandwidths",
                f"{', '.join(map(str, bws))} Mbps (Sec. V-D2, Fig. 8{'a' if kind == 'Nano' else 'b'}), VGG-16.",
            ]
            _distredge(rel, f"distredge-vgg16-{g.lower()}-{kind.lower()}", [kind] * 4, bws, header,
                       "DistrEdge Table II, Fig. 8", f"VGG16, 4 x {kind}, {'/'.join(map(str, bws))} Mbps")
    large = {
        "LA": [(300, "Nano"), (200, "Nano"), (100, "Nano"), (50, "Nano")],
        "LB": [(300, "Pi3"), (200, "Nano"), (100, "TX2"), (50, "Xavier")],
        "LC": [(200, "Pi3"), (200, "Nano"), (200, "TX2"), (200, "Xavier")],
        "LD": [(50, "Pi3"), (100, "Nano"), (200, "TX2"), (300, "Xavier")],
    }
    for g, quad in large.items():
        rel = f"distredge/vgg16-{g.lower()}-16dev.yaml"
        bws = [b for _ in range(4) for b, _k in quad]
        kinds = [k for _ in range(4) for _b, k in quad]
        header = [
            f"DistrEdge (IPDPS 2022) Table III case {g}: 16 service providers,",
            f"{{{', '.join(f'({b}, {k})' for b, k in quad)}}} x 4 (Sec. V-D3, Fig. 9), VGG-16.",
            "max_parts is limited to 4 here to keep the plan space modest (raise it for the full space).",
        ]
        _distredge(rel, f"distredge-vgg16-{g.lower()}-16dev", kinds, bws, header,
                   "DistrEdge Table III, Fig. 9", f"VGG16, 16 devices ({g})", max_parts=4)


# ---------------------------------------------------------------------------------------
# AutoDiCE (IEEE IoT-J 2023)


def autodice(nets: list[str]) -> None:
    labels = {"vgg19": "VGG-19", "resnet101": "ResNet-101", "densenet121": "DenseNet-121"}
    for net in nets:
        for n in range(4, 9):
            rel = f"autodice/{net}-xaviernx-{n}.yaml"
            header = [
                f"AutoDiCE (Guo et al., IEEE IoT-J 2023) Sec. V-A/V-C: {labels[net]} (ONNX zoo, float32,",
                f"batch 1) on {n} Jetson Xavier NX boards connected by a Gigabit switch. Each board is two",
                "processing units, its 6-core CPU and its GPU (Sec. V-D: a layer maps to either), grouped",
                "by `node`. Profiles xavier-nx-cpu / xavier-nx-gpu are fitted to Table II.",
                "Assumed: 1000 Mbps between units of different boards; 10 GB/s (80000 Mbps) between the",
                "CPU and GPU of one board (shared memory); no per-message latency; each unit gets half",
                "of the board's 8 GB; the input is read and the output kept by the first board's CPU.",
                "AutoDiCE reports throughput (use objective: period to compare); latency is the default.",
            ]
            units = [(f"xnx{b}-{u}", f"xavier-nx-{u}", f"xnx{b}") for b in range(1, n + 1) for u in ("cpu", "gpu")]
            devs = "\n".join(device(nm, prof, node, HALF[8]) for nm, prof, node in units)
            m = len(units)
            mat = [[0 if i == j else (INTRA_NODE_MBPS if units[i][2] == units[j][2] else 1000)
                    for j in range(m)] for i in range(m)]
            body = f"""name: autodice-{net}-xaviernx-{n}
model: zoo:{net}
dtype_bytes: 4
devices:
{devs}
network:
  bandwidth_mbps:   # row = sender; 80000 inside a board, 1000 (Gigabit) between boards
{_matrix(mat)}
  medium: switched
  source: {{device: xnx1-cpu}}
  sink: {{device: xnx1-cpu}}
search: {{fusion_limit: 3, max_parts: 4, splits: [equal, capacity], axes: [rows, channels]}}
objective: latency
"""
            write(rel, header, body, "AutoDiCE Sec. V-A, V-C (Fig. 7)",
                  f"{labels[net]}, {n} x Xavier NX (CPU + GPU units), Gigabit")


# ---------------------------------------------------------------------------------------
# HiDP (2024)


def hidp(nets: dict[str, str]) -> None:
    units = [
        ("orin-cpu", "orin-nx-cpu", "orin", HALF[8]), ("orin-gpu", "orin-nx", "orin", HALF[8]),
        ("tx2-cpu", "jetson-tx2-cpu", "tx2", HALF[8]), ("tx2-gpu", "jetson-tx2", "tx2", HALF[8]),
        ("nano-cpu", "jetson-nano-cpu", "nano", HALF[4]), ("nano-gpu", "jetson-nano", "nano", HALF[4]),
        ("pi5", "rpi5", None, None), ("pi4", "rpi4", None, None),
    ]
    node = [u[2] or u[0] for u in units]
    m = len(units)
    mat = [[0 if i == j else (INTRA_NODE_MBPS if node[i] == node[j] else 80) for j in range(m)] for i in range(m)]
    for net, note in nets.items():
        rel = f"hidp/{net}-5node.yaml"
        header = [
            "HiDP (Taufique et al., 2024) Sec. IV-A, Table II: Jetson Orin NX, Jetson TX2, Jetson Nano,",
            "Raspberry Pi 5 and Raspberry Pi 4, connected over 80 Mbps wireless; float32 TensorFlow, 224x224.",
            note,
            "Each Jetson is two processing units (CPU cluster, GPU) grouped by `node`, as HiDP's local",
            "partitioner splits a block between them; the Pis are modelled by their CPUs only (HiDP",
            "also used their VideoCore GPUs through OpenGL; no rate is given, so they are left out).",
            "Assumed: 80 Mbps between units of different nodes; 10 GB/s (80000 Mbps) between the CPU",
            "and GPU of one Jetson (shared memory); no per-message latency; each Jetson unit gets",
            "half of its board's RAM; the Orin NX (leader node) holds the input and receives the output.",
        ]
        devs = "\n".join(device(nm, prof, nd, mem) for nm, prof, nd, mem in units)
        body = f"""name: hidp-{net}-5node
model: zoo:{net}
dtype_bytes: 4
devices:
{devs}
network:
  bandwidth_mbps:   # row = sender; 80000 inside a Jetson, 80 (wireless) between nodes
{_matrix(mat)}
  medium: switched
  source: {{device: orin-cpu}}
  sink: {{device: orin-cpu}}
search: {{fusion_limit: 4, max_parts: 4, splits: [equal, capacity], axes: [rows, channels]}}
objective: latency
"""
        write(rel, header, body, "HiDP Sec. IV-A, Table II",
              f"{net}, Orin NX + TX2 + Nano (CPU+GPU each) + Pi 5 + Pi 4, 80 Mbps")


def readme(extra_rows: list[tuple[str, str, str]]) -> None:
    lines = [
        "# Instances",
        "",
        "Instance files that reproduce the device and network setups of the project's seed papers",
        "(DIAPASON, DATE 2024; AutoDiCE, IEEE IoT-J 2023; HiDP, 2024; DistrEdge, IPDPS 2022), plus",
        "small examples. Every file starts with a comment that says where",
        "it comes from and what is assumed; the format is in `docs/instance-format.md`, the device",
        "profiles in `docs/profiles.md`. The seed-paper files are written by",
        "`scripts/make_instances.py` (run it to remake them); `examples/` is hand-written.",
        "",
        "| file | source | setup |",
        "|---|---|---|",
    ]
    for rel, src, setup in extra_rows + ROWS:
        lines.append(f"| `{rel}` | {src} | {setup} |")
    lines += [
        "",
        "Models are zoo models (`zoo:NAME`, no weights needed to plan). Where a paper's network",
        "is not in the zoo a stand-in is used and named in the file's comment.",
        "",
    ]
    (OUT / "README.md").write_text("\n".join(lines))


EXAMPLES = [
    ("examples/tiny-2dev.yaml", "hand-written", "zoo:tiny_chain on rpi4 + rpi5, 100 Mbps (also packaged as milp_planner/examples/tiny-2dev.yaml)"),
    ("examples/tiny-2dev.json", "hand-written", "the same instance as JSON"),
    ("examples/tiny-residual-3dev.yaml", "hand-written", "zoo:tiny_residual on three devices without profiles (linear, roofline), bandwidth matrix, external source, int8"),
    ("examples/tiny-fc-2dev.yaml", "hand-written", "zoo:tiny_fc on two rpi4, channel splits, shared 50 Mbps medium, energy objective with a latency cap"),
]


def main() -> None:
    from milp_planner.model import zoo

    have = set(zoo.names())
    diapason()
    coopai()
    distredge()
    autodice([n for n in ("vgg19", "resnet101", "densenet121") if n in have])
    hidp({n: f"{label} is one of HiDP's four workloads (EfficientNet-B0 and Inception-V3 are not in the zoo)."
          for n, label in (("vgg19", "VGG-19"), ("resnet152", "ResNet-152")) if n in have})
    readme(EXAMPLES)
    print(f"wrote {len(ROWS)} instance files and instances/README.md")


if __name__ == "__main__":
    main()

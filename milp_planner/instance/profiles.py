"""Built-in device profiles: defaults for a device entry of an instance file.

A device that says ``profile: NAME`` starts from ``PROFILES[NAME]``; the keys it writes
itself override the profile's (``compute`` and ``power_w`` merge key by key). ``profile:``
may also name a device file (``host.yaml``, relative to the instance file), such as one
written by ``milp-planner profile``: the same merge applies to its content. Every profile
is a dict in the instance-file device schema (``compute``, ``memory_mb``, ``power_w``) plus
two free-text keys, ``source`` (where the numbers come from) and ``assumptions`` (what was
assumed: precision, utilisation, per-layer overhead, power), which the loader ignores.

Numbers are exact rationals (``Fraction``), as if read from an instance file.

How the numbers were chosen (docs/profiles.md has the table and the reasoning):
  * CPUs: ``macs_per_s`` = fp32 NEON peak (cores x clock x fp32 FMA lanes per cycle) x 25 %
    utilisation, the rate a generic framework (PyTorch/TensorFlow) reaches on convolutions;
    per-layer overhead is an assumed operator-dispatch cost, not a measurement.
  * Jetson Xavier NX CPU (6 cores) and GPU: fitted to AutoDiCE Table II (one device, whole
    network, batch 1), see ``scripts/calibrate_xavier.py``.
  * Other Jetson GPUs: fp32 peak x 0.672, the utilisation the Xavier NX GPU fit gives
    (2.84e11 / 4.224e11); the ``-fp16`` variants double it (FP16 TensorRT, as DistrEdge).
  * Gemmini: a 16 x 16 systolic array (256 int8 MACs per cycle) at the clock, 75 %
    utilisation, and a 16-byte-per-cycle memory interface, as a ``roofline`` model.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from pathlib import Path

from milp_planner.errors import PlannerError

GIB_MB = "1073.741824"  # 2^30 bytes in MB (10^6 bytes)


def _f(text: str) -> Fraction:
    return Fraction(text)


def _gib(n: int) -> Fraction:
    return Fraction(GIB_MB) * n


def _wifi(compute: str, tx: str = "1.5", rx: str = "1.2") -> dict:
    return {"compute": _f(compute), "tx": _f(tx), "rx": _f(rx)}


_RADIO = "tx/rx power: 1.5 W / 1.2 W, a typical WiFi radio increment (assumed, not measured)."
_CPU_RULE = (
    "fp32; macs_per_s = fp32 NEON peak x 25 % utilisation (assumed rate of a generic "
    "framework on convolutions); overhead_s is an assumed per-operator dispatch cost."
)
_GPU_RULE = (
    "fp32; macs_per_s = fp32 peak x 0.672, the utilisation fitted on the Xavier NX GPU to "
    "AutoDiCE Table II (2.84e11 of 4.224e11 MAC/s); overhead_s = the Xavier NX GPU fit "
    "(2.72e-4 s per layer)."
)
_FP16_RULE = (
    "FP16 (TensorRT, as DistrEdge runs its layers): twice the fp32 profile's macs_per_s "
    "(2x fp16 FMA throughput of the CUDA cores, tensor cores not counted); use dtype_bytes: 2."
)


def _gpu(peak_macs: str, mem_gib: int, watts: str, src: str, extra: str = "", fp16: bool = False) -> dict:
    rate = _f(peak_macs) * Fraction(672, 1000) * (2 if fp16 else 1)
    return {
        "compute": {"model": "linear", "macs_per_s": _round3(rate), "overhead_s": _f("2.72e-4")},
        "memory_mb": _gib(mem_gib),
        "power_w": _wifi(watts),
        "source": src,
        "assumptions": " ".join(x for x in (_FP16_RULE if fp16 else _GPU_RULE, extra, _RADIO) if x),
    }


def _round3(x: Fraction) -> Fraction:
    """Round to three significant digits (exactly, as a decimal)."""
    return Fraction(f"{float(x):.3g}")


def _cpu(peak_macs: str, overhead: str, mem_gib: int, watts: str, src: str, extra: str = "",
         tx: str = "1.5", rx: str = "1.2") -> dict:
    return {
        "compute": {"model": "linear", "macs_per_s": _round3(_f(peak_macs) / 4), "overhead_s": _f(overhead)},
        "memory_mb": _gib(mem_gib),
        "power_w": _wifi(watts, tx, rx),
        "source": src,
        "assumptions": " ".join(x for x in (_CPU_RULE, extra, _RADIO if tx == "1.5" else "") if x),
    }


def _gemmini(mhz: int, watts: str) -> dict:
    hz = Fraction(mhz * 10**6)
    return {
        "compute": {
            "model": "roofline",
            "macs_per_s": 256 * hz * Fraction(3, 4),
            "mem_bytes_per_s": 16 * hz,
            "overhead_s": _f("1e-4"),
        },
        "power_w": _wifi(watts, "1.2", "1.0"),
        "source": (
            "DIAPASON (DATE 2024) Sec. V-A: Gemmini systolic-array accelerator modelled with "
            f"Timeloop, controlled by a Raspberry Pi 3; {mhz} MHz as in Sec. V-A4. Array size from "
            "Gemmini's default configuration (Genc et al., DAC 2021): 16 x 16 int8 PEs, 128-bit "
            "system-bus DMA."
        ),
        "assumptions": (
            f"int8 (use dtype_bytes: 1); 256 MACs/cycle x {mhz} MHz x 75 % utilisation "
            f"= {float(256 * hz * Fraction(3, 4)):.3g} MAC/s (the paper gives no utilisation); memory "
            f"time at 16 bytes/cycle = {float(16 * hz):.3g} B/s (roofline: activations + weights); "
            "overhead_s 1e-4 per layer for the host CPU's dispatch (assumed). No memory_mb: the paper "
            "states no capacity, so memory is unbounded. Power: host Raspberry Pi 3 plus the "
            f"accelerator, {watts} W while computing (assumed); radio 1.2 W tx / 1.0 W rx (assumed)."
        ),
    }


_AUTODICE = (
    "AutoDiCE (Guo et al., IEEE IoT-J 2023) Table II, rows '1-Device CPU' and '1-Device GPU' "
    "(one Jetson Xavier NX, batch 1, float32, NCNN-based engine); fitted with "
    "scripts/calibrate_xavier.py on VGG-19 (19.632 GMAC, 25 folded layers), ResNet-101 (7.80 GMAC, "
    "141 layers), DenseNet-121 (2.87 GMAC, 189 layers); compute power fitted to the measured J/img."
)

PROFILES: dict[str, dict] = {
    # ---- Raspberry Pi -------------------------------------------------------------------
    "rpi3": _cpu(
        "9.6e9", "4e-4", 1, "3.7",
        "Vendor spec, Raspberry Pi 3 Model B: 4x Cortex-A53 @ 1.2 GHz, 1 GB LPDDR2. Used by "
        "DIAPASON Sec. V-B (CoopAI comparison) and DistrEdge Table I (Pi3).",
        "Peak: 4 cores x 1.2 GHz x 2 fp32 FMA/cycle (64-bit NEON datapath) = 9.6 GMAC/s. "
        "DIAPASON uses CoopAI's linear Pi 3 model, whose coefficients it does not print: this "
        "profile is our estimate, not CoopAI's. Power 3.7 W: board under full CPU load "
        "(community measurements, assumed).",
        tx="1.2", rx="1.0",
    ),
    "rpi4": _cpu(
        "24e9", "2e-4", 4, "6.4",
        "Vendor spec, Raspberry Pi 4 Model B: 4x Cortex-A72 @ 1.5 GHz, 4 GB (the size HiDP Table II "
        "lists). Used by DIAPASON Sec. V-B and HiDP Table II.",
        "Peak: 4 cores x 1.5 GHz x 4 fp32 FMA/cycle = 24 GMAC/s (6.0e9 matches docs/model.md's example). "
        "Power 6.4 W: board under full CPU load (assumed).",
    ),
    "rpi5": _cpu(
        "76.8e9", "1e-4", 4, "8.0",
        "Vendor spec, Raspberry Pi 5: 4x Cortex-A76 @ 2.4 GHz, 4 GB (HiDP Table II). HiDP's table "
        "lists '2x Cortex-A76'; the board has 4 cores and this profile models all 4.",
        "Peak: 4 cores x 2.4 GHz x 8 fp32 FMA/cycle (two 128-bit FMA pipes) = 76.8 GMAC/s. "
        "Power 8.0 W: board under full CPU load (assumed).",
    ),
    # ---- Jetson CPUs (HiDP's CPU/GPU split) ------------------------------------------------
    "jetson-nano-cpu": _cpu(
        "22.88e9", "2e-4", 4, "6.3",
        "Vendor spec, Jetson Nano: 4x Cortex-A57 @ 1.43 GHz, 4 GB shared with the GPU (HiDP Table II).",
        "Peak: 4 x 1.43 GHz x 4 fp32 FMA/cycle = 22.88 GMAC/s. Power: 0.63 x the 10 W mode budget "
        "(the CPU/GPU power ratio of the Xavier NX fit, assumed). memory_mb is the whole board's; "
        "instances that model the CPU and the GPU of one board split it.",
    ),
    "jetson-tx2-cpu": _cpu(
        "48e9", "1.5e-4", 8, "9.5",
        "Vendor spec, Jetson TX2: 2x Denver2 + 4x Cortex-A57 @ 2.0 GHz, 8 GB shared (HiDP Table II).",
        "Peak: 6 cores x 2.0 GHz x 4 fp32 FMA/cycle = 48 GMAC/s. Power: 0.63 x the 15 W mode budget "
        "(assumed). memory_mb is the whole board's.",
    ),
    "orin-nx-cpu": _cpu(
        "128e9", "1e-4", 8, "12.6",
        "HiDP Table II: Jetson Orin NX with 8x Cortex-A78 and 8 GB (the 8 GB module has 6 cores per "
        "NVIDIA's spec; we follow the paper's table), 2.0 GHz (vendor).",
        "Peak: 8 cores x 2.0 GHz x 8 fp32 FMA/cycle = 128 GMAC/s. Power: 0.63 x the 20 W mode "
        "budget (assumed). memory_mb is the whole board's.",
    ),
    "xavier-nx-cpu": {
        "compute": {"model": "linear", "macs_per_s": _f("1.52e11"), "overhead_s": _f("6.55e-4")},
        "memory_mb": _gib(8),
        "power_w": _wifi("9.3"),
        "source": _AUTODICE + " Unit: the 6 Carmel cores together (AutoDiCE Sec. V-D).",
        "assumptions": (
            "Fit (log least squares), predicted vs measured single-device latency: VGG-19 145.5 vs "
            "137.5 ms (+5.8 %), ResNet-101 143.7 vs 172.8 ms (-16.9 %), DenseNet-121 142.7 vs "
            "125.2 ms (+14.0 %). Energy with 9.3 W: -8.0 %, -18.3 %, +46.6 %. The fitted rate "
            "exceeds the fp32 NEON peak of 6 Carmel cores: the engine's fp16 arithmetic and Winograd "
            "convolutions make 'MAC/s' an effective rate. memory_mb: 8 GB shared by CPU and GPU "
            "(AutoDiCE Sec. V-B; its Sec. VI also mentions 16 GB boards). " + _RADIO
        ),
    },
    # ---- Jetson GPUs -----------------------------------------------------------------------
    "xavier-nx-gpu": {
        "compute": {"model": "linear", "macs_per_s": _f("2.84e11"), "overhead_s": _f("2.72e-4")},
        "memory_mb": _gib(8),
        "power_w": _wifi("14.7"),
        "source": _AUTODICE + " Unit: the 384-core Volta GPU (844.8 GFLOPS fp32 peak).",
        "assumptions": (
            "Fit (log least squares), predicted vs measured single-device latency: VGG-19 75.9 vs "
            "85.7 ms (-11.4 %), ResNet-101 65.8 vs 45.9 ms (+43.3 %), DenseNet-121 61.5 vs 78.1 ms "
            "(-21.2 %). Energy with 14.7 W: -26.7 %, -6.2 %, +39.1 %. A linear model cannot fit all "
            "three: the GPU is slow on VGG-19 (large FC layers, memory bound) and fast on ResNet-101. "
            "Effective rate = 67.2 % of the fp32 peak (used for the other Jetson GPUs). memory_mb: "
            "8 GB shared by CPU and GPU. " + _RADIO
        ),
    },
    "jetson-nano": _gpu(
        "117.96e9", 4, "10",
        "Vendor spec, Jetson Nano GPU: 128 Maxwell cores @ 921.6 MHz = 236 GFLOPS fp32, 4 GB shared "
        "(HiDP Table II, DistrEdge Table I).",
        "Power: the 10 W mode budget (assumed).",
    ),
    "jetson-tx2": _gpu(
        "332.8e9", 8, "15",
        "Vendor spec, Jetson TX2 GPU: 256 Pascal cores @ 1.3 GHz = 665.6 GFLOPS fp32, 8 GB shared "
        "(HiDP Table II, DistrEdge Table I).",
        "Power: the 15 W mode budget (assumed).",
    ),
    "orin-nx": _gpu(
        "783.36e9", 8, "20",
        "Vendor spec, Jetson Orin NX 8 GB GPU: 1024 Ampere cores @ 765 MHz = 1.567 TFLOPS fp32 "
        "(HiDP Table II).",
        "Power: the 20 W mode budget (assumed). Tensor cores not counted.",
    ),
    "xavier-agx": _gpu(
        "705.02e9", 32, "30",
        "Vendor spec, Jetson AGX Xavier GPU: 512 Volta cores @ 1.377 GHz = 1.41 TFLOPS fp32, 32 GB. "
        "DistrEdge's 'Nvidia Xavier' (Table I) is taken to be the AGX Xavier.",
        "Power: the 30 W mode budget (assumed). Tensor cores not counted.",
    ),
    "jetson-nano-fp16": _gpu(
        "117.96e9", 4, "10",
        "As jetson-nano, for DistrEdge Sec. V-A (TensorRT, FP16, batch 1).",
        "Power: the 10 W mode budget (assumed).", fp16=True,
    ),
    "jetson-tx2-fp16": _gpu(
        "332.8e9", 8, "15",
        "As jetson-tx2, for DistrEdge Sec. V-A (TensorRT, FP16, batch 1).",
        "Power: the 15 W mode budget (assumed).", fp16=True,
    ),
    "xavier-agx-fp16": _gpu(
        "705.02e9", 32, "30",
        "As xavier-agx, for DistrEdge Sec. V-A (TensorRT, FP16, batch 1).",
        "Power: the 30 W mode budget (assumed).", fp16=True,
    ),
    # ---- Accelerators -------------------------------------------------------------------
    "gemmini-100mhz": _gemmini(100, "2.5"),
    "gemmini-500mhz": _gemmini(500, "3.0"),
}


# A device file written by ``milp-planner profile`` (or by hand): a device entry without a name.
PROFILE_FILE_SUFFIXES = (".yaml", ".yml", ".json")
PROFILE_FILE_KEYS = ("compute", "memory_mb", "power_w", "source", "assumptions", "measured")
#: ``measured: {model: REF, input_shape: [N, C, H, W]}``, written by ``milp-planner profile``:
#: a ``table`` measured at one input size is refused for a model at another


def is_profile_file(name: str) -> bool:
    """Whether ``profile: name`` names a device file rather than a built-in profile."""
    return name.lower().endswith(PROFILE_FILE_SUFFIXES) or "/" in name or "\\" in name


def resolve_profile_file(name: str, base_dir: Path | None) -> Path:
    """The device file ``name`` (``~`` expanded; relative to ``base_dir``, the instance file's
    folder, or to the working directory without one); ``PlannerError`` for a name with a NUL
    byte or a loop of symbolic links."""
    if "\0" in name:
        raise PlannerError("not a valid file name (it contains a NUL byte)")
    path = Path(name).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise PlannerError("a loop of symbolic links") from None


def profile(name: str) -> dict:
    """A deep copy of profile ``name``; ``PlannerError`` naming a few known ones otherwise."""
    try:
        return copy.deepcopy(PROFILES[name])
    except (KeyError, TypeError):
        known = ", ".join(sorted(PROFILES)[:8])
        raise PlannerError(f"unknown profile {name!r} (known: {known}, ...)") from None


def names() -> list[str]:
    return sorted(PROFILES)

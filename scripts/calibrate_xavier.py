"""Fit the xavier-nx-cpu and xavier-nx-gpu `linear` profiles to AutoDiCE Table II.

AutoDiCE (Guo et al., IEEE IoT-J 2023), Table II, rows "1-Device CPU" (6 Carmel cores) and
"1-Device GPU" (Volta) of one Jetson Xavier NX, batch 1, float32: a single device runs the
whole network, so latency = 1 / throughput. The model is the project's `linear` cost model
applied to the whole network:

    t = MACs / macs_per_s + layers x overhead_s

with published MAC counts and the number of layers the planner sees after folding
(docs/model.md section 2: Conv+BN+ReLU is one layer, Dropout disappears). The fit minimises the
sum of squared log errors (numpy only; a coarse-to-fine grid search in log space).
Compute power is fitted by least squares through the origin on E = P x t (the paper's
energy per image is measured for the whole board).

Run:  PYTHONPATH=. python scripts/calibrate_xavier.py
"""

from __future__ import annotations

import numpy as np

# network: (published MACs, folded layer count)
# VGG-19: 16 conv + 5 maxpool + flatten + 3 FC = 25.
# ResNet-101: conv1 + maxpool + 33 bottlenecks x (3 conv + add) + 4 downsample conv
#             + global avgpool + flatten + fc = 141.
# DenseNet-121: conv0 + pool0 + 58 dense layers x (concat(+BN+ReLU), conv1x1(+BN+ReLU),
#               conv3x3) + 4 block-end concats + 3 transitions x (conv, avgpool)
#               + global avgpool + flatten + fc = 189.
NETS = {
    "vgg19": (19.632e9, 25),
    "resnet101": (7.80e9, 141),
    "densenet121": (2.87e9, 189),
}

# AutoDiCE Table II: (throughput img/s, energy J/img) on one Xavier NX.
TABLE_II = {
    "cpu": {"vgg19": (7.273, 1.471), "resnet101": (5.786, 1.635), "densenet121": (7.987, 0.905)},
    "gpu": {"vgg19": (11.664, 1.523), "resnet101": (21.767, 1.031), "densenet121": (12.807, 0.650)},
}


def predict(rate: float, overhead: float, net: str) -> float:
    macs, layers = NETS[net]
    return macs / rate + layers * overhead


def fit(unit: str) -> tuple[float, float]:
    meas = {n: 1.0 / thr for n, (thr, _) in TABLE_II[unit].items()}

    def loss(lr: float, lo: float) -> float:
        r, o = 10.0 ** lr, 10.0 ** lo
        return sum(np.log(predict(r, o, n) / t) ** 2 for n, t in meas.items())

    lr_lo, lr_hi, lo_lo, lo_hi = 9.0, 13.0, -8.0, -2.0
    best = (0.0, 0.0)
    for _ in range(12):
        grid_r = np.linspace(lr_lo, lr_hi, 81)
        grid_o = np.linspace(lo_lo, lo_hi, 81)
        vals = [(loss(a, b), a, b) for a in grid_r for b in grid_o]
        _, a, b = min(vals)
        best = (a, b)
        wr, wo = (lr_hi - lr_lo) / 8, (lo_hi - lo_lo) / 8
        lr_lo, lr_hi, lo_lo, lo_hi = a - wr, a + wr, b - wo, b + wo
    return 10.0 ** best[0], 10.0 ** best[1]


def power(unit: str) -> float:
    t = np.array([1.0 / thr for thr, _ in TABLE_II[unit].values()])
    e = np.array([en for _, en in TABLE_II[unit].values()])
    return float((t @ e) / (t @ t))


def report(unit: str, rate: float, overhead: float, watts: float) -> None:
    print(f"xavier-nx-{unit}: macs_per_s={rate:.4g} overhead_s={overhead:.4g} compute_w={watts:.3g}")
    for net, (thr, energy) in TABLE_II[unit].items():
        t, p = 1.0 / thr, predict(rate, overhead, net)
        print(f"  {net:12s} latency pred {p * 1e3:7.1f} ms  meas {t * 1e3:7.1f} ms  "
              f"err {100 * (p / t - 1):+6.1f} %   energy pred {watts * p:6.3f} J  "
              f"meas {energy:6.3f} J  err {100 * (watts * p / energy - 1):+6.1f} %")


if __name__ == "__main__":
    for unit in ("cpu", "gpu"):
        r, o = fit(unit)
        print("fitted:", end=" ")
        report(unit, r, o, power(unit))
    # The values rounded into milp_planner/instance/profiles.py:
    from milp_planner.instance.profiles import PROFILES

    for unit in ("cpu", "gpu"):
        c = PROFILES[f"xavier-nx-{unit}"]
        print("profile:", end=" ")
        report(unit, float(c["compute"]["macs_per_s"]), float(c["compute"]["overhead_s"]),
               float(c["power_w"]["compute"]))
    # What the planner itself charges: the zoo graphs' MACs + ops and their folded layers.
    from milp_planner.model.loading import load_graph

    for unit in ("cpu", "gpu"):
        c = PROFILES[f"xavier-nx-{unit}"]["compute"]
        for net, (thr, _) in TABLE_II[unit].items():
            g = load_graph(f"zoo:{net}")
            work = sum(layer.work for layer in g.layers)
            p = work / float(c["macs_per_s"]) + len(g.layers) * float(c["overhead_s"])
            print(f"zoo  xavier-nx-{unit} {net:12s} {len(g.layers):4d} layers {work / 1e9:7.3f} G work  "
                  f"pred {p * 1e3:7.1f} ms  meas {1e3 / thr:7.1f} ms  err {100 * (p * thr - 1):+6.1f} %")

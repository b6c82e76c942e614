"""``coedge``: CoEdge-style layer-by-layer split from linear compute and communication models.

Source: CoEdge, Zeng et al., IEEE/ACM Transactions on Networking 2020 (as characterised by
DistrEdge, IPDPS 2022: "linear models for devices and networks, layer-by-layer split"). CoEdge
cuts the input into one horizontal strip per device, runs every layer on the same
proportions (exchanging the boundary rows after each layer), and chooses the proportions
from linear models of per-device compute time and transmission time, solving a linear program
(minimum energy under a latency deadline).

Our reconstruction:
  * linear model of device i for share x_i of every row-splittable layer:
    T_i = x_i * A_i + K_i, with A_i = W / r_i + I / B_src,i (W the MACs + ops of those layers,
    r_i the effective rate ``common.rates``, I the input bytes, B_src,i the source link; 0 when
    i holds the input) and K_i = the per-layer overheads plus the halo rows exchanged with the
    neighbours at every windowed layer (their bytes over the mean bandwidth into i, plus the
    per-message latency);
  * objective ``energy``: CoEdge's LP (``scipy.optimize.linprog``): minimize the modelled
    energy subject to T_i <= deadline for every participating device, with the deadline the
    instance's latency cap, else ``deadline_slack`` (option, default 1.2) x the min-max time;
  * any other objective: the min-max of T_i (water-filling; a device whose constant term
    exceeds the balanced time gets no share);
  * every row-splittable layer is its own stage cut by those proportions (largest remainder,
    devices in instance order); a layer that cannot be row-split (FC, Flatten, global pooling)
    runs whole on one device, chosen by a small DP over those layers with the evaluator's
    costs (CoEdge's communication awareness); no fusion. ``max_parts`` is not consulted.
"""

from __future__ import annotations

from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext
from milp_planner.planners.common import (
    bandwidth,
    mean_in_bandwidth,
    rates,
    single,
    source_device,
    split_stage,
    stage_dp,
    to_plan,
)


def linear_model(instance):
    """(A, K, E): per-device slope, constant (seconds) and energy per unit share."""
    g = instance.graph
    n_dev = len(instance.devices)
    rate = rates(instance)
    split = [layer for layer in g.layers if layer.row_splittable and layer.rows > 1]
    work = sum(layer.work for layer in split)
    in_bytes = sum(g.elements(t) for t in g.inputs) * instance.dtype_bytes
    src = source_device(instance)
    lat = instance.network.latency_s
    A, K, E = [], [], []
    for d, dev in enumerate(instance.devices):
        bw_in = bandwidth(instance, src, d) if src != d else float("inf")
        t_in = in_bytes / bw_in if bw_in != float("inf") else 0.0
        A.append(work / rate[d] + t_in)
        mean_bw = mean_in_bandwidth(instance, d)
        mean_lat = (sum(lat[e][d] for e in range(n_dev) if e != d) / (n_dev - 1)) if n_dev > 1 else 0.0
        k = float(dev.compute.overhead_s) * len(split)
        for layer in split:
            if layer.rowdep.kind == "window":
                halo = max(0, layer.rowdep.kernel - layer.rowdep.stride)
                for t in layer.inputs:
                    row_bytes = g.elements(t) // max(1, g.tensor_rows(t)) * instance.dtype_bytes
                    if mean_bw != float("inf") and halo:
                        k += halo * row_bytes / mean_bw + 2 * mean_lat
        K.append(k)
        p = instance.devices[d].power
        tx = float(instance.devices[src].power.tx_w) if src >= 0 and src != d else 0.0
        E.append(float(p.compute_w) * work / rate[d] + (tx + float(p.rx_w)) * t_in)
    return A, K, E


def minmax_shares(A, K) -> tuple[list[float], float]:
    """Shares x (sum 1) minimizing max_i (x_i A_i + K_i) over participating devices."""
    active = list(range(len(A)))
    while True:
        inv = sum(1.0 / A[i] for i in active)
        T = (1.0 + sum(K[i] / A[i] for i in active)) / inv
        x = {i: (T - K[i]) / A[i] for i in active}
        worst = min(active, key=lambda i: (x[i], i))
        if x[worst] > 0 or len(active) == 1:
            out = [0.0] * len(A)
            for i in active:
                out[i] = max(x[i], 0.0) if len(active) > 1 else 1.0
            return out, T
        active.remove(worst)


def energy_shares(A, K, E, latency_s: float) -> list[float] | None:
    """CoEdge's LP: shares x (sum 1, 0 <= x_i <= (latency_s - K_i) / A_i) of least energy E.x,
    or None when that latency (CoEdge's deadline) leaves no solution. With distinct energies its
    optimum is unique and is filling the devices cheapest first (``_fill``), which spares
    importing scipy."""
    n = len(A)
    bounds = [(0.0, (latency_s - K[i]) / A[i]) if K[i] < latency_s else (0.0, 0.0) for i in range(n)]
    decided, x = _fill(E, [hi for _, hi in bounds])
    if decided:
        return x
    from scipy.optimize import linprog

    res = linprog(E, A_eq=[[1.0] * n], b_eq=[1.0], bounds=bounds, method="highs")
    if not res.success:
        return None
    return [max(0.0, float(v)) for v in res.x]


def _fill(E, upper) -> tuple[bool, list[float] | None]:
    """(decided, x): the LP min E.x, sum x = 1, 0 <= x <= upper, decided when its optimum is
    unique and clear of the solver's tolerances (distinct energies among the devices that may
    take a share, capacity not within 1e-6 of exactly 1): the cheapest devices filled first,
    or None when the capacity is short of 1 (no solution)."""
    open_ = [i for i in range(len(E)) if upper[i] > 0]
    total = sum(upper[i] for i in open_)
    if len({E[i] for i in open_}) < len(open_) or abs(total - 1.0) < 1e-6:
        return False, None
    if total < 1.0:
        return True, None
    x = [0.0] * len(E)
    rest = 1.0
    for i in sorted(open_, key=lambda i: E[i]):
        x[i] = min(upper[i], rest)
        rest -= x[i]
        if rest <= 0:
            break
    return True, x


class CoEdgePlanner(Planner):
    name = "coedge"
    description = "layer-by-layer row split with proportions from linear compute/communication models"
    source = "CoEdge, Zeng et al., IEEE/ACM ToN 2020 (as characterised in DistrEdge, IPDPS 2022)"

    option_specs = (
        Option("deadline_slack", float, 1.2, "deadline as a multiple of the fastest latency", gt=0, le=1e6),
        Option("beam", int, 256, "stage-DP beam width", ge=1, le=10**6),
    )

    def search(self, instance, ctx: SolveContext):
        g = instance.graph
        n_dev = len(instance.devices)
        A, K, E = linear_model(instance)
        shares, T = minmax_shares(A, K)
        mode = "minmax"
        if ctx.objective == "energy":
            cap = instance.constraints.latency_s
            latency = float(cap) if cap is not None else float(self.options.get("deadline_slack", 1.2)) * T
            es = energy_shares(A, K, E, latency)
            if es is not None:
                shares, mode = es, "lp-energy"
        devs = [d for d in range(n_dev) if shares[d] > 0]
        w = [shares[d] for d in devs]

        def candidates(i):
            layer = g.layers[i]
            if layer.row_splittable and layer.rows > 1:
                return [split_stage(i, i, "rows", layer.rows, devs, w)]
            return [single(i, i, d) for d in range(n_dev)]

        objective = "energy" if ctx.objective == "energy" else "latency"
        stages, value = stage_dp(instance, candidates, objective, beam=self.options.get("beam", 256), ctx=ctx)
        return PlanResult(self.name, "feasible", ctx.objective, plan=to_plan(instance, stages, self.name),
                          info={"shares": shares, "mode": mode, "model_time_s": T})

"""``diapason``: the continuous relaxation of partition, fusion and allocation (DIAPASON, DATE 2024).

Every layer gets partition opportunities (POs): the unpartitioned one (one sublayer), one
partitioned PO per allowed axis with one sublayer per device (``parttype`` naive = equal
slices, capability = slices proportional to device speed, as MoDNN's BODP), and fusion POs
generated recursively below each of those parents, sharing the parent's device selectors,
until a chain holds ``fusionlimit`` layers. Softmax selectors ``W_dev`` (per PO and sublayer,
over devices) and ``W_l`` (per layer, over its POs) weight the paper's costs, eqs. (1)-(16):
sublayer compute, the superposition penalty (latency only), inter-layer movement, input and
output movement. Every cost is priced with this project's cost models (``pricer(instance)``:
``layer_time`` of the exact fraction of each layer a sublayer computes, ``link_time`` of the
exact bytes each sublayer pair exchanges, per-message latency included). Plain gradient
descent (PyTorch autograd) runs ``iterations`` steps at learning rate ``lr``; the argmax
choice is then decoded into a plan, which the evaluator scores. The relaxation's own loss is
reported next to it (``info``), never as the objective.

Options (``-O KEY=VALUE``), defaults from the paper's Sec. V-A:
  lr 0.4, iterations 20 (plain gradient descent, torch.optim.SGD without momentum),
  weightsinit heuristic | random. random: W_dev ~ U[0, 1] (paper). heuristic: sublayer j of
      each partitioned PO starts on its j-th device with logit heuristic_logit (default 1,
      others 0); the unpartitioned PO has a single sublayer and nothing to spread, so its
      selector starts uniform (heuristic_whole uniform; "first" puts it on the first device,
      the literal "sequential" reading, which on the DIAPASON instances ties every early
      layer to device 0: VGG16 on two Gemminis 172.4 ms instead of 109.0 ms). W_l starts at 0.
  fusionlimit: most layers fused into one chain, the parent included (the paper: "4 =
      maximum 4 consecutive layers can be fused together"; 0 and 1 both mean no fusion),
      like search.fusion_limit. Default: the paper's 2, capped at search.fusion_limit so
      decoded plans stay in the instance's space.
  parttype: naive | capability. Default naive, unless search.splits lists capacity but not
      equal.
  loss_unit: ms (default) | s. The loss in milliseconds (millijoules for energy). The paper
      does not state its unit and plain gradient descent is not scale-invariant: gradients
      in seconds are 1000 times smaller, so 20 steps at lr 0.4 leave the selectors where they
      started (VGG16 on two Gemminis: loss 0.785 -> 0.774 s); in milliseconds the loss falls
      within a few steps and flattens (785 -> 127 ms) and the selectors saturate, which is
      the behaviour of the paper's Fig. 3.
  runs: 1. Repeated runs with seeds seed, seed+1, ...; the best plan by the evaluator is
      returned and every run's numbers are in info["runs"] (the paper repeats 10 runs and
      reports mean and standard deviation). With weightsinit heuristic runs are identical.
  n_parts: sublayers of the partitioned PO (default: number of devices, capped at
      search.max_parts; the fastest devices are used when capped).
  heuristic_logit (1), heuristic_whole (uniform | first): see weightsinit.
  The objective (ctx.objective) is latency or energy.

Decoding and its repair (the paper leaves both open; docs/diapason.md):
  * Each layer takes the PO with the largest W_l probability, each sublayer the device with
    the largest W_dev probability.
  * A fusion PO extends its stage upward while the next layer chose the next PO of the same
    chain. If the chain reaches its parent, the stage is the parent's split of the fused
    layers. If the parent (or an intermediate PO) was not selected, the fused layers chosen
    so far form a stage of their own, ending at the last of them, with the parent's cut
    points mapped onto that layer's rows at the same fractions (round half up, as docs/model.md
    cuts exit tensors) and the same devices; slices that become empty are dropped.
  * Sublayers of one PO on the same device: consecutive ones merge into one part (the
    device computes both slices, as the relaxation priced them). If a device still holds
    two non-adjacent parts, it keeps the one with the larger summed selection probability
    and each other part moves to the most probable device (for its first sublayer) not yet
    used in the stage. A stage left with one part is written ``axis: none``.
  These rules always give a plan that passes ``check_plan``; merged cuts may lie outside
  the instance's split families (the evaluator then flags ``in_space: false``).
"""

from __future__ import annotations

import math

from milp_planner.errors import PlannerError
from milp_planner.cost.evaluator import evaluate
from milp_planner.instance import Instance
from milp_planner.planners.base import Option, Planner, PlanResult, SolveContext

DEFAULTS = {
    "lr": 0.4,
    "iterations": 20,
    "weightsinit": "heuristic",
    "fusionlimit": None,
    "parttype": None,
    "loss_unit": "ms",
    "runs": 1,
    "n_parts": None,
    "heuristic_logit": 1.0,
    "heuristic_whole": "uniform",
}


def import_torch(planner: str):
    try:
        import torch
    except ImportError:
        raise PlannerError(f"planner {planner} needs PyTorch: pip install 'milp-planner[relaxed]'") from None
    return torch


class TorchState:
    """Set PyTorch's thread count and determinism for one solve, and restore them after."""

    def __init__(self, torch, threads: int):
        self.torch = torch
        self.threads = max(1, int(threads or 1))

    def __enter__(self):
        t = self.torch
        self.saved = (t.get_num_threads(), t.are_deterministic_algorithms_enabled(),
                      t.is_deterministic_algorithms_warn_only_enabled())
        t.set_num_threads(self.threads)
        self._deterministic(True, False)
        return self

    def __exit__(self, *exc):
        self.torch.set_num_threads(self.saved[0])
        self._deterministic(self.saved[1], self.saved[2])
        return False

    def _deterministic(self, mode: bool, warn_only: bool) -> None:
        # torch.use_deterministic_algorithms also sets a torch.compile (inductor) flag, and
        # importing inductor's config takes ~5 s on the 2-core machines; we never compile, so
        # set the ATen flag it wraps directly when that entry point exists.
        setter = getattr(getattr(self.torch, "_C", None), "_set_deterministic_algorithms", None)
        if setter is not None:
            setter(mode, warn_only=warn_only)
        else:  # pragma: no cover - other torch versions
            self.torch.use_deterministic_algorithms(mode, warn_only=warn_only)


def resolve_options(instance: Instance, options: dict) -> dict:
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise PlannerError(f"diapason: unknown option {sorted(unknown)[0]!r} (known: {', '.join(DEFAULTS)})")
    o = {**DEFAULTS, **options}
    sp = instance.search
    if o["fusionlimit"] is None:
        o["fusionlimit"] = min(2, sp.fusion_limit)
    if o["parttype"] is None:
        o["parttype"] = "capability" if ("capacity" in sp.splits and "equal" not in sp.splits) else "naive"
    try:
        o["lr"] = float(o["lr"])
        o["heuristic_logit"] = float(o["heuristic_logit"])
        o["iterations"] = int(o["iterations"])
        o["fusionlimit"] = int(o["fusionlimit"])
        o["runs"] = int(o["runs"])
        if o["n_parts"] is not None:
            o["n_parts"] = int(o["n_parts"])
    except (TypeError, ValueError) as e:
        raise PlannerError(f"diapason: bad option value ({e})") from None
    if o["iterations"] < 0 or o["runs"] < 1 or not (o["lr"] >= 0):
        raise PlannerError("diapason: iterations >= 0, runs >= 1 and lr >= 0 are required")
    if o["weightsinit"] not in ("random", "heuristic"):
        raise PlannerError(f"diapason: weightsinit must be random or heuristic (got {o['weightsinit']!r})")
    return o


class Diapason(Planner):
    name = "diapason"
    description = ("DIAPASON: softmax relaxation of partition, fusion and allocation, gradient descent, "
                   "argmax decoding (PyTorch)")
    source = ("DIAPASON (DATE 2024): continuous relaxation of partition, fusion and allocation, "
              "Sec. III-IV, eqs. (1)-(16), defaults of Sec. V-A")
    seeded = True

    option_specs = (
        Option("lr", float, 0.4, "learning rate", ge=0, le=1e6),
        Option("iterations", int, 20, "gradient steps (the time limit stops them early)", ge=0, le=10**9),
        Option("weightsinit", str, "heuristic", "initial logits", choices=("random", "heuristic")),
        Option("fusionlimit", int, None, "fusion limit, 0 or 1 = no fusion (default: min(2, the instance's))",
               ge=0, le=10**4),
        Option("parttype", str, None, "naive or capability (default from search.splits)",
               choices=("naive", "capability")),
        Option("loss_unit", str, "ms", "loss unit", choices=("ms", "s")),
        Option("runs", int, 1, "restarts", ge=1, le=10**4),
        Option("n_parts", int, None, "sublayers of a partitioned layer (default: devices)", ge=1, le=4096),
        Option("heuristic_logit", float, 1.0, "logit of the heuristic choice", ge=-1e6, le=1e6),
        Option("heuristic_whole", str, "uniform", "whole-layer selector start", choices=("uniform", "first")),
    )

    def search(self, instance: Instance, ctx: SolveContext) -> PlanResult:
        torch = import_torch(self.name)
        from milp_planner.planners.diapason_model import build_relaxation

        o = resolve_options(instance, self.options)
        with TorchState(torch, ctx.threads):
            rel = build_relaxation(instance, torch, objective=ctx.objective, unit=o["loss_unit"],
                                   fusionlimit=o["fusionlimit"], parttype=o["parttype"], n_parts=o["n_parts"])
            ctx.report(phase=f"diapason: {len(rel.pos)} POs, {rel.n_groups} selector sets")
            best = None
            runs = []
            stopped = False
            for r in range(o["runs"]):
                if r > 0 and ctx.remaining() is not None and ctx.remaining() <= 0:
                    stopped = True
                    break
                run = self._run(rel, torch, o, ctx.seed + r, ctx, r)
                stopped = stopped or run["stopped"]
                metrics = evaluate(run["plan"], instance)
                run["value"] = metrics.value(ctx.objective)
                runs.append(run)
                if best is None or run["value"] < best["value"]:
                    best = run
                ctx.report(phase=f"run {r + 1}/{o['runs']}", incumbent=best["value"])
        values = [x["value"] for x in runs]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        info = {
            "loss": best["loss"],
            "loss_curve": best["curve"],
            "loss_unit": (o["loss_unit"] if ctx.objective == "latency" else {"s": "J", "ms": "mJ"}[o["loss_unit"]]),
            "loss_argmax": best["loss_argmax"],
            "options": {k: o[k] for k in DEFAULTS} | {"n_parts": rel.n_parts, "objective": ctx.objective},
            "partition_opportunities": len(rel.pos),
            "selector_sets": rel.n_groups,
            "iterations_done": len(best["curve"]) - 1,
            "repairs": best["repairs"],
            "seed": best["seed"],
            "runs": [{"seed": x["seed"], "loss": x["loss"], "loss_argmax": x["loss_argmax"], "value": x["value"]}
                     for x in runs],
            "value_mean": mean,
            "value_std": std,
            "stopped_by_time_limit": stopped,
        }
        best["plan"].meta["loss"] = best["loss"]
        return PlanResult(self.name, "feasible", ctx.objective, plan=best["plan"], info=info,
                          message="time limit reached: plan decoded from the last iterate" if stopped else "")

    def _run(self, rel, torch, o, seed: int, ctx: SolveContext, r: int) -> dict:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        w_dev, w_l = rel.init_weights(o["weightsinit"], gen, o["heuristic_logit"], o["heuristic_whole"])
        # plain SGD by hand (w -= lr * grad, as torch.optim.SGD without momentum does it):
        # torch.optim imports torch._dynamo on first use, 1.5 s that would come out of the limit
        lr = float(o["lr"])
        curve = []
        stopped = False
        for it in range(o["iterations"]):
            rem = ctx.remaining()
            if rem is not None and rem <= 0:
                stopped = True
                break
            w_dev.grad = w_l.grad = None
            loss = rel.loss(w_dev, w_l)
            loss.backward()
            curve.append(float(loss.detach()))
            with torch.no_grad():
                for w in (w_dev, w_l):
                    if w.grad is not None:
                        w.add_(w.grad, alpha=-lr)
            ctx.report(phase=f"run {r + 1} iteration {it + 1}/{o['iterations']} loss {curve[-1]:.6g}")
        with torch.no_grad():
            p_dev, p_l = rel.probs(w_dev, w_l)
            final = float(rel.loss_from_probs(p_dev, p_l))
            curve.append(final)
            plan, repairs = rel.decode(p_dev, p_l)
            loss_argmax = float(rel.loss_from_probs(*one_hot(rel, torch, p_dev, p_l)))
        return {"seed": seed, "plan": plan, "repairs": repairs, "loss": final, "curve": curve,
                "loss_argmax": loss_argmax, "stopped": stopped}


def one_hot(rel, torch, p_dev, p_l):
    """The argmax choice as one-hot selector probabilities (its loss is the discrete cost)."""
    oh_dev = torch.zeros_like(p_dev)
    oh_dev.scatter_(-1, p_dev.argmax(-1, keepdim=True), 1.0)
    oh_l = torch.zeros_like(p_l)
    for lid, idx in enumerate(rel.layer_pos):
        oh_l[lid, int(torch.argmax(p_l[lid, : len(idx)]))] = 1.0
    return oh_dev, oh_l

"""``deploy(instance, plan, out_dir)``: a plan as per-device ONNX sub-models plus a manifest.

Layout of the folder::

    manifest.json            ranks, stages, parts, sub-model files, every message
    reference.onnx           the unsplit model (for --check only; never shipped to a device)
    <device>/stageNNN.onnx   one sub-model per stage in which the device computes something
    hostfile, rankfile       templates naming the instance's devices (MPICH: hostfile; ranks in order)
    README.md                how to launch on real boards

The messages are derived from the stage geometry with the evaluator's ownership rules and are
checked against ``milp_planner.cost.evaluator.messages`` (the list the evaluator prices), so
a deployment moves exactly the data whose cost was predicted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from milp_planner.cost.evaluator import EXTERNAL, evaluate, messages, normalized_stages, pricer
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.io import write_atomic
from milp_planner.space.geometry import Region, full_region
from milp_planner.space.plan import Plan, check_plan
from milp_planner.deploy.manifest import EXTERNAL_NAME, Manifest, MessageSpec, PartSpec, Slice, StageSpec
from milp_planner.deploy.regions import intersect
from milp_planner.deploy.source import ModelSource, load_model
from milp_planner.deploy.submodel import build_submodel, check_loadable, numpy_dtype_names

FLOAT_BYTES = 4


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "device"


def deploy(instance: Instance, plan: Plan, out_dir) -> Path:
    """Write the deployment of ``plan`` on ``instance`` into ``out_dir``; returns the folder."""
    out = Path(out_dir)
    check_plan(plan, instance)
    metrics = evaluate(plan, instance, check=False)
    priced = messages(plan, instance)
    stages = normalized_stages(plan, instance)
    g = instance.graph
    net = instance.network
    names = instance.device_names
    geo = pricer(instance).geometry
    unit = pricer(instance).unit_bytes

    def who(d: int) -> str:
        return EXTERNAL_NAME if d == EXTERNAL else names[d]

    model = load_model(instance)
    source = ModelSource(model, g)
    src = EXTERNAL if net.source.external else net.source.device
    sink = EXTERNAL if net.sink.external else net.sink.device

    owners: dict[str, list[tuple[int, Region]]] = {t: [(src, full_region(g, t))] for t in g.inputs}
    msgs: list[MessageSpec] = []
    stage_specs: list[StageSpec] = []
    files: dict[Path, bytes] = {}
    used: set[int] = {d for d in (src, sink) if d != EXTERNAL}

    def message(si, t, o, d, region):
        cells = region.cells
        elems_per_cell = unit(t) // instance.dtype_bytes
        nbytes = cells * unit(t)
        msgs.append(MessageSpec(len(msgs), si, t, who(o), who(d), region.rows, region.chans, nbytes,
                                cells * elems_per_cell * FLOAT_BYTES, pricer(instance).link_time(o, d, nbytes)))

    for si, (first, last, axis, parts) in enumerate(stages):
        geos = geo.parts(first, last, axis, [r for _, r in parts])
        cost = metrics.stages[si]
        specs = []
        for (d, rng), part in zip(parts, geos):
            used.add(d)
            for t, need in part.needs.items():
                if need.empty:
                    continue
                for o, region in owners[t]:
                    if o == d:
                        continue
                    common = intersect(need, region)
                    if common is not None:
                        message(si, t, o, d, common)
            model_file = None
            ins = outs = ()
            if part.computed:
                tag = f"{_safe(names[d])}.stage{si:03d}"
                sub = build_submodel(source, first, last, axis, part, tag)
                rel = Path(_safe(names[d])) / f"stage{si:03d}.onnx"
                files[rel] = sub.model.SerializeToString()
                check_loadable(files[rel], f"stage {si} on {names[d]} ({rel.as_posix()})")
                model_file = rel.as_posix()
                ins = tuple(Slice(p.tensor, p.region.rows, p.region.chans, p.name) for p in sub.inputs)
                outs = tuple(Slice(p.tensor, p.region.rows, p.region.chans, p.name) for p in sub.outputs)
            specs.append(PartSpec(names[d], rng, model_file, ins, outs,
                                  cost.compute_s.get(d, 0.0), cost.recv_s.get(d, 0.0)))
        for (d, _), part in zip(parts, geos):
            for t, region in part.owns.items():
                if not region.empty:
                    owners.setdefault(t, []).append((d, region))
        stage_specs.append(StageSpec(si, first, last, axis, tuple(specs), cost.tau_s))
    for t in g.outputs:
        for o, region in owners.get(t, ()):
            if o == sink or o == EXTERNAL or region.empty:
                continue
            message(len(stages), t, o, sink, region)

    mine = [(m.stage, m.tensor, m.sender, m.receiver, m.bytes) for m in msgs]
    theirs = [(m.stage, m.tensor, who(m.src), who(m.dst), m.bytes) for m in priced]
    if mine != theirs:
        diff = next((a, b) for a, b in zip(mine + [None] * len(theirs), theirs + [None] * len(mine)) if a != b)
        raise PlannerError(f"deploy: internal error: message {diff[0]} differs from the evaluator's {diff[1]}")

    ranks = {names[d]: r for r, d in enumerate(sorted(used))}
    if EXTERNAL in (src, sink):
        ranks[EXTERNAL_NAME] = len(ranks)
    manifest = Manifest(
        instance=instance.name, model=instance.model, devices=list(names), ranks=ranks,
        source=who(src), sink=who(sink),
        inputs={t: list(s) for t, s in g.inputs.items()},
        outputs={t: list(g.shape(t)) for t in g.outputs},
        reference_model="reference.onnx", stages=stage_specs, messages=msgs,
        predicted_latency_s=metrics.latency_s, predicted_gather_s=metrics.gather_s,
        notes={"dtype": "float32", "instance_dtype_bytes": instance.dtype_bytes,
               "medium": net.medium, "plan": plan.to_dict(),
               "dtypes": numpy_dtype_names(source, [*g.inputs, *(l.output for l in g.layers)])},
        shapes={**{t: list(s) for t, s in g.inputs.items()}, **{l.output: list(l.shape) for l in g.layers}},
    )

    if out.exists() and (out / "manifest.json").exists():
        for child in out.iterdir():  # a previous deployment: replace it whole
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
    elif out.exists() and any(out.iterdir()):
        raise PlannerError(f"{out}: exists and is not empty (and not a deployment folder)")
    out.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        write_atomic(out / rel, data)
    write_atomic(out / "reference.onnx", model.SerializeToString())
    write_atomic(out / "hostfile", _hostfile(manifest))
    write_atomic(out / "rankfile", _rankfile(manifest))
    write_atomic(out / "README.md", _readme(manifest))
    write_atomic(out / "manifest.json", manifest.to_json() + "\n")
    return out


def _hostfile(m: Manifest) -> str:
    lines = ["# MPICH hostfile: one line per rank, in rank order (replace each name by the board's",
             "# address). Launch with: mpiexec -f hostfile -n %d python -m milp_planner.deploy.worker ." % m.n_ranks]
    for name in m.rank_names():
        lines.append(f"{name}:1")
    return "\n".join(lines) + "\n"


def _rankfile(m: Manifest) -> str:
    lines = ["# rank -> device (the order of the hostfile; the worker checks the rank it runs as)"]
    for r, name in enumerate(m.rank_names()):
        lines.append(f"rank {r}={name}")
    return "\n".join(lines) + "\n"


def _readme(m: Manifest) -> str:
    rank_lines = "\n".join(f"| {r} | {name} |" for r, name in enumerate(m.rank_names()))
    n_msgs = len(m.messages)
    return f"""# Deployment of {m.instance}

Made by `milp-planner deploy`: {len(m.stages)} stages, {n_msgs} messages, {m.n_ranks} MPI ranks.
Predicted latency (the evaluator): {m.predicted_latency_s * 1e3:.6g} ms.

| rank | device |
|---|---|
{rank_lines}

Source of the input: `{m.source}`; sink of the outputs: `{m.sink}`. An external source or sink
is one extra rank (`external`), the last one.

## On this machine

    milp-planner run .  [--check] [--emulate-network] [--repeat N] [--json]

## On real boards

1. Install the runtime on every board: `pip install 'milp-planner[deploy]'` (onnxruntime,
   mpi4py and the MPICH wheel, which brings `mpiexec`). The boards must reach each other over
   SSH without a password (MPICH's hydra launcher starts the ranks through SSH).
2. Copy this folder to the same path on every board (a board needs only `manifest.json` and
   its own `<device>/` folder; `reference.onnx` is the unsplit model for `--check`).
3. Edit `hostfile`: replace each device name by the board's host name or address, keeping
   the order (line i is rank i).
4. From one board, in this folder:

       mpiexec -f hostfile -n {m.n_ranks} python -m milp_planner.deploy.worker . --repeat 5

   Each rank writes its timings to `results/rank<R>.json`; the sink writes the outputs to
   `results/outputs.npz`. Do not pass `--emulate-network` on real boards: the network is real.
"""

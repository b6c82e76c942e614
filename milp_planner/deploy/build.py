"""``deploy(instance, plan, out_dir)``: a plan as per-device ONNX sub-models plus a manifest.

Layout of the folder::

    manifest.json            ranks, stages, parts, sub-model files, every message
    reference.onnx           the unsplit model (for --check only; never shipped to a device)
    <device>/stageNNN.onnx   one sub-model per stage in which the device computes something
    hostfile, rankfile       templates naming the instance's devices (MPICH: hostfile; ranks in order)
    README.md                how to launch on real boards
    .milp-planner-output.json  the list of files deploy wrote (milp_planner.io.OutputDir)

The folder is the command's own (``milp_planner.io.OutputDir``): it must be new, empty or a
deployment written before (its content exactly the files its marker lists); it is built beside
and swapped in whole, so a failed deploy leaves the old folder as it was and a redeploy
deletes nothing it did not write. ``<device>`` is the device name made a file name by
``io.safe_filename`` (``..`` or ``a/b`` cannot leave the folder; two names that clean to the
same one get ``-2``...). The model is read within the memory budget (``milp_planner.limits``):
a binary ``.onnx`` file's weights are read per sub-model (``deploy.weights``): a sub-model is
built from the arrays it needs, written from them as a stream, dropped, then loaded back by
onnxruntime, so a deploy holds one sub-model's weights at a time (about twice at the peak, in
onnxruntime), never the model's; ``reference.onnx`` is copied from the model file as a stream.
A model loaded whole (a zoo model, a text-format file) adds its weights once.

The messages are derived from the stage geometry with the evaluator's ownership rules and are
checked against ``milp_planner.cost.evaluator.messages`` (the list the evaluator prices), so
a deployment moves exactly the data whose cost was predicted.
"""

from __future__ import annotations

from pathlib import Path


from milp_planner.cost.evaluator import EXTERNAL, evaluate, messages, normalized_stages, pricer
from milp_planner.errors import PlannerError
from milp_planner.instance import Instance
from milp_planner.io import OutputDir, printable
from milp_planner.limits import trim_heap
from milp_planner.space.geometry import Region, full_region
from milp_planner.space.plan import Plan, check_plan
from milp_planner.deploy.manifest import (EXTERNAL_NAME, Manifest, MessageSpec, PartSpec, Slice, StageSpec,
                                          validate_manifest)
from milp_planner.deploy.regions import intersect
from milp_planner.deploy.source import ModelSource, instance_model_path, open_model, streams_weights
from milp_planner.deploy.submodel import build_submodel, check_loadable, numpy_dtype_names

FLOAT_BYTES = 4
#: the folder's own files: no device folder takes these names (``results`` is where ranks
#: write when run on boards)
TOP_LEVEL = ("manifest.json", "reference.onnx", "hostfile", "rankfile", "README.md", "results")
#: memory of a deploy (docs/deploy.md, "Memory"): the weights of the largest stage up to three
#: times at once (a sub-model's arrays, the whole weights a channel part is cut from; measured:
#: about twice, when onnxruntime loads the file written), the model's weights once more when they
#: are loaded whole (twice while ``onnx.load`` parses them), plus the interpreter, onnx and
#: onnxruntime
STAGE_COPIES = 3
BASE_BYTES = 400 * 10**6


def model_path(instance: Instance) -> Path | None:
    """The instance's ``.onnx`` file (None for a zoo model)."""
    return instance_model_path(instance)


def stage_weight_bytes(instance: Instance, plan: Plan) -> int:
    """Bytes of weights of the plan's largest stage (every part of a row split reads them all),
    at 4 bytes a parameter."""
    layers = instance.graph.layers
    return max((sum(layers[i].params for i in range(first, last + 1)) * FLOAT_BYTES
                for first, last, _, _ in normalized_stages(plan, instance)), default=0)


def deploy_memory_need(instance: Instance, plan: Plan | None = None, streamed: bool | None = None) -> tuple[int, str]:
    """(bytes a deploy of ``plan`` on ``instance`` needs, what to call it in a message).

    ``streamed``: whether the weights are read per sub-model (default: ``streams_weights``);
    without ``plan`` one stage is taken to hold every weight."""
    from milp_planner.model.onnx.reading import model_file_bytes

    path = model_path(instance)
    param_bytes = sum(layer.params for layer in instance.graph.layers) * FLOAT_BYTES
    weights = param_bytes
    what = f"deploy of {instance.model}"
    if path is not None:
        weights = max(weights, model_file_bytes(path))  # the file and its external data, checked
        what = f"deploy of {printable(path)} ({weights / 1e9:.3g} GB with its weights)"
    stage = weights
    if plan is not None:
        stage = stage_weight_bytes(instance, plan)
        if param_bytes and weights > param_bytes:  # weights the parameter count misses: in proportion
            stage = int(stage * weights / param_bytes)
        stage = min(stage, weights)
    if streamed is None:
        streamed = streams_weights(instance)
    need = BASE_BYTES + STAGE_COPIES * stage
    if not streamed:
        need = BASE_BYTES + max(2 * weights, weights + STAGE_COPIES * stage)
    return need, what


def check_deploy_memory(instance: Instance, budget: int | None = None, plan: Plan | None = None,
                        streamed: bool | None = None) -> int:
    """Bytes a deploy of ``instance`` needs (``PlannerError`` above the memory budget)."""
    from milp_planner.limits import check_need

    need, what = deploy_memory_need(instance, plan, streamed)
    check_need(need, what, budget)
    return need


def _check_names(instance: Instance, src: int, sink: int) -> None:
    if EXTERNAL in (src, sink) and EXTERNAL_NAME in instance.device_names:
        raise PlannerError(f"deploy: a device is named {EXTERNAL_NAME!r}, the name a deployment gives the "
                           f"external {'source' if src == EXTERNAL else 'sink'} of the network; rename the device")


def deploy(instance: Instance, plan: Plan, out_dir, *, inputs=(), memory_budget: int | None = None) -> Path:
    """Write the deployment of ``plan`` on ``instance`` into ``out_dir``; returns the folder.

    ``inputs``: the files the command read (the plan file), never inside ``out_dir``.
    ``memory_budget``: bytes (default ``milp_planner.limits.DEFAULT_BUDGET``).
    """
    out = Path(out_dir)
    target = OutputDir(out, "deploy", [instance.path, model_path(instance), *inputs]).check()  # before any work
    check_plan(plan, instance)
    net = instance.network
    src = EXTERNAL if net.source.external else net.source.device
    sink = EXTERNAL if net.sink.external else net.sink.device
    _check_names(instance, src, sink)
    check_deploy_memory(instance, memory_budget, plan)
    model, weights = open_model(instance, on_full_load=lambda: check_deploy_memory(instance, memory_budget, plan,
                                                                                   streamed=False))
    with weights:  # the model's files, open until the end
        _write_deployment(instance, plan, target, model, weights, src, sink)
    return out


def _write_deployment(instance: Instance, plan: Plan, target: OutputDir, model, weights, src: int, sink: int) -> None:
    """The body of ``deploy``: sub-models, one at a time, then the manifest and the reference model."""
    metrics = evaluate(plan, instance, check=False)
    priced = messages(plan, instance)
    stages = normalized_stages(plan, instance)
    g = instance.graph
    writer = _DeploymentWriter(instance, target, src, sink)
    source = ModelSource(model, g, weights)
    dtypes = numpy_dtype_names(source, [*g.inputs, *(l.output for l in g.layers)])  # refuses strings first
    # sized now (over 2 GiB is refused before any sub-model is built), written last
    reference = weights.model_chunks(f"the model {printable(instance.model)}")

    with target:  # built beside and swapped in whole at the end of the block; removed on an error
        stage_specs = [writer.write_stage(source, si, stage, metrics) for si, stage in enumerate(stages)]
        writer.gather_outputs(len(stages))
        writer.check_messages(priced)
        manifest = writer.manifest(plan, metrics, stage_specs, dtypes)
        validate_manifest(manifest, "deploy")  # what run checks: never write a deployment it refuses
        target.write("reference.onnx", reference)
        target.write("hostfile", _hostfile(manifest))
        target.write("rankfile", _rankfile(manifest))
        target.write("README.md", _readme(manifest))
        target.write("manifest.json", manifest.to_json() + "\n")


class _DeploymentWriter:
    """A deployment being written: its messages, the owners of each tensor's regions, its devices' folders."""

    def __init__(self, instance: Instance, target: OutputDir, src: int, sink: int):
        """Start with the source owning the model's inputs whole and no message yet."""
        g = instance.graph
        self.instance = instance
        self.target = target
        self.src = src
        self.sink = sink
        self.names = instance.device_names
        self.geo = pricer(instance).geometry
        self.unit = pricer(instance).unit_bytes
        self.owners: dict[str, list[tuple[int, Region]]] = {t: [(src, full_region(g, t))] for t in g.inputs}
        self.msgs: list[MessageSpec] = []
        self.used: set[int] = {d for d in (src, sink) if d != EXTERNAL}
        self.folders: dict[int, str] = {}  # device -> its folder in the deployment (io.safe_filename)

    def who(self, d: int) -> str:
        """The manifest's name of device ``d`` (``EXTERNAL_NAME`` for the external source or sink)."""
        return EXTERNAL_NAME if d == EXTERNAL else self.names[d]

    def folder(self, d: int) -> str:
        """The folder of device ``d`` in the deployment, named the first time it is asked for."""
        if d not in self.folders:
            self.folders[d] = self.target.name(self.names[d], reserved=TOP_LEVEL)
        return self.folders[d]

    def message(self, si: int, t: str, o: int, d: int, region: Region) -> None:
        """Add the message of stage ``si`` carrying ``region`` of tensor ``t`` from ``o`` to ``d``."""
        cells = region.cells
        elems_per_cell = self.unit(t) // self.instance.dtype_bytes
        nbytes = cells * self.unit(t)
        self.msgs.append(MessageSpec(len(self.msgs), si, t, self.who(o), self.who(d), region.rows, region.chans,
                                     nbytes, cells * elems_per_cell * FLOAT_BYTES,
                                     pricer(self.instance).link_time(o, d, nbytes)))

    def write_stage(self, source: ModelSource, si: int, stage, metrics) -> StageSpec:
        """Stage ``si``: each part's messages and sub-model, then what its parts own afterwards."""
        first, last, axis, parts = stage
        geos = self.geo.parts(first, last, axis, [r for _, r in parts])
        cost = metrics.stages[si]
        specs = []
        for (d, rng), part in zip(parts, geos):
            self.used.add(d)
            self.receive(si, d, part)
            model_file = None
            ins = outs = ()
            if part.computed:
                model_file, ins, outs = self.write_submodel(source, si, first, last, axis, d, part)
            specs.append(PartSpec(self.names[d], rng, model_file, ins, outs,
                                  cost.compute_s.get(d, 0.0), cost.recv_s.get(d, 0.0)))
        for (d, _), part in zip(parts, geos):
            for t, region in part.owns.items():
                if not region.empty:
                    self.owners.setdefault(t, []).append((d, region))
        return StageSpec(si, first, last, axis, tuple(specs), cost.tau_s)

    def receive(self, si: int, d: int, part) -> None:
        """Add the messages that bring device ``d`` what ``part`` needs from the other owners."""
        for t, need in part.needs.items():
            if need.empty:
                continue
            for o, region in self.owners[t]:
                if o == d:
                    continue
                common = intersect(need, region)
                if common is not None:
                    self.message(si, t, o, d, common)

    def write_submodel(self, source: ModelSource, si: int, first: int, last: int, axis, d: int, part):
        """Build, write, drop and check the sub-model of ``part`` on ``d``: (file, inputs, outputs)."""
        tag = f"{self.folder(d)}.stage{si:03d}"
        sub = build_submodel(source, first, last, axis, part, tag)
        model_file = f"{self.folder(d)}/stage{si:03d}.onnx"
        ins = tuple(Slice(p.tensor, p.region.rows, p.region.chans, p.name) for p in sub.inputs)
        outs = tuple(Slice(p.tensor, p.region.rows, p.region.chans, p.name) for p in sub.outputs)
        self.target.write(model_file, sub.chunks(f"the sub-model {model_file}"))
        del sub  # one sub-model's weights at a time: built, written, dropped
        source.release()
        trim_heap()
        check_loadable(self.target.staged(model_file), f"stage {si} on {printable(self.names[d])} ({model_file})",
                       whole=model_path(self.instance))
        trim_heap()
        return model_file, ins, outs

    def gather_outputs(self, si: int) -> None:
        """Add the messages of step ``si`` (after the last stage) that bring the outputs to the sink."""
        for t in self.instance.graph.outputs:
            for o, region in self.owners.get(t, ()):
                if o == self.sink or o == EXTERNAL or region.empty:
                    continue
                self.message(si, t, o, self.sink, region)

    def check_messages(self, priced) -> None:
        """``PlannerError`` unless the messages are exactly those the evaluator priced, in order."""
        who = self.who
        mine = [(m.stage, m.tensor, m.sender, m.receiver, m.bytes) for m in self.msgs]
        theirs = [(m.stage, m.tensor, who(m.src), who(m.dst), m.bytes) for m in priced]
        if mine != theirs:
            diff = next((a, b) for a, b in zip(mine + [None] * len(theirs), theirs + [None] * len(mine)) if a != b)
            raise PlannerError(f"deploy: internal error: message {diff[0]} differs from the evaluator's {diff[1]}")

    def manifest(self, plan: Plan, metrics, stage_specs: list[StageSpec], dtypes) -> Manifest:
        """The manifest: ranks in device order (an external end last), stages, messages and predictions."""
        instance, g, names = self.instance, self.instance.graph, self.names
        ranks = {names[d]: r for r, d in enumerate(sorted(self.used))}
        if EXTERNAL in (self.src, self.sink):
            ranks[EXTERNAL_NAME] = len(ranks)
        return Manifest(
            instance=instance.name, model=instance.model, devices=list(names), ranks=ranks,
            source=self.who(self.src), sink=self.who(self.sink),
            inputs={t: list(s) for t, s in g.inputs.items()},
            outputs={t: list(g.shape(t)) for t in g.outputs},
            reference_model="reference.onnx", stages=stage_specs, messages=self.msgs,
            predicted_latency_s=metrics.latency_s, predicted_gather_s=metrics.gather_s,
            notes={"dtype": "float32", "instance_dtype_bytes": instance.dtype_bytes,
                   "medium": instance.network.medium, "plan": plan.to_dict(),
                   "dtypes": dtypes},
            shapes={**{t: list(s) for t, s in g.inputs.items()}, **{l.output: list(l.shape) for l in g.layers}},
        )


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
    from milp_planner.io import markdown_text as md

    rank_lines = "\n".join(f"| {r} | {md(name)} |" for r, name in enumerate(m.rank_names()))
    n_msgs = len(m.messages)
    return f"""# Deployment of {md(m.instance)}

Made by `milp-planner deploy`: {len(m.stages)} stages, {n_msgs} messages, {m.n_ranks} MPI ranks.
Predicted latency (the evaluator): {m.predicted_latency_s * 1e3:.6g} ms.

| rank | device |
|---|---|
{rank_lines}

Source of the input: {md(m.source)}; sink of the outputs: {md(m.sink)}. An external source or sink
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

"""Issue #30's corpus: hostile or extreme inputs for deploy, run, profile, pareto, report,
solve --out, zoo export and inspect, each with what a correct tool does.

Every case names the outputs its command may write (``outputs``); the runner counts anything
else added, changed or removed as a write outside, a failed command's changed output as
half-written, a process left running as a leftover, and a run past ``limit`` as an overrun
(``runner.py``). ``python tests/fuzz_corpus/tally.py --corpus commands -v`` prints the tally.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import struct
import tempfile
from pathlib import Path
from typing import Callable

from fuzz_corpus.cases import Case, _strict_json
from fuzz_corpus.onnx_models import write as onnx_file

SLACK = 2.0 + 8.0  # the issue's 2 s plus an interpreter's start and imports on a loaded machine


# -- inputs ------------------------------------------------------------------------------------


def instance(dev0="pi4", dev1="pi5", model="zoo:tiny_chain", name="base", ends="device", profile0=None,
             extra="") -> str:
    """Two devices, tiny_chain; ``ends='external'`` makes the source and sink external."""
    d0 = f"profile: {profile0}" if profile0 else "compute: {macs_per_s: 5.0e9}"
    src = ("source: {bandwidth_mbps: 100, latency_ms: 1}\n  sink: {bandwidth_mbps: 100, latency_ms: 1}"
           if ends == "external" else f"source: {{device: {json.dumps(dev0)}}}\n  sink: {{device: {json.dumps(dev0)}}}")
    return (f"name: {json.dumps(name)}\nmodel: {json.dumps(model)}\ndevices:\n"
            f"  - name: {json.dumps(dev0)}\n    {d0}\n    memory_mb: 512\n"
            f"  - name: {json.dumps(dev1)}\n    profile: rpi5\n"
            f"network:\n  bandwidth_mbps: 100\n  latency_ms: 0.5\n  {src}\n"
            "search: {fusion_limit: 2, max_parts: 2, splits: [equal], axes: [rows]}\n" + extra)


def plan(dev0="pi4", dev1="pi5", last=5, split=False) -> str:
    """Layers 0-2 on ``dev0``, the rest on ``dev1`` (``split``: layer 0 by rows over both)."""
    stages = [{"first": 0, "last": 2, "axis": "none", "parts": [{"device": dev0}]},
              {"first": 3, "last": last, "axis": "none", "parts": [{"device": dev1}]}]
    if split:
        stages[0:1] = [{"first": 0, "last": 0, "axis": "rows",
                        "parts": [{"device": dev0, "range": [0, 16]}, {"device": dev1, "range": [16, 32]}]},
                       {"first": 1, "last": 2, "axis": "none", "parts": [{"device": dev0}]}]
    return json.dumps({"stages": stages})


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _mkdir(p: Path) -> None:
    p.mkdir()


def _link(target: str) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        p.symlink_to(target)
    return make


def _loop(p: Path) -> None:
    p.symlink_to(p.name)  # a link to itself


def _chardev(p: Path) -> None:
    """A character device node like /dev/null (1, 3) in the case's folder (root only), else a FIFO."""
    try:
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        os.mkfifo(p)


def _sparse(size: int) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        with open(p, "wb") as f:
            f.truncate(size)
    return make


def _zoo_onnx(name="tiny_chain", size=None) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        from milp_planner.model import zoo

        zoo.export(name, str(p), size=size)
    return make


def _renamed_onnx(names: dict) -> Callable[[Path], None]:
    """tiny_chain with some node names replaced (``{"conv1": "1e3"}``)."""
    def make(p: Path) -> None:
        import onnx

        from milp_planner.model import zoo

        zoo.export("tiny_chain", str(p))
        m = onnx.load(str(p))
        for n in m.graph.node:
            if n.name in names:
                n.name = names[n.name]
        onnx.save(m, str(p))
    return make


def _external_weights(size: int) -> Callable[[Path], None]:
    """tiny_chain whose last conv reads ``size`` bytes of external data from a sparse file."""
    def make(p: Path) -> None:
        import onnx
        from onnx import TensorProto

        from milp_planner.model import zoo

        zoo.export("tiny_chain", str(p))
        m = onnx.load(str(p))
        w = m.graph.initializer[-1]
        n = size // 4
        w.ClearField("raw_data")
        del w.dims[:]
        w.dims.extend([n])
        w.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "big.bin"), ("offset", "0"), ("length", str(size))):
            e = w.external_data.add()
            e.key, e.value = k, v
        onnx.save(m, str(p))
        with open(p.parent / "big.bin", "wb") as f:
            f.truncate(size)
    return make


def _big_graph(nodes: int) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        import onnx
        from onnx import TensorProto, helper

        ns = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(nodes)]
        g = helper.make_graph(ns, "big", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info(f"t{nodes}", TensorProto.FLOAT, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        onnx.save(m, str(p))
    return make


def _npy(array_factory: Callable) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        import numpy as np

        np.save(p, array_factory(), allow_pickle=True)
    return make


def _npz(p: Path) -> None:
    import numpy as np

    with open(p, "wb") as f:
        np.savez(f, x=np.zeros((1, 3, 32, 32), np.float32))


def _text(content: str) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        p.write_text(content)
    return make


# -- a deployment, made once per process and copied into each case ----------------------------

_TEMPLATES: dict[str, Path] = {}


def _template(kind: str = "split") -> Path:
    """A deployment of tiny_chain (``split``: two devices and messages; ``external``: an
    external source and sink), made with the tool itself once per process."""
    if kind not in _TEMPLATES:
        from milp_planner.deploy import deploy
        from milp_planner.instance.reader import load_instance
        from milp_planner.space.plan import Plan

        root = Path(tempfile.mkdtemp(prefix="fuzz-deploy-template-"))
        (root / "i.yaml").write_text(instance(ends="external" if kind == "external" else "device"))
        (root / "p.json").write_text(plan(split=True))
        inst = load_instance(root / "i.yaml")
        deploy(inst, Plan.load(root / "p.json"), root / "dep")
        _TEMPLATES[kind] = root / "dep"
    return _TEMPLATES[kind]


def deployment(kind: str = "split", edit: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """A case file writer: the template deployment copied to the path, then ``edit(folder)``."""
    def make(p: Path) -> None:
        shutil.copytree(_template(kind), p, symlinks=True)
        if edit is not None:
            edit(p)
    return make


def manifest_edit(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / "manifest.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data, indent=1, allow_nan=True))
    return edit


def _set(path: str, value):
    """A manifest change setting the value at a dotted path (list indexes as numbers)."""
    def change(d: dict) -> None:
        keys = path.split(".")
        for k in keys[:-1]:
            d = d[int(k)] if isinstance(d, list) else d[k]
        last = keys[-1]
        if isinstance(d, list):
            d[int(last)] = value
        else:
            d[last] = value
    return change


def _first_model(folder: Path) -> Path:
    m = json.loads((folder / "manifest.json").read_text())
    return folder / next(p["model"] for s in m["stages"] for p in s["parts"] if p["model"])


def _replace_model(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        p = _first_model(folder)
        p.unlink()
        make(p)
    return edit


# -- checks ----------------------------------------------------------------------------------


def _marker_lists_all(folder: str, needed=()) -> Callable:
    """The output folder is whole: it holds the files in ``needed`` (``"manifest"``: a manifest
    and every file it names) and, when it has a marker (``.milp-planner-output.json``), exactly
    the files the marker lists."""
    def check(res) -> str | None:
        d = res.dir / folder
        if not d.is_dir():
            return f"{folder} not written"
        for name in needed:
            if name == "manifest":
                try:
                    m = json.loads((d / "manifest.json").read_text())
                    named = [p["model"] for s in m["stages"] for p in s["parts"] if p["model"]]
                    named.append(m["reference_model"])
                except (OSError, ValueError, KeyError, TypeError) as e:
                    return f"{folder}/manifest.json: {e}"
                missing = [f for f in named if not (d / f).is_file()]
                if missing:
                    return f"{folder}: the manifest names {missing[0]}, which is not there"
            elif not (d / name).is_file():
                return f"{folder}/{name} not written"
        marker = d / ".milp-planner-output.json"
        if not marker.is_file():
            return None
        listed = set(json.loads(marker.read_text())["files"]) | {".milp-planner-output.json"}
        keep = set(json.loads(marker.read_text()).get("keep", []))
        have = {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()
                and str(p.relative_to(d)).split("/")[0] not in keep}
        if have != listed:
            return f"{folder}: files {sorted(have ^ listed)[:3]} differ from the marker's list"
        return None
    return check


def _all(*checks) -> Callable:
    def check(res) -> str | None:
        for c in checks:
            why = c(res)
            if why:
                return why
        return None
    return check


def _stderr_lacks(*texts) -> Callable:
    def check(res) -> str | None:
        for t in texts:
            if t in res.stderr or t in res.stdout:
                return f"{t!r} in the output"
        return None
    return check


def _stdout_lacks_escape(res) -> str | None:
    return "a raw escape character on the terminal" if "\x1b" in res.stdout or "\x1b" in res.stderr else None


def _file_has(rel: str, *texts, lacks=()) -> Callable:
    def check(res) -> str | None:
        p = res.dir / rel
        if not p.is_file():
            return f"{rel} not written"
        body = p.read_text(errors="replace")
        for t in texts:
            if t not in body:
                return f"{t!r} not in {rel}"
        for t in lacks:
            if t in body:
                return f"{t!r} in {rel}"
        return None
    return check


def _json_file(rel: str) -> Callable:
    def check(res) -> str | None:
        try:
            json.loads((res.dir / rel).read_text())
        except (OSError, ValueError) as e:
            return f"{rel}: not JSON ({e})"
        return None
    return check


def _profile_loads(rel: str, model: str = "zoo:tiny_chain") -> Callable:
    """The device file written loads in an instance for ``model``."""
    def check(res) -> str | None:
        from milp_planner.errors import PlannerError
        from milp_planner.instance import load_instance

        inst = res.dir / "_check.yaml"
        inst.write_text(f"model: {json.dumps(model)}\ndevices:\n  - {{name: h, profile: {json.dumps(rel)}}}\n"
                        "network: {bandwidth_mbps: 100}\n")
        try:
            load_instance(inst)
        except PlannerError as e:
            return f"the profile written does not load: {e}"
        finally:
            inst.unlink()
        return None
    return check


def _run_json(res) -> str | None:
    why = _strict_json(res)
    if why:
        return why
    out = json.loads(res.stdout)
    return None if out.get("measured_latency_s") is not None else "no measured latency"


def _run_checked(res) -> str | None:
    """A run's JSON whose outputs match the unsplit model (``--check``)."""
    why = _run_json(res)
    if why:
        return why
    err = json.loads(res.stdout).get("max_abs_err")
    return None if err is not None and err <= 1e-4 else f"max abs error {err}"


def _solve_time_within(limit: float) -> Callable:
    def check(res) -> str | None:
        try:
            t = json.loads(res.stdout)["solve_time_s"]
        except (ValueError, KeyError):
            return "no JSON solve_time_s"
        allowed = limit * 1.05 + 2.0
        return None if t <= allowed else f"solve_time_s {t:.1f} s past {allowed:.1f} s"
    return check


# -- the cases ------------------------------------------------------------------------------

DEPLOY = ["deploy", "{dir}/i.yaml", "{dir}/p.json", "--out", "{dir}/dep"]
RUN = ["run", "{dir}/dep", "--repeat", "1", "--timeout", "60"]
PROFILE = ["profile", "zoo:tiny_chain", "--repeats", "1", "--warmup", "0", "--fractions", "1", "--no-context", "-q"]
PARETO = ["pareto", "{dir}/i.yaml", "--objectives", "latency,energy", "--points", "2", "--time-limit", "20"]
REPORT = ["report", "{dir}/i.yaml", "--planners", "offload", "-q", "--workers", "1", "--time-limit", "20"]
OK_DEP = _marker_lists_all("dep", ["manifest"])
OK_FILES = {"i.yaml": instance(), "p.json": plan()}
CASES: list[Case] = []


def add(*cases: Case) -> None:
    CASES.extend(cases)


# ---- deploy: names become file names through one function
for label, d0, d1 in (("dotdot", "..", "pi5"), ("dot", ".", "pi5"), ("slash", "a/b", "pi5"),
                      ("abs", "/etc/passwd", "pi5"), ("collide", "x y", "x_y"), ("case_collide", "Pi", "pi"),
                      ("reserved_manifest", "manifest.json", "pi5"), ("reserved_results", "results", "pi5"),
                      ("windows_con", "CON", "nul"), ("hidden", ".ssh", "-rf"), ("backslash", "a\\\\b", "pi5"),
                      ("unicode", "ключ", "設備"), ("long", "d" * 900, "pi5"), ("markup", "<b>[red]x", "pi5")):
    add(Case(f"deploy_name_{label}", DEPLOY, "ok", {"i.yaml": instance(d0, d1), "p.json": plan(d0, d1, split=True)},
             outputs=["dep"], complete=OK_DEP, note="device names become folder names inside dep only"))
add(Case("deploy_ok", DEPLOY, "ok", OK_FILES, outputs=["dep"], complete=OK_DEP),
    Case("deploy_external_ends", DEPLOY, "ok", {"i.yaml": instance(ends="external"), "p.json": plan()},
         outputs=["dep"], complete=OK_DEP),
    Case("deploy_device_named_external", DEPLOY, files={"i.yaml": instance("external", ends="external"),
                                                         "p.json": plan("external")}, outputs=["dep"]),
    Case("deploy_device_named_external_no_clash", DEPLOY, "ok",
         {"i.yaml": instance("external"), "p.json": plan("external")}, outputs=["dep"], complete=OK_DEP),
    # ---- deploy: the output folder is the command's own
    Case("deploy_out_dot", DEPLOY[:-1] + ["."], files=OK_FILES, outputs=[]),
    Case("deploy_out_parent", DEPLOY[:-1] + ["{dir}/.."], files=OK_FILES, outputs=[]),
    Case("deploy_out_with_inputs", DEPLOY[:-1] + ["{dir}"], files=OK_FILES, outputs=[]),
    Case("deploy_out_user_files", DEPLOY, files={**OK_FILES, "dep/notes.txt": "mine"}, outputs=["dep"]),
    Case("deploy_out_fake_manifest", DEPLOY, files={**OK_FILES, "dep/manifest.json": "{}", "dep/keep.txt": "x"},
         outputs=["dep"], note="a manifest.json is not a licence to delete the folder"),
    Case("deploy_out_input_inside", ["deploy", "{dir}/dep/i.yaml", "{dir}/dep/p.json", "--out", "{dir}/dep"],
         files={"dep/i.yaml": instance(), "dep/p.json": plan()}, outputs=["dep"]),
    Case("deploy_redeploy", DEPLOY, "ok", {**OK_FILES, "dep": deployment()}, outputs=["dep"], complete=OK_DEP),
    Case("deploy_redeploy_extra_file", DEPLOY, files={**OK_FILES, "dep": deployment(
        edit=lambda d: (d / "mine.txt").write_text("keep me"))}, outputs=["dep"]),
    Case("deploy_redeploy_symlink_inside", DEPLOY, files={**OK_FILES, "dep": deployment(
        edit=lambda d: (d / "link").symlink_to("/etc"))}, outputs=["dep"]),
    Case("deploy_out_symlink_dir", DEPLOY, files={**OK_FILES, "real": _mkdir, "dep": _link("real")},
         outputs=["dep"]),
    Case("deploy_out_file", DEPLOY, files={**OK_FILES, "dep": "a file"}, outputs=["dep"]),
    Case("deploy_out_fifo", DEPLOY, files={**OK_FILES, "dep": _fifo}, outputs=["dep"]),
    Case("deploy_out_device", DEPLOY, files={**OK_FILES, "dep": _chardev}, outputs=["dep"]),
    Case("deploy_out_under_file", DEPLOY[:-1] + ["{dir}/f/dep"], files={**OK_FILES, "f": "x"}, outputs=["f"]),
    Case("deploy_out_readonly", DEPLOY[:-1] + ["/proc/dep"], files=OK_FILES, outputs=[]),
    Case("deploy_out_is_plan", DEPLOY[:-1] + ["{dir}/p.json"], files=OK_FILES, outputs=[]),
    Case("deploy_out_nul", DEPLOY[:-1] + ["{dir}/de\x01p"], "either", OK_FILES, outputs=["de\x01p"]),
    # ---- deploy: what it reads
    Case("deploy_plan_float_rows", DEPLOY, files={"i.yaml": instance(), "p.json": json.dumps({"stages": [
        {"first": 0, "last": 5, "axis": "rows", "parts": [{"device": "pi4", "range": [0.0, 16.0]},
                                                           {"device": "pi5", "range": [16.0, 32.0]}]}]})},
         outputs=["dep"], note="[0.0, 16.0] passed the schema, then failed on Fraction"),
    Case("deploy_plan_fifo", DEPLOY, files={"i.yaml": instance(), "p.json": _fifo}, outputs=["dep"]),
    Case("deploy_plan_devzero", DEPLOY, files={"i.yaml": instance(), "p.json": _link("/dev/zero")},
         outputs=["dep"]),
    Case("deploy_model_devzero", DEPLOY, files={"i.yaml": instance(model="m.onnx"), "p.json": plan(),
                                                "m.onnx": _link("/dev/zero")}, outputs=["dep"]),
    Case("deploy_model_fifo", DEPLOY, files={"i.yaml": instance(model="m.onnx"), "p.json": plan(),
                                             "m.onnx": _fifo}, outputs=["dep"]),
    Case("deploy_model_file", DEPLOY, "ok", {"i.yaml": instance(model="m.onnx"), "p.json": plan(),
                                             "m.onnx": _zoo_onnx()}, outputs=["dep"], complete=OK_DEP),
    Case("deploy_external_3gb", DEPLOY, files={"i.yaml": instance(model="m.onnx"), "p.json": plan(),
                                               "m.onnx": _external_weights(3 * 10**9)},
         outputs=["dep"], limit=20, note="3 GB of external weights: over the memory budget, refused before loading"),
    Case("deploy_external_3gb_rlimit", DEPLOY + ["--memory-budget", "64GB"],
         files={"i.yaml": instance(model="m.onnx"), "p.json": plan(), "m.onnx": _external_weights(3 * 10**9)},
         outputs=["dep"], rlimit_as=6 * 10**9, limit=20, note="under ulimit -v 6 GB: refused, not a segfault"),
    Case("deploy_memory_budget_tiny", DEPLOY + ["--memory-budget", "1MB"], files=OK_FILES, outputs=["dep"]),
    Case("deploy_memory_budget_bad", DEPLOY + ["--memory-budget", "lots"], files=OK_FILES, outputs=["dep"]),
)
PLAN2 = json.dumps({"stages": [{"first": 0, "last": 0, "axis": "none", "parts": [{"device": "pi4"}]},
                               {"first": 1, "last": 1, "axis": "none", "parts": [{"device": "pi5"}]}]})
for kind in ("external_escape", "external_missing", "weight_short_data", "duplicate_names", "produced_twice"):
    add(Case(f"deploy_onnx_{kind}", DEPLOY, files={"i.yaml": instance(model="m.onnx"), "p.json": PLAN2,
                                                   "m.onnx": onnx_file(kind)}, outputs=["dep"]))
# fp16 and uint8 tensors cross stages with their own types (issue #31): these deploy, every sub-model loaded
for kind in ("many_names", "fp16", "uint8_input"):
    add(Case(f"deploy_onnx_{kind}", DEPLOY, "ok", {"i.yaml": instance(model="m.onnx"), "p.json": PLAN2,
                                                  "m.onnx": onnx_file(kind)}, outputs=["dep"], complete=OK_DEP))


# ---- run: a deployment is closed
def _ranks16(d):
    d["ranks"] = {**{f"ghost{i}": i + 2 for i in range(14)}, **{k: v for k, v in d["ranks"].items()}}


TAMPER = {
    "ranks_16": _ranks16,
    "ranks_dupe": lambda d: d.__setitem__("ranks", {k: 0 for k in d["ranks"]}),
    "ranks_gap": lambda d: d.__setitem__("ranks", {k: 2 * v for k, v in d["ranks"].items()}),
    "ranks_missing": lambda d: d.__setitem__("ranks", dict(list(d["ranks"].items())[:1])),
    "ranks_negative": lambda d: d.__setitem__("ranks", {k: -1 - v for k, v in d["ranks"].items()}),
    "ranks_bool": lambda d: d.__setitem__("ranks", {k: bool(v) for k, v in d["ranks"].items()}),
    "sink_unknown": _set("sink", "nobody"),
    "sink_external": _set("sink", "external"),
    "source_empty": _set("source", ""),
    "model_absolute": _set("stages.0.parts.0.model", "/etc/passwd"),
    "model_dotdot": _set("stages.0.parts.0.model", "../../../../etc/passwd"),
    "model_dotdot_inside": _set("stages.0.parts.0.model", "pi4/../pi4/stage000.onnx"),
    "model_missing": _set("stages.0.parts.0.model", "pi4/nothing.onnx"),
    "model_number": _set("stages.0.parts.0.model", 7),
    "reference_absolute": _set("reference_model", "/etc/hostname"),
    "reference_proc": _set("reference_model", "/proc/self/environ"),
    "dtype_float16": _set("notes.dtype", "float16"),
    "dtype_missing": lambda d: d["notes"].pop("dtype"),
    "format_2": _set("format", 2),
    "shape_zero": lambda d: d["shapes"].__setitem__(next(iter(d["shapes"])), [1, 3, 0, 32]),
    "shape_huge": lambda d: d["shapes"].__setitem__(next(iter(d["shapes"])), [1 << 20, 1 << 20, 1024, 1024]),
    "shape_negative": lambda d: d["shapes"].__setitem__(next(iter(d["shapes"])), [1, -3, 32, 32]),
    "shape_float": lambda d: d["shapes"].__setitem__(next(iter(d["shapes"])), [1, 3.0, 32, 32]),
    "input_shape_differs": lambda d: d["inputs"].__setitem__(next(iter(d["inputs"])), [1, 3, 64, 64]),
    "message_outside": lambda d: d["messages"][0].__setitem__("rows", [0, 10**6]),
    "message_to_self": lambda d: d["messages"][0].__setitem__("receiver", d["messages"][0]["sender"]),
    "message_stranger": lambda d: d["messages"][0].__setitem__("receiver", "stranger"),
    "message_id": lambda d: d["messages"][0].__setitem__("id", 99),
    "message_payload": lambda d: d["messages"][0].__setitem__("payload_bytes", 10**12),
    "stage_gap": lambda d: d["stages"][1].__setitem__("first", d["stages"][1]["first"] + 1),
    "stage_axis": lambda d: d["stages"][0].__setitem__("axis", "diagonal"),
    "part_twice": lambda d: d["stages"][0]["parts"].append(dict(d["stages"][0]["parts"][0])),
    "extra_key": _set("extra", 1),
    "missing_stages": lambda d: d.pop("stages"),
    "nan_latency": _set("predicted_latency_s", float("nan")),
    "inf_tau": _set("stages.0.predicted_tau_s", float("inf")),
    "devices_dupe": lambda d: d.__setitem__("devices", d["devices"] + d["devices"][:1]),
    "huge_int": _set("stages.0.first", 10**400),
}
for label, change in TAMPER.items():
    add(Case(f"run_manifest_{label}", RUN, files={"dep": deployment(edit=manifest_edit(change))}, outputs=[],
             limit=30))
add(
    Case("run_ok_json", RUN + ["--json"], "ok", {"dep": deployment()}, check=_run_json, outputs=[], limit=60),
    Case("run_ok_check_external", RUN + ["--check"], "ok", {"dep": deployment("external")},
         check=lambda r: None if "max abs error" in r.stdout else "no check line", outputs=[], limit=60),
    Case("run_manifest_fifo", RUN, files={"dep": deployment(edit=lambda d: ((d / "manifest.json").unlink(),
                                                                             os.mkfifo(d / "manifest.json")))},
         outputs=[], limit=15),
    Case("run_manifest_devzero", RUN, files={"dep": deployment(edit=lambda d: (
        (d / "manifest.json").unlink(), (d / "manifest.json").symlink_to("/dev/zero")))}, outputs=[], limit=15),
    Case("run_manifest_not_json", RUN, files={"dep": deployment(edit=lambda d: (d / "manifest.json").write_text(
        "{'stages': ["))}, outputs=[], limit=15),
    Case("run_manifest_nested", RUN, files={"dep": deployment(edit=lambda d: (d / "manifest.json").write_text(
        "[" * 100000 + "]" * 100000))}, outputs=[], limit=15),
    Case("run_manifest_huge", RUN, files={"dep": deployment(edit=lambda d: _sparse(100 * 2**20)(
        d / "manifest.json"))}, outputs=[], limit=15),
    Case("run_manifest_binary", RUN, files={"dep": deployment(edit=lambda d: (d / "manifest.json").write_bytes(
        bytes(range(256)) * 4))}, outputs=[], limit=15),
    Case("run_model_symlink_out", RUN, files={"dep": deployment(edit=_replace_model(_link("/etc/passwd")))},
         outputs=[], limit=15),
    Case("run_model_devzero", RUN, files={"dep": deployment(edit=_replace_model(_link("/dev/zero")))},
         outputs=[], limit=15),
    Case("run_model_fifo", RUN, files={"dep": deployment(edit=_replace_model(_fifo))}, outputs=[], limit=15),
    Case("run_model_garbage", RUN, files={"dep": deployment(edit=_replace_model(_text("not a model")))},
         outputs=[], limit=60),
    Case("run_model_dir", RUN, files={"dep": deployment(edit=_replace_model(_mkdir))}, outputs=[], limit=15),
    Case("run_folder_missing", ["run", "{dir}/nothing"], outputs=[], limit=15),
    Case("run_folder_file", ["run", "{dir}/f"], files={"f": "x"}, outputs=[], limit=15),
    Case("run_folder_loop", ["run", "{dir}/loop"], files={"loop": _loop}, outputs=[], limit=15),
    Case("run_folder_devnull", ["run", "/dev/null"], outputs=[], limit=15),
    Case("run_memory_budget_tiny", RUN + ["--memory-budget", "1MB"], files={"dep": deployment()}, outputs=[],
         limit=15),
    # ---- run --input-shape: the plan deployed again at another shape, in a temporary folder
    Case("run_shape_ok", RUN + ["--input-shape", "1,3,16,16", "--instance", "{dir}/i.yaml", "--json", "--check"],
         "ok", {"dep": deployment(), "i.yaml": instance()}, check=_run_checked, outputs=[], limit=90),
    Case("run_shape_smallest", RUN + ["--input-shape", "1,3,4,4", "--instance", "{dir}/i.yaml", "--json", "--check"],
         "ok", {"dep": deployment(), "i.yaml": instance()}, check=_run_checked, outputs=[], limit=90,
         note="the zoo's smallest input: layer 0's 32 rows split 16/16 become 2/2"),
    Case("run_shape_huge", RUN + ["--input-shape", "1,3,1048576,1048576", "--instance", "{dir}/i.yaml"],
         files={"dep": deployment(), "i.yaml": instance()}, outputs=[], limit=30),
    Case("run_shape_other_instance", RUN + ["--input-shape", "1,3,16,16", "--instance", "{dir}/i.yaml"],
         files={"dep": deployment(), "i.yaml": instance(dev1="other")}, outputs=[], limit=30),
    Case("run_shape_instance_fifo", RUN + ["--input-shape", "1,3,16,16", "--instance", "{dir}/i.yaml"],
         files={"dep": deployment(), "i.yaml": _fifo}, outputs=[], limit=15),
    Case("run_shape_without_instance", RUN + ["--input-shape", "1,3,16,16"], files={"dep": deployment()},
         outputs=[], limit=15),
    # ---- run --input
    Case("run_input_ok", RUN + ["--input", "{dir}/x.npy", "--json"], "ok",
         {"dep": deployment(), "x.npy": _npy(lambda: __import__("numpy").ones((1, 3, 32, 32), "float32"))},
         check=_run_json, outputs=[], limit=60),
    Case("run_input_npz", RUN + ["--input", "{dir}/x.npz"], files={"dep": deployment(), "x.npz": _npz},
         outputs=[], limit=15),
    Case("run_input_npz_named_npy", RUN + ["--input", "{dir}/x.npy"], files={"dep": deployment(), "x.npy": _npz},
         outputs=[], limit=15),
    Case("run_input_strings", RUN + ["--input", "{dir}/x.npy"], files={"dep": deployment(), "x.npy": _npy(
        lambda: __import__("numpy").full((1, 3, 32, 32), "abc"))}, outputs=[], limit=15),
    Case("run_input_objects", RUN + ["--input", "{dir}/x.npy"], files={"dep": deployment(), "x.npy": _npy(
        lambda: __import__("numpy").array([{"a": 1}], dtype=object))}, outputs=[], limit=15),
    Case("run_input_shape", RUN + ["--input", "{dir}/x.npy"], files={"dep": deployment(), "x.npy": _npy(
        lambda: __import__("numpy").zeros((1, 3, 8, 8), "float32"))}, outputs=[], limit=15),
    Case("run_input_text", RUN + ["--input", "{dir}/x.npy"], files={"dep": deployment(), "x.npy": "1 2 3"},
         outputs=[], limit=15),
    Case("run_input_fifo", RUN + ["--input", "{dir}/x.npy", "--timeout", "5"],
         files={"dep": deployment(), "x.npy": _fifo}, outputs=[], limit=15),
    Case("run_input_devzero", RUN + ["--input", "{dir}/x.npy", "--timeout", "5"],
         files={"dep": deployment(), "x.npy": _link("/dev/zero")}, outputs=[], limit=15),
    Case("run_input_huge", RUN + ["--input", "{dir}/x.npy"], files={"dep": deployment(),
                                                                    "x.npy": _sparse(2 * 10**9)},
         outputs=[], limit=15),
    Case("run_input_nan", RUN + ["--input", "{dir}/x.npy", "--json", "--check"], "ok",
         {"dep": deployment(), "x.npy": _npy(lambda: __import__("numpy").full((1, 3, 32, 32), float("nan"),
                                                                                "float32"))},
         check=_strict_json, outputs=[], limit=60, note="NaN in, NaN out: --json stays strict JSON"),
    # ---- run: limits, signals, no process left
    Case("run_timeout_hang", RUN + ["--timeout", "6"], files={"dep": deployment()},
         env={"MILP_PLANNER_DEPLOY_FAULT": "hang:0"}, outputs=[], limit=6 * 1.05 + SLACK + 6),
    Case("run_rank_fails", RUN, files={"dep": deployment()}, env={"MILP_PLANNER_DEPLOY_FAULT": "fail:1"},
         outputs=[], limit=60),
    # a rank that hangs keeps the run going until the signal comes
    Case("run_sigint", ["run", "{dir}/dep", "--timeout", "300"], files={"dep": deployment()},
         env={"MILP_PLANNER_DEPLOY_FAULT": "hang:0"}, signal=(signal.SIGINT, 6.0), outputs=[], limit=40),
    Case("run_sigterm", ["run", "{dir}/dep", "--timeout", "300"], files={"dep": deployment()},
         env={"MILP_PLANNER_DEPLOY_FAULT": "hang:1"}, signal=(signal.SIGTERM, 6.0), outputs=[], limit=40),
    Case("run_sigint_early", ["run", "{dir}/dep", "--timeout", "300"], files={"dep": deployment()},
         env={"MILP_PLANNER_DEPLOY_FAULT": "hang:0"}, signal=(signal.SIGINT, 1.5), outputs=[], limit=40,
         note="while the ranks start"),
    Case("run_sigterm_reading", ["run", "{dir}/dep", "--timeout", "300", "--check"], files={"dep": deployment()},
         env={"MILP_PLANNER_DEPLOY_FAULT": "hang:0"}, signal=(signal.SIGTERM, 1.0), outputs=[], limit=40,
         note="about when mpiexec starts"),
)

# ---- profile
add(
    Case("profile_ok_yaml", PROFILE + ["--out", "{dir}/host.yaml"], "ok", outputs=["host.yaml"],
         complete=_profile_loads("host.yaml")),
    Case("profile_ok_json", PROFILE + ["--out", "{dir}/host.json"], "ok", outputs=["host.json"],
         complete=_all(_json_file("host.json"), _profile_loads("host.json"))),
    Case("profile_out_txt", PROFILE + ["--out", "{dir}/host.txt"], outputs=["host.txt"]),
    Case("profile_out_is_model", ["profile", "{dir}/m.onnx", "--repeats", "1", "--warmup", "0", "--fractions", "1",
                                  "--no-context", "-q", "--out", "{dir}/m.onnx"], files={"m.onnx": _zoo_onnx()},
         outputs=[], note="profile m.onnx --out m.onnx overwrote the model"),
    Case("profile_out_link_to_model", ["profile", "{dir}/m.onnx", "-q", "--out", "{dir}/m.yaml"],
         files={"m.onnx": _zoo_onnx(), "m.yaml": _link("m.onnx")}, outputs=[]),
    Case("profile_out_devnull_node", PROFILE + ["--out", "{dir}/null.yaml"], files={"null.yaml": _chardev},
         outputs=["null.yaml"]),
    Case("profile_out_fifo", PROFILE + ["--out", "{dir}/f.yaml"], files={"f.yaml": _fifo}, outputs=["f.yaml"]),
    Case("profile_out_dir", PROFILE + ["--out", "{dir}/d.yaml"], files={"d.yaml": _mkdir}, outputs=["d.yaml"]),
    Case("profile_out_symlink", PROFILE + ["--out", "{dir}/l.yaml"], files={"t.yaml": "x: 1\n", "l.yaml": _link("t.yaml")},
         outputs=["l.yaml"]),
    Case("profile_model_fifo", ["profile", "{dir}/m.onnx", "--out", "{dir}/h.yaml"], files={"m.onnx": _fifo},
         outputs=["h.yaml"], limit=15),
    Case("profile_model_devzero", ["profile", "{dir}/m.onnx", "--out", "{dir}/h.yaml"],
         files={"m.onnx": _link("/dev/zero")}, outputs=["h.yaml"], limit=15),
    Case("profile_model_dir", ["profile", "{dir}/m.onnx", "--out", "{dir}/h.yaml"], files={"m.onnx": _mkdir},
         outputs=["h.yaml"]),
    Case("profile_model_loop", ["profile", "{dir}/m.onnx", "--out", "{dir}/h.yaml"], files={"m.onnx": _loop},
         outputs=["h.yaml"]),
    Case("profile_model_external_3gb", ["profile", "{dir}/m.onnx", "--out", "{dir}/h.yaml"],
         files={"m.onnx": _external_weights(3 * 10**9)}, outputs=["h.yaml"], limit=20),
    Case("profile_layer_named_1e3", ["profile", "{dir}/m.onnx", "--repeats", "1", "--warmup", "0", "--fractions", "1",
                                     "--no-context", "-q", "--out", "{dir}/h.yaml"], "ok",
         {"m.onnx": _renamed_onnx({"conv1": "1e3", "conv2": "true", "pool1": "null", "conv3": "0x10",
                                   "pool2": " lead", "conv4": "- dash"})},
         outputs=["h.yaml"], complete=_profile_loads("h.yaml", "m.onnx"),
         note="profile wrote 1e3 unquoted, then refused its own file"),
)
# ---- device profile paths in instances (no file content echoed)
PROF = ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "--compare", "none"]
for label, target in (("passwd", "/etc/passwd"), ("group", "/etc/group"), ("hostname", "/etc/hostname")):
    add(Case(f"profile_path_{label}", PROF, files={"i.yaml": instance(profile0=json.dumps(target))}, outputs=[],
             check=_stderr_lacks("root:", "daemon", "x:0:"), note="an error never shows the file's content"))
add(
    Case("profile_path_secret_yaml", PROF, files={"i.yaml": instance(profile0="s.yaml"),
                                                  "s.yaml": "password: hunter2-SECRET\n"},
         outputs=[], check=_stderr_lacks("hunter2")),
    Case("profile_path_secret_scalar", PROF, files={"i.yaml": instance(profile0="s.yaml"),
                                                    "s.yaml": "hunter2-SECRET token\n"},
         outputs=[], check=_stderr_lacks("hunter2")),
    Case("profile_path_secret_syntax", PROF, files={"i.yaml": instance(profile0="s.yaml"),
                                                    "s.yaml": "key: [hunter2-SECRET\n"},
         outputs=[], check=_stderr_lacks("hunter2")),
    Case("profile_path_nul", PROF, files={"i.yaml": instance(profile0='"a\\0b.yaml"')}, outputs=[]),
    Case("profile_path_loop", PROF, files={"i.yaml": instance(profile0="l.yaml"), "l.yaml": _loop}, outputs=[]),
    Case("profile_path_fifo", PROF, files={"i.yaml": instance(profile0="f.yaml"), "f.yaml": _fifo}, outputs=[],
         limit=15),
    Case("profile_path_devzero", PROF, files={"i.yaml": instance(profile0="z.yaml"), "z.yaml": _link("/dev/zero")},
         outputs=[], limit=15),
    Case("profile_path_dir", PROF, files={"i.yaml": instance(profile0="d.yaml"), "d.yaml": _mkdir}, outputs=[]),
    Case("profile_path_huge", PROF, files={"i.yaml": instance(profile0="h.yaml"), "h.yaml": _sparse(10**9)},
         outputs=[], limit=15),
    Case("profile_table_other_size", ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "--compare", "none"],
         files={"i.yaml": instance(model="zoo:tiny_chain:64", profile0="h.yaml"),
                "h.yaml": "measured: {model: 'zoo:tiny_chain', input_shape: [1, 3, 32, 32]}\n"
                          "compute: {model: table, table: {conv1: 1.0e-4, conv2: 1.0e-4, pool1: 1.0e-5, "
                          "conv3: 1.0e-4, pool2: 1.0e-5, conv4: 1.0e-4}}\n"},
         outputs=[], note="a table measured at 32x32 used at 64x64"),
    Case("profile_table_other_size_source", ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "--compare",
                                             "none"],
         files={"i.yaml": instance(model="zoo:tiny_chain:64", profile0="h.yaml"),
                "h.yaml": "source: measured on h with milp-planner profile (zoo:tiny_chain, input [1, 3, 32, 32])\n"
                          "compute: {model: table, table: {conv1: 1.0e-4, conv2: 1.0e-4, pool1: 1.0e-5, "
                          "conv3: 1.0e-4, pool2: 1.0e-5, conv4: 1.0e-4}}\n"},
         outputs=[], note="a file of an earlier version: the size is read from its source"),
    Case("profile_table_100k_points", ["solve", "{dir}/i.yaml", "--planner", "dp", "-q", "--compare", "none",
                                       "--time-limit", "20"],
         files={"i.yaml": instance(profile0="h.yaml"),
                "h.yaml": "compute:\n  model: table\n  macs_per_s: 1.0e9\n  table:\n    conv1: ["
                          + ", ".join(f"[{(i + 1) / 100000:.6f}, {(i + 1) * 1e-9:.3e}]" for i in range(100000))
                          + "]\n"},
         outputs=[], limit=20 * 1.05 + SLACK, slow=True, note="100,000 points made solve run past 120 s"),
    Case("profile_table_100k_points_json", ["solve", "{dir}/i.yaml", "--planner", "dp", "-q", "--compare", "none",
                                            "--time-limit", "20"],
         files={"i.yaml": instance(profile0="h.json"),
                "h.json": json.dumps({"compute": {"model": "table", "macs_per_s": 1e9, "table": {
                    "conv1": [[(i + 1) / 100000, (i + 1) * 1e-9] for i in range(100000)]}}})},
         outputs=[], limit=20 * 1.05 + SLACK),
    Case("profile_table_1000_points", ["solve", "{dir}/i.yaml", "--planner", "dp", "-q", "--compare", "none",
                                       "--time-limit", "10", "--json"], "ok",
         {"i.yaml": instance(profile0="h.json"),
          "h.json": json.dumps({"compute": {"model": "table", "macs_per_s": 1e9, "table": {
              name: [[(i + 1) / 1000, (i + 1) * 1e-7] for i in range(1000)]
              for name in ("conv1", "conv2", "pool1", "conv3", "pool2", "conv4")}}})},
         outputs=[], check=_solve_time_within(10), limit=10 * 1.05 + SLACK, slow=True,
         note="the largest table allowed, within the limit"),
)

# ---- pareto
PARETO_OK = _all(_marker_lists_all("front", ["front.csv", "front.json", "front.png"]),
                _file_has("front/front.json", "points"))
add(
    Case("pareto_ok", PARETO + ["--out", "{dir}/front"], "ok", {"i.yaml": instance()}, outputs=["front"],
         complete=PARETO_OK, limit=60),
    Case("pareto_rerun", PARETO + ["--out", "{dir}/front"], "ok",
         {"i.yaml": instance(), "front": lambda p: _pareto_folder(p)}, outputs=["front"], complete=PARETO_OK,
         limit=60),
    Case("pareto_out_holds_input", ["pareto", "{dir}/front/front.json", "--objectives", "latency,energy",
                                    "--points", "2", "--out", "{dir}/front"],
         files={"front/front.json": json.dumps({"name": "x", "model": "zoo:tiny_chain", "devices": [
             {"name": "a", "profile": "rpi4"}, {"name": "b", "profile": "rpi5"}],
             "network": {"bandwidth_mbps": 100}})}, outputs=["front"],
         note="pareto --out DIR overwrote an input named DIR/front.json"),
    Case("pareto_out_user_files", PARETO + ["--out", "{dir}/front"], files={"i.yaml": instance(),
                                                                          "front/notes.md": "mine"},
         outputs=["front"]),
    Case("pareto_out_dot", PARETO + ["--out", "."], files={"i.yaml": instance()}, outputs=[]),
    Case("pareto_out_file", PARETO + ["--out", "{dir}/f"], files={"i.yaml": instance(), "f": "x"}, outputs=["f"]),
    Case("pareto_out_symlink", PARETO + ["--out", "{dir}/l"], files={"i.yaml": instance(), "t": _mkdir,
                                                                    "l": _link("t")}, outputs=["l"]),
    Case("pareto_out_fifo", PARETO + ["--out", "{dir}/f"], files={"i.yaml": instance(), "f": _fifo},
         outputs=["f"]),
    Case("pareto_out_of_report", PARETO + ["--out", "{dir}/rep"], files={"i.yaml": instance(),
                                                                        "rep": lambda p: _report_folder(p)},
         outputs=["rep"], note="a folder written by report is not pareto's"),
    Case("pareto_instance_fifo", ["pareto", "{dir}/i.yaml", "--out", "{dir}/front"], files={"i.yaml": _fifo},
         outputs=["front"], limit=15),
)

# ---- report
REPORT_OK = _marker_lists_all("rep", ["report.html", "report.md", "results.csv"])
add(
    Case("report_ok", REPORT + ["--out", "{dir}/rep"], "ok", {"i.yaml": instance()}, outputs=["rep"],
         complete=REPORT_OK, limit=90),
    Case("report_rerun", REPORT + ["--out", "{dir}/rep"], "ok", {"i.yaml": instance(), "rep": lambda p: _report_folder(p)},
         outputs=["rep"], complete=REPORT_OK, limit=90),
    Case("report_out_holds_input", ["report", "{dir}/rep/pareto.json", "--planners", "offload", "-q",
                                    "--workers", "1", "--out", "{dir}/rep"],
         files={"rep/pareto.json": json.dumps({"name": "x", "model": "zoo:tiny_chain", "devices": [
             {"name": "a", "profile": "rpi4"}, {"name": "b", "profile": "rpi5"}],
             "network": {"bandwidth_mbps": 100}})}, outputs=["rep"],
         note="report --out DIR overwrote an input named DIR/pareto.json"),
    Case("report_out_user_files", REPORT + ["--out", "{dir}/rep"], files={"i.yaml": instance(), "rep/a.txt": "x"},
         outputs=["rep"]),
    Case("report_out_dot", REPORT + ["--out", "."], files={"i.yaml": instance()}, outputs=[]),
    Case("report_out_of_deploy", REPORT + ["--out", "{dir}/dep"], files={"i.yaml": instance(), "dep": deployment()},
         outputs=["dep"]),
    Case("report_cache_devnull", REPORT + ["--out", "{dir}/rep", "--cache", "{dir}/c"],
         files={"i.yaml": instance(), "c": _chardev}, outputs=["rep", "c"]),
    Case("report_markup_names", REPORT + ["--out", "{dir}/rep"], "ok",
         {"i.yaml": instance(name="<script>alert(1)</script> [x](javascript:alert(1)) *b* |c|")},
         outputs=["rep"], complete=_all(REPORT_OK, _file_has("rep/report.md", "\\<script\\>", lacks=("<script>",)),
                                        _file_has("rep/report.html", "&lt;script&gt;", lacks=("<script>",))),
         limit=90),
    Case("report_formula_name", REPORT + ["--out", "{dir}/rep"], "ok", {"i.yaml": instance(name='=HYPERLINK("http://x")')},
         outputs=["rep"], complete=_all(REPORT_OK, _file_has("rep/results.csv", "'=HYPERLINK"),
                                        lambda r: _csv_no_formula(r.dir / "rep" / "results.csv")), limit=90),
    Case("report_formula_names_all", REPORT + ["--out", "{dir}/rep"], "ok",
         {"i.yaml": instance(name="@SUM(A1)", dev0="+cmd", dev1="-2+3")},
         outputs=["rep"], complete=_all(REPORT_OK, lambda r: _csv_no_formula(r.dir / "rep" / "results.csv")),
         limit=90),
    Case("report_nan_cache", REPORT + ["--out", "{dir}/rep"], "ok",
         {"i.yaml": instance(), "rep": lambda p: _report_folder(p, poison="nan")}, outputs=["rep"],
         complete=REPORT_OK, limit=90, note="a cache record with NaN is a miss, not an internal error"),
    Case("report_bad_cache_record", REPORT + ["--out", "{dir}/rep"], "ok",
         {"i.yaml": instance(), "rep": lambda p: _report_folder(p, poison="plan")}, outputs=["rep"],
         complete=REPORT_OK, limit=90),
    Case("report_cache_fifo_record", REPORT + ["--out", "{dir}/rep"], "either",
         {"i.yaml": instance(), "rep": lambda p: _report_folder(p, poison="fifo")}, outputs=["rep"],
         complete=REPORT_OK, limit=90),
)

# ---- solve --out and zoo export
SOLVE = ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "--compare", "none"]
ZOO = ["zoo", "export", "tiny_chain"]
add(
    Case("solve_out_ok", SOLVE + ["--out", "{dir}/plan.json"], "ok", {"i.yaml": instance()}, outputs=["plan.json"],
         complete=_json_file("plan.json")),
    Case("solve_out_device_node", SOLVE + ["--out", "{dir}/null"], files={"i.yaml": instance(), "null": _chardev},
         outputs=["null"], note="as root, --out /dev/null replaced the node"),
    Case("solve_out_fifo", SOLVE + ["--out", "{dir}/f"], files={"i.yaml": instance(), "f": _fifo}, outputs=["f"]),
    Case("solve_out_symlink", SOLVE + ["--out", "{dir}/l.json"], files={"i.yaml": instance(), "t.json": "{}",
                                                                       "l.json": _link("t.json")},
         outputs=["l.json"]),
    Case("solve_out_dangling_symlink", SOLVE + ["--out", "{dir}/l.json"],
         files={"i.yaml": instance(), "l.json": _link("/tmp/milp-planner-fuzz-nowhere/x.json")}, outputs=["l.json"]),
    Case("solve_out_hardlink_instance", SOLVE + ["--out", "{dir}/h.yaml"],
         files={"i.yaml": instance(), "h.yaml": lambda p: os.link(p.parent / "i.yaml", p)}, outputs=["h.yaml"]),
    Case("solve_out_model", SOLVE + ["--out", "{dir}/m.onnx"],
         files={"i.yaml": instance(model="m.onnx"), "m.onnx": _zoo_onnx()}, outputs=[]),
    Case("solve_out_profile", SOLVE + ["--out", "{dir}/h.yaml"],
         files={"i.yaml": instance(profile0="h.yaml"), "h.yaml": "compute: {macs_per_s: 1.0e9}\n"}, outputs=[]),
    Case("solve_out_nul", SOLVE + ["--out", "{dir}/a\x01b.json"], "either", {"i.yaml": instance()},
         outputs=["a\x01b.json"]),
    Case("zoo_export_ok", ZOO + ["{dir}/m.onnx"], "ok", outputs=["m.onnx"]),
    Case("zoo_export_device_node", ZOO + ["{dir}/null"], files={"null": _chardev}, outputs=["null"]),
    Case("zoo_export_fifo", ZOO + ["{dir}/f"], files={"f": _fifo}, outputs=["f"]),
    Case("zoo_export_symlink", ZOO + ["{dir}/l.onnx"], files={"t.onnx": "x", "l.onnx": _link("t.onnx")},
         outputs=["l.onnx"]),
    Case("zoo_export_dir", ZOO + ["{dir}/d"], files={"d": _mkdir}, outputs=["d"]),
    Case("zoo_export_loop", ZOO + ["{dir}/l.onnx"], files={"l.onnx": _loop}, outputs=["l.onnx"]),
)

# ---- inspect and solve: the ONNX model against its own declarations, bounded reads, escapes
from fuzz_corpus.onnx_models import KINDS  # noqa: E402

VALID = {"ok", "lstm_only", "gru_only", "fp16", "uint8_input", "control_names", "markup_names", "many_names",
         "external_missing"}  # inspect never reads weight data (tests/test_import.py)
NAMED = {"lstm_yh_only": "LSTM", "duplicate_names": "'conv'", "produced_twice": "'a'", "channels_mismatch": "conv1"}
for kind in KINDS:
    must = NAMED.get(kind)
    add(Case(f"inspect_onnx_{kind}", ["inspect", "{dir}/m.onnx"], "ok" if kind in VALID else "error",
             {"m.onnx": onnx_file(kind)}, outputs=[],
             check=_all(_stdout_lacks_escape, (lambda r, m=must: None if m in r.stderr else f"{m} not named"))
             if must else _stdout_lacks_escape))
add(
    Case("inspect_json_control_names", ["inspect", "{dir}/m.onnx", "--json"], "ok",
         {"m.onnx": onnx_file("control_names")}, outputs=[], check=_strict_json),
    Case("solve_onnx_control_names", ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "--compare", "none",
                                      "--detail"], "ok",
         {"i.yaml": instance(model="m.onnx"), "m.onnx": onnx_file("control_names")}, outputs=[],
         check=_stdout_lacks_escape),
    Case("solve_onnx_channels_mismatch", ["solve", "{dir}/i.yaml", "--planner", "offload", "-q"],
         files={"i.yaml": instance(model="m.onnx"), "m.onnx": onnx_file("channels_mismatch")}, outputs=[]),
    Case("inspect_fifo", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _fifo}, outputs=[], limit=15),
    Case("inspect_devzero", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _link("/dev/zero")}, outputs=[],
         limit=15, note="read to 5.9 GB before failing"),
    Case("inspect_devzero_json", ["inspect", "{dir}/m.json"], files={"m.json": _link("/dev/zero")}, outputs=[],
         limit=15),
    Case("inspect_loop", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _loop}, outputs=[]),
    Case("inspect_nul", ["inspect", "{dir}/m\x01.onnx"], outputs=[]),
    Case("inspect_sparse_3gb", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _sparse(3 * 10**9)}, outputs=[],
         limit=15),
    Case("inspect_250k_nodes", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _big_graph(250_000)}, outputs=[],
         limit=60, note="more nodes than an import's budget"),
    Case("inspect_external_3gb", ["inspect", "{dir}/m.onnx"], "ok", {"m.onnx": _external_weights(3 * 10**9)},
         outputs=[], limit=30, note="inspect never reads weight data"),
    Case("inspect_resnet50_rlimit", ["inspect", "zoo:resnet50"], "either", outputs=[], rlimit_as=2 * 10**9,
         limit=60, note="under ulimit -v 2 GB: a table or one line, never a crash"),
    Case("solve_warning_one_line", ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "--compare", "none"],
         "ok", {"i.yaml": instance(model="m.onnx"),
                "m.onnx": _renamed_onnx({})},
         outputs=[], check=_stderr_lacks("warnings.warn", "Warning:")),
)
# ---- limits of solve
add(
    Case("solve_threads_1024_rlimit", ["solve", "{dir}/i.yaml", "--planner", "milp", "-q", "--compare", "none",
                                       "--threads", "1024"], "either", {"i.yaml": instance()}, outputs=[],
         rlimit_as=4 * 10**9, limit=60, note="aborted with exit 134 and no message"),
    Case("solve_threads_1024", ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "--compare", "none",
                                "--threads", "1024"], "ok", {"i.yaml": instance()}, outputs=[],
         rlimit_as=64 * 10**9, note="room for 1024 stacks: accepted"),
)
TIME_LIMIT = 10.0
for name in ("aofl", "distredge-lcpss", "distredge", "hidp", "autodice", "pipeedge", "coedge", "diapason",
             "random", "hybrid", "lp-round", "coopai", "modnn", "deepthings", "deeperthings", "neurosurgeon",
             "offload", "dp", "milp", "cpsat", "bruteforce"):
    add(Case(f"time_limit_{name}", ["solve", str(Path(__file__).resolve().parents[2] / "instances" / "autodice" /
                                             "densenet121-xaviernx-8.yaml"), "--planner", name, "--time-limit",
                                    str(TIME_LIMIT), "--compare", "none", "--json", "-q"], "ok",
             outputs=[], check=_solve_time_within(TIME_LIMIT), limit=TIME_LIMIT * 1.05 + SLACK + 10, slow=True,
             note="limit + 5 % + 2 s for the planner (solve_time_s); the process may add its start"))


def _csv_no_formula(path: Path) -> str | None:
    import csv

    with open(path, newline="") as f:
        for row in csv.reader(f):
            for cell in row:
                if cell[:1] in ("=", "+", "@") or (cell[:1] == "-" and not _number(cell)):
                    return f"a formula cell {cell[:30]!r} in {path.name}"
    return None


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _pareto_folder(p: Path) -> None:
    """A folder a previous ``pareto`` wrote (its marker and its three files)."""
    p.mkdir()
    for name in ("front.csv", "front.json", "front.png"):
        (p / name).write_text("old")
    (p / ".milp-planner-output.json").write_text(json.dumps(
        {"format": 1, "command": "pareto", "files": ["front.csv", "front.json", "front.png"], "keep": []}))


def _report_folder(p: Path, poison: str | None = None) -> None:
    """A folder a previous ``report`` wrote; ``poison``: a damaged cache record for the run."""
    p.mkdir()
    files = ["report.html", "report.md", "results.csv", "figures/gaps.png"]
    for name in files:
        (p / name).parent.mkdir(parents=True, exist_ok=True)
        (p / name).write_text("old")
    (p / ".milp-planner-output.json").write_text(json.dumps(
        {"format": 1, "command": "report", "files": files, "keep": [".cache"]}))
    if poison is None:
        return
    from milp_planner.instance import load_instance
    from milp_planner.report.tasks import make_tasks

    inst = load_instance(p.parent / "i.yaml")
    task = make_tasks([inst], ["offload"], time_limit=20.0, repeats=3)[0]
    cache = p / ".cache"
    cache.mkdir()
    target = cache / f"{task.key}.json"
    if poison == "fifo":
        os.mkfifo(target)
        return
    rec = {"format": 1, "key": task.key, "task": task.to_dict(), "status": "feasible", "message": "",
           "traceback": "", "wall_s": 0.1, "killed": False, "versions": {}, "host": "h", "finished_at": 0,
           "result": {"status": "feasible", "objective": float("nan"), "bound": float("inf"),
                      "metrics": {"latency_s": float("nan"), "feasible": True},
                      "plan": {"stages": [{"first": 0.0, "last": 16.0, "parts": [{"device": 3}]}]}}}
    if poison == "nan":
        rec["result"]["plan"] = None
    target.write_text(json.dumps(rec, allow_nan=True))


def by_name() -> dict[str, Case]:
    return {c.name: c for c in CASES}


assert len(by_name()) == len(CASES), "case names must be unique"
_ = struct  # (kept for binary writers)

"""The corpus: hostile or extreme inputs from issue #16, each with what a correct tool does.

A ``Case`` writes its input files into a fresh directory, runs ``python -m milp_planner ARGV``
there and says what it expects:

- ``error``: a clean refusal (exit 2, one line on stderr, no traceback);
- ``ok``: a run that succeeds (exit 0 or 1) and passes ``check`` when one is given;
- ``either``: a clean refusal or a run that passes ``check`` (e.g. ``!!bool yes`` may be read as
  true or refused, but never as false).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

BASE = """\
name: base
model: zoo:tiny_chain
devices:
  - name: {dev0}
    compute: {{macs_per_s: {macs}}}
    memory_mb: {mem}
    power_w: {{compute: {power}, tx: 1, rx: 1}}
  - name: {dev1}
    profile: rpi5
network:
  bandwidth_mbps: {bw}
  latency_ms: 0.5
  source: {{device: {dev0}}}
  sink: {{device: {dev0}}}
search: {{fusion_limit: 2, max_parts: 2, splits: [equal], axes: [rows]}}
constraints: {{memory: {memory_flag}}}
"""


def instance(**over) -> str:
    """The base instance with some fields replaced (values are YAML text)."""
    fields = dict(dev0="pi4", dev1="pi5", macs="5.0e9", mem=512, power=4, bw=100, memory_flag="true")
    fields.update(over)
    return BASE.format(**fields)


def plan(stages, **extra) -> str:
    return json.dumps({"instance": "base", "stages": stages, **extra})


WHOLE = [{"first": 0, "last": 5, "axis": "none", "parts": [{"device": "pi4"}]}]


def _stdout_has(text: str) -> Callable:
    def check(res) -> str | None:
        return None if text in res.stdout else f"{text!r} not in the output"
    return check


def _strict_json(res) -> str | None:
    def no_const(name):
        raise ValueError(f"non-JSON constant {name}")
    try:
        json.loads(res.stdout, parse_constant=no_const)
    except ValueError as e:
        return f"stdout is not JSON: {e}"
    return None


def _not_optimal(res) -> str | None:
    try:
        status = json.loads(res.stdout)["status"]
    except (ValueError, KeyError):
        return "no JSON status"
    return None if status not in ("optimal", "feasible") else f"memory caps ignored: status {status}"


def _nothing_written(name: str) -> Callable:
    def check(res) -> str | None:
        return f"{name} was written" if (res.dir / name).exists() else None
    return check


@dataclass
class Case:
    name: str
    argv: list[str]  # "{dir}" is replaced by the case's directory
    expect: str = "error"  # error | ok | either
    files: dict[str, str | bytes | Callable[[Path], None]] = field(default_factory=dict)
    check: Callable | None = None  # (result) -> None if good, else the reason
    env: dict[str, str] = field(default_factory=dict)
    stdout: str = "pipe"  # pipe | closed | broken
    note: str = ""
    # issue #30: what the command may write (paths relative to the case's directory; None: the
    # old rule, inputs unchanged and no temporary file left); anything else added, changed or
    # removed is a write outside the named output
    outputs: list[str] | None = None
    complete: Callable | None = None  # (result) -> None if the outputs are whole, else the reason
    limit: float | None = None  # seconds the process may take before it is an overrun
    signal: tuple[int, float] | None = None  # (signal, seconds after the start) sent to the process group
    rlimit_as: int | None = None  # bytes of address space (ulimit -v) for a fresh interpreter
    slow: bool = False  # left out of the default test run (``-m slow``)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _onnx(mutate: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        import onnx
        from milp_planner.model import zoo

        zoo.export("tiny_chain", str(path))
        if mutate == "truncated":
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])
            return
        m = onnx.load(str(path))
        if mutate == "no_outputs":
            del m.graph.output[:]
        elif mutate == "opset999":
            m.opset_import[0].version = 999
        elif mutate == "no_nodes":
            del m.graph.node[:]
        onnx.save(m, str(path))
    return make


def _nested(depth: int) -> str:
    return "name: x\nmodel: zoo:tiny_chain\ndevices: " + "[" * depth + "]" * depth + "\n"


BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""

# the same bomb as one flow sequence under a key the reader looks at
LAUGHS_FLOW = "[&a [lol,lol,lol,lol,lol,lol,lol,lol,lol], " + ", ".join(
    f"&{b} [{', '.join('*' + a for _ in range(9))}]" for a, b in zip("abcdefgh", "bcdefghi")) + "]"

MERGE_KEYS = """\
name: merged
model: zoo:tiny_chain
devices:
  - &base {name: a, compute: {macs_per_s: 5.0e9}, memory_mb: 512}
  - {<<: *base, name: b}
  - <<: *base
    name: c
    memory_mb: 256
network: {bandwidth_mbps: 100}
"""

# every compute time 0 and one device: the period is 0 and the throughput infinite
ZERO_PERIOD = """\
name: zero
model: zoo:tiny_chain
devices:
  - name: only
    compute: {model: table, table: {conv1: 0, conv2: 0, pool1: 0, conv3: 0, pool2: 0, conv4: 0}}
"""

SOLVE = ["solve", "{dir}/i.yaml", "--planner", "dp", "-q"]
EVAL = ["evaluate", "{dir}/i.yaml", "{dir}/p.json"]

CASES: list[Case] = [
    # -- controls: valid input runs
    Case("ok_solve", SOLVE, "ok", {"i.yaml": instance()}),
    Case("ok_solve_json", SOLVE + ["--json"], "ok", {"i.yaml": instance()}, check=_strict_json),
    Case("ok_evaluate", EVAL, "ok", {"i.yaml": instance(), "p.json": plan(WHOLE)}),
    Case("ok_solve_out", SOLVE + ["--out", "{dir}/plan.json"], "ok", {"i.yaml": instance()},
         check=lambda r: None if (r.dir / "plan.json").exists() else "plan not written"),
    # -- numbers
    Case("macs_1e400", SOLVE, files={"i.yaml": instance(macs="1e400")}),
    Case("bandwidth_1e-330", SOLVE, files={"i.yaml": instance(bw="1e-330")}),
    Case("memory_1e400", SOLVE, files={"i.yaml": instance(mem="1e400")}),
    Case("power_1e400", SOLVE, files={"i.yaml": instance(power="1e400")}),
    Case("int_5000_digits", SOLVE, files={"i.yaml": instance(mem="7" * 5000)}),
    Case("macs_inf", SOLVE, files={"i.yaml": instance(macs=".inf")}),
    Case("bandwidth_negative", SOLVE, files={"i.yaml": instance(bw="-3")}),
    Case("exponent_1e999999999", SOLVE, files={"i.yaml": instance(macs="1e999999999")}),
    Case("exponent_neg_huge", SOLVE, files={"i.yaml": instance(bw="1e-999999999")}),
    # -- YAML
    Case("bool_yes_memory", SOLVE + ["--json"], "either",
         {"i.yaml": instance(mem="0.001", memory_flag="!!bool yes")}, check=_not_optimal,
         note="!!bool yes must not switch the memory caps off"),
    Case("bool_plain_yes", SOLVE + ["--json"], "either",
         {"i.yaml": instance(mem="0.001", memory_flag="yes")}, check=_not_optimal),
    Case("billion_laughs", SOLVE, files={"i.yaml": instance() + BILLION_LAUGHS.replace("a:", "x-a:", 1)}),
    Case("billion_laughs_top", SOLVE, files={"i.yaml": BILLION_LAUGHS}),
    Case("billion_laughs_used", SOLVE, files={"i.yaml": instance() + "description: " + LAUGHS_FLOW + "\n"},
         note="the alias bomb under a key that is read"),
    Case("fifo_yaml", SOLVE, files={"i.yaml": _fifo}),
    Case("directory_yaml", SOLVE, files={"i.yaml": lambda p: p.mkdir()}),
    Case("nested_50000", SOLVE, files={"i.yaml": _nested(50_000)}),
    Case("int_tag_abc", SOLVE, files={"i.yaml": instance(mem="!!int abc")}),
    Case("float_tag_abc", SOLVE, files={"i.yaml": instance(macs="!!float abc")}),
    Case("bool_tag_maybe", SOLVE, files={"i.yaml": instance(memory_flag="!!bool maybe")}),
    Case("python_tag", SOLVE, files={"i.yaml": instance(mem="!!python/object:os.system {}")}),
    Case("binary_yaml", SOLVE, files={"i.yaml": bytes(range(256)) * 8}),
    Case("huge_yaml", SOLVE, files={"i.yaml": instance() + "# " + "x" * (40 << 20) + "\n"}),
    Case("merge_keys", SOLVE, "ok", {"i.yaml": MERGE_KEYS}, note="legitimate YAML merge keys"),
    # -- names
    Case("name_markup_solve", SOLVE, "ok", {"i.yaml": instance(dev0="'pi5[/b]'")}),
    Case("name_markup_evaluate", EVAL, "ok",
         {"i.yaml": instance(dev0="'pi5[/b]'"),
          "p.json": plan([{"first": 0, "last": 5, "axis": "none", "parts": [{"device": "pi5[/b]"}]}])},
         check=_stdout_has("pi5[/b]")),
    Case("name_markup_show", ["show", "{dir}/p.json", "--instance", "{dir}/i.yaml"], "ok",
         {"i.yaml": instance(dev0="'pi5[/b]'"),
          "p.json": plan([{"first": 0, "last": 5, "axis": "none", "parts": [{"device": "pi5[/b]"}]}])},
         check=_stdout_has("pi5[/b]")),
    Case("name_brackets_shown", EVAL, "ok",
         {"i.yaml": instance(dev0="'xavier[gpu]'"),
          "p.json": plan([{"first": 0, "last": 5, "axis": "none", "parts": [{"device": "xavier[gpu]"}]}])},
         check=_stdout_has("xavier[gpu]")),
    # -- JSON output
    Case("json_infinity", ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "--json"], "ok",
         {"i.yaml": ZERO_PERIOD}, check=_strict_json),
    Case("evaluate_json_infinity", ["evaluate", "{dir}/i.yaml", "{dir}/p.json", "--json"], "ok",
         {"i.yaml": ZERO_PERIOD,
          "p.json": plan([{"first": 0, "last": 5, "axis": "none", "parts": [{"device": "only"}]}])},
         check=_strict_json),
    # -- plans
    Case("plan_meta_list", EVAL, files={"i.yaml": instance(), "p.json": plan(WHOLE, meta=[1, 2])}),
    Case("plan_meta_string", EVAL, files={"i.yaml": instance(), "p.json": plan(WHOLE, meta="x")}),
    Case("plan_binary", EVAL, files={"i.yaml": instance(), "p.json": bytes(range(128, 256)) * 4}),
    Case("plan_bool_ids", EVAL, files={"i.yaml": instance(), "p.json": plan(
        [{"first": False, "last": 5, "axis": "none", "parts": [{"device": "pi4"}]}])}),
    Case("plan_bool_range", EVAL, files={"i.yaml": instance(), "p.json": plan(
        [{"first": 0, "last": 5, "axis": "rows", "parts": [{"device": "pi4", "range": [False, True]}]}])}),
    Case("plan_one_part_bad_range", EVAL, files={"i.yaml": instance(), "p.json": plan(
        [{"first": 0, "last": 5, "axis": "rows", "parts": [{"device": "pi4", "range": [999, -5]}]}])}),
    Case("plan_one_part_partial", EVAL, files={"i.yaml": instance(), "p.json": plan(
        [{"first": 0, "last": 5, "axis": "rows", "parts": [{"device": "pi4", "range": [0, 3]}]}])}),
    Case("plan_range_outside", EVAL, files={"i.yaml": instance(), "p.json": plan(
        [{"first": 0, "last": 5, "axis": "rows",
          "parts": [{"device": "pi4", "range": [0, 4]}, {"device": "pi5", "range": [4, 99]}]}])}),
    Case("plan_huge_ids", EVAL, files={"i.yaml": instance(), "p.json": plan(
        [{"first": 0, "last": 10**400, "axis": "none", "parts": [{"device": "pi4"}]}])}),
    Case("plan_not_object", EVAL, files={"i.yaml": instance(), "p.json": "[1, 2, 3]"}),
    Case("plan_device_number", EVAL, files={"i.yaml": instance(), "p.json": plan(
        [{"first": 0, "last": 5, "axis": "none", "parts": [{"device": 4}]}])}),
    # -- CLI values
    Case("time_limit_negative", SOLVE + ["--time-limit", "-1"], files={"i.yaml": instance()}),
    Case("time_limit_nan", SOLVE + ["--time-limit", "nan"], files={"i.yaml": instance()}),
    Case("time_limit_inf", SOLVE + ["--time-limit", "inf"], files={"i.yaml": instance()}),
    Case("threads_zero", SOLVE + ["--threads", "0"], files={"i.yaml": instance()}),
    Case("threads_negative", SOLVE + ["--threads", "-3"], files={"i.yaml": instance()}),
    Case("seed_negative", ["solve", "{dir}/i.yaml", "--planner", "random", "-q", "--seed", "-1"],
         files={"i.yaml": instance()}),
    Case("option_unknown", ["solve", "{dir}/i.yaml", "--planner", "offload", "-q", "-O", "foo=1"],
         files={"i.yaml": instance()}, check=None, note="must name 'foo'"),
    Case("option_unknown_dp", SOLVE + ["-O", "foo=1"], files={"i.yaml": instance()}),
    Case("option_max_arcs_abc", ["solve", "{dir}/i.yaml", "--planner", "milp", "-q", "-O", "max_arcs=abc"],
         files={"i.yaml": instance()}),
    Case("option_solver_nosuch", ["solve", "{dir}/i.yaml", "--planner", "milp", "-q", "-O", "solver=nosuch"],
         files={"i.yaml": instance()}),
    Case("option_pop_size_0", ["solve", "{dir}/i.yaml", "--planner", "autodice", "-q", "-O", "pop_size=0"],
         files={"i.yaml": instance()}),
    Case("option_beam_0", ["solve", "{dir}/i.yaml", "--planner", "aofl", "-q", "-O", "beam=0"],
         files={"i.yaml": instance()}),
    Case("option_no_equals", SOLVE + ["-O", "foo"], files={"i.yaml": instance()}),
    Case("option_valid", ["solve", "{dir}/i.yaml", "--planner", "random", "-q", "-O", "samples=5"], "ok",
         {"i.yaml": instance()}),
    Case("planner_unknown", ["solve", "{dir}/i.yaml", "--planner", "nosuch", "-q"], files={"i.yaml": instance()}),
    # -- output
    Case("out_readonly_dir", SOLVE + ["--out", "/sys/plan.json"], files={"i.yaml": instance()}),
    Case("out_existing_dir", SOLVE + ["--out", "{dir}/d"], files={"i.yaml": instance(), "d": lambda p: p.mkdir()}),
    Case("out_under_file", SOLVE + ["--out", "{dir}/f/plan.json"], files={"i.yaml": instance(), "f": "x"}),
    Case("out_is_instance", SOLVE + ["--out", "{dir}/i.yaml"], files={"i.yaml": instance()},
         note="must not overwrite the instance"),
    Case("out_is_instance_link", SOLVE + ["--out", "{dir}/link.yaml"],
         files={"i.yaml": instance(), "link.yaml": lambda p: p.symlink_to(p.parent / "i.yaml")}),
    Case("stdout_closed", SOLVE, files={"i.yaml": instance()}, stdout="closed"),
    Case("stdout_closed_json", SOLVE + ["--json"], files={"i.yaml": instance()}, stdout="closed"),
    Case("stdout_broken_pipe", SOLVE + ["--json"], files={"i.yaml": instance()}, stdout="broken"),
    # -- report
    Case("report_out_is_file", ["report", "{dir}/i.yaml", "--planners", "dp", "-q", "--out", "{dir}/f"],
         files={"i.yaml": instance(), "f": "x"}),
    Case("report_out_readonly", ["report", "{dir}/i.yaml", "--planners", "dp", "-q", "--out", "/sys/rep"],
         files={"i.yaml": instance()}),
    Case("report_dask_missing", ["report", "{dir}/i.yaml", "--planners", "dp", "-q", "--dask", "local",
                                 "--out", "{dir}/rep"],
         files={"i.yaml": instance(), "nodask/dask/__init__.py": "raise ImportError('no dask here')\n"},
         env={"PYTHONPATH": "{dir}/nodask"}),
    Case("report_time_limit_nan", ["report", "{dir}/i.yaml", "--planners", "dp", "-q", "--time-limit", "nan",
                                   "--out", "{dir}/rep"], files={"i.yaml": instance()}),
    # -- ONNX (fixed by the importer branch)
    Case("onnx_truncated", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _onnx("truncated")}),
    Case("onnx_no_outputs", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _onnx("no_outputs")}),
    Case("onnx_opset_999", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _onnx("opset999")}),
    Case("onnx_no_nodes", ["inspect", "{dir}/m.onnx"], files={"m.onnx": _onnx("no_nodes")}),
]

# an unknown option must be refused by name
for _c in CASES:
    if _c.name.startswith("option_unknown"):
        _c.check = lambda r: None if "foo" in r.stderr else "the message does not name 'foo'"

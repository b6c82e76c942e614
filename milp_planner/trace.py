"""Timelines in the Chrome Trace Event format: the predicted schedule and the measured one.

``evaluate --trace FILE`` writes the evaluator's schedule of a plan; ``run --trace FILE`` writes
the schedule the deployment predicted beside the one it measured, so Perfetto
(https://ui.perfetto.dev, "Open trace file") or ``chrome://tracing`` ("Load") shows both, one
above the other. The file is a JSON object ``{"traceEvents": [...], "displayTimeUnit": "ms"}``:

* one process per schedule (``pid`` 1 predicted, 2 measured), named by a metadata event;
* in each, one track (``tid``) per device, with a complete event (``ph: "X"``, ``ts`` and ``dur``
  in microseconds) for each stage part it computes, and one track per link (``A -> B``) with a
  complete event per message (its modelled transfer time, or when measured: from the moment the
  sender posted it to the moment the receiver had it);
* a flow (``ph: "s"`` on the link, ``ph: "f"`` on the receiving device, the same ``id``) per
  message, so the viewer draws an arrow from the transfer to the compute that waits for it.

The predicted schedule follows docs/model.md section 4: stages one after another (``tau``);
inside a stage on a switched network each device takes its messages one after another from the
stage's start, then computes; on a shared medium every message of the stage goes first, one
after another, then every device computes. The gather follows the last stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape

from milp_planner.io import printable

US = 1e6  # trace timestamps are microseconds

PREDICTED_PID, MEASURED_PID = 1, 2

# JSON Schema of what this module writes (a subset of the Trace Event format); tests check
# every trace against it
TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "traceEvents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["ph", "pid", "tid", "name"],
                "properties": {
                    "name": {"type": "string"},
                    "cat": {"type": "string"},
                    "ph": {"enum": ["X", "s", "f", "M"]},
                    "ts": {"type": "number", "minimum": 0},
                    "dur": {"type": "number", "minimum": 0},
                    "pid": {"type": "integer", "minimum": 0},
                    "tid": {"type": "integer", "minimum": 0},
                    "id": {"type": "integer"},
                    "bp": {"enum": ["e"]},
                    "args": {"type": "object"},
                },
                "allOf": [
                    {"if": {"properties": {"ph": {"const": "X"}}},
                     "then": {"required": ["ts", "dur"]}},
                    {"if": {"properties": {"ph": {"enum": ["s", "f"]}}},
                     "then": {"required": ["ts", "id"]}},
                ],
            },
        },
    },
}


@dataclass
class Msg:
    """One message of a schedule: ``stage`` (the number of stages for the gather)."""

    stage: int
    tensor: str
    src: str
    dst: str
    bytes: int
    seconds: float


@dataclass
class Schedule:
    """What a predicted timeline is drawn from: per stage, each part's compute and receive
    seconds, and every message (the evaluator's, or a manifest's)."""

    devices: list[str]
    stages: list[dict] = field(default_factory=list)  # {"index", "first", "last", "compute": {dev: s}}
    messages: list[Msg] = field(default_factory=list)
    shared: bool = False


def schedule_from_metrics(metrics, instance) -> Schedule:
    """The evaluator's schedule of a plan (``cost.evaluator.Metrics``)."""
    names = instance.device_names

    def who(i: int) -> str:
        return "external" if i < 0 else names[i]

    sc = Schedule(list(names), shared=instance.network.medium == "shared")
    for si, s in enumerate(metrics.stages):
        sc.stages.append({"index": si, "first": s.first, "last": s.last, "axis": s.axis,
                          "compute": {names[d]: c for d, c in s.compute_s.items()}})
        sc.messages += [Msg(si, t.tensor, who(t.src), who(t.dst), t.bytes, t.time_s) for t in s.transfers]
    sc.messages += [Msg(len(metrics.stages), t.tensor, who(t.src), who(t.dst), t.bytes, t.time_s)
                    for t in metrics.gather]
    return sc


def schedule_from_metrics_dict(metrics: dict, devices: list[str], shared: bool = False) -> Schedule:
    """The same schedule from ``Metrics.to_dict()`` (what a report's cache keeps of a run)."""
    sc = Schedule(list(devices), shared=shared)
    for si, s in enumerate(metrics.get("stages", [])):
        sc.stages.append({"index": si, "first": s["first"], "last": s["last"], "axis": s.get("axis"),
                          "compute": {p["device"]: p.get("compute_s", 0.0) for p in s["parts"]}})
        sc.messages += [Msg(si, t["tensor"], t["from"], t["to"], t["bytes"], t["time_s"])
                        for t in s.get("transfers", [])]
    n = len(sc.stages)
    sc.messages += [Msg(n, t["tensor"], t["from"], t["to"], t["bytes"], t["time_s"]) for t in metrics.get("gather", [])]
    return sc


def schedule_from_manifest(m) -> Schedule:
    """The schedule a deployment predicted (``deploy.manifest.Manifest``)."""
    sc = Schedule(list(m.rank_names()), shared=m.notes.get("medium") == "shared")
    for s in m.stages:
        sc.stages.append({"index": s.index, "first": s.first, "last": s.last, "axis": s.axis,
                          "compute": {p.device: p.predicted_compute_s for p in s.parts}})
    sc.messages = [Msg(x.stage, x.tensor, x.sender, x.receiver, x.bytes, x.time_s) for x in m.messages]
    return sc


class _Builder:
    def __init__(self, pid: int, label: str, devices: list[str]):
        self.pid = pid
        self.events: list[dict] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                                    "args": {"name": label}}]
        self.tids: dict[str, int] = {}
        for d in devices:
            self.track(d)

    def track(self, name: str) -> int:
        tid = self.tids.get(name)
        if tid is None:
            tid = self.tids[name] = len(self.tids) + 1
            self.events.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid,
                                "args": {"name": name}})
            self.events.append({"name": "thread_sort_index", "ph": "M", "pid": self.pid, "tid": tid,
                                "args": {"sort_index": tid}})
        return tid

    def span(self, track: str, name: str, start_s: float, dur_s: float, cat: str, args: dict) -> None:
        self.events.append({"name": name, "cat": cat, "ph": "X", "pid": self.pid, "tid": self.track(track),
                            "ts": round(max(start_s, 0.0) * US, 3), "dur": round(max(dur_s, 0.0) * US, 3),
                            "args": args})

    def flow(self, fid: int, link: str, start_s: float, dst: str, end_s: float, name: str) -> None:
        self.events.append({"name": name, "cat": "message", "ph": "s", "id": fid, "pid": self.pid,
                            "tid": self.track(link), "ts": round(max(start_s, 0.0) * US, 3)})
        self.events.append({"name": name, "cat": "message", "ph": "f", "bp": "e", "id": fid, "pid": self.pid,
                            "tid": self.track(dst), "ts": round(max(end_s, 0.0) * US, 3)})


def _link(src: str, dst: str) -> str:
    return f"{src} -> {dst}"


def predicted_events(sc: Schedule, pid: int = PREDICTED_PID, label: str = "predicted (evaluator)",
                     flow_base: int = 0) -> list[dict]:
    """Trace events of a predicted schedule (see the module docstring for the timing rules)."""
    b = _Builder(pid, label, sc.devices)
    by_stage: dict[int, list[Msg]] = {}
    for msg in sc.messages:
        by_stage.setdefault(msg.stage, []).append(msg)
    t = 0.0
    fid = flow_base
    for s in sc.stages + [{"index": len(sc.stages), "gather": True, "compute": {}}]:
        msgs = by_stage.get(s["index"], [])
        ready: dict[str, float] = {}
        shared_t = t
        for msg in msgs:
            if sc.shared:
                start = shared_t
                shared_t += msg.seconds
            else:
                start = t + sum(x.seconds for x in msgs[:msgs.index(msg)] if x.dst == msg.dst)
            end = start + msg.seconds
            ready[msg.dst] = max(ready.get(msg.dst, t), end)
            link = _link(msg.src, msg.dst)
            what = "gather " if s.get("gather") else ""
            b.span(link, f"{what}{msg.tensor}", start, msg.seconds, "message",
                   {"stage": s["index"], "tensor": msg.tensor, "bytes": msg.bytes, "seconds": msg.seconds})
            fid += 1
            b.flow(fid, link, start, msg.dst, end, msg.tensor)
        if s.get("gather"):
            break
        tau = 0.0
        for dev, c in s["compute"].items():
            start = shared_t if sc.shared else ready.get(dev, t)
            b.span(dev, f"stage {s['index']} (layers {s['first']}-{s['last']})", start, c, "compute",
                   {"stage": s["index"], "axis": s.get("axis"), "compute_s": c})
            tau = max(tau, start + c - t)
        t += max(tau, (shared_t - t) if sc.shared else 0.0)
    return b.events


def measured_events(timeline: dict, pid: int = MEASURED_PID, label: str = "measured (run)",
                    flow_base: int = 100000) -> list[dict]:
    """Trace events of one measured run (``run_deployment``'s ``timeline``): per device, each
    stage's compute span and, per message, from its send to its receipt, on the clock of the
    run (seconds from the barrier that started it)."""
    devices = timeline.get("devices", [])
    b = _Builder(pid, label, devices)
    sent = {int(k): v for k, v in timeline.get("sent", {}).items()}
    fid = flow_base
    for e in timeline.get("compute", []):
        b.span(e["device"], f"stage {e['stage']}", e["start"], e["end"] - e["start"], "compute",
               {"stage": e["stage"]})
    for r in timeline.get("received", []):
        start = sent.get(int(r["id"]), r["wait"])
        start = min(start, r["end"])
        link = _link(r["src"], r["dst"])
        name = ("gather " if r.get("gather") else "") + r["tensor"]
        b.span(link, name, start, r["end"] - start, "message",
               {"stage": r["stage"], "tensor": r["tensor"], "bytes": r.get("bytes"), "id": r["id"]})
        fid += 1
        b.flow(fid, link, start, r["dst"], r["end"], r["tensor"])
    return b.events


def trace_document(*event_lists) -> dict:
    events: list[dict] = []
    for lst in event_lists:
        events += lst
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path, doc: dict) -> None:
    from milp_planner.io import write_atomic

    write_atomic(path, json.dumps(doc) + "\n")


SVG_NS = "http://www.w3.org/2000/svg"
LABEL_CHARS = 24  # longer row labels are cut (the whole name is the label's tooltip)


def timeline_svg(sc: Schedule, width: int = 760, *, standalone: bool = True) -> str:
    """A small SVG of a predicted schedule: one row per device and per link (``A -> B``), a
    bar per compute span (blue) and per message (orange), each with its name and duration as
    a tooltip. Every name (devices, tensors: user input) is escaped, control characters shown
    as ``\\xNN``. ``standalone``: with the SVG namespace, for a ``.svg`` file; without it the
    markup is for inline use in HTML, which needs no namespace (and then names no URL)."""
    events = predicted_events(sc)
    spans = [e for e in events if e["ph"] == "X"]
    tid_of = _tracks(events)
    rows = list(tid_of)
    row_of = {tid_of[n]: i for i, n in enumerate(rows)}
    links = {_link(m.src, m.dst): (m.src, m.dst) for m in sc.messages if _link(m.src, m.dst) not in sc.devices}
    end = max((e["ts"] + e["dur"] for e in spans), default=1.0) or 1.0
    label_w, row_h = 160, 18
    height = row_h * len(rows) + 24
    scale = (width - label_w - 10) / end
    ns = f' xmlns="{SVG_NS}"' if standalone else ""
    out = [f'<svg{ns} class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="11" role="img">']
    for i, name in enumerate(rows):
        y = i * row_h + 4
        ends = links.get(name)
        label = _clip(printable(name)) if ends is None else \
            f"{_clip(printable(ends[0]), LABEL_CHARS // 2 - 2)} -> {_clip(printable(ends[1]), LABEL_CHARS // 2 - 2)}"
        out.append(f'<g class="row"><line x1="0" x2="{width}" y1="{y + row_h}" y2="{y + row_h}" stroke="#e3e6ec"/>'
                   f'<text x="2" y="{y + 13}">{_esc(label)}<title>{_esc(name)}</title></text></g>')
    for e in spans:
        i = row_of[e["tid"]]
        x = label_w + e["ts"] * scale
        w = max(e["dur"] * scale, 0.5)
        color = "#4a7fbf" if e["cat"] == "compute" else "#e0a030"
        out.append(f'<rect x="{x:.1f}" y="{i * row_h + 6}" width="{w:.1f}" height="{row_h - 4}" fill="{color}">'
                   f'<title>{_esc(e["name"])}: {e["dur"] / 1e3:.3f} ms</title></rect>')
    out.append(f'<text x="{label_w}" y="{height - 6}">0</text>'
               f'<text x="{width - 10}" y="{height - 6}" text-anchor="end">{end / 1e3:.3f} ms</text></svg>')
    return "".join(out)


def timeline_rows(sc: Schedule) -> list[str]:
    """The rows ``timeline_svg`` draws, top to bottom: the devices, then each link."""
    return list(_tracks(predicted_events(sc)))


def _tracks(events: list[dict]) -> dict[str, int]:
    """Track name -> its ``tid``, in the order of the tids."""
    tid_of = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    return dict(sorted(tid_of.items(), key=lambda kv: kv[1]))


def _clip(text: str, n: int = LABEL_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _esc(text: str) -> str:
    """``text`` as XML character data or attribute value: control characters shown as escapes
    (``io.printable``; XML 1.0 cannot hold most of them), then ``& < > " '`` as references."""
    return escape(printable(text), quote=True)

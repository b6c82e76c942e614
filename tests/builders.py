"""Hand-built layer graphs and instances for tests whose arithmetic is done by hand."""

from __future__ import annotations

from fractions import Fraction as F

from milp_planner.instance.devices import CostModel, Device, Power
from milp_planner.model.graph import Layer, LayerGraph, RowDep
from milp_planner.instance import Constraints, Instance, SearchSpace
from milp_planner.instance.network import Endpoint, Network

CONV3 = RowDep("window", kernel=3, stride=1, pad_top=1)
IDENT = RowDep("identity")


def conv(i, name, src, out, shape, macs=1000, params=10):
    return Layer(i, name, "Conv", (src,), out, shape, macs=macs, params=params, rowdep=CONV3,
                 row_splittable=True, channel_splittable=True)


def chain_graph(n_layers=2):
    """x (1,1,8,8) -> conv -> (1,2,8,8) -> conv -> ... ; 1000 MACs and 10 params per conv."""
    layers = [conv(0, "c0", "x", "t0", (1, 2, 8, 8))]
    for i in range(1, n_layers):
        layers.append(conv(i, f"c{i}", f"t{i - 1}", f"t{i}", (1, 2, 8, 8)))
    return LayerGraph("chain", layers, {"x": (1, 1, 8, 8)}, [layers[-1].output])


def residual_graph():
    """c0: x -> t0; c1: t0 -> t1; add: (t1, t0) -> y  (the skip t0 crosses c1)."""
    layers = [
        conv(0, "c0", "x", "t0", (1, 2, 8, 8)),
        conv(1, "c1", "t0", "t1", (1, 2, 8, 8)),
        Layer(2, "add", "Add", ("t1", "t0"), "y", (1, 2, 8, 8), ops=128, rowdep=IDENT, row_splittable=True),
    ]
    return LayerGraph("residual", layers, {"x": (1, 1, 8, 8)}, ["y"])


def fc_graph():
    """x (1,16) -> Gemm -> y (1,10): 160 MACs, 170 params."""
    layers = [Layer(0, "fc", "Gemm", ("x",), "y", (1, 10), macs=160, params=170, channel_splittable=True)]
    return LayerGraph("fc", layers, {"x": (1, 16)}, ["y"])


def device(name, macs_per_s=1000, overhead="0.01", memory=None, power=(2, 1, 1)):
    return Device(name, CostModel("linear", F(macs_per_s), F(overhead)), memory_bytes=memory,
                  power=Power(*(F(p) for p in power)))


def make_instance(graph, devices, bw=None, lat=0.1, medium="switched", source=0, sink=0,
                  search=None, objective="latency", constraints=None, dtype_bytes=1):
    """Devices 0 and 1 by default: bandwidth 100 B/s from 0 to 1 and 200 B/s from 1 to 0."""
    n = len(devices)
    if bw is None:
        bw = [[0.0] * n for _ in range(n)]
        for i in range(n):
            for j in range(n):
                if i != j:
                    bw[i][j] = 100.0 if i < j else 200.0
    lat_m = tuple(tuple(0.0 if i == j else float(lat) for j in range(n)) for i in range(n))
    src = Endpoint(device=source) if isinstance(source, int) else source
    snk = Endpoint(device=sink) if isinstance(sink, int) else sink
    net = Network(tuple(tuple(r) for r in bw), lat_m, medium, src, snk)
    return Instance(graph.name, graph, tuple(devices), net, search or SearchSpace(2, n, ("equal",), ("rows", "channels")),
                    objective, constraints or Constraints(), dtype_bytes)

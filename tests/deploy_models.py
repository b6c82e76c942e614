"""ONNX models for the deployment tests: every feature a sub-model must get right.

``features_model()``: stride 2, dilation, folded BatchNormalization and PRelu, depthwise and
grouped convs, a residual skip across several layers, average and max pooling, a linear
Resize by 2, a Pad, a channel Concat, a ConvTranspose, a nearest Resize by 3/2 (rational),
global pooling, Flatten, Gemm and MatMul. ``chain_model``, ``residual_model`` and ``fc_model``
are ONNX versions of the hand-built graphs of tests/builders.py (3x3 convs with pad 1).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _M:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def w(self, name, shape, scale=0.3):
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def n(self, op, ins, out, **attrs):
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv(self, x, out, cin, cout, k=3, s=1, p=1, d=1, g=1, bias=True):
        ins = [x, self.w(out + ".w", (cout, cin // g, k, k))]
        if bias:
            ins.append(self.w(out + ".b", (cout,)))
        return self.n("Conv", ins, out, kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p],
                      dilations=[d, d], group=g)

    def model(self, x, shape, outs):
        g = helper.make_graph(self.nodes, "m", [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


def features_model() -> onnx.ModelProto:
    m = _M(1)
    x = m.conv("x", "c1", 3, 8)
    x = m.n("BatchNormalization", [x, m.w("bn.s", (8,)), m.w("bn.b", (8,)), m.w("bn.m", (8,)),
                                   m.c("bn.v", np.full(8, 1.5, np.float32))], "bn")
    x = m.n("Relu", [x], "relu1")
    c2 = m.conv(x, "c2", 8, 8, s=2)  # 12 x 10
    y = m.conv(c2, "c3", 8, 8, p=2, d=2)
    y = m.n("PRelu", [y, m.w("slope", (8, 1, 1))], "prelu")
    y = m.conv(y, "dw", 8, 8, g=8)
    y = m.n("Clip", [y, m.c("lo", np.array(0, np.float32)), m.c("hi", np.array(6, np.float32))], "relu6")
    y = m.conv(y, "gc", 8, 8, g=2)
    y = m.n("Add", [y, c2], "skip")  # c2 crosses c3, dw, gc
    a = m.n("AveragePool", [y], "ap", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    b = m.n("MaxPool", [a], "mp", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])  # 6 x 5
    u = m.n("Resize", [b, "", m.c("up.scales", np.array([1, 1, 2, 2], np.float32))], "up", mode="linear")  # 12 x 10
    p = m.n("Pad", [a, m.c("pad.pads", np.array([0, 0, 1, 0, 0, 0, 1, 0], np.int64))], "pad")  # 14 x 10
    p = m.n("Conv", [p, m.w("pc.w", (8, 8, 3, 3))], "pc", kernel_shape=[3, 3], pads=[0, 1, 0, 1])  # 12 x 10
    cat = m.n("Concat", [p, u], "cat", axis=1)  # 16 ch
    ct = m.n("ConvTranspose", [cat, m.w("ct.w", (16, 4, 2, 2)), m.w("ct.b", (4,))], "ct",
             kernel_shape=[2, 2], strides=[2, 2])  # 24 x 20
    rz = m.n("Resize", [ct, "", "", m.c("rz.sizes", np.array([1, 4, 36, 30], np.int64))], "rz", mode="nearest")
    r2 = m.conv(rz, "c4", 4, 4, k=3, s=3, p=0)  # 12 x 10
    gp = m.n("GlobalAveragePool", [r2], "gap")
    f = m.n("Flatten", [gp], "flat", axis=1)
    f = m.n("Gemm", [f, m.w("fc.w", (10, 4)), m.w("fc.b", (10,))], "fc", transB=1)
    f = m.n("Relu", [f], "fc.relu")
    f = m.n("MatMul", [f, m.w("mm.w", (10, 6))], "mm")
    f = m.n("Add", [f, m.w("mm.b", (6,))], "out")
    return m.model("x", [1, 3, 24, 20], ["out", "c4"])


def chain_model(n_layers=2) -> onnx.ModelProto:
    m = _M(2)
    x = m.conv("x", "t0", 1, 2)
    for i in range(1, n_layers):
        x = m.conv(x, f"t{i}", 2, 2)
    return m.model("x", [1, 1, 8, 8], [x])


def residual_model() -> onnx.ModelProto:
    m = _M(3)
    t0 = m.conv("x", "t0", 1, 2)
    t1 = m.conv(t0, "t1", 2, 2)
    m.n("Add", [t1, t0], "y")
    return m.model("x", [1, 1, 8, 8], ["y"])


def fc_model() -> onnx.ModelProto:
    m = _M(4)
    m.n("Gemm", ["x", m.w("fc.w", (10, 16)), m.w("fc.b", (10,))], "y", transB=1)
    return m.model("x", [1, 16], ["y"])

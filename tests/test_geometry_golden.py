"""The stage geometry against rows worked out by hand (docs/model.md sections 2 and 3).

Every exact planner, ``bruteforce`` and the evaluator share ``space.geometry``, so agreeing with
each other says nothing about it. Here each expected region is computed on paper from the
row-dependency formula ``[a*s - pad, (b-1)*s - pad + (k-1)*d + 1)`` clipped to the input, the
backward walk through the fused stage (one interval covering every reader's need), and the
exit tensors cut at the last layer's fractions ``round(a * H_t / H_last)``.
``test_random_models_split_reproduce_onnxruntime`` then runs random models split along random
plans of their space through onnxruntime, against the unsplit model.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from milp_planner.model.graph import Layer, LayerGraph, RowDep
from milp_planner.space.geometry import StageGeometry


def conv(i, src, out, shape, k=3, s=1, p=1, d=1, groups=1):
    return Layer(i, f"l{i}", "Conv", tuple(src) if isinstance(src, (tuple, list)) else (src,), out, shape,
                 macs=1, rowdep=RowDep("window", kernel=k, stride=s, pad_top=p, dilation=d),
                 row_splittable=True, channel_splittable=True, groups=groups)


def elementwise(i, op, srcs, out, shape):
    return Layer(i, f"l{i}", op, tuple(srcs), out, shape, ops=1, rowdep=RowDep("identity"), row_splittable=True)


def graph(layers, x_shape, outputs):
    return LayerGraph("golden", layers, {"x": x_shape}, outputs)


def rows(part, lid):
    return part.computed[lid].rows


def test_fused_convs_with_stride_compute_their_halos():
    # x (16 rows) -conv3 s1 p1-> t0 (16) -conv3 s2 p1-> t1 (8)
    g = graph([conv(0, "x", "t0", (1, 2, 16, 4)), conv(1, "t0", "t1", (1, 2, 8, 2), s=2)], (1, 1, 16, 4), ["t1"])
    top, bottom = StageGeometry(g).parts(0, 1, "rows", [(0, 4), (4, 8)])
    # top: t1 [0,4) reads t0 [0*2-1, 3*2-1+3) = [-1, 8) -> [0, 8); t0 [0,8) reads x [-1, 9) -> [0, 9)
    assert rows(top, 1) == (0, 4) and rows(top, 0) == (0, 8) and top.needs["x"].rows == (0, 9)
    # bottom: t1 [4,8) reads t0 [7, 16); t0 [7,16) reads x [6, 17) -> [6, 16)
    assert rows(bottom, 1) == (4, 8) and rows(bottom, 0) == (7, 16) and bottom.needs["x"].rows == (6, 16)
    assert top.fraction == {0: F(8, 16), 1: F(4, 8)} and bottom.fraction == {0: F(9, 16), 1: F(4, 8)}
    assert top.owns == {"t1": top.computed[1]} and bottom.owns["t1"].rows == (4, 8)


def test_dilation_widens_the_halo():
    # conv k3 d2 p2 s1 on 10 rows: span (k-1)*d + 1 = 5
    g = graph([conv(0, "x", "t0", (1, 1, 10, 3), d=2, p=2)], (1, 1, 10, 3), ["t0"])
    top, bottom = StageGeometry(g).parts(0, 0, "rows", [(0, 5), (5, 10)])
    assert top.needs["x"].rows == (0, 7)  # [0-2, 4-2+5) = [-2, 7)
    assert bottom.needs["x"].rows == (3, 10)  # [5-2, 9-2+5) = [3, 12)


def test_a_strided_conv_without_padding():
    # conv k3 s2 p0 on 9 rows -> 4 rows
    g = graph([conv(0, "x", "t0", (1, 1, 4, 1), s=2, p=0)], (1, 1, 9, 1), ["t0"])
    a, b = StageGeometry(g).parts(0, 0, "rows", [(0, 2), (2, 4)])
    assert a.needs["x"].rows == (0, 5)  # [0, 1*2+3)
    assert b.needs["x"].rows == (4, 9)  # [4, 3*2+3)


def test_pooling_after_a_conv():
    # x (8) -conv3 p1-> t0 (8) -maxpool k2 s2-> t1 (4)
    pool = Layer(1, "l1", "MaxPool", ("t0",), "t1", (1, 2, 4, 2), ops=1, rowdep=RowDep("window", kernel=2, stride=2),
                 row_splittable=True)
    g = graph([conv(0, "x", "t0", (1, 2, 8, 4)), pool], (1, 1, 8, 4), ["t1"])
    a, b = StageGeometry(g).parts(0, 1, "rows", [(0, 2), (2, 4)])
    assert rows(a, 0) == (0, 4) and a.needs["x"].rows == (0, 5)  # t1 [0,2) <- t0 [0, 4) <- x [-1, 5)
    assert rows(b, 0) == (4, 8) and b.needs["x"].rows == (3, 8)  # t1 [2,4) <- t0 [4, 8) <- x [3, 9)


def test_a_residual_branch_computes_one_interval_for_both_readers():
    # c0: x -> t0; c1: t0 -> t1; add: (t1, t0) -> y; 8 rows, conv3 p1
    g = graph([conv(0, "x", "t0", (1, 2, 8, 2)), conv(1, "t0", "t1", (1, 2, 8, 2)),
               elementwise(2, "Add", ("t1", "t0"), "y", (1, 2, 8, 2))], (1, 1, 8, 2), ["y"])
    a, b = StageGeometry(g).parts(0, 2, "rows", [(0, 4), (4, 8)])
    # top: y [0,4); t1 [0,4); t0 = hull(c1's [-1,5) -> [0,5), add's [0,4)) = [0,5); x [0, 6)
    assert (rows(a, 2), rows(a, 1), rows(a, 0)) == ((0, 4), (0, 4), (0, 5)) and a.needs["x"].rows == (0, 6)
    # bottom: t0 = hull([3, 9) -> [3, 8), [4, 8)) = [3, 8); x [2, 9) -> [2, 8)
    assert (rows(b, 2), rows(b, 1), rows(b, 0)) == ((4, 8), (4, 8), (3, 8)) and b.needs["x"].rows == (2, 8)


def test_a_concat_of_two_branches_reads_the_union_of_their_needs():
    # a: x -> ta (conv3 p1, 2 ch); b: x -> tb (conv1 p0, 3 ch); cat: (ta, tb) -> y (5 ch)
    g = graph([conv(0, "x", "ta", (1, 2, 8, 2)), conv(1, "x", "tb", (1, 3, 8, 2), k=1, p=0),
               elementwise(2, "Concat", ("ta", "tb"), "y", (1, 5, 8, 2))], (1, 1, 8, 2), ["y"])
    a, b = StageGeometry(g).parts(0, 2, "rows", [(0, 4), (4, 8)])
    assert a.needs["x"].rows == (0, 5)  # hull(ta's [-1, 5), tb's [0, 4))
    assert b.needs["x"].rows == (3, 8)  # hull(ta's [3, 9), tb's [4, 8))
    assert a.computed[2].chans == (0, 5) and a.needs["x"].chans == (0, 1)


def test_an_exit_tensor_read_later_is_cut_at_the_last_layers_fractions():
    # c0: x -> t0 (8 rows); pool k2 s2: t0 -> t1 (4 rows); a later layer reads t0 again (a skip)
    pool = Layer(1, "l1", "MaxPool", ("t0",), "t1", (1, 1, 4, 2), ops=1, rowdep=RowDep("window", kernel=2, stride=2),
                 row_splittable=True)
    up = Layer(2, "l2", "Resize", ("t1",), "t2", (1, 1, 8, 2), ops=1,
               rowdep=RowDep("resize", factor_num=2, factor_den=1), row_splittable=True)
    g = graph([conv(0, "x", "t0", (1, 1, 8, 2)), pool, up, elementwise(3, "Add", ("t2", "t0"), "y", (1, 1, 8, 2))],
              (1, 1, 8, 2), ["y"])
    a, b = StageGeometry(g).parts(0, 1, "rows", [(0, 1), (1, 4)])
    # t0 is owned at round(1 * 8 / 4) = 2: [0, 2) and [2, 8); what t1 needs of t0 is inside that
    assert a.owns["t0"].rows == (0, 2) and b.owns["t0"].rows == (2, 8)
    assert a.owns["t1"].rows == (0, 1) and b.owns["t1"].rows == (1, 4)
    assert rows(a, 0) == (0, 2) and a.needs["x"].rows == (0, 3)
    assert rows(b, 0) == (2, 8) and b.needs["x"].rows == (1, 8)


def test_an_odd_exit_cut_rounds_half_up():
    # last layer 3 rows (pool k2 s2 p0 of 7 rows -> 3), t0 (7 rows) an exit too: cut at 1 -> round(7/3) = 2
    pool = Layer(1, "l1", "MaxPool", ("t0",), "t1", (1, 1, 3, 1), ops=1, rowdep=RowDep("window", kernel=2, stride=2),
                 row_splittable=True)
    g = graph([conv(0, "x", "t0", (1, 1, 7, 1)), pool], (1, 1, 7, 1), ["t1", "t0"])
    a, b = StageGeometry(g).parts(0, 1, "rows", [(0, 1), (1, 3)])
    assert a.owns["t0"].rows == (0, 2) and b.owns["t0"].rows == (2, 7)
    # round(2 * 7 / 3) = round(4.67) = 5 for a cut at 2
    c, d = StageGeometry(g).parts(0, 1, "rows", [(0, 2), (2, 3)])
    assert c.owns["t0"].rows == (0, 5) and d.owns["t0"].rows == (5, 7)
    # t1 [2, 3) reads t0 [4, 6); it owns t0 [5, 7): it computes the hull [4, 7)
    assert rows(d, 0) == (4, 7)


def test_resize_rows_nearest_and_linear():
    for linear, top, bottom in ((False, (0, 2), (1, 4)), (True, (0, 3), (0, 4))):
        up = Layer(0, "l0", "Resize", ("x",), "y", (1, 1, 8, 2), ops=1,
                   rowdep=RowDep("resize", factor_num=2, factor_den=1, linear=linear), row_splittable=True)
        g = graph([up], (1, 1, 4, 1), ["y"])
        a, b = StageGeometry(g).parts(0, 0, "rows", [(0, 3), (3, 8)])
        # nearest: [floor(0/2), ceil(3/2)) = [0, 2), [floor(3/2), ceil(8/2)) = [1, 4); linear one row wider
        assert a.needs["x"].rows == top and b.needs["x"].rows == bottom


def test_transposed_conv_rows():
    # ConvTranspose k2 s2 p0: input row i writes output rows [2i, 2i+2); 4 -> 8 rows
    t = Layer(0, "l0", "ConvTranspose", ("x",), "y", (1, 1, 8, 2), macs=1,
              rowdep=RowDep("transpose", kernel=2, stride=2), row_splittable=True)
    g = graph([t], (1, 1, 4, 1), ["y"])
    a, b = StageGeometry(g).parts(0, 0, "rows", [(0, 3), (3, 8)])
    assert a.needs["x"].rows == (0, 2) and b.needs["x"].rows == (1, 4)


def test_grouped_conv_channel_parts_read_their_groups():
    g = graph([conv(0, "x", "y", (1, 4, 4, 4), groups=2)], (1, 4, 4, 4), ["y"])
    a, b, c = StageGeometry(g).parts(0, 0, "channels", [(0, 2), (2, 3), (3, 4)])
    assert a.needs["x"].chans == (0, 2) and b.needs["x"].chans == (2, 4) and c.needs["x"].chans == (2, 4)
    (mid,) = StageGeometry(g).parts(0, 0, "channels", [(1, 3)])
    assert mid.needs["x"].chans == (0, 4) and mid.fraction == {0: F(2, 4)}


def test_a_whole_stage_computes_only_the_rows_its_outputs_need():
    # a strided conv whose last input row no output reads: k3 s2 p0 on 8 rows -> 3 rows read [0, 7)
    g = graph([conv(0, "x", "t0", (1, 1, 8, 1)), conv(1, "t0", "y", (1, 1, 3, 1), s=2, p=0)], (1, 1, 8, 1), ["y"])
    (whole,) = StageGeometry(g).parts(0, 1, "none", [None])
    assert rows(whole, 0) == (0, 7) and whole.fraction[0] == F(7, 8) and whole.needs["x"].rows == (0, 8)


@pytest.mark.parametrize("seed", range(12))
def test_random_models_split_reproduce_onnxruntime(seed, tmp_path):
    """Random models (strides, dilations, pools, residuals, concats, skips, heads) split along
    random plans of their space, run through onnxruntime stage by stage, against the whole."""
    import onnx

    from milp_planner.deploy import deploy, execute_sequential, max_abs_err, reference_outputs
    from milp_planner.deploy.runtime import make_inputs
    from milp_planner.deploy.manifest import Manifest
    from milp_planner.instance.generate import build_graph, build_instance, build_model, random_spec
    from milp_planner.planners.common import evaluate_tuples
    from milp_planner.planners.random_search import random_stages

    spec = random_spec(1000 + seed)
    spec["instance"]["search"] = {"fusion_limit": 3, "max_parts": len(spec["instance"]["devices"]),
                                  "splits": ["any"], "axes": ["rows", "channels"]}
    model = tmp_path / "model.onnx"
    onnx.save(build_model(spec), model)
    inst = build_instance(spec, build_graph(spec))
    inst.model = str(model)
    rng = np.random.default_rng(seed)
    for k in range(4):
        plan, _ = evaluate_tuples(inst, random_stages(inst, rng), "random")
        folder = tmp_path / f"dep{k}"
        deploy(inst, plan, folder)
        inputs = make_inputs(Manifest.load(folder))
        want = reference_outputs(folder, inputs)
        got = execute_sequential(folder, next(iter(inputs.values())))
        scale = max(1.0, max(float(np.max(np.abs(v))) for v in want.values()))
        assert max_abs_err(got, want) < 1e-4 * scale, plan.to_dict()


def test_a_part_owning_an_empty_slice_computes_nothing_of_that_layer():
    # l0: x -> a (2 rows, read only by a later stage); l1: x -> b (8 rows, the stage's last); l2: a + b
    up = Layer(2, "l2", "Resize", ("a",), "a8", (1, 1, 8, 1), ops=1,
               rowdep=RowDep("resize", factor_num=4, factor_den=1), row_splittable=True)
    g = graph([conv(0, "x", "a", (1, 1, 2, 1), k=4, s=4, p=0), conv(1, "x", "b", (1, 1, 8, 1)), up,
               elementwise(3, "Add", ("a8", "b"), "y", (1, 1, 8, 1))], (1, 1, 8, 1), ["y"])
    first, rest = StageGeometry(g).parts(0, 1, "rows", [(0, 1), (1, 8)])
    # a is cut at round(1 * 2 / 8) = 0: the first part owns none of it and computes none of it
    assert first.owns["a"].rows == (0, 0) or first.owns["a"].empty
    assert 0 not in first.computed and 0 not in first.fraction
    assert rest.owns["a"].rows == (0, 2) and rows(rest, 0) == (0, 2)


def test_a_channel_part_owning_no_channels_computes_and_reads_nothing():
    g = graph([conv(0, "x", "y", (1, 4, 4, 4))], (1, 4, 4, 4), ["y"])
    empty, full = StageGeometry(g).parts(0, 0, "channels", [(2, 2), (0, 4)])
    assert empty.computed == {} and empty.fraction == {} and empty.needs == {}
    assert empty.owns["y"].empty
    assert full.computed[0].chans == (0, 4) and full.fraction[0] == 1


# The interval helpers every geometry goes through, against values worked out on paper.

def test_clip_and_hull_keep_empty_intervals_empty():
    from milp_planner.model.graph import EMPTY, clip, hull

    assert clip((-2, 3), 10) == (0, 3) and clip((5, 12), 8) == (5, 8)
    assert clip((8, 12), 8) == EMPTY and clip((9, 12), 8) == EMPTY
    assert hull((2, 5), EMPTY) == (2, 5) and hull((2, 5), (7, 7)) == (2, 5)
    assert hull(EMPTY, (3, 3)) == EMPTY and hull(EMPTY, (3, 6)) == (3, 6)
    assert hull((2, 5), (7, 9)) == (2, 9) and hull((4, 6), (1, 3)) == (1, 6)


def test_input_rows_of_each_row_dependency():
    from milp_planner.model.graph import EMPTY, input_rows

    # window s2 p1 k3 d2: output row y reads 2y-1, 2y+1, 2y+3; rows [3, 5) read 5, 7, 9, 11
    window = RowDep("window", kernel=3, stride=2, pad_top=1, dilation=2)
    assert input_rows(window, (3, 5), 20) == (5, 12)
    assert input_rows(window, (3, 3), 20) == EMPTY  # no output rows read nothing
    assert input_rows(window, (0, 1), 20) == (0, 4)  # row -1 is padding
    # linear resize x2 (half pixel): output row y samples (y + 0.5) / 2 - 0.5, rows floor and +1;
    # rows 4..7 sample 1.75 .. 3.25: input rows [1, 5), one row each side of [floor(4/2), ceil(8/2))
    linear = RowDep("resize", factor_num=2, factor_den=1, linear=True)
    assert input_rows(linear, (4, 8), 8) == (1, 5)
    assert input_rows(RowDep("resize", factor_num=2, factor_den=1), (4, 8), 8) == (2, 4)
    assert input_rows(RowDep("resize", factor_num=3, factor_den=2), (2, 5), 8) == (1, 4)  # 2*2//3, ceil(5*2/3)
    # ConvTranspose s2 p2 k3 d2: input row i writes output rows [2i - 2, 2i + 3); rows [4, 7) come
    # from i = 1 ([0, 5)) .. 4 ([6, 11)); i = 0 ([-2, 3)) and i = 5 ([8, 13)) miss them
    transpose = RowDep("transpose", kernel=3, stride=2, pad_top=2, dilation=2)
    assert input_rows(transpose, (4, 7), 10) == (1, 5)
    assert input_rows(transpose, (5, 7), 10) == (2, 5)  # i = 1 ([0, 5)) no longer reaches row 5
    assert input_rows(transpose, (0, 1), 10) == (0, 2)  # i = 0 and 1 write row 0
    assert input_rows(RowDep("identity"), (3, 9), 6) == (3, 6)
    assert input_rows(RowDep("none"), (3, 4), 6) == (0, 6)


@pytest.mark.parametrize("a, b, cells", [
    (((0, 4), (0, 8)), ((2, 6), (4, 12)), 2 * 4),  # overlap in both
    (((0, 4), (0, 8)), ((4, 6), (0, 8)), 0),  # rows touch, no overlap
    (((0, 4), (0, 8)), ((1, 3), (8, 16)), 0),  # rows overlap, channels touch
    (((0, 4), (0, 8)), ((1, 3), (10, 16)), 0),  # rows overlap, channels apart
    (((0, 4), (0, 8)), ((6, 9), (10, 16)), 0),  # disjoint in both (two negative lengths)
    (((2, 3), (5, 6)), ((0, 10), (0, 10)), 1),  # one cell inside
    (((0, 0), (0, 8)), ((0, 4), (0, 8)), 0),  # an empty region
])
def test_intersect_cells_hand_computed(a, b, cells):
    """``intersect_cells`` (written out for speed) against hand-counted cells, both orders."""
    from milp_planner.space.geometry import Region, intersect_cells

    ra, rb = Region(*a), Region(*b)
    assert intersect_cells(ra, rb) == intersect_cells(rb, ra) == cells

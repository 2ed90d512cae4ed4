"""Ops lowered to loop nests (loopnest/ops/): every lowered kernel, run by the loop-nest
interpreter on small random inputs, matches the op's definition in ops/ (the reference
executor's `run_node` with fast=False)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from retarget import zoo
from retarget.errors import ShapeError, UnsupportedOpError
from retarget.frontend.onnx import import_model
from retarget.ir.graph import Node, Value
from retarget.ir.types import TensorType
from retarget.loopnest import Loop, Store, loads, run_kernel, verify_kernel, walk
from retarget.loopnest.buffering import buffer_kernel
from retarget.loopnest.ops import (SUPPORTED_OPS, UNARY_OPS, affine_pieces, c_name,
                                   lower_node)
from retarget.ops.registry import get_op, resolve_attrs
from retarget.ops.reference import run_node

RNG = np.random.default_rng(14)


def f32(*shape, low=None):
    """Random float32 data; `low` makes it uniform in [low, low + 2] instead of normal."""
    if low is not None:
        return (low + 2 * RNG.random(shape)).astype(np.float32)
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*values):
    return np.asarray(values, np.int64)


def make_node(op: str, inputs, attrs=None, consts=(), outputs: int = 1,
              name: str | None = None) -> tuple[Node, dict[str, np.ndarray]]:
    """A typed one-node graph fragment and its input arrays by value name. Input i is a Value
    "in{i}" holding inputs[i] (constant when i is in `consts`; None for an omitted optional
    input); the outputs are typed by the op's own shape rule."""
    values = [None if a is None else Value(f"in{i}", TensorType.of(np.asarray(a)),
                                           np.asarray(a) if i in consts else None)
              for i, a in enumerate(inputs)]
    node = Node(op, name or f"{op.lower()}/test.node", values, [], dict(attrs or {}))
    types = [None if v is None else v.type for v in values]
    known = [None if v is None else v.const for v in values]
    out_types = get_op(op).infer(resolve_attrs(node), types, known)
    node.outputs = [Value(f"out{j}", t) for j, t in enumerate(out_types[:outputs])]
    return node, {v.name: np.asarray(a) for v, a in zip(values, inputs) if v is not None}


def check(op: str, inputs, attrs=None, consts=(), outputs: int = 1):
    """Lower, verify, run the kernel and compare every output with the op's definition."""
    node, data = make_node(op, inputs, attrs, consts, outputs)
    kernel = lower_node(node)
    verify_kernel(kernel)
    names = {v.name for v in node.inputs if v is not None}
    assert {t.name for t in kernel.inputs} <= names
    assert [t.name for t in kernel.outputs] == [v.name for v in node.outputs]
    for t in kernel.inputs:    # only constants may be baked in instead of read
        assert t.shape == data[t.name].shape
    for v in node.inputs:
        if v is not None and not v.is_const:
            assert v.name in {t.name for t in kernel.inputs}, f"{v.name} is not read"
    args = [None if v is None else data[v.name] for v in node.inputs]
    expected = run_node(node, args, fast=False)
    got = run_kernel(kernel, {t.name: data[t.name] for t in kernel.inputs})
    for v, e in zip(node.outputs, expected):
        assert got[v.name].shape == e.shape
        np.testing.assert_allclose(got[v.name], e, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{op} {attrs}: output {v.name}")
    return kernel


def top_nests(kernel):
    """(loops outermost first, innermost statements) of each top-level nest, when perfect."""
    out = []
    for s in kernel.body:
        loops = []
        while isinstance(s, Loop) and len(s.body) == 1 and isinstance(s.body[0], Loop):
            loops.append(s)
            s = s.body[0]
        loops.append(s)
        out.append((loops, s.body))
    return out


def parallel_vars(kernel):
    return [s.var for s, _ in walk(kernel.body) if isinstance(s, Loop) and s.kind == "parallel"]


# ---- convolutions ---------------------------------------------------------------------------
CONV_CASES = {
    "pad1": ((1, 3, 5, 5), (4, 3, 3, 3), True, dict(pads=[1, 1, 1, 1])),
    "stride2_asym_pads": ((1, 2, 6, 5), (3, 2, 3, 2), False, dict(strides=[2, 2],
                                                                 pads=[0, 1, 2, 1])),
    "groups2": ((1, 4, 5, 5), (6, 2, 3, 3), True, dict(group=2, pads=[1, 1, 1, 1])),
    "depthwise_stride2": ((1, 4, 5, 5), (4, 1, 3, 3), True, dict(group=4, strides=[2, 2],
                                                                pads=[1, 1, 1, 1])),
    "depthwise_multiplier": ((1, 2, 4, 4), (4, 1, 3, 3), False, dict(group=2)),
    "dilation2": ((1, 2, 7, 7), (2, 2, 3, 3), False, dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    "batch2_1x1": ((2, 3, 4, 4), (5, 3, 1, 1), True, {}),
    "conv1d": ((1, 2, 8), (3, 2, 3), True, dict(pads=[1, 1], strides=[2])),
    "same_upper": ((1, 2, 5, 5), (2, 2, 3, 3), False, dict(auto_pad="SAME_UPPER", strides=[2, 2])),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(case):
    xs, ws, bias, attrs = CONV_CASES[case]
    inputs = [f32(*xs), f32(*ws)] + ([f32(ws[0])] if bias else [])
    k = check("Conv", inputs, attrs, consts=(1, 2))
    # an init nest, then one perfect nest with a single accumulation
    (init_loops, init), (loops, acc) = top_nests(k)
    assert len(init) == 1 and init[0].reduce is None
    assert len(acc) == 1 and isinstance(acc[0], Store) and acc[0].reduce == "+"
    # batch 1: the parallel loop is the output channels' (or the groups')
    assert parallel_vars(k)[0] == ("n" if xs[0] > 1 else loops[1].var)


def test_unpadded_conv_loads_need_no_fill_and_buffer():
    node, data = make_node("Conv", [f32(1, 4, 6, 6), f32(4, 4, 3, 3)], consts=(1,))
    k = lower_node(node)
    assert all(ld.fill is None for s, _ in walk(k.body) if isinstance(s, Store)
               for ld in loads(s.value))
    buffered, _ = buffer_kernel(k, capacity_bytes=2048)
    feeds = {t.name: data[t.name] for t in k.inputs}
    np.testing.assert_allclose(run_kernel(buffered, feeds)["out0"], run_kernel(k, feeds)["out0"],
                               rtol=1e-6, atol=1e-6)


CONV_T_CASES = {
    "unet_k2s2": ((1, 3, 3, 3), (3, 2, 2, 2), True, dict(strides=[2, 2])),
    "k3s2_pads_output_padding": ((1, 2, 3, 3), (2, 3, 3, 3), False,
                                 dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    "groups2_dilation2_stride3": ((1, 4, 3, 3), (4, 1, 3, 3), True,
                                  dict(group=2, strides=[3, 3], dilations=[2, 2])),
    "stride1_pads": ((1, 2, 4, 4), (2, 2, 3, 3), False, dict(pads=[1, 0, 1, 2])),
    "1d_taps_missing_a_phase": ((1, 2, 4), (2, 2, 2), True, dict(strides=[3])),
    "same_upper": ((1, 2, 3, 3), (2, 2, 3, 3), False, dict(strides=[2, 2], auto_pad="SAME_UPPER")),
}


@pytest.mark.parametrize("case", CONV_T_CASES)
def test_conv_transpose(case):
    xs, ws, bias, attrs = CONV_T_CASES[case]
    inputs = [f32(*xs), f32(*ws)] + ([f32(ws[1] * attrs.get("group", 1))] if bias else [])
    k = check("ConvTranspose", inputs, attrs, consts=(1, 2))
    for loops, stmts in top_nests(k)[1:]:     # every phase nest is one perfect accumulation
        assert len(stmts) == 1 and stmts[0].reduce == "+"


# ---- matrix products ------------------------------------------------------------------------
GEMM_CASES = {
    "plain": ((3, 4), (4, 5), None, {}),
    "fc_transB_bias": ((2, 4), (5, 4), (5,), dict(transB=1)),
    "transA_alpha_beta_column_C": ((4, 3), (4, 5), (3, 1), dict(transA=1, alpha=0.5, beta=2.0)),
    "both_transposed_full_C": ((4, 3), (5, 4), (3, 5), dict(transA=1, transB=1, beta=-1.0)),
    "scalar_C": ((3, 4), (4, 5), (), dict(beta=0.5)),
}


@pytest.mark.parametrize("case", GEMM_CASES)
def test_gemm(case):
    a, b, c, attrs = GEMM_CASES[case]
    inputs = [f32(*a), f32(*b)] + ([] if c is None else [f32(*c)])
    k = check("Gemm", inputs, attrs, consts=(1, 2))
    (_, init), (loops, acc) = top_nests(k)
    assert [lp.var for lp in loops] == ["i", "j", "k"] and acc[0].reduce == "+"
    rows = a[1] if attrs.get("transA") else a[0]
    assert parallel_vars(k)[0] == ("i" if rows > 1 else "j")


def test_gemm_with_one_row_runs_the_features_in_parallel():
    k = check("Gemm", [f32(1, 6), f32(4, 6), f32(4)], dict(transB=1), consts=(1, 2))
    assert parallel_vars(k) == ["j", "j"]


MATMUL_CASES = {
    "2d": ((3, 4), (4, 5)),
    "batched": ((2, 3, 4), (4, 5)),
    "broadcast_batch": ((2, 1, 3, 4), (3, 4, 2)),
    "vector_lhs": ((4,), (2, 4, 3)),
    "vector_rhs": ((2, 3, 4), (4,)),
}


@pytest.mark.parametrize("case", MATMUL_CASES)
def test_matmul(case):
    a, b = MATMUL_CASES[case]
    check("MatMul", [f32(*a), f32(*b)])


# ---- pooling --------------------------------------------------------------------------------
POOL_CASES = {
    "max_k3s2p1": ("MaxPool", (1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                pads=[1, 1, 1, 1])),
    "max_ceil": ("MaxPool", (1, 2, 6, 6), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "max_ceil_stride1_pad": ("MaxPool", (1, 2, 4, 4), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                                           ceil_mode=1)),
    "max_dilation_asym": ("MaxPool", (2, 1, 7, 6), dict(kernel_shape=[2, 3], dilations=[2, 1],
                                                        pads=[1, 0, 0, 2])),
    "avg_exclude_pad": ("AveragePool", (1, 2, 5, 5), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                          pads=[1, 1, 1, 1])),
    "avg_include_pad": ("AveragePool", (1, 2, 5, 5), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                          pads=[1, 1, 1, 1], count_include_pad=1)),
    "avg_ceil_exclude": ("AveragePool", (1, 2, 6, 6), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                           ceil_mode=1)),
    "avg_ceil_include_pad": ("AveragePool", (1, 2, 6, 5), dict(
        kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1, count_include_pad=1)),
    "avg_1d": ("AveragePool", (1, 3, 9), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
}


@pytest.mark.parametrize("case", POOL_CASES)
def test_pool(case):
    op, shape, attrs = POOL_CASES[case]
    k = check(op, [f32(*shape)], attrs)
    (_, init), (_, reduce) = top_nests(k)[:2]
    assert reduce[0].reduce == ("max" if op == "MaxPool" else "+")


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 3, 4, 5), (2, 2, 6)])
def test_global_pool(op, shape):
    check(op, [f32(*shape)])


# ---- elementwise ----------------------------------------------------------------------------
UNARY_ATTRS = {"LeakyRelu": [{}, dict(alpha=0.2)], "Gelu": [{}, dict(approximate="tanh")],
               "HardSigmoid": [{}, dict(alpha=0.3, beta=0.4)], "Elu": [dict(alpha=0.5)],
               "Celu": [dict(alpha=2.0)], "ThresholdedRelu": [dict(alpha=0.3)],
               "Swish": [dict(alpha=1.5)], "Shrink": [dict(lambd=0.4, bias=0.1)]}
POSITIVE = {"Log", "Sqrt", "Reciprocal"}


@pytest.mark.parametrize("op,attrs", [(op, a) for op in sorted(UNARY_OPS)
                                      for a in UNARY_ATTRS.get(op, [{}])])
def test_unary(op, attrs):
    x = f32(2, 3, 4, low=0.1) if op in POSITIVE else 3 * f32(2, 3, 4)
    if op == "Round":
        x[0, 0, :2] = [0.5, 2.5]         # halves round to even
    check(op, [x], attrs)


@pytest.mark.parametrize("bounds,consts", [
    ((np.float32(0), np.float32(6)), (1, 2)),      # ReLU6 as the zoo writes it
    ((np.float32(-1), None), (1,)),
    ((None, np.float32(0.5)), (2,)),
    ((np.float32(1), np.float32(-1)), (1, 2)),     # min > max: everything becomes max
    ((np.float32(-0.5), np.float32(0.7)), ()),     # run-time bounds are read as scalars
])
def test_clip(bounds, consts):
    lo, hi = bounds
    inputs = [4 * f32(1, 3, 2, 2), None if lo is None else np.asarray([lo]),
              None if hi is None else np.asarray([hi])]
    while inputs[-1] is None:
        inputs.pop()
    k = check("Clip", inputs, consts=consts)
    runtime_bounds = sum(b is not None and i not in consts for i, b in enumerate(bounds, 1))
    assert len(k.inputs) == 1 + runtime_bounds


BINARY_SHAPES = {
    "same": ((1, 4, 3, 3), (1, 4, 3, 3), ()),
    "scalar_const": ((1, 4, 3, 3), (), (1,)),
    "channelwise": ((2, 4, 3, 3), (4, 1, 1), ()),
    "trailing_vector": ((2, 3), (3,), ()),
    "both_broadcast": ((2, 1, 3), (1, 4, 1), ()),
}


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("case", BINARY_SHAPES)
def test_binary_broadcasting(op, case):
    a, b, consts = BINARY_SHAPES[case]
    y = f32(*b, low=0.5) if op == "Div" else f32(*b)
    k = check(op, [f32(*a), y], consts=consts)
    assert len(k.inputs) == 2 - len(consts)


def test_variadic_three_inputs():
    check("Max", [f32(2, 3), f32(3), f32(1, 1)])
    check("Mean", [f32(2, 3), f32(3), f32(2, 1)])


@pytest.mark.parametrize("exponent,consts", [(np.float32(2), (1,)), (f32(3), ()),
                                             (np.asarray(3, np.int64), (1,)),
                                             (np.asarray([2, 3, 1], np.int64), ())])
def test_pow(exponent, consts):
    check("Pow", [f32(2, 3, low=0.2), exponent], consts=consts)


def test_prelu_channel_slope():
    check("PRelu", [f32(1, 4, 3, 3), f32(4, 1, 1)], consts=(1,))


# ---- normalisation and softmax --------------------------------------------------------------
@pytest.mark.parametrize("shape,eps", [((2, 3, 4, 4), 1e-5), ((1, 5, 3), 1e-3), ((3, 4), 0.1)])
def test_batchnorm(shape, eps):
    c = shape[1]
    params = [f32(c), f32(c), f32(c), f32(c, low=0.2)]
    k = check("BatchNormalization", [f32(*shape)] + params, dict(epsilon=eps),
              consts=(1, 2, 3, 4))
    assert parallel_vars(k) == (["n"] if shape[0] > 1 else ["c"])


@pytest.mark.parametrize("size", [5, 2])
def test_lrn(size):
    check("LRN", [f32(1, 7, 3, 2)], dict(size=size, alpha=0.1, beta=0.75, bias=2.0))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,attrs", [((2, 3, 4), dict(axis=1)), ((2, 3, 4), dict(axis=-1)),
                                         ((2, 3, 4), dict(axis=1, coerce_to_2d=1)),
                                         ((5,), dict(axis=0)), ((1, 6), {})])
def test_softmax(op, shape, attrs):
    x = 4 * f32(*shape)
    x.reshape(-1)[0] = 100.0         # exp(100) overflows float: the max is subtracted first
    check(op, [x], attrs)


@pytest.mark.parametrize("shape,axis,params", [
    ((2, 5, 8), -1, [(8,), (8,)]), ((2, 3, 4), 1, [(3, 4), None]), ((6,), 0, [(6,), (1,)]),
    ((2, 3, 4, 4), 2, [(1, 4), (4, 4)])])
def test_layer_normalization(shape, axis, params):
    x = 3 + 2 * f32(*shape)          # an offset mean: the two-pass variance must remove it
    inputs = [x] + [None if p is None else f32(*p) for p in params]
    while inputs[-1] is None:
        inputs.pop()
    kernel = check("LayerNormalization", inputs, dict(axis=axis, epsilon=1e-5),
                   consts=tuple(range(1, len(inputs))))
    assert len(kernel.locals) == 2           # the row's mean and 1 / std


@pytest.mark.parametrize("shape,axis,indices", [
    ((2, 5, 3), 1, np.array(0)), ((2, 5, 3), 1, i64(1, 3)), ((4, 6), 0, i64(3, 2, 1, 0)),
    ((4, 6), -1, np.array(-1)), ((3, 7), 1, i64(2))])
def test_gather_by_an_arithmetic_progression(shape, axis, indices):
    check("Gather", [f32(*shape), indices], dict(axis=axis), consts=(1,))


def test_gather_by_other_indices_is_not_lowered():
    node, _ = make_node("Gather", [f32(4, 6), i64(0, 2, 3)], dict(axis=1), consts=(1,))
    with pytest.raises(UnsupportedOpError, match="not an arithmetic progression"):
        lower_node(node)


def test_layer_normalization_statistics_outputs_are_not_lowered():
    node, _ = make_node("LayerNormalization", [f32(2, 4), f32(4)], dict(axis=-1), outputs=3)
    with pytest.raises(UnsupportedOpError, match="Mean and InvStdDev"):
        lower_node(node)


@pytest.mark.parametrize("op,axes,keepdims", [
    ("ReduceMean", (2, 3), 1), ("ReduceSum", (1,), 0), ("ReduceMax", None, 1),
    ("ReduceMin", (-1,), 0), ("ReduceL2", (0, 2), 1), ("ReduceL1", (1, 3), 0),
    ("ReduceSumSquare", (3,), 1), ("ReduceLogSum", (2,), 1), ("ReduceMean", None, 0)])
def test_reduce(op, axes, keepdims):
    x = f32(2, 3, 4, 2, low=0.1) if op == "ReduceLogSum" else f32(2, 3, 4, 2)
    inputs = [x] + ([] if axes is None else [i64(*axes)])
    check(op, inputs, dict(keepdims=keepdims), consts=(1,))


def test_reduce_noop_with_empty_axes_copies():
    check("ReduceSum", [f32(2, 3), np.zeros(0, np.int64)], dict(noop_with_empty_axes=1),
          consts=(1,))


# ---- data movement --------------------------------------------------------------------------
@pytest.mark.parametrize("axis,shapes", [(1, [(1, 2, 3, 3), (1, 3, 3, 3), (1, 1, 3, 3)]),
                                         (2, [(1, 2, 1, 3), (1, 2, 4, 3)]),
                                         (-1, [(2, 3), (2, 1)]), (0, [(1, 4), (2, 4)])])
def test_concat(axis, shapes):
    k = check("Concat", [f32(*s) for s in shapes], dict(axis=axis))
    assert len(k.body) == len(shapes)          # one nest per input


def test_split():
    check("Split", [f32(2, 4, 3), i64(1, 3)], dict(axis=1), consts=(1,), outputs=2)
    check("Split", [f32(6, 2)], dict(axis=0, num_outputs=3), outputs=3)


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], None, [1, 0, 2, 3]])
def test_transpose(perm):
    check("Transpose", [f32(2, 3, 4, 2)], {} if perm is None else dict(perm=perm))


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ((1, 0), (3, 2), None, None),
    ((0,), (-1,), (2,), None),
    ((4, 1), (0, 10), (2, 1), (-2, 2)),          # negative step, clamped end
    ((-3,), (-100,), (0,), (-1,)),               # through index 0 backwards
])
def test_slice(starts, ends, axes, steps):
    inputs = [f32(3, 4, 5), i64(*starts), i64(*ends)]
    if axes is not None or steps is not None:
        inputs.append(i64(*(axes if axes is not None else range(len(starts)))))
    if steps is not None:
        inputs.append(i64(*steps))
    k = check("Slice", inputs, consts=(1, 2, 3, 4))
    assert [t.name for t in k.inputs] == ["in0"]   # the integer inputs are baked in


@pytest.mark.parametrize("pads,value", [((0, 1, 1, 0, 2, 1), None), ((1, 0, 0, 1, 2, 0), 1.5),
                                        ((0, -1, 1, 0, 1, -2), -2.0)])
def test_pad(pads, value):
    inputs = [f32(2, 3, 4), i64(*pads)]
    if value is not None:
        inputs.append(np.asarray(value, np.float32))
    check("Pad", inputs, consts=(1, 2))


def test_expand():
    check("Expand", [f32(3, 1), i64(2, 3, 4)], consts=(1,))


# ---- Resize ---------------------------------------------------------------------------------
RESIZE_CASES = {
    "unet_asymmetric_floor_x2": ((1, 2, 3, 3), np.float32([1, 1, 2, 2]), None,
                                 dict(coordinate_transformation_mode="asymmetric",
                                      nearest_mode="floor")),
    "half_pixel_x2": ((1, 2, 3, 4), np.float32([1, 1, 2, 2]), None, {}),
    "x3_prefer_ceil": ((1, 1, 2, 3), np.float32([1, 1, 3, 3]), None,
                       dict(nearest_mode="round_prefer_ceil")),
    "downscale_sizes": ((1, 2, 6, 6), None, i64(1, 2, 3, 2), {}),
    "scale_1_5": ((1, 1, 4, 6), np.float32([1, 1, 1.5, 1.5]), None,
                  dict(coordinate_transformation_mode="asymmetric", nearest_mode="floor")),
    "align_corners": ((1, 1, 3, 3), np.float32([1, 1, 2, 1]), None,
                      dict(coordinate_transformation_mode="align_corners")),
}


@pytest.mark.parametrize("case", RESIZE_CASES)
def test_resize_nearest(case):
    shape, scales, sizes, attrs = RESIZE_CASES[case]
    inputs = [f32(*shape), np.zeros(0, np.float32), scales if scales is not None
              else np.zeros(0, np.float32)] + ([sizes] if sizes is not None else [])
    k = check("Resize", inputs, dict(mode="nearest", **attrs), consts=(1, 2, 3))
    if case == "unet_asymmetric_floor_x2":
        assert len(k.body) == 1                  # out[2*i + r] = in[i]: one nest


def test_affine_pieces():
    (p,) = affine_pieces([0, 0, 1, 1, 2, 2])
    assert (p.out_step, p.count, p.src_step, p.reps) == (2, 3, 1, 2)
    (p,) = affine_pieces([0, 2, 4])
    assert (p.out_step, p.count, p.src_start, p.src_step, p.reps) == (1, 3, 0, 2, 1)
    table = [min(5, (o * 2 + 1) // 3) for o in range(9)]
    covered = {}
    for p in affine_pieces(table):
        for q in range(p.count):
            for r in range(p.reps):
                covered[p.out_start + p.out_step * q + r] = p.src_start + p.src_step * q
    assert covered == dict(enumerate(table))


# ---- views, names, errors -------------------------------------------------------------------
@pytest.mark.parametrize("op,inputs,attrs,consts", [
    ("Reshape", [f32(1, 4, 1, 1), i64(1, -1)], {}, (1,)),
    ("Flatten", [f32(2, 3, 2)], dict(axis=1), ()),
    ("Squeeze", [f32(1, 3, 1), i64(0, 2)], {}, (1,)),
    ("Unsqueeze", [f32(3), i64(0)], {}, (1,)),
    ("Identity", [f32(2, 2)], {}, ()),
    ("Dropout", [f32(2, 2)], {}, ()),
])
def test_views_lower_to_none(op, inputs, attrs, consts):
    assert lower_node(make_node(op, inputs, attrs, consts)[0]) is None


def test_kernel_names_are_c_identifiers():
    k = lower_node(make_node("Relu", [f32(2)], name="/layer1.0/relu-1")[0])
    assert k.name == "Relu__layer1_0_relu_1"
    assert c_name("3x3 conv") == "_3x3_conv"


@pytest.mark.parametrize("op,inputs,attrs,consts,outputs,match", [
    ("Resize", [f32(1, 1, 2, 2), np.zeros(0, np.float32), np.float32([1, 1, 2, 2])],
     dict(mode="linear"), (1, 2), 1, "mode='linear'"),
    ("Pad", [f32(3, 3), i64(1, 1, 1, 1)], dict(mode="reflect"), (1,), 1, "mode='reflect'"),
    ("MaxPool", [f32(1, 1, 4, 4)], dict(kernel_shape=[2, 2]), (), 2, "Indices"),
    ("Conv", [np.ones((1, 1, 3, 3), np.int8), np.ones((1, 1, 1, 1), np.int8)], {}, (1,), 1,
     "int8"),
    ("Dropout", [f32(2, 2)], {}, (), 2, "mask"),
    ("Where", [np.ones(2, bool), f32(2), f32(2)], {}, (), 1, "no loop-nest lowering"),
])
def test_unsupported_names_the_node(op, inputs, attrs, consts, outputs, match):
    node, _ = make_node(op, inputs, attrs, consts, outputs, name="net/block.7")
    with pytest.raises(UnsupportedOpError, match=match) as e:
        lower_node(node)
    assert f"{op} 'net/block.7'" in str(e.value)


def test_untyped_values_are_a_shape_error():
    x, y = Value("x", None), Value("y", None)
    with pytest.raises(ShapeError, match="Relu 'r'.*no type"):
        lower_node(Node("Relu", "r", [x], [y]))


# ---- the zoo --------------------------------------------------------------------------------
ZOO = ["resnet18", "resnet50", "vgg11", "vgg16", "googlenet", "mobilenet_v1", "mobilenet_v2",
       "alexnet", "squeezenet", "unet", "unet_resize"]


@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_node_lowers(name):
    size = max(32, zoo.MIN_SIZE.get(name, 0))
    graph = import_model(zoo.build(name, size=size, width=0.25))
    ops = {n.op for n in graph.nodes}
    assert ops <= SUPPORTED_OPS, sorted(ops - SUPPORTED_OPS)
    for node in graph.nodes:        # every attribute combination the network uses lowers
        k = lower_node(node)
        assert k is None or math.prod(k.outputs[0].shape) > 0

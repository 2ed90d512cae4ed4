"""Conv, ConvTranspose, pooling, BatchNormalization, LRN: semantics on hand-checked cases,
integer forms, shape rules and error messages."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import ShapeError, UnsupportedOpError
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.ops import OPS
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph


def run(op, *inputs, fast=False, **attrs):
    d = OPS[op]
    return d.run(list(inputs), dict(d.attrs, **attrs), fast=fast)


def infer(op, *types, consts=None, **attrs):
    d = OPS[op]
    types = [None if t is None else TensorType(t[0], t[1]) for t in types]
    return d.infer(dict(d.attrs, **attrs), types, consts or [None] * len(types))


def direct_conv2d(x, w, stride, pad):
    """Textbook loop conv (float64), independent of the op code."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for b in range(n):
        for o in range(m):
            for i in range(oh):
                for j in range(ow):
                    patch = xp[b, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
                    y[b, o, i, j] = (patch * w[o]).sum()
    return y


@pytest.mark.parametrize("fast", [False, True])
def test_conv_matches_textbook_loop(fast):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    got = run("Conv", x, w, None, fast=fast, strides=[2, 2], pads=[1, 1, 1, 1])[0]
    np.testing.assert_allclose(got, direct_conv2d(x, w, 2, 1), rtol=1e-5, atol=1e-5)


def test_conv_groups_equal_separate_convs():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    got = run("Conv", x, w, None, group=2)[0]
    halves = [run("Conv", x[:, 2 * g:2 * g + 2], w[3 * g:3 * g + 3], None)[0] for g in range(2)]
    np.testing.assert_allclose(got, np.concatenate(halves, axis=1), rtol=1e-6)


def test_integer_conv_is_exact_int32():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (1, 8, 6, 6)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 8, 3, 3)).astype(np.int8)
    b = rng.integers(-1000, 1000, 4).astype(np.int32)
    for fast in (False, True):
        y = run("Conv", x, w, b, fast=fast, pads=[1, 1, 1, 1])[0]
        assert y.dtype == np.int32
        ref = direct_conv2d(x, w, 1, 1) + b.reshape(4, 1, 1)
        np.testing.assert_array_equal(y, ref.astype(np.int64))
    assert infer("Conv", ((1, 8, 6, 6), "int8"), ((4, 8, 3, 3), "int8"))[0].dtype == "int32"


def test_integer_overflow_is_an_error_not_a_wrap():
    x = np.full((1, 1, 1, 1), 2**31 - 1, dtype=np.int32)
    w = np.full((1, 1, 1, 1), 2, dtype=np.int32)
    with pytest.raises(ShapeError, match="does not fit in int32"):
        run("Conv", x, w, None)


@pytest.mark.parametrize("auto_pad,size,stride,expect", [
    ("SAME_UPPER", 7, 2, 4), ("SAME_LOWER", 8, 3, 3), ("VALID", 7, 2, 3), ("NOTSET", 7, 2, 3)])
def test_conv_output_sizes(auto_pad, size, stride, expect):
    t = infer("Conv", ((1, 2, size), "float32"), ((3, 2, 3), "float32"), auto_pad=auto_pad,
              strides=[stride])
    assert t[0].shape == (1, 3, expect)


def test_same_lower_puts_odd_padding_first():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
    w = np.ones((1, 1, 2), np.float32)
    lower = run("Conv", x, w, None, auto_pad="SAME_LOWER")[0].ravel()
    upper = run("Conv", x, w, None, auto_pad="SAME_UPPER")[0].ravel()
    np.testing.assert_array_equal(lower, [0, 1, 3, 5])  # pad before: 0+0, 0+1, 1+2, 2+3
    np.testing.assert_array_equal(upper, [1, 3, 5, 3])  # pad after


def test_conv_channel_mismatch_message():
    with pytest.raises(ShapeError, match=r"input has 3 channels, weight expects 4 \(group=1\)"):
        infer("Conv", ((1, 3, 8, 8), "float32"), ((8, 4, 3, 3), "float32"))


def test_conv_errors_name_node_in_graph():
    x = Value("x", TensorType((1, 3, 8, 8), "float32"))
    w = constant("w", np.zeros((8, 4, 3, 3), np.float32))
    y = Value("y")
    g = Graph([Node("Conv", "stem/conv1", [x, w], [y])], [x], [y])
    with pytest.raises(ShapeError, match=r"Conv 'stem/conv1'.*input has 3 channels"):
        infer_shapes(g)


@pytest.mark.parametrize("bad,match", [
    (dict(strides=[1]), "strides"), (dict(pads=[1, 1]), "pads"),
    (dict(kernel_shape=[5, 5]), "kernel_shape"), (dict(group=2), "group")])
def test_conv_bad_attributes(bad, match):
    with pytest.raises(ShapeError, match=match):
        infer("Conv", ((1, 3, 8, 8), "float32"), ((8, 3, 3, 3), "float32"), **bad)


def test_conv_kernel_larger_than_input():
    with pytest.raises(ShapeError, match="larger than the padded input"):
        infer("Conv", ((1, 1, 2, 2), "float32"), ((1, 1, 3, 3), "float32"))


def test_conv_macs():
    d = OPS["Conv"]
    ins = [TensorType((1, 4, 8, 8), "float32"), TensorType((6, 2, 3, 3), "float32")]
    outs = d.infer(dict(d.attrs, group=2), ins, [None, None])
    assert d.macs({}, ins, outs) == 6 * 6 * 6 * 2 * 9


def test_conv_transpose_is_adjoint_of_conv():
    # <conv(x, w), y> == <x, convT(y, w)>: the defining property of a transposed convolution.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 7, 6))
    w = rng.standard_normal((3, 2, 3, 2))
    attrs = dict(strides=[2, 3], pads=[1, 0, 1, 1], dilations=[1, 2])
    cx = run("Conv", x, w, None, **attrs)[0]
    y = rng.standard_normal(cx.shape)
    # output_shape pins the transposed output to x's size when the stride leaves a remainder
    ty = run("ConvTranspose", y, w, None, output_shape=[7, 6], **attrs)[0]
    assert ty.shape == x.shape
    np.testing.assert_allclose((cx * y).sum(), (x * ty).sum(), rtol=1e-10)


def test_conv_transpose_output_size_formula():
    t = infer("ConvTranspose", ((1, 4, 5, 5), "float32"), ((4, 2, 3, 3), "float32"),
              strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 0], group=2)
    assert t[0].shape == (1, 4, 10, 9)  # 2*(5-1) + 1 + 3 - 2 and 2*(5-1) + 0 + 3 - 2
    t = infer("ConvTranspose", ((1, 4, 5, 5), "float32"), ((4, 2, 3, 3), "float32"),
              strides=[2, 2], auto_pad="SAME_UPPER")
    assert t[0].shape == (1, 2, 10, 10)
    with pytest.raises(ShapeError, match="weight expects 3"):
        infer("ConvTranspose", ((1, 4, 5, 5), "float32"), ((3, 2, 3, 3), "float32"))


def test_maxpool_values_and_indices():
    x = np.array([[[[1, 5, 2], [7, 3, 9], [4, 8, 6]]]], dtype=np.float32)
    for fast in (False, True):
        y, idx = run("MaxPool", x, fast=fast, kernel_shape=[2, 2])
        np.testing.assert_array_equal(y[0, 0], [[7, 9], [8, 9]])
        np.testing.assert_array_equal(idx[0, 0], [[3, 5], [7, 5]])
        _, idx_f = run("MaxPool", x, fast=fast, kernel_shape=[2, 2], storage_order=1)
        np.testing.assert_array_equal(idx_f[0, 0], [[1, 7], [5, 7]])  # column-major offsets


def test_maxpool_int8_padding_never_wins():
    x = np.full((1, 1, 2, 2), -128, dtype=np.int8)
    for fast in (False, True):
        y, idx = run("MaxPool", x, fast=fast, kernel_shape=[2, 2], pads=[1, 1, 1, 1])
        assert y.dtype == np.int8 and (y == -128).all()
        assert (idx >= 0).all()


def test_ceil_mode_drops_window_starting_in_padding():
    # in 4, kernel 2, stride 2, pads 0/1: ceil gives 3 windows but the third starts at 4 (pad)
    t = infer("MaxPool", ((1, 1, 4), "float32"), kernel_shape=[2], strides=[2],
              pads=[0, 1], ceil_mode=1)
    assert t[0].shape == (1, 1, 2)
    t = infer("MaxPool", ((1, 1, 5), "float32"), kernel_shape=[2], strides=[2], ceil_mode=1)
    assert t[0].shape == (1, 1, 3)  # the partial last window (start 4) is kept


@pytest.mark.parametrize("fast", [False, True])
def test_averagepool_divisors(fast):
    x = np.ones((1, 1, 3), dtype=np.float32)
    x[0, 0] = [3, 6, 9]
    common = dict(kernel_shape=[2], strides=[2], pads=[1, 0], ceil_mode=1)
    excl = run("AveragePool", x, fast=fast, **common)[0].ravel()
    incl = run("AveragePool", x, fast=fast, count_include_pad=1, **common)[0].ravel()
    np.testing.assert_allclose(excl, [3, 7.5])  # windows {pad,3}, {6,9}
    np.testing.assert_allclose(incl, [1.5, 7.5])  # pad counts; no ceil overhang here
    over = run("AveragePool", x, fast=fast, count_include_pad=1, kernel_shape=[2], strides=[2],
               ceil_mode=1)[0].ravel()
    np.testing.assert_allclose(over, [4.5, 9])  # ceil overhang is never counted


def test_averagepool_rejects_integers():
    with pytest.raises(ShapeError, match="float"):
        infer("AveragePool", ((1, 1, 4, 4), "int8"), kernel_shape=[2, 2])


def test_pool_pads_must_be_smaller_than_window():
    with pytest.raises(ShapeError, match="pads"):
        infer("MaxPool", ((1, 1, 8, 8), "float32"), kernel_shape=[2, 2], pads=[2, 2, 2, 2])


def test_global_pools():
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    np.testing.assert_allclose(run("GlobalAveragePool", x)[0].ravel(), [5.5, 17.5])
    np.testing.assert_allclose(run("GlobalMaxPool", x)[0].ravel(), [11, 23])
    assert infer("GlobalMaxPool", ((1, 2, 3, 4), "int8"))[0].shape == (1, 2, 1, 1)


def test_batchnorm_inference_formula():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    s, b, m = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    v = rng.random(3).astype(np.float32) + 0.5
    y = run("BatchNormalization", x, s, b, m, v, epsilon=1e-3)[0]
    ref = (x - m[:, None]) / np.sqrt(v[:, None] + 1e-3) * s[:, None] + b[:, None]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_batchnorm_training_mode_rejected():
    with pytest.raises(UnsupportedOpError, match="training_mode"):
        run("BatchNormalization", *[np.ones((1, 2, 2), np.float32)] + [np.ones(2, np.float32)] * 4,
            training_mode=1)
    with pytest.raises(ShapeError, match=r"scale has shape \[3\], expected \[2\]"):
        infer("BatchNormalization", ((1, 2, 4), "float32"),
              *[((3,), "float32")] * 4)


def test_lrn_formula_with_even_size():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 5, 2, 2)).astype(np.float32)
    y = run("LRN", x, size=4, alpha=0.1, beta=0.5, bias=1.5)[0]
    ref = np.empty_like(x)
    for c in range(5):  # channels [c - 1, c + 2] for size 4
        lo, hi = max(0, c - 1), min(4, c + 2)
        ref[:, c] = x[:, c] / (1.5 + 0.1 / 4 * (x[:, lo:hi + 1] ** 2).sum(axis=1)) ** 0.5
    np.testing.assert_allclose(y, ref, rtol=1e-5)


def test_graph_with_conv_pool_runs_fast_and_naive_alike():
    rng = np.random.default_rng(6)
    x = Value("x", TensorType((1, 3, 12, 12), "float32"))
    w = constant("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    h, p, y = Value("h"), Value("p"), Value("y")
    g = infer_shapes(Graph([
        Node("Conv", "c", [x, w], [h], dict(pads=[1, 1, 1, 1], strides=[2, 2])),
        Node("MaxPool", "m", [h], [p], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        Node("GlobalAveragePool", "g", [p], [y])], [x], [y]))
    assert y.type is None and g.outputs[0].type.shape == (1, 8, 1, 1)
    feed = {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
    np.testing.assert_allclose(run_graph(g, feed)["y"], run_graph(g, feed, fast=False)["y"],
                               rtol=1e-5)

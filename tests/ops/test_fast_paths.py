"""Fast paths vs definitions (hypothesis, random shapes/attributes), and each op vs onnxruntime
on single-node ONNX models at opsets 13 and 17."""
from __future__ import annotations

import threading
from unittest import mock

import numpy as np
import onnx
import pytest
from hypothesis import assume, given, settings, strategies as st
from onnx import helper, numpy_helper

from retarget.frontend.onnx import from_onnx_model
from retarget.ops import OPS, winograd
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph

ort = pytest.importorskip("onnxruntime")

SETTINGS = settings(max_examples=40, deadline=None)


def _run_both(op: str, inputs: list, attrs: dict) -> tuple[list, list]:
    d = OPS[op]
    return d.run(inputs, dict(d.attrs, **attrs), fast=True), \
        d.run(inputs, dict(d.attrs, **attrs), fast=False)


@st.composite
def conv_case(draw):
    nsp = draw(st.sampled_from([1, 2, 2, 3]))
    group = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = draw(st.booleans()) and group > 1
    cg = 1 if depthwise else draw(st.integers(1, 3))
    mg = 1 if depthwise else draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(nsp)]
    dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
    strides = [draw(st.integers(1, 3)) for _ in range(nsp)]
    size = [draw(st.integers((k - 1) * d + 1, 7 if nsp < 3 else 5)) for k, d in zip(kernel, dil)]
    auto_pad = draw(st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    attrs = dict(group=group, kernel_shape=kernel, dilations=dil, strides=strides,
                 auto_pad=auto_pad)
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, 2)) for _ in range(2 * nsp)]
    n = draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    x = rng.standard_normal((n, cg * group, *size)).astype(np.float32)
    w = rng.standard_normal((mg * group, cg, *kernel)).astype(np.float32)
    b = rng.standard_normal(mg * group).astype(np.float32) if draw(st.booleans()) else None
    return x, w, b, attrs


@SETTINGS
@given(conv_case())
def test_conv_fast_matches_definition(case):
    x, w, b, attrs = case
    fast, naive = _run_both("Conv", [x, w, b], attrs)
    assert fast[0].shape == naive[0].shape and fast[0].dtype == np.float32
    np.testing.assert_allclose(fast[0], naive[0], rtol=1e-4, atol=1e-5)


@SETTINGS
@given(conv_case(), st.sampled_from(["int8", "uint8"]), st.booleans())
def test_integer_conv_fast_is_exact(case, dtype, extreme):
    """int8 / uint8 Conv on BLAS (float64) equals the int64 definition bit for bit, also at
    the extremes of the range (every product +-2**14) with an int32 bias."""
    x, w, b, attrs = case
    info = np.iinfo(dtype)
    rng = np.random.default_rng(x.size)
    xi = (np.full(x.shape, info.min if dtype == "int8" else info.max) if extreme
          else rng.integers(info.min, info.max + 1, x.shape)).astype(dtype)
    wi = (np.full(w.shape, info.min) if extreme
          else rng.integers(info.min, info.max + 1, w.shape)).astype(dtype)
    bi = None if b is None else rng.integers(-2**24, 2**24, b.shape).astype(np.int32)
    fast, naive = _run_both("Conv", [xi, wi, bi], attrs)
    assert fast[0].dtype == naive[0].dtype == np.int32
    np.testing.assert_array_equal(fast[0], naive[0])


@st.composite
def winograd_conv_case(draw):
    # Shapes on which conv_fast takes Winograd F(2x2, 3x3): 3x3, stride 1, >= 16 channels,
    # outputs >= 12 (odd sizes leave half tiles), any padding.
    c, m = draw(st.integers(16, 20)), draw(st.integers(16, 20))
    h, w = draw(st.integers(12, 15)), draw(st.integers(12, 15))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    assume(h + pads[0] + pads[2] - 2 >= 12 and w + pads[1] + pads[3] - 2 >= 12)
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    x = rng.standard_normal((draw(st.integers(1, 2)), c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if draw(st.booleans()) else None
    return x, wt, b, dict(pads=pads, kernel_shape=[3, 3])


@settings(max_examples=15, deadline=None)
@given(winograd_conv_case())
def test_winograd_conv_matches_definition(case):
    x, w, b, attrs = case
    with mock.patch.object(winograd, "conv3x3_winograd",
                           wraps=winograd.conv3x3_winograd) as kernel:
        fast, naive = _run_both("Conv", [x, w, b], attrs)
    assert kernel.call_count == 1, "conv_fast did not take the Winograd path"
    assert fast[0].shape == naive[0].shape and fast[0].dtype == np.float32
    # Relative to the output's scale: F(2x2, 3x3) adds a few roundings per element.
    scale = np.abs(naive[0]).max()
    np.testing.assert_allclose(fast[0], naive[0], rtol=0, atol=2e-6 * scale)


def test_winograd_weight_cache_sees_in_place_changes_and_new_arrays():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    attrs = dict(OPS["Conv"].attrs, pads=[1, 1, 1, 1])
    conv = OPS["Conv"]
    first = conv.run([x, w], attrs)[0]
    np.testing.assert_array_equal(conv.run([x, w], attrs)[0], first)  # cache hit, same result
    w *= -2  # in place: same array object, new values
    np.testing.assert_allclose(conv.run([x, w], attrs)[0], -2 * first, rtol=1e-5, atol=1e-4)
    w2 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(conv.run([x, w2], attrs)[0], conv.run([x, w2], attrs,
                                                                        fast=False)[0],
                                   rtol=1e-4, atol=1e-4)
    entry = winograd._cache[id(w2)]
    del w2  # the entry of a collected array goes when the next one is added
    w3 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    conv.run([x, w3], attrs)
    assert all(e is not entry for e in winograd._cache.values())
    assert any(e.ref() is w3 for e in winograd._cache.values())


def test_winograd_cache_lets_weights_die_while_its_lock_is_held():
    # The garbage collector may free a cached array while this thread holds the cache lock
    # (inside cached_transform). Nothing may then try to take the lock again: a weakref
    # callback that did hung the test suite now and then.
    x = np.ones((1, 16, 12, 12), np.float32)
    holder = [np.ones((16, 16, 3, 3), np.float32)]
    OPS["Conv"].run([x, holder[0]], dict(OPS["Conv"].attrs, pads=[1, 1, 1, 1]))
    assert any(e.ref() is holder[0] for e in winograd._cache.values())

    def free_under_lock():
        with winograd._cache_lock:
            holder.clear()              # the array's last reference

    t = threading.Thread(target=free_under_lock, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "freeing a cached weight array under the cache lock deadlocked"


@st.composite
def pool_case(draw):
    nsp = draw(st.sampled_from([1, 2, 2, 3]))
    kernel = [draw(st.integers(1, 3)) for _ in range(nsp)]
    dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
    strides = [draw(st.integers(1, 3)) for _ in range(nsp)]
    size = [draw(st.integers((k - 1) * d + 1, 8 if nsp < 3 else 5)) for k, d in zip(kernel, dil)]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    attrs = dict(kernel_shape=kernel, dilations=dil, strides=strides, auto_pad=auto_pad,
                 ceil_mode=int(draw(st.booleans()) and auto_pad == "NOTSET"))
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, k - 1)) for k in kernel * 2]
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    x = rng.standard_normal((draw(st.integers(1, 2)), draw(st.integers(1, 3)), *size))
    return x.astype(np.float32), attrs


@SETTINGS
@given(pool_case(), st.sampled_from([0, 1]))
def test_maxpool_fast_matches_definition(case, storage_order):
    x, attrs = case
    fast, naive = _run_both("MaxPool", [x], dict(attrs, storage_order=storage_order))
    np.testing.assert_array_equal(fast[0], naive[0])
    np.testing.assert_array_equal(fast[1], naive[1])


@SETTINGS
@given(pool_case(), st.sampled_from(["float32", "int8"]))
def test_maxpool_fast_without_indices_matches_definition(case, dtype):
    # With one output requested the fast path skips the argmax; Y must not change.
    x, attrs = case
    if dtype == "int8":  # -128 also is the pad value: a window of only -128 must still work
        x = np.clip(np.round(x * 100), -128, 127).astype(np.int8)
    d = OPS["MaxPool"]
    full = dict(d.attrs, **attrs)
    (y,) = d.run([x], full, fast=True, num_outputs=1)
    naive = d.run([x], full, fast=False)
    assert y.dtype == x.dtype and y.shape == naive[0].shape
    np.testing.assert_array_equal(y, naive[0])


def test_maxpool_fast_without_indices_propagates_nan():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 1, 2] = np.nan
    d = OPS["MaxPool"]
    attrs = dict(d.attrs, kernel_shape=[2, 2], strides=[2, 2])
    (y,) = d.run([x], attrs, fast=True, num_outputs=1)
    np.testing.assert_array_equal(y, d.run([x], attrs, fast=False)[0])
    assert np.isnan(y[0, 0, 0, 1]) and np.isnan(y).sum() == 1


def test_executor_asks_maxpool_for_indices_only_when_used():
    # A one-output MaxPool node gets the fast no-indices path, a two-output one the indices.
    x = {"x": _r(1, 2, 6, 6)}
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for n_outputs in (1, 2):
        graph = infer_shapes(from_onnx_model(single_node_model("MaxPool", x, {}, attrs, 13,
                                                               n_outputs)))
        got = run_graph(graph, x)
        assert sorted(got) == [f"y{i}" for i in range(n_outputs)]
        want = run_graph(graph, x, fast=False)
        for k in got:
            np.testing.assert_array_equal(got[k], want[k])


@SETTINGS
@given(st.integers(1, 2), st.integers(1, 5), st.lists(st.integers(1, 4), max_size=3),
       st.sampled_from(["float32", "float64", "float16"]), st.floats(1e-6, 1e-2),
       st.integers(0, 2**31))
def test_batchnorm_fast_matches_definition(n, c, spatial, dtype, eps, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, c, *spatial)) * 3).astype(dtype)
    scale, bias, mean = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    var = (np.abs(rng.standard_normal(c)) + 0.05).astype(dtype)
    fast, naive = _run_both("BatchNormalization", [x, scale, bias, mean, var],
                            dict(epsilon=eps))
    assert fast[0].dtype == naive[0].dtype == x.dtype and fast[0].shape == x.shape
    # x * k + c in x's dtype vs (x - mean) * k + B in float64: a few ulps of the terms, which
    # may cancel, so the tolerance is relative to their size. c = B - mean * k itself rounds at
    # the size of |B| + |mean * k| (not of their difference), so both count.
    k = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    shape = (-1,) + (1,) * len(spatial)
    size = (np.abs(x * k.reshape(shape))
            + (np.abs(bias) + np.abs(mean * k)).reshape(shape))
    ulp = float(np.finfo(dtype).eps)
    err = np.abs(fast[0].astype(np.float64) - naive[0].astype(np.float64))
    assert (err <= 4 * ulp * (size + 1e-30)).all(), float((err / size).max() / ulp)


@SETTINGS
@given(pool_case(), st.sampled_from([0, 1]))
def test_averagepool_fast_matches_definition(case, count_include_pad):
    x, attrs = case
    fast, naive = _run_both("AveragePool", [x], dict(attrs, count_include_pad=count_include_pad))
    np.testing.assert_allclose(fast[0], naive[0], rtol=1e-5, atol=1e-6)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 6), st.booleans(), st.booleans(),
       st.floats(-2, 2), st.floats(-2, 2), st.sampled_from([None, "row", "col", "full"]))
def test_gemm_fast_matches_definition(m, k, n, ta, tb, alpha, beta, c_kind):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c = {None: None, "row": (n,), "col": (m, 1), "full": (m, n)}[c_kind]
    c = None if c is None else rng.standard_normal(c).astype(np.float32)
    fast, naive = _run_both("Gemm", [a, b, c], dict(alpha=alpha, beta=beta, transA=int(ta),
                                                     transB=int(tb)))
    np.testing.assert_allclose(fast[0], naive[0], rtol=1e-4, atol=1e-5)


@SETTINGS
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4),
       st.lists(st.integers(1, 3), min_size=1, max_size=4), st.integers(1, 5))
def test_matmul_fast_matches_definition(a_shape, b_shape, k):
    a_shape = a_shape[:-1] + [k] if len(a_shape) > 1 else [k]
    b_shape = b_shape[:-2] + [k, b_shape[-1]] if len(b_shape) > 1 else [k]
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    try:
        expected = np.matmul(a, b)
    except ValueError:  # batch dims that do not broadcast: both paths must refuse
        with pytest.raises(Exception):
            OPS["MatMul"].run([a, b], {})
        return
    fast, naive = _run_both("MatMul", [a, b], {})
    assert fast[0].shape == naive[0].shape == expected.shape
    np.testing.assert_allclose(fast[0], naive[0], rtol=1e-4, atol=1e-5)


# ---- every op vs onnxruntime on single-node models ------------------------------------------------
def single_node_model(op: str, inputs: dict, consts: dict, attrs: dict, opset: int,
                      n_outputs: int = 1) -> onnx.ModelProto:
    names = list(inputs) + list(consts)
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_outputs)], **attrs)
    g = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_outputs)],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def check_vs_ort(op, inputs, consts, attrs, opset, n_outputs=1, rtol=1e-5, atol=1e-5):
    model = single_node_model(op, inputs, consts, attrs, opset, n_outputs)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    expected = sess.run(None, inputs)
    graph = infer_shapes(from_onnx_model(model))
    for fast in (True, False):
        got = run_graph(graph, inputs, fast=fast)
        for i, e in enumerate(expected):
            g = got[f"y{i}"]
            assert g.shape == e.shape and g.dtype == e.dtype, (fast, g.shape, e.shape)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"fast={fast}")


def _r(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


OPSETS = [13, 17]
ORT_CASES = [
    ("Conv", {"x": _r(1, 4, 9, 9)}, {"w": _r(6, 4, 3, 3, seed=1), "b": _r(6, seed=2)},
     dict(strides=[2, 2], pads=[1, 0, 2, 1])),
    ("Conv", {"x": _r(2, 6, 8, 7)}, {"w": _r(6, 2, 3, 2, seed=1)},
     dict(group=3, strides=[2, 1], auto_pad="SAME_UPPER")),
    ("Conv", {"x": _r(1, 4, 9, 8)}, {"w": _r(4, 4, 3, 3, seed=1)},
     dict(dilations=[2, 3], pads=[2, 1, 0, 3])),
    ("Conv", {"x": _r(1, 8, 10, 10)}, {"w": _r(8, 1, 3, 3, seed=1), "b": _r(8, seed=3)},
     dict(group=8, pads=[1, 1, 1, 1], strides=[2, 2])),  # depthwise
    ("Conv", {"x": _r(1, 16, 7, 7)}, {"w": _r(8, 16, 1, 1, seed=1)}, dict(strides=[2, 2])),
    ("Conv", {"x": _r(1, 3, 11)}, {"w": _r(5, 3, 4, seed=1)}, dict(auto_pad="SAME_LOWER")),
    ("Conv", {"x": _r(1, 2, 5, 6, 5)}, {"w": _r(3, 2, 2, 3, 2, seed=1)}, dict(pads=[1] * 6)),
    ("ConvTranspose", {"x": _r(1, 4, 5, 5)}, {"w": _r(4, 3, 3, 3, seed=1), "b": _r(3, seed=2)},
     dict(strides=[2, 2], pads=[1, 1, 0, 0], output_padding=[1, 0])),
    ("ConvTranspose", {"x": _r(1, 4, 4, 3)}, {"w": _r(4, 2, 2, 3, seed=1)},
     dict(group=2, dilations=[2, 1], strides=[3, 2], output_shape=[12, 8])),
    ("MaxPool", {"x": _r(1, 3, 9, 9)}, {}, dict(kernel_shape=[3, 3], strides=[2, 2],
                                               pads=[1, 1, 1, 1])),
    ("MaxPool", {"x": _r(1, 2, 8, 7)}, {}, dict(kernel_shape=[3, 2], strides=[2, 2],
                                               ceil_mode=1, dilations=[1, 2])),
    ("MaxPool", {"x": _r(1, 2, 7, 7)}, {}, dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER",
                                               strides=[2, 2])),
    ("AveragePool", {"x": _r(1, 3, 9, 8)}, {}, dict(kernel_shape=[3, 3], strides=[2, 2],
                                                   pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", {"x": _r(1, 3, 8, 8)}, {}, dict(kernel_shape=[3, 3], strides=[2, 2],
                                                   pads=[1, 0, 1, 0], ceil_mode=1)),
    ("AveragePool", {"x": _r(1, 2, 7, 6)}, {}, dict(kernel_shape=[2, 3], auto_pad="SAME_LOWER")),
    ("GlobalAveragePool", {"x": _r(2, 3, 5, 4)}, {}, {}),
    ("GlobalMaxPool", {"x": _r(2, 3, 5, 4)}, {}, {}),
    ("BatchNormalization", {"x": _r(2, 3, 4, 5)},
     {"s": _r(3, seed=1), "b": _r(3, seed=2), "m": _r(3, seed=3),
      "v": np.abs(_r(3, seed=4)) + 0.1}, dict(epsilon=1e-3)),
    ("LRN", {"x": _r(1, 7, 4, 4)}, {}, dict(size=3, alpha=2e-4, beta=0.75, bias=2.0)),
    ("LRN", {"x": _r(1, 6, 3, 3)}, {}, dict(size=5)),  # ORT takes odd sizes only
    ("Gemm", {"a": _r(5, 4)}, {"b": _r(3, 4, seed=1), "c": _r(3, seed=2)},
     dict(transB=1, alpha=0.5, beta=2.0)),
    ("Gemm", {"a": _r(4, 5)}, {"b": _r(4, 3, seed=1)}, dict(transA=1)),
    ("MatMul", {"a": _r(2, 1, 3, 4)}, {"b": _r(5, 4, 2, seed=1)}, {}),
    ("MatMul", {"a": _r(4)}, {"b": _r(3, 4, 2, seed=1)}, {}),
    ("MatMul", {"a": _r(2, 3, 4)}, {"b": _r(4, seed=1)}, {}),
]


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", range(len(ORT_CASES)),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ORT_CASES)])
def test_op_matches_onnxruntime(case, opset):
    op, inputs, consts, attrs = ORT_CASES[case]
    check_vs_ort(op, inputs, consts, attrs, opset)


@pytest.mark.parametrize("opset", OPSETS)
def test_maxpool_indices_match_onnxruntime(opset):
    check_vs_ort("MaxPool", {"x": _r(2, 3, 7, 6)}, {},
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), opset, n_outputs=2)


@pytest.mark.parametrize("opset", OPSETS)
def test_integer_maxpool_matches_onnxruntime(opset):
    x = np.random.default_rng(0).integers(-128, 128, (1, 2, 6, 6)).astype(np.int8)
    check_vs_ort("MaxPool", {"x": x}, {}, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), opset)

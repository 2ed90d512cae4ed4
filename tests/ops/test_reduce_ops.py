"""Reductions, ArgMax/ArgMin, Softmax family and CumSum against onnxruntime; empty-set
identities; and the opset upgrades (axes attribute -> input, coerce-to-2-D Softmax)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from retarget.errors import ShapeError
from retarget.frontend.onnx import from_onnx_model
from retarget.ops import OPS
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(2)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
I64 = np.int64
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]


def model_of(op, x, consts: dict | None = None, opset=18, **attrs):
    consts = consts or {}
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    node = helper.make_node(op, ["x", *consts], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype),
                                                    x.shape)],
        [helper.make_empty_tensor_value_info("y")], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


def check_against_ort(model, x, rtol=1e-5, atol=1e-6):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    graph = infer_shapes(from_onnx_model(model))
    got = run_graph(graph, {"x": x})[graph.outputs[0].name]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
    assert graph.outputs[0].type.shape == got.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, -1], 0), (None, 1), (None, 0)])
def test_reductions_match_onnxruntime(op, axes, keepdims):
    consts = {} if axes is None else {"a": np.array(axes, I64)}
    x = np.abs(X) + 0.5 if op == "ReduceProd" else X
    check_against_ort(model_of(op, x, consts, keepdims=keepdims), x)


def test_noop_with_empty_axes_and_integer_reductions():
    got = check_against_ort(model_of("ReduceSum", X, {"a": np.zeros(0, I64)}, noop_with_empty_axes=1),
                            X)
    np.testing.assert_array_equal(got, X)
    xi = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    check_against_ort(model_of("ReduceSum", xi, {"a": np.array([0], I64)}), xi)
    check_against_ort(model_of("ReduceMax", xi, {"a": np.array([1], I64)}, keepdims=0), xi)


def test_empty_set_identities():
    empty = np.zeros((2, 0, 3), np.float32)
    kw = dict(axes=np.array([1], I64), keepdims=0, noop_with_empty_axes=0)
    assert (OPS["ReduceMax"].compute(empty, **kw) == -np.inf).all()
    assert (OPS["ReduceMin"].compute(empty, **kw) == np.inf).all()
    assert (OPS["ReduceSum"].compute(empty, **kw) == 0).all()
    assert (OPS["ReduceProd"].compute(empty, **kw) == 1).all()
    assert (OPS["ReduceLogSumExp"].compute(empty, **kw) == -np.inf).all()
    assert np.isnan(OPS["ReduceMean"].compute(empty, **kw)).all()


def test_log_sum_exp_does_not_overflow():
    x = np.array([[1000.0, 1000.0], [-1000.0, -np.inf]], np.float32)
    got = OPS["ReduceLogSumExp"].compute(x, np.array([1], I64), keepdims=0, noop_with_empty_axes=0)
    np.testing.assert_allclose(got, [1000 + np.log(2), -1000], rtol=1e-6)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims, last", [(1, 1, 0), (-1, 0, 1), (0, 1, 1)])
def test_arg_reductions(op, axis, keepdims, last):
    x = RNG.integers(0, 3, (3, 4, 2)).astype(np.float32)  # many ties: first vs last matters
    check_against_ort(model_of(op, x, axis=axis, keepdims=keepdims, select_last_index=last), x)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family(op, axis):
    x = (X * 10).astype(np.float32)
    x[0, 0, :2] = 5.0  # a tie for Hardmax
    check_against_ort(model_of(op, x, opset=13, axis=axis), x)


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1e4, 1e4 + 1, -1e4]], np.float32)
    got = OPS["Softmax"].compute(x, axis=-1, coerce_to_2d=0)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got.sum(), 1, rtol=1e-6)


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    check_against_ort(model_of("CumSum", X, {"a": np.array(1, I64)}, exclusive=exclusive,
                               reverse=reverse), X)


def test_bad_axes_are_shape_errors():
    with pytest.raises(ShapeError, match=r"ReduceSum 'ReduceSum_0'.*out of range for rank 3"):
        infer_shapes(from_onnx_model(model_of("ReduceSum", X, {"a": np.array([3], I64)})))
    with pytest.raises(ShapeError, match="repeat an axis"):
        infer_shapes(from_onnx_model(model_of("ReduceMax", X, {"a": np.array([1, -2], I64)})))
    with pytest.raises(ShapeError, match=r"ArgMax 'ArgMax_0'.*out of range"):
        infer_shapes(from_onnx_model(model_of("ArgMax", X, axis=-4)))


# ---- opset upgrades ----------------------------------------------------------------------
@pytest.mark.parametrize("op, opset", [("ReduceSum", 11), ("ReduceMean", 13), ("ReduceMax", 11),
                                       ("ReduceL2", 13)])
def test_axes_attribute_becomes_input(op, opset):
    check_against_ort(model_of(op, X, opset=opset, axes=[0, 2], keepdims=0), X)
    check_against_ort(model_of(op, X, opset=opset), X)  # no axes: reduce everything


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [None, 0, 2, -2])
def test_opset11_softmax_coerces_to_2d(op, axis):
    attrs = {} if axis is None else {"axis": axis}
    x = (X * 5).astype(np.float32)
    got = check_against_ort(model_of(op, x, opset=11, **attrs), x)
    if op == "Softmax":
        # Normalised over every axis from `axis` (default 1) on, not over `axis` alone.
        a = 1 if axis is None else axis % 3
        np.testing.assert_allclose(got.sum(axis=tuple(range(a, 3))), 1, rtol=1e-5)

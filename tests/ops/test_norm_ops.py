"""LayerNormalization, RMSNormalization, InstanceNormalization, GroupNormalization and Einsum
against onnxruntime on random inputs (the ONNX backend node tests run in test_onnx_backend.py),
their upgrades, and the errors that name what is wrong."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from retarget.errors import ShapeError
from retarget.frontend.onnx import from_onnx_model
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(5)


def model_of(op, inputs: dict, consts: dict, outputs=("y",), opset=21, **attrs):
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    node = helper.make_node(op, [*inputs, *consts], list(outputs), **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


def run_both(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    graph = infer_shapes(from_onnx_model(model))
    got = run_graph(graph, feeds)
    return [got[v.name] for v in graph.outputs], want


def assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-6):
    got, want = run_both(model, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
def test_layer_normalization_all_outputs(axis):
    x = RNG.standard_normal((2, 3, 8)).astype(np.float32) * 3 + 1
    norm = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    scale = RNG.standard_normal(norm).astype(np.float32)
    bias = RNG.standard_normal(norm).astype(np.float32)
    m = model_of("LayerNormalization", {"x": x}, {"s": scale, "b": bias},
                 outputs=("y", "mean", "inv"), opset=17, axis=axis, epsilon=1e-3)
    assert_matches_ort(m, {"x": x})


def test_layer_normalization_scale_broadcasts_and_bias_is_optional():
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    m = model_of("LayerNormalization", {"x": x}, {"s": np.float32([2.0])}, opset=17)
    assert_matches_ort(m, {"x": x})


def test_rms_normalization():
    x = RNG.standard_normal((2, 5, 12)).astype(np.float32)
    m = model_of("RMSNormalization", {"x": x}, {"s": RNG.standard_normal(12).astype(np.float32)},
                 opset=23, epsilon=1e-6)
    assert_matches_ort(m, {"x": x})


def test_instance_normalization():
    x = RNG.standard_normal((2, 6, 5, 7)).astype(np.float32)
    m = model_of("InstanceNormalization", {"x": x},
                 {"s": RNG.standard_normal(6).astype(np.float32),
                  "b": RNG.standard_normal(6).astype(np.float32)}, opset=17, epsilon=1e-4)
    assert_matches_ort(m, {"x": x})


def test_group_normalization_opset21_per_channel():
    x = RNG.standard_normal((2, 8, 3, 3)).astype(np.float32)
    m = model_of("GroupNormalization", {"x": x},
                 {"s": RNG.standard_normal(8).astype(np.float32),
                  "b": RNG.standard_normal(8).astype(np.float32)}, opset=21, num_groups=4)
    assert_matches_ort(m, {"x": x})


def test_group_normalization_opset18_per_group_is_upgraded():
    x = RNG.standard_normal((2, 8, 3, 3)).astype(np.float32)
    scale, bias = np.float32([1, 2, 3, 4]), np.float32([0, -1, 1, 0.5])
    m = model_of("GroupNormalization", {"x": x}, {"s": scale, "b": bias}, opset=18,
                 num_groups=4)
    graph = infer_shapes(from_onnx_model(m))
    y = run_graph(graph, {"x": x})[graph.outputs[0].name]
    g = x.reshape(2, 4, -1).astype(np.float64)
    z = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    want = z * scale[None, :, None] + bias[None, :, None]
    np.testing.assert_allclose(y, want.reshape(x.shape).astype(np.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("equation,shapes", [
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),     # attention scores
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 5), (2, 3, 5, 8)]),     # attention-weighted values
    ("bnd,de->bne", [(2, 7, 16), (16, 4)]),                # token-wise dense
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 6)]),  # batched matmul, broadcast
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(5, 5)]),
    ("i,i", [(6,), (6,)]),
    ("bij", [(2, 3, 4)]),
])
def test_einsum_patterns(equation, shapes):
    feeds = {f"x{i}": RNG.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    m = model_of("Einsum", feeds, {}, opset=12, equation=equation)
    assert_matches_ort(m, feeds)


def test_errors_name_the_problem():
    from retarget.ops.linalg import einsum_shape
    with pytest.raises(ShapeError, match=r"axis 'k' is 4 in one input and 5"):
        einsum_shape("ik,kj->ij", [(3, 4), (5, 6)])
    with pytest.raises(ShapeError, match=r"term 'ij' names 2 axes of an input of shape \[2, 3, 4\]"):
        einsum_shape("ij->i", [(2, 3, 4)])
    with pytest.raises(ShapeError, match="names an axis no input has"):
        einsum_shape("ij->ik", [(2, 3)])
    x = RNG.standard_normal((2, 6, 3)).astype(np.float32)
    m = model_of("GroupNormalization", {"x": x}, {"s": np.ones(6, np.float32),
                                                  "b": np.zeros(6, np.float32)}, num_groups=4)
    with pytest.raises(ShapeError, match="num_groups=4 does not divide the input's 6 channels"):
        infer_shapes(from_onnx_model(m))
    m = model_of("LayerNormalization", {"x": x}, {"s": np.ones(4, np.float32)}, opset=17)
    with pytest.raises(ShapeError, match=r"Scale of shape \[4\] does not broadcast"):
        infer_shapes(from_onnx_model(m))


def test_einsum_ellipsis_of_different_ranks_follows_numpy():
    a, b = RNG.standard_normal((2, 1, 3, 4)), RNG.standard_normal((5, 4, 6))
    from retarget.ops.linalg import einsum, einsum_shape
    assert einsum_shape("...ij,...jk->...ik", [a.shape, b.shape]) == (2, 5, 3, 6)
    np.testing.assert_allclose(einsum(a, b, equation="...ij,...jk->...ik"),
                               np.einsum("...ij,...jk->...ik", a, b))

"""Elementwise ops: definitions against onnxruntime, dtype rules, error messages, and the
opset upgrades that touch them (Clip-6 attributes, legacy broadcast, Cast-1 strings)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from retarget.errors import ShapeError, UnsupportedOpError
from retarget.frontend.onnx import from_onnx_model
from retarget.ir.graph import Graph, Node, Value
from retarget.ir.types import TensorType
from retarget.ops import OPS
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)


def one_node_model(op, inputs: dict, n_out=1, opset=17, **attrs) -> onnx.ModelProto:
    """A model of one `op` node over graph inputs named like `inputs` (name -> array)."""
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)]
    node = helper.make_node(op, list(inputs), [o.name for o in outs], **attrs)
    graph = helper.make_graph([node], "g", ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)  # fills in the output types ORT wants


def run_both(model, inputs: dict) -> tuple[list, list]:
    """(onnxruntime outputs, retarget reference outputs) for the same model and inputs."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, inputs)
    graph = infer_shapes(from_onnx_model(model))
    got = run_graph(graph, inputs)
    return want, [got[v.name] for v in graph.outputs]


def assert_same(want, got, rtol=1e-5, atol=1e-6):
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


UNARY_FLOAT = ["Relu", "Sigmoid", "Tanh", "Exp", "Sqrt", "Neg", "Abs", "Reciprocal", "Floor",
               "Ceil", "Round", "Sign", "Erf", "Softplus", "Softsign", "HardSwish", "Sin", "Atan"]


@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_unary_matches_onnxruntime(op):
    x = (RNG.standard_normal((2, 3, 4)) * 3).astype(np.float32)
    x[0, 0, :2] = [0.5, -2.5]  # halves: Round must go to even
    if op == "Sqrt":
        x = np.abs(x)
    assert_same(*run_both(one_node_model(op, {"x": x}), {"x": x}))


@pytest.mark.parametrize("op, attrs", [("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}),
                                       ("Selu", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                                       ("Celu", {"alpha": 2.0}), ("ThresholdedRelu", {"alpha": 0.5})])
def test_activations_with_attributes(op, attrs):
    x = (RNG.standard_normal((3, 5)) * 2).astype(np.float32)
    assert_same(*run_both(one_node_model(op, {"x": x}, **attrs), {"x": x}))


def test_gelu_both_forms_match_their_formulas():
    x = np.linspace(-4, 4, 17, dtype=np.float32)
    exact = OPS["Gelu"].compute(x, approximate="none")
    tanh = OPS["Gelu"].compute(x, approximate="tanh")
    from math import erf, sqrt
    np.testing.assert_allclose(exact, [0.5 * v * (1 + erf(v / sqrt(2))) for v in x], rtol=1e-6)
    assert np.abs(exact - tanh).max() < 1e-3 and np.abs(exact - tanh).max() > 0


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu",
                                "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_binary_broadcasting_matches_onnxruntime(op):
    a = RNG.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    b = RNG.uniform(0.5, 2.0, (3, 1)).astype(np.float32)
    if op == "PRelu":
        a -= 1.0
    assert_same(*run_both(one_node_model(op, {"a": a, "b": b}), {"a": a, "b": b}))


def test_integer_div_truncates_toward_zero_and_mod_follows_the_divisor():
    a = np.array([7, -7, 7, -7, 6, -1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], np.int32)
    assert OPS["Div"].compute(a, b).tolist() == [3, -3, -3, 3, 2, 0]
    want, got = run_both(one_node_model("Div", {"a": a, "b": b}), {"a": a, "b": b})
    assert_same(want, got)
    assert OPS["Mod"].compute(a, b, fmod=0).tolist() == [1, 1, -1, -1, 0, 4]
    assert OPS["Mod"].compute(a, b, fmod=1).tolist() == [1, -1, 1, -1, 0, -1]


def test_integer_division_by_zero_names_the_node():
    a, b = np.array([1, 2], np.int64), np.array([1, 0], np.int64)
    graph = infer_shapes(from_onnx_model(one_node_model("Div", {"a": a, "b": b})))
    with pytest.raises(ShapeError, match=r"Div 'Div_0'.*division by zero"):
        run_graph(graph, {"a": a, "b": b})


def test_variadic_sum_mean_max_broadcast():
    xs = {"a": RNG.standard_normal((2, 1, 3)).astype(np.float32),
          "b": RNG.standard_normal((4, 1)).astype(np.float32),
          "c": RNG.standard_normal((3,)).astype(np.float32)}
    for op in ("Sum", "Mean", "Max", "Min"):
        assert_same(*run_both(one_node_model(op, xs), xs))


def test_logic_where_and_not():
    c = RNG.standard_normal((2, 3)) > 0
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    y = RNG.standard_normal((1, 3)).astype(np.float32)
    assert_same(*run_both(one_node_model("Where", {"c": c, "x": x, "y": y}), {"c": c, "x": x, "y": y}))
    d = RNG.standard_normal((2, 3)) > 0
    for op in ("And", "Or", "Xor"):
        assert_same(*run_both(one_node_model(op, {"c": c, "d": d}), {"c": c, "d": d}))
    assert_same(*run_both(one_node_model("Not", {"c": c}), {"c": c}))


def test_clip_scalar_bounds_and_min_above_max():
    x = np.arange(-5, 5, dtype=np.int32)
    lo, hi = np.array(-2, np.int32), np.array(3, np.int32)
    assert_same(*run_both(one_node_model("Clip", {"x": x, "lo": lo, "hi": hi}),
                          {"x": x, "lo": lo, "hi": hi}))
    # ONNX: when min > max, every element becomes max.
    assert OPS["Clip"].compute(x, np.array(4, np.int32), np.array(1, np.int32)).tolist() == [1] * 10


@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.FLOAT16, TensorProto.UINT8,
                                TensorProto.BOOL, TensorProto.DOUBLE])
def test_cast_matches_onnxruntime(to):
    x = np.array([-2.7, -0.5, 0.0, 0.4, 1.9, 3.0], np.float32)
    if to == TensorProto.UINT8:
        x = np.abs(x)
    assert_same(*run_both(one_node_model("Cast", {"x": x}, to=to), {"x": x}))


def test_cast_to_unsupported_type_is_unsupported():
    x = np.zeros(3, np.float32)
    with pytest.raises(UnsupportedOpError, match="element type 16"):
        infer_shapes(from_onnx_model(one_node_model("Cast", {"x": x}, to=TensorProto.BFLOAT16)))


def test_mismatched_dtypes_and_shapes_are_shape_errors_naming_the_node():
    a, b = Value("a", TensorType((2, 3), "float32")), Value("b", TensorType((2, 3), "int32"))
    y = Value("y")
    with pytest.raises(ShapeError, match=r"Add 'plus'.*one dtype"):
        infer_shapes(Graph([Node("Add", "plus", [a, b], [y])], [a, b], [y]))
    c = Value("c", TensorType((4,), "float32"))
    with pytest.raises(ShapeError, match=r"Mul 'times'.*do not broadcast"):
        infer_shapes(Graph([Node("Mul", "times", [a, c], [y])], [a, c], [y]))
    with pytest.raises(ShapeError, match=r"Exp 'e'.*floating-point"):
        infer_shapes(Graph([Node("Exp", "e", [b], [y])], [b], [y]))


def test_bitshift_out_of_range_amounts_follow_onnx():
    a = np.array([-8, 4, -1], np.int8)
    right = OPS["BitShift"].compute(a, np.array([8, 1, -1], np.int8), direction="RIGHT")
    left = OPS["BitShift"].compute(a, np.array([8, 1, 7], np.int8), direction="LEFT")
    assert right.tolist() == [-1, 2, -1] and left.tolist() == [0, 8, -128]


# ---- opset upgrades ----------------------------------------------------------------------
def test_clip6_attributes_become_inputs():
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    model = one_node_model("Clip", {"x": x}, opset=6, min=-1.0, max=2.0)
    assert_same(*run_both(model, {"x": x}))
    only_max = one_node_model("Clip", {"x": x}, opset=6, max=0.5)
    assert_same(*run_both(only_max, {"x": x}))


def test_opset6_broadcast_attribute():
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((3,)).astype(np.float32)
    graph = infer_shapes(from_onnx_model(one_node_model("Add", {"a": a, "b": b}, opset=6, broadcast=1)))
    np.testing.assert_allclose(run_graph(graph, {"a": a, "b": b})["y0"], a + b)
    with pytest.raises(UnsupportedOpError, match="axis=0"):
        from_onnx_model(one_node_model("Add", {"a": a, "b": a[:, 0]}, opset=6, broadcast=1, axis=0))

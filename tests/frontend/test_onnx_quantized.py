"""Import of QDQ / QLinearConv ONNX models with power-of-two scales: the converted integer
graph equals the model's ONNX semantics bit for bit (our reference of the QDQ ops, and
onnxruntime), and other scales are rejected naming the node."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from retarget.errors import UnsupportedOpError
from retarget.frontend.onnx import import_model
from retarget.frontend.onnx_quantized import load_quantized
from retarget.ops.reference import run_graph
from retarget.zoo.qdq import init, qdq_cnn as qdq_model

RNG = np.random.default_rng(0)


def inputs():
    # multiples of 2**-6 so some products land exactly on rounding ties
    return {"x": (RNG.integers(-200, 200, (2, 2, 4, 4)) / 64.0).astype(np.float32)}


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_conv_matmul_converts_to_integer_ops_bit_exactly(per_channel):
    m = qdq_model(per_channel=per_channel)
    g = load_quantized(m)
    ops = [n.op for n in g.nodes]
    assert ops == ["QuantizeP2", "Conv", "Requantize", "Flatten", "MatMul", "Requantize",
                   "DequantizeP2"]
    conv = g.node("conv")
    assert [v.type.dtype for v in conv.inputs] == ["int8", "int8", "int32"]
    assert g.node("conv/requant").attrs["lo"] == 0  # the Relu folded into the clip
    ref = import_model(m, simplify=False)  # the QDQ graph with ONNX semantics
    for _ in range(3):
        x = inputs()
        want = run_graph(ref, x)["y"]
        got = run_graph(g, x)["y"]
        np.testing.assert_array_equal(got, want)
        ort = pytest.importorskip("onnxruntime")
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(got, sess.run(None, x)[0])


def test_half_up_option_differs_only_on_ties():
    m = qdq_model(per_channel=False)
    exact, hw = load_quantized(m), load_quantized(m, rounding="half_up")
    assert hw.node("conv/requant").attrs["rounding"] == "half_up"
    shift = exact.node("conv/requant").attrs["shift"]
    ties = 0
    for _ in range(40):
        x = inputs()
        a = run_graph(exact, x, intermediates=True)
        b = run_graph(hw, x, intermediates=True)
        acc = a["c_acc"].astype(np.int64)
        assert np.array_equal(acc, b["c_acc"])
        # half_up rounds a tie up; half_even takes it back down when the quotient is even
        tie = (acc & ((1 << shift) - 1)) == (1 << (shift - 1))
        down = tie & ((acc >> shift) % 2 == 0) & (acc >= 0) & ((acc >> shift) < 127)
        diff = a["rq"].astype(int) - b["rq"].astype(int)
        assert np.array_equal(diff, -down.astype(int))
        ties += int(down.sum())
    assert ties > 0  # the inputs did exercise the difference


def test_not_power_of_two_scale_is_rejected_naming_the_node():
    m = qdq_model(x_scale=0.0123)
    with pytest.raises(UnsupportedOpError, match=r"QuantizeLinear 'qx'.*0\.0123 is not a power of two"):
        load_quantized(m)


def test_nonzero_zero_point_is_rejected():
    m = qdq_model()
    for t in m.graph.initializer:
        if t.name == "zp":
            t.CopyFrom(init("zp", np.int8(3)))
    with pytest.raises(UnsupportedOpError, match="zero point"):
        load_quantized(m)


def test_qlinear_conv_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    w = RNG.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8)
    b = RNG.integers(-500, 500, 3).astype(np.int32)
    inits = [init("xs", np.float32(2.0 ** -4)), init("zp", np.int8(0)), init("w", w),
             init("ws", np.float32(2.0 ** -6)), init("ys", np.float32(2.0 ** -2)), init("b", b)]
    node = helper.make_node("QLinearConv", ["x", "xs", "zp", "w", "ws", "zp", "ys", "zp", "b"],
                            ["y"], name="qconv", pads=[1, 1, 1, 1], strides=[2, 2])
    g = helper.make_graph([node], "qlc", [helper.make_tensor_value_info("x", TensorProto.INT8,
                                                                          [1, 2, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 3, 3, 3])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    conv = load_quantized(m)
    assert [n.op for n in conv.nodes] == ["Conv", "Requantize"]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = import_model(m, simplify=False)
    for _ in range(3):
        x = {"x": RNG.integers(-128, 128, (1, 2, 5, 5)).astype(np.int8)}
        got = run_graph(conv, x)["y"]
        np.testing.assert_array_equal(got, run_graph(ref, x)["y"])
        np.testing.assert_array_equal(got, sess.run(None, x)[0])

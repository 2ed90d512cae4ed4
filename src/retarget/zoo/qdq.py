"""A tiny already-quantised CNN in ONNX's QDQ form (QuantizeLinear / DequantizeLinear around
float Conv and MatMul, power-of-two scales, zero points 0), as quantisation tools export one:
the test model of retarget's pre-quantised import path."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def qdq_cnn(x_scale=2.0 ** -5, per_channel=True, seed=0) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ W, DQ B) -> Relu -> Q -> DQ -> Flatten -> MatMul(DQ W2) -> Q -> DQ,
    input x float32[2, 2, 4, 4], output y float32[2, 5]; every scale a power of two."""
    RNG = np.random.default_rng(seed)
    w = RNG.integers(-127, 128, (4, 2, 3, 3)).astype(np.int8)
    w_scale = (2.0 ** -np.array([7, 8, 6, 7])).astype(np.float32) if per_channel \
        else np.float32(2.0 ** -7)
    b_scale = (np.float32(x_scale) * w_scale).astype(np.float32)
    b = RNG.integers(-2000, 2000, 4).astype(np.int32)
    w2 = RNG.integers(-127, 128, (4 * 4 * 4, 5)).astype(np.int8)
    inits = [init("xs", np.float32(x_scale)), init("zp", np.int8(0)), init("w", w),
             init("ws", w_scale), init("wzp", np.zeros(4, np.int8) if per_channel else np.int8(0)),
             init("b", b), init("bs", b_scale), init("bzp", np.zeros(4, np.int32) if per_channel
                                                     else np.int32(0)),
             init("ys", np.float32(2.0 ** -3)), init("w2", w2), init("w2s", np.float32(2.0 ** -8)),
             init("zs", np.float32(2.0 ** -2))]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "zp"], ["xq"], name="qx"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "zp"], ["xd"], name="dqx"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wd"], name="dqw", axis=0),
        helper.make_node("DequantizeLinear", ["b", "bs", "bzp"], ["bd"], name="dqb", axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "ys", "zp"], ["rq"], name="qr"),
        helper.make_node("DequantizeLinear", ["rq", "ys", "zp"], ["rd"], name="dqr"),
        helper.make_node("Flatten", ["rd"], ["f"], name="flat"),
        helper.make_node("DequantizeLinear", ["w2", "w2s", "zp"], ["w2d"], name="dqw2"),
        helper.make_node("MatMul", ["f", "w2d"], ["m"], name="fc"),
        helper.make_node("QuantizeLinear", ["m", "zs", "zp"], ["mq"], name="qm"),
        helper.make_node("DequantizeLinear", ["mq", "zs", "zp"], ["y"], name="dqy"),
    ]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m

"""Tiny already-quantised models in ONNX's QDQ form (QuantizeLinear / DequantizeLinear around
float Conv, MatMul and Add, zero points 0) and as QLinearConv, as quantisation tools export
them: the test models of retarget's pre-quantised import path. `qdq_cnn` has power-of-two
scales by default (any scale through its keywords); `qdq_residual` and `qlinear_conv` take any
scales (the multiplier format's test models)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)



def _model(nodes, name: str, x, y, inits) -> onnx.ModelProto:
    """A checked opset-17 model of `nodes` from input "x" to output "y", each (dtype, shape)."""
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", *x)],
                          [helper.make_tensor_value_info("y", *y)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def _conv_on_quantized_input() -> list:
    """x quantised and dequantised at scale xs, then Conv(x, DQ(w), DQ(b)) -> "c": the
    prefix of every QDQ test model here."""
    return [
        helper.make_node("QuantizeLinear", ["x", "xs", "zp"], ["xq"], name="qx"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "zp"], ["xd"], name="dqx"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wd"], name="dqw", axis=0),
        helper.make_node("DequantizeLinear", ["b", "bs", "bzp"], ["bd"], name="dqb", axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], name="conv", pads=[1, 1, 1, 1])]

def qdq_cnn(x_scale=2.0 ** -5, per_channel=True, seed=0, *, w_scale=None,
            y_scale=2.0 ** -3, w2_scale=2.0 ** -8, z_scale=2.0 ** -2) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ W, DQ B) -> Relu -> Q -> DQ -> Flatten -> MatMul(DQ W2) -> Q -> DQ,
    input x float32[2, 2, 4, 4], output y float32[2, 5]; by default every scale a power of two.
    `w_scale`: the conv weights' scale (4 values when per_channel) instead of the default."""
    RNG = np.random.default_rng(seed)
    w = RNG.integers(-127, 128, (4, 2, 3, 3)).astype(np.int8)
    if w_scale is not None:
        w_scale = np.asarray(w_scale, np.float32).reshape((4,) if per_channel else ())
    else:
        w_scale = (2.0 ** -np.array([7, 8, 6, 7])).astype(np.float32) if per_channel \
            else np.float32(2.0 ** -7)
    b_scale = (np.float32(x_scale) * w_scale).astype(np.float32)
    b = RNG.integers(-2000, 2000, 4).astype(np.int32)
    w2 = RNG.integers(-127, 128, (4 * 4 * 4, 5)).astype(np.int8)
    inits = [init("xs", np.float32(x_scale)), init("zp", np.int8(0)), init("w", w),
             init("ws", w_scale), init("wzp", np.zeros(4, np.int8) if per_channel else np.int8(0)),
             init("b", b), init("bs", b_scale), init("bzp", np.zeros(4, np.int32) if per_channel
                                                     else np.int32(0)),
             init("ys", np.float32(y_scale)), init("w2", w2), init("w2s", np.float32(w2_scale)),
             init("zs", np.float32(z_scale))]
    nodes = [
        *_conv_on_quantized_input(),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "ys", "zp"], ["rq"], name="qr"),
        helper.make_node("DequantizeLinear", ["rq", "ys", "zp"], ["rd"], name="dqr"),
        helper.make_node("Flatten", ["rd"], ["f"], name="flat"),
        helper.make_node("DequantizeLinear", ["w2", "w2s", "zp"], ["w2d"], name="dqw2"),
        helper.make_node("MatMul", ["f", "w2d"], ["m"], name="fc"),
        helper.make_node("QuantizeLinear", ["m", "zs", "zp"], ["mq"], name="qm"),
        helper.make_node("DequantizeLinear", ["mq", "zs", "zp"], ["y"], name="dqy"),
    ]
    return _model(nodes, "qdq", (TensorProto.FLOAT, [2, 2, 4, 4]), (TensorProto.FLOAT, [2, 5]),
                  inits)


def qdq_residual(x_scale=0.0123, c_scale=0.0371, y_scale=0.0517, per_channel=True,
                 seed=0) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ W, DQ B) -> Q -> DQ -> Add(., DQ x) -> Relu -> Q -> DQ: a
    residual block with any scales (per-channel weight scales by default), input and output
    float32[1, 4, 5, 5]."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8)
    ws = (rng.uniform(0.002, 0.01, 4) if per_channel else np.array(0.0061)).astype(np.float32)
    bs = (np.float32(x_scale) * ws).astype(np.float32)
    b = rng.integers(-3000, 3000, 4).astype(np.int32)
    zp_w = np.zeros(4, np.int8) if per_channel else np.int8(0)
    zp_b = np.zeros(4, np.int32) if per_channel else np.int32(0)
    inits = [init("xs", np.float32(x_scale)), init("zp", np.int8(0)), init("w", w),
             init("ws", ws), init("wzp", zp_w), init("b", b), init("bs", bs), init("bzp", zp_b),
             init("cs", np.float32(c_scale)), init("ys", np.float32(y_scale))]
    nodes = [
        *_conv_on_quantized_input(),
        helper.make_node("QuantizeLinear", ["c", "cs", "zp"], ["cq"], name="qc"),
        helper.make_node("DequantizeLinear", ["cq", "cs", "zp"], ["cd"], name="dqc"),
        helper.make_node("Add", ["cd", "xd"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "ys", "zp"], ["rq"], name="qy"),
        helper.make_node("DequantizeLinear", ["rq", "ys", "zp"], ["y"], name="dqy"),
    ]
    return _model(nodes, "qdq_residual", (TensorProto.FLOAT, [1, 4, 5, 5]),
                  (TensorProto.FLOAT, [1, 4, 5, 5]), inits)


def qlinear_conv(x_scale=0.0213, w_scale=0.0037, y_scale=0.0911, per_channel=False,
                 seed=0) -> onnx.ModelProto:
    """One QLinearConv (int8 in and out, int32 bias, pads 1, stride 2) with any scales;
    `per_channel` gives 3 weight scales spread around `w_scale`. Input x int8[1, 2, 5, 5],
    output y int8[1, 3, 3, 3]."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8)
    b = rng.integers(-500, 500, 3).astype(np.int32)
    ws = (np.float32(w_scale) * np.array([1.0, 0.61, 1.37])).astype(np.float32) \
        if per_channel else np.float32(w_scale)
    inits = [init("xs", np.float32(x_scale)), init("zp", np.int8(0)), init("w", w),
             init("ws", ws), init("wzp", np.zeros(3, np.int8) if per_channel else np.int8(0)),
             init("ys", np.float32(y_scale)), init("b", b)]
    node = helper.make_node("QLinearConv", ["x", "xs", "zp", "w", "ws", "wzp", "ys", "zp", "b"],
                            ["y"], name="qconv", pads=[1, 1, 1, 1], strides=[2, 2])
    return _model([node], "qlinear_conv", (TensorProto.INT8, [1, 2, 5, 5]),
                  (TensorProto.INT8, [1, 3, 3, 3]), inits)

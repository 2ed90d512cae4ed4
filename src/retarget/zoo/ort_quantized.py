"""QDQ models quantised by onnxruntime's own quantiser (`quantize_static`), the test models of
the onnxruntime number format (`load_quantized(..., scales="onnxruntime")`).

Three float networks, each quantised on seeded standard-normal calibration inputs with
onnxruntime's defaults unless told otherwise (QDQ format, asymmetric u8 activations, symmetric
s8 weights, per tensor):

- "resnet18": the zoo's resnet18 at 32x32, width 0.25 (BatchNorm folded by onnxruntime's
  pre-processing), 10 classes: 20 Convs, 8 residual Adds, MaxPool, GlobalAveragePool, Gemm;
- "mobilenet": the zoo's mobilenet_v1 at 32x32 (depthwise + pointwise convs with ReLU6);
- "residual_block": conv-relu, conv-relu, conv, + skip, relu, GlobalAveragePool, Gemm on a
  1 x 3 x 16 x 16 input (small enough for unit tests);
- "branch_add": two 3x3 convs of the input added, then a 1x1 conv: with s8 activations the
  one add onnxruntime fuses (both operands and the sum read once), computed on u8-shifted
  values.

Everything is made here at run time (no download); building needs onnxruntime (the `test`
extra), which is also the runtime these models are compared with.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import InputError
from . import build

MODELS = ("resnet18", "mobilenet", "residual_block", "branch_add")
ACTIVATIONS = ("uint8", "int8")


def residual_block(seed: int = 0) -> onnx.ModelProto:
    """The float residual block (input "input" [1, 3, 16, 16], output "output" [1, 10])."""
    rng = np.random.default_rng(seed)

    def he(*shape):
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    inits = {"w1": he(8, 3, 3, 3), "b1": rng.uniform(-0.1, 0.1, 8).astype(np.float32),
             "w2": he(8, 8, 3, 3), "b2": rng.uniform(-0.1, 0.1, 8).astype(np.float32),
             "w3": he(8, 8, 3, 3), "b3": rng.uniform(-0.1, 0.1, 8).astype(np.float32),
             "fc": he(10, 8), "fcb": rng.uniform(-0.1, 0.1, 10).astype(np.float32)}
    conv = dict(pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", **conv),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", **conv),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3", **conv),
             helper.make_node("Add", ["c3", "r1"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r3"], name="relu3"),
             helper.make_node("GlobalAveragePool", ["r3"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["output"], name="fc", transB=1)]
    return _checked(nodes, "residual_block", inits, [1, 10])


def branch_add(seed: int = 0) -> onnx.ModelProto:
    """conv_a(x) + conv_b(x) -> 1x1 conv (input "input" [1, 3, 16, 16], output "output"
    [1, 8, 16, 16])."""
    rng = np.random.default_rng(seed)

    def he(*shape):
        return (rng.standard_normal(shape) *
                np.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32)
    inits = {"wa": he(8, 3, 3, 3), "wb": he(8, 3, 3, 3), "wc": he(8, 8, 1, 1)}
    nodes = [helper.make_node("Conv", ["input", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["input", "wb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Conv", ["s", "wc"], ["output"], name="conv_c")]
    return _checked(nodes, "branch_add", inits, [1, 8, 16, 16])


def _checked(nodes, name, inits, out_shape) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                         [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                         out_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def float_model(name: str) -> onnx.ModelProto:
    """The float network `name` (see MODELS) before quantisation."""
    if name == "resnet18":
        return build("resnet18", size=32, num_classes=10)
    if name == "mobilenet":
        return build("mobilenet_v1", size=32, num_classes=10)
    if name == "residual_block":
        return residual_block()
    if name == "branch_add":
        return branch_add()
    raise InputError(f"unknown QDQ test model {name!r}; known: {', '.join(MODELS)}")


def input_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)


def model_inputs(model: onnx.ModelProto, count: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """`count` seeded standard-normal inputs (the calibration distribution) for `model`."""
    rng = np.random.default_rng(seed)
    name, shape = model.graph.input[0].name, input_shape(model)
    return [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def ort_quantized(name: str, *, per_channel: bool = False, activations: str = "uint8",
                  reduce_range: bool = False, calibration: int = 4) -> onnx.ModelProto:
    """`float_model(name)` quantised by onnxruntime's `quantize_static` into QDQ form:
    `activations` "uint8" (onnxruntime's default, QUInt8, asymmetric) or "int8" (QInt8,
    asymmetric); weights QInt8 symmetric, per tensor or per output channel; `reduce_range`
    7-bit weights; calibrated (MinMax) on `calibration` seed-0 standard-normal inputs."""
    if activations not in ACTIVATIONS:
        raise InputError(f"activations={activations!r}; choose one of {', '.join(ACTIVATIONS)}")
    try:
        from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                              quantize_static)
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError:
        raise InputError("quantising with onnxruntime needs the onnxruntime package "
                         "(pip install onnxruntime)") from None
    model = float_model(name)
    samples = model_inputs(model, calibration, seed=0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)   # the quantiser's advice on pre-processing
    try:
        with tempfile.TemporaryDirectory() as d:
            f, p, q = (str(Path(d) / n) for n in ("f.onnx", "p.onnx", "q.onnx"))
            onnx.save(model, f)
            quant_pre_process(f, p, skip_symbolic_shape=True)
            act = QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8
            quantize_static(p, q, Reader(), quant_format=QuantFormat.QDQ, activation_type=act,
                            weight_type=QuantType.QInt8, per_channel=per_channel,
                            reduce_range=reduce_range)
            return onnx.load(q)
    finally:
        logging.getLogger().setLevel(level)


__all__ = ["ACTIVATIONS", "MODELS", "branch_add", "float_model", "model_inputs", "ort_quantized",
           "residual_block"]

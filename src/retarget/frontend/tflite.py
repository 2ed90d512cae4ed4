"""Import a TFLite flatbuffer (float32, or int8 quantised per tensor or per channel).

The flatbuffer is read with the `tflite` package (the schema's generated Python code; the
optional extra `retarget[tflite]`). Two forms of the same model:

- form="int8" (what `retarget.load` returns): an int8 model in the number format
  "int8-tflite" (ops/quantized_tflite.py): the accumulating ops (Conv, Gemm) run on x - z_x
  and are followed by `RequantizeQ31`, ADD / MUL / AVERAGE_POOL_2D become `QAddQ31`,
  `QMulQ31`, `AveragePoolInt`, fused activations become the clamp bounds TFLite computes. The
  reference executor then reproduces TFLite's reference kernels bit for bit. A float model
  gives its float graph.
- form="float": the same network as float ops on the dequantised weights (w - z) * s and
  biases b * s_x * s_w, taking and returning the real values (q - z) * s of the model's int8
  inputs and outputs (`io_quantization` gives their scales and zero points): what a target
  with another number format re-quantises (compiler.compile).

Layout: TFLite is NHWC, the IR's convolutions and pools are NCHW. Each Conv / pool is wrapped
in Transposes (NHWC -> NCHW before, back after) and `passes/transposes.py` removes the pairs
that cancel, so a chain of convolutions has a transpose only at its ends.

An operator the importer does not know is an UnsupportedOpError naming the builtin operator
and its index in the subgraph's operator list, e.g. `TFLite operator 3 (SQUARED_DIFFERENCE):
not supported`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError, UnsupportedOpError
from ..ir.graph import Graph, Node, Value, constant, fresh_name
from ..ir.types import TensorType
from ..ops.quantized import INT8_MAX, INT8_MIN
from ..ops.quantized_tflite import activation_range, add_q31_params, hard_swish_params, \
    lut_int8, quantize_multiplier, softmax_params

FORMS = ("int8", "float")
TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)
_DTYPES = {0: "float32", 2: "int32", 3: "uint8", 4: "int64", 9: "int8"}
_ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}


def _tflite():
    try:
        import tflite
    except ImportError:
        raise InputError("reading .tflite files needs the `tflite` package: "
                         "pip install 'retarget[tflite]'") from None
    return tflite


@dataclass(frozen=True, slots=True)
class Quant:
    """A tensor's quantisation: scales (1 value, or 1 per channel along `axis`), zero points."""
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    @property
    def s(self) -> float:
        return float(self.scale.reshape(-1)[0])

    @property
    def z(self) -> int:
        return int(self.zero_point.reshape(-1)[0])


@dataclass(slots=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None
    quant: Quant | None


class TFLiteImporter:
    """One subgraph as a Graph; `handlers` maps builtin operator names to methods."""

    def __init__(self, buf: bytes, form: str, name: str):
        if form not in FORMS:
            raise InputError(f"form={form!r}; choose one of {', '.join(FORMS)}")
        tfl = _tflite()
        if len(buf) < 8 or buf[4:8] != b"TFL3":
            raise InputError(f"{name}: not a TFLite flatbuffer (no TFL3 identifier)")
        self.tfl = tfl
        self.model = tfl.Model.GetRootAs(buf, 0)
        if self.model.SubgraphsLength() != 1:
            raise UnsupportedOpError(f"{name}: {self.model.SubgraphsLength()} subgraphs; only "
                                     f"single-subgraph models are supported")
        self.sub = self.model.Subgraphs(0)
        self.form, self.name = form, name
        self.tensors = [self._tensor(i) for i in range(self.sub.TensorsLength())]
        self.values: dict[int, Value] = {}
        self.nodes: list[Node] = []
        self._names: set[str] = set()
        self._renamed: set[int] = set()
        self._produced: set[int] = set()

    # ---- reading the flatbuffer ----------------------------------------------------------------
    def _tensor(self, i: int) -> Tensor:
        t = self.sub.Tensors(i)
        dtype = _DTYPES.get(t.Type())
        name = t.Name().decode()
        if dtype is None:
            raise UnsupportedOpError(f"TFLite tensor {i} ({name!r}): element type "
                                     f"{t.Type()} not supported")
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        data = None
        buf = self.model.Buffers(t.Buffer())
        if buf is not None and buf.DataLength():
            data = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype).reshape(shape)
        q = t.Quantization()
        quant = None
        if q is not None and q.ScaleLength():
            quant = Quant(q.ScaleAsNumpy().astype(np.float32),
                          q.ZeroPointAsNumpy().astype(np.int64), int(q.QuantizedDimension()))
        return Tensor(i, name, shape, dtype, data, quant)

    def opname(self, op) -> str:
        code = self.model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        return self.tfl.opcode2name(builtin)

    def options(self, op, cls_name: str):
        table = op.BuiltinOptions()
        opts = getattr(self.tfl, cls_name)()
        if table is not None:
            opts.Init(table.Bytes, table.Pos)
        return opts

    # ---- building the graph ------------------------------------------------------------------
    def _unique(self, base: str) -> str:
        return fresh_name(base, self._names)

    def emit(self, op: str, name: str, inputs: list[Value | None], out: str | None = None,
             **attrs) -> Value:
        y = Value(self._unique(out or f"{name}_out"))
        self.nodes.append(Node(op, self._unique(name), inputs, [y], attrs))
        self._produced.add(id(y))
        return y

    def const(self, name: str, array) -> Value:
        return constant(self._unique(name), np.asarray(array))

    def is_int8(self, t: Tensor) -> bool:
        return t.dtype == "int8" and t.quant is not None

    def value(self, t: Tensor) -> Value:
        """The IR value of an input tensor (constants become constants: int8 weights stay
        int8 in the int8 form and are dequantised in the float form)."""
        if t.index in self.values:
            return self.values[t.index]
        if t.data is None:
            raise UnsupportedOpError(f"TFLite tensor {t.index} ({t.name!r}) is read before "
                                     f"it is written")
        data = t.data
        if self.form == "float" and t.quant is not None and t.dtype in ("int8", "int32"):
            data = self.dequantized(t)
        v = self.const(t.name, data)
        self.values[t.index] = v
        return v

    def dequantized(self, t: Tensor) -> np.ndarray:
        """A constant's real values (q - z) * s, per channel along its quantised axis."""
        q = t.quant
        s = q.scale
        shape = [1] * max(len(t.shape), 1)
        if s.size > 1:
            shape[q.axis] = -1
        zp = q.zero_point.reshape(shape) if q.zero_point.size > 1 else q.z
        return ((t.data.astype(np.int64) - zp).astype(np.float32) *
                s.reshape(shape).astype(np.float32)).astype(np.float32)

    def define(self, t: Tensor, v: Value) -> None:
        """`v` computes tensor `t`; a node's output takes the tensor's name (once)."""
        self.values[t.index] = v
        if id(v) in self._produced and id(v) not in self._renamed and t.name not in self._names:
            self._names.discard(v.name)
            v.name = t.name
            self._names.add(t.name)
            self._renamed.add(id(v))

    def transpose(self, v: Value, perm, name: str) -> Value:
        return self.emit("Transpose", name, [v], perm=list(perm))

    # ---- the walk ----------------------------------------------------------------------------
    def run(self) -> Graph:
        inputs = []
        for i in self.sub.InputsAsNumpy():
            t = self.tensors[int(i)]
            dtype = "float32" if self.form == "float" and self.is_int8(t) else t.dtype
            v = Value(self._unique(t.name), TensorType(t.shape, dtype))
            inputs.append(v)
            self.define(t, v)
        for index in range(self.sub.OperatorsLength()):
            op = self.sub.Operators(index)
            opname = self.opname(op)
            handler = HANDLERS.get(opname)
            if handler is None:
                raise UnsupportedOpError(f"TFLite operator {index} ({opname}): not supported; "
                                         f"supported: {', '.join(sorted(HANDLERS))}")
            ins = [None if i < 0 else self.tensors[int(i)] for i in op.InputsAsNumpy()]
            outs = [self.tensors[int(i)] for i in op.OutputsAsNumpy()]
            try:
                handler(self, Op(index, opname, op, ins, outs))
            except UnsupportedOpError as e:
                raise UnsupportedOpError(f"TFLite operator {index} ({opname}): {e}") from None
        outputs = []
        for i in self.sub.OutputsAsNumpy():
            t = self.tensors[int(i)]
            outputs.append(self._output(self.values[t.index], t.name))
        return Graph(self.nodes, inputs, outputs, name=self.name)

    def _output(self, v: Value, name: str) -> Value:
        """Graph outputs keep the TFLite tensor names (an alias gets an Identity)."""
        if v.name == name:
            return v
        return self.emit("Identity", f"{name}/out", [v], out=name)


@dataclass(slots=True)
class Op:
    index: int
    name: str
    raw: object
    inputs: list[Tensor | None]
    outputs: list[Tensor]

    @property
    def node(self) -> str:
        return f"{self.name}_{self.index}"


# ---- fused activations and the int8 output stage -------------------------------------------------
def _activation(imp: TFLiteImporter, op: Op, y: Value, code: int) -> Value:
    """The float form's fused activation as a separate op (the int8 form clamps instead)."""
    act = _ACTIVATIONS.get(code)
    if act is None:
        raise UnsupportedOpError(f"fused activation {code} not supported")
    if act == "NONE":
        return y
    if act == "RELU":
        return imp.emit("Relu", f"{op.node}/relu", [y])
    lo, hi = (0.0, 6.0) if act == "RELU6" else (-1.0, 1.0)
    return imp.emit("Clip", f"{op.node}/clip", [y, imp.const(f"{op.node}.min", np.float32(lo)),
                                                imp.const(f"{op.node}.max", np.float32(hi))])


def _clamp(op: Op, code: int) -> tuple[int, int]:
    act = _ACTIVATIONS.get(code)
    if act is None:
        raise UnsupportedOpError(f"fused activation {code} not supported")
    q = op.outputs[0].quant
    return activation_range(act, q.s, q.z)


def _zero_point_removed(imp: TFLiteImporter, v: Value, zp: int, name: str) -> Value:
    """x - z as int32 (the accumulating ops' input offset); x itself when z is 0."""
    if zp == 0:
        return v
    wide = imp.emit("Cast", f"{name}/int32", [v], to=6)          # ONNX INT32
    return imp.emit("Sub", f"{name}/offset", [wide, imp.const(f"{name}.zero_point",
                                                             np.int32(zp))])


def _requantize(imp: TFLiteImporter, op: Op, acc: Value, ratios: np.ndarray, axis: int,
                act: int, rounding: str = "double") -> Value:
    """RequantizeQ31 of an int32 accumulator by `ratios` (one, or one per channel)."""
    mults, shifts = zip(*(quantize_multiplier(float(r)) for r in ratios.reshape(-1)))
    lo, hi = _clamp(op, act)
    zp = op.outputs[0].quant.z
    if len(mults) == 1:
        return imp.emit("RequantizeQ31", f"{op.node}/requant", [acc], multiplier=mults[0],
                        shift=shifts[0], zero_point=zp, lo=lo, hi=hi, rounding=rounding)
    return imp.emit("RequantizeQ31", f"{op.node}/requant",
                    [acc, imp.const(f"{op.node}.multipliers", np.array(mults, np.int32)),
                     imp.const(f"{op.node}.shifts", np.array(shifts, np.int32))],
                    axis=axis, zero_point=zp, lo=lo, hi=hi, rounding=rounding)


def _accumulator_ratios(x: Tensor, w: Tensor, y: Tensor) -> np.ndarray:
    """s_x * s_w / s_y per channel, in double from the float32 scales (TFLite's
    PopulateConvolutionQuantizationParams)."""
    return (np.float64(x.quant.s) * w.quant.scale.astype(np.float64) /
            np.float64(y.quant.s))


def _check_weights(op: Op, w: Tensor, what: str) -> None:
    if w is None or w.data is None:
        raise UnsupportedOpError(f"the {what} must be a constant tensor")
    if w.quant is not None and np.any(w.quant.zero_point != 0):
        raise UnsupportedOpError(f"{what} {w.name!r} has a non-zero zero point (TFLite's int8 "
                                 f"weights are symmetric)")


def _int8_operands(imp: TFLiteImporter, op: Op, n: int) -> bool:
    """True for an int8 op (all of the first n inputs and the output int8), False for float;
    a mix is refused."""
    ts = [t for t in op.inputs[:n] if t is not None] + op.outputs[:1]
    kinds = {imp.is_int8(t) for t in ts if t.dtype != "int32"}
    if len(kinds) > 1:
        raise UnsupportedOpError("mixes int8 and float tensors (hybrid quantisation is not "
                                 "supported)")
    return kinds == {True} and imp.form == "int8"


# ---- CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED -------------------------------------------------
def _same_pads(size, kernel, stride, dilation) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _window_pads(padding: int, in_hw, kernel, strides, dilations) -> list[int]:
    if padding == 1:                      # VALID
        return [0, 0, 0, 0]
    (t, b), (l, r) = (_same_pads(in_hw[i], kernel[i], strides[i], dilations[i])
                      for i in range(2))
    return [t, l, b, r]


def _conv_like(imp: TFLiteImporter, op: Op, weights_nchw: np.ndarray, group: int, o) -> None:
    x, w, b = op.inputs[0], op.inputs[1], op.inputs[2] if len(op.inputs) > 2 else None
    y = op.outputs[0]
    int8 = _int8_operands(imp, op, 1)
    strides = (o.StrideH(), o.StrideW())
    dil = (o.DilationHFactor(), o.DilationWFactor())
    kernel = weights_nchw.shape[2:]
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), dilations=list(dil),
                 pads=_window_pads(o.Padding(), x.shape[1:3], kernel, strides, dil),
                 group=group)
    xt = imp.transpose(imp.value(x), TO_NCHW, f"{op.node}/nchw")
    wv = imp.const(f"{w.name}.nchw", weights_nchw)
    bv = None if b is None else imp.value(b)        # int32 in the int8 form, else float
    if int8:
        xt = _zero_point_removed(imp, xt, x.quant.z, op.node)
        acc = imp.emit("Conv", op.node, [xt, wv, bv], **attrs)
        out = _requantize(imp, op, acc, _accumulator_ratios(x, w, y), 1,
                          o.FusedActivationFunction())
    else:
        out = _activation(imp, op, imp.emit("Conv", op.node, [xt, wv, bv], **attrs),
                          o.FusedActivationFunction())
    imp.define(y, imp.transpose(out, TO_NHWC, f"{op.node}/nhwc"))


def _weights(imp: TFLiteImporter, w: Tensor) -> np.ndarray:
    """The weights as stored (int8 in the int8 form) or dequantised (float form)."""
    if imp.form == "float" and w.quant is not None and w.dtype == "int8":
        return imp.dequantized(w)
    return w.data


def conv_2d(imp: TFLiteImporter, op: Op) -> None:
    w = op.inputs[1]
    _check_weights(op, w, "filter")
    o = imp.options(op.raw, "Conv2DOptions")
    wd = _weights(imp, w)                                    # O x KH x KW x I
    groups = op.inputs[0].shape[3] // w.shape[3]
    _conv_like(imp, op, np.ascontiguousarray(wd.transpose(0, 3, 1, 2)), groups, o)


def depthwise_conv_2d(imp: TFLiteImporter, op: Op) -> None:
    w = op.inputs[1]
    _check_weights(op, w, "filter")
    o = imp.options(op.raw, "DepthwiseConv2DOptions")
    wd = _weights(imp, w)                                    # 1 x KH x KW x C*mult
    c = op.inputs[0].shape[3]
    if wd.shape[3] % c:
        raise UnsupportedOpError(f"filter {list(wd.shape)} does not match {c} input channels")
    _conv_like(imp, op, np.ascontiguousarray(wd.transpose(3, 0, 1, 2)), c, o)


def fully_connected(imp: TFLiteImporter, op: Op) -> None:
    x, w = op.inputs[0], op.inputs[1]
    b = op.inputs[2] if len(op.inputs) > 2 else None
    y = op.outputs[0]
    _check_weights(op, w, "weights")
    o = imp.options(op.raw, "FullyConnectedOptions")
    if o.WeightsFormat() != 0:
        raise UnsupportedOpError("shuffled weights are not supported")
    int8 = _int8_operands(imp, op, 1)
    xv = imp.value(x)
    if len(x.shape) != 2 or x.shape[1] != w.shape[1]:
        xv = imp.emit("Reshape", f"{op.node}/flatten",
                      [xv, imp.const(f"{op.node}.shape", np.array([-1, w.shape[1]], np.int64))])
    wv, bv = imp.value(w), None if b is None else imp.value(b)
    if int8:
        xv = _zero_point_removed(imp, xv, x.quant.z, op.node)
        acc = imp.emit("Gemm", op.node, [xv, wv, bv], transB=1)
        # LiteRT's int8 FULLY_CONNECTED rescales with one rounding (measured against its
        # reference kernels; CONV_2D rounds twice, as gemmlowp does)
        out = _requantize(imp, op, acc, _accumulator_ratios(x, w, y), 1,
                          o.FusedActivationFunction(), rounding="single")
    else:
        out = _activation(imp, op, imp.emit("Gemm", op.node, [xv, wv, bv], transB=1),
                          o.FusedActivationFunction())
    if tuple(y.shape) != (int(np.prod(y.shape[:-1])), y.shape[-1]) or len(y.shape) != 2:
        out = imp.emit("Reshape", f"{op.node}/unflatten",
                       [out, imp.const(f"{op.node}.out_shape", np.array(y.shape, np.int64))])
    imp.define(y, out)


# ---- element-wise ------------------------------------------------------------------------------
def _binary(imp: TFLiteImporter, op: Op, opts: str, float_op: str) -> None:
    a, b = op.inputs[:2]
    y = op.outputs[0]
    act = imp.options(op.raw, opts).FusedActivationFunction()
    va, vb = imp.value(a), imp.value(b)
    if not _int8_operands(imp, op, 2):
        imp.define(y, _activation(imp, op, imp.emit(float_op, op.node, [va, vb]), act))
        return
    lo, hi = _clamp(op, act)
    if float_op == "Add":
        params = add_q31_params(a.quant.s, b.quant.s, y.quant.s)
        out = imp.emit("QAddQ31", op.node, [va, vb], a_zero_point=a.quant.z,
                       b_zero_point=b.quant.z, zero_point=y.quant.z, lo=lo, hi=hi, **params)
    else:
        m, s = quantize_multiplier(np.float64(a.quant.s) * np.float64(b.quant.s) /
                                   np.float64(y.quant.s))
        out = imp.emit("QMulQ31", op.node, [va, vb], a_zero_point=a.quant.z,
                       b_zero_point=b.quant.z, multiplier=m, shift=s, zero_point=y.quant.z,
                       lo=lo, hi=hi)
    imp.define(y, out)


def add(imp, op):
    _binary(imp, op, "AddOptions", "Add")


def mul(imp, op):
    _binary(imp, op, "MulOptions", "Mul")


def _same_quant(imp: TFLiteImporter, op: Op, ins: list[Tensor], what: str) -> None:
    """Ops TFLite runs as copies on int8 need their inputs at the output's scale and zero
    point (its kernels check the same)."""
    y = op.outputs[0]
    for t in ins:
        if imp.is_int8(t) and (t.quant.s != y.quant.s or t.quant.z != y.quant.z):
            raise UnsupportedOpError(f"{what}: input {t.name!r} (scale {t.quant.s:.6g}, zero "
                                     f"point {t.quant.z}) differs from the output's (scale "
                                     f"{y.quant.s:.6g}, zero point {y.quant.z})")


# ---- pooling -----------------------------------------------------------------------------------
def _pool(imp: TFLiteImporter, op: Op, kind: str) -> None:
    x, y = op.inputs[0], op.outputs[0]
    o = imp.options(op.raw, "Pool2DOptions")
    kernel = (o.FilterHeight(), o.FilterWidth())
    strides = (o.StrideH(), o.StrideW())
    attrs = dict(kernel_shape=list(kernel), strides=list(strides),
                 pads=_window_pads(o.Padding(), x.shape[1:3], kernel, strides, (1, 1)))
    xt = imp.transpose(imp.value(x), TO_NCHW, f"{op.node}/nchw")
    act = o.FusedActivationFunction()
    if _int8_operands(imp, op, 1):
        _same_quant(imp, op, [x], op.name)
        lo, hi = _clamp(op, act)
        if kind == "avg":
            out = imp.emit("AveragePoolInt", op.node, [xt], lo=lo, hi=hi, **attrs)
        else:
            out = imp.emit("MaxPool", op.node, [xt], **attrs)
            if (lo, hi) != (INT8_MIN, INT8_MAX):
                out = imp.emit("Requantize", f"{op.node}/clamp", [out], shift=0, lo=lo, hi=hi)
    else:
        float_op = "AveragePool" if kind == "avg" else "MaxPool"
        out = _activation(imp, op, imp.emit(float_op, op.node, [xt], **attrs), act)
    imp.define(y, imp.transpose(out, TO_NHWC, f"{op.node}/nhwc"))


def average_pool_2d(imp, op):
    _pool(imp, op, "avg")


def max_pool_2d(imp, op):
    _pool(imp, op, "max")


# ---- layout and copies -------------------------------------------------------------------------
def _const_input(op: Op, i: int, what: str) -> np.ndarray:
    t = op.inputs[i] if i < len(op.inputs) else None
    if t is None or t.data is None:
        raise UnsupportedOpError(f"the {what} must be a constant tensor")
    return t.data


def reshape(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    _same_quant(imp, op, [x], "RESHAPE")
    imp.define(y, imp.emit("Reshape", op.node, [imp.value(x), imp.const(
        f"{op.node}.shape", np.array(y.shape, np.int64))]))


def transpose(imp, op):
    _same_quant(imp, op, [op.inputs[0]], "TRANSPOSE")
    perm = [int(p) for p in _const_input(op, 1, "permutation")]
    imp.define(op.outputs[0], imp.transpose(imp.value(op.inputs[0]), perm, op.node))


def concatenation(imp, op):
    o = imp.options(op.raw, "ConcatenationOptions")
    ins = [t for t in op.inputs if t is not None]
    int8 = _int8_operands(imp, op, len(ins))
    if int8:
        _same_quant(imp, op, ins, "CONCATENATION")
    y = imp.emit("Concat", op.node, [imp.value(t) for t in ins], axis=int(o.Axis()))
    act = o.FusedActivationFunction()
    if int8:
        lo, hi = _clamp(op, act)
        if (lo, hi) != (INT8_MIN, INT8_MAX):
            y = imp.emit("Requantize", f"{op.node}/clamp", [y], shift=0, lo=lo, hi=hi)
    else:
        y = _activation(imp, op, y, act)
    imp.define(op.outputs[0], y)


def pad(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    _same_quant(imp, op, [x], "PAD")
    paddings = _const_input(op, 1, "paddings").astype(np.int64)
    pads = np.concatenate([paddings[:, 0], paddings[:, 1]])
    if len(op.inputs) > 2 and op.inputs[2] is not None:
        value = _const_input(op, 2, "padding value").reshape(())
    else:
        value = np.int8(y.quant.z) if imp.is_int8(y) else np.float32(0)
    if imp.form == "float" and imp.is_int8(y):
        value = np.float32((int(value) - y.quant.z) * y.quant.s)
    imp.define(y, imp.emit("Pad", op.node, [imp.value(x), imp.const(f"{op.node}.pads", pads),
                                            imp.const(f"{op.node}.value", value)]))


def strided_slice(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    _same_quant(imp, op, [x], "STRIDED_SLICE")
    o = imp.options(op.raw, "StridedSliceOptions")
    if o.EllipsisMask() or o.NewAxisMask():
        raise UnsupportedOpError("ellipsis_mask and new_axis_mask are not supported")
    if o.Offset():
        raise UnsupportedOpError("offset=true is not supported")
    begin, end, strides = (_const_input(op, i, w).astype(np.int64).copy()
                           for i, w in ((1, "begin"), (2, "end"), (3, "strides")))
    big = np.iinfo(np.int64).max
    for axis in range(len(begin)):
        neg = strides[axis] < 0
        if o.BeginMask() >> axis & 1:
            begin[axis] = big if neg else 0
        if o.EndMask() >> axis & 1:
            end[axis] = -big if neg else big
        if o.ShrinkAxisMask() >> axis & 1:
            end[axis] = begin[axis] + 1 if begin[axis] != -1 else big
            strides[axis] = 1
    axes = np.arange(len(begin), dtype=np.int64)
    out = imp.emit("Slice", op.node, [imp.value(x), imp.const(f"{op.node}.starts", begin),
                                      imp.const(f"{op.node}.ends", end),
                                      imp.const(f"{op.node}.axes", axes),
                                      imp.const(f"{op.node}.steps", strides)])
    shrink = [a for a in range(len(begin)) if o.ShrinkAxisMask() >> a & 1]
    if shrink:
        out = imp.emit("Squeeze", f"{op.node}/shrink",
                       [out, imp.const(f"{op.node}.shrink", np.array(shrink, np.int64))])
    imp.define(y, out)


# ---- QUANTIZE / DEQUANTIZE -----------------------------------------------------------------------
def quantize(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    if not imp.is_int8(y):
        raise UnsupportedOpError(f"QUANTIZE to {y.dtype} (only int8 is supported)")
    if imp.form == "float":
        imp.define(y, imp.value(x))                 # the float form stays float
    elif imp.is_int8(x):
        acc = _zero_point_removed(imp, imp.value(x), x.quant.z, op.node)
        if acc is imp.value(x):
            acc = imp.emit("Cast", f"{op.node}/int32", [acc], to=6)
        imp.define(y, _requantize(imp, op, acc, np.array([np.float64(x.quant.s) /
                                                           np.float64(y.quant.s)]), 1, 0))
    elif x.dtype == "float32":
        imp.define(y, imp.emit("QuantizeAffine", op.node, [imp.value(x)], scale=y.quant.s,
                               zero_point=y.quant.z, dtype="int8"))
    else:
        raise UnsupportedOpError(f"QUANTIZE from {x.dtype}")


def dequantize(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    if imp.form == "float" or x.quant is None:
        imp.define(y, imp.value(x))
        return
    if not imp.is_int8(x):
        raise UnsupportedOpError(f"DEQUANTIZE from {x.dtype} (only int8 is supported)")
    imp.define(y, imp.emit("DequantizeLinear", op.node, [
        imp.value(x), imp.const(f"{op.node}.scale", np.float32(x.quant.s)),
        imp.const(f"{op.node}.zero_point", np.int8(x.quant.z))]))


# ---- activations and reductions -----------------------------------------------------------------
def softmax(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    beta = imp.options(op.raw, "SoftmaxOptions").Beta()
    if _int8_operands(imp, op, 1):
        if len(x.shape) < 1 or (y.quant.s, y.quant.z) != (np.float32(1 / 256), -128):
            raise UnsupportedOpError(f"int8 SOFTMAX with output scale {y.quant.s:.6g}, zero "
                                     f"point {y.quant.z} (TFLite requires 1/256, -128)")
        imp.define(y, imp.emit("SoftmaxInt8", op.node, [imp.value(x)],
                               **softmax_params(beta, x.quant.s)))
        return
    x = imp.value(x)
    if beta != 1.0:
        x = imp.emit("Mul", f"{op.node}/beta", [x, imp.const(f"{op.node}.beta",
                                                             np.float32(beta))])
    imp.define(op.outputs[0], imp.emit("Softmax", op.node, [x], axis=-1))


def mean(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    axes = _const_input(op, 1, "axes").astype(np.int64).reshape(-1)
    keep = imp.options(op.raw, "ReducerOptions").KeepDims()
    if _int8_operands(imp, op, 1):
        if not (keep and len(x.shape) == 4 and sorted(axes.tolist()) == [1, 2]):
            raise UnsupportedOpError(f"int8 MEAN over axes {axes.tolist()} (keep_dims "
                                     f"{bool(keep)}); only axes [1, 2] with keep_dims on a "
                                     f"4-D tensor are implemented")
        count = x.shape[1] * x.shape[2]
        m, s = quantize_multiplier(np.float64(x.quant.s) / np.float64(y.quant.s) / count)
        imp.define(y, imp.emit("MeanInt8", op.node, [imp.value(x)], input_zero_point=x.quant.z,
                               multiplier=m, shift=s, zero_point=y.quant.z))
        return
    imp.define(op.outputs[0], imp.emit("ReduceMean", op.node, [
        imp.value(op.inputs[0]), imp.const(f"{op.node}.axes", axes)], keepdims=int(keep)))


def logistic(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    if not _int8_operands(imp, op, 1):
        imp.define(y, imp.emit("Sigmoid", op.node, [imp.value(x)]))
        return
    if (y.quant.s, y.quant.z) != (np.float32(1 / 256), -128):
        raise UnsupportedOpError(f"int8 LOGISTIC with output scale {y.quant.s:.6g}, zero point "
                                 f"{y.quant.z} (TFLite requires 1/256, -128)")
    table = lut_int8(lambda v: np.float32(1) / (np.float32(1) + np.exp(-v)), x.quant.s,
                     x.quant.z, y.quant.s, y.quant.z)
    imp.define(y, imp.emit("LookupInt8", op.node, [imp.value(x),
                                                   imp.const(f"{op.node}.table", table)]))


def hard_swish(imp, op):
    x, y = op.inputs[0], op.outputs[0]
    if not _int8_operands(imp, op, 1):
        imp.define(y, imp.emit("HardSwish", op.node, [imp.value(x)]))
        return
    imp.define(y, imp.emit("HardSwishInt8", op.node, [imp.value(x)], **hard_swish_params(
        x.quant.s, x.quant.z, y.quant.s, y.quant.z)))


HANDLERS: dict[str, Callable[[TFLiteImporter, Op], None]] = {
    "CONV_2D": conv_2d, "DEPTHWISE_CONV_2D": depthwise_conv_2d,
    "FULLY_CONNECTED": fully_connected, "ADD": add, "MUL": mul,
    "AVERAGE_POOL_2D": average_pool_2d, "MAX_POOL_2D": max_pool_2d, "RESHAPE": reshape,
    "TRANSPOSE": transpose, "CONCATENATION": concatenation, "PAD": pad,
    "STRIDED_SLICE": strided_slice, "QUANTIZE": quantize, "DEQUANTIZE": dequantize,
    "SOFTMAX": softmax, "MEAN": mean, "LOGISTIC": logistic,
    "HARD_SWISH": hard_swish,
}


def load_tflite(path_or_bytes, form: str = "int8", simplify: bool = True) -> Graph:
    """Import a .tflite file (or its bytes) as a typed Graph in `form` ("int8": the model's own
    integer arithmetic; "float": dequantised weights, for re-quantising in another format).
    simplify=False keeps the graph as imported: every layout transpose, and a value named
    after each TFLite tensor."""
    buf, name = read_tflite(path_or_bytes)
    graph = TFLiteImporter(buf, form, name).run()
    if not simplify:              # every TFLite tensor keeps its value (and name)
        from ..passes.infer_shapes import infer_shapes
        return infer_shapes(graph)
    from ..passes.simplify import simplify as _simplify
    from ..passes.transposes import cancel_transposes
    return _simplify(cancel_transposes(graph))


def read_tflite(path_or_bytes) -> tuple[bytes, str]:
    """The flatbuffer's bytes and a name for the graph."""
    if isinstance(path_or_bytes, (bytes, bytearray)):
        return bytes(path_or_bytes), "tflite"
    path = Path(path_or_bytes)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    return path.read_bytes(), path.stem


def io_quantization(path_or_bytes) -> dict[str, Quant]:
    """The int8 graph inputs' and outputs' quantisation, by tensor name (float ones absent):
    how the float form's real values map to the model's int8 values."""
    imp = TFLiteImporter(read_tflite(path_or_bytes)[0], "int8", "model")
    ends = list(imp.sub.InputsAsNumpy()) + list(imp.sub.OutputsAsNumpy())
    return {imp.tensors[int(i)].name: imp.tensors[int(i)].quant for i in ends
            if imp.is_int8(imp.tensors[int(i)])}


def dequantized_outputs(graph: Graph) -> dict[str, Quant]:
    """The int8-form graph's float outputs made by a DEQUANTIZE, with the quantisation they
    were dequantised from: float results compare in LSBs through it."""
    producer = graph.producers()
    found = {}
    for v in graph.outputs:
        n = producer.get(v)
        while n is not None and n.op == "Identity":
            n = producer.get(n.inputs[0])
        if n is not None and n.op == "DequantizeLinear" and n.inputs[1].is_const:
            zp = n.input(2)
            found[v.name] = Quant(np.asarray(n.inputs[1].const, np.float32).reshape(1),
                                  np.asarray(0 if zp is None else zp.const, np.int64).reshape(1),
                                  0)
    return found


def real_inputs(quant: dict[str, Quant], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's int8 inputs as the real values (q - z) * s the float form takes."""
    out = {}
    for name, x in inputs.items():
        q = quant.get(name)
        out[name] = x if q is None else \
            ((np.asarray(x).astype(np.int64) - q.z).astype(np.float32) * np.float32(q.s))
    return out


def model_samples(graph: Graph, calibration=None, quant: dict[str, Quant] | None = None,
                  count: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Inputs of the int8-form `graph` (the model's own int8 inputs): `calibration` in any
    form `passes.calibrate.sample_batches` accepts (with `quant`, the model's
    `io_quantization`, float samples for an int8 input are real values and are quantised
    with that input's scale and zero point), or, when None, `count`
    seeded inputs uniform over each int8 input's whole range (standard normal for a float
    input)."""
    if calibration is not None:
        from ..passes.calibrate import sample_batches
        single = graph.inputs[0].name if len(graph.inputs) == 1 else None
        return sample_batches(graph, _quantized_samples(quant or {}, calibration, single))
    rng = np.random.default_rng(seed)
    return [{v.name: rng.integers(-128, 128, v.type.shape).astype(np.int8)
             if v.type.dtype == "int8" else rng.standard_normal(v.type.shape).astype(v.type.dtype)
             for v in graph.inputs} for _ in range(count)]


def _quantized_samples(quant: dict[str, Quant], samples, single_input: str | None):
    """`samples` with each float array meant for an int8 input taken as real values and
    quantised with that input's scale and zero point (TFLite's rounding)."""
    from ..ops.quantized_tflite import quantize_affine

    def fix(name, a):
        a, q = np.asarray(a), quant.get(name)
        if q is not None and a.dtype.kind == "f":
            return quantize_affine(a, scale=q.s, zero_point=q.z, dtype="int8")
        return a
    if isinstance(samples, np.ndarray):
        return fix(single_input, samples) if single_input else samples
    if isinstance(samples, dict):
        return {k: fix(k, v) for k, v in samples.items()}
    return [{k: fix(k, v) for k, v in s.items()} for s in samples]


def is_tflite_path(model) -> bool:
    return isinstance(model, (str, Path)) and str(model).lower().endswith(".tflite")


def is_int8_tflite(graph: Graph) -> bool:
    """Whether `graph` holds the int8-tflite format's ops (an imported int8 TFLite model)."""
    return any(n.op in INT8_TFLITE_OPS for n in graph.nodes)


INT8_TFLITE_OPS = ("RequantizeQ31", "QAddQ31", "QMulQ31", "AveragePoolInt", "SoftmaxInt8",
                   "LookupInt8", "HardSwishInt8", "MeanInt8")

__all__ = ["FORMS", "HANDLERS", "INT8_TFLITE_OPS", "Quant", "TFLiteImporter", "io_quantization",
           "is_int8_tflite", "is_tflite_path", "load_tflite", "model_samples",
           "dequantized_outputs", "read_tflite", "real_inputs"]

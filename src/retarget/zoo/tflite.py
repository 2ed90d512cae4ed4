"""Small TFLite test models, written here without TensorFlow.

A network is described once in float (`Net`: NHWC layers with seeded random weights) and
written as a TFLite flatbuffer with the schema's generated builders (the `tflite` package)
and `flatbuffers`: as a float32 model, or as a fully int8-quantised one after a post-training
quantisation done the way TFLite's converter does it: the float model is run on calibration
inputs (retarget's reference executor on its own import), each activation gets an asymmetric
int8 range [min, max] (always containing 0), weights are symmetric int8 per output channel
(or per tensor), biases int32 at s_x * s_w, and ops TFLite runs as copies (pools, reshape,
concatenation, pad, transpose, slice) share their input's quantisation. Input and output are
int8, as with `inference_input_type = inference_output_type = tf.int8` (or float through
QUANTIZE / DEQUANTIZE with `float_io`).

`MODELS` names the test networks (LeNet-style, MobileNet-v1-style, a residual block, average
pooling + softmax, ...); `tflite_model(name, quantized=True)` returns the flatbuffer's bytes,
`model_inputs(bytes)` inputs from the calibration distribution. Nothing is downloaded, and
nothing here needs LiteRT (the tests validate every file by running it there).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# TFLite builtin operator codes and the enum values the writer uses (schema.fbs).
OPCODES = {"ADD": 0, "AVERAGE_POOL_2D": 1, "CONCATENATION": 2, "CONV_2D": 3,
           "DEPTHWISE_CONV_2D": 4, "DEQUANTIZE": 6, "FULLY_CONNECTED": 9, "LOGISTIC": 14,
           "MAX_POOL_2D": 17, "MUL": 18, "RESHAPE": 22, "SOFTMAX": 25, "PAD": 34,
           "TRANSPOSE": 39, "MEAN": 40, "STRIDED_SLICE": 45, "QUANTIZE": 114,
           "HARD_SWISH": 117}
ACT = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
PADDING = {"SAME": 0, "VALID": 1}
# (options table, BuiltinOptions union index) per operator; None: no options table.
OPTIONS = {"ADD": ("AddOptions", 11), "MUL": ("MulOptions", 21),
           "CONV_2D": ("Conv2DOptions", 1), "DEPTHWISE_CONV_2D": ("DepthwiseConv2DOptions", 2),
           "FULLY_CONNECTED": ("FullyConnectedOptions", 8), "AVERAGE_POOL_2D":
           ("Pool2DOptions", 5), "MAX_POOL_2D": ("Pool2DOptions", 5),
           "RESHAPE": ("ReshapeOptions", 17), "SOFTMAX": ("SoftmaxOptions", 9),
           "CONCATENATION": ("ConcatenationOptions", 10), "PAD": ("PadOptions", 22),
           "MEAN": ("ReducerOptions", 27), "TRANSPOSE": ("TransposeOptions", 26),
           "STRIDED_SLICE": ("StridedSliceOptions", 32)}
# Operator versions the int8 kernels are registered under (per-channel conv needs 3).
INT8_VERSIONS = {"CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 4, "RESHAPE": 1,
                 "HARD_SWISH": 1}
# Ops TFLite runs on int8 as copies of their input: the output keeps the input's quantisation.
SAME_QUANT = ("AVERAGE_POOL_2D", "MAX_POOL_2D", "RESHAPE", "CONCATENATION", "PAD", "TRANSPOSE",
              "STRIDED_SLICE")
_TYPES = {"float32": 0, "int32": 2, "int8": 9, "int64": 4}


def _schema(name: str):
    """The generated module for one schema table (its Start / Add... / End builders)."""
    try:
        return importlib.import_module(f"tflite.{name}")
    except ImportError:
        raise ImportError("writing TFLite models needs the `tflite` and `flatbuffers` "
                          "packages: pip install 'retarget[tflite]'") from None


@dataclass(slots=True)
class Layer:
    op: str
    inputs: list[str]
    output: str
    options: dict = field(default_factory=dict)


@dataclass
class Net:
    """A float NHWC network, built layer by layer; tensors are referred to by name."""
    name: str
    input_shape: tuple[int, ...]
    seed: int = 0
    layers: list[Layer] = field(default_factory=list)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    weight_axis: dict[str, int] = field(default_factory=dict)   # per-channel axis of weights
    outputs: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)
        self.shapes["input"] = tuple(self.input_shape)

    def _add(self, op: str, inputs: list[str], shape, **options) -> str:
        out = f"{op.lower()}_{len(self.layers)}"
        self.layers.append(Layer(op, inputs, out, options))
        self.shapes[out] = tuple(int(d) for d in shape)
        return out

    def _const(self, base: str, array, axis: int | None = None) -> str:
        name = f"{base}_{len(self.consts)}"
        self.consts[name] = np.asarray(array)
        self.shapes[name] = self.consts[name].shape
        if axis is not None:
            self.weight_axis[name] = axis
        return name

    @staticmethod
    def _out(size, k, s, padding):
        return -(-size // s) if padding == "SAME" else (size - k) // s + 1

    def conv(self, x, out_ch, k=3, stride=1, padding="SAME", act="NONE", depthwise=False,
             multiplier=1):
        n, h, w, c = self.shapes[x]
        if depthwise:
            out_ch = c * multiplier
            wt = self.rng.normal(0, np.sqrt(2 / (k * k)), (1, k, k, out_ch))
            wn = self._const("dw_weights", wt.astype(np.float32), 3)
        else:
            wt = self.rng.normal(0, np.sqrt(2 / (k * k * c)), (out_ch, k, k, c))
            wn = self._const("weights", wt.astype(np.float32), 0)
        bn = self._const("bias", self.rng.normal(0, 0.1, out_ch).astype(np.float32))
        shape = (n, self._out(h, k, stride, padding), self._out(w, k, stride, padding), out_ch)
        opts = dict(Padding=PADDING[padding], StrideW=stride, StrideH=stride,
                    FusedActivationFunction=ACT[act], DilationWFactor=1, DilationHFactor=1)
        if depthwise:
            opts["DepthMultiplier"] = multiplier
        return self._add("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, wn, bn], shape,
                         **opts)

    def fc(self, x, units, act="NONE"):
        n = self.shapes[x][0]
        k = int(np.prod(self.shapes[x][1:]))
        wn = self._const("fc_weights", self.rng.normal(0, np.sqrt(1 / k), (units, k))
                         .astype(np.float32), 0)
        bn = self._const("fc_bias", self.rng.normal(0, 0.1, units).astype(np.float32))
        return self._add("FULLY_CONNECTED", [x, wn, bn], (n, units),
                         FusedActivationFunction=ACT[act])

    def add(self, a, b, act="NONE"):
        return self._add("ADD", [a, b], self.shapes[a], FusedActivationFunction=ACT[act])

    def mul(self, a, b, act="NONE"):
        return self._add("MUL", [a, b], self.shapes[a], FusedActivationFunction=ACT[act])

    def pool(self, x, kind, k=2, stride=2, padding="VALID", act="NONE"):
        n, h, w, c = self.shapes[x]
        shape = (n, self._out(h, k, stride, padding), self._out(w, k, stride, padding), c)
        return self._add("AVERAGE_POOL_2D" if kind == "avg" else "MAX_POOL_2D", [x], shape,
                         Padding=PADDING[padding], StrideW=stride, StrideH=stride,
                         FilterWidth=k, FilterHeight=k, FusedActivationFunction=ACT[act])

    def reshape(self, x, shape):
        sn = self._const("shape", np.array(shape, np.int32))
        return self._add("RESHAPE", [x, sn], shape)

    def softmax(self, x):
        return self._add("SOFTMAX", [x], self.shapes[x], Beta=1.0)

    def concat(self, xs, axis=3):
        shape = list(self.shapes[xs[0]])
        shape[axis] = sum(self.shapes[t][axis] for t in xs)
        return self._add("CONCATENATION", list(xs), shape, Axis=axis,
                         FusedActivationFunction=0)

    def pad(self, x, paddings):
        pn = self._const("paddings", np.array(paddings, np.int32))
        shape = [d + a + b for d, (a, b) in zip(self.shapes[x], paddings)]
        return self._add("PAD", [x, pn], shape)

    def mean(self, x, axes=(1, 2)):
        an = self._const("axes", np.array(axes, np.int32))
        shape = [1 if i in axes else d for i, d in enumerate(self.shapes[x])]
        return self._add("MEAN", [x, an], shape, KeepDims=True)

    def transpose(self, x, perm):
        pn = self._const("perm", np.array(perm, np.int32))
        return self._add("TRANSPOSE", [x, pn], [self.shapes[x][p] for p in perm])

    def strided_slice(self, x, begin, end, strides):
        names = [self._const(k, np.array(v, np.int32)) for k, v in
                 (("begin", begin), ("end", end), ("strides", strides))]
        shape = [len(range(b, e, s)) for b, e, s in zip(begin, end, strides)]
        return self._add("STRIDED_SLICE", [x, *names], shape, BeginMask=0, EndMask=0,
                         EllipsisMask=0, NewAxisMask=0, ShrinkAxisMask=0)

    def unary(self, x, op):
        return self._add(op, [x], self.shapes[x])

    def output(self, x):
        self.outputs.append(x)
        return self


# ---- the flatbuffer writer -----------------------------------------------------------------------
@dataclass(slots=True)
class _T:
    name: str
    shape: tuple
    dtype: str
    data: np.ndarray | None = None
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    axis: int = 0


def _write(tensors: list[_T], net: Net, int8: bool, layers: list[Layer] | None = None,
           inputs: list[str] | None = None, outputs: list[str] | None = None) -> bytes:
    """The flatbuffer of `tensors` and `layers` (default: the net's), from `inputs` to
    `outputs` (default: "input" and the net's outputs)."""
    layers = net.layers if layers is None else layers
    inputs = ["input"] if inputs is None else inputs
    outputs = net.outputs if outputs is None else outputs
    import flatbuffers
    b = flatbuffers.Builder(1024)
    index = {t.name: i for i, t in enumerate(tensors)}
    # buffers: 0 is the empty sentinel, then one per constant tensor
    buf_of, datas = {}, [None]
    for t in tensors:
        if t.data is not None:
            buf_of[t.name] = len(datas)
            datas.append(np.ascontiguousarray(t.data).tobytes())
    Buf = _schema("Buffer")
    buf_offs = []
    for d in datas:
        vec = b.CreateByteVector(d) if d else None
        Buf.BufferStart(b)
        if vec is not None:
            Buf.BufferAddData(b, vec)
        buf_offs.append(Buf.BufferEnd(b))
    T, Q = _schema("Tensor"), _schema("QuantizationParameters")
    t_offs = []
    for t in tensors:
        name = b.CreateString(t.name)
        shape = b.CreateNumpyVector(np.array(t.shape, np.int32))
        q = None
        if t.scale is not None:
            sv = b.CreateNumpyVector(np.asarray(t.scale, np.float32).reshape(-1))
            zv = b.CreateNumpyVector(np.asarray(t.zero_point, np.int64).reshape(-1))
            Q.QuantizationParametersStart(b)
            Q.QuantizationParametersAddScale(b, sv)
            Q.QuantizationParametersAddZeroPoint(b, zv)
            Q.QuantizationParametersAddQuantizedDimension(b, t.axis)
            q = Q.QuantizationParametersEnd(b)
        T.TensorStart(b)
        T.TensorAddShape(b, shape)
        T.TensorAddType(b, _TYPES[t.dtype])
        T.TensorAddBuffer(b, buf_of.get(t.name, 0))
        T.TensorAddName(b, name)
        if q is not None:
            T.TensorAddQuantization(b, q)
        t_offs.append(T.TensorEnd(b))
    ops = [(layer.op, [index[i] for i in layer.inputs], [index[layer.output]], layer.options)
           for layer in layers]
    codes = sorted({op for op, *_ in ops}, key=list(OPCODES).index)
    O, OC = _schema("Operator"), _schema("OperatorCode")
    op_offs = []
    for op, ins, outs, opts in ops:
        opt_off, opt_type = None, 0
        if op in OPTIONS:
            table, opt_type = OPTIONS[op]
            mod = _schema(table)
            getattr(mod, f"{table}Start")(b)
            for k, v in opts.items():
                getattr(mod, f"{table}Add{k}")(b, v)
            opt_off = getattr(mod, f"{table}End")(b)
        iv = b.CreateNumpyVector(np.array(ins, np.int32))
        ov = b.CreateNumpyVector(np.array(outs, np.int32))
        O.OperatorStart(b)
        O.OperatorAddOpcodeIndex(b, codes.index(op))
        O.OperatorAddInputs(b, iv)
        O.OperatorAddOutputs(b, ov)
        if opt_off is not None:
            O.OperatorAddBuiltinOptionsType(b, opt_type)
            O.OperatorAddBuiltinOptions(b, opt_off)
        op_offs.append(O.OperatorEnd(b))
    code_offs = []
    for op in codes:
        OC.OperatorCodeStart(b)
        OC.OperatorCodeAddDeprecatedBuiltinCode(b, min(OPCODES[op], 127))
        OC.OperatorCodeAddBuiltinCode(b, OPCODES[op])
        OC.OperatorCodeAddVersion(b, INT8_VERSIONS.get(op, 2) if int8 else 1)
        code_offs.append(OC.OperatorCodeEnd(b))
    S, M = _schema("SubGraph"), _schema("Model")

    def vector(start, offs):
        start(b, len(offs))
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    tv = vector(S.SubGraphStartTensorsVector, t_offs)
    inv = b.CreateNumpyVector(np.array([index[i] for i in inputs], np.int32))
    outv = b.CreateNumpyVector(np.array([index[o] for o in outputs], np.int32))
    opv = vector(S.SubGraphStartOperatorsVector, op_offs)
    sname = b.CreateString("main")
    S.SubGraphStart(b)
    S.SubGraphAddTensors(b, tv)
    S.SubGraphAddInputs(b, inv)
    S.SubGraphAddOutputs(b, outv)
    S.SubGraphAddOperators(b, opv)
    S.SubGraphAddName(b, sname)
    sg = S.SubGraphEnd(b)
    sgv = vector(M.ModelStartSubgraphsVector, [sg])
    ocv = vector(M.ModelStartOperatorCodesVector, code_offs)
    bv = vector(M.ModelStartBuffersVector, buf_offs)
    desc = b.CreateString(f"retarget test model {net.name}")
    M.ModelStart(b)
    M.ModelAddVersion(b, 3)
    M.ModelAddOperatorCodes(b, ocv)
    M.ModelAddSubgraphs(b, sgv)
    M.ModelAddDescription(b, desc)
    M.ModelAddBuffers(b, bv)
    b.Finish(M.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def float_model(net: Net) -> bytes:
    tensors = [_T(n, s, str(net.consts[n].dtype) if n in net.consts else "float32",
                  net.consts.get(n)) for n, s in net.shapes.items()]
    return _write(tensors, net, int8=False)


# ---- post-training quantisation ------------------------------------------------------------------
def _activation_quant(lo: float, hi: float) -> tuple[np.float32, int]:
    """Asymmetric int8 (scale, zero point) for [lo, hi] widened to contain 0, as TFLite's
    converter nudges it."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi == lo:
        return np.float32(1.0), 0
    scale = np.float32((hi - lo) / 255.0)
    zp = int(np.clip(np.round(-128 - lo / float(scale)), -128, 127))
    return scale, zp


def calibrate(net: Net, samples: np.ndarray) -> dict[str, tuple[float, float]]:
    """min / max of every activation over `samples` (float NHWC inputs), running the float
    model on retarget's reference executor."""
    from ..frontend.tflite import load_tflite
    from ..targets.cpu.reference import run_graph
    g = load_tflite(float_model(net), simplify=False)
    ranges: dict[str, tuple[float, float]] = {}
    for x in samples:
        env = run_graph(g, {"input": x[None].astype(np.float32)}, intermediates=True)
        for name in [layer.output for layer in net.layers] + ["input"]:
            a = env[name]
            lo, hi = ranges.get(name, (np.inf, -np.inf))
            ranges[name] = (min(lo, float(a.min())), max(hi, float(a.max())))
    return ranges


def _tie(net: Net, ranges: dict) -> dict[str, str]:
    """Union of the tensors that must share quantisation (SAME_QUANT ops), each mapped to
    its group's representative; the group's range is the union of its members'."""
    parent = {n: n for n in ranges}

    def find(n):
        while parent[n] != n:
            n = parent[n]
        return n
    for layer in net.layers:
        if layer.op in SAME_QUANT:
            for i in layer.inputs:
                if i in ranges:
                    parent[find(i)] = find(layer.output)
    return {n: find(n) for n in ranges}


def int8_model(net: Net, samples: np.ndarray, per_channel: bool = True,
               float_io: bool = False) -> bytes:
    """The net quantised to int8 (see the module docstring). float_io: the model takes and
    returns float32 as converters write it without `inference_input_type = tf.int8`: a
    QUANTIZE (float -> int8) after the input and, per output, a QUANTIZE (int8 -> int8, to a
    coarser scale and another zero point) and a DEQUANTIZE."""
    ranges = calibrate(net, samples)
    group = _tie(net, ranges)
    merged: dict[str, tuple[float, float]] = {}
    for n, (lo, hi) in ranges.items():
        g = group[n]
        a, b = merged.get(g, (np.inf, -np.inf))
        merged[g] = (min(a, lo), max(b, hi))
    act = {n: _activation_quant(*merged[group[n]]) for n in ranges}
    for layer in net.layers:
        if layer.op in ("SOFTMAX", "LOGISTIC"):   # TFLite's fixed int8 output quantisation
            act[layer.output] = (np.float32(1 / 256), -128)
    tensors = []
    weight_scale: dict[str, np.ndarray] = {}
    for n, s in net.shapes.items():
        if n in act:
            sc, zp = act[n]
            tensors.append(_T(n, s, "int8", None, np.array([sc]), np.array([zp])))
        elif n in net.weight_axis:
            w = net.consts[n]
            axis = net.weight_axis[n]
            red = tuple(i for i in range(w.ndim) if i != axis)
            amax = np.abs(w).max(axis=red) if per_channel else np.array([np.abs(w).max()])
            sc = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
            shape = [1] * w.ndim
            if per_channel:
                shape[axis] = -1
            q = np.clip(np.rint(w / sc.reshape(shape)), -127, 127).astype(np.int8)
            weight_scale[n] = sc
            tensors.append(_T(n, s, "int8", q, sc, np.zeros(sc.size, np.int64),
                              axis if per_channel else 0))
        else:
            tensors.append(None)         # biases and int32 parameters: filled below
    by_name = {t.name: t for t in tensors if t is not None}
    for layer in net.layers:
        if layer.op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            x, w, bname = layer.inputs
            s_b = (np.float32(act[x][0]) * weight_scale[w]).astype(np.float32)
            q = np.clip(np.rint(net.consts[bname] / s_b), -2**31, 2**31 - 1).astype(np.int32)
            by_name[bname] = _T(bname, net.shapes[bname], "int32", q, s_b,
                                np.zeros(s_b.size, np.int64), 0)
    out = []
    for n, s in net.shapes.items():
        t = by_name.get(n)
        if t is None:
            c = net.consts[n]
            t = _T(n, s, str(c.dtype), c)
        out.append(t)
    if not float_io:
        return _write(out, net, int8=True)
    layers = [Layer("QUANTIZE", ["input_float"], "input")] + list(net.layers)
    out.append(_T("input_float", net.shapes["input"], "float32"))
    outputs = []
    for o in net.outputs:
        t = by_name.get(o) or next(x for x in out if x.name == o)
        s2, z2 = np.float32(t.scale[0] * 1.5), int(np.clip(t.zero_point[0] + 3, -128, 127))
        out.append(_T(f"{o}_requant", t.shape, "int8", None, np.array([s2]), np.array([z2])))
        out.append(_T(f"{o}_float", t.shape, "float32"))
        layers += [Layer("QUANTIZE", [o], f"{o}_requant"),
                   Layer("DEQUANTIZE", [f"{o}_requant"], f"{o}_float")]
        outputs.append(f"{o}_float")
    return _write(out, net, int8=True, layers=layers, inputs=["input_float"], outputs=outputs)


# ---- the test networks -------------------------------------------------------------------------
def lenet() -> Net:
    n = Net("lenet", (1, 12, 12, 1), seed=1)
    x = n.conv("input", 4, 3, padding="VALID", act="RELU")
    x = n.pool(x, "max")
    x = n.conv(x, 8, 3, padding="VALID", act="RELU")
    x = n.reshape(x, (1, 3 * 3 * 8))
    x = n.fc(x, 16, act="RELU")
    return n.output(n.fc(x, 10))


def mobilenet() -> Net:
    n = Net("mobilenet", (1, 16, 16, 3), seed=2)
    x = n.conv("input", 8, 3, stride=2, act="RELU6")
    for ch, stride in ((16, 1), (16, 2), (32, 1)):
        x = n.conv(x, 0, 3, stride=stride, act="RELU6", depthwise=True)
        x = n.conv(x, ch, 1, act="RELU6")
    x = n.pool(x, "avg", k=4, stride=4)
    x = n.reshape(x, (1, 32))
    return n.output(n.fc(x, 10))


def residual() -> Net:
    n = Net("residual", (1, 8, 8, 8), seed=3)
    y = n.conv("input", 8, 3, act="RELU")
    y = n.conv(y, 8, 3)
    x = n.add(y, "input", act="RELU")
    z = n.conv(x, 8, 1)
    z = n.mul(z, x)
    return n.output(n.pad(z, [[0, 0], [1, 1], [1, 1], [0, 0]]))


def avgpool_softmax() -> Net:
    n = Net("avgpool_softmax", (1, 8, 8, 4), seed=4)
    x = n.conv("input", 8, 3, act="RELU")
    x = n.pool(x, "avg", k=3, stride=2, padding="SAME")
    x = n.reshape(x, (1, 4 * 4 * 8))
    x = n.fc(x, 10)
    return n.output(n.softmax(x))


def layout_ops() -> Net:
    """CONCATENATION, TRANSPOSE, STRIDED_SLICE, MAX_POOL with SAME padding and ReLU6."""
    n = Net("layout_ops", (1, 6, 6, 4), seed=5)
    a = n.conv("input", 4, 3, act="RELU")
    b = n.conv("input", 4, 1, act="RELU")
    x = n.concat([a, b])
    x = n.pool(x, "max", k=3, stride=2, padding="SAME", act="RELU6")
    x = n.strided_slice(x, [0, 0, 1, 0], [1, 3, 3, 8], [1, 1, 1, 2])
    return n.output(n.transpose(x, [0, 3, 1, 2]))


def activations() -> Net:
    """LOGISTIC and HARD_SWISH after convolutions, MEAN over the spatial axes."""
    n = Net("activations", (1, 6, 6, 4), seed=6)
    a = n.unary(n.conv("input", 8, 3), "LOGISTIC")
    b = n.unary(n.conv("input", 8, 3), "HARD_SWISH")
    return n.output(n.mean(n.add(a, b)))


# name -> (network, per_channel, float_io): "lenet_per_tensor" is the per-tensor quantised
# model, "lenet_float_io" the one with float input and output (QUANTIZE / DEQUANTIZE).
MODELS: dict[str, tuple[Callable[[], Net], bool, bool]] = {
    "lenet": (lenet, True, False), "lenet_per_tensor": (lenet, False, False),
    "lenet_float_io": (lenet, True, True), "mobilenet": (mobilenet, True, False),
    "residual": (residual, True, False), "avgpool_softmax": (avgpool_softmax, True, False),
    "layout_ops": (layout_ops, True, False), "activations": (activations, True, False),
}


def calibration_samples(net: Net, count: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (count,) + net.input_shape[1:]) \
        .astype(np.float32)


def tflite_model(name: str, quantized: bool = True) -> bytes:
    """The named test model's flatbuffer: int8 (calibrated on 8 seeded normal samples, per
    channel or per tensor as MODELS says) or float32."""
    if name not in MODELS:
        raise KeyError(f"no TFLite test model {name!r}; known: {', '.join(MODELS)}")
    make, per_channel, float_io = MODELS[name]
    net = make()
    if not quantized:
        return float_model(net)
    return int8_model(net, calibration_samples(net), per_channel=per_channel,
                      float_io=float_io)


def model_inputs(buf: bytes, count: int = 4, seed: int = 0) -> list[np.ndarray]:
    """`count` inputs for a test model: seeded standard-normal samples (the calibration
    distribution) quantised with the model's int8 input quantisation (TFLite's rounding), or
    left float32 for a float model."""
    from ..frontend.tflite import TFLiteImporter
    from ..ops.quantized_tflite import quantize_affine
    imp = TFLiteImporter(buf, "int8", "model")
    t = imp.tensors[int(imp.sub.InputsAsNumpy()[0])]
    rng = np.random.default_rng(seed)
    xs = [rng.normal(0, 1, t.shape).astype(np.float32) for _ in range(count)]
    if t.dtype != "int8":
        return xs
    return [quantize_affine(x, scale=t.quant.s, zero_point=t.quant.z, dtype="int8") for x in xs]


__all__ = ["MODELS", "Net", "calibration_samples", "float_model", "int8_model", "model_inputs",
           "tflite_model"]

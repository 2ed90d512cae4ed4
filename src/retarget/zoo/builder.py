"""A small ONNX graph builder that writes models the way a PyTorch export does.

The zoo's networks are written with it: each helper adds one layer (conv, batch norm, pool,
...) with seeded random weights, tracks the output shape itself (so a layer that does not fit
its input fails at build time naming the layer, not later inside a runtime), and names nodes,
values and initializers in PyTorch's style (`/layer1/layer1.0/conv1/Conv`, `layer1.0.conv1.weight`).

Weights are He (Kaiming) scaled and batch-norm statistics are near the identity, so
activations stay O(1) through deep networks; that keeps relative-error comparisons meaningful.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Opsets the builder knows how to write (the layouts that changed between them are handled below).
SUPPORTED_OPSETS = (11, 12, 13, 14, 15, 16, 17, 18)


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil else span // s) + 1
    # PyTorch's (and ONNX's) ceil_mode rule: the last window must start inside the input or
    # its left padding, otherwise it is dropped.
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


@dataclass(slots=True)
class OnnxBuilder:
    """Accumulates nodes and initializers; `model()` returns the finished ModelProto.

    Values are referred to by name (str). `shape(name)` gives the tracked shape."""
    graph_name: str
    opset: int = 17
    seed: int = 0
    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    shapes: dict = field(default_factory=dict)
    rng: np.random.Generator = field(init=False)
    _used_names: set = field(default_factory=set)

    def __post_init__(self):
        if self.opset not in SUPPORTED_OPSETS:
            raise ValueError(f"opset {self.opset} not supported by the zoo builder; "
                             f"use one of {SUPPORTED_OPSETS}")
        self.rng = np.random.default_rng(self.seed)

    # ---- bookkeeping ---------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        return self.shapes[name]

    def channels(self, name: str) -> int:
        return self.shapes[name][1]

    def _unique(self, base: str) -> str:
        name, i = base, 1
        while name in self._used_names:
            name = f"{base}_{i}"
            i += 1
        self._used_names.add(name)
        return name

    def _node(self, op: str, scope: str, inputs: list[str], shape: tuple[int, ...] | None,
              n_outputs: int = 1, **attrs) -> str:
        """Add one node named like PyTorch does; returns its (first) output name."""
        node_name = self._unique(f"/{scope}/{op}" if scope else f"/{op}")
        outs = [f"{node_name}_output_{i}" for i in range(n_outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=node_name, **attrs))
        if shape is not None:
            self.shapes[outs[0]] = tuple(int(d) for d in shape)
        return outs[0]

    def weight(self, name: str, array: np.ndarray) -> str:
        name = self._unique(name)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        self.shapes[name] = tuple(array.shape)
        return name

    def constant_node(self, scope: str, values, dtype=np.int64) -> str:
        """A `Constant` node, as older PyTorch exports emit for shape arithmetic."""
        arr = np.asarray(values, dtype=dtype)
        return self._node("Constant", scope, [], arr.shape,
                          value=numpy_helper.from_array(arr, "value"))

    def _he(self, shape: tuple[int, ...], fan_in: int, gain: float = 2.0) -> np.ndarray:
        return (self.rng.standard_normal(shape) * math.sqrt(gain / fan_in)).astype(np.float32)

    def _small(self, n: int, scale: float = 0.05) -> np.ndarray:
        return (self.rng.standard_normal(n) * scale).astype(np.float32)

    # ---- graph ends ------------------------------------------------------------------------
    def input(self, name: str, shape: tuple[int, ...]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.shapes[name] = tuple(shape)
        self._used_names.add(name)
        return name

    def output(self, value: str, name: str = "output") -> str:
        """Mark `value` as a graph output under the name `name`."""
        # Rename the producing node's output so the model's output has a friendly name,
        # as torch.onnx.export(output_names=[...]) does.
        for node in self.nodes:
            for i, o in enumerate(node.output):
                if o == value:
                    node.output[i] = name
            for i, x in enumerate(node.input):
                if x == value:
                    node.input[i] = name
        self.shapes[name] = self.shapes[value]
        self.outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                          list(self.shapes[name])))
        return name

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.graph_name, self.inputs, self.outputs,
                                  self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="retarget.zoo")
        # Keep the IR version loadable by older runtimes at older opsets.
        model.ir_version = min(model.ir_version, 8 if self.opset <= 17 else 9)
        onnx.checker.check_model(model)
        return model

    # ---- layers --------------------------------------------------------------------------
    def conv(self, x: str, cout: int, k, scope: str, stride=1, pad=None, groups: int = 1,
             dilation=1, bias: bool = False) -> str:
        n, cin, h, w = self.shape(x)
        kh, kw = _pair(k)
        sh, sw = _pair(stride)
        dh, dw = _pair(dilation)
        ph, pw = _pair(pad) if pad is not None else (dh * (kh - 1) // 2, dw * (kw - 1) // 2)
        if cin % groups or cout % groups:
            raise ValueError(f"{scope}: channels {cin}->{cout} not divisible by groups={groups}")
        oh, ow = _pool_out(h, kh, sh, ph, dh, False), _pool_out(w, kw, sw, pw, dw, False)
        if oh < 1 or ow < 1:
            raise ValueError(f"{scope}: {kh}x{kw} conv does not fit a {h}x{w} input; "
                             f"use a larger input size")
        fan_in = cin // groups * kh * kw
        ins = [x, self.weight(f"{scope}.weight", self._he((cout, cin // groups, kh, kw), fan_in))]
        if bias:
            ins.append(self.weight(f"{scope}.bias", self._small(cout)))
        return self._node("Conv", scope, ins, (n, cout, oh, ow), dilations=[dh, dw], group=groups,
                          kernel_shape=[kh, kw], pads=[ph, pw, ph, pw], strides=[sh, sw])

    def conv_transpose(self, x: str, cout: int, k: int, stride: int, scope: str,
                       bias: bool = True) -> str:
        n, cin, h, w = self.shape(x)
        # Each output pixel receives about cin*k*k/stride^2 terms.
        fan_in = max(1, cin * k * k // (stride * stride))
        ins = [x, self.weight(f"{scope}.weight", self._he((cin, cout, k, k), fan_in))]
        if bias:
            ins.append(self.weight(f"{scope}.bias", self._small(cout)))
        oh, ow = (h - 1) * stride + k, (w - 1) * stride + k
        return self._node("ConvTranspose", scope, ins, (n, cout, oh, ow), dilations=[1, 1],
                          group=1, kernel_shape=[k, k], pads=[0, 0, 0, 0], strides=[stride, stride])

    def batchnorm(self, x: str, scope: str, eps: float = 1e-5, gamma_scale: float = 1.0) -> str:
        """Unfused BatchNormalization with running statistics near (0, 1).

        `gamma_scale` shrinks the scale, used on the last norm of a residual branch so the
        sum of many branches does not grow without bound (torchvision's zero_init_residual,
        softened so the branch still matters)."""
        c = self.channels(x)
        gamma = (self.rng.uniform(0.8, 1.2, c) * gamma_scale).astype(np.float32)
        beta = self._small(c, 0.1)
        mean = self._small(c, 0.1)
        var = self.rng.uniform(0.8, 1.25, c).astype(np.float32)
        ins = [x, self.weight(f"{scope}.weight", gamma), self.weight(f"{scope}.bias", beta),
               self.weight(f"{scope}.running_mean", mean), self.weight(f"{scope}.running_var", var)]
        return self._node("BatchNormalization", scope, ins, self.shape(x),
                          epsilon=eps, momentum=0.9)

    def relu(self, x: str, scope: str) -> str:
        return self._node("Relu", scope, [x], self.shape(x))

    def relu6(self, x: str, scope: str) -> str:
        """ReLU6 as PyTorch exports it: Clip with min/max given as constant inputs (opset 11+)."""
        lo = self.weight(f"{scope}.clip_min", np.array(0.0, np.float32))
        hi = self.weight(f"{scope}.clip_max", np.array(6.0, np.float32))
        return self._node("Clip", scope, [x, lo, hi], self.shape(x))

    def add(self, a: str, b: str, scope: str) -> str:
        if self.shape(a) != self.shape(b):
            raise ValueError(f"{scope}: cannot add {self.shape(a)} and {self.shape(b)}")
        return self._node("Add", scope, [a, b], self.shape(a))

    def concat(self, xs: list[str], scope: str, axis: int = 1) -> str:
        shapes = [self.shape(x) for x in xs]
        out = list(shapes[0])
        for s in shapes[1:]:
            if s[:axis] != shapes[0][:axis] or s[axis + 1:] != shapes[0][axis + 1:]:
                raise ValueError(f"{scope}: cannot concatenate shapes {shapes} on axis {axis}")
            out[axis] += s[axis]
        return self._node("Concat", scope, xs, tuple(out), axis=axis)

    def _pool(self, op: str, x: str, k: int, stride: int, pad: int, ceil: bool, scope: str,
              **extra) -> str:
        n, c, h, w = self.shape(x)
        oh, ow = _pool_out(h, k, stride, pad, 1, ceil), _pool_out(w, k, stride, pad, 1, ceil)
        if oh < 1 or ow < 1:
            raise ValueError(f"{scope}: {k}x{k} {op} does not fit a {h}x{w} input; "
                             f"use a larger input size")
        return self._node(op, scope, [x], (n, c, oh, ow), ceil_mode=int(ceil), kernel_shape=[k, k],
                          pads=[pad] * 4, strides=[stride, stride], **extra)

    def maxpool(self, x: str, k: int, stride: int, scope: str, pad: int = 0,
                ceil: bool = False) -> str:
        return self._pool("MaxPool", x, k, stride, pad, ceil, scope)

    def avgpool(self, x: str, k: int, stride: int, scope: str, pad: int = 0,
                ceil: bool = False) -> str:
        return self._pool("AveragePool", x, k, stride, pad, ceil, scope, count_include_pad=0)

    def global_avgpool(self, x: str, scope: str) -> str:
        n, c = self.shape(x)[:2]
        return self._node("GlobalAveragePool", scope, [x], (n, c, 1, 1))

    def lrn(self, x: str, scope: str, size: int = 5, alpha: float = 1e-4, beta: float = 0.75,
            bias: float = 2.0) -> str:
        return self._node("LRN", scope, [x], self.shape(x), alpha=alpha, beta=beta, bias=bias,
                          size=size)

    def flatten(self, x: str, scope: str) -> str:
        s = self.shape(x)
        return self._node("Flatten", scope, [x], (s[0], int(np.prod(s[1:]))), axis=1)

    def flatten_by_shape(self, x: str, scope: str) -> str:
        """`x.view(x.size(0), -1)` as PyTorch 1.x exported it: Shape -> Gather -> Unsqueeze ->
        Concat -> Reshape, with Constant nodes for the index and the -1."""
        s = self.shape(x)
        shp = self._node("Shape", scope, [x], (len(s),))
        idx = self.constant_node(scope, 0)
        n = self._node("Gather", scope, [shp, idx], (), axis=0)
        if self.opset >= 13:
            axes = self.constant_node(scope, [0])
            n1 = self._node("Unsqueeze", scope, [n, axes], (1,))
        else:
            n1 = self._node("Unsqueeze", scope, [n], (1,), axes=[0])
        minus1 = self.constant_node(scope, [-1])
        target = self._node("Concat", scope, [n1, minus1], (2,), axis=0)
        return self._node("Reshape", scope, [x, target], (s[0], int(np.prod(s[1:]))))

    def gemm(self, x: str, out_features: int, scope: str, relu_follows: bool = False) -> str:
        """A Linear layer: Gemm(x, W^T) + b with W stored [out, in] as PyTorch does."""
        n, fin = self.shape(x)
        gain = 2.0 if relu_follows else 1.0
        w = self.weight(f"{scope}.weight", self._he((out_features, fin), fin, gain))
        b = self.weight(f"{scope}.bias", self._small(out_features))
        return self._node("Gemm", scope, [x, w, b], (n, out_features), alpha=1.0, beta=1.0,
                          transB=1)

    def resize_nearest(self, x: str, scale: int, scope: str) -> str:
        """nn.Upsample(scale_factor, mode='nearest') as exported: asymmetric / floor."""
        n, c, h, w = self.shape(x)
        scales = self.weight(f"{scope}.scales", np.array([1, 1, scale, scale], np.float32))
        if self.opset >= 13:
            ins = [x, "", scales]
        else:  # opset 11/12: roi is not optional
            ins = [x, self.weight(f"{scope}.roi", np.zeros(0, np.float32)), scales]
        return self._node("Resize", scope, ins, (n, c, h * scale, w * scale),
                          coordinate_transformation_mode="asymmetric", cubic_coeff_a=-0.75,
                          mode="nearest", nearest_mode="floor")

    # ---- token (transformer) layers: shapes of any rank ----------------------------------
    def _reduce(self, op: str, x: str, axes: list[int], scope: str, keepdims: int,
                axes_input_from: int) -> str:
        """A ReduceX node: its axes are an attribute before opset `axes_input_from` (13 for
        ReduceSum, 18 for the others) and an input from then on."""
        rank = len(self.shape(x))
        norm = {a % rank for a in axes}
        dims = list(enumerate(self.shape(x)))
        shape = [1 if i in norm else d for i, d in dims] if keepdims else \
            [d for i, d in dims if i not in norm]
        if self.opset >= axes_input_from:
            ins, attrs = [self.weight(f"{scope}.axes", np.array(axes, np.int64))], {}
        else:
            ins, attrs = [], {"axes": axes}
        return self._node(op, scope, [x, *ins], tuple(shape), keepdims=keepdims, **attrs)

    def reduce_mean(self, x: str, axes: list[int], scope: str) -> str:
        return self._reduce("ReduceMean", x, axes, scope, 1, axes_input_from=18)

    def reduce_sum(self, x: str, axes: list[int], scope: str, keepdims: int = 1) -> str:
        return self._reduce("ReduceSum", x, axes, scope, keepdims, axes_input_from=13)

    def binary(self, op: str, a: str, b: str, scope: str) -> str:
        """Add / Sub / Mul / Div / Pow with NumPy broadcasting of the tracked shapes."""
        shape = np.broadcast_shapes(self.shape(a), self.shape(b))
        return self._node(op, scope, [a, b], shape)

    def scalar(self, scope: str, value: float) -> str:
        return self.weight(scope, np.array(value, np.float32))

    def layer_norm(self, x: str, scope: str, axis: int = -1, eps: float = 1e-5,
                   channels_first: bool = False) -> str:
        """LayerNorm over the trailing axes from `axis`: one LayerNormalization node from opset
        17, before it the ReduceMean / Sub / Pow / Sqrt / Div chain (weight and bias by Mul and
        Add) PyTorch exported. channels_first: over axis `axis` alone (ConvNeXt's LayerNorm2d
        on N x C x H x W), which exporters always write as that chain."""
        shape = self.shape(x)
        a = axis % len(shape)
        pshape = (shape[a],) if channels_first else shape[a:]
        w = self.weight(f"{scope}.weight",
                        (1 + 0.1 * self.rng.standard_normal(pshape)).astype(np.float32))
        b = self.weight(f"{scope}.bias", self._small(int(np.prod(pshape))).reshape(pshape))
        if not channels_first and self.opset >= 17:
            return self._node("LayerNormalization", scope, [x, w, b], shape, axis=a, epsilon=eps)
        if channels_first:   # the per-channel weight broadcasts over the axes after it
            bshape = (shape[a],) + (1,) * (len(shape) - a - 1)
            w, b = self.reshape(w, bshape, f"{scope}.w"), self.reshape(b, bshape, f"{scope}.b")
        axes = [a] if channels_first else list(range(a, len(shape)))
        d = self.binary("Sub", x, self.reduce_mean(x, axes, scope), scope)
        var = self.reduce_mean(self.binary("Pow", d, self.scalar(f"{scope}.two", 2.0), scope),
                               axes, scope)
        std = self._node("Sqrt", scope, [self.binary("Add", var, self.scalar(f"{scope}.eps", eps),
                                                     scope)], self.shape(var))
        y = self.binary("Div", d, std, scope)
        return self.binary("Add", self.binary("Mul", y, w, scope), b, scope)

    def linear(self, x: str, out_features: int, scope: str, gain: float = 1.0) -> str:
        """nn.Linear on [..., in] as exported for inputs of rank > 2: MatMul by W^T (stored
        [in, out]) then Add of the bias."""
        fin = self.shape(x)[-1]
        w = self.weight(f"{scope}.weight", self._he((fin, out_features), fin, gain))
        y = self._node("MatMul", scope, [x, w], self.shape(x)[:-1] + (out_features,))
        return self.binary("Add", y, self.weight(f"{scope}.bias", self._small(out_features)),
                           scope)

    def gelu(self, x: str, scope: str) -> str:
        """nn.GELU(): the Gelu op from opset 20, else the Erf form PyTorch exports."""
        if self.opset >= 20:
            return self._node("Gelu", scope, [x], self.shape(x))
        e = self._node("Erf", scope, [self.binary("Div", x, self.scalar(
            f"{scope}.sqrt2", math.sqrt(2.0)), scope)], self.shape(x))
        y = self.binary("Mul", x, self.binary("Add", e, self.scalar(f"{scope}.one", 1.0), scope),
                        scope)
        return self.binary("Mul", y, self.scalar(f"{scope}.half", 0.5), scope)

    def hardswish(self, x: str, scope: str) -> str:
        """nn.Hardswish(): the HardSwish op from opset 14, else x * HardSigmoid(x, 1/6, 0.5)."""
        if self.opset >= 14:
            return self._node("HardSwish", scope, [x], self.shape(x))
        gate = self._node("HardSigmoid", scope, [x], self.shape(x), alpha=1 / 6, beta=0.5)
        return self.binary("Mul", x, gate, scope)

    def silu(self, x: str, scope: str) -> str:
        """nn.SiLU() as exported: x * Sigmoid(x)."""
        return self.binary("Mul", x, self._node("Sigmoid", scope, [x], self.shape(x)), scope)

    def matmul(self, a: str, b: str, scope: str) -> str:
        sa, sb = self.shape(a), self.shape(b)
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
        return self._node("MatMul", scope, [a, b], tuple(batch) + (sa[-2], sb[-1]))

    def transpose(self, x: str, perm: tuple[int, ...], scope: str) -> str:
        s = self.shape(x)
        return self._node("Transpose", scope, [x], tuple(s[p] for p in perm), perm=list(perm))

    def reshape(self, x: str, shape: tuple[int, ...], scope: str) -> str:
        if int(np.prod(shape)) != int(np.prod(self.shape(x))):
            raise ValueError(f"{scope}: cannot reshape {self.shape(x)} to {shape}")
        target = self.weight(f"{scope}.shape", np.array(shape, np.int64))
        return self._node("Reshape", scope, [x, target], tuple(shape))

    def slice(self, x: str, axis: int, start: int, end: int, scope: str, step: int = 1) -> str:
        """x[..., start:end:step, ...] on one axis (Slice with constant inputs)."""
        shape = list(self.shape(x))
        shape[axis] = len(range(start, min(end, shape[axis]), step))
        ins = [self.weight(f"{scope}.{k}", np.array([v], np.int64))
               for k, v in (("starts", start), ("ends", end), ("axes", axis), ("steps", step))]
        return self._node("Slice", scope, [x, *ins], tuple(shape))

    def softmax(self, x: str, scope: str, axis: int = -1) -> str:
        return self._node("Softmax", scope, [x], self.shape(x), axis=axis)

    def gather(self, x: str, index: int, axis: int, scope: str) -> str:
        s = list(self.shape(x))
        del s[axis]
        # a 0-d index drops the axis (weight() would store it as shape [1])
        return self._node("Gather", scope, [x, self.constant_node(scope, index)], tuple(s),
                          axis=axis)

    def attention(self, x: str, heads: int, scope: str) -> str:
        """Multi-head self-attention on [B, N, D] tokens as timm writes it: one qkv Linear,
        heads split by Reshape / Transpose, softmax(q k^T * d^-0.5) v, output projection."""
        b, n, d = self.shape(x)
        dh = d // heads
        qkv = self.linear(x, 3 * d, f"{scope}.qkv")
        qkv = self.transpose(self.reshape(qkv, (b, n, 3, heads, dh), f"{scope}.split"),
                             (2, 0, 3, 1, 4), scope)
        q, k, v = (self.gather(qkv, i, 0, f"{scope}.{name}") for i, name in enumerate("qkv"))
        scores = self.matmul(q, self.transpose(k, (0, 1, 3, 2), scope), scope)
        scores = self.binary("Mul", scores, self.scalar(f"{scope}.scale", dh ** -0.5), scope)
        y = self.matmul(self.softmax(scores, scope), v, scope)
        y = self.reshape(self.transpose(y, (0, 2, 1, 3), scope), (b, n, d), f"{scope}.merge")
        return self.linear(y, d, f"{scope}.proj")

    def transformer_block(self, x: str, heads: int, scope: str, mlp_ratio: int = 4) -> str:
        """Pre-norm transformer block: x + attn(LN(x)), then x + MLP(LN(x)) with GELU."""
        x = self.binary("Add", x, self.attention(self.layer_norm(x, f"{scope}.norm1"), heads,
                                                  f"{scope}.attn"), scope)
        h = self.layer_norm(x, f"{scope}.norm2")
        d = self.shape(x)[-1]
        h = self.linear(self.gelu(self.linear(h, mlp_ratio * d, f"{scope}.mlp.fc1", gain=2.0),
                                  f"{scope}.mlp.act"), d, f"{scope}.mlp.fc2")
        return self.binary("Add", x, h, scope)

    # ---- common blocks ---------------------------------------------------------------------
    def conv_bn(self, x: str, cout: int, k, scope: str, stride=1, pad=None, groups: int = 1,
                act: str | None = "relu", eps: float = 1e-5, gamma_scale: float = 1.0) -> str:
        """conv (no bias) -> BatchNormalization -> activation ('relu', 'relu6' or None), with
        weights named `{scope}.conv.*` and `{scope}.bn.*` (torchvision's BasicConv2d style)."""
        y = self.conv(x, cout, k, f"{scope}.conv", stride, pad, groups)
        y = self.batchnorm(y, f"{scope}.bn", eps, gamma_scale)
        if act == "relu":
            y = self.relu(y, f"{scope}.relu")
        elif act == "relu6":
            y = self.relu6(y, f"{scope}.relu6")
        elif act is not None:
            raise ValueError(f"unknown activation {act!r}")
        return y


def scaled(channels: int, width: float, divisor: int = 8, minimum: int = 8) -> int:
    """Channels times the width multiplier, rounded to a multiple of `divisor` (MobileNet's rule:
    never drop more than 10% below the scaled value)."""
    v = max(minimum, int(channels * width + divisor / 2) // divisor * divisor)
    if v < 0.9 * channels * width:
        v += divisor
    return v

"""quantize: float Graph -> integer Graph with int8 tensors, in one of two number formats.

Formats (`scales=`; docs/quantization.md has each format and every op's exact semantics):
  "pow2"        the int8 tensor q with f fractional bits stands for q * 2**-f, so every change
                of scale is a shift (QuantizeP2, Requantize, QAdd, DequantizeP2): VTA, DNNVM.
  "multiplier"  q stands for q * s for any float32 scale s = max|v| / 127, and a change of
                scale is an integer multiplier then a right shift (QuantizeLinear,
                RequantizeMul, QAddMul, DequantizeLinear): NVDLA-style "int8-mul-shift" targets.
Both use zero point 0, int8 activations and weights, int32 accumulators and biases.

Pipeline:
 1. fold BatchNormalization into the preceding Conv (quantise the folded weights, once);
 2. calibrate: run the float graph on the samples, take max|x| of every value, and give each
    value its scale (pow2: the largest f with max|x| * 2**f <= 127; multiplier: max|x| / 127);
 3. give Concat inputs one shared scale (so concatenation stays a plain copy);
 4. rewrite node by node (the op names are pow2's; the multiplier format uses the ops above):
      graph input                -> QuantizeP2
      Conv / Gemm / MatMul with constant weights (a MatMul's following Add of a constant
      per-feature bias taken in as its bias)
                                 -> the same op on int8 x, int8 W, int32 bias (at the
                                    accumulator's scale), then Requantize ("<name>/requant")
                                    with a following Relu / Clip folded into its clip range
      MatMul of two activations  -> the same on int8 a, int8 b, Requantize
      Add of two activations     -> QAdd (alignment), Relu / Clip folded in
      MaxPool, Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Identity, Relu, Pad(0),
      GlobalMaxPool, Concat      -> unchanged on the integer tensor (exact on integers)
      Clip                       -> Requantize with shift 0 and the clip range
      anything else              -> stays float: DequantizeP2 before, QuantizeP2 where an
                                    integer consumer needs the result again
      graph outputs              -> DequantizeP2, keeping the output names.
The walk is written once (_Rewriter); what differs between the formats — a scale from a
maximum, quantising and dequantising a value, weights and bias, the requantisation, add and
alignment nodes, clip bounds — is in _Pow2Rewriter and _MultiplierRewriter.
Node names follow the float graph ("conv1" stays "conv1", its requantisation is
"conv1/requant") because placement reports are read against the model the user exported.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import InputError, ShapeError
from ..ir.graph import Graph, Node, Value, constant, fresh_name
from ..ops.quantized import (INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, LRN_LUT_ENTRIES,
                             MAX_MULTIPLIER, multiplier_shift, quantize_p2)
from ..ops.registry import resolve_attrs
from .calibrate import QMAX, Samples, calibrate, frac_bits_for, sample_batches
from .fold_batchnorm import fold_batchnorm
from .infer_shapes import infer_shapes

# Ops that are exact on integer tensors without any rescaling: they select, move or compare
# elements (and max(x, 0) commutes with a positive scale), so the output keeps the input's
# scale. Only input 0 (all inputs for Concat) is a data tensor.
PASS_THROUGH = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                "Identity", "Relu", "GlobalMaxPool", "Concat", "Pad"}
_CHUNK = 1 << 15     # elements per piece when quantising a large weight tensor
WEIGHT_QMAX = 127  # symmetric weights: -128 is never used, so negation cannot overflow


@dataclass(slots=True)
class QuantizedGraph:
    """The integer graph plus the scale chosen for each float value name.

    frac_bits (scales="pow2"): the int8 tensor standing for value v holds
    round(v * 2**frac_bits[v]). scales (scales="multiplier"): it holds round(v / scales[v]).
    The other dict is empty."""
    graph: Graph
    frac_bits: dict[str, int] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)


def quantize(graph: Graph, calibration_inputs: Samples = None, *, per_channel: bool = False,
             scales: str = "pow2", num_random: int = 4, seed: int = 0) -> Graph:
    """Post-training int8 quantisation (see module docstring).

    calibration_inputs: None (random data, with a warning), a dict name -> array, a list of
    such dicts, or for single-input graphs an array split along its leading axis into batches.
    per_channel: one weight scale per output channel (the requantisation then takes a vector
    per channel); a target that can only shift by an immediate wants per_channel=False.
    scales: "pow2" (power-of-two scales, shifts only) or "multiplier" (any scale, requantised
    by an integer multiplier and a shift)."""
    return quantize_with_info(graph, calibration_inputs, per_channel=per_channel,
                              scales=scales, num_random=num_random, seed=seed).graph


def quantize_with_info(graph: Graph, calibration_inputs: Samples = None, *,
                       per_channel: bool = False, scales: str = "pow2", num_random: int = 4,
                       seed: int = 0) -> QuantizedGraph:
    """quantize(), also returning the scale chosen per value."""
    rewriter = _REWRITERS.get(scales)
    if rewriter is None:
        raise InputError(f"quantize: scales={scales!r}; known: "
                         f"{', '.join(repr(k) for k in _REWRITERS)}")
    if any(v.type is None for v in graph.values() if not v.is_const):
        graph = infer_shapes(graph)
    g = fold_batchnorm(graph)
    batches = sample_batches(g, calibration_inputs, num_random=num_random, seed=seed)
    maxima = calibrate(g, batches)
    planned = {name: rewriter.scale_for(m) for name, m in maxima.items()}
    _share_concat_scales(g, planned, rewriter.coarser)
    rw = rewriter(g, planned, per_channel)
    rw.run()
    out = infer_shapes(Graph(rw.nodes, g.inputs, rw.outputs, name=g.name))
    return rw.result(out)


def _share_concat_scales(g: Graph, scales: dict, coarser: Callable) -> None:
    """Coarsen the scale of every Concat input (and the pass-through chain that feeds it) to
    the Concat output's, so the inputs arrive with one scale and need no realignment.
    The output's max is the largest input max, so this is the input scale with most range."""
    producers = g.producers()
    for node in g.nodes:
        if node.op != "Concat" or node.outputs[0].name not in scales:
            continue
        target = scales[node.outputs[0].name]
        for v in node.inputs:
            while v is not None and v.name in scales:
                scales[v.name] = coarser(scales[v.name], target)
                p = producers.get(v)
                if p is None or p.op not in PASS_THROUGH or p.op == "Concat":
                    break
                v = p.inputs[0]


def _activation_range(node: Node | None, to_int: Callable[[float], float]
                      ) -> tuple[int, int] | None:
    """The int8 clip range a Relu / Clip node becomes, or None if `node` is not a foldable
    activation. `to_int` maps a real bound to integer units at the output's scale. Bounds
    round inwards so the result never leaves [min, max]."""
    if node is None:
        return None
    if node.op == "Relu":
        return 0, INT8_MAX
    if node.op == "Clip":
        bounds = []
        for i, default in ((1, INT8_MIN), (2, INT8_MAX)):
            v = node.input(i)
            if v is None:
                bounds.append(default)
            elif not v.is_const or v.const.size != 1:
                return None
            else:
                x = to_int(float(v.const.reshape(())))
                q = math.ceil(x) if i == 1 else math.floor(x)
                bounds.append(max(INT8_MIN, min(INT8_MAX, q)))
        lo, hi = bounds
        return (lo, hi) if lo <= hi else None
    return None


class _Rewriter:
    """Walks the float graph once, emitting integer nodes. `qmap` maps a float value to the
    integer Value standing for it (with its scale); `fmap` to a float Value in the new graph.
    Either is filled on demand (quantise / dequantise nodes).

    A scale is in the format's own terms (a subclass's): whatever `scale_for` returns.
    `planned` holds the calibrated scale of every float value; `chosen` the scale of every
    value that got an integer stand-in."""
    widens_weights = False    # quantize_weights accepts float32 weights (else given float64)

    # ---- what a number format defines ----------------------------------------------------------
    @staticmethod
    def scale_for(max_abs: float, qmax: int = QMAX):
        """The scale at which max_abs maps to at most qmax."""
        raise NotImplementedError

    @staticmethod
    def coarser(a, b):
        """The coarser (more range) of two scales."""
        raise NotImplementedError

    def result(self, graph: Graph) -> QuantizedGraph:
        raise NotImplementedError

    def to_int(self, real: float, scale) -> float:
        """A real number in integer units at `scale` (unrounded)."""
        raise NotImplementedError

    def accumulator_scale(self, a, b):
        """The scale of an int32 product of integers at scales a and b (b may be a vector)."""
        raise NotImplementedError

    def quantize_value(self, v: Value, fv: Value, scale) -> Value:
        """Emit the node taking float fv (standing for v) to int8 at `scale`."""
        raise NotImplementedError

    def dequantize_value(self, v: Value, qv: Value, scale) -> Value:
        """Emit the node taking integer qv back to float, named like v."""
        raise NotImplementedError

    def quantize_weights(self, w: np.ndarray, scale) -> np.ndarray:
        """int8 weights in [-WEIGHT_QMAX, WEIGHT_QMAX]; `scale` broadcasts against w."""
        raise NotImplementedError

    def quantize_bias(self, bias: np.ndarray, scale) -> tuple[np.ndarray, str]:
        """int32 bias (saturated) at the accumulator's scale, and that scale in words."""
        raise NotImplementedError

    def emit_requantize(self, name: str, base: str, acc: Value, acc_scale, out_scale,
                        out_name: str, lo: int, hi: int, axis: int) -> Value:
        """int32 accumulator at acc_scale (per-channel along `axis` if a vector) -> int8 at
        out_scale, clipped to [lo, hi]; per-channel constants are named after `base`."""
        raise NotImplementedError

    def emit_add(self, node: Node, aq: Value, sa, bq: Value, sb, s_out, out_name: str,
                 lo: int, hi: int) -> Value:
        raise NotImplementedError

    def emit_align(self, name: str, qv: Value, scale, target) -> Value:
        """int8 qv at `scale` -> int8 at `target` (coarser)."""
        raise NotImplementedError

    def fit_output_scale(self, s_out, s_in):
        """The output scale a requantisation from s_in (scalar or vector) can reach; the
        calibrated s_out unless the format cannot express the ratio."""
        return s_out

    # ---- setup and naming ----------------------------------------------------------------------
    def __init__(self, g: Graph, planned: dict, per_channel: bool):
        self.g, self.planned, self.per_channel = g, planned, per_channel
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.chosen: dict = {}
        self.qmap: dict[int, tuple[Value, object]] = {}
        self.fmap: dict[int, Value] = {id(v): v for v in g.inputs}
        self.consumers = g.consumers()
        self.graph_outputs = {id(v) for v in g.outputs}
        self.taken = {v.name for v in g.values()} | {n.name for n in g.nodes}
        self.absorbed: set[int] = set()  # activation nodes folded into a requantisation

    def _name(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def _emit(self, op: str, name: str, inputs, out_name: str, *, replaces: bool = False,
              out_is_own: bool = False, **attrs) -> Value:
        """Append a node with one output. `replaces`: the node stands in for the float node of
        that name, so it keeps the name as is; `out_is_own`: likewise for the output value."""
        out = Value(out_name if out_is_own else self._name(out_name))
        self.nodes.append(Node(op, name if replaces else self._name(name), list(inputs), [out],
                               attrs))
        return out

    def _const(self, base: str, array: np.ndarray) -> Value:
        return constant(self._name(base), array)

    # ---- value access ------------------------------------------------------------------------
    def scale(self, v: Value):
        if v.name not in self.planned:
            raise ShapeError(f"value {v.name!r} was not seen during calibration")
        return self.planned[v.name]

    def q(self, v: Value) -> tuple[Value, object]:
        """The int8 Value for float value v (and its scale), quantising the float one if
        needed."""
        if id(v) in self.qmap:
            return self.qmap[id(v)]
        if v.is_const:
            raise ShapeError(f"constant {v.name!r} used as an activation is not quantised")
        s = self.scale(v)
        qv = self.quantize_value(v, self.fl(v), s)
        self._set_q(v, qv, s)
        return qv, s

    def fl(self, v: Value | None) -> Value | None:
        """The float (or non-float, untouched) Value for v, dequantising if needed."""
        if v is None or v.is_const:
            return v
        if id(v) in self.fmap:
            return self.fmap[id(v)]
        qv, s = self.qmap[id(v)]
        out = self.dequantize_value(v, qv, s)
        self.fmap[id(v)] = out
        return out

    def _set_q(self, v: Value, qv: Value, scale) -> None:
        self.qmap[id(v)] = (qv, scale)
        self.chosen[v.name] = scale

    def is_float_activation(self, v: Value | None) -> bool:
        return (v is not None and not v.is_const and v.type is not None
                and np.issubdtype(np.dtype(v.type.dtype), np.floating))

    def _sole_consumer(self, v: Value) -> Node | None:
        uses = self.consumers.get(v, [])
        if len(uses) != 1 or id(v) in self.graph_outputs:
            return None
        return uses[0]

    def _folded_activation(self, y: Value, s_in) -> tuple[Value, object, tuple[int, int]]:
        """The value a requantisation of y writes, its scale and clip range: the output of the
        Relu / Clip that alone reads y (marked absorbed) when it folds, else y, full int8."""
        act = self._sole_consumer(y)
        if act is not None and act.outputs[0].name in self.planned:
            out_v = act.outputs[0]
            s_out = self.fit_output_scale(self.scale(out_v), s_in)
            rng = _activation_range(act, lambda real: self.to_int(real, s_out))
            if rng is not None:
                self.absorbed.add(id(act))
                return out_v, s_out, rng
        return y, self.fit_output_scale(self.scale(y), s_in), (INT8_MIN, INT8_MAX)

    # ---- the walk ----------------------------------------------------------------------------
    def run(self) -> None:
        for node in self.g.nodes:
            if id(node) in self.absorbed:
                continue
            handler = {"Conv": self._weight_op, "Gemm": self._weight_op,
                       "MatMul": self._weight_op, "Add": self._add, "Clip": self._clip,
                       **self.extra_handlers()}.get(
                node.op, self._pass_through if node.op in PASS_THROUGH else self._float)
            if not handler(node):
                self._float(node)
        self.outputs = [self.fl(v) for v in self.g.outputs]

    def extra_handlers(self) -> dict:
        """Ops only this format rewrites into integers (op -> handler)."""
        return {}

    def _float(self, node: Node) -> bool:
        """Keep the node in float; inputs are dequantised where they exist only as integers."""
        self.nodes.append(Node(node.op, node.name, [self.fl(v) for v in node.inputs],
                               list(node.outputs), dict(node.attrs)))
        for v in node.outputs:
            self.fmap[id(v)] = v
        return True

    def _requantize(self, node: Node, acc: Value, acc_scale, y: Value) -> None:
        """Requantize the int32 accumulator of `node` into the int8 value standing for y (or
        for the Relu / Clip that follows it, folded into the clip range)."""
        out_v, s_out, (lo, hi) = self._folded_activation(y, acc_scale)
        axis = 1 if node.op == "Conv" else -1
        qv = self.emit_requantize(f"{node.name}/requant", node.name, acc, acc_scale, s_out,
                                  f"{out_v.name}_q", lo, hi, axis)
        self._set_q(out_v, qv, s_out)

    def _weight_scales(self, w: np.ndarray, channel_axis: int):
        """Scale of a weight tensor: one, or a vector with one per output channel."""
        if not self.per_channel:
            # max |w| = max(max w, -min w), exactly (NaN in either), without an |w| copy
            return self.scale_for(max(float(w.max()), -float(w.min())) if w.size else 0.0,
                                  WEIGHT_QMAX)
        axes = tuple(a for a in range(w.ndim) if a != channel_axis)
        maxima = np.max(np.abs(w), axis=axes) if w.size else np.zeros(w.shape[channel_axis])
        return np.array([self.scale_for(float(m), WEIGHT_QMAX) for m in maxima])

    def _weight_op(self, node: Node) -> bool:
        x, w = node.inputs[0], node.input(1)
        if node.op == "MatMul" and self.is_float_activation(x) and self.is_float_activation(w):
            return self._activation_matmul(node)
        if not self.is_float_activation(x) or w is None or not w.is_const:
            return False
        if node.op == "MatMul" and w.const.ndim != 2:
            return False
        if node.input(2) is not None and not node.input(2).is_const:
            return False
        attrs = dict(node.attrs)
        # Float32 weights stay float32 where the rewriter widens them exactly itself (the
        # power-of-two quantiser: max and min are exact in either width, and quantize_weights
        # multiplies in float64); Gemm's alpha is folded in float64 here.
        wt = (w.const if self.widens_weights and node.op != "Gemm" and w.const.dtype == np.float32
              else w.const.astype(np.float64))
        bias = node.input(2).const.astype(np.float64) if node.input(2) is not None else None
        y = node.outputs[0]
        if node.op == "MatMul" and bias is None:
            # A Linear over tokens exports as MatMul then Add of its bias: the bias goes into
            # the int32 accumulator, as a conv's does.
            add, bias = self._bias_add(y, wt.shape[1])
            if add is not None:
                self.absorbed.add(id(add))
                y = add.outputs[0]
        if node.op == "Gemm":
            # alpha and beta are folded into the constants: integer Gemm is alpha = beta = 1.
            wt = wt * float(attrs.pop("alpha", 1.0))
            if bias is not None:
                bias = bias * float(attrs.get("beta", 1.0))
            attrs.pop("beta", None)
        # Output channels: axis 0 of a conv weight, N of a (possibly transposed) matrix.
        ch_axis = 0 if node.op == "Conv" or (node.op == "Gemm" and attrs.get("transB", 0)) else 1
        xq, sx = self.q(x)
        sw = self._weight_scales(wt, ch_axis)
        shape = [1] * wt.ndim
        shape[ch_axis] = -1
        wq = self.quantize_weights(wt, sw if np.ndim(sw) == 0 else sw.reshape(shape))
        s_acc = self.accumulator_scale(sx, sw)  # scalar or per-channel vector
        inputs = [xq, self._const(f"{w.name}_q", wq)]
        if bias is not None:
            b_name = node.input(2).name if node.input(2) is not None else f"{node.name}.bias"
            inputs.append(self._const(f"{b_name}_q", self._quantize_bias(node, bias, s_acc)))
        acc = self._emit(node.op, node.name, inputs, f"{y.name}_acc", replaces=True, **attrs)
        self._requantize(node, acc, s_acc, y)
        return True

    def _bias_add(self, y: Value, features: int) -> tuple[Node | None, np.ndarray | None]:
        """The Add of a constant bias (one value per feature, broadcast over the rows) that
        alone reads MatMul output `y`, and the bias; else (None, None)."""
        add = self._sole_consumer(y)
        if add is None or add.op != "Add":
            return None, None
        c = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
        if c is None or not c.is_const or c.const.size != features or \
                c.const.shape[-1:] != (features,) or add.outputs[0].name not in self.planned:
            return None, None
        return add, c.const.reshape(features).astype(np.float64)

    def _activation_matmul(self, node: Node) -> bool:
        """MatMul of two activations (attention's Q.K^T and A.V): both int8 at their own
        scales, the int32 product at the product of the scales, requantised like a conv."""
        (aq, sa), (bq, sb) = self.q(node.inputs[0]), self.q(node.inputs[1])
        y = node.outputs[0]
        acc = self._emit("MatMul", node.name, [aq, bq], f"{y.name}_acc", replaces=True)
        self._requantize(node, acc, self.accumulator_scale(sa, sb), y)
        return True

    def _quantize_bias(self, node: Node, bias: np.ndarray, s_acc) -> np.ndarray:
        """Bias in int32 at the accumulator's scale (added before requantisation)."""
        if np.ndim(s_acc) != 0 and bias.ndim == 0:
            bias = np.broadcast_to(bias, np.shape(s_acc))
        bq, at = self.quantize_bias(bias, s_acc)
        if np.any(np.abs(bq.astype(np.int64)) == INT32_MAX) or np.any(bq == INT32_MIN):
            warnings.warn(f"quantize: {node.op} '{node.name}': bias saturates int32 at {at}",
                          stacklevel=4)
        return bq

    def _add(self, node: Node) -> bool:
        a, b = node.inputs
        if not (self.is_float_activation(a) and self.is_float_activation(b)):
            return False
        (aq, sa), (bq, sb) = self.q(a), self.q(b)
        out_v, s_out, (lo, hi) = self._folded_activation(node.outputs[0], np.array([sa, sb]))
        qv = self.emit_add(node, aq, sa, bq, sb, s_out, f"{out_v.name}_q", lo, hi)
        self._set_q(out_v, qv, s_out)
        return True

    def _clip(self, node: Node) -> bool:
        x = node.inputs[0]
        if id(x) not in self.qmap:
            return False
        xq, s = self.qmap[id(x)]
        rng = _activation_range(node, lambda real: self.to_int(real, s))
        if rng is None:
            return False
        # A clip of integers at their own scale: a requantisation by 1 (shift 0) in any format.
        qv = self._emit("Requantize", node.name, [xq], f"{node.outputs[0].name}_q",
                        replaces=True, shift=0, lo=rng[0], hi=rng[1])
        self._set_q(node.outputs[0], qv, s)
        return True

    def _pass_through(self, node: Node) -> bool:
        data = list(node.inputs) if node.op == "Concat" else [node.inputs[0]]
        if not all(id(v) in self.qmap for v in data):
            return False
        if any(self.consumers.get(v) or id(v) in self.graph_outputs for v in node.outputs[1:]):
            return False  # MaxPool's Indices output is used: keep the float op
        if node.op == "Pad" and not _zero_pad(node):
            return False
        ints = [self.qmap[id(v)] for v in data]
        s = ints[0][1]
        for _, si in ints[1:]:
            s = self.coarser(s, si)
        if node.op == "Concat":
            ints = [(qv if si == s else self.emit_align(f"{node.name}/align{i}", qv, si, s), s)
                    for i, (qv, si) in enumerate(ints)]
        rest = [self.fl(v) for v in node.inputs[len(data):]]
        y = node.outputs[0]
        out = self._emit(node.op, node.name, [qv for qv, _ in ints] + rest, f"{y.name}_q",
                         replaces=True, **node.attrs)
        self._set_q(y, out, s)
        return True


class _Pow2Rewriter(_Rewriter):
    """Power-of-two scales, held as fractional bits f (real = q * 2**-f): every change of
    scale is a shift."""
    widens_weights = True     # quantize_weights takes float32 weights and computes in float64

    @staticmethod
    def scale_for(max_abs: float, qmax: int = QMAX) -> int:
        return frac_bits_for(max_abs, qmax)

    @staticmethod
    def coarser(a: int, b: int) -> int:
        return min(a, b)

    def result(self, graph: Graph) -> QuantizedGraph:
        return QuantizedGraph(graph, frac_bits=self.chosen)

    def to_int(self, real: float, scale: int) -> float:
        return math.ldexp(real, scale)

    def accumulator_scale(self, a, b):
        return a + b

    def quantize_value(self, v: Value, fv: Value, scale: int) -> Value:
        return self._emit("QuantizeP2", f"{v.name}/quant", [fv], f"{v.name}_q", frac_bits=scale)

    def dequantize_value(self, v: Value, qv: Value, scale: int) -> Value:
        # The float value itself never enters the new graph, so its name is free to reuse
        # (graph outputs must keep their names).
        return self._emit("DequantizeP2", f"{v.name}/dequant", [qv], v.name, out_is_own=True,
                          frac_bits=scale, dtype=v.type.dtype)

    def quantize_weights(self, w: np.ndarray, scale) -> np.ndarray:
        if w.dtype not in (np.float32, np.float64) or np.isnan(w).any():
            return quantize_p2(w, frac_bits=scale, rounding="half_up", lo=-WEIGHT_QMAX,
                               hi=WEIGHT_QMAX, dtype="int8")
        # quantize_p2's arithmetic step for step (float64(x) * 2**f, + 0.5, floor, clip,
        # cast), in place on one float64 array instead of a fresh one per step: the same values.
        factor = np.ldexp(1.0, np.asarray(scale).astype(np.int32))
        if np.ndim(factor) == 0 and w.flags.c_contiguous and w.size > _CHUNK:
            # one scale: in cache-sized pieces of the flattened tensor into the int8 result
            flat, out = w.reshape(-1), np.empty(w.shape, np.int8)
            dst, v = out.reshape(-1), np.empty(_CHUNK, np.float64)
            for i in range(0, flat.size, _CHUNK):
                n = min(_CHUNK, flat.size - i)
                u = v[:n]
                np.multiply(flat[i:i + n], factor, out=u, dtype=np.float64)
                np.add(u, 0.5, out=u)
                np.floor(u, out=u)
                np.clip(u, -WEIGHT_QMAX, WEIGHT_QMAX, out=u)
                dst[i:i + n] = u
            return out
        v = np.multiply(w, factor, dtype=np.float64)
        np.add(v, 0.5, out=v)
        np.floor(v, out=v)
        np.clip(v, -WEIGHT_QMAX, WEIGHT_QMAX, out=v)
        return v.astype("int8")

    def quantize_bias(self, bias: np.ndarray, scale) -> tuple[np.ndarray, str]:
        bq = quantize_p2(bias, frac_bits=scale, rounding="half_up", lo=INT32_MIN,
                         hi=INT32_MAX, dtype="int32")
        return bq, f"{np.max(scale)} fractional bits"

    def emit_requantize(self, name, base, acc, acc_scale, out_scale, out_name, lo, hi, axis):
        if np.ndim(acc_scale) == 0:
            return self._emit("Requantize", name, [acc], out_name,
                              shift=int(acc_scale) - out_scale, lo=lo, hi=hi)
        shifts = self._const(f"{base}.shifts",
                             (np.asarray(acc_scale) - out_scale).astype(np.int32))
        return self._emit("Requantize", name, [acc, shifts], out_name, axis=axis, lo=lo, hi=hi)

    def emit_add(self, node, aq, sa, bq, sb, s_out, out_name, lo, hi):
        common = max(sa, sb)  # the finer operand's fraction: aligning to it is exact
        return self._emit("QAdd", node.name, [aq, bq], out_name, replaces=True,
                          shift_a=common - sa, shift_b=common - sb, out_shift=common - s_out,
                          lo=lo, hi=hi)

    def emit_align(self, name, qv, scale, target):
        return self._emit("Requantize", name, [qv], f"{qv.name}_aligned", shift=scale - target)


class _MultiplierRewriter(_Rewriter):
    """Any positive float32 scale s (real = q * s): a change of scale by the ratio r is an
    integer multiplier m and a right shift s with m * 2**-s ~= r (ops.quantized
    .multiplier_shift)."""

    @staticmethod
    def scale_for(max_abs: float, qmax: int = QMAX) -> float:
        if not math.isfinite(max_abs):
            raise InputError(f"calibration saw a non-finite value ({max_abs}); check the inputs")
        # float32, so that QuantizeLinear's scale constant and the multipliers (computed from
        # these very numbers) agree exactly. A tensor that is all zeros can take any scale.
        return float(np.float32(max_abs / qmax)) if max_abs > 0 else 1.0

    @staticmethod
    def coarser(a: float, b: float) -> float:
        return max(a, b)

    def result(self, graph: Graph) -> QuantizedGraph:
        return QuantizedGraph(graph, scales=self.chosen)

    def to_int(self, real: float, scale: float) -> float:
        return real / scale

    def accumulator_scale(self, a, b):
        return a * b

    def _scale_pair(self, v: Value, scale: float, dtype: str) -> list[Value]:
        return [self._const(f"{v.name}_scale", np.asarray(scale, dtype)),
                self._const(f"{v.name}_zero_point", np.zeros((), np.int8))]

    def quantize_value(self, v: Value, fv: Value, scale: float) -> Value:
        return self._emit("QuantizeLinear", f"{v.name}/quant",
                          [fv] + self._scale_pair(v, scale, "float32"), f"{v.name}_q")

    def dequantize_value(self, v: Value, qv: Value, scale: float) -> Value:
        # DequantizeLinear's output has its scale's type: give the scale the value's float
        # type (exact, the scale is a float32). The float value itself never enters the new
        # graph, so its name is free to reuse (graph outputs must keep their names).
        return self._emit("DequantizeLinear", f"{v.name}/dequant",
                          [qv] + self._scale_pair(v, scale, v.type.dtype), v.name,
                          out_is_own=True)

    def quantize_weights(self, w: np.ndarray, scale) -> np.ndarray:
        return np.clip(np.rint(w / scale), -WEIGHT_QMAX, WEIGHT_QMAX).astype(np.int8)

    def quantize_bias(self, bias: np.ndarray, scale) -> tuple[np.ndarray, str]:
        bq = np.clip(np.rint(bias / scale), INT32_MIN, INT32_MAX).astype(np.int32)
        return bq, f"scale {np.min(scale):.3g}"

    def fit_output_scale(self, s_out: float, s_in) -> float:
        # The largest multiplier at shift 0 bounds the ratio s_in / s_out. Only an output
        # almost constant at 0 (max|y| tiny next to its inputs') asks for more; then the
        # coarser scale loses nothing the calibration saw.
        need = float(np.max(s_in)) / MAX_MULTIPLIER
        return s_out if s_out >= need else float(np.nextafter(np.float32(need), np.inf))

    def emit_requantize(self, name, base, acc, acc_scale, out_scale, out_name, lo, hi, axis):
        m, s = multiplier_shift(np.asarray(acc_scale, np.float64) / out_scale)
        if m.ndim == 0:
            return self._emit("RequantizeMul", name, [acc], out_name, multiplier=int(m),
                              shift=int(s), lo=lo, hi=hi)
        inputs = [acc, self._const(f"{base}.multipliers", m.astype(np.int32)),
                  self._const(f"{base}.shifts", s.astype(np.int32))]
        return self._emit("RequantizeMul", name, inputs, out_name, axis=axis, lo=lo, hi=hi)

    def emit_add(self, node, aq, sa, bq, sb, s_out, out_name, lo, hi):
        (mul_a, mul_b), (shift, _) = multiplier_shift([sa / s_out, sb / s_out], common=True)
        return self._emit("QAddMul", node.name, [aq, bq], out_name, replaces=True,
                          mul_a=int(mul_a), mul_b=int(mul_b), shift=int(shift), lo=lo, hi=hi)

    def emit_align(self, name, qv, scale, target):
        m, s = multiplier_shift(scale / target)
        return self._emit("RequantizeMul", name, [qv], f"{qv.name}_aligned",
                          multiplier=int(m), shift=int(s))

    def extra_handlers(self) -> dict:
        # Dividing by the window is a multiplier: average pooling stays integer here, where
        # a power-of-two format could divide exactly only by windows of 2**k elements.
        return {"AveragePool": self._average_pool, "GlobalAveragePool": self._average_pool,
                "LRN": self._lrn}

    def _lrn(self, node: Node) -> bool:
        """LRN of an int8 map -> QLrn: the divisor (bias + alpha/size * sum x^2)^beta is a
        function of the integer square sum, tabulated at LRN_LUT_ENTRIES points (as NVDLA's
        CDP does) and scaled so the table's largest entry is 2**15 - 1; the multiplier then
        carries s_x * (largest 1/divisor) / s_y."""
        x = node.inputs[0]
        if id(x) not in self.qmap or x.type is None or x.type.rank < 3:
            return False
        a = resolve_attrs(node)
        size, alpha, beta, bias = int(a["size"]), float(a["alpha"]), float(a["beta"]), \
            float(a["bias"])
        xq, sx = self.qmap[id(x)]
        entries = LRN_LUT_ENTRIES - 1
        shift = max(0, math.ceil(math.log2(size * 128 * 128 / entries)))
        square_sums = np.arange(LRN_LUT_ENTRIES, dtype=np.float64) * 2.0 ** shift
        with np.errstate(all="ignore"):
            factor = (bias + alpha / size * sx * sx * square_sums) ** -beta
        if not np.all(np.isfinite(factor)) or factor.max() <= 0:
            return False            # a degenerate LRN (bias 0 at zero input): keep it float
        top = float(factor.max())
        lut = np.rint(factor / top * MAX_MULTIPLIER).astype(np.int32)
        y = node.outputs[0]
        s_y = self.fit_output_scale(self.scale(y), sx * top / MAX_MULTIPLIER)
        m, s = multiplier_shift(sx * top / (s_y * MAX_MULTIPLIER))
        qv = self._emit("QLrn", node.name, [xq, self._const(f"{node.name}.lut", lut)],
                        f"{y.name}_q", replaces=True, size=size, lut_shift=shift,
                        multiplier=int(m), shift=int(s))
        self._set_q(y, qv, s_y)
        return True

    def _average_pool(self, node: Node) -> bool:
        """AveragePool / GlobalAveragePool of an int8 map -> SumPool (int32 window sums)
        then RequantizeMul by s_x / (window * s_y). Only where the divisor is the same for
        every window: no padding, or padding counted (count_include_pad), no ceil_mode."""
        x = node.inputs[0]
        if id(x) not in self.qmap or x.type is None or x.type.rank != 4:
            return False
        if node.op == "GlobalAveragePool":
            kernel, strides, pads = list(x.type.shape[2:]), None, None
        else:
            a = node.attrs
            if a.get("ceil_mode", 0) or a.get("auto_pad", "NOTSET") != "NOTSET" or \
                    any(d != 1 for d in a.get("dilations") or [1, 1]) or \
                    (any(a.get("pads") or [0]) and not a.get("count_include_pad", 0)):
                return False
            kernel, strides, pads = list(a["kernel_shape"]), a.get("strides"), a.get("pads")
        xq, sx = self.qmap[id(x)]
        acc = self._emit("SumPool", node.name, [xq], f"{node.outputs[0].name}_acc",
                         replaces=True, kernel_shape=kernel, strides=strides, pads=pads)
        self._requantize(node, acc, sx / float(np.prod(kernel)), node.outputs[0])
        return True


_REWRITERS: dict[str, type[_Rewriter]] = {"pow2": _Pow2Rewriter,
                                          "multiplier": _MultiplierRewriter}


def _zero_pad(node: Node) -> bool:
    """A constant-mode Pad whose pad value is 0 (which is 0 at every scale)."""
    if node.attrs.get("mode", "constant") != "constant":
        return False
    v = node.input(2)
    return v is None or (v.is_const and not np.any(v.const))

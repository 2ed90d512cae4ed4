"""quantize: float Graph -> integer Graph with int8 tensors and power-of-two scales.

Pipeline (docs/quantization.md has the number format and every op's exact semantics):
 1. fold BatchNormalization into the preceding Conv (quantise the folded weights, once);
 2. calibrate: run the float graph on the samples, take max|x| of every value, and give each
    value the largest fractional bits f with max|x| * 2**f <= 127;
 3. give Concat inputs one shared scale (so concatenation stays a plain copy);
 4. rewrite node by node:
      graph input                -> QuantizeP2
      Conv / Gemm / MatMul with constant weights (a MatMul's following Add of a constant
      per-feature bias taken in as its bias)
                                 -> the same op on int8 x, int8 W, int32 bias (at f_x + f_w),
                                    then Requantize ("<name>/requant") with a following
                                    Relu / Clip folded into its clip range
      MatMul of two activations  -> the same on int8 a, int8 b (at f_a + f_b), Requantize
      Add of two activations     -> QAdd (alignment shifts), Relu / Clip folded in
      MaxPool, Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Identity, Relu, Pad(0),
      GlobalMaxPool, Concat      -> unchanged on the integer tensor (exact on integers)
      Clip                       -> Requantize with shift 0 and the clip range
      anything else              -> stays float: DequantizeP2 before, QuantizeP2 where an
                                    integer consumer needs the result again
      graph outputs              -> DequantizeP2, keeping the output names.
Node names follow the float graph ("conv1" stays "conv1", its requantisation is
"conv1/requant") because placement reports are read against the model the user exported.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Graph, Node, Value, constant
from ..ops.quantized import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, quantize_p2
from .calibrate import Samples, calibrate, frac_bits_for, sample_batches
from .fold_batchnorm import fold_batchnorm
from .infer_shapes import infer_shapes

# Ops that are exact on integer tensors without any rescaling: they select, move or compare
# elements (and max(x, 0) commutes with a positive scale), so the output keeps the input's
# fractional bits. Only input 0 (all inputs for Concat) is a data tensor.
PASS_THROUGH = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                "Identity", "Relu", "GlobalMaxPool", "Concat", "Pad"}
WEIGHT_QMAX = 127  # symmetric weights: -128 is never used, so negation cannot overflow


@dataclass(slots=True)
class QuantizedGraph:
    """The integer graph plus the fractional bits chosen for each float value name (the int8
    tensor standing for value v holds round(v * 2**frac_bits[v]))."""
    graph: Graph
    frac_bits: dict[str, int] = field(default_factory=dict)


def quantize(graph: Graph, calibration_inputs: Samples = None, *, per_channel: bool = False,
             scales: str = "pow2", num_random: int = 4, seed: int = 0) -> Graph:
    """Post-training int8 quantisation with power-of-two scales (see module docstring).

    calibration_inputs: None (random data, with a warning), a dict name -> array, a list of
    such dicts, or for single-input graphs an array split along its leading axis into batches.
    per_channel: one weight scale per output channel (Requantize then takes a shift vector);
    a target that can only shift by an immediate wants per_channel=False."""
    return quantize_with_info(graph, calibration_inputs, per_channel=per_channel,
                              scales=scales, num_random=num_random, seed=seed).graph


def quantize_with_info(graph: Graph, calibration_inputs: Samples = None, *,
                       per_channel: bool = False, scales: str = "pow2", num_random: int = 4,
                       seed: int = 0) -> QuantizedGraph:
    """quantize(), also returning the fractional bits chosen per value."""
    if scales != "pow2":
        raise NotImplementedError(f"quantize: scales={scales!r} is not implemented yet")
    if any(v.type is None for v in graph.values() if not v.is_const):
        graph = infer_shapes(graph)
    g = fold_batchnorm(graph)
    batches = sample_batches(g, calibration_inputs, num_random=num_random, seed=seed)
    maxima = calibrate(g, batches)
    fracs = {name: frac_bits_for(m) for name, m in maxima.items()}
    _share_concat_scales(g, fracs)
    rw = _Rewriter(g, fracs, per_channel)
    rw.run()
    out = Graph(rw.nodes, g.inputs, rw.outputs, name=g.name)
    return QuantizedGraph(infer_shapes(out), rw.chosen)


def _share_concat_scales(g: Graph, fracs: dict[str, int]) -> None:
    """Lower the fractional bits of every Concat input (and the pass-through chain that feeds
    it) to the Concat output's, so the inputs arrive with one scale and need no realignment.
    The output's max is the largest input max, so this is the input scale with most range."""
    producers = g.producers()
    for node in g.nodes:
        if node.op != "Concat" or node.outputs[0].name not in fracs:
            continue
        target = fracs[node.outputs[0].name]
        for v in node.inputs:
            while v is not None and v.name in fracs:
                fracs[v.name] = min(fracs[v.name], target)
                p = producers.get(v)
                if p is None or p.op not in PASS_THROUGH or p.op == "Concat":
                    break
                v = p.inputs[0]


def _activation_range(node: Node | None, frac: int) -> tuple[int, int] | None:
    """The int8 clip range a Relu / Clip node becomes at `frac` bits, or None if `node` is
    not a foldable activation. Bounds round inwards so the result never leaves [min, max]."""
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
                x = math.ldexp(float(v.const.reshape(())), frac)
                q = math.ceil(x) if i == 1 else math.floor(x)
                bounds.append(max(INT8_MIN, min(INT8_MAX, q)))
        lo, hi = bounds
        return (lo, hi) if lo <= hi else None
    return None


class _Rewriter:
    """Walks the float graph once, emitting integer nodes. `qmap` maps a float value to the
    integer Value standing for it (with its fractional bits); `fmap` to a float Value in the
    new graph. Either is filled on demand (QuantizeP2 / DequantizeP2)."""

    def __init__(self, g: Graph, fracs: dict[str, int], per_channel: bool):
        self.g, self.fracs, self.per_channel = g, fracs, per_channel
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.chosen: dict[str, int] = {}
        self.qmap: dict[int, tuple[Value, int]] = {}
        self.fmap: dict[int, Value] = {id(v): v for v in g.inputs}
        self.consumers = g.consumers()
        self.graph_outputs = {id(v) for v in g.outputs}
        self.taken = {v.name for v in g.values()} | {n.name for n in g.nodes}
        self.absorbed: set[int] = set()  # activation nodes folded into a requantisation

    # ---- naming and emitting -----------------------------------------------------------------
    def _name(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

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
    def frac(self, v: Value) -> int:
        if v.name not in self.fracs:
            raise ShapeError(f"value {v.name!r} was not seen during calibration")
        return self.fracs[v.name]

    def q(self, v: Value) -> tuple[Value, int]:
        """The int8 Value for float value v, quantising the float one if needed."""
        if id(v) in self.qmap:
            return self.qmap[id(v)]
        if v.is_const:
            raise ShapeError(f"constant {v.name!r} used as an activation is not quantised")
        f = self.frac(v)
        qv = self._emit("QuantizeP2", f"{v.name}/quant", [self.fl(v)], f"{v.name}_q",
                        frac_bits=f)
        self._set_q(v, qv, f)
        return qv, f

    def fl(self, v: Value | None) -> Value | None:
        """The float (or non-float, untouched) Value for v, dequantising if needed."""
        if v is None or v.is_const:
            return v
        if id(v) in self.fmap:
            return self.fmap[id(v)]
        qv, f = self.qmap[id(v)]
        # The float value itself never enters the new graph, so its name is free to reuse
        # (graph outputs must keep their names).
        out = self._emit("DequantizeP2", f"{v.name}/dequant", [qv], v.name, out_is_own=True,
                         frac_bits=f, dtype=v.type.dtype)
        self.fmap[id(v)] = out
        return out

    def _set_q(self, v: Value, qv: Value, f: int) -> None:
        self.qmap[id(v)] = (qv, f)
        self.chosen[v.name] = f

    def is_float_activation(self, v: Value | None) -> bool:
        return (v is not None and not v.is_const and v.type is not None
                and np.issubdtype(np.dtype(v.type.dtype), np.floating))

    def _sole_consumer(self, v: Value) -> Node | None:
        uses = self.consumers.get(v, [])
        if len(uses) != 1 or id(v) in self.graph_outputs:
            return None
        return uses[0]

    # ---- the walk ----------------------------------------------------------------------------
    def run(self) -> None:
        for node in self.g.nodes:
            if id(node) in self.absorbed:
                continue
            handler = {"Conv": self._weight_op, "Gemm": self._weight_op,
                       "MatMul": self._weight_op, "Add": self._add, "Clip": self._clip}.get(
                node.op, self._pass_through if node.op in PASS_THROUGH else self._float)
            if not handler(node):
                self._float(node)
        self.outputs = [self.fl(v) for v in self.g.outputs]

    def _float(self, node: Node) -> bool:
        """Keep the node in float; inputs are dequantised where they exist only as integers."""
        self.nodes.append(Node(node.op, node.name, [self.fl(v) for v in node.inputs],
                               list(node.outputs), dict(node.attrs)))
        for v in node.outputs:
            self.fmap[id(v)] = v
        return True

    def _requantize(self, node: Node, acc: Value, acc_frac, y: Value) -> None:
        """Requantize the int32 accumulator of `node` into the int8 value standing for y (or
        for the Relu / Clip that follows it, folded into the clip range)."""
        act = self._sole_consumer(y)
        out_v = act.outputs[0] if act is not None else y
        f_out = self.frac(out_v) if act is not None and out_v.name in self.fracs else None
        rng = _activation_range(act, f_out) if f_out is not None else None
        if rng is None:
            out_v, f_out, rng = y, self.frac(y), (INT8_MIN, INT8_MAX)
        else:
            self.absorbed.add(id(act))
        lo, hi = rng
        axis = 1 if node.op == "Conv" else -1
        name = f"{node.name}/requant"
        if np.ndim(acc_frac) == 0:
            qv = self._emit("Requantize", name, [acc], f"{out_v.name}_q",
                            shift=int(acc_frac) - f_out, lo=lo, hi=hi)
        else:
            shifts = self._const(f"{node.name}.shifts",
                                 (np.asarray(acc_frac) - f_out).astype(np.int32))
            qv = self._emit("Requantize", name, [acc, shifts], f"{out_v.name}_q", axis=axis,
                            lo=lo, hi=hi)
        self._set_q(out_v, qv, f_out)

    def _weight_fracs(self, w: np.ndarray, channel_axis: int):
        """Fractional bits of a weight tensor: one int, or one per output channel."""
        if not self.per_channel:
            return frac_bits_for(float(np.max(np.abs(w))) if w.size else 0.0, WEIGHT_QMAX)
        axes = tuple(a for a in range(w.ndim) if a != channel_axis)
        maxima = np.max(np.abs(w), axis=axes) if w.size else np.zeros(w.shape[channel_axis])
        return np.array([frac_bits_for(float(m), WEIGHT_QMAX) for m in maxima], np.int64)

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
        wt = w.const.astype(np.float64)
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
        xq, fx = self.q(x)
        fw = self._weight_fracs(wt, ch_axis)
        shape = [1] * wt.ndim
        shape[ch_axis] = -1
        fw_b = fw if np.ndim(fw) == 0 else fw.reshape(shape)
        wq = quantize_p2(wt, frac_bits=fw_b, rounding="half_up", lo=-WEIGHT_QMAX,
                         hi=WEIGHT_QMAX, dtype="int8")
        f_acc = fx + fw  # int or per-channel vector
        inputs = [xq, self._const(f"{w.name}_q", wq)]
        if bias is not None:
            b_name = node.input(2).name if node.input(2) is not None else f"{node.name}.bias"
            inputs.append(self._const(f"{b_name}_q", self._quantize_bias(node, bias, f_acc)))
        acc = self._emit(node.op, node.name, inputs, f"{y.name}_acc", replaces=True, **attrs)
        self._requantize(node, acc, f_acc, y)
        return True

    def _bias_add(self, y: Value, features: int) -> tuple[Node | None, np.ndarray | None]:
        """The Add of a constant bias (one value per feature, broadcast over the rows) that
        alone reads MatMul output `y`, and the bias; else (None, None)."""
        add = self._sole_consumer(y)
        if add is None or add.op != "Add":
            return None, None
        c = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
        if c is None or not c.is_const or c.const.size != features or \
                c.const.shape[-1:] != (features,) or add.outputs[0].name not in self.fracs:
            return None, None
        return add, c.const.reshape(features).astype(np.float64)

    def _activation_matmul(self, node: Node) -> bool:
        """MatMul of two activations (attention's Q.K^T and A.V): both int8 at their own
        fractional bits, the int32 product at their sum, requantised like a conv."""
        (aq, fa), (bq, fb) = self.q(node.inputs[0]), self.q(node.inputs[1])
        y = node.outputs[0]
        acc = self._emit("MatMul", node.name, [aq, bq], f"{y.name}_acc", replaces=True)
        self._requantize(node, acc, fa + fb, y)
        return True

    def _quantize_bias(self, node: Node, bias: np.ndarray, f_acc) -> np.ndarray:
        """Bias in int32 at the accumulator's fractional bits (added before the shift)."""
        if np.ndim(f_acc) != 0 and bias.ndim == 0:
            bias = np.broadcast_to(bias, np.shape(f_acc))
        bq = quantize_p2(bias, frac_bits=f_acc, rounding="half_up", lo=INT32_MIN, hi=INT32_MAX,
                         dtype="int32")
        if np.any(np.abs(bq.astype(np.int64)) == INT32_MAX) or np.any(bq == INT32_MIN):
            warnings.warn(f"quantize: {node.op} '{node.name}': bias saturates int32 at "
                          f"{np.max(f_acc)} fractional bits", stacklevel=4)
        return bq

    def _add(self, node: Node) -> bool:
        a, b = node.inputs
        if not (self.is_float_activation(a) and self.is_float_activation(b)):
            return False
        (aq, fa), (bq, fb) = self.q(a), self.q(b)
        y = node.outputs[0]
        act = self._sole_consumer(y)
        out_v = act.outputs[0] if act is not None else y
        rng = (_activation_range(act, self.frac(out_v))
               if act is not None and out_v.name in self.fracs else None)
        if rng is None:
            out_v, rng = y, (INT8_MIN, INT8_MAX)
        else:
            self.absorbed.add(id(act))
        fo = self.frac(out_v)
        common = max(fa, fb)
        qv = self._emit("QAdd", node.name, [aq, bq], f"{out_v.name}_q", replaces=True,
                        shift_a=common - fa,
                        shift_b=common - fb, out_shift=common - fo, lo=rng[0], hi=rng[1])
        self._set_q(out_v, qv, fo)
        return True

    def _clip(self, node: Node) -> bool:
        x = node.inputs[0]
        if id(x) not in self.qmap:
            return False
        xq, f = self.qmap[id(x)]
        rng = _activation_range(node, f)
        if rng is None:
            return False
        qv = self._emit("Requantize", node.name, [xq], f"{node.outputs[0].name}_q",
                        replaces=True, shift=0, lo=rng[0], hi=rng[1])
        self._set_q(node.outputs[0], qv, f)
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
        f = min(fr for _, fr in ints)
        if node.op == "Concat":
            ints = [(self._align(node, i, qv, fr, f), f) for i, (qv, fr) in enumerate(ints)]
        rest = [self.fl(v) for v in node.inputs[len(data):]]
        y = node.outputs[0]
        out = self._emit(node.op, node.name, [qv for qv, _ in ints] + rest, f"{y.name}_q",
                         replaces=True, **node.attrs)
        self._set_q(y, out, f)
        return True

    def _align(self, node: Node, i: int, qv: Value, frac: int, target: int) -> Value:
        if frac == target:
            return qv
        return self._emit("Requantize", f"{node.name}/align{i}", [qv], f"{qv.name}_aligned",
                          shift=frac - target)


def _zero_pad(node: Node) -> bool:
    """A constant-mode Pad whose pad value is 0 (which is 0 at every scale)."""
    if node.attrs.get("mode", "constant") != "constant":
        return False
    v = node.input(2)
    return v is None or (v.is_const and not np.any(v.const))

"""Import already-quantised ONNX models (QDQ form, QLinearConv) into retarget's integer ops.

ONNX writes quantisation as QuantizeLinear / DequantizeLinear pairs around float ops (QDQ) or
as QLinearConv. `convert_quantized(graph, scales=...)` rewrites those patterns into integer
ops in one of three number formats; the pattern matching is shared, only the nodes built for a
requantisation, a quantise / dequantise and an add differ by format.

scales="pow2" (shifts only; every scale a power of two, every zero point 0): these are exactly
retarget's fixed-point ops: QuantizeLinear(s = 2**-f) is QuantizeP2(f) with half-to-even
rounding, DequantizeLinear is DequantizeP2, and
    QuantizeLinear(Conv(DQ(x), DQ(W), DQ(B)), s_y)   [optionally with a Relu before the Q]
is the integer Conv(x, W, B) followed by Requantize(shift = f_x + f_w - f_y). The rewrite
covers Conv, Gemm, MatMul and QLinearConv; other ops between a DQ and a Q (Add included) stay
float between DequantizeP2 / QuantizeP2, which is still exact. Any other scale is an error
naming the node ("scale 0.0123 is not a power of two").

scales="multiplier" (any positive scale, zero points 0; NVDLA-style multiply then shift): the
same Conv / Gemm / MatMul / QLinearConv patterns become the integer op plus
RequantizeMul(m, s) with m * 2**-s ~= s_x * s_w / s_y (`multiplier_shift`: a 15-bit multiplier;
per-axis weight scales give per-channel "<node>.multipliers" / "<node>.shifts" constants), and
    QuantizeLinear(Add(DQ(a), DQ(b)) [-> Relu], s_y)
becomes QAddMul(a, b) with mul_a / 2**shift ~= s_a / s_y, mul_b / 2**shift ~= s_b / s_y. The
QuantizeLinear / DequantizeLinear nodes left at float <-> int boundaries stay as they are (the
format's quantise / dequantise, ONNX semantics, run on the CPU); a constant's DQ is folded.
This is an approximation of the file: ONNX requantises in float ((acc * s_x*s_w) / s_y rounded
half to even) where the integer graph multiplies by a rounded multiplier and shifts, so an
output can differ by one LSB where the float value lies close to a rounding boundary, and such
a difference can grow through later layers. `qdq_error` measures it against onnxruntime's own
result on the same file.

Rounding: ONNX rounds half to even, so by default the requantisation nodes use
rounding="half_even" (with pow2 scales the converted graph then equals the ONNX model bit for
bit). Hardware requantisation rounds half up (add then shift); `rounding="half_up"` produces
that form instead, which differs from the file's semantics by one LSB exactly on ties.
Documented in docs/quantization.md.

Non-zero zero points (asymmetric or uint8 quantisation) are an error naming the node in
these two formats: their integer ops are symmetric.

scales="onnxruntime" (any scale, u8 / s8 activations with any zero point, as onnxruntime's
quantize_static writes them): the groups onnxruntime fuses into QLinearConv, QGemm,
QLinearAdd and QLinearGlobalAveragePool become the integer op on x - z_x plus RequantizeOrt,
QLinearAddOrt, GlobalAveragePoolOrt (ops/quantized_ort.py), computing exactly what
onnxruntime's x86 kernels compute; the groups it leaves float (some in s8 models) stay float.
docs/quantization.md, "onnxruntime's own arithmetic".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import onnx

from ..errors import InputError, RetargetError, UnsupportedOpError, node_context
from ..ir.graph import Graph, Node, Value, constant
from ..ops.quantized import (ACCUMULATING_OPS, INT8_MAX, INT8_MIN, ROUNDINGS, dequantize_linear,
                             multiplier_shift)
from ..passes.dce import eliminate_dead_code_inplace
from ..passes.infer_shapes import infer_shapes
from ..passes.verify import verify
from .onnx import from_onnx_model, import_model, read_onnx
from ..passes.simplify import simplify as _simplify
from ..ops.reference import run_graph
from .ort_check import matching_output, ort_integer_arithmetic, run_onnxruntime
from ..ops.quantized_ort import global_average_pool_scale, ort_requant_scale

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv")
SCALES = ("pow2", "multiplier", "onnxruntime")


@dataclass(frozen=True, slots=True)
class _Scale:
    """A validated quantisation parameter: its value (a float, or a per-axis vector), and for
    the pow2 format its fractional bits (int or per-axis vector; None otherwise)."""
    frac: int | np.ndarray | None
    axis: int
    value: float | np.ndarray = 0.0
    zero_point: int = 0          # per-tensor zero point (the onnxruntime format only)
    dtype: str = "int8"          # the quantised type

    @property
    def per_axis(self) -> bool:
        return np.ndim(self.value) != 0


def _frac_of(node: Node, scale: np.ndarray) -> int | np.ndarray:
    """-log2(scale) for a power-of-two scale (per element), else a clear error."""
    s = np.asarray(scale, np.float64).reshape(-1)
    fracs = []
    for v in s:
        m, e = math.frexp(float(v)) if v > 0 and math.isfinite(v) else (0.0, 0)
        if m != 0.5:
            raise UnsupportedOpError(
                f"{node_context(node)}: scale {float(v):.6g} is not a power of two; retarget's "
                f"integer path requires power-of-two scales (requantisation is a shift)")
        fracs.append(1 - e)  # v = 0.5 * 2**e = 2**(e-1), frac = -(e-1)
    return fracs[0] if np.ndim(scale) == 0 or np.size(scale) == 1 else np.array(fracs, np.int64)


def _value_of(node: Node, scale: np.ndarray) -> float | np.ndarray:
    """The scale as a float (per tensor) or float64 vector (per axis); positive and finite."""
    s = np.asarray(scale, np.float64)
    if s.size == 0 or not np.all(np.isfinite(s)) or s.min() <= 0:
        raise UnsupportedOpError(f"{node_context(node)}: scale {s.ravel()[:4].tolist()} must be "
                                 f"positive and finite")
    return float(s.reshape(-1)[0]) if s.ndim == 0 or s.size == 1 else s.reshape(-1)


def _check_zero_point(node: Node, zp: Value | None, allowed=("int8",)) -> None:
    if zp is None:
        return
    if not zp.is_const:
        raise UnsupportedOpError(f"{node_context(node)}: zero point {zp.name!r} must be a "
                                 f"constant")
    if zp.const.dtype.name not in allowed or np.any(zp.const != 0):
        raise UnsupportedOpError(
            f"{node_context(node)}: zero point {zp.const.ravel()[:4].tolist()} "
            f"({zp.const.dtype.name}); retarget's integer path needs symmetric "
            f"{'/'.join(allowed)} quantisation with zero point 0")


def _scale(node: Node, scale: Value, zp: Value | None, allowed=("int8",),
           scales: str = "pow2") -> _Scale:
    if not scale.is_const:
        raise UnsupportedOpError(f"{node_context(node)}: scale {scale.name!r} must be a constant")
    zero_point, dtype = 0, "int8"
    if scales == "onnxruntime" and zp is not None:
        # any zero point (asymmetric u8 / s8); per-axis zero points only where they are 0
        if not zp.is_const or zp.const.dtype.name not in allowed or (
                zp.const.size > 1 and np.any(zp.const != 0)):
            raise UnsupportedOpError(f"{node_context(node)}: zero point {zp.name!r} must be a "
                                     f"constant {'/'.join(allowed)}, per tensor unless 0")
        zero_point, dtype = int(zp.const.reshape(-1)[0]), zp.const.dtype.name
    else:
        _check_zero_point(node, zp, allowed)
    frac = _frac_of(node, scale.const) if scales == "pow2" else None
    return _Scale(frac, int(node.attrs.get("axis", 1)), _value_of(node, scale.const),
                  zero_point, dtype)


def convert_quantized(graph: Graph, *, rounding: str = "half_even", scales: str = "pow2") -> Graph:
    """Rewrite QDQ / QLinearConv nodes into retarget's integer ops: with `scales="pow2"`
    (power-of-two scales; shifts), `scales="multiplier"` (any scale; multiply and shift) or
    `scales="onnxruntime"` (onnxruntime's fused integer arithmetic, zero points included).

    Run it on the imported graph before constant folding (folding would turn the weights'
    DequantizeLinear into float constants and lose their integer form). Raises
    UnsupportedOpError naming the node for zero points that are not 0 (except with
    "onnxruntime") and, with "pow2", for scales that are not powers of two."""
    if rounding not in ROUNDINGS:
        raise InputError(f"rounding={rounding!r}; known: {', '.join(ROUNDINGS)}")
    if scales not in SCALES:
        raise InputError(f"scales={scales!r}; known: {', '.join(SCALES)}")
    g = graph.copy()
    lone = _lone_qdq_pairs(g)
    _sink_dequantize(g)
    g = infer_shapes(g)
    conv = {"pow2": _Pow2Converter, "multiplier": _MultiplierConverter,
            "onnxruntime": _OrtConverter}[scales](g, rounding, lone)
    for node in g.nodes:
        if node.op in QDQ_OPS:
            conv.validate(node)
    conv.run()
    out = Graph(conv.nodes, g.inputs, g.outputs, name=g.name)
    eliminate_dead_code_inplace(out)
    return infer_shapes(out)


# Ops that commute with a per-tensor DequantizeLinear of zero point 0 (they move, select or
# compare elements, and DQ is monotonic with DQ(0) = 0), so DQ can move after them.
SINKABLE = {"Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "MaxPool",
            "Relu", "GlobalMaxPool"}


def _lone_qdq_pairs(g: Graph) -> frozenset[str]:
    """Names of the QuantizeLinear outputs read by exactly one node, a DequantizeLinear with
    the same zero point that itself feeds exactly one node or graph output: the
    pairs onnxruntime's QDQS8ToU8Transformer turns from s8 into u8 before it fuses
    (qdq_s8_to_u8.cc: a Q with one output edge, to a DQ; that a DQ read by two ops counts as
    two edges is inferred, an earlier pass, EnsureUniqueDQForNodeUnit, copying shared DQs,
    and matches onnxruntime's optimised graphs of the test models). That decides which s8
    groups it runs as integer kernels."""
    consumers, outputs = g.consumers(), {id(v) for v in g.outputs}
    lone = set()
    for n in g.nodes:
        if n.op != "QuantizeLinear" or id(n.outputs[0]) in outputs:
            continue
        uses = consumers.get(n.outputs[0], [])
        if len(uses) != 1 or uses[0].op != "DequantizeLinear":
            continue
        dq_out = uses[0].outputs[0]
        if len(consumers.get(dq_out, [])) + (id(dq_out) in outputs) != 1:
            continue
        zq, zd = n.input(2), uses[0].input(2)
        if zq is not None and zd is not None and zq.is_const and zd.is_const and \
                zq.const.size == 1 and np.array_equal(zq.const, zd.const):
            lone.add(n.outputs[0].name)
    return frozenset(lone)


def _zero_point_is_zero(dq: Node) -> bool:
    zp = dq.input(2)
    return zp is None or (zp.is_const and not np.any(zp.const))


def _sink_dequantize(g: Graph) -> None:
    """Move activation DequantizeLinear nodes past SINKABLE ops (in place), so a Conv / Gemm /
    MatMul sees DQ directly on its input even when a Flatten or MaxPool sits between."""
    producers = g.producers()
    consumers = g.consumers()
    nodes: list[Node] = []
    for node in g.nodes:
        nodes.append(node)
        dq = producers.get(node.inputs[0]) if node.inputs else None
        if (node.op not in SINKABLE or dq is None or dq.op != "DequantizeLinear"
                or dq.inputs[0].is_const or not dq.inputs[1].is_const
                or dq.inputs[1].const.size != 1
                or (node.op == "Relu" and not _zero_point_is_zero(dq))
                or any(consumers.get(v) for v in node.outputs[1:])):
            continue
        y = node.outputs[0]
        t = Value(g.unique_name(f"{y.name}_int"))
        node.inputs = [dq.inputs[0]] + node.inputs[1:]
        node.outputs = [t]
        new_dq = Node("DequantizeLinear", g.unique_name(f"{node.name}/dequant"),
                      [t] + dq.inputs[1:], [y], dict(dq.attrs))
        nodes.append(new_dq)
        producers[y] = new_dq
        producers[t] = node
    g.nodes = nodes


class _Converter:
    """The pattern matching both formats share. A subclass builds the nodes: quantise /
    dequantise (`_quantize`, `_dequantize_activation`, `_fold_dequantize`), requantisation
    (`_requantize`), the element-wise add (`_add_node`), and says which biases fit
    (`_bias_fits`)."""
    scales = ""
    dtypes = ("int8",)          # the activation types the format takes
    add_dtypes = ("int8",)      # the operand types of the integer add

    def __init__(self, g: Graph, rounding: str, lone_pairs: frozenset[str] = frozenset()):
        self.g, self.rounding = g, rounding
        self.lone_pairs = lone_pairs          # see _lone_qdq_pairs
        self.producers = g.producers()
        self.consumers = g.consumers()
        self.outputs = {id(v) for v in g.outputs}
        self.scales_of: dict[int, _Scale] = {}  # id(Q/DQ node) -> its scale
        self.nodes: list[Node] = []
        self.absorbed: set[int] = set()

    def _scale(self, node: Node, scale: Value, zp: Value | None, allowed=None) -> _Scale:
        return _scale(node, scale, zp, self.dtypes if allowed is None else allowed, self.scales)

    def validate(self, node: Node) -> None:
        if node.op == "QLinearConv":
            self._scale(node, node.inputs[1], node.inputs[2])
            self._scale(node, node.inputs[4], node.inputs[5])
            self._scale(node, node.inputs[6], node.inputs[7])
            return
        x = node.inputs[0]
        allowed = self.dtypes + ("int32",) if node.op == "DequantizeLinear" else self.dtypes
        if node.op == "DequantizeLinear" and x.type is not None and x.type.dtype not in allowed:
            raise UnsupportedOpError(f"{node_context(node)}: input is {x.type.dtype}; retarget's "
                                     f"integer path takes {'/'.join(self.dtypes)} (and int32 "
                                     f"biases)")
        self.scales_of[id(node)] = self._scale(node, node.inputs[1], node.input(2), allowed)

    # ---- helpers -----------------------------------------------------------------------------
    def _dq(self, v: Value | None, *, const: bool) -> tuple[Node, _Scale] | None:
        """The DequantizeLinear producing v (of a constant or of an activation), if any."""
        p = self.producers.get(v) if v is not None else None
        if p is None or p.op != "DequantizeLinear" or p.inputs[0].is_const != const:
            return None
        return p, self.scales_of[id(p)]

    def _sole_consumer(self, v: Value) -> Node | None:
        uses = self.consumers.get(v, [])
        return uses[0] if len(uses) == 1 and id(v) not in self.outputs else None

    def _emit(self, op, name, inputs, outputs, **attrs) -> None:
        self.nodes.append(Node(op, name, list(inputs), list(outputs), attrs))

    # ---- the walk ----------------------------------------------------------------------------
    def run(self) -> None:
        for node in self.g.nodes:
            if id(node) in self.absorbed:
                continue
            if node.op in ACCUMULATING_OPS and self._linear(node):
                continue
            if node.op == "Add" and self._add(node):
                continue
            if node.op == "GlobalAveragePool" and self._global_average_pool(node):
                continue
            if node.op == "QLinearConv":
                self._qlinear_conv(node)
            elif node.op == "QuantizeLinear":
                self._quantize(node, self.scales_of[id(node)])
            elif node.op == "DequantizeLinear":
                s = self.scales_of[id(node)]
                if node.inputs[0].is_const:
                    # Fold a constant's dequantisation, so float consumers that are not
                    # rewritten read a constant.
                    self._fold_dequantize(node, s)
                else:
                    self._dequantize_activation(node, s)
            else:
                self.nodes.append(node)

    def _output_q(self, y: Value) -> tuple[Node | None, Node, _Scale] | None:
        """y -> [Relu ->] QuantizeLinear with a per-tensor scale: (relu, q, scale)."""
        c = self._sole_consumer(y)
        relu = None
        if c is not None and c.op == "Relu":
            relu, c = c, self._sole_consumer(c.outputs[0])
        if c is None or c.op != "QuantizeLinear" or self.scales_of[id(c)].per_axis:
            return None
        return relu, c, self.scales_of[id(c)]

    def _linear(self, node: Node) -> bool:
        """DQ(x), DQ(W)[, DQ(B)] -> Conv/Gemm/MatMul [-> Relu] -> Q  ==>  int op + requantise."""
        if node.op == "Gemm" and (node.attrs.get("alpha", 1.0) != 1.0
                                  or node.attrs.get("beta", 1.0) != 1.0):
            return False
        xq, wq = self._dq(node.inputs[0], const=False), self._dq(node.input(1), const=True)
        out = self._output_q(node.outputs[0])
        if xq is None or wq is None or out is None or xq[1].per_axis or \
                not self._fused(xq[0], out[1]):
            return False
        (_, sx), (wnode, sw) = xq, wq
        w_int = wnode.inputs[0].const
        ch_axis = 0 if node.op == "Conv" or (node.op == "Gemm" and node.attrs.get("transB", 0)) \
            else w_int.ndim - 1
        if (sw.per_axis and sw.axis % w_int.ndim != ch_axis) or sw.zero_point != 0:
            return False
        inputs = [self._accumulator_input(node, xq[0].inputs[0], sx), wnode.inputs[0]]
        b = node.input(2)
        if b is not None:
            bq = self._dq(b, const=True)
            if bq is None or bq[0].inputs[0].const.dtype != np.int32 or \
                    not self._bias_fits(bq[1], sx, sw):
                return False  # a float bias or one at another scale: leave the op float
            inputs.append(bq[0].inputs[0])
        relu, q, sy = out
        acc = Value(f"{node.outputs[0].name}_acc")
        self._emit(node.op, node.name, inputs, [acc], **node.attrs)
        self._requantize(node, acc, sx, sw, sy, relu is not None, q.outputs[0],
                         axis=1 if node.op == "Conv" else -1)
        self.absorbed.update(id(n) for n in (relu, q) if n is not None)
        return True

    def _qlinear_conv(self, node: Node) -> None:
        x, xs, xzp, w, ws, wzp, ys, yzp = node.inputs[:8]
        b = node.input(8)
        sx, sw, sy = (self._scale(node, s, z) for s, z in ((xs, xzp), (ws, wzp), (ys, yzp)))
        if not w.is_const:
            raise UnsupportedOpError(f"{node_context(node)}: weights must be constant")
        if sw.zero_point != 0:
            raise UnsupportedOpError(f"{node_context(node)}: weight zero point {sw.zero_point} "
                                     f"(only symmetric weights are supported)")
        acc = Value(f"{node.outputs[0].name}_acc")
        self._emit("Conv", node.name, [self._accumulator_input(node, x, sx), w] +
                   ([b] if b is not None else []), [acc], **node.attrs)
        self._requantize(node, acc, sx, sw, sy, False, node.outputs[0], axis=1)

    def _add(self, node: Node) -> bool:
        """DQ(a), DQ(b) (int8 activations, per-tensor) -> Add [-> Relu] -> Q  ==>  an integer
        add, where the format has one (`_add_node`)."""
        ops = [self._dq(v, const=False) for v in node.inputs[:2]]
        out = self._output_q(node.outputs[0])
        if out is None or any(o is None or o[1].per_axis or o[0].inputs[0].type is None
                              or o[0].inputs[0].type.dtype not in self.add_dtypes for o in ops):
            return False
        relu, q, sy = out
        if not self._add_node(node, [o[0].inputs[0] for o in ops], [o[1] for o in ops], sy,
                              relu is not None, q.outputs[0]):
            return False
        self.absorbed.update(id(n) for n in (relu, q) if n is not None)
        return True

    def _fused(self, dq: Node, q: Node) -> bool:
        """Whether the group from activation DequantizeLinear `dq` to QuantizeLinear `q` runs
        in integers in this format (all of them, except where a runtime leaves it float)."""
        return True

    def _accumulator_input(self, node: Node, x: Value, sx: _Scale) -> Value:
        """The integer operand an accumulating op reads for activation x (x - z_x where the
        format has zero points)."""
        return x

    def _global_average_pool(self, node: Node) -> bool:
        """DQ(x) -> GlobalAveragePool -> Q, where the format has an integer form of it."""
        return False

    # ---- what a format builds ------------------------------------------------------------------
    def _quantize(self, node: Node, s: _Scale) -> None:
        raise NotImplementedError

    def _dequantize_activation(self, node: Node, s: _Scale) -> None:
        raise NotImplementedError

    def _fold_dequantize(self, node: Node, s: _Scale) -> None:
        raise NotImplementedError

    def _bias_fits(self, sb: _Scale, sx: _Scale, sw: _Scale) -> bool:
        raise NotImplementedError

    def _requantize(self, node: Node, acc: Value, sx: _Scale, sw: _Scale, sy: _Scale,
                    relu: bool, y: Value, axis: int) -> None:
        raise NotImplementedError

    def _add_node(self, node: Node, xs: list[Value], ss: list[_Scale], sy: _Scale, relu: bool,
                  y: Value) -> bool:
        raise NotImplementedError


class _Pow2Converter(_Converter):
    """Power-of-two scales: QuantizeP2 / DequantizeP2, Requantize by a shift; Add stays float."""
    scales = "pow2"

    def _quantize(self, node, s):
        if s.per_axis:
            raise UnsupportedOpError(f"{node_context(node)}: per-axis QuantizeLinear of "
                                     f"an activation is not supported")
        self._emit("QuantizeP2", node.name, node.inputs[:1], node.outputs,
                   frac_bits=int(s.frac), rounding="half_even")

    def _fold_dequantize(self, node, s):
        # exact in float: int * 2**-f
        x, y = node.inputs[0], node.outputs[0]
        frac = s.frac
        if s.per_axis:
            shape = [1] * x.const.ndim
            shape[s.axis % x.const.ndim] = -1
            frac = np.asarray(frac).reshape(shape)
        y.const = (x.const.astype(np.float64) * np.ldexp(1.0, -np.asarray(frac))).astype(
            y.type.dtype if y.type is not None else np.float32)

    def _dequantize_activation(self, node, s):
        x, y = node.inputs[0], node.outputs[0]
        if s.per_axis:
            raise UnsupportedOpError(f"{node_context(node)}: per-axis DequantizeLinear of an "
                                     f"activation is not supported")
        self._emit("DequantizeP2", node.name, [x], [y], frac_bits=int(s.frac),
                   dtype=y.type.dtype if y.type is not None else "float32")

    def _bias_fits(self, sb, sx, sw):
        f_acc = sx.frac + sw.frac
        return np.array_equal(np.broadcast_to(sb.frac, np.shape(f_acc)),
                              np.broadcast_to(f_acc, np.shape(sb.frac)))

    def _requantize(self, node, acc, sx, sw, sy, relu, y, axis):
        shift = np.asarray(sx.frac + sw.frac) - sy.frac
        lo = 0 if relu else INT8_MIN
        name = f"{node.name}/requant"
        if shift.ndim == 0:
            self._emit("Requantize", name, [acc], [y], shift=int(shift), lo=lo, hi=INT8_MAX,
                       rounding=self.rounding)
        else:
            shifts = constant(f"{node.name}.shifts", shift.astype(np.int32))
            self._emit("Requantize", name, [acc, shifts], [y], axis=axis, lo=lo, hi=INT8_MAX,
                       rounding=self.rounding)

    def _add_node(self, node, xs, ss, sy, relu, y):
        return False  # the pow2 import keeps Add float between DequantizeP2 / QuantizeP2


# Relative difference between a bias scale and s_x * s_w that still counts as "the same":
# quantisers compute the product in float32 (2**-24 relative rounding).
BIAS_SCALE_RTOL = 1e-6


class _MultiplierConverter(_Converter):
    """Any scale: the int op + RequantizeMul, Add -> QAddMul; QuantizeLinear and activation
    DequantizeLinear stay (ONNX semantics) at float <-> int boundaries."""
    scales = "multiplier"

    def _quantize(self, node, s):
        self.nodes.append(node)

    def _dequantize_activation(self, node, s):
        self.nodes.append(node)

    def _fold_dequantize(self, node, s):
        # ONNX's own arithmetic (float32 product), so float consumers see what onnxruntime does
        x, y = node.inputs[0], node.outputs[0]
        zp = node.input(2)
        y.const = dequantize_linear(x.const, node.inputs[1].const,
                                    None if zp is None else zp.const,
                                    axis=int(node.attrs.get("axis", 1)), block_size=0)
        if y.type is not None:
            y.const = y.const.astype(y.type.dtype)

    def _bias_fits(self, sb, sx, sw):
        want = np.asarray(sx.value, np.float64) * np.asarray(sw.value, np.float64)
        have = np.asarray(sb.value, np.float64)
        try:
            have, want = np.broadcast_arrays(have, want)
        except ValueError:
            return False
        return bool(np.all(np.abs(have - want) <= BIAS_SCALE_RTOL * want))

    def _mul_shift(self, node, ratio, common=False):
        try:
            return multiplier_shift(ratio, common=common)
        except RetargetError as e:
            raise UnsupportedOpError(f"{node_context(node)}: {e}") from None

    def _requantize(self, node, acc, sx, sw, sy, relu, y, axis):
        ratio = sx.value * np.asarray(sw.value, np.float64) / sy.value
        m, s = self._mul_shift(node, ratio)
        lo = 0 if relu else INT8_MIN
        name = f"{node.name}/requant"
        if m.ndim == 0:
            self._emit("RequantizeMul", name, [acc], [y], multiplier=int(m), shift=int(s),
                       lo=lo, hi=INT8_MAX, rounding=self.rounding)
        else:
            ms = constant(f"{node.name}.multipliers", m.astype(np.int32))
            ss = constant(f"{node.name}.shifts", s.astype(np.int32))
            self._emit("RequantizeMul", name, [acc, ms, ss], [y], axis=axis, lo=lo,
                       hi=INT8_MAX, rounding=self.rounding)

    def _add_node(self, node, xs, ss, sy, relu, y):
        m, s = self._mul_shift(node, np.array([ss[0].value, ss[1].value]) / sy.value,
                               common=True)
        self._emit("QAddMul", node.name, xs, [y], mul_a=int(m[0]), mul_b=int(m[1]),
                   shift=int(s[0]), lo=0 if relu else INT8_MIN, hi=INT8_MAX,
                   rounding=self.rounding)
        return True


class _OrtConverter(_MultiplierConverter):
    """onnxruntime's fused integer arithmetic (ops/quantized_ort.py): u8 / s8 activations with
    any zero point, the integer op on x - z_x plus RequantizeOrt (float32 scale, round half to
    even), QLinearAddOrt for an add of two u8 activations, GlobalAveragePoolOrt, and a
    DequantizeLinear -> QuantizeLinear pair with the same parameters dropped (onnxruntime
    drops it around MaxPool, Reshape, ...). QuantizeLinear / DequantizeLinear at the float
    boundaries keep ONNX semantics (what onnxruntime's MLAS kernels compute too).

    Which groups run in integers is onnxruntime's choice, mirrored here: u8 groups always; an
    s8 group only where onnxruntime first turns its input's and output's Q -> DQ pairs into
    u8 (a QuantizeLinear read by one DequantizeLinear only, `_lone_qdq_pairs`), since its x86
    build does not fuse s8 activations (ConvNodeGroupSelector: int8 needs `int8_allowed`).
    The other s8 groups stay float here as there (DequantizeLinear, float op,
    QuantizeLinear): a float Add is exact to reproduce, a float Conv / Gemm is not (see
    docs/quantization.md)."""
    scales = "onnxruntime"
    dtypes = ("int8", "uint8")
    add_dtypes = ("int8", "uint8")

    def __init__(self, g: Graph, rounding: str, lone_pairs: frozenset[str] = frozenset()):
        super().__init__(g, rounding, lone_pairs)
        self.centred: dict[int, Value] = {}     # id(x) -> x - z_x, one for all ops reading x

    def _kernel_type(self, v: Value, s: _Scale) -> str:
        """The type onnxruntime's kernels see for activation v (the input of an activation
        DequantizeLinear): u8 for u8, and for s8 where its Q -> DQ pair is turned into u8."""
        if s.dtype == "uint8":
            return "uint8"
        while v.name not in self.lone_pairs:       # back through ops DQ was moved past
            p = self.producers.get(v)
            if p is None or p.op not in SINKABLE:
                return "int8"
            v = p.inputs[0]
        return "uint8"

    def _output_type(self, y: Value, s: _Scale) -> str:
        return "uint8" if s.dtype == "uint8" or y.name in self.lone_pairs else "int8"

    def _fused(self, dq, q):
        return self._kernel_type(dq.inputs[0], self.scales_of[id(dq)]) == "uint8" == \
            self._output_type(q.outputs[0], self.scales_of[id(q)])

    def _accumulator_input(self, node, x, sx):
        if sx.zero_point == 0:
            return x
        if id(x) in self.centred:
            return self.centred[id(x)]
        wide = Value(self.g.unique_name(f"{x.name}_i32"))
        self._emit("Cast", self.g.unique_name(f"{node.name}/int32"), [x], [wide], to=6)
        shifted = Value(self.g.unique_name(f"{x.name}_centred"))
        zp = constant(self.g.unique_name(f"{node.name}.x_zero_point"), np.int32(sx.zero_point))
        self._emit("Sub", self.g.unique_name(f"{node.name}/x_zero_point"), [wide, zp],
                   [shifted])
        self.centred[id(x)] = shifted
        return shifted

    def _quantize(self, node, s):
        dq = self.producers.get(node.inputs[0])
        if dq is not None and dq.op == "DequantizeLinear" and not dq.inputs[0].is_const:
            sd = self.scales_of[id(dq)]
            if (not s.per_axis and not sd.per_axis and sd.value == s.value
                    and (sd.zero_point, sd.dtype) == (s.zero_point, s.dtype)):
                self._emit("Identity", node.name, [dq.inputs[0]], node.outputs)
                return
        self.nodes.append(node)

    def _requantize(self, node, acc, sx, sw, sy, relu, y, axis):
        scale = ort_requant_scale(sx.value, sw.value, sy.value)
        info = np.iinfo(sy.dtype)
        # Relu before the QuantizeLinear: clamp at the zero point (onnxruntime removes the
        # Relu when that is the type's minimum, the form its quantiser writes)
        attrs = dict(zero_point=sy.zero_point, lo=max(info.min, sy.zero_point) if relu
                     else int(info.min), hi=int(info.max), dtype=sy.dtype)
        name = f"{node.name}/requant"
        if np.ndim(scale) == 0 or np.size(scale) == 1:
            self._emit("RequantizeOrt", name, [acc], [y], scale=float(np.reshape(scale, -1)[0]),
                       **attrs)
        else:
            scales = constant(f"{node.name}.scales", np.asarray(scale, np.float32))
            self._emit("RequantizeOrt", name, [acc, scales], [y], axis=axis, **attrs)

    def _add_node(self, node, xs, ss, sy, relu, y):
        info = np.iinfo(sy.dtype)
        shapes = [v.type.shape if v.type is not None else None for v in xs]
        if (relu and sy.zero_point != info.min) or None in shapes or \
                {ss[0].dtype, ss[1].dtype} != {sy.dtype} or (
                shapes[0] != shapes[1] and 1 not in (int(np.prod(shapes[0])),
                                                     int(np.prod(shapes[1])))):
            return False     # onnxruntime's QLinearAdd has no clamp and no general broadcast
        if {self._kernel_type(x, s) for x, s in zip(xs, ss)} | {self._output_type(y, sy)} != \
                {"uint8"}:
            return False     # onnxruntime keeps it float (see the class docstring)
        self._emit("QLinearAddOrt", node.name, xs, [y], a_scale=float(ss[0].value),
                   a_zero_point=ss[0].zero_point, b_scale=float(ss[1].value),
                   b_zero_point=ss[1].zero_point, scale=float(sy.value),
                   zero_point=sy.zero_point, dtype=sy.dtype, kernel="uint8")
        return True

    def _global_average_pool(self, node):
        xq = self._dq(node.inputs[0], const=False)
        out = self._output_q(node.outputs[0])
        if xq is None or out is None or out[0] is not None or xq[1].per_axis or \
                not self._fused(xq[0], out[1]):
            return False
        x, sx, (_, q, sy) = xq[0].inputs[0], xq[1], out
        if x.type is None or x.type.rank < 3 or sx.dtype != sy.dtype:
            return False
        count = int(np.prod(x.type.shape[2:]))
        self._emit("GlobalAveragePoolOrt", node.name, [x], q.outputs,
                   scale=float(global_average_pool_scale(sx.value, sy.value, count)),
                   input_zero_point=sx.zero_point, zero_point=sy.zero_point, dtype=sy.dtype)
        self.absorbed.add(id(q))
        return True


def load_quantized(model, input_shapes=None, *, rounding: str = "half_even",
                   simplify: bool = True, scales: str = "pow2") -> Graph:
    """Read a QDQ / QLinearConv ONNX model (path or ModelProto) into an integer Graph:
    import without folding, convert_quantized (`scales`: "pow2", "multiplier" or
    "onnxruntime"), then simplify."""
    proto = model if isinstance(model, onnx.ModelProto) else read_onnx(model)
    graph = from_onnx_model(proto, input_shapes)
    graph.toposort()
    verify(graph, context="after ONNX import")
    g = convert_quantized(infer_shapes(graph), rounding=rounding, scales=scales)
    if simplify:
        g = _simplify(g)
    return g


def load_quantized_as_float(model, input_shapes=None) -> Graph:
    """The float network a QDQ model quantises: every activation `QuantizeLinear ->
    DequantizeLinear` pair dropped (the DQ's consumers read the Q's float input), every
    constant's DequantizeLinear folded (the dequantised weights `(w - z) s` and biases). It
    takes and returns the same float tensors as the file. This is what a target whose number
    format cannot hold the file's scales or zero points re-quantises (compiler._load_model).
    QLinear* operators have no float form here and are refused naming the node."""
    proto = model if isinstance(model, onnx.ModelProto) else read_onnx(model)
    graph = from_onnx_model(proto, input_shapes)
    graph.toposort()
    producers = graph.producers()
    nodes, folded, nonnegative = [], {}, set()
    for n in graph.nodes:
        if n.op.startswith("QLinear"):
            raise UnsupportedOpError(f"{node_context(n)}: no float form of {n.op} here; only "
                                     f"QDQ models (QuantizeLinear / DequantizeLinear around "
                                     f"float ops) can be re-quantised")
        q = producers.get(n.inputs[0]) if n.op == "DequantizeLinear" else None
        if n.op == "DequantizeLinear" and all(v.is_const for v in n.inputs if v is not None):
            zp = n.input(2)
            folded[n.outputs[0]] = constant(n.outputs[0].name, dequantize_linear(
                n.inputs[0].const, n.inputs[1].const, None if zp is None else zp.const,
                axis=n.attrs.get("axis", 1), block_size=n.attrs.get("block_size", 0)))
        elif q is not None and q.op == "QuantizeLinear":
            nodes.append(_float_pair(n, q, q.inputs[0] in nonnegative))
        else:
            nodes.append(n)
        last = nodes[-1] if nodes else None
        if last is not None and last.outputs[0] is n.outputs[0] and (
                last.op == "Relu" or (last.op in KEEPS_SIGN and last.inputs[0] in nonnegative)):
            nonnegative.add(last.outputs[0])
    for n in nodes:
        n.inputs = [folded.get(v, v) if v is not None else None for v in n.inputs]
    out = Graph(nodes, graph.inputs, graph.outputs, name=graph.name)
    eliminate_dead_code_inplace(out)
    verify(out, context="after dropping the QDQ pairs")
    left = [n.name for n in out.nodes if n.op in QDQ_OPS and not n.inputs[0].is_const]
    if left:
        raise UnsupportedOpError(f"QDQ model: {', '.join(left[:4])}: a QuantizeLinear / "
                                 f"DequantizeLinear on an activation outside a Q -> DQ pair "
                                 f"has no float form")
    return _simplify(infer_shapes(out))


# Ops whose output is non-negative when their (first) input is: a Relu the float form would
# put after them is redundant.
KEEPS_SIGN = frozenset({"Identity", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                        "MaxPool", "GlobalMaxPool", "AveragePool", "GlobalAveragePool"})


def _float_pair(dq: Node, q: Node, nonnegative: bool) -> Node:
    """The float op an activation Q -> DQ pair stands for once its rounding is dropped:
    quantize_static removes the Relus it can, leaving a pair whose range starts at 0 (zero
    point at the type's minimum) to clamp there, so such a pair is a Relu, unless its input is
    already known to be non-negative; any other is the identity (its saturation is the range
    the re-quantised network calibrates for itself)."""
    zp = q.input(2)
    z = 0 if zp is None else int(np.asarray(zp.const).reshape(-1)[0])
    lowest = 0 if zp is not None and zp.const.dtype == np.uint8 else INT8_MIN
    op = "Relu" if z == lowest and not nonnegative else "Identity"
    return Node(op, dq.name, [q.inputs[0]], list(dq.outputs))


# ---- how far a converted graph is from onnxruntime's run of the file ----------------------------
@dataclass(frozen=True, slots=True)
class QdqError:
    """One output's difference between retarget's reference run of the converted graph and
    onnxruntime's run of the QDQ file, over every element of every input given.

    `step` is the output's quantisation step (the scale of the DequantizeLinear that produces
    it, or 1 for an integer output); the errors are then in steps (LSBs). None: the output is
    not quantised and the errors are absolute. `mismatch` is the fraction of elements that
    differ (by half a step or more; for a float output, beyond float rounding)."""
    name: str
    max_error: float
    mean_error: float
    mismatch: float
    elements: int
    step: float | None
    note: str = ""          # why part of the error may be the runtime's (see OrtIntegerArithmetic)

    @property
    def max_lsb(self) -> int | None:
        """The largest difference in output LSBs (None for a float output)."""
        return None if self.step is None else int(round(self.max_error))

    def __str__(self) -> str:
        unit = "LSB (output steps)" if self.step is not None else "(absolute)"
        return (f"{self.name}: max |error| {self.max_error:.3g} {unit}, mean "
                f"{self.mean_error:.3g}, {100 * self.mismatch:.3g} % of {self.elements} "
                f"elements differ")


def _initializer(model: onnx.ModelProto, name: str) -> np.ndarray | None:
    from onnx import numpy_helper
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output[0] == name:
            for a in n.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
    return None


def _output_step(model: onnx.ModelProto, name: str, shape) -> np.ndarray | float | None:
    """The quantisation step of graph output `name`: the producing DequantizeLinear's scale
    (per-axis broadcast to `shape`), 1 for an integer output, None for a float one."""
    for o in model.graph.output:
        if o.name == name and o.type.tensor_type.elem_type in (
                onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT32):
            return 1.0
    prod = next((n for n in model.graph.node if name in n.output), None)
    if prod is None or prod.op_type != "DequantizeLinear":
        return None
    s = _initializer(model, prod.input[1])
    if s is None:
        return None
    if s.size == 1:
        return float(s.reshape(-1)[0])
    axis = next((a.i for a in prod.attribute if a.name == "axis"), 1) % len(shape)
    bshape = [1] * len(shape)
    bshape[axis] = -1
    return s.astype(np.float64).reshape(bshape)


def output_grid(model: onnx.ModelProto, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The integer grid graph output `name` lies on: the (scale, zero point) constants of the
    DequantizeLinear producing it (zero point typed u8 / s8; int8 0 when absent), or None
    for an output that is not dequantised."""
    prod = next((n for n in model.graph.node if name in n.output), None)
    if prod is None or prod.op_type != "DequantizeLinear":
        return None
    s = _initializer(model, prod.input[1])
    z = _initializer(model, prod.input[2]) if len(prod.input) > 2 and prod.input[2] else \
        np.zeros((), np.int8)
    return None if s is None or z is None else (s, z)


AGAINST = ("onnxruntime", "reference")


def qdq_error(model, graph: Graph, inputs: Mapping[str, np.ndarray] |
              Sequence[Mapping[str, np.ndarray]], against: str = "onnxruntime"
              ) -> dict[str, QdqError]:
    """Per graph output, the error of `graph` (a converted QDQ model, run on retarget's
    reference executor) against a run of `model` (the QDQ file: path or ModelProto) on the
    same `inputs` (one name -> array dict, or a list of them): max and mean absolute error in
    units of the output's quantisation step (absolute where the output is not quantised) and
    the fraction of elements that differ.

    `against="onnxruntime"` runs the file in onnxruntime: the number to quote for
    scales="multiplier" ("error against onnxruntime's own result on the same file"); with
    power-of-two scales and half-even rounding it is 0 where onnxruntime's integer kernels are
    exact (see OrtIntegerArithmetic: not on AVX2 without VNNI). `against="reference"` runs the
    file's own ONNX semantics (QuantizeLinear / DequantizeLinear around float ops) on
    retarget's reference executor instead, which gives the same numbers on every CPU."""
    if against not in AGAINST:
        raise InputError(f"qdq_error: against={against!r} is not one of {', '.join(AGAINST)}")
    proto = model if isinstance(model, onnx.ModelProto) else read_onnx(model)
    note = ""
    if against == "onnxruntime":
        arith = ort_integer_arithmetic()
        note = "" if arith.exact_for(proto) else str(arith)

        def run_file(feed):
            return run_onnxruntime(proto, feed)
    else:
        file_graph = import_model(proto, simplify=False)

        def run_file(feed):
            return run_graph(file_graph, feed)
    batches = [inputs] if isinstance(inputs, Mapping) else list(inputs)
    acc: dict[str, list] = {}
    for feed in batches:
        want = run_file(feed)
        got = run_graph(graph, feed)
        for name, a in got.items():
            b = matching_output(want, name, a.shape)
            step = _output_step(proto, name, b.shape)
            d = np.abs(a.astype(np.float64) - b.astype(np.float64))
            if step is not None:
                d = d / step
                differs = d >= 0.5
            else:
                differs = ~np.isclose(a.astype(np.float64), b.astype(np.float64),
                                      rtol=1e-5, atol=1e-6 * float(np.abs(b).max(initial=1.0)))
            acc.setdefault(name, (step, []))[1].append((d, differs))
    out = {}
    for name, (step, parts) in acc.items():
        d = np.concatenate([p[0].ravel() for p in parts])
        differs = np.concatenate([p[1].ravel() for p in parts])
        n = int(d.size)
        out[name] = QdqError(name, float(d.max()) if n else 0.0, float(d.mean()) if n else 0.0,
                             float(differs.mean()) if n else 0.0, n,
                             None if step is None else float(np.max(step)), note)
    return out


def float_accumulations(graph: Graph) -> list[str]:
    """The Conv / Gemm / MatMul nodes of a converted graph that still compute in float (for
    scales="onnxruntime": the groups onnxruntime itself leaves float)."""
    return [n.name for n in graph.nodes if n.op in ACCUMULATING_OPS and n.inputs[0].type
            is not None and np.dtype(n.inputs[0].type.dtype).kind == "f"]


def format_qdq_error(errors: Mapping[str, QdqError], against: str = "onnxruntime",
                     graph: Graph | None = None) -> str:
    """The errors of `qdq_error(..., against)`, one line each. Where onnxruntime's integer
    kernels are not exact for this model on this CPU (QdqError.note), a note says so: part of
    the error is then onnxruntime's. With the converted `graph`, a note names its float
    convolutions: float sums round differently in onnxruntime and here."""
    head = ("error against the file's ONNX semantics on the reference executor:"
            if against == "reference" else "error against onnxruntime's result on the same file:")
    notes = sorted({e.note for e in errors.values() if e.note})
    floats = [] if graph is None or against == "reference" else float_accumulations(graph)
    return "\n".join([head] + [f"  {e}" for e in errors.values()] +
                     [f"  note: {n}" for n in notes] +
                     ([f"  note: {len(floats)} Conv / Gemm / MatMul run in float32 (as "
                       f"onnxruntime runs them; it sums in another order, so a value near a "
                       f"rounding tie of the next QuantizeLinear can differ by one LSB, and "
                       f"that propagates): {', '.join(floats[:4])}"
                       f"{', ...' if len(floats) > 4 else ''}"] if floats else []))

"""Import already-quantised ONNX models (QDQ form, QLinearConv) into retarget's integer ops.

ONNX writes quantisation as QuantizeLinear / DequantizeLinear pairs around float ops (QDQ) or
as QLinearConv. When every scale is a power of two and every zero point is 0, these are exactly
retarget's fixed-point ops: QuantizeLinear(s = 2**-f) is QuantizeP2(f) with half-to-even
rounding, DequantizeLinear is DequantizeP2, and
    QuantizeLinear(Conv(DQ(x), DQ(W), DQ(B)), s_y)   [optionally with a Relu before the Q]
is the integer Conv(x, W, B) followed by Requantize(shift = f_x + f_w - f_y). `convert_quantized`
rewrites those patterns (Conv, Gemm, MatMul, QLinearConv); other ops between a DQ and a Q stay
float between DequantizeP2 / QuantizeP2, which is still exact.

Rounding: ONNX rounds half to even, so by default the Requantize nodes use rounding="half_even"
and the converted graph equals the ONNX model bit for bit. Hardware requantisation rounds half
up (add then shift); `rounding="half_up"` produces that form instead, which differs from the
file's semantics by one LSB exactly on ties. Documented in docs/quantization.md.

Any other scale is an error naming the node ("scale 0.0123 is not a power of two"): retarget's
integer path has shifts only, no multipliers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import UnsupportedOpError, node_context
from ..ir.graph import Graph, Node, Value, constant
from ..ops.quantized import ACCUMULATING_OPS, INT8_MAX, INT8_MIN, ROUNDINGS
from ..passes.dce import eliminate_dead_code_inplace
from ..passes.infer_shapes import infer_shapes

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv")


@dataclass(frozen=True, slots=True)
class _Scale:
    """A validated quantisation parameter: fractional bits (int or per-axis vector)."""
    frac: int | np.ndarray
    axis: int

    @property
    def per_axis(self) -> bool:
        return np.ndim(self.frac) != 0


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


def _scale(node: Node, scale: Value, zp: Value | None, allowed=("int8",)) -> _Scale:
    if not scale.is_const:
        raise UnsupportedOpError(f"{node_context(node)}: scale {scale.name!r} must be a constant")
    _check_zero_point(node, zp, allowed)
    return _Scale(_frac_of(node, scale.const), int(node.attrs.get("axis", 1)))


def convert_quantized(graph: Graph, *, rounding: str = "half_even", scales: str = "pow2") -> Graph:
    """Rewrite QDQ / QLinearConv nodes with power-of-two scales into retarget's integer ops.

    Run it on the imported graph before constant folding (folding would turn the weights'
    DequantizeLinear into float constants and lose their integer form). Raises
    UnsupportedOpError naming the node for scales that are not powers of two or zero points
    that are not 0."""
    if rounding not in ROUNDINGS:
        raise UnsupportedOpError(f"rounding={rounding!r}; known: {', '.join(ROUNDINGS)}")
    if scales != "pow2":
        raise NotImplementedError(f"convert_quantized: scales={scales!r} is not implemented yet")
    g = graph.copy()
    _sink_dequantize(g)
    g = infer_shapes(g)
    conv = _Converter(g, rounding)
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
    def __init__(self, g: Graph, rounding: str):
        self.g, self.rounding = g, rounding
        self.producers = g.producers()
        self.consumers = g.consumers()
        self.outputs = {id(v) for v in g.outputs}
        self.scales: dict[int, _Scale] = {}  # id(Q/DQ node) -> its scale
        self.nodes: list[Node] = []
        self.absorbed: set[int] = set()

    def validate(self, node: Node) -> None:
        if node.op == "QLinearConv":
            _scale(node, node.inputs[1], node.inputs[2])
            _scale(node, node.inputs[4], node.inputs[5])
            _scale(node, node.inputs[6], node.inputs[7])
            return
        x = node.inputs[0]
        allowed = ("int8", "int32") if node.op == "DequantizeLinear" else ("int8",)
        if node.op == "DequantizeLinear" and x.type is not None and x.type.dtype not in allowed:
            raise UnsupportedOpError(f"{node_context(node)}: input is {x.type.dtype}; retarget's "
                                     f"integer path takes int8 (and int32 biases)")
        self.scales[id(node)] = _scale(node, node.inputs[1], node.input(2), allowed)

    # ---- helpers -----------------------------------------------------------------------------
    def _dq(self, v: Value | None, *, const: bool) -> tuple[Node, _Scale] | None:
        """The DequantizeLinear producing v (of a constant or of an activation), if any."""
        p = self.producers.get(v) if v is not None else None
        if p is None or p.op != "DequantizeLinear" or p.inputs[0].is_const != const:
            return None
        return p, self.scales[id(p)]

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
            if node.op == "QLinearConv":
                self._qlinear_conv(node)
            elif node.op == "QuantizeLinear":
                s = self.scales[id(node)]
                if s.per_axis:
                    raise UnsupportedOpError(f"{node_context(node)}: per-axis QuantizeLinear of "
                                             f"an activation is not supported")
                self._emit("QuantizeP2", node.name, node.inputs[:1], node.outputs,
                           frac_bits=int(s.frac), rounding="half_even")
            elif node.op == "DequantizeLinear":
                self._dequantize(node)
            else:
                self.nodes.append(node)

    def _dequantize(self, node: Node) -> None:
        s, x, y = self.scales[id(node)], node.inputs[0], node.outputs[0]
        if x.is_const:
            # A constant's dequantisation is exact in float (int * 2**-f): fold it, so float
            # consumers that are not rewritten read a constant.
            frac = s.frac
            if s.per_axis:
                shape = [1] * x.const.ndim
                shape[s.axis % x.const.ndim] = -1
                frac = np.asarray(frac).reshape(shape)
            y.const = (x.const.astype(np.float64) * np.ldexp(1.0, -np.asarray(frac))).astype(
                y.type.dtype if y.type is not None else np.float32)
            return
        if s.per_axis:
            raise UnsupportedOpError(f"{node_context(node)}: per-axis DequantizeLinear of an "
                                     f"activation is not supported")
        self._emit("DequantizeP2", node.name, [x], [y], frac_bits=int(s.frac),
                   dtype=y.type.dtype if y.type is not None else "float32")

    def _output_q(self, y: Value) -> tuple[Node | None, Node, _Scale] | None:
        """y -> [Relu ->] QuantizeLinear with a per-tensor scale: (relu, q, scale)."""
        c = self._sole_consumer(y)
        relu = None
        if c is not None and c.op == "Relu":
            relu, c = c, self._sole_consumer(c.outputs[0])
        if c is None or c.op != "QuantizeLinear" or self.scales[id(c)].per_axis:
            return None
        return relu, c, self.scales[id(c)]

    def _linear(self, node: Node) -> bool:
        """DQ(x), DQ(W)[, DQ(B)] -> Conv/Gemm/MatMul [-> Relu] -> Q  ==>  int op + Requantize."""
        if node.op == "Gemm" and (node.attrs.get("alpha", 1.0) != 1.0
                                  or node.attrs.get("beta", 1.0) != 1.0):
            return False
        xq, wq = self._dq(node.inputs[0], const=False), self._dq(node.input(1), const=True)
        out = self._output_q(node.outputs[0])
        if xq is None or wq is None or out is None or xq[1].per_axis:
            return False
        (_, sx), (wnode, sw) = xq, wq
        w_int = wnode.inputs[0].const
        ch_axis = 0 if node.op == "Conv" or (node.op == "Gemm" and node.attrs.get("transB", 0)) \
            else w_int.ndim - 1
        if sw.per_axis and sw.axis % w_int.ndim != ch_axis:
            return False
        f_acc = sx.frac + sw.frac
        inputs = [xq[0].inputs[0], wnode.inputs[0]]
        b = node.input(2)
        if b is not None:
            bq = self._dq(b, const=True)
            if bq is None or bq[0].inputs[0].const.dtype != np.int32 or \
                    not np.array_equal(np.broadcast_to(bq[1].frac, np.shape(f_acc)),
                                       np.broadcast_to(f_acc, np.shape(bq[1].frac))):
                return False  # a float bias or one at another scale: leave the op float
            inputs.append(bq[0].inputs[0])
        relu, q, sy = out
        acc = Value(f"{node.outputs[0].name}_acc")
        self._emit(node.op, node.name, inputs, [acc], **node.attrs)
        self._requantize(node, acc, f_acc, sy.frac, relu is not None, q.outputs[0],
                         axis=1 if node.op == "Conv" else -1)
        self.absorbed.update(id(n) for n in (relu, q) if n is not None)
        return True

    def _qlinear_conv(self, node: Node) -> None:
        x, xs, xzp, w, ws, wzp, ys, yzp = node.inputs[:8]
        b = node.input(8)
        sx, sw, sy = (_scale(node, s, z) for s, z in ((xs, xzp), (ws, wzp), (ys, yzp)))
        if not w.is_const:
            raise UnsupportedOpError(f"{node_context(node)}: weights must be constant")
        acc = Value(f"{node.outputs[0].name}_acc")
        self._emit("Conv", node.name, [x, w] + ([b] if b is not None else []), [acc],
                   **node.attrs)
        self._requantize(node, acc, sx.frac + sw.frac, sy.frac, False, node.outputs[0], axis=1)

    def _requantize(self, node: Node, acc: Value, f_acc, f_out: int, relu: bool, y: Value,
                    axis: int) -> None:
        shift = np.asarray(f_acc) - f_out
        lo = 0 if relu else INT8_MIN
        name = f"{node.name}/requant"
        if shift.ndim == 0:
            self._emit("Requantize", name, [acc], [y], shift=int(shift), lo=lo, hi=INT8_MAX,
                       rounding=self.rounding)
        else:
            shifts = constant(f"{node.name}.shifts", shift.astype(np.int32))
            self._emit("Requantize", name, [acc, shifts], [y], axis=axis, lo=lo, hi=INT8_MAX,
                       rounding=self.rounding)


def load_quantized(model, input_shapes=None, *, rounding: str = "half_even",
                   simplify: bool = True) -> Graph:
    """Read a QDQ / QLinearConv ONNX model (path or ModelProto) into an integer Graph:
    import without folding, convert_quantized, then simplify."""
    from ..ir.verify import verify
    from .onnx import from_onnx_model, read_onnx
    proto = model if isinstance(model, onnx.ModelProto) else read_onnx(model)
    graph = from_onnx_model(proto, input_shapes)
    graph.toposort()
    verify(graph, context="after ONNX import")
    g = convert_quantized(infer_shapes(graph), rounding=rounding)
    if simplify:
        from ..passes.simplify import simplify as _simplify
        g = _simplify(g)
    return g

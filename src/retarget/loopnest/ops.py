"""Graph ops lowered to loop nests: what the ahead-of-time C targets (`c`,
`sunway`) generate each layer's code from.

    kernel = lower_node(node)      # a loopnest Kernel, or None for a view op
    SUPPORTED_OPS                  # the ops lower_node handles

Contract
- The Kernel's input tensors are named after the node's input values (weights and biases
  included), its outputs after the node's output values, with their types' shapes and dtypes.
  Constant scalars (a Clip bound, an Add of one number) and constant integer operands (a
  Reshape shape, Slice starts, Resize scales, reduction axes) are baked into the nest as
  constants and indices: they are not kernel inputs.
- Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference Dropout) return None: their
  output is their input's bytes in row-major order, which the memory plan aliases.
- Anything else outside what is lowered here raises UnsupportedOpError naming the node, the op
  and what is not supported; the c target then leaves the node on the CPU reference.
- Only float tensors (float32, float64) are computed; integer ops stay on the CPU.

The shape of the nests, and why
- Every op is plain loops over its output. The leading loops whose iterations write disjoint
  output elements are the "independent" ones; the first of them with more than one iteration
  is marked parallel (with batch 1 that is the output-channel loop, not the batch loop), which
  is where the naive OpenACC-style schedule splits the work over threads. Independent loops of
  extent 1 are kept (indexing a size-1 dimension by its own variable is what lets the buffering
  pass see that a nest covers a whole tensor); reduction loops of extent 1 are dropped.
- Reductions (Conv, ConvTranspose, Gemm, MatMul, pooling, reductions, LRN) are an init nest
  over the output followed by a separate perfect nest with one accumulating Store
  (reduce="+" or "max"); post-processing (an average's division, ReduceL2's sqrt) is a third
  nest. That is the form swTVM's buffering algorithms (buffering.py) tile: the init nest
  storing a constant is folded into the accumulation's buffer.
- Padding is a Load with `fill`: 0 for convolutions and average pools, -inf for max pools
  (ceil_mode's overhang is the same fill). A load whose index can never leave its tensor gets
  no fill, so unpadded convolutions stay bufferable (buffering refuses padded loads).
- Softmax, LogSoftmax and BatchNormalization keep per-row / per-channel scalars in local
  tensors declared inside the parallel loop (the C printer gives each thread its own).

What the IR cannot say, and the workarounds here
- Indices are affine: there is no integer division or modulo. Nearest Resize maps output
  index o to floor-like functions of o; its index table is cut into affine pieces with a
  replica loop (x2 upsampling is out[2*i + r] = in[i], r in 0..1), one nest per combination
  of pieces. ConvTranspose would need i = (o + pad - k) / stride: it is written per output
  phase o = stride*q + r, where the contributing taps form an arithmetic progression and the
  input index is affine in q. AveragePool's divisor varies near the borders: the division nest
  is split into rectangles of constant divisor.
- Expressions cannot read a loop index as a value, so MaxPool's Indices output (and ArgMax)
  cannot be lowered.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import product
from typing import Callable, Iterable, Sequence

import numpy as np

from ..errors import RetargetError, ShapeError, UnsupportedOpError, node_context
from ..ir.graph import Node, Value
from ..ops.nn import conv_transpose_window, conv_window
from ..ops.pool import pool_window
from ..ops.registry import resolve_attrs
from ..ops.resize import nearest_index, resize_plan, source_coords
from .ir import (Affine, Binary, Const, Expr, Kernel, Load, Loop, Select, Stmt, Store, Tensor,
                 Unary, aff)
from .verify import verify_kernel

FLOAT_DTYPES = ("float32", "float64")
# dtypes a non-data operand (Pow's exponent, Clip bounds) may have when it is read as a tensor
OPERAND_DTYPES = FLOAT_DTYPES + ("int32", "int64")
# How many nests an op split into pieces (Resize, AveragePool's border rectangles) may use
# before the lowering gives up: past this the code is a pile of special cases.
MAX_PIECE_NESTS = 64

Axis = tuple[str, int]          # (loop variable, extent)


# ---- names and errors -----------------------------------------------------------------------
def c_name(text: str) -> str:
    """`text` as a C identifier: every other character becomes '_', and a leading digit (or
    nothing at all) gets a '_' prefix."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", text)
    return name if name and not name[0].isdigit() else f"_{name}"


def kernel_name(node: Node) -> str:
    """The kernel's name: the op and the node name, C-safe (the op keeps two nodes named alike
    in different ops apart)."""
    return c_name(f"{node.op}_{node.name}")


def _unsupported(node: Node, what: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"{node_context(node)}: {what}")


# ---- building kernels -----------------------------------------------------------------------
class _KernelBuilder:
    """Collects one node's kernel: the input tensors its statements actually read (in the
    node's input order), its outputs, and its local scalars."""

    def __init__(self, node: Node):
        self.node = node
        self._inputs: dict[str, Tensor] = {}
        self._locals: list[Tensor] = []

    def _typed(self, v: Value) -> Value:
        if v.type is None:
            raise ShapeError(f"{node_context(self.node)}: value {v.name!r} has no type (run "
                             "shape inference before lowering)")
        return v

    def require(self, values: Iterable[Value | None], dtypes=FLOAT_DTYPES) -> None:
        for v in values:
            if v is not None and self._typed(v).type.dtype not in dtypes:
                raise _unsupported(self.node, f"value {v.name!r} is {v.type}; the loop-nest "
                                              f"lowering computes {', '.join(dtypes)} only")

    def input(self, v: Value) -> Tensor:
        """The kernel parameter holding input value `v` (registered on first use)."""
        t = self._inputs.get(v.name)
        if t is None:
            ty = self._typed(v).type
            t = self._inputs[v.name] = Tensor(v.name, ty.shape, ty.dtype)
        return t

    def output(self, v: Value) -> Tensor:
        ty = self._typed(v).type
        return Tensor(v.name, ty.shape, ty.dtype)

    def local(self, base: str, dtype: str) -> Tensor:
        """A one-element local scalar, named apart from every value the node touches."""
        taken = {v.name for v in self.node.inputs + self.node.outputs if v is not None}
        taken |= {t.name for t in self._locals}
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        t = Tensor(name, (1,), dtype, "local")
        self._locals.append(t)
        return t

    def kernel(self, outputs: Sequence[Tensor], body: Iterable[Stmt]) -> Kernel:
        order = [v.name for v in self.node.inputs if v is not None]
        inputs = tuple(sorted(self._inputs.values(), key=lambda t: order.index(t.name)))
        k = Kernel(kernel_name(self.node), inputs, tuple(outputs), tuple(body),
                   tuple(self._locals))
        verify_kernel(k)   # a lowering bug shows here, naming the kernel, not in the C
        return k


def nest(axes: Sequence[Axis], body: Sequence[Stmt], independent: int = 0) -> tuple[Stmt, ...]:
    """Loops over `axes` (outermost first) around `body`. The first `independent` axes are
    those whose iterations write disjoint elements; the first of them with more than one
    iteration becomes the parallel loop (none when all have one)."""
    par = next((i for i, (_, n) in enumerate(axes[:independent]) if n > 1), None)
    stmts = tuple(body)
    for i in reversed(range(len(axes))):
        var, extent = axes[i]
        stmts = (Loop(var, extent, stmts, "parallel" if i == par else "serial"),)
    return stmts


def reduction_axes(axes: Iterable[Axis]) -> tuple[list[Axis], dict[str, Affine]]:
    """Reduction loops, without those of extent 1; and each variable's index (0 for dropped
    ones), so a 1x1 convolution has no kernel loops at all."""
    kept, index = [], {}
    for var, extent in axes:
        if extent > 1:
            kept.append((var, extent))
            index[var] = aff(var)
        else:
            index[var] = aff(0)
    return kept, index


def load(t: Tensor, index: Sequence, extents: dict[str, int], fill: float) -> Load:
    """A load of t[index], reading `fill` out of bounds, but only where the index can leave
    the tensor over the loops' ranges (a load that never does stays fill-free)."""
    acc = t[tuple(index)]
    for i, n in zip(acc.index, t.shape):
        lo, hi = i.bounds(extents)
        if lo < 0 or hi >= n:
            return Load(acc, fill)
    return Load(acc)


def broadcast_index(shape: Sequence[int], out_index: Sequence) -> tuple:
    """The index into a tensor of `shape` broadcast (NumPy rules, aligned on the right) to an
    output indexed by `out_index`: dimensions of size 1 read element 0."""
    lead = len(out_index) - len(shape)
    if lead < 0:
        raise ShapeError(f"shape {list(shape)} does not broadcast to rank {len(out_index)}")
    return tuple(aff(0) if d == 1 else aff(out_index[lead + i]) for i, d in enumerate(shape))


def _const_scalar(v: Value | None) -> float | None:
    """The value of a constant with one element, else None."""
    if v is None or v.const is None or np.asarray(v.const).size != 1:
        return None
    return float(np.asarray(v.const).reshape(-1)[0])


def _const_ints(node: Node, v: Value | None, what: str) -> list[int] | None:
    """A constant integer input (shape, starts, axes...) as a list; None when omitted."""
    if v is None:
        return None
    if v.const is None:
        raise _unsupported(node, f"{what} is computed at run time; the loop nest needs it "
                                 "constant")
    return [int(x) for x in np.asarray(v.const).reshape(-1)]


def _spatial_names(rank: int) -> list[str]:
    return list("dhw"[3 - rank:]) if rank <= 3 else [f"s{i}" for i in range(rank)]


def _normalize_axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{node_context(node)}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _c(x: float) -> Const:
    return Const(float(x))


def _bin(op: str, a: Expr, b: Expr) -> Expr:
    return Binary(op, a, b)


def _un(fn: str, x: Expr) -> Expr:
    return Unary(fn, x)


# ---- elementwise ops ------------------------------------------------------------------------
def _relu(x, a):
    return _bin("max", x, _c(0))


def _leaky_relu(x, a):
    return Select("<", x, _c(0), _bin("*", x, _c(a["alpha"])), x)


def _elu(x, alpha: float) -> Expr:
    return Select("<", x, _c(0), _bin("*", _c(alpha), _bin("-", _un("exp", x), _c(1))), x)


def _softplus(x) -> Expr:
    # log(1 + e^x) as max(x, 0) + log(1 + e^-|x|): e^x would overflow float for x > 88
    return _bin("+", _bin("max", x, _c(0)),
                _un("log", _bin("+", _c(1), _un("exp", _un("neg", _un("abs", x))))))


def _clamp(x, lo: float, hi: float) -> Expr:
    return _bin("min", _bin("max", x, _c(lo)), _c(hi))


def _gelu(x, a):
    if a["approximate"] == "tanh":
        inner = _bin("*", _c(math.sqrt(2 / math.pi)),
                     _bin("+", x, _bin("*", _c(0.044715), _bin("*", x, _bin("*", x, x)))))
        gate = _un("tanh", inner)
    elif a["approximate"] == "none":
        gate = _un("erf", _bin("/", x, _c(math.sqrt(2))))
    else:
        raise ValueError(f"approximate={a['approximate']!r} (known: 'none', 'tanh')")
    return _bin("*", _bin("*", _c(0.5), x), _bin("+", _c(1), gate))


def _sign(x, a):
    # x itself where it is 0 or NaN (np.sign keeps NaN)
    return Select(">", x, _c(0), _c(1), Select("<", x, _c(0), _c(-1), x))


def _shrink(x, a):
    lam, bias = a["lambd"], a["bias"]
    return Select("<", x, _c(-lam), _bin("+", x, _c(bias)),
                  Select(">", x, _c(lam), _bin("-", x, _c(bias)), _c(0)))


def _simple(fn: str):
    return lambda x, a: _un(fn, x)


# op -> (x, attrs) -> expression; each mirrors its definition in ops/elementwise.py
UNARY_OPS: dict[str, Callable[[Expr, dict], Expr]] = {
    "Relu": _relu,
    "LeakyRelu": _leaky_relu,
    "Sigmoid": _simple("sigmoid"),
    "Tanh": _simple("tanh"),
    "Exp": _simple("exp"),
    "Log": _simple("log"),
    "Sqrt": _simple("sqrt"),
    "Erf": _simple("erf"),
    "Floor": _simple("floor"),
    "Ceil": _simple("ceil"),
    "Round": _simple("round"),
    "Sin": _simple("sin"),
    "Cos": _simple("cos"),
    "Tan": lambda x, a: _bin("/", _un("sin", x), _un("cos", x)),
    "Abs": _simple("abs"),
    "Neg": _simple("neg"),
    "Reciprocal": _simple("recip"),
    "Sign": _sign,
    "Gelu": _gelu,
    "HardSigmoid": lambda x, a: _clamp(_bin("+", _bin("*", _c(a["alpha"]), x), _c(a["beta"])),
                                       0, 1),
    "HardSwish": lambda x, a: _bin("*", x, _clamp(_bin("+", _bin("/", x, _c(6)), _c(0.5)), 0, 1)),
    "Elu": lambda x, a: _elu(x, a["alpha"]),
    "Selu": lambda x, a: _bin("*", _c(a["gamma"]), _elu(x, a["alpha"])),
    "Celu": lambda x, a: _bin("+", _bin("max", x, _c(0)), _bin("min", _c(0), _bin(
        "*", _c(a["alpha"]), _bin("-", _un("exp", _bin("/", x, _c(a["alpha"]))), _c(1))))),
    "ThresholdedRelu": lambda x, a: Select(">", x, _c(a["alpha"]), x, _c(0)),
    "Softsign": lambda x, a: _bin("/", x, _bin("+", _c(1), _un("abs", x))),
    "Softplus": lambda x, a: _softplus(x),
    "Mish": lambda x, a: _bin("*", x, _un("tanh", _softplus(x))),
    "Swish": lambda x, a: _bin("*", x, _un("sigmoid", _bin("*", _c(a["alpha"]), x))),
    "Shrink": _shrink,
}

# op -> (a, b) -> expression, with NumPy broadcasting of the operands
BINARY_OPS: dict[str, Callable[[Expr, Expr], Expr]] = {
    "Add": lambda a, b: _bin("+", a, b),
    "Sub": lambda a, b: _bin("-", a, b),
    "Mul": lambda a, b: _bin("*", a, b),
    "Div": lambda a, b: _bin("/", a, b),
    "Pow": lambda a, b: _bin("pow", a, b),
    "PRelu": lambda x, slope: Select("<", x, _c(0), _bin("*", x, slope), x),
}
VARIADIC_OPS = ("Max", "Min", "Sum", "Mean")


def _operand(kb: _KernelBuilder, v: Value, out_index: Sequence) -> Expr:
    """An elementwise operand: a constant scalar is baked in, anything else is loaded with
    broadcasting."""
    scalar = _const_scalar(v)
    if scalar is not None:
        return _c(scalar)
    t = kb.input(v)
    return Load(t[broadcast_index(t.shape, out_index)])


def _elementwise(kb: _KernelBuilder, out_value: Value,
                 fn: Callable[[list[Expr]], Expr], operands: Sequence[Value]) -> Kernel:
    """out = fn(operands) over the output's shape, one nest, every loop independent."""
    y = kb.output(out_value)
    axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
    index = tuple(aff(v) for v, _ in axes)
    value = fn([_operand(kb, v, index) for v in operands])
    return kb.kernel([y], nest(axes, [Store(y[index], value)], len(axes)))


def _lower_unary(node: Node) -> Kernel:
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    attrs = resolve_attrs(node)
    try:
        fn = UNARY_OPS[node.op]
        fn(_c(0), attrs)   # attribute values it cannot express fail here
    except ValueError as e:
        raise _unsupported(node, str(e)) from None
    return _elementwise(kb, node.outputs[0], lambda xs: fn(xs[0], attrs), [node.inputs[0]])


def _lower_clip(node: Node) -> Kernel:
    """Clip = min(max(x, lo), hi) (every element becomes hi when lo > hi, as ONNX says);
    constant bounds are baked in, run-time ones read as scalars."""
    kb = _KernelBuilder(node)
    x = node.inputs[0]
    kb.require([x, node.outputs[0]])
    bounds = [node.input(1), node.input(2)]
    kb.require(bounds, OPERAND_DTYPES)
    for b in bounds:
        if b is not None and b.type.numel != 1:
            raise ShapeError(f"{node_context(node)}: Clip bounds must be scalars, got {b.type}")
    present = [b for b in bounds if b is not None]

    def clip(xs):
        e, rest = xs[0], iter(xs[1:])
        for b, op in zip(bounds, ("max", "min")):
            if b is not None:
                e = _bin(op, e, next(rest))
        return e
    return _elementwise(kb, node.outputs[0], clip, [x] + present)


def _lower_binary(node: Node) -> Kernel:
    kb = _KernelBuilder(node)
    a, b = node.inputs[0], node.inputs[1]
    kb.require([a, node.outputs[0]])
    # Pow's exponent may be another dtype (an integer power): it is read as a value
    kb.require([b], OPERAND_DTYPES if node.op == "Pow" else FLOAT_DTYPES)
    fn = BINARY_OPS[node.op]
    return _elementwise(kb, node.outputs[0], lambda xs: fn(xs[0], xs[1]), [a, b])


def _lower_variadic(node: Node) -> Kernel:
    """Max / Min / Sum / Mean of any number of broadcast inputs, folded left to right."""
    kb = _KernelBuilder(node)
    xs = [v for v in node.inputs if v is not None]
    kb.require(xs + [node.outputs[0]])
    op = {"Max": "max", "Min": "min", "Sum": "+", "Mean": "+"}[node.op]

    def fold(es):
        e = es[0]
        for other in es[1:]:
            e = _bin(op, e, other)
        return _bin("/", e, _c(len(es))) if node.op == "Mean" else e
    return _elementwise(kb, node.outputs[0], fold, xs)


# ---- views and data movement ----------------------------------------------------------------
VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")


def _lower_view(node: Node) -> None:
    """A view needs no code: check the output really is the input's bytes."""
    if node.op == "Dropout":
        if len(node.outputs) > 1:
            raise _unsupported(node, "its mask output (a bool tensor) cannot be lowered; only "
                                     "the inference form with one output is a view")
        mode = node.input(2)
        if mode is not None and (mode.const is None or bool(np.asarray(mode.const).any())):
            ratio = _const_scalar(node.input(1))
            if ratio != 0.0:
                raise _unsupported(node, "training mode (random masking) is not a view")
    src, dst = node.inputs[0], node.outputs[0]
    for v in (src, dst):
        if v.type is None:
            raise ShapeError(f"{node_context(node)}: value {v.name!r} has no type")
    if src.type.dtype != dst.type.dtype or src.type.numel != dst.type.numel:
        raise ShapeError(f"{node_context(node)}: output {dst.type} is not input {src.type} "
                         "reinterpreted, so it cannot be a view")


def _lower_transpose(node: Node) -> Kernel:
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    rank = len(x.shape)
    perm = resolve_attrs(node)["perm"]
    perm = list(range(rank))[::-1] if perm is None else [_normalize_axis(node, int(p), rank)
                                                         for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"{node_context(node)}: perm {perm} is not a permutation")
    axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
    src = [aff(0)] * rank
    for d, p in enumerate(perm):      # output dimension d is input dimension perm[d]
        src[p] = aff(f"i{d}")
    out = tuple(aff(v) for v, _ in axes)
    return kb.kernel([y], nest(axes, [Store(y[out], Load(x[tuple(src)]))], len(axes)))


def _lower_concat(node: Node) -> Kernel:
    """One nest per input, each writing its block of the output at its offset on the axis."""
    kb = _KernelBuilder(node)
    xs = [v for v in node.inputs if v is not None]
    kb.require(xs + [node.outputs[0]])
    y = kb.output(node.outputs[0])
    axis = _normalize_axis(node, int(resolve_attrs(node)["axis"]), len(y.shape))
    body: list[Stmt] = []
    offset = 0
    for v in xs:
        x = kb.input(v)
        axes = [(f"i{d}", n) for d, n in enumerate(x.shape)]
        index = [aff(var) for var, _ in axes]
        dst = list(index)
        dst[axis] = dst[axis] + offset
        body += nest(axes, [Store(y[tuple(dst)], Load(x[tuple(index)]))], len(axes))
        offset += x.shape[axis]
    if offset != y.shape[axis]:
        raise ShapeError(f"{node_context(node)}: inputs add up to {offset} on axis {axis}, "
                         f"the output has {y.shape[axis]}")
    return kb.kernel([y], body)


def _lower_split(node: Node) -> Kernel:
    """One nest per output, each reading its block of the input (sizes from the outputs'
    types, which shape inference derived from `split` / num_outputs)."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0]] + node.outputs)
    x = kb.input(node.inputs[0])
    axis = _normalize_axis(node, int(resolve_attrs(node)["axis"]), len(x.shape))
    body: list[Stmt] = []
    outs = []
    offset = 0
    for v in node.outputs:
        y = kb.output(v)
        outs.append(y)
        axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
        index = [aff(var) for var, _ in axes]
        src = list(index)
        src[axis] = src[axis] + offset
        body += nest(axes, [Store(y[tuple(index)], Load(x[tuple(src)]))], len(axes))
        offset += y.shape[axis]
    if offset != x.shape[axis]:
        raise ShapeError(f"{node_context(node)}: outputs add up to {offset} on axis {axis}, "
                         f"the input has {x.shape[axis]}")
    return kb.kernel(outs, body)


def _lower_slice(node: Node) -> Kernel:
    """y[i] = x[start + step * i] per axis (steps may be negative), starts baked in."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    rank = len(x.shape)
    starts = _const_ints(node, node.input(1), "Slice starts")
    ends = _const_ints(node, node.input(2), "Slice ends")
    axes_in = _const_ints(node, node.input(3), "Slice axes")
    steps = _const_ints(node, node.input(4), "Slice steps") or [1] * len(starts)
    axes_in = list(range(len(starts))) if axes_in is None else [
        _normalize_axis(node, a, rank) for a in axes_in]
    first, step = [0] * rank, [1] * rank
    for s, e, a, st in zip(starts, ends, axes_in, steps):
        if st == 0:
            raise ShapeError(f"{node_context(node)}: step 0 on axis {a}")
        r = range(*slice(s, e, st).indices(x.shape[a]))   # ONNX's clamping is Python's
        if len(r) != y.shape[a]:
            raise ShapeError(f"{node_context(node)}: axis {a} selects {len(r)} elements, the "
                             f"output has {y.shape[a]}")
        first[a], step[a] = r.start, r.step
    axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
    src = tuple(aff(f"i{d}") * step[d] + first[d] for d in range(rank))
    out = tuple(aff(v) for v, _ in axes)
    return kb.kernel([y], nest(axes, [Store(y[out], Load(x[src]))], len(axes)))


def _lower_gather(node: Node) -> Kernel:
    """Gather by constant indices that form an arithmetic progression (a single index, as a
    ViT's class token, or a strided run): y[.., j, ..] = x[.., first + step * j, ..]. Other
    index sets are not affine and stay on the CPU."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    ind = node.inputs[1]
    if ind.const is None:
        raise _unsupported(node, "Gather's indices are computed at run time; the loop nest "
                                 "needs them constant")
    rank = len(x.shape)
    axis = _normalize_axis(node, int(resolve_attrs(node)["axis"]), rank)
    idx = np.asarray(ind.const).astype(np.int64)
    if ((idx < -x.shape[axis]) | (idx >= x.shape[axis])).any():
        raise ShapeError(f"{node_context(node)}: an index of {idx.tolist()} is out of range "
                         f"for axis {axis} of size {x.shape[axis]}")
    flat = np.where(idx < 0, idx + x.shape[axis], idx).reshape(-1)
    step = int(flat[1] - flat[0]) if flat.size > 1 else 0
    if idx.ndim > 1 or (flat.size > 1 and (np.diff(flat) != step).any()):
        raise _unsupported(node, f"Gather indices {idx.tolist()} are not an arithmetic "
                                 "progression (not affine in the output index)")
    axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
    out = [aff(v) for v, _ in axes]
    if idx.ndim == 0:            # the gathered axis disappears
        src = out[:axis] + [aff(int(flat[0]))] + out[axis:]
    else:
        src = out[:axis] + [out[axis] * step + int(flat[0])] + out[axis + 1:]
    return kb.kernel([y], nest(axes, [Store(y[tuple(out)], Load(x[tuple(src)]))], len(axes)))


def _lower_pad(node: Node) -> Kernel:
    """Constant padding: y[i] = x[i - begin], the pad value where that leaves x (negative
    pads crop, which is the same index arithmetic)."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    mode = resolve_attrs(node)["mode"]
    if mode != "constant":
        raise _unsupported(node, f"mode={mode!r} is not supported (only 'constant': edge, "
                                 "reflect and wrap indices are not affine)")
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    rank = len(x.shape)
    pads = _const_ints(node, node.input(1), "Pad pads")
    axes_in = _const_ints(node, node.input(3), "Pad axes")
    axes_in = list(range(rank)) if axes_in is None else [_normalize_axis(node, a, rank)
                                                         for a in axes_in]
    if len(pads) != 2 * len(axes_in):
        raise ShapeError(f"{node_context(node)}: pads {pads} need 2 values per axis {axes_in}")
    begin = [0] * rank
    for i, a in enumerate(axes_in):
        begin[a] = pads[i]
    value_in = node.input(2)
    fill = 0.0
    if value_in is not None and value_in.type is not None and value_in.type.numel > 0:
        fill = _const_scalar(value_in)
        if fill is None:
            raise _unsupported(node, "a run-time constant_value is not supported (the pad "
                                     "value is baked into the nest)")
    axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
    extents = dict(axes)
    src = [aff(f"i{d}") - begin[d] for d in range(rank)]
    out = tuple(aff(v) for v, _ in axes)
    return kb.kernel([y], nest(axes, [Store(y[out], load(x, src, extents, fill))], len(axes)))


def _lower_expand(node: Node) -> Kernel:
    """y = x broadcast to the output's shape (the shape input is baked in through the type)."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
    out = tuple(aff(v) for v, _ in axes)
    src = broadcast_index(x.shape, out)
    return kb.kernel([y], nest(axes, [Store(y[out], Load(x[src]))], len(axes)))


# ---- Resize (nearest) -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IndexPiece:
    """One affine part of an index map along an axis: for q < count and r < reps,
    out[out_start + out_step*q + r] reads src[src_start + src_step*q]."""
    out_start: int
    out_step: int
    count: int
    src_start: int
    src_step: int
    reps: int = 1


def affine_pieces(table: Sequence[int], max_period: int = 32) -> list[IndexPiece]:
    """Cut the map o -> table[o] into few affine pieces. For each period P, every phase
    table[r::P] is split into maximal arithmetic runs; pieces of consecutive phases reading
    the same elements merge into one with a replica loop. The period giving the fewest pieces
    wins: P = 1 for identity and integer downsampling, P = s for upsampling by s (which then
    merges into one piece, out[s*q + r] = src[q])."""
    table = [int(t) for t in table]
    best: list[IndexPiece] | None = None
    for period in range(1, min(len(table), max_period) + 1):
        pieces = []
        for r in range(period):
            seq = table[r::period]
            start = 0
            while start < len(seq):
                end = start + 1
                step = seq[end] - seq[start] if end < len(seq) else 0
                while end < len(seq) and seq[end] - seq[end - 1] == step:
                    end += 1
                count = end - start
                pieces.append(IndexPiece(r + period * start, period if count > 1 else 1, count,
                                         seq[start], step if count > 1 else 0))
                start = end
        pieces = _merge_replicas(pieces)
        if best is None or len(pieces) < len(best):
            best = pieces
        if len(best) == 1:
            break
    return best or []


def _merge_replicas(pieces: list[IndexPiece]) -> list[IndexPiece]:
    """Merge pieces that differ only by consecutive out_start (the same source elements
    written to neighbouring outputs) into one piece with reps > 1."""
    merged: list[IndexPiece] = []
    for p in sorted(pieces, key=lambda p: p.out_start):
        last = merged[-1] if merged else None
        if (last is not None and (last.out_step, last.count, last.src_start, last.src_step) ==
                (p.out_step, p.count, p.src_start, p.src_step)
                and p.out_start == last.out_start + last.reps
                and (last.count == 1 or last.reps < last.out_step)):
            merged[-1] = IndexPiece(last.out_start, last.out_step, last.count, last.src_start,
                                    last.src_step, last.reps + 1)
        else:
            merged.append(p)
    return merged


def _lower_resize(node: Node) -> Kernel:
    """Nearest Resize: the op's own coordinate rules (ops/resize.py) give each axis' index
    table at lowering time; each table is cut into affine pieces and every combination of
    pieces is one copy nest."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    attrs = resolve_attrs(node)
    if attrs["mode"] != "nearest":
        raise _unsupported(node, f"mode={attrs['mode']!r} is not supported (only 'nearest')")
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    consts = []
    for i, what in ((1, "roi"), (2, "scales"), (3, "sizes")):
        v = node.input(i)
        if v is not None and v.type is not None and v.type.numel > 0 and v.const is None:
            raise _unsupported(node, f"a run-time {what} input is not supported")
        consts.append(None if v is None else v.const)
    ctm = attrs["coordinate_transformation_mode"]
    plan = resize_plan(x.shape, *consts, attrs)
    if tuple(plan.out) != y.shape:
        raise ShapeError(f"{node_context(node)}: resizes to {list(plan.out)}, the output is "
                         f"{list(y.shape)}")
    tables = []
    for n_in, n_out, scale, box in zip(x.shape, plan.out, plan.scales, plan.roi):
        if math.isclose(scale, 1.0) and n_in == n_out and (
                ctm != "tf_crop_and_resize" or box == (0.0, 1.0)):
            tables.append(list(range(n_in)))
            continue
        coords, outside = source_coords(ctm, n_out, n_in, scale, box)
        if outside is not None and outside.any():
            raise _unsupported(node, "tf_crop_and_resize outputs outside the input "
                                     "(extrapolation_value) are not supported")
        tables.append(list(nearest_index(coords, attrs["nearest_mode"], n_in)))
    pieces = [affine_pieces(t) for t in tables]
    combos = math.prod(len(p) for p in pieces)
    if combos > MAX_PIECE_NESTS:
        raise _unsupported(node, f"its nearest index maps need {combos} affine pieces (more "
                                 f"than {MAX_PIECE_NESTS}): the scales are too irregular "
                                 "for affine indices")
    body: list[Stmt] = []
    for combo in product(*pieces):
        axes: list[Axis] = []
        dst, src = [], []
        for d, p in enumerate(combo):
            q = aff(f"q{d}") if p.count > 1 else aff(0)
            r = aff(f"r{d}") if p.reps > 1 else aff(0)
            axes += [(f"q{d}", p.count)] if p.count > 1 else []
            axes += [(f"r{d}", p.reps)] if p.reps > 1 else []
            dst.append(q * p.out_step + r + p.out_start)
            src.append(q * p.src_step + p.src_start)
        body += nest(axes, [Store(y[tuple(dst)], Load(x[tuple(src)]))], len(axes))
    return kb.kernel([y], body)


# ---- convolutions ---------------------------------------------------------------------------
def _grouped_channels(groups: int, per_group: int
                      ) -> tuple[list[Axis], Affine, Affine, Affine]:
    """Output-channel loops of a grouped op: (axes, output channel, group, channel within the
    group). One loop "oc" without groups, one loop "g" when each group has one channel
    (depthwise), else "g" then "m": a channel index of a single variable keeps the output
    store a plain per-dimension index."""
    if groups == 1:
        return [("oc", per_group)], aff("oc"), aff(0), aff("oc")
    if per_group == 1:
        return [("g", groups)], aff("g"), aff("g"), aff(0)
    return [("g", groups), ("m", per_group)], aff("g") * per_group + "m", aff("g"), aff("m")


def _conv_init(y: Tensor, out_axes: list[Axis], out_index: tuple, bias: Tensor | None,
               channel: Affine) -> tuple[Stmt, ...]:
    """The init nest: every output element starts at its channel's bias (or 0)."""
    start = Load(bias[(channel,)]) if bias is not None else _c(0)
    return nest(out_axes, [Store(y[out_index], start)], len(out_axes))


def _lower_conv(node: Node) -> Kernel:
    """Conv (any number of spatial dims, groups, strides, dilations, pads, auto_pad): y = bias,
    then the perfect nest y[n, oc, o] += x[n, g*cg + ic, o*s + k*d - pad] * w[oc, ic, k]."""
    kb = _KernelBuilder(node)
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input(2)
    kb.require([xv, wv, bv, node.outputs[0]])
    attrs = resolve_attrs(node)
    x, w = kb.input(xv), kb.input(wv)
    b = kb.input(bv) if bv is not None else None
    win = conv_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    y = kb.output(node.outputs[0])
    n, c = x.shape[:2]
    m, group = w.shape[0], int(attrs["group"])
    cg, mg = c // group, m // group
    names = _spatial_names(len(win.out))
    ch_axes, oc, g, _ = _grouped_channels(group, mg)
    out_axes = [("n", n)] + ch_axes + [(f"o{s}", o) for s, o in zip(names, win.out)]
    red_axes, red = reduction_axes([("ic", cg)] + [(f"k{s}", k)
                                                   for s, k in zip(names, win.kernel)])
    out_index = (aff("n"), oc) + tuple(aff(f"o{s}") for s in names)
    spatial = [aff(f"o{s}") * st + red[f"k{s}"] * dl - pb for s, st, dl, pb in
               zip(names, win.strides, win.dilations, win.pads_begin)]
    extents = dict(out_axes + red_axes)
    xs = load(x, [aff("n"), g * cg + red["ic"]] + spatial, extents, 0.0)
    ws = Load(w[(oc, red["ic"]) + tuple(red[f"k{s}"] for s in names)])
    body = _conv_init(y, out_axes, out_index, b, oc)
    body += nest(out_axes + red_axes, [Store(y[out_index], _bin("*", xs, ws), "+")],
                 len(out_axes))
    return kb.kernel([y], body)


def _transposed_phases(k: int, s: int, d: int, pad: int, out: int
                       ) -> list[tuple[int, int, int, int, int, int, int]]:
    """ConvTranspose along one axis, per output phase r (outputs o = s*q + r). Output o takes
    input i through tap t where s*i + d*t = o + pad: the taps whose r + pad - d*t is a
    multiple of s. Those solve d*t = r + pad (mod s), so they are t0 + t_step*j with
    t_step = s / gcd(d, s), and then i = q + i0 - i_step*j with i_step = d*t_step / s, an
    integer. Returns (r, count of q, t0, t_step, number of taps, i0, i_step) for each phase
    that has a tap (outputs of the others keep their bias)."""
    phases = []
    t_step = s // math.gcd(d, s)
    for r in range(min(s, out)):
        taps = [t for t in range(k) if (r + pad - d * t) % s == 0]
        if not taps:
            continue
        i0 = (r + pad - d * taps[0]) // s
        phases.append((r, -(-(out - r) // s), taps[0], t_step, len(taps), i0, d * t_step // s))
    return phases


def _lower_conv_transpose(node: Node) -> Kernel:
    """ConvTranspose as gathers, one perfect accumulation nest per output phase (see
    _transposed_phases): the scatter form would store out of bounds where the pads crop,
    and the gather form needs (o + pad - d*t) / s, which is affine only within one phase."""
    kb = _KernelBuilder(node)
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input(2)
    kb.require([xv, wv, bv, node.outputs[0]])
    attrs = resolve_attrs(node)
    x, w = kb.input(xv), kb.input(wv)
    b = kb.input(bv) if bv is not None else None
    win = conv_transpose_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    y = kb.output(node.outputs[0])
    n, c = x.shape[:2]
    group, mg = int(attrs["group"]), w.shape[1]
    cg = c // group
    names = _spatial_names(len(win.out))
    ch_axes, oc, g, within = _grouped_channels(group, mg)
    out_axes = [("n", n)] + ch_axes + [(f"o{s}", o) for s, o in zip(names, win.out)]
    out_index = (aff("n"), oc) + tuple(aff(f"o{s}") for s in names)
    body = _conv_init(y, out_axes, out_index, b, oc)
    per_axis = [_transposed_phases(k, s, d, pb, o) for k, s, d, pb, o in
                zip(win.kernel, win.strides, win.dilations, win.pads_begin, win.out)]
    for phase in product(*per_axis):
        q_axes = [("n", n)] + ch_axes + [(f"q{s}", ph[1]) for s, ph in zip(names, phase)]
        red_axes, red = reduction_axes([("ic", cg)] + [(f"t{s}", ph[4])
                                                       for s, ph in zip(names, phase)])
        q = [aff(f"q{s}") for s in names]
        dst = (aff("n"), oc) + tuple(qi * st + ph[0] for qi, st, ph in
                                     zip(q, win.strides, phase))
        src = [qi + ph[5] - red[f"t{s}"] * ph[6] for qi, s, ph in zip(q, names, phase)]
        tap = [red[f"t{s}"] * ph[3] + ph[2] for s, ph in zip(names, phase)]
        extents = dict(q_axes + red_axes)
        xs = load(x, [aff("n"), g * cg + red["ic"]] + src, extents, 0.0)
        ws = Load(w[(g * cg + red["ic"], within) + tuple(tap)])
        body += nest(q_axes + red_axes, [Store(y[dst], _bin("*", xs, ws), "+")], len(q_axes))
    return kb.kernel([y], body)


# ---- matrix products ------------------------------------------------------------------------
def _lower_gemm(node: Node) -> Kernel:
    """Y = beta * C (or 0), then the perfect nest Y[i, j] += alpha * A'[i, k] * B'[k, j]."""
    kb = _KernelBuilder(node)
    av, bv, cv = node.inputs[0], node.inputs[1], node.input(2)
    kb.require([av, bv, cv, node.outputs[0]])
    attrs = resolve_attrs(node)
    alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
    a, b = kb.input(av), kb.input(bv)
    y = kb.output(node.outputs[0])
    if len(a.shape) != 2 or len(b.shape) != 2 or len(y.shape) != 2:
        raise ShapeError(f"{node_context(node)}: Gemm takes 2-D A and B")
    m, n = y.shape
    k = a.shape[0] if attrs["transA"] else a.shape[1]
    out_axes = [("i", m), ("j", n)]
    a_idx = ("k", "i") if attrs["transA"] else ("i", "k")
    b_idx = ("j", "k") if attrs["transB"] else ("k", "j")
    if cv is None:
        start: Expr = _c(0)
    else:
        start = _operand(kb, cv, (aff("i"), aff("j")))
        start = start if beta == 1.0 else _bin("*", _c(beta), start)
    prod_ = _bin("*", Load(a[a_idx]), Load(b[b_idx]))
    prod_ = prod_ if alpha == 1.0 else _bin("*", _c(alpha), prod_)
    body = nest(out_axes, [Store(y["i", "j"], start)], 2)
    body += nest(out_axes + [("k", k)], [Store(y["i", "j"], prod_, "+")], 2)
    return kb.kernel([y], body)


def _lower_matmul(node: Node) -> Kernel:
    """numpy.matmul: batched with broadcast batch dimensions, 1-D operands promoted (a row
    vector for A, a column for B) and their dimension dropped from the output."""
    if node.input(2) is not None:
        raise _unsupported(node, "the integer form with a bias input is not supported")
    kb = _KernelBuilder(node)
    av, bv = node.inputs[0], node.inputs[1]
    kb.require([av, bv, node.outputs[0]])
    a, b, y = kb.input(av), kb.input(bv), kb.output(node.outputs[0])
    a_shape = (1,) + a.shape if len(a.shape) == 1 else a.shape
    b_shape = b.shape + (1,) if len(b.shape) == 1 else b.shape
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    try:
        batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    except ValueError:
        raise ShapeError(f"{node_context(node)}: batch dimensions of {list(a.shape)} and "
                         f"{list(b.shape)} do not broadcast") from None
    batch_vars = [f"b{d}" for d in range(len(batch))]
    out_axes = list(zip(batch_vars, batch)) + [("i", m), ("j", n)]
    full = [aff(v) for v in batch_vars] + [aff("i"), aff("j")]
    out_index = full[:-2] + ([] if len(a.shape) == 1 else [full[-2]]) + \
        ([] if len(b.shape) == 1 else [full[-1]])
    expected = batch + ((m,) if len(a.shape) > 1 else ()) + ((n,) if len(b.shape) > 1 else ())
    if expected != y.shape:
        raise ShapeError(f"{node_context(node)}: output {list(y.shape)} is not the matmul of "
                         f"{list(a.shape)} and {list(b.shape)}")
    a_idx = list(broadcast_index(a_shape[:-2], full[:-2])) + (
        [aff("k")] if len(a.shape) == 1 else [aff("i"), aff("k")])
    b_idx = list(broadcast_index(b_shape[:-2], full[:-2])) + (
        [aff("k")] if len(b.shape) == 1 else [aff("k"), aff("j")])
    dst = y[tuple(out_index)]
    body = nest(out_axes, [Store(dst, _c(0))], len(out_axes))
    body += nest(out_axes + [("k", k)],
                 [Store(dst, _bin("*", Load(a[tuple(a_idx)]), Load(b[tuple(b_idx)])), "+")],
                 len(out_axes))
    return kb.kernel([y], body)


# ---- pooling --------------------------------------------------------------------------------
def _window_counts(size: int, kernel: int, stride: int, dilation: int, pad_begin: int,
                   lo: int, hi: int, out: int) -> list[int]:
    """Per output position along one axis, how many window taps land in [lo, hi)."""
    counts = []
    for o in range(out):
        start = o * stride - pad_begin
        counts.append(sum(lo <= start + dilation * t < hi for t in range(kernel)))
    return counts


def _runs(values: Sequence[int]) -> list[tuple[int, int, int]]:
    """(start, length, value) of the maximal runs of equal values."""
    runs: list[tuple[int, int, int]] = []
    for i, v in enumerate(values):
        if runs and runs[-1][2] == v:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, v)
        else:
            runs.append((i, 1, v))
    return runs


def _lower_pool(node: Node) -> Kernel:
    """MaxPool / AveragePool: an init nest (-inf / 0), the perfect window nest reducing with
    max / + (padding and ceil_mode's overhang read the fill), and for the average a division
    nest per rectangle of constant divisor."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    is_max = node.op == "MaxPool"
    if is_max and len(node.outputs) > 1:
        raise _unsupported(node, "the Indices output is not supported (a loop nest cannot "
                                 "store a loop index as a value)")
    attrs = resolve_attrs(node)
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    win = pool_window(node.op, x.shape, attrs["kernel_shape"], attrs["strides"],
                      attrs["dilations"], attrs["pads"], attrs["auto_pad"], attrs["ceil_mode"])
    size = x.shape[2:]
    names = _spatial_names(len(size))
    geometry = list(zip(size, win.kernel, win.strides, win.dilations, win.pads_begin,
                        win.pads_end, win.out))
    inside = [_window_counts(i, k, s, d, pb, 0, i, o) for i, k, s, d, pb, pe, o in geometry]
    if any(0 in per_axis for per_axis in inside):
        raise ShapeError(f"{node_context(node)}: a pooling window covers no input element "
                         f"(kernel {list(win.kernel)}, dilations {list(win.dilations)})")
    out_axes = [("n", x.shape[0]), ("c", x.shape[1])] + [(f"o{s}", o)
                                                         for s, o in zip(names, win.out)]
    red_axes, red = reduction_axes((f"k{s}", k) for s, k in zip(names, win.kernel))
    out_index = (aff("n"), aff("c")) + tuple(aff(f"o{s}") for s in names)
    spatial = [aff(f"o{s}") * st + red[f"k{s}"] * dl - pb for s, st, dl, pb in
               zip(names, win.strides, win.dilations, win.pads_begin)]
    fill = -math.inf if is_max else 0.0
    xs = load(x, [aff("n"), aff("c")] + spatial, dict(out_axes + red_axes), fill)
    body = nest(out_axes, [Store(y[out_index], _c(fill))], len(out_axes))
    body += nest(out_axes + red_axes, [Store(y[out_index], xs, "max" if is_max else "+")],
                 len(out_axes))
    if not is_max:
        if attrs["count_include_pad"]:   # explicit padding counts, ceil_mode's overhang not
            divisors = [_window_counts(i, k, s, d, pb, -pb, i + pe, o)
                        for i, k, s, d, pb, pe, o in geometry]
        else:
            divisors = inside
        runs = [_runs(dv) for dv in divisors]
        if math.prod(len(r) for r in runs) > MAX_PIECE_NESTS:
            raise _unsupported(node, "its divisors vary in too many runs for one division "
                                     f"nest per rectangle (more than {MAX_PIECE_NESTS})")
        for rect in product(*runs):
            axes = out_axes[:2] + [(f"o{s}", length) for s, (_, length, _) in zip(names, rect)]
            idx = (aff("n"), aff("c")) + tuple(aff(f"o{s}") + start
                                               for s, (start, _, _) in zip(names, rect))
            count = math.prod(v for _, _, v in rect)
            body += nest(axes, [Store(y[idx], _bin("/", Load(y[idx]), _c(count)))], len(axes))
    return kb.kernel([y], body)


def _lower_global_pool(node: Node) -> Kernel:
    """GlobalAveragePool / GlobalMaxPool: reduce every spatial axis into y[n, c, 0, ...]."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    is_max = node.op == "GlobalMaxPool"
    size = x.shape[2:]
    names = _spatial_names(len(size))
    out_axes = [("n", x.shape[0]), ("c", x.shape[1])]
    red_axes, red = reduction_axes(zip(names, size))
    out_index = (aff("n"), aff("c")) + (aff(0),) * len(size)
    start = -math.inf if is_max else 0.0
    body = nest(out_axes, [Store(y[out_index], _c(start))], 2)
    xs = Load(x[(aff("n"), aff("c")) + tuple(red[s] for s in names)])
    body += nest(out_axes + red_axes, [Store(y[out_index], xs, "max" if is_max else "+")], 2)
    if not is_max:
        body += nest(out_axes, [Store(y[out_index], _bin("/", Load(y[out_index]),
                                                         _c(math.prod(size))))], 2)
    return kb.kernel([y], body)


# ---- normalisation --------------------------------------------------------------------------
def _lower_batchnorm(node: Node) -> Kernel:
    """Inference BatchNormalization: per channel, k = scale / sqrt(var + eps) and
    shift = B - mean * k go into two local scalars, then y = x * k + shift over the channel's
    elements (one multiply-add per element instead of a sqrt and a divide)."""
    kb = _KernelBuilder(node)
    if len(node.outputs) > 1:
        raise _unsupported(node, "the training outputs (running mean / variance) are not "
                                 "supported")
    kb.require(list(node.inputs) + [node.outputs[0]])
    attrs = resolve_attrs(node)
    if attrs["training_mode"]:
        raise _unsupported(node, "training_mode=1 is not supported")
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    scale, bias, mean, var = (kb.input(v) for v in node.inputs[1:5])
    if len(x.shape) < 2 or any(t.shape != (x.shape[1],) for t in (scale, bias, mean, var)):
        raise ShapeError(f"{node_context(node)}: parameters must have one value per channel "
                         f"of {list(x.shape)}")
    k, shift = kb.local("bn_scale", y.dtype), kb.local("bn_shift", y.dtype)
    eps = float(attrs["epsilon"])
    per_channel = [
        Store(k[0], _bin("/", Load(scale["c"]), _un("sqrt", _bin("+", Load(var["c"]), _c(eps))))),
        Store(shift[0], _bin("-", Load(bias["c"]), _bin("*", Load(mean["c"]), Load(k[0])))),
    ]
    inner = [(f"i{d}", n) for d, n in enumerate(x.shape[2:], start=2)]
    idx = (aff("n"), aff("c")) + tuple(aff(v) for v, _ in inner)
    per_channel += nest(inner, [Store(y[idx], _bin("+", _bin("*", Load(x[idx]), Load(k[0])),
                                                   Load(shift[0])))])
    # only n and c may be parallel: the scalars are written per channel, and a local is
    # private to the parallel loop it is declared in
    return kb.kernel([y], nest([("n", x.shape[0]), ("c", x.shape[1])], per_channel, 2))


def _lower_lrn(node: Node) -> Kernel:
    """LRN across channels: y = 0, y += x[c']^2 over the window (zero outside), then
    y = x / (bias + alpha / size * y) ^ beta, all into the output."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    attrs = resolve_attrs(node)
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    size = int(attrs["size"])
    if size < 1 or len(x.shape) < 3:
        raise ShapeError(f"{node_context(node)}: LRN needs size >= 1 and an N x C x ... input")
    axes = [(f"i{d}", n) for d, n in enumerate(x.shape)]
    idx = tuple(aff(v) for v, _ in axes)
    red_axes, red = reduction_axes([("t", size)])
    window = list(idx)
    window[1] = window[1] + red["t"] - (size - 1) // 2
    xs = load(x, window, dict(axes + red_axes), 0.0)
    body = nest(axes, [Store(y[idx], _c(0))], len(axes))
    body += nest(axes + red_axes, [Store(y[idx], _bin("*", xs, xs), "+")], len(axes))
    denom = _bin("+", _c(attrs["bias"]), _bin("*", _c(attrs["alpha"] / size), Load(y[idx])))
    body += nest(axes, [Store(y[idx], _bin("/", Load(x[idx]),
                                           _bin("pow", denom, _c(attrs["beta"]))))], len(axes))
    return kb.kernel([y], body)


def _lower_softmax(node: Node) -> Kernel:
    """Softmax / LogSoftmax over one axis (or every axis from `axis` on, the opset < 13 form):
    per row, the max and the sum of exp(x - max) in two local scalars, then the normalised
    output. Rows are the independent loops."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    attrs = resolve_attrs(node)
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    rank = len(x.shape)
    axis = int(attrs["axis"])
    if attrs["coerce_to_2d"]:
        if not -rank <= axis <= rank:
            raise ShapeError(f"{node_context(node)}: axis {axis} out of range for rank {rank}")
        reduced = list(range(axis + rank if axis < 0 else axis, rank))
    else:
        reduced = [_normalize_axis(node, axis, rank)]
    rows = [(f"i{d}", x.shape[d]) for d in range(rank) if d not in reduced]
    red_axes, red = reduction_axes((f"i{d}", x.shape[d]) for d in reduced)
    idx = tuple(red[f"i{d}"] if d in reduced else aff(f"i{d}") for d in range(rank))
    mx, total = kb.local("row_max", y.dtype), kb.local("row_sum", y.dtype)
    xs = Load(x[idx])
    shifted = _bin("-", xs, Load(mx[0]))
    body: list[Stmt] = [Store(mx[0], _c(-math.inf))]
    body += nest(red_axes, [Store(mx[0], xs, "max")])
    body.append(Store(total[0], _c(0)))
    if node.op == "Softmax":
        body += nest(red_axes, [Store(y[idx], _un("exp", shifted)),
                                Store(total[0], Load(y[idx]), "+")])
        body += nest(red_axes, [Store(y[idx], _bin("/", Load(y[idx]), Load(total[0])))])
    else:
        body += nest(red_axes, [Store(total[0], _un("exp", shifted), "+")])
        body += nest(red_axes, [Store(y[idx], _bin("-", shifted, _un("log", Load(total[0]))))])
    return kb.kernel([y], nest(rows, body, len(rows)))


def _lower_layernorm(node: Node) -> Kernel:
    """LayerNormalization (Y only): per row, the mean and then the mean square deviation in
    local scalars (two passes, as ops/norm.py computes them), then
    Y = (X - mean) * (1 / sqrt(var + epsilon)) * Scale + B, Scale and B broadcast."""
    if len(node.outputs) > 1:
        raise UnsupportedOpError(f"{node_context(node)}: LayerNormalization's Mean and "
                                 "InvStdDev outputs are not lowered (only Y)")
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]])
    attrs = resolve_attrs(node)
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    rank = len(x.shape)
    axis = _normalize_axis(node, int(attrs["axis"]), rank)
    rows = [(f"i{d}", x.shape[d]) for d in range(axis)]
    red_axes, red = reduction_axes((f"i{d}", x.shape[d]) for d in range(axis, rank))
    idx = tuple(aff(f"i{d}") if d < axis else red[f"i{d}"] for d in range(rank))
    n = math.prod(x.shape[axis:])
    mean, var = kb.local("row_mean", y.dtype), kb.local("row_var", y.dtype)
    d = _bin("-", Load(x[idx]), Load(mean[0]))
    body: list[Stmt] = [Store(mean[0], _c(0))]
    body += nest(red_axes, [Store(mean[0], Load(x[idx]), "+")])
    body += [Store(mean[0], _bin("/", Load(mean[0]), _c(n))), Store(var[0], _c(0))]
    body += nest(red_axes, [Store(var[0], _bin("*", d, d), "+")])
    body.append(Store(var[0], _un("rsqrt", _bin("+", _bin("/", Load(var[0]), _c(n)),
                                                 _c(float(attrs["epsilon"]))))))
    value = _bin("*", _bin("*", d, Load(var[0])), _operand(kb, node.inputs[1], idx))
    if node.input(2) is not None:
        value = _bin("+", value, _operand(kb, node.inputs[2], idx))
    body += nest(red_axes, [Store(y[idx], value)])
    return kb.kernel([y], nest(rows, body, len(rows)))


REDUCE_OPS = {   # op -> (init value, reduce, element transform, final transform)
    "ReduceSum": (0.0, "+", None, None),
    "ReduceMean": (0.0, "+", None, "mean"),
    "ReduceMax": (-math.inf, "max", None, None),
    "ReduceMin": (math.inf, "min", None, None),
    "ReduceSumSquare": (0.0, "+", "square", None),
    "ReduceL1": (0.0, "+", "abs", None),
    "ReduceL2": (0.0, "+", "square", "sqrt"),
    "ReduceLogSum": (0.0, "+", None, "log"),
}


def _lower_reduce(node: Node) -> Kernel:
    """ReduceX over constant axes: init nest, the perfect reduction nest (output loops
    independent), then a finishing nest for Mean / L2 / LogSum."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    attrs = resolve_attrs(node)
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    rank = len(x.shape)
    axes_in = _const_ints(node, node.input(1), f"{node.op} axes")
    if not axes_in:
        if attrs["noop_with_empty_axes"]:
            axes_in = []
        else:
            axes_in = list(range(rank))
    reduced = sorted({_normalize_axis(node, a, rank) for a in axes_in})
    keep = bool(attrs["keepdims"]) or not reduced
    init, op, element, final = REDUCE_OPS[node.op]
    out_axes = [(f"i{d}", x.shape[d]) for d in range(rank) if d not in reduced]
    red_axes, red = reduction_axes((f"i{d}", x.shape[d]) for d in reduced)
    src = tuple(red[f"i{d}"] if d in reduced else aff(f"i{d}") for d in range(rank))
    out_index = tuple(aff(0) if d in reduced else aff(f"i{d}") for d in range(rank)
                      if keep or d not in reduced)
    if len(out_index) != len(y.shape):
        raise ShapeError(f"{node_context(node)}: output {list(y.shape)} does not match "
                         f"reducing {list(x.shape)} over {reduced}")
    dst = y[out_index]
    if not reduced:       # noop_with_empty_axes: the input unchanged
        return kb.kernel([y], nest(out_axes, [Store(dst, Load(x[src]))], len(out_axes)))
    xs: Expr = Load(x[src])
    if element == "square":
        xs = _bin("*", xs, xs)
    elif element == "abs":
        xs = _un("abs", xs)
    n_out = len(out_axes)
    body = nest(out_axes, [Store(dst, _c(init))], n_out)
    body += nest(out_axes + red_axes, [Store(dst, xs, op)], n_out)
    if final == "mean":
        count = math.prod(x.shape[d] for d in reduced)
        body += nest(out_axes, [Store(dst, _bin("/", Load(dst), _c(count)))], n_out)
    elif final is not None:
        body += nest(out_axes, [Store(dst, _un(final, Load(dst)))], n_out)
    return kb.kernel([y], body)


# ---- the table ------------------------------------------------------------------------------
LOWERINGS: dict[str, Callable[[Node], Kernel | None]] = {
    **{op: _lower_unary for op in UNARY_OPS},
    **{op: _lower_binary for op in BINARY_OPS},
    **{op: _lower_variadic for op in VARIADIC_OPS},
    **{op: _lower_view for op in VIEW_OPS},
    **{op: _lower_reduce for op in REDUCE_OPS},
    "Clip": _lower_clip,
    "Conv": _lower_conv,
    "ConvTranspose": _lower_conv_transpose,
    "Gemm": _lower_gemm,
    "MatMul": _lower_matmul,
    "MaxPool": _lower_pool,
    "AveragePool": _lower_pool,
    "GlobalAveragePool": _lower_global_pool,
    "GlobalMaxPool": _lower_global_pool,
    "BatchNormalization": _lower_batchnorm,
    "LRN": _lower_lrn,
    "Softmax": _lower_softmax,
    "LogSoftmax": _lower_softmax,
    "LayerNormalization": _lower_layernorm,
    "Concat": _lower_concat,
    "Split": _lower_split,
    "Transpose": _lower_transpose,
    "Slice": _lower_slice,
    "Gather": _lower_gather,
    "Pad": _lower_pad,
    "Expand": _lower_expand,
    "Resize": _lower_resize,
}

SUPPORTED_OPS: frozenset[str] = frozenset(LOWERINGS)


def lower_node(node: Node) -> Kernel | None:
    """The loop nest computing `node` (see the module docstring for the contract), or None
    when the node is a view of its input's bytes. UnsupportedOpError for ops and attribute
    combinations not lowered; ShapeError for nodes whose types do not fit the op."""
    fn = LOWERINGS.get(node.op)
    if fn is None:
        raise UnsupportedOpError(f"{node_context(node)}: no loop-nest lowering for op "
                                 f"{node.op!r}; lowered ops: {', '.join(sorted(SUPPORTED_OPS))}")
    try:
        return fn(node)
    except RetargetError as e:
        if node.name in str(e):
            raise
        raise type(e)(f"{node_context(node)}: {e}") from None


__all__ = ["SUPPORTED_OPS", "lower_node", "c_name", "kernel_name", "nest", "broadcast_index",
           "affine_pieces", "IndexPiece", "UNARY_OPS", "BINARY_OPS", "VARIADIC_OPS",
           "VIEW_OPS", "REDUCE_OPS"]

"""Normalisations lowered to loop nests: BatchNormalization, LRN, Softmax / LogSoftmax,
LayerNormalization."""
from __future__ import annotations

import math

from ...errors import ShapeError, UnsupportedOpError, node_context
from ...ir.graph import Node
from ...ops.registry import resolve_attrs
from ..ir import Kernel, Load, Stmt, Store, aff
from .common import (_KernelBuilder, _bin, _c, _normalize_axis, _un, _unsupported, load, nest,
                     reduction_axes)
from .elementwise import _operand


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

"""Pooling lowered to loop nests: MaxPool, AveragePool (border rectangles), global pools."""
from __future__ import annotations

import math
from itertools import product
from typing import Sequence

from ...errors import ShapeError, node_context
from ...ir.graph import Node
from ...ops.pool import pool_window
from ...ops.registry import resolve_attrs
from ..ir import Kernel, Load, Store, aff
from .common import (MAX_PIECE_NESTS, _KernelBuilder, _bin, _c, _spatial_names, _unsupported, load,
                     nest, reduction_axes)


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

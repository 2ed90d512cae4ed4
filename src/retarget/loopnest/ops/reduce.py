"""ReduceX ops lowered to loop nests: init, reduction, finishing nests."""
from __future__ import annotations

import math

from ...errors import ShapeError, node_context
from ...ir.graph import Node
from ...ops.registry import resolve_attrs
from ..ir import Expr, Kernel, Load, Store, aff
from .common import (_KernelBuilder, _bin, _c, _const_ints, _normalize_axis, _un, nest,
                     reduction_axes)


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

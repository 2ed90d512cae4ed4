"""Matrix products lowered to loop nests: Gemm, MatMul."""
from __future__ import annotations


import numpy as np

from ...errors import ShapeError, node_context
from ...ir.graph import Node
from ...ops.registry import resolve_attrs
from ..ir import Expr, Kernel, Load, Store, aff
from .common import _KernelBuilder, _bin, _c, _unsupported, broadcast_index, nest
from .elementwise import _operand


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

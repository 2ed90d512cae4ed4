"""Loop order for a cached CPU: reductions outside, contiguous output loops innermost.

A lowered reduction nest runs its reduction loops innermost (`for oc, oh, ow: for ic, kh, kw:
out[oc, oh, ow] += ...`): every output element is one short scalar reduction, and the C
compiler cannot vectorise it without reassociating float sums. Moving the reduction loops
outside the loops that walk the output's contiguous trailing dimensions
(`for oc: for ic, kh, kw: for oh, ow: out[oc, oh, ow] += w[oc, ic, kh, kw] * x[ic, ...]`)
turns the innermost loop into a unit-stride AXPY over an output plane that stays in cache,
with the weight a loop-invariant scalar: what gcc -O3 vectorises. Every output element
still accumulates its terms in the same order, so the result is bit-identical.

The move is only made where it pays: the innermost output loop must have unit stride in
the output, and every load must walk it with stride 0, 1 or 2 (a stride-2 conv's input still
vectorises with a shuffle; a dense layer's W[o, k] along o does not, and keeps its order).
"""
from __future__ import annotations

from .ir import Kernel, Loop, Store, loads
from .schedule import Band, ScheduleError, nest, perfect_band

MAX_LOAD_STRIDE = 2


def reduction_outside(band: Band) -> Band | None:
    """`band` with its reduction loops moved outside its contiguous output loops, or None
    when the band is not a single accumulating Store or the move would not help."""
    if len(band.body) != 1 or not isinstance(band.body[0], Store) or band.body[0].reduce is None:
        return None
    store = band.body[0]
    out = store.dst.flat()
    indep = [a for a in band.axes if out.coeff(a.var)]
    red = [a for a in band.axes if not out.coeff(a.var)]
    inner = next((a for a in indep if out.coeff(a.var) == 1 and a.extent > 1), None)
    if not red or inner is None or inner.kind == "parallel":
        return None        # a parallel loop inside the reductions would fork per term
    if any(abs(ld.access.flat().coeff(inner.var)) > MAX_LOAD_STRIDE for ld in loads(store.value)):
        return None
    # the row above the innermost loop too, when the two make one contiguous plane
    rows = next((a for a in indep if out.coeff(a.var) == inner.extent and a is not inner
                 and a.kind != "parallel"), None)
    plane = [a for a in (rows, inner) if a is not None]
    outer = [a for a in indep if a not in plane]
    return Band(tuple(outer + red + plane), band.body)


def order_reductions(kernel: Kernel) -> Kernel:
    """Every top-level perfect nest of `kernel` reordered by `reduction_outside` where it
    applies; everything else unchanged."""
    body = []
    for s in kernel.body:
        if isinstance(s, Loop):
            try:
                band = perfect_band(s)
            except ScheduleError:
                band = None
            moved = reduction_outside(band) if band is not None else None
            if moved is not None:
                s = nest(moved.axes, moved.body)[0]
        body.append(s)
    return Kernel(kernel.name, kernel.inputs, kernel.outputs, tuple(body), kernel.locals)


__all__ = ["order_reductions", "reduction_outside"]

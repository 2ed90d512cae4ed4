"""Views and data movement lowered to loop nests: Transpose, Concat, Split, Slice, Gather,
Pad, Expand (views return None)."""
from __future__ import annotations


import numpy as np

from ...errors import ShapeError, node_context
from ...ir.graph import Node
from ...ops.registry import resolve_attrs
from ..ir import Const, Kernel, Load, Stmt, Store, Tensor, aff
from .common import (_KernelBuilder, _const_ints, _const_scalar, _normalize_axis, _unsupported,
                     broadcast_index, load, nest)


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
        body += _block_copy(y, x, x.shape, axis, offset, into_block=True)
        offset += x.shape[axis]
    if offset != y.shape[axis]:
        raise ShapeError(f"{node_context(node)}: inputs add up to {offset} on axis {axis}, "
                         f"the output has {y.shape[axis]}")
    return kb.kernel([y], body)


def _block_copy(dst, src, shape, axis: int, offset: int, into_block: bool) -> list[Stmt]:
    """One nest copying a `shape` box between `src` and `dst`, where the whole tensor (`dst`
    when `into_block`, as Concat writes; `src` otherwise, as Split reads) is indexed `offset`
    further along `axis` than the block."""
    axes = [(f"i{d}", n) for d, n in enumerate(shape)]
    index = [aff(var) for var, _ in axes]
    moved = list(index)
    moved[axis] = moved[axis] + offset
    at_dst, at_src = (moved, index) if into_block else (index, moved)
    return nest(axes, [Store(dst[tuple(at_dst)], Load(src[tuple(at_src)]))], len(axes))


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
        body += _block_copy(y, x, y.shape, axis, offset, into_block=False)
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
    end = [y.shape[d] - x.shape[d] - begin[d] for d in range(rank)]
    if min(begin + end) >= 0 and x.size:
        return kb.kernel([y], _fill_then_copy(x, y, begin, fill))
    extents = dict(axes)
    src = [aff(f"i{d}") - begin[d] for d in range(rank)]
    out = tuple(aff(v) for v, _ in axes)
    return kb.kernel([y], nest(axes, [Store(y[out], load(x, src, extents, fill))], len(axes)))


def _fill_then_copy(x: Tensor, y: Tensor, begin: list[int], fill: float) -> tuple[Stmt, ...]:
    """A pad that crops nothing: per block of the leading unpadded axes, y filled, then x
    copied into it at `begin`. Two plain loops a compiler turns into vector stores and copies,
    where the one loop with a bounds test per element did not (ResNet-18's Pads took 0.62 ms
    of a 17 ms inference that way; docs/benchmarks.md, bench_aot_c, "Pads as fill and copy")."""
    rank = len(y.shape)
    lead = next(d for d in range(rank + 1)
                if d == rank or begin[d] or y.shape[d] != x.shape[d])
    outer = [(f"i{d}", y.shape[d]) for d in range(lead)]
    fill_axes = [(f"i{d}", y.shape[d]) for d in range(lead, rank)]
    copy_axes = [(f"j{d}", x.shape[d]) for d in range(lead, rank)]
    o = [aff(v) for v, _ in outer]
    fill_at = tuple(o + [aff(v) for v, _ in fill_axes])
    src = tuple(o + [aff(v) for v, _ in copy_axes])
    dst = tuple(o + [aff(v) + begin[lead + i] for i, (v, _) in enumerate(copy_axes)])
    # no outer block (the first axis is padded): each nest is its own parallel loop
    par = 0 if outer else rank
    inner = (nest(fill_axes, [Store(y[fill_at], Const(fill))], par) +
             nest(copy_axes, [Store(y[dst], Load(x[src]))], par))
    return nest(outer, inner, len(outer)) if outer else inner


def _lower_expand(node: Node) -> Kernel:
    """y = x broadcast to the output's shape (the shape input is baked in through the type)."""
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    x, y = kb.input(node.inputs[0]), kb.output(node.outputs[0])
    axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
    out = tuple(aff(v) for v, _ in axes)
    src = broadcast_index(x.shape, out)
    return kb.kernel([y], nest(axes, [Store(y[out], Load(x[src]))], len(axes)))

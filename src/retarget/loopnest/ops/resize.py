"""Nearest Resize lowered to loop nests: the index table cut into affine pieces."""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product
from typing import Sequence

from ...errors import ShapeError, node_context
from ...ir.graph import Node
from ...ops.registry import resolve_attrs
from ...ops.resize import nearest_index, resize_plan, source_coords
from ..ir import Kernel, Load, Stmt, Store, aff
from .common import Axis, MAX_PIECE_NESTS, _KernelBuilder, _unsupported, nest


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

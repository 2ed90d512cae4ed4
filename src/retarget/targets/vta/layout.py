"""Packing tensors into VTA's blocked layouts, and back.

Activations use NCHW{n}n{c}c: (N/BATCH, C/BLOCK_IN, H, W, BATCH, BLOCK_IN), so one INP SRAM
element is the BATCH x BLOCK_IN block at a given (n-block, c-block, h, w). Weights use
OIHW{o}o{i}i: (O/BLOCK_OUT, I/BLOCK_IN, H, W, BLOCK_OUT, BLOCK_IN); one WGT element is a
BLOCK_OUT x BLOCK_IN block stored [out][in] as the GEMM core reads it. A matrix is the
H = W = 1 case. Channel and batch counts that are not multiples of the block are zero-padded
when packing and cropped when unpacking.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError


def _ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def _pad_axes(x: np.ndarray, multiples: dict[int, int]) -> np.ndarray:
    pads = [(0, 0)] * x.ndim
    for axis, m in multiples.items():
        pads[axis] = (0, _ceil_to(x.shape[axis], m) - x.shape[axis])
    return np.pad(x, pads) if any(p[1] for p in pads) else x


def pack_nchw(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """NCHW -> (N/batch, C/block, H, W, batch, block), zero-padding N and C up to multiples."""
    if x.ndim != 4:
        raise ShapeError(f"pack_nchw expects an NCHW tensor, got shape {x.shape}")
    x = _pad_axes(x, {0: batch, 1: block})
    n, c, h, w = x.shape
    return np.ascontiguousarray(
        x.reshape(n // batch, batch, c // block, block, h, w).transpose(0, 2, 4, 5, 1, 3))


def unpack_nchw(p: np.ndarray, n: int | None = None, c: int | None = None) -> np.ndarray:
    """(N/b, C/bc, H, W, b, bc) -> NCHW, cropped to n batch entries and c channels if given."""
    if p.ndim != 6:
        raise ShapeError(f"unpack_nchw expects a 6-D packed tensor, got shape {p.shape}")
    nb, cb, h, w, b, bc = p.shape
    x = p.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * bc, h, w)
    return np.ascontiguousarray(x[:n if n is not None else nb * b, :c if c is not None else cb * bc])


def pack_oihw(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """OIHW -> (O/bo, I/bi, H, W, bo, bi), zero-padding O and I up to multiples."""
    if w.ndim != 4:
        raise ShapeError(f"pack_oihw expects an OIHW tensor, got shape {w.shape}")
    w = _pad_axes(w, {0: block_out, 1: block_in})
    o, i, h, ww = w.shape
    return np.ascontiguousarray(
        w.reshape(o // block_out, block_out, i // block_in, block_in, h, ww)
        .transpose(0, 2, 4, 5, 1, 3))


def pack_matrix(a: np.ndarray, rows_block: int, cols_block: int) -> np.ndarray:
    """(R, C) -> (R/rb, C/cb, rb, cb): INP (rb = BATCH, cb = BLOCK_IN), WGT (BLOCK_OUT,
    BLOCK_IN; rows are output channels) or OUT/ACC (BATCH, BLOCK_OUT) blocks."""
    if a.ndim != 2:
        raise ShapeError(f"pack_matrix expects a 2-D matrix, got shape {a.shape}")
    a = _pad_axes(a, {0: rows_block, 1: cols_block})
    r, c = a.shape
    return np.ascontiguousarray(
        a.reshape(r // rows_block, rows_block, c // cols_block, cols_block).transpose(0, 2, 1, 3))


def unpack_matrix(p: np.ndarray, rows: int | None = None, cols: int | None = None) -> np.ndarray:
    """(R/rb, C/cb, rb, cb) -> (R, C), cropped to rows x cols if given."""
    if p.ndim != 4:
        raise ShapeError(f"unpack_matrix expects a 4-D packed matrix, got shape {p.shape}")
    rb_n, cb_n, rb, cb = p.shape
    a = p.transpose(0, 2, 1, 3).reshape(rb_n * rb, cb_n * cb)
    return np.ascontiguousarray(a[:rows, :cols])

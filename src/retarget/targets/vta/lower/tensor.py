"""PackedTensor: an activation living in a DRAM buffer of the stream in VTA's blocked layout.

NCHW tensors are packed NCHW{BATCH}n{BLOCK}c: (N/BATCH, C/BLOCK, H, W, BATCH, BLOCK), one SRAM
element per (n-block, c-block, h, w). A matrix (rows x cols) is the H = W = 1 case and keeps
layout.pack_matrix's 4-D shape (rows/BATCH, cols/BLOCK, BATCH, BLOCK): the same bytes as the
NCHW packing of (rows, cols, 1, 1), so a dense layer reads a pooled activation directly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....errors import InputError
from ..layout import pack_matrix, pack_nchw, unpack_matrix, unpack_nchw


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class PackedTensor:
    """`shape` is the logical shape (NCHW or rows x cols); `buffer` the DRAM buffer's name."""
    buffer: str
    shape: tuple[int, ...]
    dtype: str            # int8 (activations) or int32 (accumulators)
    batch: int            # BATCH of the config
    block: int            # channels per element (BLOCK_IN == BLOCK_OUT in every preset)

    @property
    def nchw(self) -> tuple[int, int, int, int]:
        """The shape as NCHW (a matrix is rows x cols x 1 x 1)."""
        return tuple(self.shape) if len(self.shape) == 4 else (self.shape[0], self.shape[1], 1, 1)

    @property
    def blocks(self) -> tuple[int, int, int, int]:
        """(batch blocks, channel blocks, H, W): the element grid in DRAM."""
        n, c, h, w = self.nchw
        return ceil_div(n, self.batch), ceil_div(c, self.block), h, w

    @property
    def packed_shape(self) -> tuple[int, ...]:
        nb, cb, h, w = self.blocks
        if len(self.shape) == 2:
            return (nb, cb, self.batch, self.block)
        return (nb, cb, h, w, self.batch, self.block)

    def pack(self, x: np.ndarray) -> np.ndarray:
        """The host array for this buffer (zero-padded batch and channels)."""
        x = np.asarray(x)
        if tuple(x.shape) != tuple(self.shape) or x.dtype != np.dtype(self.dtype):
            raise InputError(f"tensor for DRAM buffer {self.buffer!r}: expected {self.dtype}"
                             f"{list(self.shape)}, got {x.dtype}{list(x.shape)}")
        if len(self.shape) == 2:
            return pack_matrix(x, self.batch, self.block)
        return pack_nchw(x, self.batch, self.block)

    def unpack(self, p: np.ndarray) -> np.ndarray:
        """The logical tensor from the buffer's contents (padding cropped)."""
        p = np.asarray(p).reshape(self.packed_shape)
        if len(self.shape) == 2:
            return unpack_matrix(p, self.shape[0], self.shape[1])
        return unpack_nchw(p, self.shape[0], self.shape[1])

    def as_matrix(self) -> "PackedTensor":
        """An N x C x 1 x 1 activation viewed as the N x C matrix a dense layer reads (the
        packed bytes are identical). Other shapes would need a relayout: InputError."""
        n, c, h, w = self.nchw
        if (h, w) != (1, 1):
            raise InputError(f"DRAM buffer {self.buffer!r}: {list(self.shape)} is not N x C x 1 "
                             f"x 1; flattening it needs a relayout (run Flatten on the cpu)")
        return PackedTensor(self.buffer, (n, c), self.dtype, self.batch, self.block)

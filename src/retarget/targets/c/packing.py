"""How the `c` target's routines read their constant operands: weights packed once at build
time into the blocked layouts the micro-kernels stream (targets/c/kernels), and integer
parameters widened to what they load. Each packing names its result (`name`), its source
constant (`source`) and computes it (`apply`): the interface lower_region reads from
register_tile.Relayout.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IKB = 16                  # int8.c RT_IKB: output channels per packed weight block
DKB = 32                  # int8_dot.c RT_DKB: the same for rt_conv_s8_dot


def weights_4d(data: np.ndarray, transpose: bool) -> np.ndarray:
    """Conv weights [K, C, R, S] as they are, a dense layer's [N, K] as [N, K, 1, 1]
    (`transpose`: a MatMul's [K, N] transposed first)."""
    w = data.T if transpose else data
    return w.reshape(w.shape + (1,) * (4 - w.ndim))


@dataclass(frozen=True, slots=True)
class BlockPacking:
    """Float weights (weights_4d) in blocks of `block` output channels, the block
    innermost, zero past K: [ceil(K/block), C, R, S, block] (rt_conv_f32, rt_pointwise_f32,
    rt_pointwise_cl_f32)."""
    name: str
    source: str
    block: int
    transpose: bool = False

    def apply(self, data: np.ndarray) -> np.ndarray:
        w = weights_4d(data, self.transpose)
        k = w.shape[0]
        blocks = -(-k // self.block)
        padded = np.zeros((blocks * self.block,) + w.shape[1:], dtype=w.dtype)
        padded[:k] = w
        split = padded.reshape((blocks, self.block) + w.shape[1:])
        return np.ascontiguousarray(np.moveaxis(split, 1, -1))


@dataclass(frozen=True, slots=True)
class IntBlockPacking:
    """Grouped int8 weights [K, Cg, R, S] as int32 blocks of IKB output channels per group,
    the block innermost: [G, ceil(Kg/IKB), Cg, R, S, IKB], zero past Kg (rt_conv_s8)."""
    name: str
    source: str
    groups: int
    transpose: bool = False

    def apply(self, data: np.ndarray) -> np.ndarray:
        w = weights_4d(data, self.transpose).astype(np.int32)
        k, cg, r, s = w.shape
        kg = k // self.groups
        blocks = -(-kg // IKB)
        padded = np.zeros((self.groups, blocks * IKB, cg, r, s), np.int32)
        padded[:, :kg] = w.reshape(self.groups, kg, cg, r, s)
        split = padded.reshape(self.groups, blocks, IKB, cg, r, s)
        return np.ascontiguousarray(np.moveaxis(split, 2, -1))


@dataclass(frozen=True, slots=True)
class DotPacking:
    """Group-1 int8 weights (weights_4d) as rt_conv_s8_dot reads them:
    [ceil(K/DKB), ceil(C/4), R, S, DKB, 4] int8, zero past K and C (`correction`: instead the
    int32 [ceil(K/DKB) * DKB] of -128 * sum(w[k]), which undoes the +128 the routine adds to
    every input byte)."""
    name: str
    source: str
    transpose: bool = False
    correction: bool = False

    def apply(self, data: np.ndarray) -> np.ndarray:
        w = weights_4d(data, self.transpose)
        k, c, r, s = w.shape
        kp, cp = -(-k // DKB) * DKB, -(-c // 4) * 4
        if self.correction:
            out = np.zeros(kp, np.int32)
            out[:k] = -128 * w.reshape(k, -1).astype(np.int64).sum(axis=1)
            return out
        padded = np.zeros((kp, cp, r, s), np.int8)
        padded[:k, :c] = w
        blocks = padded.reshape(kp // DKB, DKB, cp // 4, 4, r, s)
        return np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 1, 3))


@dataclass(frozen=True, slots=True)
class AsInt32:
    """An integer constant (per-channel multipliers or shifts) as int32, what the routines
    read."""
    name: str
    source: str

    def apply(self, data: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(data, dtype=np.int32)


__all__ = ["AsInt32", "BlockPacking", "DKB", "DotPacking", "IKB", "IntBlockPacking",
           "weights_4d"]

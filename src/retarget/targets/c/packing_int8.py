"""How rt_conv_s8_flat (targets/c/kernels/int8_dot.c) reads a group-1 int8 layer's weights:
packed once at build time so that each register tile's RT_FKB output channels of one
(channel quad, r, s) are 4 * RT_FKB consecutive bytes (one 4-byte broadcast per channel). The
interface is packing.py's: a name, the source constant and `apply`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .packing import DKB, DotPacking, weights_4d

FKB = 8                   # int8_dot.c RT_FKB: output channels of a rt_conv_s8_flat tile


@dataclass(frozen=True, slots=True)
class FlatPacking:
    """Group-1 int8 weights (weights_4d) as [ceil(K/FKB), ceil(C/4), R, S, FKB, 4] int8, zero
    past K and C (`correction`: instead the int32 [ceil(K/FKB) * FKB] of -128 * sum(w[k])):
    DotPacking's layout with its blocks of DKB channels cut into blocks of FKB."""
    name: str
    source: str
    transpose: bool = False
    correction: bool = False

    def apply(self, data: np.ndarray) -> np.ndarray:
        dot = DotPacking(self.name, self.source, self.transpose, self.correction).apply(data)
        kp = -(-weights_4d(data, self.transpose).shape[0] // FKB) * FKB
        if self.correction:
            return dot[:kp]
        # DotPacking's [ceil(K/DKB), C4, R, S, DKB, 4]: each block of DKB channels split into
        # DKB / FKB blocks of FKB, those moved out in front of the channel quads
        kb, c4, r, s = dot.shape[:4]
        split = dot.reshape(kb, c4, r, s, DKB // FKB, FKB, 4).transpose(0, 4, 1, 2, 3, 5, 6)
        return np.ascontiguousarray(split.reshape(kb * DKB // FKB, c4, r, s, FKB, 4)[:kp // FKB])


__all__ = ["FKB", "FlatPacking"]

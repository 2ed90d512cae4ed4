"""VTAKernel: one lowered region as a VTA instruction stream (targets/accel/kernel.py has the
plumbing: upload / run / release / save / load).

VTA's part: the program is a builder.Program (program.insn.bin / program.uop.bin /
program.json in the artifact), region inputs and outputs are packed NCHWnc (or blocked
matrices) in DRAM, and the cycle model is timing.simulate_timing.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..accel.kernel import Binding, LayerInfo, StreamKernel
from .builder import Program
from .config import VTAConfig
from .layout import pack_matrix, pack_nchw, unpack_matrix, unpack_nchw


def pack_for(cfg: VTAConfig, x: np.ndarray, block: int) -> np.ndarray:
    """A logical int8 tensor in the packed layout the accelerator reads (NCHWnc or blocked
    matrix), zero-padding batch and channels up to the block sizes."""
    if x.ndim == 4:
        return pack_nchw(x, cfg.batch, block)
    return pack_matrix(x, cfg.batch, block)


def unpack_from(p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The logical tensor of `shape` from its packed form (padding cropped)."""
    if len(shape) == 4:
        return unpack_nchw(p, shape[0], shape[1])
    return unpack_matrix(p, shape[0], shape[1])


class VTAKernel(StreamKernel):
    """A region lowered to one VTA instruction stream (see targets/accel/kernel.py)."""

    kind: ClassVar[str] = "vta.program"
    label: ClassVar[str] = "vta"
    program_class: ClassVar[type] = Program

    def pack_input(self, x: np.ndarray) -> np.ndarray:
        return pack_for(self.program.config, x, self.program.config.block_in)

    def unpack_output(self, p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return unpack_from(p, shape)

    def simulate_timing(self):
        from .timing import simulate_timing
        return simulate_timing(self.program, layers=self.layer_spans())


__all__ = ["Binding", "LayerInfo", "VTAKernel", "pack_for", "unpack_from"]

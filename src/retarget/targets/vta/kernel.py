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
from ..base import Disassembler
from .builder import Program
from .disasm import disassemble_file, recognizes
from .config import VTAConfig
from .layout import pack_matrix, pack_nchw, pack_oihw, unpack_matrix, unpack_nchw
from .timing import simulate_timing


def pack_for(cfg: VTAConfig, x: np.ndarray, block: int) -> np.ndarray:
    """A logical int8 tensor in the packed layout the accelerator reads (NCHWnc or blocked
    matrix), zero-padding batch and channels up to the block sizes."""
    if x.ndim == 4:
        return pack_nchw(x, cfg.batch, block)
    return pack_matrix(x, cfg.batch, block)


def pack_weight_slices(x: np.ndarray, slices: int, cfg: VTAConfig) -> np.ndarray:
    """(slices * K) x M int8 -> `slices` weight matrices W[m, k] = x[s * K + k, m], each in the
    GEMM core's weight blocks (M/BO, K/BI, 1, 1, BO, BI), zero-padded: the second operand of
    a batched product A . B, read as the weights of a dense layer."""
    k = x.shape[0] // slices
    w = np.ascontiguousarray(x.reshape(slices, k, x.shape[1]).transpose(0, 2, 1))
    return np.stack([pack_oihw(ws[:, :, None, None], cfg.block_out, cfg.block_in) for ws in w])


def unpack_from(p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The logical tensor of `shape` from its packed form (padding cropped)."""
    if len(shape) == 4:
        return unpack_nchw(p, shape[0], shape[1])
    return unpack_matrix(p, shape[0], shape[1])


class VTAKernel(StreamKernel):
    """A region lowered to one VTA instruction stream (see targets/accel/kernel.py)."""

    kind: ClassVar[str] = "vta.program"
    disassembler = Disassembler(recognizes, disassemble_file)
    program_class: ClassVar[type] = Program
    binding_ranks: ClassVar[tuple[int, ...]] = (2, 4)   # NCHW maps and (rows, cols)

    def pack_input(self, x: np.ndarray, binding: Binding | None = None) -> np.ndarray:
        cfg = self.program.config
        if binding is not None and binding.slices:
            return pack_weight_slices(x, binding.slices, cfg)
        return pack_for(cfg, x, cfg.block_in)

    def unpack_output(self, p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return unpack_from(p, shape)

    def simulate_timing(self):
        return simulate_timing(self.program, layers=self.layer_spans())


__all__ = ["Binding", "LayerInfo", "VTAKernel", "pack_for", "pack_weight_slices", "unpack_from"]

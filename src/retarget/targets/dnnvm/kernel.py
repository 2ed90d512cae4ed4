"""DNNVMKernel: a region lowered to one dnnvm instruction stream (the plumbing is shared:
targets/accel/kernel.py). dnnvm's part: feature maps are NHWC in DDR (a 2-D (N, K) tensor is
N pixels of K channels), the program is program.insn.bin + program.json in the artifact, and
the cycle model is timing.simulate_timing."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..accel.kernel import StreamKernel
from ..base import Disassembler
from .program import Program
from .disasm import disassemble_file, recognizes
from .timing import simulate_timing


def to_nhwc(x: np.ndarray) -> np.ndarray:
    """A logical NCHW (or (N, K)) int8 tensor in the layout of its DDR buffer."""
    if x.ndim == 4:
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    return np.ascontiguousarray(x).reshape(x.shape[0], 1, 1, x.shape[1])


def from_nhwc(p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The logical tensor of `shape` from its NHWC DDR buffer."""
    if len(shape) == 4:
        return p.transpose(0, 3, 1, 2)
    return p.reshape(shape)


class DNNVMKernel(StreamKernel):
    kind: ClassVar[str] = "dnnvm.program"
    disassembler = Disassembler(recognizes, disassemble_file)
    program_class: ClassVar[type] = Program
    binding_ranks: ClassVar[tuple[int, ...]] = (2, 4)   # NCHW maps and (rows, cols)

    def pack_input(self, x: np.ndarray, binding=None) -> np.ndarray:
        return to_nhwc(x)

    def unpack_output(self, p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return from_nhwc(p, shape)

    def simulate_timing(self):
        return simulate_timing(self.program, layers=self.layer_spans())


__all__ = ["DNNVMKernel", "from_nhwc", "to_nhwc"]

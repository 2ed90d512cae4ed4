"""VTA instructions as typed dataclasses, and their binary encoding.

The dataclasses are the one in-memory form used by the runtime builder, the simulator,
the cycle model and the disassembler. Encoding/decoding to 128-bit instruction words and
32-bit micro-op words follows ../shared/specs/vta.md for the default config; for other
configs the index-field widths derive from the buffer depths (see `IsaLayout`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemType(IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


@dataclass(frozen=True, slots=True)
class Deps:
    """Dependency-token flags of an instruction (bits [6:3])."""
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False


NO_DEPS = Deps()


@dataclass(frozen=True, slots=True)
class MemInsn:
    """LOAD or STORE of a 2-D block between DRAM and one SRAM (bases count elements)."""
    opcode: Opcode           # Opcode.LOAD or Opcode.STORE
    deps: Deps
    memory_type: MemType
    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0


@dataclass(frozen=True, slots=True)
class GemmInsn:
    deps: Deps
    reset: bool
    uop_bgn: int
    uop_end: int
    iter_out: int
    iter_in: int
    dst_factor_out: int
    dst_factor_in: int
    src_factor_out: int
    src_factor_in: int
    wgt_factor_out: int
    wgt_factor_in: int

    @property
    def opcode(self) -> Opcode:
        return Opcode.GEMM


@dataclass(frozen=True, slots=True)
class AluInsn:
    deps: Deps
    reset: bool
    uop_bgn: int
    uop_end: int
    iter_out: int
    iter_in: int
    dst_factor_out: int
    dst_factor_in: int
    src_factor_out: int
    src_factor_in: int
    alu_op: AluOp
    use_imm: bool
    imm: int                 # signed 16-bit

    @property
    def opcode(self) -> Opcode:
        return Opcode.ALU


@dataclass(frozen=True, slots=True)
class FinishInsn:
    deps: Deps = NO_DEPS

    @property
    def opcode(self) -> Opcode:
        return Opcode.FINISH


Insn = MemInsn | GemmInsn | AluInsn | FinishInsn


@dataclass(frozen=True, slots=True)
class Uop:
    """A micro-op: indices into ACC (dst), INP or ACC (src) and WGT (wgt)."""
    dst_idx: int
    src_idx: int
    wgt_idx: int = 0

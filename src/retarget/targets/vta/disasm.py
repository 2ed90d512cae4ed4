"""A readable listing of a VTA instruction stream (and its micro-ops).

One line per instruction: index, opcode (with memory type or ALU op), dependency flags, then
the fields by name. The on-disk formats are described in docs/vta.md: raw 16-byte little-endian
instructions; micro-ops as raw little-endian uint32 words.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..accel.program import SavedStream
from .config import VTAConfig, load_config
from .isa import (UOP_BYTES, AluInsn, Deps, FinishInsn, GemmInsn, Insn, IsaError, IsaLayout,
                  MemInsn, decode_stream, decode_uops, layout_for)

_FLAG_NAMES = ("pop_prev", "pop_next", "push_prev", "push_next")


def format_deps(d: Deps) -> str:
    """'[pop_prev push_next]', or '[]' when no flag is set."""
    return "[" + " ".join(n for n in _FLAG_NAMES if getattr(d, n)) + "]"


def format_insn(insn: Insn) -> str:
    """One instruction as text, without its index."""
    deps = format_deps(insn.deps)
    if isinstance(insn, MemInsn):
        pads = ""
        if insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1:
            pads = (f" pad_y={insn.y_pad_0}/{insn.y_pad_1}"
                    f" pad_x={insn.x_pad_0}/{insn.x_pad_1}")
        if insn.x_size == 0:
            body = "(no-op token carrier)"
        else:
            body = (f"sram={insn.sram_base} dram={insn.dram_base} y={insn.y_size} "
                    f"x={insn.x_size} stride={insn.x_stride}{pads}")
        return f"{insn.opcode.name:<6} {insn.memory_type.name:<8} {deps:<22} {body}"
    if isinstance(insn, (GemmInsn, AluInsn)):
        loops = (f"uop[{insn.uop_bgn}:{insn.uop_end}) iter={insn.iter_out}x{insn.iter_in} "
                 f"dst=({insn.dst_factor_out},{insn.dst_factor_in}) "
                 f"src=({insn.src_factor_out},{insn.src_factor_in})")
        if isinstance(insn, GemmInsn):
            name = "GEMM"
            tail = f" wgt=({insn.wgt_factor_out},{insn.wgt_factor_in})"
        else:
            name = "ALU"
            tail = f" imm={insn.imm}" if insn.use_imm else " (vector)"
        kind = "RESET" if insn.reset else (insn.alu_op.name if isinstance(insn, AluInsn) else "")
        return f"{name:<6} {kind:<8} {deps:<22} {loops}{tail}"
    if isinstance(insn, FinishInsn):
        return f"{'FINISH':<6} {'':<8} {deps}".rstrip()
    raise IsaError(f"not an instruction: {insn!r}")


def disassemble(insns: list[Insn], uops: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                header: str | None = None) -> str:
    """The listing of decoded instructions and, if given, decoded micro-ops (dst, src, wgt)."""
    lines = [f"# {header}"] if header else []
    width = len(str(max(len(insns) - 1, 0)))
    lines += [f"{i:>{width}}  {format_insn(insn)}" for i, insn in enumerate(insns)]
    if uops is not None:
        dst, src, wgt = uops
        lines.append(f"# micro-ops: {len(dst)}")
        width = len(str(max(len(dst) - 1, 0)))
        lines += [f"u{i:<{width}}  dst={int(d)} src={int(s)} wgt={int(w)}"
                  for i, (d, s, w) in enumerate(zip(dst, src, wgt))]
    return "\n".join(lines)


def disassemble_bytes(data: bytes, layout: IsaLayout, uop_data: bytes | None = None,
                      header: str | None = None) -> str:
    """Decode raw stream bytes (and raw uop bytes) and list them."""
    uops = None
    if uop_data is not None:
        if len(uop_data) % UOP_BYTES:
            raise IsaError(f"micro-op file of {len(uop_data)} bytes is not a whole number of "
                           f"{UOP_BYTES}-byte micro-ops")
        uops = decode_uops(np.frombuffer(uop_data, dtype="<u4"), layout)
    return disassemble(decode_stream(data, layout), uops, header)


def recognizes(path: Path) -> bool:
    """A saved stream (.insn.bin, or a kernel directory holding one) whose JSON names no
    other target: vta's programs predate the "target" field."""
    saved = SavedStream.find(path)
    return (saved.stream.name.endswith(".insn.bin") and saved.stream.is_file()
            and saved.saved_target() in (None, "vta"))


def disassemble_file(path: Path, *, config: str | None = None, uops: Path | None = None) -> str:
    """A saved stream listed with its micro-ops: the config and micro-ops come from the files
    Program.save wrote beside it unless given (default config: pynq)."""
    saved = SavedStream.find(path)
    uops = uops or saved.uops
    cfg, source = saved.config(config, VTAConfig.from_dict, load_config)
    data = saved.read()
    uop_data = None
    if uops:
        with open(uops, "rb") as fh:
            uop_data = fh.read()
    header = (f"{saved.stream}: {len(data) // 16} instructions, config {cfg.name} "
              f"({cfg.target_name}, {source})")
    return disassemble_bytes(data, layout_for(cfg), uop_data, header)

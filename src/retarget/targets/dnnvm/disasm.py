"""Readable dnnvm instructions: one line each, `retarget disasm` and traces print these.

    LOAD IN  [ddr 0x1000 +r*896 +c*64  -> sram 0x0  4x14 x 64B  pad t1 b0 l1 r1 =0]  wait conv  signal conv
"""
from __future__ import annotations

from pathlib import Path

from ..accel.program import SavedStream
from .config import DNNVMConfig, load_config
from .isa import INSN_BYTES, ENGINES, Act, Buf, Conv, Elew, End, Insn, Load, Pool, Save, decode_stream


def _mask(m: int) -> str:
    return ",".join(e for k, e in enumerate(ENGINES) if m >> k & 1) or "-"


def _pad(insn, zeros: bool = False) -> str:
    if not (insn.pad_top or insn.pad_bottom or insn.pad_left or insn.pad_right):
        return ""
    return (f"  pad t{insn.pad_top} b{insn.pad_bottom} l{insn.pad_left} r{insn.pad_right} "
            f"={0 if zeros else insn.pad_value}")


def format_insn(insn: Insn) -> str:
    deps = f"  wait {_mask(insn.wait)}  signal {_mask(insn.signal)}"
    if isinstance(insn, Load):
        return (f"LOAD {Buf(insn.buf).name:<4} [ddr {insn.ddr_addr:#x} +r*{insn.ddr_row_stride}"
                f" +c*{insn.ddr_col_stride} -> sram {insn.sram_addr:#x}  {insn.rows}x{insn.cols}"
                f" x {insn.vec_bytes}B{_pad(insn)}]{deps}")
    if isinstance(insn, Save):
        return (f"SAVE OUT  [sram {insn.sram_addr:#x} -> ddr {insn.ddr_addr:#x} "
                f"+r*{insn.ddr_row_stride} +c*{insn.ddr_col_stride}  {insn.rows}x{insn.cols} x "
                f"{insn.vec_bytes}B]{deps}")
    if isinstance(insn, Conv):
        act = Act(insn.act).name.lower() + (f"/{insn.leaky_shift}" if insn.act == Act.LEAKY
                                            else "")
        flags = "".join(f for f, on in (("first ", insn.first), ("last ", insn.last),
                                        ("dw ", insn.depthwise)) if on)
        src = "" if insn.in_buf == Buf.IN else f"{Buf(insn.in_buf).name} "
        return (f"CONV [in {src}{insn.in_addr:#x} {insn.in_h}x{insn.in_w}x{insn.ic}"
                f"{_pad(insn, zeros=True)}  wgt "
                f"{insn.wgt_addr:#x} k{insn.kh}x{insn.kw} s{insn.sh}x{insn.sw}  bias "
                f"{insn.bias_addr:#x} -> out {insn.out_addr:#x} {insn.out_h}x{insn.out_w}x"
                f"{insn.oc}  {flags}shift {insn.shift} {act} [{insn.lo},{insn.hi}]]{deps}")
    if isinstance(insn, Pool):
        return (f"POOL {'AVG' if insn.kind else 'MAX'} [in {Buf(insn.in_buf).name} "
                f"{insn.in_addr:#x} {insn.in_h}x{insn.in_w}x{insn.channels}{_pad(insn)} k{insn.kh}x{insn.kw} s{insn.sh}x{insn.sw} -> out "
                f"{insn.out_addr:#x} {insn.out_h}x{insn.out_w}  shift {insn.shift} "
                f"[{insn.lo},{insn.hi}]]{deps}")
    if isinstance(insn, Elew):
        return (f"ELEW ADD [{Buf(insn.a_buf).name} {insn.a_addr:#x} <<{insn.shift_a} + "
                f"{Buf(insn.b_buf).name} {insn.b_addr:#x} <<{insn.shift_b} -> out "
                f"{insn.out_addr:#x} x{insn.count}  shift {insn.out_shift} "
                f"[{insn.lo},{insn.hi}]]{deps}")
    if isinstance(insn, End):
        return f"END{deps}"
    return repr(insn)


def disassemble(insns) -> str:
    return "\n".join(f"{i:6d}  {format_insn(x)}" for i, x in enumerate(insns))


def disassemble_bytes(raw: bytes) -> str:
    return disassemble(decode_stream(raw))


def recognizes(path: Path) -> bool:
    """A saved stream whose JSON says it is a dnnvm program."""
    return SavedStream.find(path).saved_target() == "dnnvm"


def disassemble_file(path: Path, *, config: str | None = None, uops: Path | None = None) -> str:
    """A saved stream listed one instruction per line; the config comes from the JSON saved
    beside it unless given (default: zu2). dnnvm keeps no micro-ops (`uops` is unused)."""
    saved = SavedStream.find(path)
    cfg, source = saved.config(config, DNNVMConfig.from_dict, load_config)
    data = saved.read()
    return (f"{saved.stream}: {len(data) // INSN_BYTES} instructions, dnnvm config {cfg.name} "
            f"({cfg.target_name}, {source})\n" + disassemble_bytes(data))


__all__ = ["disassemble", "disassemble_bytes", "disassemble_file", "recognizes", "format_insn"]

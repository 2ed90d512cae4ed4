"""The dnnvm instruction set: six classes, a fixed 256-bit encoding, dependency fields.

Classes (from the DNNVM paper, Sec. III): LOAD (DDR -> an on-chip buffer), SAVE (the output
buffer -> DDR), CONV (the PE array), POOL, ELEW (the MISC unit's element-wise add) and END.
Each runs on one of five engines that work concurrently; instructions of one engine run in
program order. The bit layout is ours (docs/dnnvm-isa.md has the table):

    bits 0..3    opcode
    bits 4..8    wait   : one bit per engine; pop one token from each engine named
    bits 9..13   signal : one bit per engine; push one token to each engine named when done
    bits 14..    the class's fields, in the order of its dataclass, each `WIDTHS[name]` bits
                 (two's complement where SIGNED), little-endian in 32 bytes.

A token from engine A to engine B says "A finished an instruction B depends on"; tokens queue
per (A, B) pair, so the k-th pop on B from A waits for the k-th instruction of A that signals
B. Every field is range-checked when encoding (IsaError naming the instruction and field).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from typing import ClassVar

from ...errors import TargetError

INSN_BYTES = 32
ENGINES = ("load", "save", "conv", "pool", "misc")
LOAD_E, SAVE_E, CONV_E, POOL_E, MISC_E = range(5)


class IsaError(TargetError):
    """An instruction that cannot be encoded, or bytes that are not an instruction."""


class Opcode(IntEnum):
    LOAD = 0
    SAVE = 1
    CONV = 2
    POOL = 3
    ELEW = 4
    END = 5


class Buf(IntEnum):
    """On-chip buffers. LOAD writes IN / WGT / BIAS (and OUT: an element-wise operand next to a
    conv result, for fused CONV + add); CONV, POOL, ELEW write OUT; SAVE reads OUT."""
    IN = 0
    WGT = 1
    BIAS = 2
    OUT = 3


class Act(IntEnum):
    NONE = 0
    RELU = 1
    LEAKY = 2       # y < 0: y * 2**-leaky_shift (a power-of-two slope)


HEADER_BITS = 14
WIDTHS = {
    "buf": 2, "ddr_addr": 32, "sram_addr": 24, "rows": 12, "cols": 12, "vec_bytes": 16,
    "ddr_row_stride": 24, "ddr_col_stride": 16, "pad_top": 4, "pad_bottom": 4, "pad_left": 4,
    "pad_right": 4, "pad_value": 8,
    "in_addr": 24, "wgt_addr": 24, "bias_addr": 16, "out_addr": 24, "kh": 4, "kw": 4, "sh": 4,
    "sw": 4, "in_h": 12, "in_w": 12, "ic": 12, "out_h": 12, "out_w": 12, "oc": 12, "shift": 7,
    "lo": 8, "hi": 8, "act": 2, "leaky_shift": 4, "first": 1, "last": 1, "depthwise": 1,
    "kind": 1, "channels": 16, "in_buf": 2,
    "a_addr": 24, "b_addr": 24, "a_buf": 2, "b_buf": 2, "count": 24, "shift_a": 5,
    "shift_b": 5, "out_shift": 7,
}
SIGNED = {"pad_value", "shift", "lo", "hi", "out_shift"}


@dataclass(slots=True)
class Insn:
    """Fields every instruction has: the engines it waits on and those it signals (bit masks
    over ENGINES). Mutable so that the program builder can set dependency bits in place on
    the instructions it created (a frozen copy per bit was most of the compile time)."""
    wait: int = 0
    signal: int = 0
    opcode: ClassVar[Opcode]
    engine: ClassVar[int]


@dataclass(slots=True)
class Load(Insn):
    """DDR -> buffer `buf`: rows x cols vectors of vec_bytes, read at ddr_addr + r*row_stride +
    c*col_stride, written densely at sram_addr as (pad_top + rows + pad_bottom) rows of
    (pad_left + cols + pad_right) vectors, the padding filled with pad_value."""
    buf: int = Buf.IN
    ddr_addr: int = 0
    sram_addr: int = 0
    rows: int = 1
    cols: int = 1
    vec_bytes: int = 1
    ddr_row_stride: int = 0
    ddr_col_stride: int = 0
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0
    pad_value: int = 0
    opcode: ClassVar[Opcode] = Opcode.LOAD
    engine: ClassVar[int] = LOAD_E


@dataclass(slots=True)
class Save(Insn):
    """The output buffer -> DDR: rows x cols vectors of vec_bytes read densely from sram_addr,
    written at ddr_addr + r*row_stride + c*col_stride (a channel offset and a pixel stride
    wider than the vector put a tile inside a concatenation)."""
    sram_addr: int = 0
    ddr_addr: int = 0
    rows: int = 1
    cols: int = 1
    vec_bytes: int = 1
    ddr_row_stride: int = 0
    ddr_col_stride: int = 0
    opcode: ClassVar[Opcode] = Opcode.SAVE
    engine: ClassVar[int] = SAVE_E


@dataclass(slots=True)
class Conv(Insn):
    """out[y, x, o] over an input tile [in_h, in_w, ic] (HWC) of buffer `in_buf` (IN, or OUT
    for a fused CONV -> CONV), surrounded by pad_* rows / columns of zeros, and weights
    [oc, kh, kw, ic] ([oc, kh, kw, 1] depthwise, ic == oc): int32 accumulators at out_addr
    start from the int32 bias at bias_addr (`first`) or from what is there; with `last` they
    are requantised (round half up by `shift`, activation, clip to [lo, hi]) to int8 written
    at out_addr."""
    in_addr: int = 0
    wgt_addr: int = 0
    bias_addr: int = 0
    out_addr: int = 0
    kh: int = 1
    kw: int = 1
    sh: int = 1
    sw: int = 1
    in_h: int = 1
    in_w: int = 1
    ic: int = 1
    out_h: int = 1
    out_w: int = 1
    oc: int = 1
    shift: int = 0
    lo: int = -128
    hi: int = 127
    act: int = Act.NONE
    leaky_shift: int = 0
    first: int = 1
    last: int = 1
    depthwise: int = 0
    # appended after the original fields (a stream that leaves them 0 encodes as before): the
    # buffer the input tile is read from (IN, or OUT: a fused CONV -> CONV reads the first
    # conv's int8 result where it was computed), and rows / columns of zeros around the tile
    # (the second conv's padding at the map's border, which no LOAD materialises on chip)
    in_buf: int = Buf.IN
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0
    opcode: ClassVar[Opcode] = Opcode.CONV
    engine: ClassVar[int] = CONV_E


@dataclass(slots=True)
class Pool(Insn):
    """Max (kind 0) or average (kind 1: window sum, then round half up by `shift`) pooling of
    a tile [in_h, in_w, channels] of buffer `in_buf` (IN, or OUT when it pools a conv result
    on chip), padded by pad_* rows / columns of pad_value, to out[out_h, out_w, channels] in
    OUT, clipped to [lo, hi]. The average's divisor is a power of two (the shift); padding
    counts."""
    in_buf: int = Buf.IN
    in_addr: int = 0
    out_addr: int = 0
    kind: int = 0
    kh: int = 1
    kw: int = 1
    sh: int = 1
    sw: int = 1
    in_h: int = 1
    in_w: int = 1
    channels: int = 1
    out_h: int = 1
    out_w: int = 1
    shift: int = 0
    lo: int = -128
    hi: int = 127
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0
    pad_value: int = 0
    opcode: ClassVar[Opcode] = Opcode.POOL
    engine: ClassVar[int] = POOL_E


@dataclass(slots=True)
class Elew(Insn):
    """out[i] = clip(round_half_up(((a[i] << shift_a) + (b[i] << shift_b)), out_shift), lo, hi)
    for `count` int8 elements; a and b are read from buffers a_buf / b_buf (IN or OUT)."""
    a_buf: int = Buf.IN
    a_addr: int = 0
    b_buf: int = Buf.IN
    b_addr: int = 0
    out_addr: int = 0
    count: int = 1
    shift_a: int = 0
    shift_b: int = 0
    out_shift: int = 0
    lo: int = -128
    hi: int = 127
    opcode: ClassVar[Opcode] = Opcode.ELEW
    engine: ClassVar[int] = MISC_E


@dataclass(slots=True)
class End(Insn):
    """The end of the stream: done when every engine has drained."""
    opcode: ClassVar[Opcode] = Opcode.END
    engine: ClassVar[int] = -1


CLASSES = {c.opcode: c for c in (Load, Save, Conv, Pool, Elew, End)}
_FIELDS = {op: tuple(f.name for f in fields(cls) if f.name not in ("wait", "signal"))
           for op, cls in CLASSES.items()}
for _op, _names in _FIELDS.items():
    assert HEADER_BITS + sum(WIDTHS[n] for n in _names) <= INSN_BYTES * 8, _op


def _range(name: str) -> tuple[int, int]:
    bits = WIDTHS[name]
    if name in SIGNED:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


_RANGES = {op: tuple((n, *_range(n)) for n in names) for op, names in _FIELDS.items()}


def check_insn(insn: Insn, index: int | None = None) -> None:
    """IsaError naming the instruction and field when a value does not fit its bits."""
    for name in ("wait", "signal"):
        v = getattr(insn, name)
        if type(v) is not int or not 0 <= v < 1 << len(ENGINES):
            where = f"instruction #{index} " if index is not None else ""
            raise IsaError(f"{where}{insn.opcode.name}: {name}={v!r} is not a mask of the "
                           f"{len(ENGINES)} engines")
    for name, lo, hi in _RANGES[insn.opcode]:
        v = getattr(insn, name)
        # exact ints pass fast; IntEnums are ints; bools and NumPy integers are refused
        if (v.__class__ is not int and (not isinstance(v, int) or isinstance(v, bool))) \
                or not lo <= v <= hi:
            where = f"instruction #{index} " if index is not None else ""
            raise IsaError(f"{where}{insn.opcode.name}: field {name}={v!r} outside {lo}..{hi} "
                           f"({WIDTHS[name]} bits)")


def encode_insn(insn: Insn, index: int | None = None) -> bytes:
    check_insn(insn, index)
    word = int(insn.opcode) | insn.wait << 4 | insn.signal << 9
    pos = HEADER_BITS
    for name in _FIELDS[insn.opcode]:
        bits = WIDTHS[name]
        word |= (getattr(insn, name) & ((1 << bits) - 1)) << pos
        pos += bits
    return word.to_bytes(INSN_BYTES, "little")


def decode_insn(raw: bytes, index: int | None = None) -> Insn:
    where = f"instruction #{index}" if index is not None else "instruction"
    if len(raw) != INSN_BYTES:
        raise IsaError(f"{where}: {len(raw)} bytes, expected {INSN_BYTES}")
    word = int.from_bytes(raw, "little")
    op = word & 0xF
    if op not in CLASSES:
        raise IsaError(f"{where}: unknown opcode {op}")
    opcode = Opcode(op)
    values = {"wait": (word >> 4) & 0x1F, "signal": (word >> 9) & 0x1F}
    pos = HEADER_BITS
    for name in _FIELDS[opcode]:
        bits = WIDTHS[name]
        v = (word >> pos) & ((1 << bits) - 1)
        if name in SIGNED and v >> (bits - 1):
            v -= 1 << bits
        values[name] = v
        pos += bits
    if word >> pos:
        raise IsaError(f"{where}: {opcode.name} has non-zero bits above its fields "
                       f"(bit {pos} on)")
    return CLASSES[opcode](**values)


def encode_stream(insns) -> bytes:
    return b"".join(encode_insn(insn, i) for i, insn in enumerate(insns))


def decode_stream(raw: bytes) -> list[Insn]:
    if len(raw) % INSN_BYTES:
        raise IsaError(f"stream of {len(raw)} bytes is not a whole number of "
                       f"{INSN_BYTES}-byte instructions")
    return [decode_insn(raw[i:i + INSN_BYTES], i // INSN_BYTES)
            for i in range(0, len(raw), INSN_BYTES)]


def field_names(opcode: Opcode) -> tuple[str, ...]:
    return _FIELDS[opcode]


__all__ = ["Act", "Buf", "CLASSES", "CONV_E", "Conv", "ENGINES", "Elew", "End", "INSN_BYTES",
           "Insn", "IsaError", "LOAD_E", "Load", "MISC_E", "Opcode", "POOL_E", "Pool",
           "SAVE_E", "Save", "SIGNED", "WIDTHS", "check_insn", "decode_insn", "decode_stream",
           "encode_insn", "encode_stream", "field_names"]

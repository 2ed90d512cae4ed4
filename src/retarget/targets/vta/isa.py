"""VTA instructions as typed dataclasses, and their binary encoding.

The dataclasses are the one in-memory form used by the runtime builder, the simulator,
the cycle model and the disassembler. Encoding/decoding to 128-bit instruction words and
32-bit micro-op words follows ../shared/specs/vta.md for the default config; for other
configs the index-field widths derive from the buffer depths (see `IsaLayout`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from functools import lru_cache
from operator import attrgetter

import numpy as np

from ...errors import TargetError


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
_FIELD_NAMES = {cls: tuple(f.name for f in fields(cls))
                for cls in (MemInsn, GemmInsn, AluInsn, FinishInsn)}


def with_deps(insn: Insn, pop_prev: bool | None = None, pop_next: bool | None = None,
              push_prev: bool | None = None, push_next: bool | None = None) -> Insn:
    """`insn` with the given dependency flags changed (None: kept). What dataclasses.replace
    does, several times faster: a stream builder does this for most instructions it emits."""
    d = insn.deps
    deps = Deps(d.pop_prev if pop_prev is None else pop_prev,
                d.pop_next if pop_next is None else pop_next,
                d.push_prev if push_prev is None else push_prev,
                d.push_next if push_next is None else push_next)
    cls = type(insn)
    at, before, after = _DEPS_SPLIT[cls]
    if at:                                    # MemInsn: opcode, deps, ...
        return cls(before(insn), deps, *after(insn))
    return cls(deps, *after(insn)) if after is not None else cls(deps)


def _deps_split(cls) -> tuple:
    """(index of deps, getter of the field before it, getter of the fields after it) for
    with_deps (each getter None when there is nothing there)."""
    names = _FIELD_NAMES[cls]
    at = names.index("deps")
    rest = names[at + 1:]
    return (at, attrgetter(names[0]) if at else None,
            (attrgetter(*rest) if len(rest) > 1 else (lambda i, n=rest[0]: (getattr(i, n),)))
            if rest else None)


_DEPS_SPLIT = {cls: _deps_split(cls) for cls in _FIELD_NAMES}


@dataclass(frozen=True, slots=True)
class Uop:
    """A micro-op: indices into ACC (dst), INP or ACC (src) and WGT (wgt)."""
    dst_idx: int
    src_idx: int
    wgt_idx: int = 0


# ---------------------------------------------------------------------------------------------
# Binary layout
# ---------------------------------------------------------------------------------------------

class IsaError(TargetError):
    """A malformed instruction or micro-op word, or a value that does not fit its field."""


# Widths fixed by the ISA whatever the config (the published hw_spec's MEMOP/LOOP widths).
OPCODE_BITS = 3
MEM_TYPE_BITS = 3
SRAM_BASE_BITS = 16
DRAM_BASE_BITS = 32
SIZE_BITS = 16          # y_size, x_size
STRIDE_BITS = 16
PAD_BITS = 4
ITER_BITS = 14          # iter_out, iter_in
ALU_OP_BITS = 3
IMM_BITS = 16

INSN_BYTES = 16
UOP_BYTES = 4


@dataclass(frozen=True, slots=True)
class Field:
    """One bit field: bits [lo + width - 1 : lo] of a 128-bit instruction or a 32-bit uop."""
    name: str
    lo: int
    width: int

    @property
    def hi(self) -> int:
        return self.lo + self.width - 1

    @property
    def max(self) -> int:
        return (1 << self.width) - 1


def _pack(names_widths: list[tuple[str, int]], start: int) -> tuple[tuple[Field, ...], int]:
    """Lay fields out contiguously from bit `start`; returns them and the next free bit."""
    out = []
    for name, width in names_widths:
        out.append(Field(name, start, width))
        start += width
    return tuple(out), start


@dataclass(frozen=True, slots=True)
class IsaLayout:
    """Bit positions of every field for one VTA configuration.

    For the default (pynq) config this is exactly the table in specs/vta.md. Index-field widths
    derive from buffer depths like the published hardware: uop_bgn = log2(uop depth), uop_end one
    bit more (it is an exclusive bound), dst/src factors = log2(acc/inp depth), wgt factors =
    log2(wgt depth); micro-op dst/src/wgt = log2(acc / max(inp, acc) / wgt depth) — src is wide
    enough for both GEMM (indexes INP) and ALU (indexes ACC).
    """
    common: tuple[Field, ...]      # opcode, pop_prev, pop_next, push_prev, push_next
    mem: tuple[Field, ...]         # LOAD/STORE fields after the common ones
    gemm: tuple[Field, ...]        # GEMM fields after the common ones
    alu: tuple[Field, ...]         # ALU fields after the common ones
    uop: tuple[Field, ...]         # uop_dst, uop_src, uop_wgt within a 32-bit word
    uop_depth: int
    inp_depth: int
    wgt_depth: int
    acc_depth: int

    def field(self, group: str, name: str) -> Field:
        for f in getattr(self, group):
            if f.name == name:
                return f
        raise KeyError(f"no field {name!r} in {group}")


def _log2_depth(depth: int) -> int:
    # A depth of 1 still needs a 1-bit field (index 0); depths are powers of two by construction.
    return max(1, (depth - 1).bit_length())


def derive_layout(cfg) -> IsaLayout:
    """Compute the layout for `cfg` (a VTAConfig); TargetError if a field cannot fit its word."""
    def bad(msg):
        raise TargetError(f"invalid VTA config {cfg.name!r}: {msg}")

    uop_w = _log2_depth(cfg.uop_depth)
    inp_w = _log2_depth(cfg.inp_depth)
    wgt_w = _log2_depth(cfg.wgt_depth)
    acc_w = _log2_depth(cfg.acc_depth)
    for what, depth in (("uop", cfg.uop_depth), ("inp", cfg.inp_depth), ("wgt", cfg.wgt_depth),
                        ("acc", cfg.acc_depth), ("out", cfg.out_depth)):
        if depth > 1 << SRAM_BASE_BITS:
            bad(f"{what} buffer depth {depth} exceeds what the {SRAM_BASE_BITS}-bit sram_base "
                f"field can address ({1 << SRAM_BASE_BITS})")

    common, nxt = _pack([("opcode", OPCODE_BITS), ("pop_prev", 1), ("pop_next", 1),
                         ("push_prev", 1), ("push_next", 1)], 0)
    mem_lo, mem_lo_end = _pack([("memory_type", MEM_TYPE_BITS), ("sram_base", SRAM_BASE_BITS),
                                ("dram_base", DRAM_BASE_BITS)], nxt)
    mem_hi, _ = _pack([("y_size", SIZE_BITS), ("x_size", SIZE_BITS), ("x_stride", STRIDE_BITS),
                       ("y_pad_0", PAD_BITS), ("y_pad_1", PAD_BITS), ("x_pad_0", PAD_BITS),
                       ("x_pad_1", PAD_BITS)], 64)
    assert mem_lo_end <= 64
    # GEMM/ALU low word: reset, uop range, loop extents.
    cmp_lo, cmp_lo_end = _pack([("reset", 1), ("uop_bgn", uop_w), ("uop_end", uop_w + 1),
                                ("iter_out", ITER_BITS), ("iter_in", ITER_BITS)], nxt)
    if cmp_lo_end > 64:
        bad(f"uop buffer depth {cfg.uop_depth} needs a {uop_w}-bit uop_bgn and {uop_w + 1}-bit "
            f"uop_end; the GEMM/ALU low word would need {cmp_lo_end} bits > 64 "
            f"(max uop depth {1 << ((64 - nxt - 1 - 2 * ITER_BITS - 1) // 2)})")
    factors, fac_end = _pack([("dst_factor_out", acc_w), ("dst_factor_in", acc_w),
                              ("src_factor_out", inp_w), ("src_factor_in", inp_w)], 64)
    wgt_f, gemm_end = _pack([("wgt_factor_out", wgt_w), ("wgt_factor_in", wgt_w)], fac_end)
    if gemm_end > 128:
        bad(f"acc depth {cfg.acc_depth}, inp depth {cfg.inp_depth} and wgt depth "
            f"{cfg.wgt_depth} need {acc_w}+{inp_w}+{wgt_w}-bit loop factors (x2); the GEMM "
            f"high word would need {gemm_end - 64} bits > 64")
    alu_f, alu_end = _pack([("alu_op", ALU_OP_BITS), ("use_imm", 1), ("imm", IMM_BITS)], fac_end)
    if alu_end > 128:
        bad(f"acc depth {cfg.acc_depth} and inp depth {cfg.inp_depth} need {acc_w}+{inp_w}-bit "
            f"loop factors (x2); the ALU high word would need {alu_end - 64} bits > 64")
    uop_src_w = max(inp_w, acc_w)
    uop, uop_end = _pack([("dst", acc_w), ("src", uop_src_w), ("wgt", wgt_w)], 0)
    if uop_end > 32:
        bad(f"a micro-op needs {acc_w}+{uop_src_w}+{wgt_w} = {uop_end} bits for its acc/src/wgt "
            f"indices (depths {cfg.acc_depth}/{max(cfg.inp_depth, cfg.acc_depth)}/"
            f"{cfg.wgt_depth}) > 32")
    return IsaLayout(common=common, mem=mem_lo + mem_hi, gemm=cmp_lo + factors + wgt_f,
                     alu=cmp_lo + factors + alu_f, uop=uop, uop_depth=cfg.uop_depth,
                     inp_depth=cfg.inp_depth, wgt_depth=cfg.wgt_depth, acc_depth=cfg.acc_depth)


@lru_cache(maxsize=64)
def layout_for(cfg) -> IsaLayout:
    """The (cached) layout of `cfg`; raises TargetError if the config's fields cannot fit."""
    return derive_layout(cfg)


# ---------------------------------------------------------------------------------------------
# Encoding / decoding
# ---------------------------------------------------------------------------------------------

def _where(index: int | None) -> str:
    return f"instruction {index}" if index is not None else "instruction"


def _put(word: int, f: Field, value: int, what: str) -> int:
    value = int(value)
    if not 0 <= value <= f.max:
        raise IsaError(f"{what}: field {f.name}={value} does not fit its {f.width}-bit field "
                       f"(0..{f.max})")
    return word | (value << f.lo)


def _get(word: int, f: Field) -> int:
    return (word >> f.lo) & f.max


def _deps_values(d: Deps) -> tuple[int, int, int, int]:
    return int(d.pop_prev), int(d.pop_next), int(d.push_prev), int(d.push_next)


def _fields_values(insn: Insn, layout: IsaLayout, what: str) -> tuple[tuple[Field, ...], tuple]:
    """Every field of `insn` with the unsigned value it encodes, in layout order (IsaError for an
    opcode, memory type or immediate that cannot be encoded at all)."""
    opcode = insn.opcode
    common = (int(opcode),) + _deps_values(insn.deps)
    if isinstance(insn, MemInsn):
        if opcode not in (Opcode.LOAD, Opcode.STORE):
            raise IsaError(f"{what}: a memory instruction must be LOAD or STORE, not {opcode!r}")
        values = (int(insn.memory_type), insn.sram_base, insn.dram_base, insn.y_size, insn.x_size,
                  insn.x_stride, insn.y_pad_0, insn.y_pad_1, insn.x_pad_0, insn.x_pad_1)
        return layout.common + layout.mem, common + values
    if isinstance(insn, GemmInsn):
        values = (int(insn.reset), insn.uop_bgn, insn.uop_end, insn.iter_out, insn.iter_in,
                  insn.dst_factor_out, insn.dst_factor_in, insn.src_factor_out,
                  insn.src_factor_in, insn.wgt_factor_out, insn.wgt_factor_in)
        return layout.common + layout.gemm, common + values
    if isinstance(insn, AluInsn):
        imm = int(insn.imm)
        lo_imm, hi_imm = -(1 << (IMM_BITS - 1)), (1 << (IMM_BITS - 1)) - 1
        if not lo_imm <= imm <= hi_imm:
            raise IsaError(f"{what}: imm={imm} does not fit the signed {IMM_BITS}-bit field "
                           f"({lo_imm}..{hi_imm})")
        values = (int(insn.reset), insn.uop_bgn, insn.uop_end, insn.iter_out, insn.iter_in,
                  insn.dst_factor_out, insn.dst_factor_in, insn.src_factor_out,
                  insn.src_factor_in, int(insn.alu_op), int(insn.use_imm),
                  imm & ((1 << IMM_BITS) - 1))
        return layout.common + layout.alu, common + values
    if isinstance(insn, FinishInsn):
        return layout.common, common
    raise IsaError(f"{what}: not an instruction: {insn!r}")


def encode_insn(insn: Insn, layout: IsaLayout, index: int | None = None) -> bytes:
    """Encode one instruction as 16 bytes, little-endian, low 64-bit word first."""
    what = f"{_where(index)} ({type(insn).__name__})"
    word = 0
    for f, v in zip(*_fields_values(insn, layout, what)):
        word = _put(word, f, v, what)
    return word.to_bytes(INSN_BYTES, "little")


def decode_insn(data: bytes, layout: IsaLayout, index: int | None = None) -> Insn:
    """Decode 16 bytes (as written by encode_insn). Unknown opcodes, memory types or ALU ops
    raise IsaError naming the instruction index when given."""
    if len(data) != INSN_BYTES:
        raise IsaError(f"{_where(index)}: expected {INSN_BYTES} bytes, got {len(data)}")
    word = int.from_bytes(data, "little")
    raw_op, pop_prev, pop_next, push_prev, push_next = (_get(word, f) for f in layout.common)
    deps = Deps(bool(pop_prev), bool(pop_next), bool(push_prev), bool(push_next))
    try:
        opcode = Opcode(raw_op)
    except ValueError:
        raise IsaError(f"{_where(index)}: unknown opcode {raw_op} (word 0x{word:032x}); known: "
                       + ", ".join(f"{o.name}={o.value}" for o in Opcode)) from None
    if opcode is Opcode.FINISH:
        return FinishInsn(deps)
    if opcode in (Opcode.LOAD, Opcode.STORE):
        v = [_get(word, f) for f in layout.mem]
        try:
            mtype = MemType(v[0])
        except ValueError:
            raise IsaError(f"{_where(index)}: {opcode.name} with unknown memory type {v[0]}; "
                           "known: " + ", ".join(f"{m.name}={m.value}" for m in MemType)) from None
        return MemInsn(opcode, deps, mtype, *v[1:])
    if opcode is Opcode.GEMM:
        v = [_get(word, f) for f in layout.gemm]
        return GemmInsn(deps, bool(v[0]), *v[1:])
    v = [_get(word, f) for f in layout.alu]
    try:
        alu_op = AluOp(v[9])
    except ValueError:
        raise IsaError(f"{_where(index)}: ALU with unknown alu_opcode {v[9]}; known: "
                       + ", ".join(f"{a.name}={a.value}" for a in AluOp)) from None
    imm = v[11] - (1 << IMM_BITS) if v[11] >> (IMM_BITS - 1) else v[11]
    return AluInsn(deps, bool(v[0]), *v[1:9], alu_op, bool(v[10]), imm)


_DEPS_ATTRS = ("deps.pop_prev", "deps.pop_next", "deps.push_prev", "deps.push_next")
# Per instruction kind: (opcode column or None when the opcode is a field, attribute getter of
# the remaining columns), in the order _fields_values lists them.
_COLUMNS = {
    MemInsn: (None, attrgetter("opcode", *_DEPS_ATTRS, "memory_type", "sram_base", "dram_base",
                               "y_size", "x_size", "x_stride", "y_pad_0", "y_pad_1", "x_pad_0",
                               "x_pad_1")),
    GemmInsn: (Opcode.GEMM, attrgetter(*_DEPS_ATTRS, "reset", "uop_bgn", "uop_end", "iter_out",
                                       "iter_in", "dst_factor_out", "dst_factor_in",
                                       "src_factor_out", "src_factor_in", "wgt_factor_out",
                                       "wgt_factor_in")),
    AluInsn: (Opcode.ALU, attrgetter(*_DEPS_ATTRS, "reset", "uop_bgn", "uop_end", "iter_out",
                                     "iter_in", "dst_factor_out", "dst_factor_in",
                                     "src_factor_out", "src_factor_in", "alu_op", "use_imm",
                                     "imm")),
    FinishInsn: (Opcode.FINISH, attrgetter(*_DEPS_ATTRS)),
}
_KIND_CODE = {cls: i for i, cls in enumerate(_COLUMNS)}


def _kind_fields(cls, layout: IsaLayout) -> tuple[Field, ...]:
    return layout.common + {MemInsn: layout.mem, GemmInsn: layout.gemm, AluInsn: layout.alu,
                            FinishInsn: ()}[cls]


def encode_stream(insns, layout: IsaLayout) -> bytes:
    """Concatenate the encodings of `insns` (16 bytes each). Vectorised: the field values of
    each instruction kind are read as whole columns (attrgetter), range-checked and packed with
    NumPy (no field lies across the two 64-bit words: derive_layout). Any problem re-encodes
    one by one, so the IsaError names the first offending instruction exactly as encode_insn
    does."""
    insns = list(insns)
    words = np.zeros((len(insns), 2), dtype=np.uint64)
    try:
        kinds = np.fromiter(map(_KIND_CODE.__getitem__, map(type, insns)), dtype=np.int8,
                            count=len(insns))
        for cls, code in _KIND_CODE.items():
            idx = np.flatnonzero(kinds == code)
            if not idx.size:
                continue
            opcode, getter = _COLUMNS[cls]
            rows = list(map(getter, map(insns.__getitem__, idx.tolist())))
            fields_ = _kind_fields(cls, layout)
            cols = np.empty((idx.size, len(fields_)), dtype=np.int64)
            if opcode is None:
                cols[:] = np.array(rows, dtype=np.int64).reshape(idx.size, len(fields_))
                if ((cols[:, 0] != Opcode.LOAD) & (cols[:, 0] != Opcode.STORE)).any():
                    raise IsaError("a memory instruction that is neither LOAD nor STORE")
            else:
                cols[:, 0] = int(opcode)
                cols[:, 1:] = np.array(rows, dtype=np.int64).reshape(idx.size,
                                                                     len(fields_) - 1)
            if cls is AluInsn:
                imm = cols[:, -1]
                if ((imm < -(1 << (IMM_BITS - 1))) | (imm > (1 << (IMM_BITS - 1)) - 1)).any():
                    raise IsaError("imm does not fit")
                cols[:, -1] = imm & ((1 << IMM_BITS) - 1)
            maxes = np.array([f.max for f in fields_], dtype=np.int64)
            if ((cols < 0) | (cols > maxes)).any():
                raise IsaError("a field does not fit")
            packed = np.zeros((idx.size, 2), dtype=np.uint64)
            for k, f in enumerate(fields_):
                half = f.lo // 64
                packed[:, half] |= cols[:, k].astype(np.uint64) << np.uint64(f.lo % 64)
            words[idx] = packed
    except (IsaError, TypeError, ValueError, OverflowError, KeyError):
        return b"".join(encode_insn(insn, layout, i) for i, insn in enumerate(insns))
    return words.astype("<u8").tobytes()


def decode_stream(data: bytes, layout: IsaLayout) -> list[Insn]:
    """Decode a whole stream; its length must be a multiple of 16 bytes."""
    if len(data) % INSN_BYTES:
        raise IsaError(f"instruction stream of {len(data)} bytes is not a whole number of "
                       f"{INSN_BYTES}-byte instructions")
    return [decode_insn(data[i:i + INSN_BYTES], layout, i // INSN_BYTES)
            for i in range(0, len(data), INSN_BYTES)]


def encode_uops(uops, layout: IsaLayout) -> np.ndarray:
    """Micro-ops (a sequence of Uop) -> uint32 words; checks each index fits its field."""
    n = len(uops)
    cols = np.zeros((3, n), dtype=np.int64)
    for i, u in enumerate(uops):
        cols[0, i], cols[1, i], cols[2, i] = u.dst_idx, u.src_idx, u.wgt_idx
    return encode_uop_arrays(cols[0], cols[1], cols[2], layout)


def encode_uop_arrays(dst, src, wgt, layout: IsaLayout) -> np.ndarray:
    """Vectorised form of encode_uops over three equal-length integer arrays."""
    words = np.zeros(len(dst), dtype=np.uint32)
    for f, arr in zip(layout.uop, (dst, src, wgt)):
        arr = np.asarray(arr, dtype=np.int64)
        bad = np.flatnonzero((arr < 0) | (arr > f.max))
        if bad.size:
            i = int(bad[0])
            raise IsaError(f"micro-op {i}: {f.name}_idx={int(arr[i])} does not fit its "
                           f"{f.width}-bit field (0..{f.max})")
        words |= (arr.astype(np.uint32) << np.uint32(f.lo))
    return words


def decode_uops(words, layout: IsaLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint32 micro-op words -> (dst, src, wgt) int64 index arrays (vectorised)."""
    w = np.asarray(words, dtype=np.uint32).astype(np.int64)
    return tuple((w >> f.lo) & f.max for f in layout.uop)


# The runtime's stage numbering (dep_push/dep_pop arguments). STAGE_ALU exists only in the
# `alu_stage` variant (VTAConfig.alu_stage): a fourth module, between compute and store, that
# runs the ALU instructions (docs/cycle-model.md, "The alu_stage variant").
STAGE_LOAD, STAGE_COMPUTE, STAGE_STORE, STAGE_ALU = 1, 2, 3, 4

# Token queues by name. The first four are the published design's; g2a and a2s exist only with
# the ALU stage, where the compute module's push_next feeds g2a (accumulator tile ready for
# the ALU) and the store module's pop_prev reads a2s (ALU result ready), instead of g2s.
QUEUE_NAMES = ("l2g", "g2l", "g2s", "s2g", "g2a", "a2s")
# Per module, the queue each dependency flag refers to: (pop_prev, pop_next, push_prev,
# push_next); None: the module has no such neighbour.
_DEP_QUEUES_BASE = {"load": (None, "g2l", None, "l2g"), "compute": ("l2g", "s2g", "g2l", "g2s"),
                    "store": ("g2s", None, "s2g", None)}
_DEP_QUEUES_ALU = {"load": (None, "g2l", None, "l2g"), "compute": ("l2g", "s2g", "g2l", "g2a"),
                   "store": ("a2s", None, "s2g", None), "alu": ("g2a", None, None, "a2s")}
# (from stage, to stage) -> (the pusher's flag, the popper's flag)
_TOKEN_FLAGS_BASE = {(1, 2): ("push_next", "pop_prev"), (2, 1): ("push_prev", "pop_next"),
                     (2, 3): ("push_next", "pop_prev"), (3, 2): ("push_prev", "pop_next")}
_TOKEN_FLAGS_ALU = {(1, 2): ("push_next", "pop_prev"), (2, 1): ("push_prev", "pop_next"),
                    (2, 4): ("push_next", "pop_prev"), (4, 3): ("push_next", "pop_prev"),
                    (3, 2): ("push_prev", "pop_next")}


def dep_queues(alu_stage: bool = False) -> dict[str, tuple]:
    """Module name -> the queue names of its (pop_prev, pop_next, push_prev, push_next) flags.
    Modules: load, compute, store (and alu with the ALU stage)."""
    return _DEP_QUEUES_ALU if alu_stage else _DEP_QUEUES_BASE


def token_flags(alu_stage: bool = False) -> dict[tuple[int, int], tuple[str, str]]:
    """(from stage, to stage) -> (push flag of the sender, pop flag of the receiver) for every
    token queue of the design."""
    return _TOKEN_FLAGS_ALU if alu_stage else _TOKEN_FLAGS_BASE


def stage_of(insn: Insn, alu_stage: bool = False) -> int:
    """The module that runs `insn`: 1 = load, 2 = compute, 3 = store (the runtime's numbering),
    4 = alu for ALU instructions when `alu_stage` (dispatch by opcode). LOADs of
    UOP/ACC/ACC_8BIT run on the compute module, like the published hardware."""
    if isinstance(insn, MemInsn):
        if insn.opcode is Opcode.STORE:
            return STAGE_STORE
        return STAGE_LOAD if insn.memory_type in (MemType.INP, MemType.WGT) else STAGE_COMPUTE
    if alu_stage and isinstance(insn, AluInsn):
        return STAGE_ALU
    return STAGE_COMPUTE


def is_token_carrier(insn: Insn) -> bool:
    """A no-op that only moves dependency tokens: a zero-size LOAD/STORE, or (ALU stage) an
    ALU instruction over no micro-ops."""
    if isinstance(insn, MemInsn):
        return insn.x_size == 0
    return isinstance(insn, AluInsn) and insn.uop_end == insn.uop_bgn

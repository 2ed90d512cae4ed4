"""The simulator's state (DRAM and the on-chip SRAMs) and the two DMA instructions, LOAD and STORE.

SRAMs are typed NumPy arrays indexed by entry, exactly as the micro-ops index them:

    uop [uop_depth, 3]              int64   (dst, src, wgt) of each decoded micro-op
    inp [inp_depth, BATCH, BLOCK_IN]  int8
    wgt [wgt_depth, BLOCK_OUT, BLOCK_IN] int8
    acc [acc_depth, BATCH, BLOCK_OUT] int32   (the OUT buffer is acc narrowed on STORE)

Next to inp and wgt the state keeps float32 mirrors laid out for matrix products (`inp_f` with
one extra all-zero entry used as padding, `wgt_t` transposed to [BLOCK_IN, BLOCK_OUT]). They are
refreshed by every LOAD, so the vectorised GEMM never converts int8 data per instruction. Why
float32 is exact, and where the GEMM splits its sums to keep it so: compute.EXACT_TERMS.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import VTAConfig
from ..isa import IsaLayout, MemInsn, MemType, decode_uops, layout_for
from .errors import SimFault, SimulationError


def dram_elem_bytes(cfg: VTAConfig, mtype: MemType) -> int:
    """Bytes of one DRAM element for a LOAD/STORE of `mtype` (dram_base counts these)."""
    return {MemType.UOP: cfg.uop_elem_bytes, MemType.INP: cfg.inp_elem_bytes,
            MemType.WGT: cfg.wgt_elem_bytes, MemType.ACC: cfg.acc_elem_bytes,
            MemType.OUT: cfg.out_elem_bytes,
            # ACC_8BIT: int8 in DRAM, one byte per accumulator lane, sign-extended on load.
            MemType.ACC_8BIT: cfg.batch * cfg.block_out}[mtype]


@dataclass(slots=True)
class SimMemory:
    """DRAM plus SRAMs of one VTA instance. `dram` is a 1-D uint8 array (it may be a view of a
    device's memory: LOAD/STORE read and write it in place)."""
    cfg: VTAConfig
    dram: np.ndarray
    layout: IsaLayout = field(init=False)
    uop: np.ndarray = field(init=False)
    inp: np.ndarray = field(init=False)
    wgt: np.ndarray = field(init=False)
    acc: np.ndarray = field(init=False)
    inp_f: np.ndarray = field(init=False)
    wgt_t: np.ndarray = field(init=False)
    elem_bytes: dict = field(init=False)     # MemType -> DRAM element bytes
    # The device memory the running task was given (device/base.py TaskMemory); None lets
    # a stream touch all of DRAM (a bare Simulator with no device around it).
    confine: Any = None

    def __post_init__(self):
        c = self.cfg
        if not (isinstance(self.dram, np.ndarray) and self.dram.dtype == np.uint8
                and self.dram.ndim == 1 and self.dram.flags.c_contiguous):
            raise SimulationError("the simulator's DRAM must be a contiguous 1-D uint8 array")
        self.layout = layout_for(c)
        self.elem_bytes = {m: dram_elem_bytes(c, m) for m in MemType}
        self.uop = np.zeros((c.uop_depth, 3), dtype=np.int64)
        self.inp = np.zeros((c.inp_depth, c.batch, c.block_in), dtype=np.int8)
        self.wgt = np.zeros((c.wgt_depth, c.block_out, c.block_in), dtype=np.int8)
        self.acc = np.zeros((c.acc_depth, c.batch, c.block_out), dtype=np.int32)
        self.inp_f = np.zeros((c.inp_depth + 1, c.batch, c.block_in), dtype=np.float32)
        self.wgt_t = np.zeros((c.wgt_depth, c.block_in, c.block_out), dtype=np.float32)

    @property
    def inp_pad_index(self) -> int:
        """Index of the always-zero entry of `inp_f` (used to pad gathered GEMM operands)."""
        return self.cfg.inp_depth

    # ---- element geometry per memory type ------------------------------------------------------

    def _target(self, mtype: MemType) -> tuple[np.ndarray, int, str]:
        """(SRAM array, element bytes in DRAM, buffer name) for a LOAD of `mtype`."""
        buffers = {MemType.INP: (self.inp, "inp"), MemType.WGT: (self.wgt, "wgt"),
                   MemType.ACC: (self.acc, "acc"), MemType.ACC_8BIT: (self.acc, "acc"),
                   MemType.UOP: (self.uop, "uop")}
        if mtype in buffers:
            sram, name = buffers[mtype]
            return sram, self.elem_bytes[mtype], name
        raise SimFault(f"a LOAD cannot target the {mtype.name} buffer (only UOP, WGT, INP, ACC, "
                       "ACC_8BIT)")

    def _dram_rows(self, byte_base: int, rows: int, row_bytes: int, stride_bytes: int,
                   what: str) -> tuple[int, int]:
        """Bounds-check a 2-D DRAM access; returns (first byte, one past the last byte)."""
        end = byte_base + (rows - 1) * stride_bytes + row_bytes
        if byte_base < 0 or end > self.dram.size:
            raise SimFault(f"DRAM address outside memory: {what} touches bytes "
                           f"[0x{byte_base:x}, 0x{end:x}) but DRAM has {self.dram.size} bytes "
                           f"(0x{self.dram.size:x})")
        if self.confine is not None:
            problem = self.confine.violation(byte_base, end)
            if problem:
                raise SimFault(f"memory confinement: {what}: {problem}")
        return byte_base, end

    # ---- LOAD ----------------------------------------------------------------------------------

    def prepare_load(self, insn: MemInsn) -> "PreparedLoad":
        """Check a LOAD with x_size > 0 (SRAM range, DRAM bounds, confinement) and resolve it to
        views of the SRAM and DRAM arrays; run_load then moves the data. A prepared load stays
        valid while the arrays do (a replayed stream runs its prepared loads again)."""
        sram, elem_bytes, name = self._target(insn.memory_type)
        depth = sram.shape[0]
        rows = insn.y_pad_0 + insn.y_size + insn.y_pad_1
        width = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        total = rows * width
        if insn.sram_base + total > depth:
            raise SimFault(f"{name} SRAM index out of range: the load writes entries "
                           f"[{insn.sram_base}, {insn.sram_base + total}) ({rows} rows x {width} "
                           f"incl. padding) but the {name} buffer has depth {depth}")
        raw, dram = self._read_dram(insn, elem_bytes) if insn.y_size else (None, None)
        region = sram[insn.sram_base:insn.sram_base + total].reshape((rows, width) + sram.shape[1:])
        y0, y1 = insn.y_pad_0, insn.y_pad_0 + insn.y_size
        x0, x1 = insn.x_pad_0, insn.x_pad_0 + insn.x_size
        pads = tuple(v for v in (region[:y0], region[y1:], region[y0:y1, :x0],
                                 region[y0:y1, x1:]) if v.size)
        lo, hi = insn.sram_base, insn.sram_base + total
        mirror = None   # keep the float mirrors in step with the int8 buffers they shadow
        if insn.memory_type is MemType.INP:
            mirror = (self.inp_f[lo:hi], self.inp[lo:hi])
        elif insn.memory_type is MemType.WGT:
            mirror = (self.wgt_t[lo:hi], self.wgt[lo:hi].transpose(0, 2, 1))
        data = region[y0:y1, x0:x1]
        if raw is not None and insn.memory_type is not MemType.UOP:
            raw = self._element_view(insn.memory_type, raw, data.shape[2:])
        return PreparedLoad(insn.memory_type, data, raw, pads, mirror, dram)

    def run_load(self, p: "PreparedLoad") -> None:
        for pad in p.pads:
            pad[...] = 0
        if p.raw is not None:
            if p.memory_type is MemType.UOP:
                p.data[...] = self._decode_uops(p.raw)
            else:   # ACC_8BIT sign-extends int8 to int32 here
                np.copyto(p.data, p.raw)
        if p.mirror is not None:
            np.copyto(*p.mirror)

    def _read_dram(self, insn: MemInsn, elem_bytes: int) -> tuple[np.ndarray, tuple[int, int]]:
        """The y_size x x_size elements a LOAD reads, as a [y, x, elem_bytes] uint8 view, and
        the byte range they span."""
        base = insn.dram_base * elem_bytes
        span = self._dram_rows(base, insn.y_size, insn.x_size * elem_bytes, insn.x_stride * elem_bytes,
                        f"LOAD {insn.memory_type.name} of {insn.y_size} rows x {insn.x_size} "
                        f"elements ({elem_bytes} B each, stride {insn.x_stride}) from element "
                        f"{insn.dram_base}")
        return self._dram_view(base, (insn.y_size, insn.x_size, elem_bytes),
                               (insn.x_stride * elem_bytes, elem_bytes, 1)), span

    def _dram_view(self, base: int, shape, strides) -> np.ndarray:
        """A strided view of DRAM (callers bounds-check first). np.ndarray over the buffer is
        ~50x cheaper than as_strided, which matters for streams of many small transfers."""
        return np.ndarray(shape, dtype=np.uint8, buffer=self.dram, offset=base, strides=strides)

    @staticmethod
    def _element_view(mtype: MemType, raw: np.ndarray, elem_shape: tuple[int, ...]) -> np.ndarray:
        """uint8 [y, x, bytes] DRAM view -> a view of the same bytes as SRAM elements (int8 for
        INP, WGT and ACC_8BIT, little-endian int32 for ACC); no copy."""
        y, x = raw.shape[:2]
        dtype = "<i4" if mtype is MemType.ACC else np.int8
        return raw.view(dtype).reshape((y, x) + elem_shape)

    def _decode_uops(self, raw: np.ndarray) -> np.ndarray:
        """uint8 [y, x, 4] -> [y, x, 3] (dst, src, wgt): 32-bit little-endian words decoded
        with the ISA's own field layout."""
        y, x = raw.shape[:2]
        words = np.ascontiguousarray(raw).view("<u4").reshape(-1)
        dst, src, wgt = decode_uops(words, self.layout)
        return np.stack([dst, src, wgt], axis=-1).reshape(y, x, 3)

    # ---- STORE ---------------------------------------------------------------------------------

    def prepare_store(self, insn: MemInsn) -> "PreparedStore | None":
        """Check a STORE of OUT (acc narrowed to int8, wrapping) and resolve it to (accumulator
        entries, DRAM rows); None when it writes nothing."""
        if insn.memory_type is not MemType.OUT:
            raise SimFault(f"STORE supports only the OUT buffer, not {insn.memory_type.name}")
        if insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1:
            raise SimFault("STORE does not support padding (pads must be 0)")
        n = insn.y_size * insn.x_size
        depth = self.acc.shape[0]
        if insn.sram_base + n > depth:
            raise SimFault(f"out SRAM index out of range: the store reads entries "
                           f"[{insn.sram_base}, {insn.sram_base + n}) but the out buffer has "
                           f"depth {depth}")
        if n == 0:
            return None
        elem_bytes = self.cfg.out_elem_bytes
        base = insn.dram_base * elem_bytes
        span = self._dram_rows(base, insn.y_size, insn.x_size * elem_bytes,
                               insn.x_stride * elem_bytes, f"STORE OUT of {insn.y_size} rows x {insn.x_size} elements "
                               f"({elem_bytes} B each, stride {insn.x_stride}) to element "
                               f"{insn.dram_base}")
        row_bytes, stride = insn.x_size * elem_bytes, insn.x_stride * elem_bytes
        acc = self.acc[insn.sram_base:insn.sram_base + n]
        if stride >= row_bytes:
            rows = self._dram_view(base, (insn.y_size, row_bytes), (stride, 1))
        else:   # overlapping DRAM rows: written one by one, in order, so later rows win
            rows = [self.dram[base + y * stride:base + y * stride + row_bytes]
                    for y in range(insn.y_size)]
        return PreparedStore(acc, (insn.y_size, row_bytes), rows, span)

    def run_store(self, p: "PreparedStore") -> None:
        # astype(int8) keeps the low 8 bits of each int32 lane: the hardware's truncation.
        narrowed = p.acc.astype(np.int8).view(np.uint8).reshape(p.shape)
        if isinstance(p.rows, np.ndarray):
            p.rows[...] = narrowed
        else:
            for y, row in enumerate(p.rows):
                row[...] = narrowed[y]


@dataclass(frozen=True, slots=True)
class PreparedLoad:
    """A checked LOAD as views: `data` (the SRAM entries written from DRAM) and `raw` (the DRAM
    elements it reads, typed like the SRAM's, or for UOP the raw bytes [y, x, 4]; None when
    nothing is read), the `pads` set to zero, and the float `mirror` (destination, source)
    refreshed after it."""
    memory_type: MemType
    data: np.ndarray
    raw: np.ndarray | None
    pads: tuple[np.ndarray, ...]
    mirror: tuple[np.ndarray, np.ndarray] | None
    dram: tuple[int, int] | None        # the DRAM byte range read, [lo, hi)


@dataclass(frozen=True, slots=True)
class PreparedStore:
    """A checked STORE: the accumulator entries it narrows and the DRAM rows it writes (one
    strided view, or a list of row views when rows overlap)."""
    acc: np.ndarray
    shape: tuple[int, int]
    rows: np.ndarray | list[np.ndarray]
    dram: tuple[int, int]               # the DRAM byte range written, [lo, hi)

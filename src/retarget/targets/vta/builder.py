"""The instruction-stream runtime (the VTA paper's JIT runtime, spec section "Runtime API").

`StreamBuilder` turns a sequence of runtime calls into a `Program`: the VTA instruction list,
the micro-op DRAM image and the DRAM layout (named buffers). It mirrors the published runtime:

- load_2d / store_2d emit LOAD / STORE instructions (with padding and strides);
- micro-op kernels (up to two affine loops over a list of uops) are stored once in DRAM and
  loaded into the uop SRAM only when not resident there (a ring allocator: a kernel that does not
  fit at the end wraps to 0 and evicts the kernels it overlaps);
- dep_pop(from, to) marks the *next* instruction of stage `to` as popping the token queue;
  dep_push(from, to) sets the push flag on the *last* instruction of the stream when it belongs to
  stage `from` (and has not got that flag already), otherwise it appends a no-op token carrier of
  that stage (LOAD INP / LOAD UOP / STORE OUT with x_size = 0);
- finish() makes the compute module wait for the load and store modules, then appends FINISH.

Stages are numbered as in the runtime: load = 1, compute = 2, store = 3; with the config's
`alu_stage`, ALU instructions run on a fourth stage, alu = 4, and the tokens flow
load <-> compute -> alu -> store -> compute (isa.token_flags). Two optional hooks let the
lowering order the micro-op buffer between the compute module (which loads micro-ops) and the
ALU module (which reads them): `before_uop_load()` runs before any LOAD UOP is built and
`before_alu()` before any ALU instruction is built (after its micro-ops were made resident).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from operator import is_
from typing import Iterable, Iterator

import numpy as np

from ...errors import TargetError
from ..accel.program import (DTYPES, DramBuffer, count, layout_from_json, layout_to_json,
                             read_buffer, read_stream, save_stream, write_buffers)
from .config import PRESETS, VTAConfig
from .isa import (ITER_BITS, NO_DEPS, STAGE_ALU, STAGE_COMPUTE, STAGE_LOAD, STAGE_STORE, AluInsn,
                  AluOp, Deps, FinishInsn, GemmInsn, Insn, IsaError, MemInsn, MemType, Opcode,
                  PAD_BITS, Uop, encode_stream, encode_uops, layout_for, stage_of, token_flags,
                  with_deps)
from .isa import decode_stream

_STAGE_NAMES = {STAGE_LOAD: "load", STAGE_COMPUTE: "compute", STAGE_STORE: "store",
                STAGE_ALU: "alu"}
PAD_MAX = (1 << PAD_BITS) - 1
_LOADABLE = frozenset((MemType.INP, MemType.WGT, MemType.ACC, MemType.ACC_8BIT))
class _Lazy:
    """An instruction's description for error messages, formatted only when one is raised
    (building the string for every instruction emitted cost more than checking it)."""
    __slots__ = ("fn", "args")

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __str__(self) -> str:
        return self.fn(*self.args)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _load_what(mem_type, n: int) -> str:
    return f"load_2d {mem_type.name} (instruction {n})"


def _store_what(n: int) -> str:
    return f"store_2d (instruction {n})"


def _gemm_what(n: int) -> str:
    return f"gemm (instruction {n})"


def _alu_what(op, n: int) -> str:
    return f"alu {op.name} (instruction {n})"


_POP_DEPS = {(prev, nxt): Deps(pop_prev=prev, pop_next=nxt)
             for prev in (False, True) for nxt in (False, True)}


@dataclass(frozen=True, slots=True)
class UopLoop:
    """One affine loop of a micro-op kernel: each iteration adds the factors to the indices."""
    extent: int
    dst_factor: int
    src_factor: int
    wgt_factor: int = 0


class KernelKey:
    """(uops, loops) with its hash computed once: the builder looks kernels up by it for every
    GEMM and ALU instruction, and hashing a tuple of micro-op dataclasses each time cost more
    than the rest of emitting them."""
    __slots__ = ("uops", "loops", "_hash")

    def __init__(self, uops: tuple, loops: tuple):
        self.uops, self.loops, self._hash = uops, loops, hash((uops, loops))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, KernelKey):
            return NotImplemented
        return self._hash == other._hash and self.uops == other.uops and self.loops == other.loops

    def __repr__(self) -> str:
        return f"KernelKey({self.uops!r}, {self.loops!r})"


@dataclass(frozen=True, slots=True)
class UopKernel:
    """Micro-ops plus up to two loops (outer first). Identity for caching is (uops, loops)."""
    uops: tuple[Uop, ...]
    loops: tuple[UopLoop, ...] = ()
    name: str = ""
    _key: KernelKey | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def key(self) -> KernelKey:
        k = self._key
        if k is None:
            k = KernelKey(self.uops, self.loops)
            object.__setattr__(self, "_key", k)
        return k

    def loop_params(self) -> tuple[int, int, int, int, int, int, int, int]:
        """(iter_out, iter_in, dst_out, dst_in, src_out, src_in, wgt_out, wgt_in)."""
        outer = self.loops[0] if self.loops else UopLoop(1, 0, 0, 0)
        inner = self.loops[1] if len(self.loops) > 1 else UopLoop(1, 0, 0, 0)
        return (outer.extent, inner.extent, outer.dst_factor, inner.dst_factor,
                outer.src_factor, inner.src_factor, outer.wgt_factor, inner.wgt_factor)

    def max_indices(self) -> tuple[int, int, int]:
        """The largest dst, src, wgt index any iteration touches."""
        reach = [0, 0, 0]
        for lp in self.loops:
            for i, f in enumerate((lp.dst_factor, lp.src_factor, lp.wgt_factor)):
                reach[i] += (lp.extent - 1) * f
        return (max(u.dst_idx for u in self.uops) + reach[0],
                max(u.src_idx for u in self.uops) + reach[1],
                max(u.wgt_idx for u in self.uops) + reach[2])


def make_kernel(uops: Iterable[Uop | tuple[int, ...]], loops: Iterable[UopLoop | tuple] = (),
                name: str = "") -> UopKernel:
    """Validate and build a kernel; tuples are accepted for uops (dst, src[, wgt]) and loops
    (extent, dst_factor, src_factor[, wgt_factor])."""
    us = tuple(u if isinstance(u, Uop) else Uop(*u) for u in uops)
    ls = tuple(lp if isinstance(lp, UopLoop) else UopLoop(*lp) for lp in loops)
    label = f"micro-op kernel {name!r}" if name else "micro-op kernel"
    if not us:
        raise TargetError(f"{label} has no micro-ops")
    if len(ls) > 2:
        raise TargetError(f"{label} has {len(ls)} loops; the hardware has at most 2")
    for lp in ls:
        if not 1 <= lp.extent < 1 << ITER_BITS:
            raise TargetError(f"{label}: loop extent {lp.extent} outside 1..{(1 << ITER_BITS) - 1}")
        if min(lp.dst_factor, lp.src_factor, lp.wgt_factor) < 0:
            raise TargetError(f"{label}: negative loop factor in {lp}")
    for u in us:
        if min(u.dst_idx, u.src_idx, u.wgt_idx) < 0:
            raise TargetError(f"{label}: negative index in {u}")
    return UopKernel(us, ls, name)


class KernelRecorder:
    """The paper's VTAUopLoopBegin / VTAUopPush / VTAUopLoopEnd as a small recorder:

        with builder.record_kernel("add") as k:
            with k.loop(4, 1, 1):      # extent, dst_factor, src_factor[, wgt_factor]
                k.push(0, 4)
        builder.alu(k.kernel, AluOp.ADD)
    """

    def __init__(self, name: str = ""):
        self.name = name
        self._uops: list[Uop] = []
        self._loops: list[UopLoop] = []
        self._open = 0
        self.kernel: UopKernel | None = None

    @contextlib.contextmanager
    def loop(self, extent: int, dst_factor: int, src_factor: int, wgt_factor: int = 0):
        if self._uops:
            raise TargetError(f"micro-op kernel {self.name!r}: loops must open before any push")
        self._loops.append(UopLoop(extent, dst_factor, src_factor, wgt_factor))
        self._open += 1
        yield
        self._open -= 1

    def push(self, dst: int, src: int, wgt: int = 0) -> None:
        self._uops.append(Uop(dst, src, wgt))

    def _close(self) -> UopKernel:
        self.kernel = make_kernel(self._uops, self._loops, self.name)
        return self.kernel


@dataclass(slots=True)
class Program:
    """What a StreamBuilder produces: instructions, the micro-op DRAM image, the DRAM layout."""
    config: VTAConfig
    insns: list[Insn]
    uops: np.ndarray                 # uint32 words: every kernel once, at byte `uop_base`
    uop_base: int                    # byte offset of the uop image in DRAM
    buffers: dict[str, DramBuffer]
    dram_bytes: int                  # bytes of DRAM the program spans
    stats: dict[str, int] = field(default_factory=dict)
    # Optional per-layer instruction spans (name, first, stop): instructions [first, stop)
    # belong to layer `name`. Filled by the lowering (LoweringContext); timing.simulate_timing
    # uses them for per-layer aggregates. Empty for hand-built programs.
    layers: list[tuple[str, int, int]] = field(default_factory=list)
    # (the instructions encoded, the layout, their encoding): the builder's finish() encodes the stream to
    # check every field, so saving it need not encode it again while `insns` holds the same
    # instruction objects
    _encoded: tuple | None = field(default=None, repr=False, compare=False)

    def stream(self) -> bytes:
        """The binary instruction stream (16 bytes per instruction, little-endian)."""
        layout = layout_for(self.config)
        if self._encoded is not None:
            done, lay, raw = self._encoded
            if lay == layout and len(done) == len(self.insns) and all(map(is_, done, self.insns)):
                return raw
        raw = encode_stream(self.insns, layout)
        self._encoded = (tuple(self.insns), layout, raw)
        return raw

    def dram_image(self, data: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """A uint8 DRAM image of `dram_bytes`: the uop image plus the given buffer contents
        (buffers not given are zero)."""
        img = np.zeros(self.dram_bytes, dtype=np.uint8)
        img[self.uop_base:self.uop_base + self.uops.nbytes] = self.uops.astype("<u4").view(np.uint8)
        return write_buffers(img, self.buffers, data)

    def read(self, dram: np.ndarray, name: str) -> np.ndarray:
        """Buffer `name` read back from a DRAM image (a copy, in its shape and dtype)."""
        return read_buffer(dram, self.buffers, name)

    # ---- on-disk form (docs/vta.md): raw stream, raw uops, JSON metadata ---------------------
    def save(self, prefix: str) -> None:
        """Write <prefix>.insn.bin, <prefix>.uop.bin and <prefix>.json."""
        # vta's JSON names no target (it predates the field; read_stream accepts that)
        save_stream(prefix, self.stream(), {
            "config": self.config.to_dict(), "uop_base": self.uop_base, "stats": self.stats,
            **layout_to_json(self.buffers, self.layers, self.dram_bytes)})
        with open(prefix + ".uop.bin", "wb") as fh:
            fh.write(self.uops.astype("<u4").tobytes())

    @classmethod
    def load(cls, prefix: str) -> "Program":
        """Read a saved Program, checking that every offset, length and span in its JSON lies
        within the DRAM image and the stream it describes (ValueError naming the field)."""
        meta, raw = read_stream(prefix, "vta", 16, unmarked_ok=True)
        cfg = VTAConfig.from_dict(meta["config"])
        insns = decode_stream(raw, layout_for(cfg))
        with open(prefix + ".uop.bin", "rb") as fh:
            raw = fh.read()
        if len(raw) % 4:
            raise ValueError(f"{prefix}.uop.bin: {len(raw)} bytes is not a whole number of "
                             f"4-byte micro-ops")
        uops = np.frombuffer(raw, dtype="<u4").astype(np.uint32)
        bufs, layers, dram_bytes = layout_from_json(meta, f"{prefix}.json", len(insns))
        uop_base = count(meta["uop_base"], "uop_base")
        if uop_base + uops.nbytes > dram_bytes:
            raise ValueError(f"uop_base {uop_base} + {uops.nbytes} micro-op bytes exceeds "
                             f"dram_bytes {dram_bytes}")
        return cls(cfg, insns, uops, uop_base, bufs, dram_bytes, dict(meta.get("stats", {})),
                   layers)


class StreamBuilder:
    """Builds one VTA instruction stream for `cfg` (see the module docstring)."""

    def __init__(self, cfg: VTAConfig | None = None):
        self.cfg = cfg or PRESETS["pynq"]
        self.layout = layout_for(self.cfg)
        self.insns: list[Insn] = []
        # pending pops per stage (index = stage number), attached to that stage's next insn
        self._pending_prev = [False] * 5
        self._pending_next = [False] * 5
        self.alu_stage = bool(self.cfg.alu_stage)
        self._flags = token_flags(self.alu_stage)
        self._alu_module = STAGE_ALU if self.alu_stage else STAGE_COMPUTE
        self.before_uop_load = None     # hooks (see the module docstring); None: nothing
        self.before_alu = None
        self.buffers: dict[str, DramBuffer] = {}
        self._dram_top = 0
        c = self.cfg
        # Every buffer starts at a multiple of every element size, so any buffer can be
        # addressed in units of any SRAM's elements (dram_base = byte address / element bytes).
        self.align = max(64, c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes,
                         c.out_elem_bytes, c.batch * c.block_out)
        # micro-op kernels: DRAM image (every kernel once) and uop-SRAM residency (a ring)
        self._kernel_dram: dict[tuple, int] = {}
        self._uop_chunks: list[np.ndarray] = []
        self._uop_words = 0
        self._resident: dict[tuple, tuple[int, int]] = {}
        self._ring_ptr = 0
        self._uop_loads: list[int] = []   # insn indices of LOAD UOPs, relocated in finish()
        self.stats = {"uop_cache_hits": 0, "uop_cache_misses": 0, "uop_cache_evictions": 0,
                      "token_noops": 0}
        self._finished = False
        # Per memory type, computed once: these are looked up for every instruction emitted.
        self._elem_bytes = {MemType.INP: c.inp_elem_bytes, MemType.WGT: c.wgt_elem_bytes,
                            MemType.ACC: c.acc_elem_bytes, MemType.ACC_8BIT: c.batch * c.block_out,
                            MemType.OUT: c.out_elem_bytes, MemType.UOP: c.uop_elem_bytes}
        self._depth = {MemType.INP: c.inp_depth, MemType.WGT: c.wgt_depth,
                       MemType.ACC: c.acc_depth, MemType.ACC_8BIT: c.acc_depth,
                       MemType.OUT: min(c.out_depth, c.acc_depth), MemType.UOP: c.uop_depth}
        self._reach: dict[tuple, tuple[int, int, int]] = {}   # kernel key -> max indices
        self._reach_ok: set[tuple] = set()   # (kernel key, src memory, uses WGT) checked

    # ---- DRAM ------------------------------------------------------------------------------
    def alloc(self, name: str, shape: tuple[int, ...], dtype: str = "int8") -> DramBuffer:
        """Reserve a named DRAM buffer (aligned for every SRAM element size)."""
        if name in self.buffers:
            raise TargetError(f"DRAM buffer {name!r} allocated twice")
        if str(np.dtype(dtype)) not in DTYPES:
            raise TargetError(f"DRAM buffer {name!r}: dtype {dtype} not one of {DTYPES}")
        shape = tuple(int(s) for s in shape)
        if any(s <= 0 for s in shape):
            raise TargetError(f"DRAM buffer {name!r}: shape {shape} has an empty dimension")
        offset = -(-self._dram_top // self.align) * self.align
        buf = DramBuffer(name, offset, shape, str(np.dtype(dtype)))
        if offset + buf.nbytes > self.cfg.dram_bytes:
            raise TargetError(f"DRAM buffer {name!r} ({buf.nbytes} bytes) does not fit the "
                              f"{self.cfg.dram_bytes}-byte DRAM of config {self.cfg.name!r}")
        self.buffers[name] = buf
        self._dram_top = offset + buf.nbytes
        return buf

    def alias(self, name: str, parent: str, byte_offset: int, shape: tuple[int, ...],
              dtype: str = "int8") -> DramBuffer:
        """A named view of part of buffer `parent` (e.g. one slice of a batched operand), so
        instructions can address the part as a buffer of its own."""
        if name in self.buffers:
            raise TargetError(f"DRAM buffer {name!r} allocated twice")
        base = self._buffer(parent)
        buf = DramBuffer(name, base.offset + int(byte_offset), tuple(int(s) for s in shape),
                         str(np.dtype(dtype)))
        if byte_offset < 0 or byte_offset + buf.nbytes > base.nbytes:
            raise TargetError(f"DRAM buffer {name!r}: bytes [{byte_offset}, "
                              f"{byte_offset + buf.nbytes}) are outside buffer {parent!r} of "
                              f"{base.nbytes} bytes")
        self.buffers[name] = buf
        return buf

    def _dram_elem_bytes(self, mem_type: MemType) -> int:
        return self._elem_bytes[mem_type]

    def _sram_depth(self, mem_type: MemType) -> int:
        return self._depth[mem_type]

    def _dram_base(self, what: str, buf: DramBuffer | str, mem_type: MemType, elem_offset: int,
                   x_size: int, y_size: int, x_stride: int) -> int:
        buf = buf if isinstance(buf, DramBuffer) else self._buffer(buf)
        eb = self._elem_bytes[mem_type]
        if buf.offset % eb:
            raise TargetError(f"{what}: buffer {buf.name!r} at byte {buf.offset} is not aligned "
                              f"to {mem_type.name} elements of {eb} bytes")
        end = elem_offset + (y_size - 1) * x_stride + x_size
        if elem_offset < 0 or end * eb > buf.nbytes:
            raise TargetError(
                f"{what}: {mem_type.name} elements [{elem_offset}, {end}) of {eb} bytes "
                f"(x_size={x_size}, y_size={y_size}, x_stride={x_stride}) fall outside buffer "
                f"{buf.name!r} of {buf.nbytes} bytes ({buf.nbytes // eb} elements)")
        return buf.offset // eb + elem_offset

    def _buffer(self, name: str) -> DramBuffer:
        try:
            return self.buffers[name]
        except KeyError:
            raise TargetError(f"no DRAM buffer {name!r}; allocate it first") from None

    # ---- instructions ----------------------------------------------------------------------
    def _pops(self, stage: int) -> Deps:
        """The dependency flags of the next instruction of `stage`: the pops pending for it
        (dep_pop), which it consumes. Call it when constructing that instruction."""
        if self._finished:
            raise TargetError("the stream is finished; start a new StreamBuilder")
        prev, nxt = self._pending_prev[stage], self._pending_next[stage]
        if not (prev or nxt):
            return NO_DEPS
        self._pending_prev[stage] = self._pending_next[stage] = False
        return _POP_DEPS[prev, nxt]

    def _emit(self, insn: Insn) -> int:
        """Append `insn` (built with its stage's _pops()). Field widths are checked for the
        whole stream at once in finish() (encode_stream): checking each instruction here cost
        more than the rest of emitting."""
        self.insns.append(insn)
        return len(self.insns) - 1

    def load_2d(self, mem_type: MemType, sram_index: int, buffer: DramBuffer | str,
                elem_offset: int, x_size: int, y_size: int, x_stride: int,
                x_pad_before: int = 0, y_pad_before: int = 0, x_pad_after: int = 0,
                y_pad_after: int = 0) -> int:
        """LOAD a 2-D block (runtime's load_buffer_2d). Offsets and sizes count elements of
        `mem_type` (INP, WGT, ACC or ACC_8BIT). Returns the instruction index."""
        if type(mem_type) is not MemType:
            mem_type = MemType(mem_type)
        what = _Lazy(_load_what, mem_type, len(self.insns))
        if mem_type not in _LOADABLE:
            raise TargetError(f"{what}: cannot load memory type {mem_type.name}")
        if x_size < 1 or y_size < 1:
            raise TargetError(f"{what}: x_size={x_size}, y_size={y_size} must be >= 1")
        dram = self._dram_base(what, buffer, mem_type, elem_offset, x_size, y_size, x_stride)
        if not (0 <= y_pad_before <= PAD_MAX and 0 <= y_pad_after <= PAD_MAX
                and 0 <= x_pad_before <= PAD_MAX and 0 <= x_pad_after <= PAD_MAX):
            for name, pad in (("y_pad_0", y_pad_before), ("y_pad_1", y_pad_after),
                              ("x_pad_0", x_pad_before), ("x_pad_1", x_pad_after)):
                if not 0 <= pad <= PAD_MAX:
                    raise IsaError(f"{what}: field {name}={pad} does not fit its {PAD_BITS}-bit "
                                   f"field (0..{PAD_MAX})")
        rows = y_pad_before + y_size + y_pad_after
        cols = x_pad_before + x_size + x_pad_after
        depth = self._sram_depth(mem_type)
        if sram_index < 0 or sram_index + rows * cols > depth:
            raise TargetError(f"{what}: writes {mem_type.name} SRAM [{sram_index}, "
                              f"{sram_index + rows * cols}) ({rows}x{cols} incl. padding), "
                              f"outside its depth {depth}")
        stage = STAGE_LOAD if mem_type is MemType.INP or mem_type is MemType.WGT else STAGE_COMPUTE
        return self._emit(MemInsn(Opcode.LOAD, self._pops(stage), mem_type, sram_index, dram,
                                  y_size, x_size, x_stride, y_pad_before, y_pad_after,
                                  x_pad_before, x_pad_after))

    def store_2d(self, sram_index: int, buffer: DramBuffer | str, elem_offset: int, x_size: int,
                 y_size: int, x_stride: int, mem_type: MemType = MemType.OUT) -> int:
        """STORE a 2-D block of OUT elements (runtime's store_buffer_2d)."""
        mem_type = MemType(mem_type)
        what = _Lazy(_store_what, len(self.insns))
        if mem_type is not MemType.OUT:
            raise TargetError(f"{what}: STORE supports only OUT, not {mem_type.name}")
        if x_size < 1 or y_size < 1:
            raise TargetError(f"{what}: x_size={x_size}, y_size={y_size} must be >= 1")
        dram = self._dram_base(what, buffer, mem_type, elem_offset, x_size, y_size, x_stride)
        depth = self._sram_depth(mem_type)
        if sram_index < 0 or sram_index + x_size * y_size > depth:
            raise TargetError(f"{what}: reads OUT/ACC SRAM [{sram_index}, "
                              f"{sram_index + x_size * y_size}) outside its depth {depth}")
        return self._emit(MemInsn(Opcode.STORE, self._pops(STAGE_STORE), MemType.OUT, sram_index,
                                  dram, y_size, x_size, x_stride))

    # ---- micro-op kernels ------------------------------------------------------------------
    def uop_kernel(self, uops: Iterable[Uop | tuple[int, ...]],
                   loops: Iterable[UopLoop | tuple] = (), name: str = "") -> UopKernel:
        """A kernel from explicit uops and up to two loops (outer first)."""
        k = make_kernel(uops, loops, name)
        if len(k.uops) > self.cfg.uop_depth:
            raise TargetError(f"micro-op kernel {name!r}: {len(k.uops)} uops exceed the uop "
                              f"buffer depth {self.cfg.uop_depth}")
        return k

    @contextlib.contextmanager
    def record_kernel(self, name: str = "") -> Iterator[KernelRecorder]:
        """Context manager recording a kernel with loop()/push(); see KernelRecorder."""
        rec = KernelRecorder(name)
        yield rec
        self.uop_kernel(rec._close().uops, rec.kernel.loops, name)  # size checks

    def _make_resident(self, k: UopKernel) -> int:
        """uop_bgn of `k` in the uop SRAM, emitting LOAD UOP when it is not resident."""
        key = k.key
        if key in self._resident:
            self.stats["uop_cache_hits"] += 1
            return self._resident[key][0]
        self.stats["uop_cache_misses"] += 1
        n = len(k.uops)
        if key not in self._kernel_dram:
            self._kernel_dram[key] = self._uop_words
            self._uop_chunks.append(encode_uops(k.uops, self.layout))
            self._uop_words += n
        start = self._ring_ptr if self._ring_ptr + n <= self.cfg.uop_depth else 0
        for other, (b, e) in list(self._resident.items()):
            if b < start + n and start < e:
                del self._resident[other]
                self.stats["uop_cache_evictions"] += 1
        if self.before_uop_load is not None:
            self.before_uop_load()
        idx = self._emit(MemInsn(Opcode.LOAD, self._pops(STAGE_COMPUTE), MemType.UOP, start,
                                 self._kernel_dram[key], 1, n, n))
        self._uop_loads.append(idx)
        self._resident[key] = (start, start + n)
        self._ring_ptr = start + n
        return start

    def preload_kernel(self, kernel: UopKernel) -> None:
        """Make `kernel` resident now (LOAD UOP unless it already is), so that its transfer
        happens at this point of the compute module's queue rather than at its first use
        (where it may wait behind the load module's DMA on the shared bus). A later eviction
        only means gemm()/alu() load it again."""
        self._make_resident(kernel)

    def preload_kernels(self, kernels: Iterable[UopKernel]) -> None:
        """Make every kernel of `kernels` resident with ONE LOAD UOP: the missing ones get a
        fresh contiguous copy in the uop image and contiguous uop-SRAM entries. Each LOAD pays
        the DMA latency on the compute module (and may wait behind other transfers on the
        shared bus), so a layer's kernels are cheaper loaded together. Falls back to one load
        per kernel when together they exceed the uop buffer."""
        missing: dict[tuple, UopKernel] = {}
        for k in kernels:
            if k.key not in self._resident:
                missing.setdefault(k.key, k)
        n = sum(len(k.uops) for k in missing.values())
        if len(missing) <= 1 or n > self.cfg.uop_depth:
            for k in missing.values():
                self._make_resident(k)
            return
        first = self._uop_words
        for key, k in missing.items():     # a fresh copy, so the transfer is one DRAM range
            self._kernel_dram[key] = self._uop_words
            self._uop_chunks.append(encode_uops(k.uops, self.layout))
            self._uop_words += len(k.uops)
        start = self._ring_ptr if self._ring_ptr + n <= self.cfg.uop_depth else 0
        for other, (b, e) in list(self._resident.items()):
            if b < start + n and start < e:
                del self._resident[other]
                self.stats["uop_cache_evictions"] += 1
        if self.before_uop_load is not None:
            self.before_uop_load()
        idx = self._emit(MemInsn(Opcode.LOAD, self._pops(STAGE_COMPUTE), MemType.UOP, start,
                                 first, 1, n, n))
        self._uop_loads.append(idx)
        at = start
        for key, k in missing.items():
            self._resident[key] = (at, at + len(k.uops))
            at += len(k.uops)
        self.stats["uop_cache_misses"] += len(missing)
        self._ring_ptr = start + n

    def _check_reach(self, what: str, k: UopKernel, src_type: MemType, use_wgt: bool) -> None:
        ok = (k.key, src_type, use_wgt)
        if ok in self._reach_ok:        # checked before: the depths do not change
            return
        reach = self._reach.get(k.key)
        if reach is None:
            reach = self._reach[k.key] = k.max_indices()
        d, s, w = reach
        checks = [("dst", d, MemType.ACC), ("src", s, src_type)]
        if use_wgt:
            checks.append(("wgt", w, MemType.WGT))
        for field_name, reach, mt in checks:
            depth = self._sram_depth(mt)
            if reach >= depth:
                raise TargetError(f"{what}: kernel {k.name!r} reaches {field_name} index {reach} "
                                  f"but {mt.name} has depth {depth}")
        self._reach_ok.add(ok)

    def gemm(self, kernel: UopKernel, reset: bool = False) -> int:
        """Push a GEMM (or, with reset, an accumulator-zeroing) instruction over `kernel`."""
        what = _Lazy(_gemm_what, len(self.insns))
        self._check_reach(what, kernel, MemType.INP, use_wgt=not reset)
        bgn = self._make_resident(kernel)
        p = kernel.loop_params()
        return self._emit(GemmInsn(self._pops(STAGE_COMPUTE), bool(reset), bgn,
                                   bgn + len(kernel.uops), *p))

    def alu(self, kernel: UopKernel, op: AluOp, imm: int | None = None) -> int:
        """Push an ALU instruction: acc[dst] = op(acc[dst], imm if given else acc[src])."""
        op = AluOp(op)
        what = _Lazy(_alu_what, op, len(self.insns))
        self._check_reach(what, kernel, MemType.ACC, use_wgt=False)
        bgn = self._make_resident(kernel)
        p = kernel.loop_params()
        if self.before_alu is not None:
            self.before_alu()
        return self._emit(AluInsn(self._pops(self._alu_module), False, bgn, bgn + len(kernel.uops),
                                  *p[:6], op, imm is not None, 0 if imm is None else int(imm)))

    # ---- dependency tokens -----------------------------------------------------------------
    def _check_stages(self, frm: int, to: int, what: str) -> tuple[str, str]:
        """(push flag, pop flag) of the queue from `frm` to `to`."""
        try:
            return self._flags[frm, to]
        except KeyError:
            pass
        if self.alu_stage:
            raise TargetError(f"{what}({frm}, {to}): with the ALU stage, tokens flow only "
                              "load=1 <-> compute=2 -> alu=4 -> store=3 -> compute=2")
        raise TargetError(f"{what}({frm}, {to}): tokens flow only between adjacent stages "
                          "load=1 <-> compute=2 <-> store=3")

    def _noop(self, stage: int, push_prev: bool = False, push_next: bool = False,
              pop_prev: bool = False, pop_next: bool = False) -> int:
        """A token carrier: a 2-D transfer of zero elements on `stage`'s module."""
        self.stats["token_noops"] += 1
        deps = Deps(pop_prev, pop_next, push_prev, push_next)
        if stage == STAGE_ALU:     # an ALU instruction over no micro-ops: no work, no uop read
            insn = AluInsn(deps, False, 0, 0, 1, 1, 0, 0, 0, 0, AluOp.MIN, True, 0)
            self.insns.append(insn)
            return len(self.insns) - 1
        opcode = Opcode.STORE if stage == STAGE_STORE else Opcode.LOAD
        mtype = {STAGE_LOAD: MemType.INP, STAGE_COMPUTE: MemType.UOP, STAGE_STORE: MemType.OUT}[stage]
        insn = MemInsn(opcode, deps, mtype, 0, 0, 0, 0, 0)
        self.insns.append(insn)
        return len(self.insns) - 1

    def _commit_pending_pop(self, stage: int) -> None:
        if self._pending_prev[stage] or self._pending_next[stage]:
            self._noop(stage, pop_prev=self._pending_prev[stage],
                       pop_next=self._pending_next[stage])
            self._pending_prev[stage] = self._pending_next[stage] = False

    def dep_pop(self, frm: int, to: int) -> None:
        """The next instruction of stage `to` waits for (and consumes) a token from `frm`."""
        _, pop_flag = self._check_stages(frm, to, "dep_pop")
        pending = self._pending_prev if pop_flag == "pop_prev" else self._pending_next
        if pending[to]:
            # Two pops of the same queue cannot share one instruction: flush the first.
            self._commit_pending_pop(to)
        pending[to] = True

    def dep_push(self, frm: int, to: int) -> None:
        """Stage `frm` sends a token to `to` after its latest instruction."""
        flag, _ = self._check_stages(frm, to, "dep_push")
        if self._finished:
            raise TargetError("the stream is finished; start a new StreamBuilder")
        if self._pending_prev[frm] or self._pending_next[frm]:
            self._commit_pending_pop(frm)
        if self.insns:
            last = self.insns[-1]
            if stage_of(last, self.alu_stage) == frm and not isinstance(last, FinishInsn) \
                    and not getattr(last.deps, flag):
                self.insns[-1] = (with_deps(last, push_prev=True) if flag == "push_prev"
                                  else with_deps(last, push_next=True))
                return
        self._noop(frm, **{flag: True})

    # ---- end -------------------------------------------------------------------------------
    def finish(self) -> Program:
        """Make compute wait for load and store to drain, append FINISH, return the Program."""
        if self._finished:
            raise TargetError("finish() called twice")
        if self.alu_stage:
            # The ALU module drains into the store module, which drains into compute below.
            self._commit_pending_pop(STAGE_ALU)
            if any(stage_of(i, True) == STAGE_ALU for i in self.insns):
                self.dep_push(STAGE_ALU, STAGE_STORE)
                self.dep_pop(STAGE_ALU, STAGE_STORE)
        for stage in (STAGE_LOAD, STAGE_STORE):
            self._commit_pending_pop(stage)
        self.dep_push(STAGE_STORE, STAGE_COMPUTE)
        self.dep_push(STAGE_LOAD, STAGE_COMPUTE)
        self.dep_pop(STAGE_STORE, STAGE_COMPUTE)
        self.dep_pop(STAGE_LOAD, STAGE_COMPUTE)
        self._commit_pending_pop(STAGE_COMPUTE)   # FINISH itself carries no pops
        self.insns.append(FinishInsn())
        self._finished = True

        uop_base = -(-self._dram_top // self.align) * self.align
        uops = (np.concatenate(self._uop_chunks) if self._uop_chunks
                else np.zeros(0, dtype=np.uint32))
        dram_bytes = uop_base + uops.nbytes
        if dram_bytes > self.cfg.dram_bytes:
            raise TargetError(f"program needs {dram_bytes} bytes of DRAM; config "
                              f"{self.cfg.name!r} has {self.cfg.dram_bytes}")
        # Kernels were addressed relative to the uop image; now it has a place in DRAM.
        for i in self._uop_loads:
            insn = self.insns[i]
            self.insns[i] = replace(insn, dram_base=insn.dram_base + uop_base // 4)
        raw = encode_stream(self.insns, self.layout)  # every field fits, or IsaError naming the first
        return Program(self.cfg, list(self.insns), uops, uop_base, dict(self.buffers),
                       dram_bytes, dict(self.stats), _encoded=(tuple(self.insns), self.layout, raw))

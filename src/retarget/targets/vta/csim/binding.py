"""The C simulator (vta_csim.c) behind the Python simulator's interface, through ctypes.

`CSimulator(cfg, dram=...)` is a drop-in for `sim.Simulator`: `run(stream)` returns the same
`SimResult` and raises the same errors (`SimulationError` naming the instruction with its
disassembly, `DeadlockError` with the blocked modules, `ResourceLimitError` over the work
limit), `mem` exposes DRAM and the four SRAMs as NumPy views of the C simulator's memory
(`uop` as uint32 (dst, src, wgt) triples) and takes a `confine` (a device's TaskMemory) like
`SimMemory`. The DRAM array is used in place, as the Python simulator uses it.
"""
from __future__ import annotations

import ctypes as C
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ....limits import check_device_work, max_device_work
from ..config import VTAConfig
from ..isa import INSN_BYTES, QUEUE_NAMES, IsaError, decode_insn, encode_stream, layout_for
from ..sim.errors import SimulationError
from ..sim.sim import (MODULES_ALU, QUEUES, SimCounters, SimResult, _fail, deadlock_error,
                       early_finish_error, missing_finish_error)
from .build import CSimUnavailable, library_path

ABI = 2
FIELD_COUNT = 32
MODULES, QUEUE_SLOTS = 4, 6
OK, ERR_DEADLOCK, ERR_FAULT, ERR_WORK, ERR_ARG = range(5)
FAULT_DECODE, FAULT_INSN, FAULT_NO_FINISH, FAULT_EARLY_FINISH, FAULT_DEADLOCK = range(1, 6)
# vta_csim.h's field order (enum vta_field_id) as (layout group, field name)
FIELD_ORDER = (
    [("common", n) for n in ("opcode", "pop_prev", "pop_next", "push_prev", "push_next")]
    + [("mem", n) for n in ("memory_type", "sram_base", "dram_base", "y_size", "x_size",
                             "x_stride", "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")]
    + [("gemm", n) for n in ("reset", "uop_bgn", "uop_end", "iter_out", "iter_in",
                              "dst_factor_out", "dst_factor_in", "src_factor_out",
                              "src_factor_in", "wgt_factor_out", "wgt_factor_in")]
    + [("alu", n) for n in ("alu_op", "use_imm", "imm")]
    + [("uop", n) for n in ("dst", "src", "wgt")])


class Field(C.Structure):
    _fields_ = [("lo", C.c_uint32), ("width", C.c_uint32)]


class Config(C.Structure):
    _fields_ = [("batch", C.c_uint32), ("block_in", C.c_uint32), ("block_out", C.c_uint32),
                ("uop_depth", C.c_uint32), ("inp_depth", C.c_uint32), ("wgt_depth", C.c_uint32),
                ("acc_depth", C.c_uint32), ("alu_stage", C.c_uint32),
                ("field", Field * FIELD_COUNT)]


class Counters(C.Structure):
    _fields_ = [(f, C.c_int64) for f in SimCounters.__dataclass_fields__]


class Result(C.Structure):
    _fields_ = [("counters", Counters), ("instructions", C.c_int64),
                ("finish_index", C.c_int64), ("tokens", C.c_int64 * QUEUE_SLOTS),
                ("work", C.c_double), ("fault", C.c_int32), ("error_index", C.c_int64),
                ("blocked", C.c_int64 * MODULES), ("waits", C.c_uint32 * MODULES),
                ("outside", C.c_uint64 * 2), ("outside_prefix", C.c_uint32),
                ("message", C.c_char * 1024)]


class Range(C.Structure):
    _fields_ = [("start", C.c_uint64), ("end", C.c_uint64)]


@lru_cache(maxsize=None)
def load_library() -> C.CDLL:
    """The built library with its signatures declared (CSimUnavailable if it cannot be built)."""
    lib = C.CDLL(str(library_path()))
    lib.vta_csim_abi.restype = C.c_int
    lib.vta_sizeof_result.restype = C.c_size_t
    lib.vta_sizeof_config.restype = C.c_size_t
    if (lib.vta_csim_abi() != ABI or lib.vta_sizeof_result() != C.sizeof(Result)
            or lib.vta_sizeof_config() != C.sizeof(Config)):
        raise CSimUnavailable("the VTA C simulator library does not match its Python binding "
                              "(ABI or struct sizes differ); clear the build cache")
    lib.vta_config_derive.argtypes = [C.POINTER(Config)] + [C.c_int] * 8 + [C.c_char_p, C.c_size_t]
    lib.vta_sim_create.argtypes = [C.POINTER(Config), C.c_void_p, C.c_uint64]
    lib.vta_sim_create.restype = C.c_void_p
    lib.vta_sim_free.argtypes = [C.c_void_p]
    lib.vta_sim_set_dram.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64]
    lib.vta_sim_run.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64, C.POINTER(Range), C.c_size_t,
                                C.c_double, C.POINTER(Result)]
    lib.vta_sim_sram.argtypes = [C.c_void_p, C.c_int, C.POINTER(C.c_uint64)]
    lib.vta_sim_sram.restype = C.c_void_p
    return lib


def available() -> bool:
    """Whether the C simulator can be built and loaded here."""
    try:
        load_library()
    except (CSimUnavailable, OSError):
        return False
    return True


def c_config(cfg: VTAConfig) -> Config:
    """The C simulator's config, derived in C from the LOG_* sizes; checked field by field
    against the Python layout (isa.layout_for), so the two never disagree silently."""
    lib = load_library()
    out, err = Config(), C.create_string_buffer(256)
    if lib.vta_config_derive(C.byref(out), cfg.log_batch, cfg.log_block_in, cfg.log_block_out,
                             cfg.log_uop_buff_size, cfg.log_inp_buff_size, cfg.log_wgt_buff_size,
                             cfg.log_acc_buff_size, int(cfg.alu_stage), err, 256):
        raise CSimUnavailable(f"VTA config {cfg.name!r}: the C simulator rejects it: "
                              f"{err.value.decode()}")
    layout = layout_for(cfg)
    for k, (group, name) in enumerate(FIELD_ORDER):
        f = layout.field(group, name)
        if (out.field[k].lo, out.field[k].width) != (f.lo, f.width):
            raise CSimUnavailable(f"VTA config {cfg.name!r}: the C simulator lays out field "
                                  f"{name} differently from the Python ISA")
    depths = (out.uop_depth, out.inp_depth, out.wgt_depth, out.acc_depth)
    if depths != (cfg.uop_depth, cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth) or (
            out.batch, out.block_in, out.block_out) != (cfg.batch, cfg.block_in, cfg.block_out):
        raise CSimUnavailable(f"VTA config {cfg.name!r}: the C simulator's buffer sizes differ")
    if cfg.inp_width != 8 or cfg.wgt_width != 8 or cfg.acc_width != 32:
        raise CSimUnavailable(f"VTA config {cfg.name!r}: the C simulator supports int8 inputs "
                              f"and weights with int32 accumulators only")
    return out


class LazyInsns:
    """A stream's instructions decoded on demand (for naming the few an error mentions)."""

    def __init__(self, raw: bytes, cfg: VTAConfig):
        self.raw, self.layout = raw, layout_for(cfg)

    def __len__(self) -> int:
        return len(self.raw) // INSN_BYTES

    def __getitem__(self, i: int):
        return decode_insn(self.raw[i * INSN_BYTES:(i + 1) * INSN_BYTES], self.layout, i)


@dataclass(slots=True)
class CSimMemory:
    """DRAM and the C simulator's SRAMs as NumPy views (shapes as in sim.memory.SimMemory)."""
    cfg: VTAConfig
    dram: np.ndarray
    uop: np.ndarray
    inp: np.ndarray
    wgt: np.ndarray
    acc: np.ndarray
    confine: Any = None


class CSimulator:
    """One VTA instance simulated in C; see the module docstring."""

    def __init__(self, cfg: VTAConfig, dram: np.ndarray | None = None,
                 dram_bytes: int | None = None):
        self._lib = load_library()
        self.cfg = cfg
        if dram is None:
            dram = np.zeros(cfg.dram_bytes if dram_bytes is None else dram_bytes, dtype=np.uint8)
        if not (isinstance(dram, np.ndarray) and dram.dtype == np.uint8 and dram.ndim == 1
                and dram.flags.c_contiguous and dram.flags.writeable):
            raise SimulationError("the simulator's DRAM must be a writable contiguous 1-D uint8 "
                                  "array")
        self._config = c_config(cfg)
        self._handle = self._lib.vta_sim_create(C.byref(self._config), dram.ctypes.data,
                                                dram.size)
        if not self._handle:
            raise SimulationError("the VTA C simulator could not allocate its SRAMs")
        c = cfg
        self.mem = CSimMemory(cfg, dram, self._sram(0, np.uint32, (c.uop_depth, 3)),
                              self._sram(1, np.int8, (c.inp_depth, c.batch, c.block_in)),
                              self._sram(2, np.int8, (c.wgt_depth, c.block_out, c.block_in)),
                              self._sram(3, np.int32, (c.acc_depth, c.batch, c.block_out)))
        self.totals = SimCounters()
        self._queues = QUEUE_NAMES if cfg.alu_stage else QUEUES
        self._modules = MODULES_ALU

    def _sram(self, which: int, dtype, shape) -> np.ndarray:
        nbytes = C.c_uint64()
        ptr = self._lib.vta_sim_sram(self._handle, which, C.byref(nbytes))
        buf = (C.c_uint8 * nbytes.value).from_address(ptr)
        # the view keeps this simulator (and so the C memory) alive
        return np.frombuffer(buf, dtype=dtype).reshape(shape)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._lib.vta_sim_free(handle)
            self._handle = None

    @property
    def dram(self) -> np.ndarray:
        return self.mem.dram

    def rebind_dram(self, dram: np.ndarray) -> None:
        """Use `dram` (the same contents, grown by the device) from now on; SRAMs are kept."""
        self._lib.vta_sim_set_dram(self._handle, dram.ctypes.data, dram.size)
        self.mem.dram = dram

    def run(self, stream) -> SimResult:
        """Execute a stream (bytes, a uint8 array or a list of instructions) until FINISH."""
        raw = _stream_bytes(stream, self.cfg)
        if len(raw) % INSN_BYTES:
            raise SimulationError(f"instruction stream of {len(raw)} bytes is not a whole number "
                                  f"of {INSN_BYTES}-byte instructions")
        confine = self.mem.confine
        ranges, n_ranges = None, 0
        if confine is not None:
            allocs = confine.allocations
            ranges = (Range * max(1, len(allocs)))(*[(a.start, a.end) for a in allocs])
            n_ranges = len(allocs)
        result = Result()
        status = self._lib.vta_sim_run(self._handle, raw, len(raw) // INSN_BYTES, ranges,
                                       n_ranges, float(max_device_work()), C.byref(result))
        if status != OK:
            raise self._error(status, result, raw)
        counters = SimCounters(**{f: getattr(result.counters, f) for f, _ in Counters._fields_})
        self.totals.add(counters)
        tokens = {q: result.tokens[k] for k, q in enumerate(self._queues) if result.tokens[k]}
        return SimResult(counters, result.instructions, result.finish_index, tokens)

    def _error(self, status: int, r: Result, raw: bytes) -> Exception:
        msg = r.message.decode(errors="replace")
        i = r.error_index
        insns = LazyInsns(raw, self.cfg)
        if status == ERR_WORK:
            check_device_work(f"VTA stream of {len(insns)} instruction(s)", int(r.work))
            return SimulationError(msg)      # not reached: the check raises
        if r.fault == FAULT_DECODE:
            return SimulationError(f"instruction {i}: {msg}", i)
        if r.fault == FAULT_INSN:
            if r.outside_prefix and self.mem.confine is not None:
                # the confinement's own words (they say what the address hit)
                problem = self.mem.confine.violation(r.outside[0], r.outside[1])
                msg = f"{msg[:r.outside_prefix]}: {problem}"
            return _fail(i, insns[i], msg)
        if r.fault == FAULT_NO_FINISH:
            return missing_finish_error(insns)
        pending = [(self._modules[m], r.blocked[m]) for m in range(MODULES) if r.blocked[m] >= 0]
        if r.fault == FAULT_EARLY_FINISH:
            return early_finish_error(insns, r.finish_index, pending)
        if r.fault == FAULT_DEADLOCK:
            waits = [tuple(q for k, q in enumerate(self._queues) if r.waits[m] >> k & 1)
                     for m in range(MODULES) if r.blocked[m] >= 0]
            counts = {q: r.tokens[k] for k, q in enumerate(self._queues)}
            return deadlock_error(insns, r.instructions,
                                  [(mod, idx, w) for (mod, idx), w in zip(pending, waits)], counts)
        return SimulationError(f"VTA C simulator: {msg}")


def _stream_bytes(stream, cfg: VTAConfig) -> bytes:
    if isinstance(stream, np.ndarray):
        return stream.astype(np.uint8, copy=False).tobytes()
    if isinstance(stream, (bytes, bytearray, memoryview)):
        return bytes(stream)
    try:
        return encode_stream(list(stream), layout_for(cfg))
    except IsaError as e:
        raise SimulationError(str(e)) from None


__all__ = ["CSimMemory", "CSimUnavailable", "CSimulator", "available", "c_config",
           "load_library"]

"""The dnnvm behavioural simulator: executes a stream bit-exactly on NumPy buffers.

Five engines (load, save, conv, pool, misc) each run their instructions in program order;
across engines an instruction starts only when a token from each engine in its `wait` mask is
queued (pushed by an instruction of that engine with this engine in its `signal` mask). The
simulator repeatedly runs any engine head whose tokens are there; when instructions remain and
no head can run it raises DeadlockError naming each blocked instruction and what it waits on.
END must be last and finishes once every engine has drained.

Arithmetic is the op table's: requantisation is ops.quantized.requantize, the element-wise add
ops.quantized.qadd, so the simulator cannot drift from the integer reference. Every on-chip
and DDR access is bounds-checked, and DDR accesses are checked against the memory the task was
given (device/base.py TaskMemory) before any byte moves. A stream whose fields ask for more
work than the device work limit (retarget/limits.py) is refused before it starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...limits import check_device_work
from ...ops.quantized import INT32_MAX, INT32_MIN, qadd, requantize
from ..accel.sim_errors import DeadlockError, SimulationError
from .config import DNNVMConfig
from .disasm import format_insn
from .isa import (ENGINES, Act, Buf, Conv, Elew, End, Insn, IsaError, Load, Pool, Save,
                  check_insn, decode_stream)


@dataclass(slots=True)
class Counters:
    """What a run did: DDR bytes per buffer, MACs and instructions per engine."""
    load_bytes: dict[str, int] = field(default_factory=lambda: {b.name.lower(): 0 for b in Buf})
    save_bytes: int = 0
    macs: int = 0
    pool_elems: int = 0
    elew_elems: int = 0
    instructions: dict[str, int] = field(default_factory=lambda: {e: 0 for e in ENGINES})

    def as_dict(self) -> dict[str, int]:
        d = {f"load_{k}_bytes": v for k, v in self.load_bytes.items() if k != "out"}
        d.update(save_bytes=self.save_bytes, macs=self.macs, pool_elems=self.pool_elems,
                 elew_elems=self.elew_elems)
        d.update({f"{e}_insns": n for e, n in self.instructions.items()})
        return d


def stream_work(insns) -> int:
    """The operations a stream asks for, from its fields alone (before anything runs): MACs of
    every CONV, window taps of every POOL, elements of every ELEW, bytes of every transfer."""
    work = 0
    for insn in insns:
        if isinstance(insn, Conv):
            work += (insn.out_h * insn.out_w * insn.oc * insn.kh * insn.kw
                     * (1 if insn.depthwise else insn.ic))
        elif isinstance(insn, Pool):
            work += insn.out_h * insn.out_w * insn.channels * insn.kh * insn.kw
        elif isinstance(insn, Elew):
            work += insn.count
        elif isinstance(insn, (Load, Save)):
            work += insn.rows * insn.cols * insn.vec_bytes
    return work


class Simulator:
    """The overlay's buffers and engines over a DDR array (the device's memory)."""

    def __init__(self, cfg: DNNVMConfig, dram: np.ndarray):
        self.cfg = cfg
        self.dram = dram
        self.sram = {Buf.IN: np.zeros(cfg.inp_buf_bytes, np.uint8),
                     Buf.WGT: np.zeros(cfg.wgt_buf_bytes, np.uint8),
                     Buf.BIAS: np.zeros(cfg.bias_buf_bytes, np.uint8),
                     Buf.OUT: np.zeros(cfg.out_buf_bytes, np.uint8)}
        self.confine = None          # TaskMemory of the running task, set by the device

    def rebind(self, dram: np.ndarray) -> None:
        """Run on `dram` (the device's grown memory) from now on; the buffers keep their state."""
        self.dram = dram

    # ---- running a stream ---------------------------------------------------------------------
    def run(self, stream: bytes | list[Insn]) -> Counters:
        try:
            insns = (decode_stream(bytes(stream)) if isinstance(stream, (bytes, bytearray))
                     else list(stream))
        except IsaError as e:
            raise SimulationError(f"malformed dnnvm stream: {e}") from None
        if not insns or not isinstance(insns[-1], End):
            raise SimulationError(f"the stream of {len(insns)} instruction(s) does not end "
                                  f"with END", len(insns) - 1 if insns else None)
        check_device_work(f"dnnvm stream of {len(insns)} instruction(s)", stream_work(insns))
        queues: list[list[int]] = [[] for _ in ENGINES]
        for i, insn in enumerate(insns[:-1]):
            try:
                check_insn(insn, i)
            except IsaError as e:
                raise SimulationError(str(e), i) from None
            if isinstance(insn, End):
                raise SimulationError(f"instruction #{i}: END before the end of the stream "
                                      f"({len(insns) - 1 - i} instruction(s) after it)", i)
            queues[insn.engine].append(i)
        counters = Counters()
        tokens = np.zeros((len(ENGINES), len(ENGINES)), dtype=np.int64)   # [from, to]
        heads = [0] * len(ENGINES)
        remaining = len(insns) - 1
        while remaining:
            progressed = False
            for e, queue in enumerate(queues):
                while heads[e] < len(queue):
                    i = queue[heads[e]]
                    insn = insns[i]
                    waits = [s for s in range(len(ENGINES)) if insn.wait >> s & 1]
                    if any(tokens[s, e] == 0 for s in waits):
                        break
                    for s in waits:
                        tokens[s, e] -= 1
                    self._execute(i, insn, counters)
                    for d in range(len(ENGINES)):
                        if insn.signal >> d & 1:
                            tokens[e, d] += 1
                    heads[e] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:
                self._deadlock(insns, queues, heads, tokens)
        return counters

    def _deadlock(self, insns, queues, heads, tokens) -> None:
        blocked = []
        for e, queue in enumerate(queues):
            if heads[e] < len(queue):
                i = queue[heads[e]]
                waits = tuple(f"{ENGINES[s]}->{ENGINES[e]}" for s in range(len(ENGINES))
                              if insns[i].wait >> s & 1 and tokens[s, e] == 0)
                blocked.append((ENGINES[e], i, " ".join(format_insn(insns[i]).split()), waits))
        text = "; ".join(f"{m} engine blocked at instruction #{i} ({t}) waiting on "
                         f"{'/'.join(w)}" for m, i, t, w in blocked)
        queued = {f"{ENGINES[s]}->{ENGINES[d]}": int(tokens[s, d])
                  for s in range(len(ENGINES)) for d in range(len(ENGINES)) if tokens[s, d]}
        raise DeadlockError(f"dnnvm: deadlock: {text}; queued tokens {queued}", blocked, queued)

    # ---- one instruction ------------------------------------------------------------------------
    def _execute(self, i: int, insn: Insn, c: Counters) -> None:
        try:
            if isinstance(insn, Load):
                self._load(i, insn, c)
            elif isinstance(insn, Save):
                self._save(i, insn, c)
            elif isinstance(insn, Conv):
                self._conv(i, insn, c)
            elif isinstance(insn, Pool):
                self._pool(i, insn, c)
            elif isinstance(insn, Elew):
                self._elew(i, insn, c)
        except SimulationError:
            raise
        except Exception as e:     # arithmetic errors from the op table, named here
            raise SimulationError(f"instruction #{i} ({' '.join(format_insn(insn).split())}): "
                                  f"{type(e).__name__}: {e}", i) from None
        c.instructions[ENGINES[insn.engine]] += 1

    def _fail(self, i: int, insn: Insn, msg: str):
        raise SimulationError(f"instruction #{i} ({' '.join(format_insn(insn).split())}): {msg}",
                              i)

    def _sram(self, i, insn, buf: int, addr: int, nbytes: int, what: str) -> np.ndarray:
        mem = self.sram[Buf(buf)]
        if addr + nbytes > mem.size:
            self._fail(i, insn, f"{what}: bytes [{addr}, {addr + nbytes}) outside the "
                                f"{mem.size}-byte {Buf(buf).name} buffer")
        return mem[addr:addr + nbytes]

    def _ddr(self, i, insn, addr: int, rows: int, cols: int, vec: int, rs: int, cs: int):
        """A (rows, cols, vec) strided view of DDR, bounds- and confinement-checked."""
        end = addr + (rows - 1) * rs + (cols - 1) * cs + vec
        if end > self.dram.size:
            self._fail(i, insn, f"DDR bytes [{addr:#x}, {end:#x}) outside the "
                                f"{self.dram.size}-byte memory")
        if self.confine is not None:
            why = self.confine.violation(addr, end)
            if why:
                self._fail(i, insn, why)
        if vec > cs and cols > 1 or cols * cs > rs and rows > 1 and rs:
            self._fail(i, insn, f"overlapping DDR vectors: vec {vec} B, col stride {cs}, "
                                f"row stride {rs}")
        base = self.dram[addr:end]
        return np.lib.stride_tricks.as_strided(base, (rows, cols, vec), (rs, cs, 1))

    def _load(self, i, insn: Load, c: Counters) -> None:
        src = self._ddr(i, insn, insn.ddr_addr, insn.rows, insn.cols, insn.vec_bytes,
                        insn.ddr_row_stride, insn.ddr_col_stride)
        h = insn.pad_top + insn.rows + insn.pad_bottom
        w = insn.pad_left + insn.cols + insn.pad_right
        dst = self._sram(i, insn, insn.buf, insn.sram_addr, h * w * insn.vec_bytes,
                         "LOAD destination").reshape(h, w, insn.vec_bytes)
        if h != insn.rows or w != insn.cols:
            dst[...] = np.uint8(insn.pad_value & 0xFF)
        dst[insn.pad_top:insn.pad_top + insn.rows, insn.pad_left:insn.pad_left + insn.cols] = src
        c.load_bytes[Buf(insn.buf).name.lower()] += src.size

    def _save(self, i, insn: Save, c: Counters) -> None:
        n = insn.rows * insn.cols * insn.vec_bytes
        src = self._sram(i, insn, Buf.OUT, insn.sram_addr, n, "SAVE source")
        dst = self._ddr(i, insn, insn.ddr_addr, insn.rows, insn.cols, insn.vec_bytes,
                        insn.ddr_row_stride, insn.ddr_col_stride)
        dst[...] = src.reshape(insn.rows, insn.cols, insn.vec_bytes)
        c.save_bytes += n

    def _window(self, i, insn, kh, kw, sh, sw, in_h, in_w, out_h, out_w) -> None:
        if min(kh, kw, sh, sw) < 1:
            self._fail(i, insn, f"kernel {kh}x{kw} / stride {sh}x{sw} must be at least 1")
        if (out_h - 1) * sh + kh > in_h or (out_w - 1) * sw + kw > in_w:
            self._fail(i, insn, f"a {out_h}x{out_w} output with kernel {kh}x{kw}, stride "
                                f"{sh}x{sw} reads beyond the {in_h}x{in_w} input tile")

    def _conv(self, i, insn: Conv, c: Counters) -> None:
        kh, kw, sh, sw = insn.kh, insn.kw, insn.sh, insn.sw
        oh, ow, oc, ic = insn.out_h, insn.out_w, insn.oc, insn.ic
        pt, pb, pl, pr = insn.pad_top, insn.pad_bottom, insn.pad_left, insn.pad_right
        self._window(i, insn, kh, kw, sh, sw, pt + insn.in_h + pb, pl + insn.in_w + pr, oh, ow)
        if insn.depthwise and ic != oc:
            self._fail(i, insn, f"depthwise needs ic == oc, got {ic} and {oc}")
        if insn.in_buf not in (Buf.IN, Buf.OUT):
            self._fail(i, insn, f"CONV reads its input from IN or OUT, not "
                                f"{Buf(insn.in_buf).name}")
        x = self._sram(i, insn, insn.in_buf, insn.in_addr, insn.in_h * insn.in_w * ic,
                       "CONV input").view(np.int8).reshape(insn.in_h, insn.in_w, ic)
        acc_end = insn.out_addr + oh * ow * oc * 4
        if insn.in_buf == Buf.OUT and insn.in_addr < acc_end and \
                insn.out_addr < insn.in_addr + x.size:
            self._fail(i, insn, f"input [{insn.in_addr}, {insn.in_addr + x.size}) overlaps the "
                                f"accumulators [{insn.out_addr}, {acc_end}) in OUT")
        if pt or pb or pl or pr:
            x = np.pad(x, ((pt, pb), (pl, pr), (0, 0)))
        wic = 1 if insn.depthwise else ic
        w = self._sram(i, insn, Buf.WGT, insn.wgt_addr, oc * kh * kw * wic,
                       "CONV weights").view(np.int8).reshape(oc, kh, kw, wic)
        acc_bytes = self._sram(i, insn, Buf.OUT, insn.out_addr, oh * ow * oc * 4, "CONV output")
        if insn.first:
            bias = self._sram(i, insn, Buf.BIAS, insn.bias_addr, oc * 4, "CONV bias")
            acc = np.broadcast_to(bias.view("<i4").astype(np.int64), (oh, ow, oc)).copy()
        else:
            acc = acc_bytes.view("<i4").astype(np.int64).reshape(oh, ow, oc)
        # The window taps: for each (ky, kx) the strided input rows/cols it meets. Products of
        # int8 values summed in float64 are exact (|sum| < 2**53 for any tile the ISA encodes).
        xf = x.astype(np.float64)
        if insn.depthwise:
            wf = w[..., 0].astype(np.float64)                        # (oc, kh, kw)
            for ky in range(kh):
                for kx in range(kw):
                    tap = xf[ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw]
                    acc += (tap * wf[:, ky, kx]).astype(np.int64)
        else:
            cols = np.empty((oh, ow, kh, kw, ic), np.float64)
            for ky in range(kh):
                for kx in range(kw):
                    cols[:, :, ky, kx] = xf[ky:ky + (oh - 1) * sh + 1:sh,
                                            kx:kx + (ow - 1) * sw + 1:sw]
            wm = w.reshape(oc, kh * kw * ic).astype(np.float64)
            acc += (cols.reshape(oh * ow, -1) @ wm.T).astype(np.int64).reshape(oh, ow, oc)
        if acc.size and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
            self._fail(i, insn, f"accumulator [{acc.min()}, {acc.max()}] overflows int32")
        c.macs += oh * ow * oc * kh * kw * wic
        if not insn.last:
            acc_bytes[...] = acc.astype("<i4").reshape(-1).view(np.uint8)
            return
        y = requantize(acc, shift=insn.shift, axis=2, lo=INT32_MIN, hi=INT32_MAX,
                       rounding="half_up", dtype="int32").astype(np.int64)
        if insn.act == Act.RELU:
            y = np.maximum(y, 0)
        elif insn.act == Act.LEAKY:
            y = np.where(y < 0, requantize(y, shift=insn.leaky_shift, axis=2, lo=INT32_MIN,
                                           hi=INT32_MAX, rounding="half_up", dtype="int32"), y)
        out = np.clip(y, insn.lo, insn.hi).astype(np.int8)
        acc_bytes[:out.size] = out.reshape(-1).view(np.uint8)

    def _pool(self, i, insn: Pool, c: Counters) -> None:
        kh, kw, sh, sw = insn.kh, insn.kw, insn.sh, insn.sw
        oh, ow, ch = insn.out_h, insn.out_w, insn.channels
        pt, pb, pl, pr = insn.pad_top, insn.pad_bottom, insn.pad_left, insn.pad_right
        self._window(i, insn, kh, kw, sh, sw, pt + insn.in_h + pb, pl + insn.in_w + pr, oh, ow)
        x = self._sram(i, insn, insn.in_buf, insn.in_addr, insn.in_h * insn.in_w * ch,
                       "POOL input").view(np.int8).reshape(insn.in_h, insn.in_w, ch)
        if pt or pb or pl or pr:
            x = np.pad(x, ((pt, pb), (pl, pr), (0, 0)), constant_values=insn.pad_value)
        out = self._sram(i, insn, Buf.OUT, insn.out_addr, oh * ow * ch, "POOL output")
        taps = [x[ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw]
                for ky in range(kh) for kx in range(kw)]
        if insn.kind == 0:
            y = np.max(np.stack(taps), axis=0).astype(np.int64)
            if insn.shift:
                self._fail(i, insn, f"max pooling with shift {insn.shift}")
            y = np.clip(y, insn.lo, insn.hi).astype(np.int8)
        else:
            s = np.sum(np.stack(taps).astype(np.int64), axis=0)
            y = requantize(s, shift=insn.shift, axis=2, lo=insn.lo, hi=insn.hi,
                           rounding="half_up", dtype="int8")
        out[...] = y.reshape(-1).view(np.uint8)
        c.pool_elems += oh * ow * ch * kh * kw

    def _elew(self, i, insn: Elew, c: Counters) -> None:
        n = insn.count
        a = self._sram(i, insn, insn.a_buf, insn.a_addr, n, "ELEW input a").view(np.int8)
        b = self._sram(i, insn, insn.b_buf, insn.b_addr, n, "ELEW input b").view(np.int8)
        out = self._sram(i, insn, Buf.OUT, insn.out_addr, n, "ELEW output")
        y = qadd(a, b, shift_a=insn.shift_a, shift_b=insn.shift_b, out_shift=insn.out_shift,
                 lo=insn.lo, hi=insn.hi, rounding="half_up", dtype="int8")
        out[...] = y.view(np.uint8)
        c.elew_elems += n


__all__ = ["Counters", "Simulator"]

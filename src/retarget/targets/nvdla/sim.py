"""The engine-level simulator: runs a relocated stream of hardware-layer descriptors on the
device memory, one layer at a time, bit-exactly.

Each engine's arithmetic is the op table's (ops/): the convolution core's int8 x int8 -> int32
accumulation is Conv on integers, the SDP's output converter RequantizeMul, its element-wise
stage QAddMul, the PDP MaxPool or SumPool, the CDP QLrn. So the simulator agrees with the integer reference by
construction of the arithmetic; what it checks is everything around it: that the compiler's
descriptors read and write the right bytes in the right shapes. Every access is checked
against the memory (and the running task's confinement) before it is made.

Debug mode (`dump` a list): after each layer, a copy of what it wrote is appended, with the
layer's index, so `retarget run --check --per-layer` can name the first layer that differs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import DeviceError
from ...ops.quantized import LRN_LUT_ENTRIES
from ...ops.registry import OPS
from ..accel.reference import run_op
from .config import NvdlaConfig
from .loadable import (CDP, CONV, ENGINES, HALF_EVEN, HAS_CVT, HAS_EW, LAYER_BYTES,
                       LAYER_DTYPE, MAX_POOL, NONE, PDP, SDP, SUM_POOL)


@dataclass(slots=True)
class Counters:
    layers: dict[str, int] = field(default_factory=lambda: {e: 0 for e in ENGINES.values()})
    macs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def as_dict(self) -> dict[str, int]:
        d = {f"layers_{k.lower()}": v for k, v in self.layers.items()}
        d.update(macs=self.macs, bytes_read=self.bytes_read, bytes_written=self.bytes_written)
        return d


@dataclass(frozen=True, slots=True)
class LayerDump:
    """What layer `index` wrote: its channels [ch0, ch0 + data.shape[1]) of the map."""
    index: int
    ch0: int
    data: np.ndarray


class Simulator:
    def __init__(self, cfg: NvdlaConfig, memory: np.ndarray):
        self.cfg, self.memory = cfg, memory
        self.confine = None              # TaskMemory of the running task, set by the device
        self.dump: list[LayerDump] | None = None

    def rebind(self, memory: np.ndarray) -> None:
        """Run on `memory` (the device's grown memory) from now on."""
        self.memory = memory

    def run(self, stream: bytes) -> Counters:
        if len(stream) % LAYER_BYTES:
            raise DeviceError(f"nvdla: a stream of {len(stream)} bytes is not whole "
                              f"{LAYER_BYTES}-byte layer descriptors")
        layers = np.frombuffer(stream, LAYER_DTYPE)
        c = Counters()
        for i, rec in enumerate(layers):
            op = int(rec["op"])
            run = {CONV: self._conv, SDP: self._sdp, PDP: self._pdp, CDP: self._cdp}.get(op)
            if run is None:
                raise DeviceError(f"nvdla: layer {i}: unknown engine {op}")
            c.layers[ENGINES[op]] += 1
            y = run(i, rec, c)
            self._write(i, rec, y, c)
        return c

    # ---- memory access, checked ---------------------------------------------------------------
    def _view(self, i: int, rec, addr: int, shape, dtype, what: str) -> np.ndarray:
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if addr == NONE or addr < 0 or addr + nbytes > self.memory.size or min(shape) <= 0:
            raise DeviceError(f"nvdla: layer {i} ({ENGINES.get(int(rec['op']), '?')}): {what} "
                              f"{dt.name} {list(shape)} at {addr:#x} lies outside the "
                              f"{self.memory.size}-byte memory")
        if self.confine is not None:
            why = self.confine.violation(addr, addr + nbytes)
            if why:
                raise DeviceError(f"nvdla: layer {i}: {what}: {why}")
        return self.memory[addr:addr + nbytes].view(dt).reshape(shape)

    def _src(self, i, rec, c: Counters) -> np.ndarray:
        shape = (int(rec["src_n"]), int(rec["src_c"]), int(rec["src_h"]), int(rec["src_w"]))
        x = self._view(i, rec, int(rec["src"]), shape, np.int8, "input map")
        c.bytes_read += x.nbytes
        return x

    def _channel_vector(self, i, rec, field_name: str, c: Counters) -> np.ndarray | None:
        if int(rec[field_name]) == NONE:
            return None
        v = self._view(i, rec, int(rec[field_name]), (int(rec["dst_c"]),), np.int32,
                       field_name)
        c.bytes_read += v.nbytes
        return v

    def _write(self, i, rec, y: np.ndarray, c: Counters) -> None:
        n, ch, h, w = y.shape
        total, ch0 = int(rec["dst_ctotal"]), int(rec["dst_ch0"])
        if (ch, h, w) != (int(rec["dst_c"]), int(rec["dst_h"]), int(rec["dst_w"])) or \
                not 0 <= ch0 <= total - ch:
            raise DeviceError(f"nvdla: layer {i}: result {list(y.shape)} does not fit the "
                              f"descriptor's output {int(rec['dst_c'])}x{int(rec['dst_h'])}x"
                              f"{int(rec['dst_w'])} at channel {ch0} of {total}")
        out = self._view(i, rec, int(rec["dst"]), (n, total, h, w), np.int8, "output map")
        out[:, ch0:ch0 + ch] = y
        c.bytes_written += y.nbytes
        if self.dump is not None:
            self.dump.append(LayerDump(i, ch0, y.copy()))

    # ---- the engines -------------------------------------------------------------------------
    def _conv(self, i, rec, c: Counters) -> np.ndarray:
        x = self._src(i, rec, c)
        k, g = int(rec["dst_c"]), int(rec["groups"])
        if g < 1 or x.shape[1] % g or k % g:
            raise DeviceError(f"nvdla: layer {i}: {g} groups do not divide {x.shape[1]} input "
                              f"and {k} output channels")
        kernel = (int(rec["kernel_h"]), int(rec["kernel_w"]))
        w = self._view(i, rec, int(rec["wgt"]), (k, x.shape[1] // g) + kernel, np.int8,
                       "weights")
        bias = self._channel_vector(i, rec, "bias", c)
        c.bytes_read += w.nbytes
        pads = [int(rec[f]) for f in ("pad_t", "pad_l", "pad_b", "pad_r")]
        acc = OPS["Conv"].run([x, w, bias], dict(
            OPS["Conv"].attrs, kernel_shape=list(kernel), group=g, pads=pads,
            strides=[int(rec["stride_h"]), int(rec["stride_w"])]))[0]
        c.macs += acc.size * (x.shape[1] // g) * kernel[0] * kernel[1]
        if not int(rec["flags"]) & HAS_CVT:
            raise DeviceError(f"nvdla: layer {i}: a CONV layer without the output converter "
                              f"cannot write its int32 accumulator as int8")
        return self._sdp_stages(i, rec, acc, c)

    def _sdp(self, i, rec, c: Counters) -> np.ndarray:
        return self._sdp_stages(i, rec, self._src(i, rec, c), c)

    def _sdp_stages(self, i, rec, x: np.ndarray, c: Counters) -> np.ndarray:
        flags = int(rec["flags"])
        rounding = "half_even" if flags & HALF_EVEN else "half_up"
        y = x
        if flags & HAS_CVT:
            m = self._channel_vector(i, rec, "cvt_mul", c)
            s = self._channel_vector(i, rec, "cvt_shift", c)
            if (m is None) != (s is None):
                raise DeviceError(f"nvdla: layer {i}: per-channel multipliers and shifts "
                                  f"come together")
            per_tensor = dict(multiplier=int(rec["cvt_m"]), shift=int(rec["cvt_s"])) \
                if m is None else {}
            y = run_op("RequantizeMul", *([y] if m is None else [y, m, s]), axis=1,
                       lo=int(rec["cvt_lo"]), hi=int(rec["cvt_hi"]), rounding=rounding,
                       **per_tensor)
        if flags & HAS_EW:
            e = self._view(i, rec, int(rec["ew"]), y.shape, np.int8, "element-wise operand")
            c.bytes_read += e.nbytes
            y = run_op("QAddMul", y, e, mul_a=int(rec["ew_mul_a"]), mul_b=int(rec["ew_mul_b"]),
                       shift=int(rec["ew_shift"]), lo=int(rec["ew_lo"]), hi=int(rec["ew_hi"]),
                       rounding=rounding)
        if y.dtype != np.int8:
            raise DeviceError(f"nvdla: layer {i}: the SDP has no stage that writes int8 "
                              f"(flags {flags:#x})")
        return y

    def _cdp(self, i, rec, c: Counters) -> np.ndarray:
        x = self._src(i, rec, c)
        lut = self._view(i, rec, int(rec["lut"]), (LRN_LUT_ENTRIES,), np.int32, "lookup table")
        c.bytes_read += lut.nbytes
        rounding = "half_even" if int(rec["flags"]) & HALF_EVEN else "half_up"
        return run_op("QLrn", x, lut, size=int(rec["kernel_h"]), lut_shift=int(rec["lut_shift"]),
                      multiplier=int(rec["cvt_m"]), shift=int(rec["cvt_s"]),
                      lo=int(rec["cvt_lo"]), hi=int(rec["cvt_hi"]), rounding=rounding)

    def _pdp(self, i, rec, c: Counters) -> np.ndarray:
        x = self._src(i, rec, c)
        window = dict(kernel_shape=[int(rec["kernel_h"]), int(rec["kernel_w"])],
                      strides=[int(rec["stride_h"]), int(rec["stride_w"])],
                      pads=[int(rec[f]) for f in ("pad_t", "pad_l", "pad_b", "pad_r")])
        flags = int(rec["flags"])
        if flags & MAX_POOL:
            return OPS["MaxPool"].run([x], dict(OPS["MaxPool"].attrs, **window),
                                      num_outputs=1)[0]
        if flags & SUM_POOL:       # average pooling: window sums, then the converter
            return self._sdp_stages(i, rec, run_op("SumPool", x, **window), c)
        raise DeviceError(f"nvdla: layer {i}: a PDP layer must max- or sum-pool "
                          f"(flags {flags:#x})")


__all__ = ["Counters", "LayerDump", "Simulator"]

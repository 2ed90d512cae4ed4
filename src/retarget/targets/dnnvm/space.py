"""The dnnvm target's design space for `retarget explore` (targets/space.py, docs/explore.md).

Varied: the CONV engine's parallelism (ic_p, oc_p, h_p), the buffer split (input, weight and
output buffer bytes) and the number of engines. Latency is one frame on one engine (batch 1);
more engines add frames in flight (the `frame_time` objective) and multiply the resources.

Resource model (docs/explore.md cites the sources):
- MACs per cycle = ic_p x oc_p x h_p / step_cycles per engine (the paper's peak counts
  ic_p*oc_p*h_p operations per cycle);
- DSP slices = engines x ceil(MACs per cycle / 4): the paper (Sec. III) packs "two or four INT8
  Mults" per DSP48 slice: two sharing an operand (Xilinx WP490) at twice the fabric clock
  (XAPP706's DSP48 double data rate; PG338's dpu_2x_clk). Its Table V measures 1,542 DSPs on
  ZU9 (3 engines of 32x16x8), against 1,536 from this formula;
- block RAM: each buffer is a grid of 18 Kb blocks (targets.space.bram18) by depth and the
  width one CONV step reads or writes: input ic_p x h_p x 8 bits, weights ic_p x oc_p x 8,
  output oc_p x h_p x 32 (int32 partial sums), bias oc_p x 32; times engines.
"""
from __future__ import annotations

import math

from ..space import Buffer, Constraint, DesignSpace, Param, Resources
from .config import KiB, PRESETS, DNNVMConfig


def _buffer(name: str, nbytes: int, width_bits: int) -> Buffer:
    return Buffer(name, math.ceil(nbytes * 8 / width_bits), width_bits)


def resources(cfg: DNNVMConfig) -> Resources:
    macs = cfg.ic_p * cfg.oc_p * cfg.h_p // cfg.step_cycles
    bufs = (_buffer("inp", cfg.inp_buf_bytes, cfg.ic_p * cfg.h_p * 8),
            _buffer("wgt", cfg.wgt_buf_bytes, cfg.ic_p * cfg.oc_p * 8),
            _buffer("out", cfg.out_buf_bytes, cfg.oc_p * cfg.h_p * 32),
            _buffer("bias", cfg.bias_buf_bytes, cfg.oc_p * 32))
    e = cfg.engines
    return Resources(macs_per_cycle=macs * e, onchip_bytes=e * cfg.on_chip_bytes,
                     dsp=e * math.ceil(macs / 4), bram18=e * sum(b.bram18 for b in bufs),
                     buffers=bufs,
                     note=f"{e} engine(s); buffers are per engine" if e > 1 else "")


def _slots(cfg: DNNVMConfig) -> str | None:
    """Each double-buffer half must hold one CONV step's operands: ic_p x h_p input bytes for
    a 3x3 window, ic_p x oc_p weight bytes per tap (9 taps), oc_p x h_p int32 outputs."""
    short = []
    if cfg.inp_slot < 9 * cfg.ic_p * cfg.h_p:
        short.append(f"input half {cfg.inp_slot} B < {9 * cfg.ic_p * cfg.h_p}")
    if cfg.wgt_slot < 9 * cfg.ic_p * cfg.oc_p:
        short.append(f"weight half {cfg.wgt_slot} B < {9 * cfg.ic_p * cfg.oc_p}")
    if cfg.out_buf_bytes // 2 < 4 * cfg.oc_p * cfg.h_p:
        short.append(f"output half {cfg.out_buf_bytes // 2} B < {4 * cfg.oc_p * cfg.h_p}")
    return "; ".join(short) or None


def _pos(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _bytes(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 64 <= v <= 1 << 24


def design_space(preset: str = "zu2") -> DesignSpace:
    base = PRESETS[preset]
    params = {
        "ic_p": Param("ic_p", (8, 16, 24, 32), _pos, "input channels per step"),
        "oc_p": Param("oc_p", (8, 12, 16), _pos, "output channels per step"),
        "h_p": Param("h_p", (2, 4, 8), _pos, "output rows per step"),
        "inp_buf_bytes": Param("inp_buf_bytes", (128 * KiB, 224 * KiB, 512 * KiB), _bytes),
        "wgt_buf_bytes": Param("wgt_buf_bytes", (128 * KiB, 288 * KiB, 512 * KiB), _bytes),
        "out_buf_bytes": Param("out_buf_bytes", (64 * KiB, 128 * KiB, 256 * KiB), _bytes),
        "engines": Param("engines", (1, 2, 3), _pos, "CONV engines (frames in flight)"),
    }
    return DesignSpace("dnnvm", base, params, [Constraint("buffer halves", _slots)],
                       resources, preset=preset)


__all__ = ["design_space", "resources"]

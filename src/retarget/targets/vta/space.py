"""The vta target's design space for `retarget explore` (targets/space.py, docs/explore.md).

Varied: the GEMM core's shape (log_batch, log_block_in, log_block_out), the four SRAMs' log2
sizes in bytes, the clock, `alu_stage` and, with it, the ALU's initiation interval. The number of
virtual threads is not a hardware field: the lowering chooses 1 or 2 per layer with the cycle
model (lower/choose.py choose_schedule), so it is not swept.

Resource model (docs/explore.md cites the sources):
- MACs per cycle = BATCH x BLOCK_IN x BLOCK_OUT (one GEMM per cycle);
- DSP slices = ceil(MACs per cycle / 2): two int8 multiplies sharing an operand packed into one
  DSP48 (Xilinx WP490; the DNNVM paper, Sec. III, packs two per DSP48E1 the same way). A GEMM
  core shares every input element across BLOCK_OUT weights, so its multipliers pair up.
- block RAM: each SRAM is a grid of 18 Kb blocks by its depth (entries) and read width (one
  entry per cycle), targets.space.bram18: uop 32-bit entries; inp BATCH x BLOCK_IN x 8 bits;
  wgt BLOCK_OUT x BLOCK_IN x 8; acc BATCH x BLOCK_OUT x 32; out BATCH x BLOCK_OUT x 8 (the
  store buffer, sized acc / 4 as VTA's LOG_OUT_BUFF_SIZE).
"""
from __future__ import annotations

import math

from ..space import Buffer, Constraint, DesignSpace, Param, Resources
from .config import PRESETS, VTAConfig


def resources(cfg: VTAConfig) -> Resources:
    macs = cfg.batch * cfg.block_in * cfg.block_out
    bufs = (Buffer("uop", cfg.uop_depth, 8 * cfg.uop_elem_bytes),
            Buffer("inp", cfg.inp_depth, 8 * cfg.inp_elem_bytes),
            Buffer("wgt", cfg.wgt_depth, 8 * cfg.wgt_elem_bytes),
            Buffer("acc", cfg.acc_depth, 8 * cfg.acc_elem_bytes),
            Buffer("out", cfg.out_depth, 8 * cfg.out_elem_bytes))
    return Resources(macs_per_cycle=macs, onchip_bytes=sum(b.bytes for b in bufs),
                     dsp=math.ceil(macs / 2), bram18=sum(b.bram18 for b in bufs), buffers=bufs)


# The smallest useful tile: one 3x3 window over one input-channel block, for each of the two
# virtual threads the lowering may use (each takes half of INP, WGT and ACC).
MIN_WINDOW = 9


def _depths(cfg: VTAConfig) -> str | None:
    """Block sizes against buffer depths: each SRAM must hold the smallest tile of both
    virtual threads, or no conv can be lowered whatever its shape."""
    need = {"inp": 2 * MIN_WINDOW, "wgt": 2 * MIN_WINDOW, "acc": 2 * 2, "uop": 2 * MIN_WINDOW}
    have = {"inp": cfg.inp_depth, "wgt": cfg.wgt_depth, "acc": cfg.acc_depth,
            "uop": cfg.uop_depth}
    short = [f"{k} holds {have[k]} entries < {need[k]}" for k in need if have[k] < need[k]]
    if short:
        return (f"BLOCK {cfg.batch}x{cfg.block_in}x{cfg.block_out}: " + "; ".join(short) +
                " (two virtual threads' 3x3 tiles)")
    return None


def _layout(cfg: VTAConfig) -> str | None:
    """The lowering keeps activations in one packed layout between layers, so every ALU layer
    (pooling, residual add, requantisation) needs BLOCK_IN == BLOCK_OUT (lower/alu_layers.py)."""
    if cfg.block_in != cfg.block_out:
        return (f"BLOCK_IN {cfg.block_in} != BLOCK_OUT {cfg.block_out}: ALU layers need one "
                f"packed activation layout")
    return None


def _in(lo: int, hi: int):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def design_space(preset: str = "pynq") -> DesignSpace:
    base = PRESETS[preset]
    params = {
        "log_batch": Param("log_batch", (0, 1), _in(0, 3), "BATCH = 2^log_batch"),
        "log_block_in": Param("log_block_in", (3, 4, 5), _in(2, 6), "BLOCK_IN"),
        "log_block_out": Param("log_block_out", (3, 4, 5), _in(2, 6), "BLOCK_OUT"),
        "log_inp_buff_size": Param("log_inp_buff_size", (13, 14, 15, 16, 17), _in(8, 22),
                                   "INP SRAM bytes, log2"),
        "log_wgt_buff_size": Param("log_wgt_buff_size", (15, 16, 17, 18, 19, 20), _in(8, 24),
                                   "WGT SRAM bytes, log2"),
        "log_acc_buff_size": Param("log_acc_buff_size", (15, 16, 17, 18, 19), _in(8, 22),
                                   "ACC SRAM bytes, log2"),
        "log_uop_buff_size": Param("log_uop_buff_size", (13, 14, 15), _in(8, 17),
                                   "micro-op SRAM bytes, log2"),
        # The cycle model counts cycles; the clock only converts them to seconds, and no
        # timing-closure model prices a faster clock, so one value by default (a space file
        # may sweep it).
        "clock_mhz": Param("clock_mhz", (base.clock_mhz,),
                           lambda v: isinstance(v, (int, float)) and 0 < v <= 1000, "MHz"),
    }
    params["alu_stage"] = Param("alu_stage", (False, True), lambda v: isinstance(v, bool),
                                "separate ALU stage")
    # The ALU's initiation interval: the published design's "at least 2" (its passes read and
    # write the accumulator SRAM the GEMM shares); 1 is an assumption for an ALU stage of its
    # own, using the SRAM's second port while the GEMM fills the other tile.
    params["alu_ii"] = Param("alu_ii", (2, 1), _in(1, 8), "ALU initiation interval")
    constraints = [Constraint("buffer depths", _depths),
                   Constraint("activation layout", _layout),
                   Constraint("ALU interval", _alu_interval)]
    return DesignSpace("vta", base, params, constraints, resources, preset=preset)


def _alu_interval(cfg: VTAConfig) -> str | None:
    if cfg.alu_ii < 2 and not cfg.alu_stage:
        return (f"alu_ii {cfg.alu_ii} with the ALU sharing the compute module: its passes "
                f"read and write the accumulator SRAM the GEMM uses, II >= 2")
    return None


__all__ = ["design_space", "resources"]

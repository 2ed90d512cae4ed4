"""DNNVM overlay configuration: parallelism, on-chip buffers, clock, DDR and timing fields.

Facts from the DNNVM paper (../shared/specs/dnnvm.md §1): the CONV engine is parallel over
input channels (ic_p), output rows (h_p) and output channels (oc_p); one CONV step (ic_p x
oc_p x h_p MACs for one output column and one kernel tap) takes `step_cycles` = 2 cycles,
which gives the paper's peak of ic_p*oc_p*h_p operations per cycle (zu2: 380 GOP/s at 330 MHz).
The buffer split, DDR bandwidth and per-instruction overhead are our choices; the two DDR/issue
numbers are calibrated (benchmarks/bench_dnnvm.py --calibrate, docs/dnnvm.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ...errors import TargetError
from ..accel.config import ConfigFields, config_from_spec

KiB = 1024


@dataclass(frozen=True, slots=True)
class DNNVMConfig(ConfigFields):
    label: ClassVar[str] = "dnnvm"

    ic_p: int = 24                  # input channels per CONV step
    oc_p: int = 12                  # output channels per CONV step
    h_p: int = 4                    # output rows per CONV step
    clock_mhz: float = 330.0
    engines: int = 1                # CONV engines on the chip (frames spread over them)
    # on-chip buffers, bytes; each is split in two halves (double buffering)
    inp_buf_bytes: int = 224 * KiB
    wgt_buf_bytes: int = 288 * KiB
    out_buf_bytes: int = 128 * KiB  # holds a tile's int32 partial sums, then its int8 result
    bias_buf_bytes: int = 8 * KiB
    # timing (cycles); the two calibrated fields are fitted on VGG and ResNet-50 at zu2
    step_cycles: int = 2            # one ic_p x oc_p x h_p step (spec §1)
    conv_pipeline: int = 16         # PE-array fill per CONV instruction (assumed)
    pool_lanes: int = 16            # POOL / MISC elements per cycle (assumed)
    # A CONV whose input channels are fewer than ic_p feeds the idle input lanes with the
    # next kernel columns: in NHWC a row's kw x ic window bytes are contiguous (Xilinx's
    # DPU calls this channel augmentation, PG338; docs/dnnvm.md)
    channel_augmentation: bool = True
    ddr_bytes_per_cycle: float = 6.0   # calibrated
    ddr_latency: int = 40           # cycles from request to first beat (assumed)
    insn_overhead: int = 0          # calibrated: decode/issue of one instruction (see docs)
    # compile choices
    offload_fc: bool = False        # run Gemm/MatMul on the overlay (the paper keeps FC on CPU)
    tile_search: bool = True        # False: always the paper's eq. 5 tiles
    max_kernel: int = 15            # the CONV / POOL kernel fields are 4 bits (1..15)
    min_region_macs: int = 0
    dram_bytes: int = 1 << 30       # simulated DDR
    name: str = "zu2"

    def __post_init__(self):
        validate(self)

    @property
    def target_name(self) -> str:
        return (f"dnnvm_{self.ic_p}x{self.oc_p}x{self.h_p}_{self.on_chip_bytes // KiB}k"
                f"@{self.clock_mhz:g}")

    @property
    def on_chip_bytes(self) -> int:
        return self.inp_buf_bytes + self.wgt_buf_bytes + self.out_buf_bytes + self.bias_buf_bytes

    @property
    def macs_per_step(self) -> int:
        return self.ic_p * self.oc_p * self.h_p

    def window_steps(self, kh: int, kw: int, ic: int, depthwise: bool = False) -> int:
        """CONV steps for one output column block over the kernel window and `ic` input
        channels: kh*kw taps of ceil(ic/ic_p) steps each, or, with channel augmentation and
        ic < ic_p, kh rows of ceil(kw*ic/ic_p) steps (kernel columns packed into the lanes)."""
        if depthwise:
            return kh * kw
        if self.channel_augmentation and ic < self.ic_p:
            return kh * -(-(kw * ic) // self.ic_p)
        return kh * kw * -(-ic // self.ic_p)

    @property
    def peak_gops(self) -> float:
        """Operations (2 per MAC) per second of one engine, in G."""
        return 2 * self.macs_per_step / self.step_cycles * self.clock_mhz / 1e3

    @property
    def bus_bytes(self) -> float:
        """DDR bytes per cycle (what report/ calls the bus width)."""
        return self.ddr_bytes_per_cycle

    # half of each buffer: one slot of the double buffer
    @property
    def inp_slot(self) -> int: return self.inp_buf_bytes // 2
    @property
    def wgt_slot(self) -> int: return self.wgt_buf_bytes // 2
    @property
    def bias_slot_entries(self) -> int: return self.bias_buf_bytes // 2 // 4


def validate(c: DNNVMConfig) -> None:
    """Reject configs the hardware or its ISA fields cannot express, naming the field."""
    def bad(msg):
        raise TargetError(f"invalid dnnvm config {c.name!r}: {msg}")

    ints = ("ic_p", "oc_p", "h_p", "engines", "inp_buf_bytes", "wgt_buf_bytes", "out_buf_bytes",
            "bias_buf_bytes", "step_cycles", "conv_pipeline", "pool_lanes", "ddr_latency",
            "insn_overhead", "max_kernel", "min_region_macs", "dram_bytes")
    for f in ints:
        v = getattr(c, f)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            bad(f"{f}={v!r} must be a non-negative integer")
    for f in ("ic_p", "oc_p", "h_p", "engines", "step_cycles", "pool_lanes", "max_kernel"):
        if getattr(c, f) < 1:
            bad(f"{f} must be at least 1")
    if c.macs_per_step % c.step_cycles:
        bad(f"ic_p*oc_p*h_p = {c.macs_per_step} must be a multiple of step_cycles "
            f"({c.step_cycles}): MACs per cycle are whole")
    if c.max_kernel > 15:
        bad(f"max_kernel={c.max_kernel}: the ISA's kernel fields are 4 bits (at most 15)")
    for f in ("inp_buf_bytes", "wgt_buf_bytes", "out_buf_bytes", "bias_buf_bytes"):
        if not 64 <= getattr(c, f) <= 1 << 24:
            bad(f"{f}={getattr(c, f)} outside 64 B .. 16 MiB (the ISA's 24-bit on-chip "
                f"addresses)")
    if not isinstance(c.channel_augmentation, bool):
        bad(f"channel_augmentation={c.channel_augmentation!r} must be true or false")
    for f in ("clock_mhz", "ddr_bytes_per_cycle"):
        v = getattr(c, f)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) \
                or v <= 0:
            bad(f"{f} must be a positive finite number, got {v!r}")
    if c.dram_bytes <= 0 or c.dram_bytes > 1 << 32:
        bad(f"dram_bytes={c.dram_bytes} must be in 1 .. 4 GiB (32-bit DDR addresses)")


# The paper's two boards (spec §1) and a small preset whose buffers force tiling in tests.
PRESETS: dict[str, DNNVMConfig] = {
    "zu2": DNNVMConfig(),
    "zu9": DNNVMConfig(ic_p=32, oc_p=16, h_p=8, engines=3, inp_buf_bytes=1280 * KiB,
                       wgt_buf_bytes=1536 * KiB, out_buf_bytes=1024 * KiB,
                       bias_buf_bytes=64 * KiB, name="zu9"),
    "test": DNNVMConfig(ic_p=4, oc_p=4, h_p=2, inp_buf_bytes=4 * KiB, wgt_buf_bytes=4 * KiB,
                        out_buf_bytes=2 * KiB, bias_buf_bytes=256, pool_lanes=4,
                        name="test"),
}


def load_config(spec: str | None) -> DNNVMConfig:
    """A preset name or the path of a JSON file of config fields; None is zu2."""
    return config_from_spec(DNNVMConfig, PRESETS, "zu2", spec)


__all__ = ["DNNVMConfig", "PRESETS", "load_config", "validate"]

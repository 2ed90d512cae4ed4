"""VTA hardware configuration: a frozen dataclass of log2 sizes plus clock, bus and timing.

Field names follow the published VTA config (LOG_* keys, lower-cased). Everything else in
targets/vta derives widths and depths from here; nothing assumes the default 1x16 core.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import TargetError
from ..accel.config import ConfigFields, config_from_spec
from .isa import derive_layout


@dataclass(frozen=True, slots=True)
class VTAConfig(ConfigFields):
    label: ClassVar[str] = "VTA"

    log_inp_width: int = 3      # int8 inputs
    log_wgt_width: int = 3      # int8 weights
    log_acc_width: int = 5      # int32 accumulators
    log_batch: int = 0          # BATCH = 1
    log_block_in: int = 4       # BLOCK_IN = 16
    log_block_out: int = 4      # BLOCK_OUT = 16
    log_uop_buff_size: int = 15   # bytes, log2
    log_inp_buff_size: int = 15
    log_wgt_buff_size: int = 18
    log_acc_buff_size: int = 17
    clock_mhz: float = 100.0
    bus_bytes: int = 8          # memory bus width in bytes per cycle (pynq: 64-bit)
    dram_bytes: int = 1 << 30   # size of the simulated DRAM
    # Timing-model parameters (cycles); used by the cycle model (timing.py), not by the
    # behavioural simulator. docs/cycle-model.md says where each number comes from.
    dma_latency: int = 64       # setup latency of one DMA request (assumed: DDR via AXI HP port)
    gemm_pipeline: int = 5      # GEMM pipeline fill per instruction (assumed)
    alu_ii: int = 2             # tensor ALU initiation interval (paper: "at least 2")
    alu_pipeline: int = 4       # ALU pipeline fill per instruction (assumed)
    insn_overhead: int = 2      # fixed cost to decode/issue one instruction in its module
    # 8 is the published HLS design's command-queue depth (STREAM_IN_DEPTH); it bounds how far
    # the fetch stage can run ahead, so a shallower queue is the honest default.
    cmd_queue_depth: int = 8    # depth of each module's command queue
    # The host CPU's int8 convolution throughput, in G MAC/s, against which a grouped conv's
    # modelled time on vta is weighed (rules.py). The VTA paper's Fig. 16: the Pynq's
    # Cortex-A9 (667 MHz) took over 3 s for ResNet-18's ~1.8 G conv MACs, 40x slower than VTA.
    host_gmacs: float = 0.6
    # The alu_stage variant (docs/cycle-model.md, "The alu_stage variant"): ALU instructions
    # run on a fourth module, fed by a token queue from the compute (GEMM) module, so the
    # requantisation of one tile overlaps the GEMMs of the next. False: the published design.
    alu_stage: bool = False
    name: str = "pynq"

    def __post_init__(self):
        validate(self)

    @property
    def alu_overlaps_gemm(self) -> bool:
        """Whether ALU work runs beside the GEMM (the report's compute ceiling reads this)."""
        return self.alu_stage

    # ---- derived sizes ---------------------------------------------------------------------
    @property
    def batch(self) -> int: return 1 << self.log_batch
    @property
    def block_in(self) -> int: return 1 << self.log_block_in
    @property
    def block_out(self) -> int: return 1 << self.log_block_out
    @property
    def inp_width(self) -> int: return 1 << self.log_inp_width
    @property
    def wgt_width(self) -> int: return 1 << self.log_wgt_width
    @property
    def acc_width(self) -> int: return 1 << self.log_acc_width
    @property
    def out_width(self) -> int: return self.inp_width
    @property
    def log_out_buff_size(self) -> int:
        return self.log_acc_buff_size + self.log_inp_width - self.log_acc_width

    # element sizes in bytes (one SRAM entry)
    @property
    def uop_elem_bytes(self) -> int: return 4
    @property
    def inp_elem_bytes(self) -> int: return self.batch * self.block_in * self.inp_width // 8
    @property
    def wgt_elem_bytes(self) -> int: return self.block_out * self.block_in * self.wgt_width // 8
    @property
    def acc_elem_bytes(self) -> int: return self.batch * self.block_out * self.acc_width // 8
    @property
    def out_elem_bytes(self) -> int: return self.batch * self.block_out * self.out_width // 8

    # depths (number of entries)
    @property
    def uop_depth(self) -> int: return (1 << self.log_uop_buff_size) // self.uop_elem_bytes
    @property
    def inp_depth(self) -> int: return (1 << self.log_inp_buff_size) // self.inp_elem_bytes
    @property
    def wgt_depth(self) -> int: return (1 << self.log_wgt_buff_size) // self.wgt_elem_bytes
    @property
    def acc_depth(self) -> int: return (1 << self.log_acc_buff_size) // self.acc_elem_bytes
    @property
    def out_depth(self) -> int: return (1 << self.log_out_buff_size) // self.out_elem_bytes

    @property
    def peak_gops(self) -> float:
        """2 ops per MAC, one BATCH x BLOCK_IN x BLOCK_OUT product per cycle."""
        return 2 * self.batch * self.block_in * self.block_out * self.clock_mhz / 1e3

    @property
    def target_name(self) -> str:
        """The published naming scheme, e.g. 1x16_i8w8a32_15_15_18_17."""
        return (f"{self.batch}x{self.block_in}_i{self.inp_width}w{self.wgt_width}a{self.acc_width}"
                f"_{self.log_uop_buff_size}_{self.log_inp_buff_size}_{self.log_wgt_buff_size}"
                f"_{self.log_acc_buff_size}")


def validate(c: VTAConfig) -> None:
    """Reject configs the hardware (or its ISA fields) cannot express, with the reason."""
    def bad(msg):
        raise TargetError(f"invalid VTA config {c.name!r}: {msg}")

    for f in ("log_inp_width", "log_wgt_width", "log_acc_width", "log_batch", "log_block_in",
              "log_block_out", "log_uop_buff_size", "log_inp_buff_size", "log_wgt_buff_size",
              "log_acc_buff_size", "bus_bytes", "dram_bytes"):
        if not isinstance(getattr(c, f), int) or isinstance(getattr(c, f), bool):
            bad(f"{f}={getattr(c, f)!r} must be an integer")
    if c.log_inp_width != 3 or c.log_wgt_width != 3:
        bad("only 8-bit inputs and weights are supported (log_inp_width = log_wgt_width = 3)")
    if c.log_acc_width != 5:
        bad("only 32-bit accumulators are supported (log_acc_width = 5)")
    for f in ("log_batch", "log_block_in", "log_block_out"):
        if not 0 <= getattr(c, f) <= 8:
            bad(f"{f}={getattr(c, f)} must be in 0..8")
    for f, elem in (("log_uop_buff_size", c.uop_elem_bytes), ("log_inp_buff_size", c.inp_elem_bytes),
                    ("log_wgt_buff_size", c.wgt_elem_bytes), ("log_acc_buff_size", c.acc_elem_bytes)):
        if (1 << getattr(c, f)) < elem:
            bad(f"{f}={getattr(c, f)} is smaller than one element ({elem} bytes)")
        if getattr(c, f) > 40:
            bad(f"{f}={getattr(c, f)} is unreasonably large (max 40)")
    # The ISA's index fields are as wide as log2 of the buffer depths they index, and every
    # field must fit its 64-bit half (micro-ops: 32 bits). derive_layout says which does not.
    derive_layout(c)
    if c.bus_bytes <= 0 or c.bus_bytes & (c.bus_bytes - 1):
        bad(f"bus_bytes={c.bus_bytes} must be a power of two")
    if not c.clock_mhz > 0 or c.clock_mhz == float("inf"):   # NaN fails `> 0`
        bad(f"clock_mhz must be a positive finite number, got {c.clock_mhz!r}")
    if not c.host_gmacs > 0 or c.host_gmacs == float("inf"):
        bad(f"host_gmacs must be a positive finite number, got {c.host_gmacs!r}")
    if c.dram_bytes <= 0:
        bad(f"dram_bytes={c.dram_bytes} must be positive")
    for f in ("dma_latency", "gemm_pipeline", "alu_ii", "alu_pipeline", "insn_overhead",
              "cmd_queue_depth"):
        if not isinstance(getattr(c, f), int) or getattr(c, f) < 0:
            bad(f"{f}={getattr(c, f)!r} must be a non-negative integer")
    if not isinstance(c.alu_stage, bool):
        bad(f"alu_stage={c.alu_stage!r} must be true or false")
    if c.cmd_queue_depth < 1 or c.alu_ii < 1:
        bad("cmd_queue_depth and alu_ii must be at least 1")


# Presets. `pynq` is the default. The larger cores keep per-element depths within the ISA's
# index fields by scaling the log buffer sizes with the block.
PRESETS: dict[str, VTAConfig] = {
    "pynq": VTAConfig(),
    "ultra96": VTAConfig(clock_mhz=333.0, bus_bytes=16, name="ultra96"),
    "1x32": VTAConfig(log_block_in=5, log_block_out=5, log_inp_buff_size=16,
                      log_wgt_buff_size=20, log_acc_buff_size=18, name="1x32"),
    "1x64": VTAConfig(log_block_in=6, log_block_out=6, log_inp_buff_size=17,
                      log_wgt_buff_size=22, log_acc_buff_size=19, bus_bytes=16, name="1x64"),
    "2x16": VTAConfig(log_batch=1, log_inp_buff_size=16, log_acc_buff_size=18, name="2x16"),
    # pynq with the requantisation ALU in its own pipeline stage (a variant, not a board)
    "pynq_alu": VTAConfig(alu_stage=True, name="pynq_alu"),
}


def preset(name: str) -> VTAConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise TargetError(f"unknown VTA preset {name!r}; known: {', '.join(PRESETS)}") from None


def load_config(spec: str | None) -> VTAConfig:
    """A preset name (pynq, ultra96, 1x32, 1x64, 2x16, pynq_alu) or the path of a JSON file of config
    fields (as written by VTAConfig.to_dict); None means the default (pynq)."""
    return config_from_spec(VTAConfig, PRESETS, "pynq", spec)

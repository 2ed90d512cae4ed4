"""The Sunway target's configuration: one SW26010 core group (or up to four) as the cost model
sees it, the schedule, and how the emulation build is made. Numbers and sources:
docs/sunway.md, "The cost model's assumptions"."""
from __future__ import annotations

from dataclasses import dataclass

MODES = ("swtvm", "openacc", "elementwise")
BASELINES = ("openacc", "elementwise")     # what our code is compared with, first the faithful one
# The emulation build's flags by default (and the generated Makefile's, which does not follow
# the loading machine's `cflags`: the Makefile is part of the sources an artifact ships).
DEFAULT_CFLAGS = "-O2 -std=c99"
MAX_CPES = 256                 # RT_MAX_CPES of runtime/athread_emu.h
MAX_LDM_BYTES = 1 << 24


@dataclass(frozen=True, slots=True)
class SunwayConfig:
    """mode: "swtvm" (LDM buffers sized by Algorithm 1, loops by Algorithm 2, DMA by
        Algorithm 3); "openacc" (the faithful baseline, openacc.py: the lowered nests, outer
        loop split over the CPEs, each tensor's slice copied into LDM at the outermost level
        where it fits, global loads for the rest); or "elementwise" (the naive OpenACC
        code: every main-memory element read and written by a global load / store).
    core_groups, cpes_per_cg: the machine; the outer loop of a layer is split over
        core_groups * cpes_per_cg CPEs (64 per SW26010 core group).
    ldm_bytes: each CPE's local memory (64 KB); the capacity Algorithm 1 sizes buffers for.
    clock_ghz, flops_per_cycle: a CPE's clock and peak (1.45 GHz, 8 flops per cycle:
        a 256-bit FMA on four doubles; 11.6 GFlop/s per CPE).
    compute_efficiency: the fraction of a CPE's peak generated scalar C reaches (assumed).
    dma_gbps: a core group's DMA bandwidth for large blocks (measured ~21 GB/s of the
        theoretical 34.1), shared by its CPEs.
    dma_overhead_bytes: the fixed cost of one DMA transfer, as bytes of bandwidth: measured
        bandwidth by block size follows BW(B) = dma_gbps * B / (B + 640).
    gld_cycles: the latency of one global load / store from a CPE (assumed, no figure we
        trust was found; the benchmark shows how the baseline moves with it).
    spawn_us: athread_spawn + athread_join per layer (assumed).
    acc_copy_rule: "cheaper" (the openacc baseline copies a tensor's slice where it fits and
        the copies cost less than the global accesses they replace) or "fits" (wherever it
        fits).
    acc_copy_levels: "any" (the openacc baseline copies a slice at the outermost loop level
        where it fits) or "iteration" (only at the CPE loop's iteration or outside it).
    double_buffer: swtvm mode only: a loop whose body starts by fetching read-only tiles
        fetches the next iteration's into a second buffer while it computes on the current
        (double_buffer.py); the buffers are sized so that both fit the LDM.
    share_first: cap the buffers so each nest's outer independent loop keeps an iteration
        per CPE (ours); False sizes them by Algorithm 1 alone, as swTVM's Fig. 2 does.
    cc, cflags, build_dir, memory_bytes: the emulation build on the host and its device
        memory, as for the c target."""
    mode: str = "swtvm"
    core_groups: int = 1
    cpes_per_cg: int = 64
    ldm_bytes: int = 64 * 1024
    clock_ghz: float = 1.45
    flops_per_cycle: int = 8
    compute_efficiency: float = 0.5
    dma_gbps: float = 21.0
    dma_overhead_bytes: int = 640
    gld_cycles: int = 200
    spawn_us: float = 10.0
    acc_copy_rule: str = "cheaper"
    acc_copy_levels: str = "any"
    double_buffer: bool = False
    share_first: bool = True
    cc: str = "gcc"
    cflags: str = DEFAULT_CFLAGS
    build_dir: str = ""
    memory_bytes: int = 1 << 31
    min_region_macs: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.acc_copy_levels not in ("any", "iteration"):
            raise ValueError(f"acc_copy_levels {self.acc_copy_levels!r} is not 'any' or "
                             "'iteration'")
        if self.acc_copy_rule not in ("cheaper", "fits"):
            raise ValueError(f"acc_copy_rule {self.acc_copy_rule!r} is not 'cheaper' or 'fits'")
        if self.double_buffer and self.mode != "swtvm":
            raise ValueError(f"double_buffer applies to mode 'swtvm', not {self.mode!r}")
        if not 1 <= self.core_groups <= 4:
            raise ValueError(f"core_groups must be 1 to 4 (an SW26010 has four), got "
                             f"{self.core_groups}")
        for name in ("cpes_per_cg", "ldm_bytes", "flops_per_cycle", "gld_cycles"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        # the emulation allocates cpes x ldm_bytes and starts a thread per CPE (athread_emu.c
        # holds at most 256): bounded, so no config (an artifact's included) can ask for more
        if self.cpes > MAX_CPES:
            raise ValueError(f"core_groups * cpes_per_cg = {self.cpes} CPEs, more than the "
                             f"emulation's {MAX_CPES}")
        if self.ldm_bytes > MAX_LDM_BYTES:
            raise ValueError(f"ldm_bytes={self.ldm_bytes} is more than {MAX_LDM_BYTES} (a CPE's "
                             f"local memory is 64 KB on an SW26010)")
        for name in ("clock_ghz", "dma_gbps", "compute_efficiency"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.cc.strip():
            raise ValueError("cc must name a C compiler")

    @property
    def cpes(self) -> int:
        return self.core_groups * self.cpes_per_cg


PRESETS = {
    "sw26010": SunwayConfig(),
    "sw26010_4cg": SunwayConfig(core_groups=4),
    "sw26010_db": SunwayConfig(double_buffer=True),
    "openacc": SunwayConfig(mode="openacc"),
    "elementwise": SunwayConfig(mode="elementwise"),
}

__all__ = ["BASELINES", "DEFAULT_CFLAGS", "MODES", "PRESETS", "SunwayConfig"]

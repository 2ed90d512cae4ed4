"""The `c` target's configuration: how the generated library is scheduled and built."""
from __future__ import annotations

from dataclasses import dataclass

MODES = ("optimized", "buffered", "naive")


@dataclass(frozen=True, slots=True)
class CConfig:
    """mode: which schedule `targets.c.schedule.schedule_kernel` applies to each kernel:
        "optimized" (register tiles, packed weights), "buffered" (swTVM's buffering, loop
        order and copy insertion in `local_bytes`) or "naive" (the lowered nests: the
        baseline without buffering or reordering).
    cc: the C compiler command (words split as a shell would: "ccache gcc" works).
    cflags: compiler flags for the library retarget builds (the emitted Makefile has its own
        overridable CFLAGS).
    openmp: build with -fopenmp, so parallel loops run on OMP_NUM_THREADS threads.
    build_dir: where each region's sources are written and built ("<build_dir>/<region>/");
        empty: a new temporary directory per region, removed when the module is.
    memory_bytes: the device memory (weights, arena, region inputs and outputs); pages are
        only touched when used.
    min_region_macs: the partitioner's size rule (0: every supported node runs as C).
    tile_channels, tile_columns: the register tile of an optimised conv / dense layer: at most
        this many output channels (the vector dimension) by this many output columns, each the
        largest divisor of the layer's extent within the limit. 16 x 8 float accumulators are
        16 AVX2 or 8 AVX-512 registers.
    local_bytes: the local memory the "buffered" mode sizes its buffers for (Algorithm 1's
        capacity): an L1 data cache by default (64 KB is a Sunway CPE's LDM)."""
    mode: str = "optimized"
    cc: str = "gcc"
    cflags: str = "-O3 -march=native -std=c99"
    openmp: bool = True
    build_dir: str = ""
    memory_bytes: int = 1 << 31
    min_region_macs: int = 0
    tile_channels: int = 16
    tile_columns: int = 8
    local_bytes: int = 32 * 1024

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not self.cc.strip():
            raise ValueError("cc must name a C compiler")
        if self.local_bytes < 1:
            raise ValueError(f"local_bytes must be positive, got {self.local_bytes}")
        if self.tile_channels < 1 or self.tile_columns < 1:
            raise ValueError(f"tile_channels and tile_columns must be positive, got "
                             f"{self.tile_channels} and {self.tile_columns}")
        if self.memory_bytes <= 0:
            raise ValueError(f"memory_bytes must be positive, got {self.memory_bytes}")


PRESETS = {
    "naive": CConfig(mode="naive"),
    "buffered": CConfig(mode="buffered"),
    # quick builds without host-specific instructions or vector extensions (the routines'
    # plain C99 fallback, targets/c/kernels/vec.h), e.g. for tests or a shared cache
    "portable": CConfig(cflags="-O2 -std=c99 -DRT_PORTABLE", openmp=False),
    # one thread: the host of an accelerator graph (`--host c:serial`), whose small edge ops
    # gain nothing from threads, and on a shared machine lose to OpenMP's barrier waits
    "serial": CConfig(openmp=False),
}

__all__ = ["CConfig", "MODES", "PRESETS"]

"""NVDLA-style engine configuration: the scalability parameters of NVDLA's public hardware
documentation (docs/nvdla-facts.md cites each), the clock, and the outside compiler.

Only what the compiler, the simulator and the throughput model read is here. `nv_small` and
`nv_full` are the two configurations NVDLA publishes; a JSON file of these fields names any
other (`--target nvdla --config FILE.json` is not needed: `--target nvdla -O atomic_k=16`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from ...errors import TargetError
from ..accel.config import ConfigFields, config_from_spec

KiB = 1024
# The bundled compiler, run as its own process with the interpreter retarget runs on.
BUNDLED_COMPILER = "{python} -m retarget.targets.nvdla.compile {json} -o {out}"
# Fields the compiler and the simulator depend on: a loadable records them and refuses to run
# on a config that differs in any (the compiler command and limits are not hardware).
HARDWARE_FIELDS = ("atomic_c", "atomic_k", "cbuf_banks", "cbuf_bank_bytes", "sdp_throughput",
                   "pdp_throughput", "cdp_throughput", "memif_bytes", "clock_mhz")


@dataclass(frozen=True, slots=True, eq=False)
class NvdlaConfig(ConfigFields):
    """Configs compare by the hardware they describe (HARDWARE_FIELDS): a loadable built for
    nv_small runs on any nv_small, whatever its compiler command or timeout."""
    label: ClassVar[str] = "nvdla"

    atomic_c: int = 64              # input channels per MAC-array cycle (atomic-C)
    atomic_k: int = 32              # output kernels per MAC-array cycle (atomic-K)
    cbuf_banks: int = 16            # convolution buffer banks
    cbuf_bank_bytes: int = 32 * KiB
    sdp_throughput: int = 16        # SDP elements per cycle
    pdp_throughput: int = 8         # PDP elements per cycle
    cdp_throughput: int = 8         # CDP elements per cycle
    memif_bytes: int = 64           # primary memory interface, bytes per cycle
    clock_mhz: float = 1000.0
    layer_overhead_cycles: int = 1000   # programming one hardware layer (assumed)
    compiler: str = BUNDLED_COMPILER
    compiler_timeout_s: float = 300.0
    min_region_macs: int = 0
    name: str = "nv_full"

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in HARDWARE_FIELDS and not v > 0:
                raise TargetError(f"nvdla config {self.name!r}: {f.name} must be positive, "
                                  f"got {v!r}")

    def __eq__(self, other) -> bool:
        return isinstance(other, NvdlaConfig) and self.hardware() == other.hardware()

    def __hash__(self) -> int:
        return hash(tuple(self.hardware().values()))

    @property
    def macs_per_cycle(self) -> int:
        return self.atomic_c * self.atomic_k

    @property
    def alu_overlaps_gemm(self) -> bool:
        """The SDP and PDP are engines of their own, pipelined behind the convolution core."""
        return True

    @property
    def peak_gops(self) -> float:
        return 2 * self.macs_per_cycle * self.clock_mhz / 1e3

    @property
    def bus_bytes(self) -> int:
        return self.memif_bytes

    @property
    def cbuf_bytes(self) -> int:
        return self.cbuf_banks * self.cbuf_bank_bytes

    @property
    def target_name(self) -> str:
        return (f"nvdla_{self.atomic_c}x{self.atomic_k}_cbuf{self.cbuf_bytes // KiB}k"
                f"@{self.clock_mhz:g}")

    def hardware(self) -> dict[str, float]:
        """The fields a loadable is built for (HARDWARE_FIELDS)."""
        return {k: getattr(self, k) for k in HARDWARE_FIELDS}


PRESETS = {
    "nv_full": NvdlaConfig(),
    "nv_small": NvdlaConfig(atomic_c=8, atomic_k=8, cbuf_banks=32, cbuf_bank_bytes=4 * KiB,
                            sdp_throughput=1, pdp_throughput=1, cdp_throughput=1,
                            memif_bytes=8, clock_mhz=1000.0, name="nv_small"),
}


def load_config(spec: str | None) -> NvdlaConfig:
    return config_from_spec(NvdlaConfig, PRESETS, "nv_full", spec)


__all__ = ["BUNDLED_COMPILER", "HARDWARE_FIELDS", "NvdlaConfig", "PRESETS", "load_config"]

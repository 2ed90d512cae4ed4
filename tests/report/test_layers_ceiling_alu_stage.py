"""The compute ceiling with and without an ALU module of its own."""
from types import SimpleNamespace

from retarget.report.layers import make_row


def _row(overlaps: bool):
    cfg = SimpleNamespace(clock_mhz=100.0, peak_gops=51.2, bus_bytes=8,
                          alu_overlaps_gemm=overlaps)
    return make_row("c", cfg, macs=1000, cycles=200, gemm_cycles=90, nbytes={},
                    alu_cycles=80, reset_cycles=10)


def test_shared_compute_module_adds_alu_work():
    assert _row(False).compute_ceiling == 90 / (90 + 10 + 80)


def test_alu_stage_takes_the_slower_module():
    assert _row(True).compute_ceiling == 90 / max(90 + 10, 80)
    assert _row(True).compute_ceiling > _row(False).compute_ceiling

"""Per-layer performance report: where the time goes, layer by layer, against the roofline.

For each layer (a span of a timed accelerator stream, or a whole stream timed on its own):
MACs, cycles, achieved GOPS at the config's clock, compute utilisation (GEMM-array busy cycles
/ cycles), DRAM bytes per buffer (inp / wgt / acc / uop / out), arithmetic intensity (ops per
DRAM byte, 2 ops per MAC), the roofline bound min(peak, bandwidth x intensity) with bandwidth =
bus_bytes x clock, and the fraction of that bound achieved.

It also says where the compute module's own time goes: the tensor ALU's share of the cycles
and the *compute ceiling*, GEMM / (GEMM + accumulator resets + ALU). The GEMM core and the
tensor ALU take turns on one compute module, so a layer whose requantisation (or pooling) needs
ALU passes can never keep the GEMM array busier than that, however well its loads and stores
are hidden; for a conv it depends only on the layer's shape, not on its tiling. Where the ALU
work has a module of its own (a config whose `alu_overlaps_gemm` is true: VTA's alu_stage
variant, NVDLA's SDP / PDP) the ceiling is GEMM / max(GEMM + resets, ALU).

    rows = layer_rows(simulate_timing(program, layers=spans))
    print(format_layers(rows))
    write_csv("layers.csv", rows); write_json("layers.json", rows)
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from ..targets.accel.timing import BUFFERS
from ..table import format_table, si


@dataclass(frozen=True, slots=True)
class LayerRow:
    """One line of the report. GOPS and bandwidths are in units of 1e9 per second."""
    name: str
    macs: int
    cycles: int
    gemm_cycles: int
    clock_mhz: float
    peak_gops: float
    bandwidth_gbps: float              # DRAM bus, GB/s
    inp_bytes: int = 0
    wgt_bytes: int = 0
    acc_bytes: int = 0
    uop_bytes: int = 0
    out_bytes: int = 0
    kind: str = ""                     # conv2d, dense, maxpool, ... ("" when unknown)
    alu_cycles: int = 0                # tensor-ALU issue cycles
    reset_cycles: int = 0              # GEMM-array cycles spent zeroing accumulators
    performed_macs: int | None = None  # MACs the GEMM core multiplied (None: same as macs)
    # True when the ALU work runs on a module of its own, beside the GEMM (VTA's alu_stage
    # variant, NVDLA's SDP / PDP): then the slower of the two bounds the layer, not their sum
    alu_overlaps: bool = False

    @property
    def dram_bytes(self) -> int:
        return self.inp_bytes + self.wgt_bytes + self.acc_bytes + self.uop_bytes + self.out_bytes

    @property
    def ops(self) -> int:
        return 2 * self.macs

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_mhz * 1e6)

    @property
    def gops(self) -> float:
        """Achieved throughput."""
        return self.ops / self.seconds / 1e9 if self.cycles else 0.0

    @property
    def utilisation(self) -> float:
        """GEMM-array busy cycles / cycles."""
        return self.gemm_cycles / self.cycles if self.cycles else 0.0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in ops per DRAM byte (inf when nothing moved)."""
        return self.ops / self.dram_bytes if self.dram_bytes else math.inf

    @property
    def roof_gops(self) -> float:
        """The roofline bound at this intensity: min(peak, bandwidth x intensity)."""
        return min(self.peak_gops, self.bandwidth_gbps * self.intensity)

    @property
    def roof_fraction(self) -> float:
        return self.gops / self.roof_gops if self.roof_gops else 0.0

    @property
    def alu_utilisation(self) -> float:
        """Tensor-ALU issue cycles / cycles (pooling, residual adds and requantisation)."""
        return self.alu_cycles / self.cycles if self.cycles else 0.0

    @property
    def compute_ceiling(self) -> float:
        """GEMM / (GEMM + resets + ALU): the highest utilisation the compute module's own work
        allows, with every load and store hidden (1.0 for GEMM work alone, 0 without any);
        GEMM / max(GEMM + resets, ALU) when the ALU overlaps the GEMM (`alu_overlaps`)."""
        gemm = self.gemm_cycles + self.reset_cycles
        work = max(gemm, self.alu_cycles) if self.alu_overlaps else gemm + self.alu_cycles
        return self.gemm_cycles / work if work else 0.0

    @property
    def ceiling_gops(self) -> float:
        """peak x compute ceiling: the GOPS the compute module's own work allows (a second,
        lower roof for layers with requantisation or other ALU work)."""
        return self.peak_gops * self.compute_ceiling

    @property
    def bound(self) -> str:
        """Which roof limits this layer: 'compute' or 'memory'; 'alu' for a layer without
        MACs (pooling, adds), which the GEMM roofline does not describe."""
        if self.macs == 0:
            return "alu"
        return "compute" if self.bandwidth_gbps * self.intensity >= self.peak_gops else "memory"

    def as_dict(self) -> dict:
        """Every stored field plus the derived figures (what CSV and JSON carry)."""
        d = asdict(self)
        d.update(dram_bytes=self.dram_bytes, gops=self.gops, utilisation=self.utilisation,
                 alu_utilisation=self.alu_utilisation, compute_ceiling=self.compute_ceiling,
                 intensity=self.intensity if math.isfinite(self.intensity) else None,
                 roof_gops=self.roof_gops, roof_fraction=self.roof_fraction, bound=self.bound)
        if self.macs == 0:      # no GEMM work: a fraction of a zero roof means nothing
            d.update(roof_gops=None, roof_fraction=None)
        return d


def make_row(name: str, cfg, macs: int, cycles: int, gemm_cycles: int,
             nbytes: dict[str, int], *, kind: str = "", alu_cycles: int = 0,
             reset_cycles: int = 0, performed_macs: int | None = None) -> LayerRow:
    """A row from raw counts and a target config (clock_mhz, bus_bytes, peak_gops)."""
    unknown = set(nbytes) - set(BUFFERS)
    if unknown:
        raise ValueError(f"layer {name!r}: unknown buffer(s) {sorted(unknown)}; "
                         f"known: {BUFFERS}")
    return LayerRow(name, int(macs), int(cycles), int(gemm_cycles), float(cfg.clock_mhz),
                    float(cfg.peak_gops), cfg.bus_bytes * cfg.clock_mhz * 1e6 / 1e9,
                    **{f"{b}_bytes": int(nbytes.get(b, 0)) for b in BUFFERS}, kind=kind,
                    alu_cycles=int(alu_cycles), reset_cycles=int(reset_cycles),
                    performed_macs=None if performed_macs is None else int(performed_macs),
                    alu_overlaps=bool(getattr(cfg, "alu_overlaps_gemm", False)))


def row_from_result(name: str, result) -> LayerRow:
    """A whole timed stream (a TimingResult) as one row."""
    return make_row(name, result.config, result.macs, result.total_cycles, result.gemm_cycles,
                    result.bytes, alu_cycles=result.alu_cycles,
                    reset_cycles=result.reset_cycles)


def layer_rows(result) -> list[LayerRow]:
    """One row per layer of a TimingResult (its whole stream as one row if it has none)."""
    if not result.layers:
        return [row_from_result("all", result)]
    return [make_row(lt.name, result.config, lt.macs, lt.cycles, lt.gemm_cycles, lt.bytes,
                     alu_cycles=lt.alu_cycles, reset_cycles=lt.reset_cycles)
            for lt in result.layers]


def total_row(rows: Sequence[LayerRow], name: str = "total",
              cycles: int | None = None) -> LayerRow:
    """Sum of rows (same clock and bus). `cycles` overrides the summed cycles, e.g. with a
    stream's total when its layers overlap in time."""
    if not rows:
        raise ValueError("total_row: no rows")
    first = rows[0]
    mixed = {(r.clock_mhz, r.peak_gops, r.bandwidth_gbps) for r in rows}
    if len(mixed) > 1:
        raise ValueError(f"total_row {name!r}: rows from different configs (clock, peak, "
                         f"bandwidth) {sorted(mixed)} cannot share one roofline")
    performed = None
    if any(r.performed_macs is not None for r in rows):
        performed = sum(r.macs if r.performed_macs is None else r.performed_macs for r in rows)
    return LayerRow(name, sum(r.macs for r in rows),
                    sum(r.cycles for r in rows) if cycles is None else int(cycles),
                    sum(r.gemm_cycles for r in rows), first.clock_mhz, first.peak_gops,
                    first.bandwidth_gbps,
                    **{f"{b}_bytes": sum(getattr(r, f"{b}_bytes") for r in rows)
                       for b in BUFFERS}, alu_cycles=sum(r.alu_cycles for r in rows),
                    reset_cycles=sum(r.reset_cycles for r in rows),
                    performed_macs=performed, alu_overlaps=first.alu_overlaps)


_HEADERS = ["layer", "MACs", "cycles", "GOPS", "util", "ceil", "ALU", "DRAM B", "inp B",
            "wgt B", "acc B", "uop B", "out B", "ops/B", "roof GOPS", "of roof", "bound"]


def _cells(r: LayerRow) -> list:
    gemm = r.macs > 0     # the roofline columns describe GEMM work only
    return [r.name, si(r.macs), f"{r.cycles:,}", f"{r.gops:.2f}", f"{100 * r.utilisation:.1f}%",
            f"{100 * r.compute_ceiling:.1f}%" if gemm else "-",
            f"{100 * r.alu_utilisation:.1f}%", si(r.dram_bytes), si(r.inp_bytes), si(r.wgt_bytes),
            si(r.acc_bytes), si(r.uop_bytes),
            si(r.out_bytes), f"{r.intensity:.1f}" if gemm else "-",
            f"{r.roof_gops:.2f}" if gemm else "-",
            f"{100 * r.roof_fraction:.1f}%" if gemm else "-", r.bound]


def format_layers(rows: Sequence[LayerRow], total: LayerRow | None = None,
                  title: str | None = None) -> str:
    """The report as a terminal table, with a totals footer when `total` is given."""
    footer = [_cells(total)] if total is not None else []
    # names and the bound left, numbers right (also where a cell is "-": no GEMM work)
    align = "<" + ">" * (len(_HEADERS) - 2) + "<"
    return format_table(_HEADERS, [_cells(r) for r in rows], footer=footer, title=title,
                        align=align)


def to_csv(rows: Iterable[LayerRow]) -> str:
    """CSV text: one line per row, every field of LayerRow.as_dict()."""
    dicts = [r.as_dict() for r in rows]
    out = io.StringIO()
    if dicts:
        w = csv.DictWriter(out, fieldnames=list(dicts[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(dicts)
    return out.getvalue()


def to_json(rows: Iterable[LayerRow], **meta) -> dict:
    """{"layers": [row dicts], **meta} — meta e.g. config name, total cycles."""
    return {**meta, "layers": [r.as_dict() for r in rows]}


def write_csv(path: str, rows: Iterable[LayerRow]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(to_csv(rows))


def write_json(path: str, rows: Iterable[LayerRow], **meta) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(to_json(rows, **meta), fh, indent=1)

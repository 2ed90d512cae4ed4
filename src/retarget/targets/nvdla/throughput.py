"""The throughput model: per hardware layer, the cycles of its busiest resource, from the
documented per-engine rates (docs/nvdla-facts.md) — the convolution core's atomic-C x atomic-K
MACs per cycle, the SDP's and PDP's elements per cycle, the memory interface's bytes per
cycle — plus a fixed cost to program a layer. Layers run one after another (NVDLA can
overlap independent layers on different engines; the model does not, so it is conservative).

The convolution core's rate counts what the MAC array does, not what is useful: per output
pixel and kernel tap it takes ceil(C/atomic-C) x ceil(K/atomic-K) cycles per group, so
channels that do not fill an atom (a depthwise conv: one channel per group) cost full cycles.
The convolution buffer holds half data, half weights (our split); weights that do not fit
their half are streamed in chunks, and the input map is read again for each chunk.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import NvdlaConfig
from .loadable import CDP, CONV, ENGINES, HAS_EW, NONE, PDP, SDP, Loadable
from ..accel.timing import BUFFERS, InsnWork, LayerSpan, timing_result


@dataclass(frozen=True, slots=True)
class LayerCost:
    index: int
    name: str
    engine: str
    macs: int                # useful multiply-accumulates
    cycles: int
    bound: str               # what limits it: MAC, SDP, PDP or memory
    mac_cycles: int
    engine_cycles: int       # SDP / PDP element cycles
    memory_cycles: int
    bytes: int               # moved over the memory interface
    array_macs: int          # what the MAC array does in mac_cycles (atoms filled or not)

    @property
    def mac_utilisation(self) -> float:
        """The fraction of the MAC array's work that is useful (0 for SDP / PDP layers)."""
        return self.macs / self.array_macs if self.array_macs else 0.0


@dataclass(frozen=True, slots=True)
class Throughput:
    layers: list[LayerCost]
    cycles: int
    clock_mhz: float

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_mhz * 1e6)

    @property
    def fps(self) -> float:
        return 1.0 / self.seconds if self.cycles else math.inf

    @property
    def macs(self) -> int:
        return sum(c.macs for c in self.layers)


def layer_cost(cfg: NvdlaConfig, ld: Loadable, i: int) -> LayerCost:
    r = {k: int(v) for k, v in zip(ld.layers.dtype.names, ld.layers[i].item())}
    op = r["op"]
    n, c, h, w = r["src_n"], r["src_c"], r["src_h"], r["src_w"]
    k, oh, ow = r["dst_c"], r["dst_h"], r["dst_w"]
    in_bytes, out_bytes = n * c * h * w, n * k * oh * ow
    extra = sum(ld.addresses[r[f]].nbytes for f in ("bias", "cvt_mul", "cvt_shift")
                if r[f] != NONE)
    if r["flags"] & HAS_EW:
        extra += out_bytes
    macs = mac_cycles = engine_cycles = 0
    if op == CONV:
        g, taps = r["groups"], r["kernel_h"] * r["kernel_w"]
        weight_bytes = k * (c // g) * taps
        macs = n * oh * ow * k * (c // g) * taps
        mac_cycles = (n * oh * ow * taps * g * math.ceil(c // g / cfg.atomic_c)
                      * math.ceil(k // g / cfg.atomic_k))
        engine_cycles = math.ceil(out_bytes / cfg.sdp_throughput)
        chunks = math.ceil(weight_bytes / max(1, cfg.cbuf_bytes // 2))
        moved = in_bytes * chunks + weight_bytes + extra + out_bytes
    else:
        rate = {PDP: cfg.pdp_throughput, CDP: cfg.cdp_throughput}.get(op, cfg.sdp_throughput)
        engine_cycles = math.ceil((out_bytes if op == SDP else in_bytes) / rate)
        if r["lut"] != NONE:
            extra += ld.addresses[r["lut"]].nbytes
        moved = in_bytes + extra + out_bytes
    memory_cycles = math.ceil(moved / cfg.memif_bytes)
    busiest = max((mac_cycles, "MAC"), (engine_cycles, "SDP" if op == CONV else ENGINES[op]),
                  (memory_cycles, "memory"))
    return LayerCost(i, ld.string(r["name"]), ENGINES[op], macs,
                     busiest[0] + cfg.layer_overhead_cycles, busiest[1], mac_cycles,
                     engine_cycles, memory_cycles, moved, mac_cycles * cfg.macs_per_cycle)


def throughput(cfg: NvdlaConfig, ld: Loadable) -> Throughput:
    costs = [layer_cost(cfg, ld, i) for i in range(len(ld.layers))]
    return Throughput(costs, sum(c.cycles for c in costs), cfg.clock_mhz)


__all__ = ["LayerCost", "Throughput", "layer_cost", "throughput"]


def timing(cfg: NvdlaConfig, ld: Loadable, format_insn=repr):
    """The model as the TimingResult every report reads (targets/accel/timing.py): one
    'instruction' per hardware layer on its engine, layers back to back; MAC-array cycles
    are the convolution core's, ALU cycles the SDP's / PDP's, and every byte a layer moves
    is counted as input traffic (the model does not split it by kind)."""
    costs = throughput(cfg, ld).layers
    n = len(costs)
    cycles = np.array([c.cycles for c in costs], np.int64)
    end = np.cumsum(cycles)
    start = end - cycles
    engines = tuple(ENGINES.values())
    work = InsnWork(gemm=np.array([c.mac_cycles for c in costs], np.int64),
                    alu=np.array([c.engine_cycles for c in costs], np.int64),
                    reset=np.zeros(n, np.int64), buffer=np.full(n, BUFFERS.index("inp")),
                    nbytes=np.array([c.bytes for c in costs], np.int64))
    spans = [LayerSpan(c.name, c.index, c.index + 1) for c in costs]
    return timing_result(cfg, engines, work, [engines.index(c.engine) for c in costs],
                         start, end, start, spans, cfg.macs_per_cycle, format_insn)

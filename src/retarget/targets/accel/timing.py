"""What a cycle model says about one instruction stream, in a form every target shares.

A target's cycle model (targets/<name>/timing.py) decides when each instruction starts and ends
on which engine; `timing_result` turns those per-instruction facts into a `TimingResult` with
per-engine busy time, per-buffer DRAM bytes and per-layer aggregates. report/ (tables, roofline,
Perfetto trace) reads only this, never a target's own classes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import TargetError

# DRAM traffic is reported per buffer kind: input activations, weights, accumulator-width data
# (biases, int32 tiles), micro-op / instruction-side data, and outputs.
BUFFERS = ("inp", "wgt", "acc", "uop", "out")


@dataclass(frozen=True, slots=True)
class LayerSpan:
    """Instructions [first, stop) of a stream belong to layer `name`."""
    name: str
    first: int
    stop: int


@dataclass(slots=True)
class LayerTiming:
    """What one layer's instructions did: its span in time and what it kept busy."""
    name: str
    first: int                 # first instruction index
    stop: int                  # one past the last instruction index
    start_cycle: int           # earliest start of its instructions
    end_cycle: int             # latest end of its instructions
    busy: dict[str, int]       # cycles each engine spent on its instructions
    gemm_cycles: int           # cycles the MAC array multiplied
    alu_cycles: int            # cycles a vector/ALU unit was issuing
    reset_cycles: int          # cycles the MAC array spent zeroing accumulators
    macs: int                  # MACs the array performed (padding included)
    bytes: dict[str, int]      # DRAM bytes moved per buffer (BUFFERS)

    @property
    def cycles(self) -> int:
        """Wall-clock span of the layer (layers may overlap a little at their boundaries)."""
        return self.end_cycle - self.start_cycle

    @property
    def dram_bytes(self) -> int:
        return sum(self.bytes.values())


@dataclass(slots=True)
class TimingResult:
    """The cycle model's answer for one stream. Per-instruction arrays are indexed by stream
    position; `module[i]` is the index into `engines` of the engine instruction i ran on."""
    config: Any                # the target's config (clock_mhz, bus_bytes, peak_gops, name)
    total_cycles: int
    busy: dict[str, int]
    gemm_cycles: int
    alu_cycles: int
    reset_cycles: int
    macs: int
    bytes: dict[str, int]
    start: np.ndarray
    end: np.ndarray
    module: np.ndarray
    dispatch: np.ndarray       # cycle each instruction entered its engine's queue
    layers: list[LayerTiming] = field(default_factory=list)
    engines: tuple[str, ...] = ()
    # How to print one instruction (the target's disassembler), for traces and messages.
    format_insn: Callable[[Any], str] = repr

    @property
    def utilisation(self) -> float:
        """MAC-array busy / total: compute utilisation."""
        return self.gemm_cycles / self.total_cycles if self.total_cycles else 0.0

    @property
    def seconds(self) -> float:
        return self.total_cycles / (self.config.clock_mhz * 1e6)

    def layer(self, name: str) -> LayerTiming:
        for lt in self.layers:
            if lt.name == name:
                return lt
        raise KeyError(f"no layer {name!r}; layers: {[lt.name for lt in self.layers]}")


def layer_spans(layers, n: int) -> list[LayerSpan]:
    """LayerSpans from spans, (name, first, stop) tuples, or one name (or None) per insn."""
    if layers is None:
        return []
    layers = list(layers)
    if layers and all(isinstance(x, str) or x is None for x in layers):
        if len(layers) != n:
            raise TargetError(f"layer names: {len(layers)} given for {n} instructions; give one "
                              "name (or None) per instruction, or (name, first, stop) spans")
        spans, i = [], 0
        while i < n:
            j = i
            while j < n and layers[j] == layers[i]:
                j += 1
            if layers[i] is not None:
                spans.append(LayerSpan(layers[i], i, j))
            i = j
        return spans
    spans = []
    for x in layers:
        s = x if isinstance(x, LayerSpan) else LayerSpan(*x)
        if not 0 <= s.first < s.stop <= n:
            raise TargetError(f"layer {s.name!r}: instructions [{s.first}, {s.stop}) are not a "
                              f"non-empty range within the stream of {n} instructions")
        spans.append(s)
    return spans


@dataclass(frozen=True, slots=True)
class InsnWork:
    """Per-instruction counters (arrays over the stream) a cycle model hands to
    `timing_result`: MAC-array, ALU and reset cycles, the buffer index (into BUFFERS, -1 for
    none) and the DRAM bytes moved."""
    gemm: np.ndarray
    alu: np.ndarray
    reset: np.ndarray
    buffer: np.ndarray
    nbytes: np.ndarray


def timing_result(cfg, engines: Sequence[str], work: InsnWork, engine: Sequence[int],
                  start: Sequence[int], end: Sequence[int], dispatch: Sequence[int],
                  spans: Sequence[LayerSpan], macs_per_gemm_cycle: int,
                  format_insn: Callable[[Any], str] = repr) -> TimingResult:
    """Aggregate a scheduled stream into a TimingResult (totals and one LayerTiming per span).
    MACs are MAC-array cycles times `macs_per_gemm_cycle`. An empty stream (a region of views
    only, which names the same bytes twice and computes nothing) takes 0 cycles, and an empty
    span is a layer of 0 cycles at the start of the instruction after it."""
    start_a = np.asarray(start, dtype=np.int64)
    end_a = np.asarray(end, dtype=np.int64)
    mod_a = np.asarray(engine, dtype=np.int8)
    dur = end_a - start_a

    def aggregate(sl: slice) -> tuple[dict, int, int, int, dict]:
        busy = {name: int(dur[sl][mod_a[sl] == k].sum()) for k, name in enumerate(engines)}
        by_buf = {name: int(work.nbytes[sl][work.buffer[sl] == k].sum())
                  for k, name in enumerate(BUFFERS)}
        return (busy, int(work.gemm[sl].sum()), int(work.alu[sl].sum()),
                int(work.reset[sl].sum()), by_buf)

    busy, g, a, r, by_buf = aggregate(slice(None))
    total = int(end_a.max()) if end_a.size else 0
    layers = []
    for s in spans:
        sl = slice(s.first, s.stop)
        lb, lg, la, lr, lbytes = aggregate(sl)
        if s.stop > s.first:
            t0, t1 = int(start_a[sl].min()), int(end_a[sl].max())
        else:   # no instructions: an instant, when the next instruction starts
            t0 = t1 = int(start_a[s.first]) if s.first < len(start_a) else total
        layers.append(LayerTiming(s.name, s.first, s.stop, t0, t1, lb, lg, la, lr,
                                  lg * macs_per_gemm_cycle, lbytes))
    return TimingResult(cfg, total, busy, g, a, r, g * macs_per_gemm_cycle, by_buf,
                        start_a, end_a, mod_a, np.asarray(dispatch, dtype=np.int64), layers,
                        tuple(engines), format_insn)


__all__ = ["BUFFERS", "InsnWork", "LayerSpan", "LayerTiming", "TimingResult", "layer_spans",
           "timing_result"]

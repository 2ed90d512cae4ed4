"""Running a stream again: the steps its first run recorded, replayed without re-deciding them.

What a stream does is fixed, apart from the data it moves, by things known after one run:

- its execution order, by its dependency flags alone (sim.py dispatch), and so its counters;
- what each LOAD/STORE touches, by its fields and the DRAM array (memory.prepare_load/store);
- what each GEMM/ALU does, by its fields and the micro-ops it reads (compute.gemm_plans/alu_plans).

So the first, fully checked run (sim.Simulator) records one step per instruction in execution
order: the prepared LOAD/STORE views, or the GEMM/ALU plans with the micro-op bytes they were
planned for. A later run of the same stream bytes replays them, which is the same work minus
the decoding, dispatch and checks (the hot path of a deployed model: one stream, many runs).
What can change between runs is still honoured:

- data: every LOAD re-reads DRAM, every STORE re-writes it;
- micro-ops: a GEMM/ALU whose micro-op entries differ from those it was planned for is
  re-planned (and re-checked) through the plan cache;
- confinement: every DRAM range the stream touches is checked against the task's memory in one
  vectorised pass before anything runs; a stream that would step outside it runs on the checked
  path instead, which stops at the offending instruction as the first run would have.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from ....limits import check_device_work
from .errors import SimFault


@dataclass(slots=True)
class Replay:
    steps: list[tuple[int, Any, Callable[[], None]]]   # (stream index, instruction, step)
    result: Any                                       # the SimResult of the recorded run
    work: int                                         # sim.stream_work, re-checked per run
    label: str
    dram_lo: np.ndarray                               # byte ranges [lo, hi) the stream touches
    dram_hi: np.ndarray
    _admitted: tuple = field(default=(None, False))   # (allocations, verdict) last checked

    def admits(self, confine) -> bool:
        """Whether every DRAM range lies inside one of the task's allocations (always, with no
        device around the simulator). Allocations do not overlap, so the one starting at or
        before a range's start is the only one that can hold it."""
        if confine is None or not self.dram_lo.size:
            return True
        key = tuple((a.start, a.end) for a in confine.allocations)
        if self._admitted[0] != key:
            if not key:
                ok = False
            else:
                starts, ends = (np.array(v, dtype=np.int64) for v in zip(*sorted(key)))
                j = np.searchsorted(starts, self.dram_lo, side="right") - 1
                ok = bool(np.all((j >= 0) & (self.dram_hi <= ends[np.maximum(j, 0)])))
            self._admitted = (key, ok)
        return self._admitted[1]

    def run(self, fail: Callable[[int, Any, str], Exception]):
        """Run the recorded steps; returns the recorded result with fresh counters. `fail`
        turns a fault into the simulator's error naming the instruction."""
        check_device_work(self.label, self.work)
        for index, insn, step in self.steps:
            try:
                step()
            except SimFault as e:
                raise fail(index, insn, str(e)) from None
        counters = replace(self.result.counters)
        return replace(self.result, counters=counters)


def guarded(uops: np.ndarray, recorded: bytes, planned: Callable[[], None],
            replan: Callable[[], None]) -> Callable[[], None]:
    """A GEMM/ALU step: its recorded plans while the micro-op entries `uops` (a view of the
    uop SRAM) still hold `recorded`, else a fresh (checked, cached) planning."""
    def step() -> None:
        if uops.tobytes() == recorded:
            planned()
        else:
            replan()
    return step


__all__ = ["Replay", "guarded"]

"""Timeline of a timed accelerator stream as a Chrome / Perfetto trace-event JSON file.

Open the file in ui.perfetto.dev (or chrome://tracing). One process per stream, one track
(tid) per engine of the target (vta: load, compute, store; dnnvm: load, save, conv, pool,
misc) holding a complete ("X") event per instruction, and a "layers" track with one slice per
layer. Only targets/accel/timing.TimingResult is read: the engines and the instruction printer
come with it. Timestamps are microseconds derived from cycles at the
config's clock; each event's args carry the exact cycles, the instruction index and its text.
`trace_events` gives one stream's events under any pid and cycle offset, which is how
report/module.py lays a module's regions one after another on one timeline.
"""
from __future__ import annotations

import json
from typing import Sequence

from ..targets.accel.timing import TimingResult

PID = 1


def layer_tid(result: TimingResult) -> int:
    """The layer track's tid: after the engines' tracks 1..n (it sorts first by index)."""
    return len(result.engines) + 1


LAYER_TID = 4           # layer_tid of a three-engine (vta) stream


def _slice_name(text: str) -> str:
    """Short event name from an instruction's text: its first word and a second one unless
    that opens the operands ('LOAD INP', 'GEMM RESET', 'CONV', ...); token-only transfers
    are marked."""
    words = text.split()
    name = words[0] if words else "?"
    if len(words) > 1 and not words[1].startswith("["):
        name += " " + words[1]
    if name.startswith(("LOAD", "STORE")) and "no-op" in text:
        name += " (token)"
    return name


def trace_events(result: TimingResult, insns: Sequence, *, pid: int = PID,
                 offset_cycles: int = 0, process: str | None = None,
                 sort_index: int | None = None) -> list[dict]:
    """The trace events of one timed stream as process `pid`, its cycles shifted by
    `offset_cycles` (so several streams can follow each other on one timeline)."""
    if len(insns) != len(result.start):
        raise ValueError(f"chrome_trace: {len(insns)} instructions but the timing result has "
                         f"{len(result.start)}")
    us_per_cycle = 1.0 / result.config.clock_mhz
    name = process or f"{result.config.name} ({result.config.target_name})"
    events: list[dict] = [{"ph": "M", "pid": pid, "name": "process_name",
                           "args": {"name": name}}]
    if sort_index is not None:
        events.append({"ph": "M", "pid": pid, "name": "process_sort_index",
                       "args": {"sort_index": sort_index}})
    for k, module in enumerate(result.engines):
        events.append({"ph": "M", "pid": pid, "tid": k + 1, "name": "thread_name",
                       "args": {"name": module}})
        events.append({"ph": "M", "pid": pid, "tid": k + 1, "name": "thread_sort_index",
                       "args": {"sort_index": k + 1}})
    ltid = layer_tid(result)
    events.append({"ph": "M", "pid": pid, "tid": ltid, "name": "thread_name",
                   "args": {"name": "layers"}})
    events.append({"ph": "M", "pid": pid, "tid": ltid, "name": "thread_sort_index",
                   "args": {"sort_index": 0}})

    layer_of = [""] * len(insns)
    for lt in result.layers:
        for i in range(lt.first, lt.stop):
            layer_of[i] = lt.name
    for i, insn in enumerate(insns):
        s, e = int(result.start[i]), int(result.end[i])
        text = " ".join(result.format_insn(insn).split())
        args = {"index": i, "cycles": e - s, "start_cycle": s, "text": text}
        if layer_of[i]:
            args["layer"] = layer_of[i]
        events.append({"ph": "X", "pid": pid, "tid": int(result.module[i]) + 1,
                       "name": _slice_name(text), "cat": result.engines[int(result.module[i])],
                       "ts": (s + offset_cycles) * us_per_cycle, "dur": (e - s) * us_per_cycle,
                       "args": args})
    # Layers can overlap at their boundaries (the next layer's loads start while the previous
    # layer's stores drain); a track's slices must not partly overlap, so each layer's slice
    # starts no earlier than the previous one ended. args keep the layer's true span.
    prev_end = 0
    for lt in result.layers:
        s = max(lt.start_cycle, prev_end)
        e = max(lt.end_cycle, s)
        events.append({"ph": "X", "pid": pid, "tid": ltid, "name": lt.name, "cat": "layer",
                       "ts": (s + offset_cycles) * us_per_cycle, "dur": (e - s) * us_per_cycle,
                       "args": {"start_cycle": lt.start_cycle, "end_cycle": lt.end_cycle,
                                "cycles": lt.cycles, "gemm_cycles": lt.gemm_cycles,
                                "macs": lt.macs, "instructions": [lt.first, lt.stop]}})
        prev_end = e
    return events


def chrome_trace(result: TimingResult, insns: Sequence) -> dict:
    """The trace-event document for `result` (from simulate_timing over `insns`)."""
    return {"traceEvents": trace_events(result, insns), "displayTimeUnit": "ns",
            "otherData": {"config": result.config.name, "clock_mhz": result.config.clock_mhz,
                         "total_cycles": result.total_cycles, "busy_cycles": result.busy}}


def write_trace(path: str, result: TimingResult, insns: Sequence) -> None:
    """Write chrome_trace(result, insns) to `path` (JSON)."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(chrome_trace(result, insns), fh)

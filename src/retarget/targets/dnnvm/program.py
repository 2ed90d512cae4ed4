"""A dnnvm Program (instructions + DRAM layout + layer spans) and the builder that emits it
with its dependency fields.

`ProgramBuilder.require(producer, engine)` is the only way dependencies are made: "the next
instruction of `engine` must not start before instruction `producer` has finished". The
builder turns that into a signal bit on the producer and a wait bit on that next instruction,
only when engine order does not already guarantee it, so every token pushed is popped by the
instruction it was meant for (tokens queue per engine pair, in order). `Hazards` records who
last wrote and read each on-chip slot and DDR tensor, and answers what an access must wait for.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import TargetError
from ..accel.program import (DTYPES, DramBuffer, layout_from_json, layout_to_json, read_buffer,
                             read_stream, save_stream, write_buffers)
from .config import DNNVMConfig
from .isa import ENGINES, INSN_BYTES, End, Insn, check_insn, decode_stream, encode_stream

ALIGN = 64


@dataclass(slots=True)
class Program:
    """What a ProgramBuilder produces. DDR addresses in LOAD / SAVE count from 0 (the start of
    the program's DRAM image); the device relocates them."""
    config: DNNVMConfig
    insns: list[Insn]
    buffers: dict[str, DramBuffer]
    dram_bytes: int
    layers: list[tuple[str, int, int]] = field(default_factory=list)

    def stream(self) -> bytes:
        return encode_stream(self.insns)

    def dram_image(self, data: dict[str, np.ndarray] | None = None) -> np.ndarray:
        return write_buffers(np.zeros(self.dram_bytes, dtype=np.uint8), self.buffers, data)

    def read(self, dram: np.ndarray, name: str) -> np.ndarray:
        return read_buffer(dram, self.buffers, name)

    def save(self, prefix: str) -> None:
        """<prefix>.insn.bin (the binary stream) and <prefix>.json (config, DRAM layout)."""
        save_stream(prefix, self.stream(), {
            "target": "dnnvm", "config": self.config.to_dict(),
            **layout_to_json(self.buffers, self.layers, self.dram_bytes)})

    @classmethod
    def load(cls, prefix: str) -> "Program":
        """A saved Program, every offset and span checked (ValueError naming the field)."""
        meta, raw = read_stream(prefix, "dnnvm", INSN_BYTES)
        cfg = DNNVMConfig.from_dict(meta["config"])
        insns = decode_stream(raw)
        bufs, layers, dram_bytes = layout_from_json(meta, f"{prefix}.json", len(insns))
        return cls(cfg, insns, bufs, dram_bytes, layers)


class ProgramBuilder:
    """Emits instructions with their dependency bits and lays out the DRAM image."""

    def __init__(self, cfg: DNNVMConfig, check: bool = True):
        self.cfg = cfg
        # Range-check every field as it is emitted (a scratch lowering that is only timed,
        # whose tile conv_fit has already bounded, skips it: it is a third of its cost).
        self.check = check
        self.insns: list[Insn] = []
        self.buffers: dict[str, DramBuffer] = {}
        self._dram_end = 0
        self._done: dict[tuple[int, int], int] = {}      # (from, to) -> last producer waited on
        self._pending: dict[int, dict[int, int]] = {}    # to -> {from: producer index}
        self.layers: list[tuple[str, int, int]] = []
        self._layer: tuple[str, int] | None = None

    # ---- DRAM -------------------------------------------------------------------------------
    def alloc(self, name: str, shape: tuple[int, ...], dtype: str = "int8") -> DramBuffer:
        if name in self.buffers:
            raise TargetError(f"dnnvm: DRAM buffer {name!r} allocated twice")
        if str(np.dtype(dtype)) not in DTYPES:
            raise TargetError(f"DRAM buffer {name!r}: dtype {dtype} not one of {DTYPES}")
        buf = DramBuffer(name, self._dram_end, tuple(int(d) for d in shape), str(np.dtype(dtype)))
        self._dram_end += -(-max(buf.nbytes, 1) // ALIGN) * ALIGN
        if self._dram_end > 1 << 32:
            raise TargetError(f"dnnvm: the program's DRAM image exceeds the 32-bit DDR address "
                              f"space at buffer {name!r}")
        self.buffers[name] = buf
        return buf

    # ---- instructions and dependencies ---------------------------------------------------------
    def require(self, producer: int | None, engine: int) -> None:
        """The next instruction of `engine` waits until instruction `producer` has finished."""
        if producer is None:
            return
        src = self.insns[producer].engine
        if src == engine or producer <= self._done.get((src, engine), -1):
            return          # engine order, or an earlier wait, already guarantees it
        pend = self._pending.setdefault(engine, {})
        pend[src] = max(pend.get(src, -1), producer)

    def emit(self, insn: Insn) -> int:
        """Append `insn` (which the program now owns) with the waits pending for its engine;
        returns its index."""
        if self.check:
            check_insn(insn, len(self.insns))  # a field out of range is an error here, at once
        e = insn.engine
        wait = 0
        for src, producer in self._pending.pop(e, {}).items():
            self.insns[producer].signal |= 1 << e
            self._done[(src, e)] = producer
            wait |= 1 << src
        insn.wait |= wait
        self.insns.append(insn)
        return len(self.insns) - 1

    def begin_layer(self, name: str) -> None:
        self._layer = (name, len(self.insns))

    def end_layer(self) -> None:
        name, first = self._layer
        if len(self.insns) > first:
            self.layers.append((name, first, len(self.insns)))
        self._layer = None

    def finish(self) -> Program:
        if self._pending:
            raise TargetError(f"dnnvm: dependencies left pending for engines "
                              f"{[ENGINES[e] for e in self._pending]} at the end of the stream")
        self.insns.append(End())
        return Program(self.cfg, self.insns, dict(self.buffers), max(self._dram_end, ALIGN),
                       list(self.layers))


class Hazards:
    """Who last wrote and who read each resource since (an on-chip slot, or a DDR tensor), so
    an access requires exactly what it must wait for: a read waits for the last write; a
    write waits for the last write and every read since."""

    def __init__(self, builder: ProgramBuilder):
        self.b = builder
        self._writer: dict[object, int] = {}
        self._readers: dict[object, list[int]] = {}

    def read(self, key, engine: int) -> None:
        self.b.require(self._writer.get(key), engine)

    def write(self, key, engine: int) -> None:
        self.b.require(self._writer.get(key), engine)
        for r in self._readers.get(key, ()):
            self.b.require(r, engine)

    def did_read(self, key, index: int) -> None:
        self._readers.setdefault(key, []).append(index)

    def did_write(self, key, index: int) -> None:
        self._writer[key] = index
        self._readers[key] = []

    def fold(self, part, whole) -> None:
        """Hand `part` (a region of `whole` tracked apart for a while) back: whoever writes
        `whole` next also waits for the reads of `part`."""
        self._readers.setdefault(whole, []).extend(self._readers.pop(part, ()))
        self._writer.pop(part, None)


__all__ = ["ALIGN", "Hazards", "Program", "ProgramBuilder"]

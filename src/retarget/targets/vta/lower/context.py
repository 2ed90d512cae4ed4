"""LoweringContext: one instruction stream under construction, shared by the layers lowered
into it, and LoweredSegment, what finish() returns.

The context owns the StreamBuilder, the packed constants (weights, bias/shift vectors) by DRAM
buffer name, a cache of micro-op kernels (built once per distinct shape, so emitting a tile
costs a few dictionary look-ups), and the dependency-token bookkeeping:

- `TokenTracker` counts pushes and pops per queue. The k-th pop of a queue consumes the k-th
  push, so "wait until instruction X (which pushed token number j) is done" is: pop until j has
  been consumed. Consuming more is harmless (it only waits for earlier work too); a push is only
  made when a later instruction will wait for it, so a finished stream leaves no tokens behind.
- Layers are separated by a barrier (store -> compute -> load): the next layer's loads read DRAM
  that this layer's stores wrote, and the modules have no store -> load queue.

With the config's `alu_stage` the ALU instructions run on their own module; the queues are
l2g, g2l, g2a (compute -> alu: accumulator tile ready), a2s (alu -> store: result ready) and
s2g (store -> compute: accumulator buffer free, which implies the ALU is done with it). The
tracker then also knows, per module, how much of each other module's work is known finished
(the token chain's vector clock), and uses it to order the micro-op buffer, which the compute
module writes (LOAD UOP) and the ALU module reads:
- before an ALU instruction, if a LOAD UOP (or, in `strict_alu` mode, any compute-module
  instruction) is not yet known finished by the ALU module: compute pushes g2a, the ALU pops it;
- before a LOAD UOP, if some ALU instruction is not yet known finished by the compute module:
  alu -> store -> compute (a2s, s2g) fences it (only mid-layer micro-op loads need this).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ....errors import TargetError
from ..builder import Program, StreamBuilder, UopKernel
from ..config import VTAConfig
from ..isa import STAGE_ALU, STAGE_COMPUTE, STAGE_LOAD, STAGE_STORE, MemInsn, MemType, stage_of
from .tensor import PackedTensor

# queue -> (from stage, to stage)
QUEUES = {"l2g": (STAGE_LOAD, STAGE_COMPUTE), "g2l": (STAGE_COMPUTE, STAGE_LOAD),
          "g2s": (STAGE_COMPUTE, STAGE_STORE), "s2g": (STAGE_STORE, STAGE_COMPUTE)}
# the alu_stage variant's queues
QUEUES_ALU = {"l2g": (STAGE_LOAD, STAGE_COMPUTE), "g2l": (STAGE_COMPUTE, STAGE_LOAD),
              "g2a": (STAGE_COMPUTE, STAGE_ALU), "a2s": (STAGE_ALU, STAGE_STORE),
              "s2g": (STAGE_STORE, STAGE_COMPUTE)}
_STAGES = (STAGE_LOAD, STAGE_COMPUTE, STAGE_STORE, STAGE_ALU)


class TokenTracker:
    """Pushes and pops through the builder, counted per queue (see the module docstring)."""

    def __init__(self, b: StreamBuilder):
        self.b = b
        self.alu_stage = bool(b.cfg.alu_stage)
        self.queues = QUEUES_ALU if self.alu_stage else QUEUES
        self.pushed = dict.fromkeys(self.queues, 0)
        self.popped = dict.fromkeys(self.queues, 0)
        if self.alu_stage:
            # Vector clocks (ALU stage only): emitted instructions per stage, what each stage
            # knows finished of every stage (by its next instruction), each token's snapshot.
            self._scanned = 0
            self.count = dict.fromkeys(_STAGES, 0)
            self.known = {s: dict.fromkeys(_STAGES, 0) for s in _STAGES}
            self._snap: dict[str, list[dict]] = {q: [] for q in self.queues}
            self._uop_loaded = 0       # compute instructions up to the latest LOAD UOP
            self.strict_alu = False    # ALU instructions wait for all earlier compute work
            b.before_uop_load = self._before_uop_load
            b.before_alu = self._before_alu

    def _scan(self) -> None:
        insns = self.b.insns
        for i in range(self._scanned, len(insns)):
            insn = insns[i]
            st = stage_of(insn, True)
            self.count[st] += 1
            if st == STAGE_COMPUTE and isinstance(insn, MemInsn) and \
                    insn.memory_type is MemType.UOP and insn.x_size:
                self._uop_loaded = self.count[st]
        self._scanned = len(insns)

    def push(self, q: str) -> int:
        """Push a token after the latest instruction of the queue's source stage; returns the
        token's number (what a consumer passes to wait)."""
        frm, _ = self.queues[q]
        self.b.dep_push(frm, _)
        if self.alu_stage:
            self._scan()
            snap = dict(self.known[frm])
            snap[frm] = self.count[frm]
            self._snap[q].append(snap)
        self.pushed[q] += 1
        return self.pushed[q] - 1

    def wait(self, q: str, token: int | None) -> None:
        """The next instruction of the queue's destination stage waits for token `token`."""
        if token is None:
            return
        if token >= self.pushed[q]:
            raise TargetError(f"internal: waiting for {q} token {token} never pushed")
        while self.popped[q] <= token:
            self.b.dep_pop(*self.queues[q])
            if self.alu_stage:
                to = self.queues[q][1]
                kn, snap = self.known[to], self._snap[q][self.popped[q]]
                for st in _STAGES:
                    if snap[st] > kn[st]:
                        kn[st] = snap[st]
            self.popped[q] += 1

    # ---- the micro-op buffer between compute and the ALU stage (builder hooks) -------------
    def _before_alu(self) -> None:
        """The ALU instruction about to be built must not run before the compute work it needs
        (micro-op loads; in strict mode everything compute did before it)."""
        self._scan()
        need = self.count[STAGE_COMPUTE] if self.strict_alu else self._uop_loaded
        if self.known[STAGE_ALU][STAGE_COMPUTE] < need:
            self.wait("g2a", self.push("g2a"))

    def _before_uop_load(self) -> None:
        """A LOAD UOP about to be built may overwrite micro-ops of ALU instructions not yet
        known finished by the compute module: fence them (alu -> store -> compute)."""
        self._scan()
        if self.known[STAGE_COMPUTE][STAGE_ALU] < self.count[STAGE_ALU]:
            self.wait("a2s", self.push("a2s"))
            self.wait("s2g", self.push("s2g"))

    def balanced(self) -> bool:
        return self.pushed == self.popped


@dataclass(slots=True)
class LayerReport:
    """What lowering one layer produced: its schedule, the instructions it appended, and the
    useful MACs against those the GEMM core performs (padding and block-diagonal waste)."""
    name: str
    kind: str
    schedule: object
    instructions: int
    useful_macs: int = 0
    performed_macs: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def mac_efficiency(self) -> float:
        return self.useful_macs / self.performed_macs if self.performed_macs else 1.0


@dataclass(slots=True)
class LoweredSegment:
    """A finished stream: the Program, the packed constants to place in its DRAM buffers,
    and the tensors a caller fills (inputs) and reads back (outputs), by name."""
    program: Program
    constants: dict[str, np.ndarray]
    inputs: dict[str, PackedTensor]
    outputs: dict[str, PackedTensor]
    reports: list[LayerReport]

    @property
    def layer_spans(self) -> list[tuple[str, int, int]]:
        """(layer name, first insn, stop insn) per lowered layer, in stream order (the same
        list as program.layers; what timing.simulate_timing takes as `layers`)."""
        return self.program.layers

    @property
    def config(self) -> VTAConfig:
        return self.program.config


class LoweringContext:
    """Builds one stream; lower_* functions append layers to it (see lower/__init__.py)."""

    def __init__(self, cfg: VTAConfig):
        self.cfg = cfg
        self.b = StreamBuilder(cfg)
        self.tokens = TokenTracker(self.b)
        self.constants: dict[str, np.ndarray] = {}
        self.inputs: dict[str, PackedTensor] = {}
        self.reports: list[LayerReport] = []
        self._kernels: dict[tuple, UopKernel] = {}
        self._stores_since_barrier = False
        self._layer_start = 0
        self.spans: list[tuple[str, int, int]] = []

    # ---- DRAM ---------------------------------------------------------------------------
    def tensor(self, name: str, shape: tuple[int, ...], dtype: str = "int8",
               block: int | None = None) -> PackedTensor:
        """Allocate a packed activation buffer (an intermediate or an output); `block` is the
        channels per element (default BLOCK_IN, what a convolution reads)."""
        c = self.cfg
        t = PackedTensor(name, tuple(int(s) for s in shape), dtype, c.batch,
                         block or c.block_in)
        self.b.alloc(name, t.packed_shape, dtype)
        return t

    def view(self, t: PackedTensor, name: str, first_row: int, rows: int) -> PackedTensor:
        """Rows [first_row, first_row + rows) of matrix tensor `t` as a tensor of its own (a
        DRAM alias: no copy). Both must be whole batch blocks."""
        c = self.cfg
        if len(t.shape) != 2 or first_row % c.batch or rows % c.batch:
            raise TargetError(f"view {name!r}: rows [{first_row}, {first_row + rows}) of "
                              f"{list(t.shape)} are not whole batch blocks of {c.batch}")
        v = PackedTensor(name, (rows, t.shape[1]), t.dtype, t.batch, t.block)
        row_bytes = v.packed_shape[1] * t.batch * t.block * np.dtype(t.dtype).itemsize
        self.b.alias(name, t.buffer, first_row // c.batch * row_bytes, v.packed_shape, t.dtype)
        return v

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "int8") -> PackedTensor:
        """Allocate a buffer the caller fills before running (a segment input)."""
        t = self.tensor(name, shape, dtype)
        self.inputs[name] = t
        return t

    def constant(self, name: str, array: np.ndarray) -> str:
        """A packed constant (weights, bias vectors) in its own DRAM buffer."""
        self.b.alloc(name, array.shape, str(array.dtype))
        self.constants[name] = array
        return name

    # ---- kernels --------------------------------------------------------------------------
    def kernel(self, key: tuple, make: Callable[[], tuple[list, list]]) -> UopKernel:
        """The cached micro-op kernel for `key`; `make()` returns (uops, loops) on a miss."""
        k = self._kernels.get(key)
        if k is None:
            uops, loops = make()
            k = self._kernels[key] = self.b.uop_kernel(uops, loops, name=str(key[0]))
        return k

    # ---- layers ---------------------------------------------------------------------------
    def begin_layer(self) -> None:
        """Order this layer after everything before it (see the module docstring)."""
        if self._stores_since_barrier:
            t = self.tokens.push("s2g")
            self.tokens.wait("s2g", t)
            t = self.tokens.push("g2l")
            self.tokens.wait("g2l", t)
            self._stores_since_barrier = False
        self._layer_start = len(self.b.insns)

    def end_layer(self, report: LayerReport) -> LayerReport:
        self._stores_since_barrier = True
        stop = len(self.b.insns)
        report.instructions = stop - self._layer_start
        self.reports.append(report)
        if stop > self._layer_start:
            # The barrier's token carriers (emitted before _layer_start) belong to no layer.
            self.spans.append((report.name, self._layer_start, stop))
        return report

    def finish(self, outputs: dict[str, PackedTensor] | list[PackedTensor]) -> LoweredSegment:
        """Append FINISH and return the segment. `outputs` names what a caller reads back."""
        if isinstance(outputs, list):
            outputs = {t.buffer: t for t in outputs}
        if not self.tokens.balanced():
            raise TargetError(f"internal: unbalanced dependency tokens {self.tokens.pushed} "
                              f"pushed vs {self.tokens.popped} popped")
        program = self.b.finish()
        program.layers = list(self.spans)
        return LoweredSegment(program, dict(self.constants), dict(self.inputs), dict(outputs),
                              list(self.reports))

"""The VTA cycle model: how long an instruction stream takes, without touching any data.

The machine modelled (assumptions and their sources are listed in docs/cycle-model.md):

- A fetch stage reads the stream in program order and dispatches each instruction into the
  command queue of its module (load / compute / store), one instruction per
  ceil(16 / bus_bytes) cycles after an initial DMA latency. It stalls while the target queue
  holds `cmd_queue_depth` instructions; a module frees a slot when it *starts* an instruction.
- Each module runs its queue in order, one instruction at a time. An instruction starts when
  it has been dispatched, its module is free, and every token queue it pops holds a token; a
  token becomes visible when the instruction that pushes it *finishes*.
- Latencies come from the config: LOAD/STORE = insn_overhead + dma_latency + data beats
  (each row is one burst of ceil(row bytes / bus_bytes) beats; rows are pipelined so only
  the request pays the latency) + one cycle per padding element (the load module writes
  zeros itself); GEMM = insn_overhead + iter_out*iter_in*uops (II = 1) + gemm_pipeline (resets
  too); ALU = insn_overhead + iter_out*iter_in*uops*alu_ii + alu_pipeline; a zero-size
  LOAD/STORE (a token carrier) and FINISH cost insn_overhead. FINISH waits for everything.
- All DMA (load module, the compute module's UOP/ACC loads, the store module) shares one DRAM
  bus of bus_bytes per cycle, granted first come first served. That is why no layer can beat
  the roofline min(peak, bus bandwidth x intensity) in this model.

Algorithm: event-driven over instructions, not cycles. Among the module heads that can start,
the one with the earliest start time goes next; start times are therefore non-decreasing,
which lets the shared bus be a single "free at" time. Each instruction is visited once
(O(instructions), three heads examined per step). A stream whose tokens can never arrive
(or whose fetch stalls behind a full queue forever) raises DeadlockError naming the blocked
instructions, like the behavioural simulator.

With the config's `alu_stage` (docs/cycle-model.md, "The alu_stage variant") the ALU
instructions run on a fourth module, `alu`, with its own command queue (cmd_queue_depth) and
the queues g2a (compute -> alu) and a2s (alu -> store); its busy time overlaps the GEMMs.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ...errors import TargetError
from ..accel.timing import (InsnWork, LayerSpan, TimingResult, layer_spans,  # noqa: F401
                            timing_result)  # LayerSpan: re-exported for callers
from .config import VTAConfig
from .disasm import format_insn
from .isa import (INSN_BYTES, QUEUE_NAMES, AluInsn, FinishInsn, GemmInsn, Insn, IsaError,
                  MemInsn, MemType, Opcode, decode_stream, dep_queues, layout_for)
from .sim.errors import DeadlockError, SimulationError

MODULES = ("load", "compute", "store")
LOAD, COMPUTE, STORE = range(3)
QUEUES = ("l2g", "g2l", "g2s", "s2g")
L2G, G2L, G2S, S2G = range(4)
# Queue each dependency flag refers to, per module: (pop_prev, pop_next, push_prev, push_next).
_DEP_QUEUES = ((None, G2L, None, L2G), (L2G, S2G, G2L, G2S), (G2S, None, S2G, None))
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
# The alu_stage variant: a fourth module and the queues of isa.QUEUE_NAMES.
MODULES_ALU = MODULES + ("alu",)
ALU = 3
_DEP_QUEUES_ALU = tuple(tuple(None if q is None else QUEUE_NAMES.index(q) for q in
                              dep_queues(True)[m]) for m in MODULES_ALU)
_BUFFER_OF = {MemType.INP: 0, MemType.WGT: 1, MemType.ACC: 2, MemType.ACC_8BIT: 2,
              MemType.UOP: 3, MemType.OUT: 4}


# ---------------------------------------------------------------------------------------------
# Per-instruction costs
# ---------------------------------------------------------------------------------------------

def _label(index: int, insn) -> str:
    try:
        return f"instruction #{index} ({' '.join(format_insn(insn).split())})"
    except Exception:  # a malformed object: still name it
        return f"instruction #{index} ({type(insn).__name__})"


def _module_of(index: int, insn, alu_stage: bool = False) -> int:
    if alu_stage and isinstance(insn, AluInsn):
        return ALU
    if isinstance(insn, MemInsn):
        if insn.opcode is Opcode.STORE:
            if insn.memory_type is not MemType.OUT:
                raise SimulationError(f"{_label(index, insn)}: STORE supports only OUT", index)
            return STORE
        if insn.opcode is not Opcode.LOAD:
            raise SimulationError(f"{_label(index, insn)}: memory instruction with opcode "
                                  f"{insn.opcode!r}", index)
        if insn.memory_type in (MemType.INP, MemType.WGT):
            return LOAD
        if insn.memory_type in (MemType.UOP, MemType.ACC, MemType.ACC_8BIT):
            return COMPUTE
        raise SimulationError(f"{_label(index, insn)}: LOAD cannot target memory type "
                              f"{insn.memory_type!r}", index)
    if isinstance(insn, (GemmInsn, AluInsn, FinishInsn)):
        return COMPUTE
    raise SimulationError(f"instruction #{index}: not a VTA instruction: {insn!r}", index)


_SKIPPED_FIELDS = ("deps", "opcode", "memory_type", "alu_op", "imm", "reset", "use_imm")
_CHECKED_FIELDS: dict[type, tuple[str, ...]] = {}    # instruction class -> fields checked


def _check_fields(index: int, insn) -> None:
    names = _CHECKED_FIELDS.get(type(insn))
    if names is None:
        names = _CHECKED_FIELDS[type(insn)] = tuple(
            f.name for f in fields(insn) if f.name not in _SKIPPED_FIELDS)
    for name in names:
        v = getattr(insn, name)
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise SimulationError(f"{_label(index, insn)}: field {name}={v!r} must be a "
                                  "non-negative integer", index)


def _dram_elem_bytes(cfg: VTAConfig, mt: MemType) -> int:
    if mt is MemType.ACC_8BIT:
        return cfg.batch * cfg.block_out      # int8 in DRAM, sign-extended on the way in
    return {MemType.INP: cfg.inp_elem_bytes, MemType.WGT: cfg.wgt_elem_bytes,
            MemType.ACC: cfg.acc_elem_bytes, MemType.UOP: cfg.uop_elem_bytes,
            MemType.OUT: cfg.out_elem_bytes}[mt]


@dataclass(frozen=True, slots=True)
class InsnCost:
    """Cost of one instruction in isolation: `fixed` module cycles that do not use the bus,
    `beats` bus cycles (DMA data) requested `latency` cycles after the start, `pad` cycles
    after the data (padding writes), and what it does for the counters."""
    fixed: int
    latency: int
    beats: int
    pad: int
    gemm: int        # GEMM array cycles (0 for resets and non-GEMM)
    alu: int         # ALU issue cycles
    reset: int       # GEMM array cycles spent on a reset
    buffer: int      # index into BUFFERS, or -1
    nbytes: int

    @property
    def isolated_cycles(self) -> int:
        """Cycles with nothing else running (free bus, no waiting)."""
        return self.fixed + self.latency + self.beats + self.pad


def insn_cost(cfg: VTAConfig, insn: Insn) -> InsnCost:
    """The model's latency of `insn` alone; see the module docstring for the formulas."""
    ovh = cfg.insn_overhead
    if isinstance(insn, MemInsn):
        if insn.x_size == 0:          # a token carrier: no transfer
            return InsnCost(ovh, 0, 0, 0, 0, 0, 0, -1, 0)
        eb = _dram_elem_bytes(cfg, insn.memory_type)
        row_beats = -(-insn.x_size * eb // cfg.bus_bytes)
        row_len = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        written = (insn.y_pad_0 + insn.y_size + insn.y_pad_1) * row_len
        pad = written - insn.x_size * insn.y_size
        return InsnCost(ovh, cfg.dma_latency, insn.y_size * row_beats, pad, 0, 0, 0,
                        _BUFFER_OF[insn.memory_type], insn.x_size * insn.y_size * eb)
    if isinstance(insn, GemmInsn):
        n = insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)
        gemm, reset = (0, n) if insn.reset else (n, 0)
        return InsnCost(ovh + n + cfg.gemm_pipeline, 0, 0, 0, gemm, 0, reset, -1, 0)
    if isinstance(insn, AluInsn):
        n = insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)
        if n == 0:                    # a token carrier (the ALU stage's no-op)
            return InsnCost(ovh, 0, 0, 0, 0, 0, 0, -1, 0)
        return InsnCost(ovh + n * cfg.alu_ii + cfg.alu_pipeline, 0, 0, 0, 0, n * cfg.alu_ii,
                        0, -1, 0)
    return InsnCost(ovh, 0, 0, 0, 0, 0, 0, -1, 0)   # FINISH


# ---------------------------------------------------------------------------------------------
# The scheduler
# ---------------------------------------------------------------------------------------------

def _insns_and_config(stream, cfg: VTAConfig | None) -> tuple[list, VTAConfig, object]:
    """Accept a Program (insns + config), a list of instructions or raw bytes plus a config."""
    layers = getattr(stream, "layers", None)
    if hasattr(stream, "insns") and hasattr(stream, "config"):
        return list(stream.insns), cfg or stream.config, layers
    if cfg is None:
        raise TargetError("simulate_timing: give a VTAConfig with a bare instruction list")
    if isinstance(stream, np.ndarray):
        stream = stream.astype(np.uint8, copy=False).tobytes()
    if isinstance(stream, (bytes, bytearray, memoryview)):
        try:
            return decode_stream(bytes(stream), layout_for(cfg)), cfg, None
        except IsaError as e:
            raise SimulationError(f"timing model: {e}") from None
    return list(stream), cfg, None


def simulate_timing(stream, cfg: VTAConfig | None = None, layers=None) -> TimingResult:
    """Time an instruction stream with the cycle model (no data is read or written).

    stream: a builder Program, a list of instruction dataclasses, or raw 16-byte words;
    cfg: the config (default: the Program's); layers: optional LayerSpans / (name, first,
    stop) tuples / one name per instruction, for per-layer aggregates (a Program attribute
    `layers` is used when present and none is given). Raises DeadlockError when tokens or
    command queues can never let the stream finish, SimulationError on a malformed stream.
    """
    insns, cfg, prog_layers = _insns_and_config(stream, cfg)
    spans = layer_spans(layers if layers is not None else prog_layers, len(insns))
    n = len(insns)
    if n == 0:
        raise SimulationError("empty instruction stream (no FINISH)")

    alu_stage = bool(cfg.alu_stage)
    modules = MODULES_ALU if alu_stage else MODULES
    dep_q = _DEP_QUEUES_ALU if alu_stage else _DEP_QUEUES
    queue_names = QUEUE_NAMES if alu_stage else QUEUES
    nm, nq = len(modules), len(queue_names)
    mod = [0] * n
    pops: list[tuple[int, ...]] = [()] * n
    pushes: list[tuple[int, ...]] = [()] * n
    costs: list[InsnCost] = [None] * n   # type: ignore[list-item]
    lists: list[list[int]] = [[] for _ in range(nm)]
    pos = [0] * n                         # position within its module's list
    finish_at = -1
    for i, insn in enumerate(insns):
        m = _module_of(i, insn, alu_stage)
        _check_fields(i, insn)
        dq = dep_q[m]
        po, pu = [], []
        for k, flag in enumerate(_FLAGS):
            if getattr(insn.deps, flag):
                if dq[k] is None:
                    raise SimulationError(f"{_label(i, insn)}: {flag} is set but the "
                                          f"{modules[m]} module has no "
                                          f"{'previous' if 'prev' in flag else 'next'} stage", i)
                (po if k < 2 else pu).append(dq[k])
        mod[i], pops[i], pushes[i] = m, tuple(po), tuple(pu)
        costs[i] = insn_cost(cfg, insn)
        pos[i] = len(lists[m])
        lists[m].append(i)
        if isinstance(insn, FinishInsn):
            finish_at = i
            break
    if finish_at < 0:
        raise SimulationError(f"missing FINISH: the stream of {n} instruction(s) has no FINISH; "
                              f"the last is {_label(n - 1, insns[-1])}", n - 1)
    if finish_at != n - 1:
        raise SimulationError(f"{_label(finish_at, insns[finish_at])} ends the stream but "
                              f"{n - 1 - finish_at} instruction(s) follow it and would never run",
                              finish_at)

    depth = max(1, cfg.cmd_queue_depth)
    fetch_ii = -(-INSN_BYTES // cfg.bus_bytes)
    start = [-1] * n
    end = [-1] * n
    disp = [0] * n
    push_end: list[list[int]] = [[] for _ in range(nq)]   # end of each push, per queue, in order
    popped = [0] * nq
    heads = [0] * nm
    free = [0] * nm
    bus_free = 0
    fetched = 0                  # instructions dispatched so far (program order)
    last_disp = cfg.dma_latency - fetch_ii   # the first instruction arrives after one DMA
    max_end = 0
    done = 0
    while done < n:
        # Dispatch in program order as far as the command queues allow.
        while fetched < n:
            i = fetched
            t = last_disp + fetch_ii
            if pos[i] >= depth:
                j = lists[mod[i]][pos[i] - depth]   # the instruction whose slot i needs
                if start[j] < 0:
                    break
                t = max(t, start[j])
            disp[i] = last_disp = t
            fetched += 1
        # The startable head with the earliest start time goes next.
        best, best_t = -1, 0
        for m in range(nm):
            if heads[m] >= len(lists[m]):
                continue
            i = lists[m][heads[m]]
            if i >= fetched:
                continue
            t = max(free[m], disp[i])
            ok = True
            for q in pops[i]:
                if popped[q] >= len(push_end[q]):
                    ok = False
                    break
                t = max(t, push_end[q][popped[q]])
            if not ok:
                continue
            if i == finish_at:
                if done != n - 1:          # FINISH waits for every other instruction
                    continue
                t = max(t, max_end)
            if best < 0 or t < best_t or (t == best_t and i < best):
                best, best_t = i, t
        if best < 0:
            _raise_deadlock(insns, lists, heads, fetched, pops, popped, push_end, done, depth,
                            mod, modules, queue_names)
        i, m, c = best, mod[best], costs[best]
        for q in pops[i]:
            popped[q] += 1
        t_end = best_t + c.fixed
        if c.beats:
            bus_start = max(t_end + c.latency, bus_free)
            bus_free = bus_start + c.beats
            t_end = bus_free
        t_end += c.pad
        start[i], end[i] = best_t, t_end
        for q in pushes[i]:
            push_end[q].append(t_end)
        free[m] = t_end
        heads[m] += 1
        max_end = max(max_end, t_end)
        done += 1

    return _result(cfg, costs, mod, start, end, disp, spans, modules)


def _raise_deadlock(insns, lists, heads, fetched, pops, popped, push_end, done, depth, mod,
                    modules=MODULES, queue_names=QUEUES):
    blocked = []
    queue_tokens = {queue_names[q]: len(push_end[q]) - popped[q] for q in range(len(push_end))}
    for m in range(len(modules)):
        if heads[m] >= len(lists[m]):
            continue
        i = lists[m][heads[m]]
        if i >= fetched:
            stalled_on = mod[fetched]
            waits = (f"cmd_queue:{modules[stalled_on]}",)
        else:
            waits = tuple(queue_names[q] for q in pops[i] if popped[q] >= len(push_end[q]))
        blocked.append((modules[m], i, " ".join(format_insn(insns[i]).split()), waits))
    lines = []
    for module, i, _, waits in blocked:
        if waits and waits[0].startswith("cmd_queue:"):
            lines.append(f"{module} module's next {_label(i, insns[i])} was never fetched: the "
                         f"fetch stage stalled at instruction #{fetched} because the "
                         f"{waits[0].split(':')[1]} command queue is full (depth {depth})")
        else:
            lines.append(f"{module} module blocked at {_label(i, insns[i])} waiting on "
                         f"{'/'.join(waits) or 'the other modules to finish'}")
    raise DeadlockError(f"timing model: token deadlock after {done} instruction(s): "
                        + "; ".join(lines) + f"; queue tokens {queue_tokens}",
                        blocked, queue_tokens)


def _result(cfg, costs, mod, start, end, disp, spans, modules=MODULES) -> TimingResult:
    def col(attr: str) -> np.ndarray:
        return np.fromiter((getattr(c, attr) for c in costs), dtype=np.int64, count=len(costs))
    work = InsnWork(col("gemm"), col("alu"), col("reset"), col("buffer"), col("nbytes"))
    return timing_result(cfg, modules, work, mod, start, end, disp, spans,
                         cfg.batch * cfg.block_in * cfg.block_out, format_insn)


def stream_cycles(stream, cfg: VTAConfig | None = None) -> int:
    """Total cycles only: the cost function a schedule chooser minimises."""
    return simulate_timing(stream, cfg).total_cycles

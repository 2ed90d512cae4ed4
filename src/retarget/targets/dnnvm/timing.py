"""The dnnvm cycle model: when each instruction of a stream runs, without touching data.

- Five engines run their instructions in program order; an instruction starts when its engine
  is free and the producer instruction behind each token it pops has finished (the k-th pop
  from engine A on engine B is matched to A's k-th instruction that signals B).
- LOAD / SAVE: insn_overhead + ddr_latency, then bytes / ddr_bytes_per_cycle cycles on the one
  DDR port they share, granted in order of request. CONV: insn_overhead + conv_pipeline +
  steps * step_cycles, where a step is ic_p input channels x oc_p output channels x h_p output
  rows for one output column and one kernel tap (spec §1; with channel augmentation, a CONV
  on fewer than ic_p channels packs several kernel columns into one step). POOL / ELEW: insn_overhead +
  elements (x window taps) / pool_lanes. END: when every engine has drained.
- Event-driven: among engine heads that can start, the earliest goes next, so DDR grants are
  in time order; O(instructions x engines).

`ddr_bytes_per_cycle` and `insn_overhead` are the two calibrated fields (docs/dnnvm.md);
everything else is the config's.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..accel.sim_errors import DeadlockError, SimulationError
from ..accel.timing import BUFFERS, InsnWork, TimingResult, layer_spans, timing_result
from .config import DNNVMConfig
from .disasm import format_insn
from .isa import ENGINES, Conv, Elew, End, Load, Pool, Save, decode_stream

# DDR traffic class of a LOAD by its buffer (IN, WGT, BIAS, OUT: a fused add's operand)
_BUFFER_OF = [BUFFERS.index(b) for b in ("inp", "wgt", "acc", "inp")]
OUT_BUFFER = BUFFERS.index("out")


def conv_steps(cfg: DNNVMConfig, insn: Conv) -> int:
    """PE-array steps of one CONV instruction."""
    rows = -(-insn.out_h // cfg.h_p)
    ocs = -(-insn.oc // cfg.oc_p)
    return rows * insn.out_w * cfg.window_steps(insn.kh, insn.kw, insn.ic, insn.depthwise) * ocs


def dma_cycles(cfg: DNNVMConfig, nbytes: int) -> int:
    return -int(-nbytes // cfg.ddr_bytes_per_cycle)


def insn_cost(cfg: DNNVMConfig, insn):
    """(fixed cycles before the DDR transfer, DDR cycles, MAC-array cycles, ALU cycles,
    buffer index, DDR bytes) of one instruction alone."""
    ovh = cfg.insn_overhead
    if isinstance(insn, Load):
        n = insn.rows * insn.cols * insn.vec_bytes
        return ovh + cfg.ddr_latency, dma_cycles(cfg, n), 0, 0, _BUFFER_OF[insn.buf], n
    if isinstance(insn, Save):
        n = insn.rows * insn.cols * insn.vec_bytes
        return ovh + cfg.ddr_latency, dma_cycles(cfg, n), 0, 0, OUT_BUFFER, n
    if isinstance(insn, Conv):
        busy = conv_steps(cfg, insn) * cfg.step_cycles
        return ovh + cfg.conv_pipeline + busy, 0, busy, 0, -1, 0
    if isinstance(insn, Pool):
        work = -(-insn.out_h * insn.out_w * insn.channels * insn.kh * insn.kw // cfg.pool_lanes)
        return ovh + work, 0, 0, work, -1, 0
    if isinstance(insn, Elew):
        work = -(-insn.count // cfg.pool_lanes)
        return ovh + work, 0, 0, work, -1, 0
    return ovh, 0, 0, 0, -1, 0


def _costs(cfg: DNNVMConfig, body) -> tuple[list, ...]:
    """insn_cost of every instruction as six columns (plus END's zeros)."""
    rows = [insn_cost(cfg, insn) for insn in body]
    rows.append((0, 0, 0, 0, -1, 0))
    return tuple(list(col) for col in zip(*rows))


def simulate_timing(stream, cfg: DNNVMConfig | None = None, layers=None) -> TimingResult:
    """Time a Program (or a list of instructions / raw bytes with `cfg`). Raises DeadlockError
    when tokens can never arrive, SimulationError on a malformed stream."""
    if hasattr(stream, "insns") and hasattr(stream, "config"):
        insns, cfg = list(stream.insns), cfg or stream.config
        if layers is None:
            layers = stream.layers
    elif isinstance(stream, (bytes, bytearray)):
        insns = decode_stream(bytes(stream))
    else:
        insns = list(stream)
    if cfg is None:
        raise SimulationError("simulate_timing: give a DNNVMConfig with a bare stream")
    n = len(insns)
    if not n or not isinstance(insns[-1], End):
        raise SimulationError(f"the stream of {n} instruction(s) does not end with END")
    spans = layer_spans(layers, n)
    ne = len(ENGINES)
    body = insns[:-1]
    for i, insn in enumerate(body):
        if isinstance(insn, End):
            raise SimulationError(f"instruction #{i}: END before the end of the stream", i)
    fixed, bus, gemm, alu, bufs, nbytes = _costs(cfg, body)
    engine = [insn.engine for insn in body] + [0]
    queues: list[list[int]] = [[] for _ in range(ne)]
    for i, e in enumerate(engine[:-1]):
        queues[e].append(i)
    # Match pops to pushes per (from, to) pair, in each engine's program order: the k-th pop
    # on B from A is A's k-th instruction that signals B.
    signalled: list[list[list[int]]] = [[[] for _ in range(ne)] for _ in range(ne)]
    for i, insn in enumerate(body):
        if insn.signal:
            for d in range(ne):
                if insn.signal >> d & 1:
                    signalled[engine[i]][d].append(i)
    producers: list[list[int]] = [[] for _ in range(n)]
    popped = [[0] * ne for _ in range(ne)]
    for i, insn in enumerate(body):
        if insn.wait:
            e = engine[i]
            for s in range(ne):
                if insn.wait >> s & 1:
                    k = popped[s][e]
                    popped[s][e] += 1
                    producers[i].append(signalled[s][e][k] if k < len(signalled[s][e]) else -1)
    # Event-driven over instructions: a head whose producers have all finished is pushed
    # with its start time; the earliest pops next, so start times never decrease and the DDR
    # port is granted in time order.
    start = [0] * n
    end = [-1] * n
    left = [len(p) for p in producers]            # producers not finished yet
    dependents: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(producers):
        for p in ps:
            if p >= 0:
                dependents[p].append(i)
    heads = [0] * ne
    free = [0] * ne
    # The heap holds start << shift | index: one int compares faster than a (start, index)
    # tuple, with the same order (earliest start, then program order).
    shift = max(1, n.bit_length())
    mask = (1 << shift) - 1
    ready: list[int] = []
    push, pop = heapq.heappush, heapq.heappop

    def offer(e: int) -> None:
        """Push engine e's head if every producer behind its tokens has finished."""
        q = queues[e]
        h = heads[e]
        if h < len(q):
            i = q[h]
            if not left[i]:
                t = free[e]
                for p in producers[i]:
                    if end[p] > t:
                        t = end[p]
                push(ready, t << shift | i)

    for e in range(ne):
        offer(e)
    bus_free = 0
    for _ in range(n - 1):
        if not ready:
            _deadlock(insns, queues, heads)
        key = pop(ready)
        t, i = key >> shift, key & mask
        t_end = t + fixed[i]
        b = bus[i]
        if b:
            t_end = (t_end if t_end > bus_free else bus_free) + b
            bus_free = t_end
        start[i] = t
        end[i] = t_end
        e = engine[i]
        free[e] = t_end
        heads[e] += 1
        offer(e)
        for d in dependents[i]:
            left[d] -= 1
            if not left[d]:
                ed = engine[d]
                if queues[ed][heads[ed]] == d:
                    offer(ed)
    last = max(end[:-1], default=0)
    start[-1], end[-1], engine[-1] = last, last + cfg.insn_overhead, 0
    work = InsnWork(*(np.asarray(x, np.int64) for x in (gemm, alu, [0] * n, bufs, nbytes)))
    return timing_result(cfg, ENGINES, work, engine, start, end, start, spans,
                         cfg.macs_per_step // cfg.step_cycles, format_insn)


def _deadlock(insns, queues, heads) -> None:
    blocked = []
    for e, q in enumerate(queues):
        if heads[e] < len(q):
            i = q[heads[e]]
            waits = tuple(ENGINES[s] for s in range(len(ENGINES)) if insns[i].wait >> s & 1)
            blocked.append((ENGINES[e], i, " ".join(format_insn(insns[i]).split()), waits))
    text = "; ".join(f"{m} engine blocked at instruction #{i} ({t}) waiting on "
                     f"{'/'.join(w)}" for m, i, t, w in blocked)
    raise DeadlockError(f"dnnvm timing model: deadlock: {text}", blocked)


__all__ = ["conv_steps", "dma_cycles", "insn_cost", "simulate_timing"]

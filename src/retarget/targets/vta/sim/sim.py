"""The VTA behavioural simulator: three modules, four token queues, exact semantics.

The stream is split by module (LOAD of INP/WGT -> load; GEMM, ALU, FINISH and LOAD of
UOP/ACC/ACC_8BIT -> compute; STORE -> store). Each module runs its instructions in order, an
instruction only when every queue it pops from holds a token; it pops before and pushes after
executing. Among the modules that can run, the one whose next instruction comes first in the
stream goes first, so a well-formed stream executes in program order (what the published
behavioural simulator does) while the token discipline is still enforced: a stream whose tokens
cannot be satisfied stops with a DeadlockError naming each blocked instruction, never a hang.

With the config's `alu_stage` (the variant of docs/cycle-model.md), ALU instructions run on a
fourth module, alu, and the queues are l2g, g2l, s2g, g2a (compute -> alu) and a2s
(alu -> store) (isa.dep_queues). Program order is still the execution order of a well-formed
stream, so the results are those of the published design; the instructions the alu module runs
are counted in `compute_insns`.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field, fields
from functools import partial

import numpy as np

from ....limits import check_device_work
from ..config import VTAConfig
from ..disasm import format_insn
from ..isa import (INSN_BYTES, QUEUE_NAMES, AluInsn, FinishInsn, GemmInsn, Insn, IsaError,
                   MemInsn, MemType, Opcode, decode_insn, dep_queues, layout_for)
from .compute import (PlanCache, alu_plans, execute_alu, execute_gemm, gemm_plans, run_alu,
                      run_gemm)
from .errors import DeadlockError, SimFault, SimulationError
from .memory import SimMemory
from .replay import Replay, guarded

MODULES = ("load", "compute", "store")
QUEUES = ("l2g", "g2l", "g2s", "s2g")
L2G, G2L, G2S, S2G = range(4)

# Per module, the queue each dependency flag refers to (None: the module has no such neighbour).
#                 pop_prev, pop_next, push_prev, push_next
_DEP_QUEUES = {
    "load":    (None, G2L, None, L2G),
    "compute": (L2G, S2G, G2L, G2S),
    "store":   (G2S, None, S2G, None),
}
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
# The alu_stage variant: four modules, the queues of isa.QUEUE_NAMES (g2s unused).
MODULES_ALU = MODULES + ("alu",)
_DEP_QUEUES_ALU = {m: tuple(None if q is None else QUEUE_NAMES.index(q) for q in qs)
                   for m, qs in dep_queues(True).items()}
DECODE_CACHE_SIZE = 1 << 16
REPLAY_CACHE_SIZE = 16    # streams whose recorded steps a simulator keeps (replay.py)
# Fields that hold a count, size, index or address (all must be non-negative ints).
_UNSIGNED_FIELDS = {
    cls: tuple(f.name for f in fields(cls) if f.name not in
               ("deps", "opcode", "memory_type", "alu_op", "imm", "reset", "use_imm"))
    for cls in (MemInsn, GemmInsn, AluInsn, FinishInsn)}


@dataclass(slots=True)
class SimCounters:
    """The published simulator's counters (tvm-vta src/sim/sim_driver.cc, `Profiler`), counted
    as it counts them, plus instructions run per module. Each *_load_nbytes adds
    y_size * x_size * the SRAM element's bytes; for an ACC_8BIT load that is the accumulator
    element (BATCH * BLOCK_OUT * 4 bytes, 64 on pynq), as upstream's `Load_int8` counts it,
    although only one byte per lane (16 on pynq) crosses from DRAM."""
    inp_load_nbytes: int = 0
    wgt_load_nbytes: int = 0
    acc_load_nbytes: int = 0
    uop_load_nbytes: int = 0
    out_store_nbytes: int = 0
    gemm_counter: int = 0     # iter_out * iter_in * (uop_end - uop_bgn) of non-reset GEMMs
    alu_counter: int = 0      # the same for ALU instructions
    load_insns: int = 0
    compute_insns: int = 0
    store_insns: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def add(self, other: "SimCounters") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True, slots=True)
class SimResult:
    counters: SimCounters
    instructions: int                 # instructions executed, FINISH included
    finish_index: int                 # stream position of the FINISH that ended the run
    tokens_left: dict[str, int] = field(default_factory=dict)  # tokens never popped

    def macs(self, cfg: VTAConfig) -> int:
        """Multiply-accumulates the GEMM core performed."""
        return self.counters.gemm_counter * cfg.batch * cfg.block_in * cfg.block_out


def _label(index: int, insn) -> str:
    try:
        text = " ".join(format_insn(insn).split())   # the listing's column padding, collapsed
    except Exception:  # a malformed object: still name it
        text = type(insn).__name__
    return f"instruction #{index} ({text})"


def _fail(index: int, insn, message: str) -> SimulationError:
    return SimulationError(f"{_label(index, insn)}: {message}", index)


def missing_finish_error(insns) -> SimulationError:
    """The stream ran to its end without a FINISH (`insns`: any indexable of instructions)."""
    last = len(insns) - 1
    where = f"; the last is {_label(last, insns[last])}" if len(insns) else ""
    return SimulationError(f"missing FINISH: the stream of {len(insns)} instruction(s) ran to "
                           f"its end without a FINISH{where}", last if len(insns) else None)


def deadlock_error(insns, executed: int, blocked: list[tuple[str, int, tuple[str, ...]]],
                   queue_counts: dict[str, int]) -> DeadlockError:
    """No module can go on: `blocked` lists (module, its next instruction, queues it waits on)."""
    blocked = [(mod, i, " ".join(format_insn(insns[i]).split()), waits)
               for mod, i, waits in blocked]
    lines = "; ".join(f"{mod} module blocked at {_label(i, insns[i])} waiting on "
                      f"{'/'.join(w)}" for mod, i, _, w in blocked)
    return DeadlockError(f"token deadlock after {executed} instruction(s): {lines}; "
                         f"queue tokens {queue_counts}", blocked, queue_counts)


def early_finish_error(insns, finish_index: int, pending: list[tuple[str, int]]
                       ) -> SimulationError:
    """FINISH ran while `pending` (module, next instruction) had not."""
    lines = ", ".join(f"{mod} {_label(i, insns[i])}" for mod, i in pending)
    return SimulationError(f"{_label(finish_index, insns[finish_index])} ended the stream while "
                           f"instructions had not run: {lines}; FINISH must come after them in "
                           f"the stream and wait for them through tokens", finish_index)


def decode(stream, cfg: VTAConfig, cache: dict | None = None) -> tuple[list[Insn], bool]:
    """Instruction dataclasses from bytes (raw 16-byte words), or a list passed through.
    Returns (instructions, decoded_from_bytes). `cache` memoises words already decoded: streams
    repeat the same GEMM/ALU/token words many times, and decoding is per-word Python."""
    if isinstance(stream, np.ndarray):
        stream = stream.astype(np.uint8, copy=False).tobytes()
    if not isinstance(stream, (bytes, bytearray, memoryview)):
        return list(stream), False
    data = bytes(stream)
    if len(data) % INSN_BYTES:
        raise SimulationError(f"instruction stream of {len(data)} bytes is not a whole number "
                              f"of {INSN_BYTES}-byte instructions")
    layout = layout_for(cfg)
    cache = {} if cache is None else cache
    out = []
    for i in range(0, len(data), INSN_BYTES):
        word = data[i:i + INSN_BYTES]
        insn = cache.get(word)
        if insn is None:
            try:
                insn = decode_insn(word, layout, i // INSN_BYTES)
            except IsaError as e:
                raise SimulationError(str(e), i // INSN_BYTES) from None
            if len(cache) < DECODE_CACHE_SIZE:
                cache[word] = insn
        out.append(insn)
    return out, True


def _module_of(index: int, insn, alu_stage: bool = False) -> str:
    """Which module runs `insn`; validates what dispatch depends on."""
    if alu_stage and isinstance(insn, AluInsn):
        return "alu"
    if isinstance(insn, MemInsn):
        if insn.opcode is Opcode.STORE:
            return "store"
        if insn.opcode is not Opcode.LOAD:
            raise _fail(index, insn, f"memory instruction with opcode {insn.opcode!r}")
        if insn.memory_type in (MemType.INP, MemType.WGT):
            return "load"
        if insn.memory_type in (MemType.UOP, MemType.ACC, MemType.ACC_8BIT):
            return "compute"
        raise _fail(index, insn, f"LOAD cannot target memory type {insn.memory_type!r}")
    if isinstance(insn, (GemmInsn, AluInsn, FinishInsn)):
        return "compute"
    raise SimulationError(f"instruction #{index}: unknown opcode / instruction object "
                          f"{insn!r}; expected LOAD, STORE, GEMM, ALU or FINISH", index)


def _check_fields(index: int, insn) -> None:
    """Hand-built dataclasses can hold anything: every numeric field must be a non-negative int
    (except the ALU immediate, which is signed). Decoded words satisfy this by construction."""
    for name in _UNSIGNED_FIELDS[type(insn)]:
        v = getattr(insn, name)
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise _fail(index, insn, f"field {name}={v!r} must be a non-negative integer")


def stream_work(insns, cfg: VTAConfig) -> int:
    """Operations a stream asks for (GEMM multiply-accumulates + ALU lane operations), counted
    from the loop extents alone, so a stream is judged before it runs."""
    work = 0
    for insn in insns:
        if isinstance(insn, (GemmInsn, AluInsn)):
            n = insn.iter_out * insn.iter_in * max(0, insn.uop_end - insn.uop_bgn) * cfg.batch
            work += n * cfg.block_out * (cfg.block_in if isinstance(insn, GemmInsn) else 1)
    return work


class Simulator:
    """One VTA instance: its memory (DRAM + SRAMs, persistent across runs), a plan cache and the
    recorded steps of the streams it ran (replay.py).

    `dram` may be given (a contiguous uint8 array, e.g. a device's memory, used in place);
    otherwise `dram_bytes` (default cfg.dram_bytes) of zeroed memory is created.
    """

    def __init__(self, cfg: VTAConfig, dram: np.ndarray | None = None,
                 dram_bytes: int | None = None):
        self.cfg = cfg
        if dram is None:
            dram = np.zeros(cfg.dram_bytes if dram_bytes is None else dram_bytes, dtype=np.uint8)
        self.mem = SimMemory(cfg, dram)
        self.plans = PlanCache()
        self._decoded: dict[bytes, Insn] = {}
        self._replays: OrderedDict[bytes, Replay] = OrderedDict()
        self.totals = SimCounters()   # summed over every run

    @property
    def dram(self) -> np.ndarray:
        return self.mem.dram

    def rebind_dram(self, dram: np.ndarray) -> None:
        """Use `dram` (the same contents, grown) from now on; the SRAMs are kept, the replays
        (which hold views of the old array) dropped."""
        self.mem.dram = dram
        self._replays.clear()

    def run(self, stream) -> SimResult:
        """Execute an instruction stream (bytes or a list of instruction dataclasses) until
        FINISH. Raises SimulationError (a DeviceError) naming the instruction on any fault.
        A byte stream that ran before replays its recorded steps (replay.py)."""
        key = _stream_key(stream)
        replay = self._replays.get(key) if key is not None else None
        if replay is not None and replay.admits(self.mem.confine):
            self._replays.move_to_end(key)
            result = replay.run(_fail)
            self.totals.add(result.counters)
            return result
        insns, from_bytes = decode(stream, self.cfg, self._decoded)
        queues_of = []
        alu_stage = bool(self.cfg.alu_stage)
        modules = MODULES_ALU if alu_stage else MODULES
        dep_q = _DEP_QUEUES_ALU if alu_stage else _DEP_QUEUES
        program: dict[str, list[int]] = {m: [] for m in modules}
        for i, insn in enumerate(insns):
            module = _module_of(i, insn, alu_stage)
            if not from_bytes:
                _check_fields(i, insn)
            dq = dep_q[module]
            deps = insn.deps
            pops, pushes = [], []
            for k, flag in enumerate(_FLAGS):
                if getattr(deps, flag):
                    if dq[k] is None:
                        raise _fail(i, insn, f"{flag} is set but the {module} module has no "
                                    f"{'previous' if 'prev' in flag else 'next'} stage")
                    (pops if k < 2 else pushes).append(dq[k])
            queues_of.append((tuple(pops), tuple(pushes)))
            program[module].append(i)
        label = f"VTA stream of {len(insns)} instruction(s)"
        work = stream_work(insns, self.cfg)
        check_device_work(label, work)
        result, steps, ranges = self._execute(insns, program, queues_of)
        if key is not None:
            lo, hi = (np.array(v, dtype=np.int64).reshape(-1) for v in zip(*ranges)) \
                if ranges else (np.zeros(0, np.int64), np.zeros(0, np.int64))
            self._replays[key] = Replay(steps, result, work, label, lo, hi)
            if len(self._replays) > REPLAY_CACHE_SIZE:
                self._replays.popitem(last=False)
        return result

    def _execute(self, insns, program, queues_of):
        """The checked run: (result, the steps it ran in order, DRAM byte ranges touched)."""
        counters = SimCounters()
        modules = tuple(program)
        queues = QUEUE_NAMES if len(modules) > 3 else QUEUES
        nm = len(modules)
        tokens = [0] * len(queues)
        lists = [program[m] for m in modules]
        heads = [0] * nm
        finish_index = -1
        executed = 0
        steps, ranges = [], []
        while True:
            # The runnable head instruction earliest in the stream goes next.
            best, best_m = None, -1
            for m in range(nm):
                if heads[m] < len(lists[m]):
                    i = lists[m][heads[m]]
                    if (best is None or i < best) and all(tokens[q] for q in queues_of[i][0]):
                        best, best_m = i, m
            if best is None:
                break
            i = best
            insn = insns[i]
            pops, pushes = queues_of[i]
            for q in pops:
                tokens[q] -= 1
            try:
                step, dram_range = self._prepare(insn)
                if step is not None:
                    step()
            except SimFault as e:
                raise _fail(i, insn, str(e)) from None
            if step is not None:
                steps.append((i, insn, step))
            if dram_range is not None:
                ranges.append(dram_range)
            _count(insn, counters, self.cfg)
            for q in pushes:
                tokens[q] += 1
            heads[best_m] += 1
            executed += 1
            name = "compute" if best_m == 3 else MODULES[best_m]   # alu: compute_insns
            setattr(counters, name + "_insns", getattr(counters, name + "_insns") + 1)
            if isinstance(insn, FinishInsn):
                finish_index = i
                break

        pending = [(modules[m], lists[m][heads[m]]) for m in range(nm)
                   if heads[m] < len(lists[m])]
        queue_counts = dict(zip(queues, tokens))
        if finish_index < 0:
            if not pending:
                raise missing_finish_error(insns)
            raise deadlock_error(insns, executed, [
                (module, i, tuple(queues[q] for q in queues_of[i][0] if tokens[q] == 0))
                for module, i in pending], queue_counts)
        if pending:
            raise early_finish_error(insns, finish_index, pending)
        self.totals.add(counters)
        result = SimResult(counters, executed, finish_index,
                           {k: v for k, v in queue_counts.items() if v})
        return result, steps, ranges

    def _prepare(self, insn):
        """Check `insn` against the machine's state and resolve it to a step (a callable that
        executes it; None if it moves no data) and the DRAM byte range it touches (or None)."""
        mem = self.mem
        if isinstance(insn, MemInsn):
            if insn.x_size == 0:
                return None, None   # a token carrier: moves nothing but dependency tokens
            if insn.opcode is Opcode.STORE:
                p = mem.prepare_store(insn)
                return (None, None) if p is None else (partial(mem.run_store, p), p.dram)
            p = mem.prepare_load(insn)
            return partial(mem.run_load, p), p.dram
        if isinstance(insn, GemmInsn):
            uops, plans = gemm_plans(insn, mem, self.plans)
            return guarded(mem.uop[insn.uop_bgn:insn.uop_end], uops,
                           partial(execute_gemm, insn, plans, mem),
                           partial(run_gemm, insn, mem, self.plans)), None
        if isinstance(insn, AluInsn):
            if insn.uop_end == insn.uop_bgn:
                return None, None   # an ALU token carrier (alu_stage): no micro-ops, no work
            uops, plans = alu_plans(insn, mem, self.plans)
            return guarded(mem.uop[insn.uop_bgn:insn.uop_end], uops,
                           partial(execute_alu, insn, plans, mem),
                           partial(run_alu, insn, mem, self.plans)), None
        return None, None   # FINISH


def _stream_key(stream) -> bytes | None:
    """The bytes a replay is recorded under (None for a list of instruction objects)."""
    if isinstance(stream, np.ndarray):
        return stream.astype(np.uint8, copy=False).tobytes()
    if isinstance(stream, (bytes, bytearray, memoryview)):
        return bytes(stream)
    return None


def _count(insn, counters: SimCounters, cfg: VTAConfig) -> None:
    """Add what `insn` contributes to the published counters (from its fields alone)."""
    if isinstance(insn, MemInsn):
        n = insn.y_size * insn.x_size
        if insn.opcode is Opcode.STORE:
            counters.out_store_nbytes += n * cfg.out_elem_bytes
            return
        mt = insn.memory_type
        if mt is MemType.INP:
            counters.inp_load_nbytes += n * cfg.inp_elem_bytes
        elif mt is MemType.WGT:
            counters.wgt_load_nbytes += n * cfg.wgt_elem_bytes
        elif mt is MemType.UOP:
            counters.uop_load_nbytes += n * cfg.uop_elem_bytes
        else:   # ACC, and ACC_8BIT: upstream counts the SRAM element, not DRAM bytes
            counters.acc_load_nbytes += n * cfg.acc_elem_bytes
    elif isinstance(insn, GemmInsn):
        if not insn.reset:
            counters.gemm_counter += insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)
    elif isinstance(insn, AluInsn):
        counters.alu_counter += insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)


def run_stream(cfg: VTAConfig, dram: np.ndarray, stream) -> SimResult:
    """Run `stream` on a fresh simulator whose DRAM is `dram` (modified in place)."""
    return Simulator(cfg, dram=dram).run(stream)

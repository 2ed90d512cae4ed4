"""Static check that a stream's dependency tokens order every cross-module SRAM conflict.

The three modules run concurrently on hardware; only tokens order them. The reference
simulator runs a well-formed stream in program order, so a missing token never shows up there
as a wrong result. This check does: it derives the happens-before relation the tokens imply
(the k-th push into a queue precedes the k-th pop from it; each module is in order) and verifies
that whenever two instructions of *different* modules touch the same SRAM entry and one writes
it (load module writes INP/WGT that compute reads; compute writes ACC that store reads), the
earlier one in program order is guaranteed to finish before the later one starts.
It looks only at indices (no data), so it runs in a fraction of a simulation's time.

With the config's `alu_stage`, ALU instructions run on a fourth module (alu) and the queues are
those of isa.dep_queues(True); the micro-op buffer then becomes a cross-module resource too
(the compute module's LOAD UOP writes what the ALU module's instructions read), so it is
checked like INP/WGT/ACC (in the published design both are on the compute module).
"""
from __future__ import annotations

import numpy as np

from ...errors import TargetError
from .builder import Program
from .disasm import format_insn
from .isa import (QUEUE_NAMES, AluInsn, FinishInsn, GemmInsn, MemInsn, MemType, Opcode,
                  decode_uops, dep_queues, layout_for, stage_of)

# queue of each flag, per stage: (pop_prev, pop_next, push_prev, push_next)
_QUEUES = {1: (None, "g2l", None, "l2g"), 2: ("l2g", "s2g", "g2l", "g2s"),
           3: ("g2s", None, "s2g", None)}
_STAGE_MODULE = {1: "load", 2: "compute", 3: "store", 4: "alu"}
_QUEUES_ALU = {st: dep_queues(True)[m] for st, m in _STAGE_MODULE.items()}
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


class HazardError(TargetError):
    """Two instructions of different modules conflict on an SRAM entry without a token path."""


def _happens_before(insns, alu_stage: bool = False
                    ) -> tuple[list[int], list[int], list[list[int]]]:
    """(stage, index within its module, vector clock) per instruction. clock[m - 1] is the
    highest index within module m known to have finished before the instruction starts (-1:
    none)."""
    stages = (1, 2, 3, 4) if alu_stage else (1, 2, 3)
    queues = _QUEUES_ALU if alu_stage else _QUEUES
    stage = [stage_of(i, alu_stage) for i in insns]
    pos, count = [], dict.fromkeys(stages, 0)
    for s in stage:
        pos.append(count[s])
        count[s] += 1
    # k-th push of queue q -> the pushing instruction; resolved lazily by replaying in a
    # module-interleaved order that respects tokens (a topological order).
    pushes: dict[str, list[int]] = {q: [] for q in QUEUE_NAMES}
    popped = {q: 0 for q in pushes}
    per_module = {m: [i for i, s in enumerate(stage) if s == m] for m in stages}
    heads = dict.fromkeys(stages, 0)
    clock: list[list[int] | None] = [None] * len(insns)
    last = {m: [-1] * len(stages) for m in stages}
    progress = True
    while progress:
        progress = False
        for m in stages:
            while heads[m] < len(per_module[m]):
                i = per_module[m][heads[m]]
                d = insns[i].deps
                pops = [queues[m][k] for k in range(2) if getattr(d, _FLAGS[k])]
                if any(len(pushes[q]) <= popped[q] for q in pops if q):
                    break
                vc = list(last[m])
                for q in pops:
                    if q is None:
                        continue
                    src = pushes[q][popped[q]]
                    popped[q] += 1
                    vc = [max(a, b) for a, b in zip(vc, clock[src])]
                    vc[stage[src] - 1] = max(vc[stage[src] - 1], pos[src])
                clock[i] = vc
                for k in (2, 3):
                    q = queues[m][k]
                    if getattr(d, _FLAGS[k]) and q:
                        pushes[q].append(i)
                last[m] = list(vc)
                last[m][m - 1] = pos[i]
                heads[m] += 1
                progress = True
    stuck = [per_module[m][heads[m]] for m in stages if heads[m] < len(per_module[m])]
    if stuck:
        raise HazardError("token deadlock: blocked at " + ", ".join(
            f"instruction {i} ({format_insn(insns[i])})" for i in stuck))
    return stage, pos, clock


def check_hazards(prog: Program) -> int:
    """Raise HazardError for the first unordered cross-module conflict; return the number of
    cross-module conflicts found ordered."""
    cfg = prog.config
    insns = prog.insns
    alu_stage = bool(getattr(cfg, "alu_stage", False))
    stages = (1, 2, 3, 4) if alu_stage else (1, 2, 3)
    stage, pos, clock = _happens_before(insns, alu_stage)
    layout = layout_for(cfg)
    uop_d, uop_s, uop_w = decode_uops(prog.uops, layout)
    uop_sram = np.zeros((3, cfg.uop_depth), dtype=np.int64)
    uop_base = prog.uop_base // 4
    depth = {"inp": cfg.inp_depth, "wgt": cfg.wgt_depth, "acc": cfg.acc_depth}
    if alu_stage:
        depth["uop"] = cfg.uop_depth
    # per buffer entry: last writer (stage, pos) and, per stage, the latest reader since then
    lw_stage = {b: np.zeros(n, np.int64) for b, n in depth.items()}
    lw_pos = {b: np.full(n, -1, np.int64) for b, n in depth.items()}
    rd = {b: np.full((5, n), -1, np.int64) for b, n in depth.items()}
    ordered = 0

    def access(i, buf, idx, write):
        nonlocal ordered
        idx = np.unique(np.asarray(idx, dtype=np.int64))
        if idx.size == 0:
            return
        if idx[0] < 0 or idx[-1] >= depth[buf]:
            raise HazardError(f"instruction {i} ({format_insn(insns[i])}): {buf} index out of "
                              f"range 0..{depth[buf] - 1}")
        s, vc = stage[i], clock[i]
        ws, wp = lw_stage[buf][idx], lw_pos[buf][idx]
        for other in stages:
            if other == s:
                continue
            bad = (ws == other) & (wp > vc[other - 1])
            kind = "writes"
            if write:
                r = rd[buf][other][idx]
                bad_r = r > vc[other - 1]
                if bad_r.any() and not bad.any():
                    bad, kind = bad_r, "reads"
            if bad.any():
                e = int(idx[np.flatnonzero(bad)[0]])
                j_pos = int(wp[np.flatnonzero(bad)[0]]) if kind == "writes" else \
                    int(rd[buf][other][e])
                j = [k for k in range(len(insns)) if stage[k] == other and pos[k] == j_pos][0]
                raise HazardError(
                    f"instruction {i} ({format_insn(insns[i])}) {'writes' if write else 'reads'} "
                    f"{buf}[{e}], which instruction {j} ({format_insn(insns[j])}) on another "
                    f"module {kind}, with no token path between them")
            ordered += int(((ws == other) & (wp >= 0)).sum())
        if write:
            lw_stage[buf][idx], lw_pos[buf][idx] = s, pos[i]
            rd[buf][:, idx] = -1
        else:
            rd[buf][s][idx] = np.maximum(rd[buf][s][idx], pos[i])

    for i, insn in enumerate(insns):
        if isinstance(insn, FinishInsn):
            break
        if isinstance(insn, MemInsn):
            n = (insn.y_pad_0 + insn.y_size + insn.y_pad_1) * \
                (insn.x_pad_0 + insn.x_size + insn.x_pad_1) if insn.x_size else 0
            rng = np.arange(insn.sram_base, insn.sram_base + n)
            if insn.opcode is Opcode.STORE:
                access(i, "acc", np.arange(insn.sram_base,
                                           insn.sram_base + insn.x_size * insn.y_size), False)
            elif insn.memory_type is MemType.UOP and insn.x_size:
                src = insn.dram_base - uop_base + np.arange(insn.x_size)
                uop_sram[:, rng] = np.stack([uop_d[src], uop_s[src], uop_w[src]])
                if alu_stage:
                    access(i, "uop", rng, True)
            elif insn.memory_type in (MemType.INP, MemType.WGT):
                access(i, insn.memory_type.name.lower(), rng, True)
            elif insn.memory_type in (MemType.ACC, MemType.ACC_8BIT):
                access(i, "acc", rng, True)
            continue
        u = np.arange(insn.uop_bgn, insn.uop_end)
        if alu_stage:
            access(i, "uop", u, False)
        y = np.arange(insn.iter_out)[:, None, None]
        x = np.arange(insn.iter_in)[None, :, None]
        dst = uop_sram[0, u] + y * insn.dst_factor_out + x * insn.dst_factor_in
        src = uop_sram[1, u] + y * insn.src_factor_out + x * insn.src_factor_in
        if isinstance(insn, GemmInsn):
            if not insn.reset:
                wgt = uop_sram[2, u] + y * insn.wgt_factor_out + x * insn.wgt_factor_in
                access(i, "inp", src.ravel(), False)
                access(i, "wgt", wgt.ravel(), False)
            access(i, "acc", dst.ravel(), True)
        elif isinstance(insn, AluInsn):
            if not insn.use_imm:
                access(i, "acc", src.ravel(), False)
            access(i, "acc", dst.ravel(), True)
    return ordered

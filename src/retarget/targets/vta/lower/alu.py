"""Tensor-ALU building blocks: micro-op kernels over accumulator regions, and requantisation
(Requantize's exact semantics, ops/quantized.py) as a short sequence of ALU instructions.

Requantize computes clip((x + 2**(s-1)) >> s, lo, hi) for s > 0 and clip(x << -s, lo, hi) for
s <= 0, in exact integers. On the ALU (int32, 16-bit signed immediates, shift amount's low
5 bits):
- s > 0: the rounding constant is folded into the bias vector when there is one (one ADD
  covers bias and rounding); otherwise ADD imm 2**(s-1) when it fits 16 bits, else the exact
  identity (x + 2**(s-1)) >> s == ((x >> (s-1)) + 1) >> 1 (no immediate beyond 1).
- s < 0 (left shift by k): an int32 left shift wraps where the definition saturates, so x is
  first clamped to [ceil(lo / 2**k) - 1, floor(hi / 2**k) + 1]: every clamped value still lands
  beyond the clip bound on the same side, and nothing can overflow (k <= 30, |bounds| <= 128).
- then MIN hi, MAX lo; the STORE keeps the low 8 bits, exact after the clip.
Per-channel shifts use vector operands (one ACC entry per output block holding each lane's
shift / clamp bound) instead of immediates.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....errors import TargetError
from ..builder import UopKernel
from ..isa import ITER_BITS, AluOp
from .context import LoweringContext
from .layers import Requant

MAX_EXTENT = (1 << ITER_BITS) - 1
IMM_MAX = (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class Region:
    """An accumulator tile laid out [n][c][pos] from `base`, and its per-channel-block
    constant vectors laid out [c][nconst] from `const_base`."""
    base: int
    tn: int
    tc: int
    npos: int
    const_base: int = 0
    nconst: int = 0

    @property
    def size(self) -> int:
        return self.tn * self.tc * self.npos


def range_kernels(ctx: LoweringContext, base: int, count: int) -> list[UopKernel]:
    """The kernels covering ACC entries [base, base + count) (one per loop-extent chunk)."""
    out = []
    for lo in range(base, base + count, MAX_EXTENT):
        n = min(MAX_EXTENT, base + count - lo)
        out.append(ctx.kernel(("range", lo, n), lambda: ([(lo, lo)], [(n, 1, 1)])))
    return out


def range_op(ctx: LoweringContext, base: int, count: int, op: AluOp, imm: int) -> None:
    """`op` with an immediate over ACC entries [base, base + count)."""
    for k in range_kernels(ctx, base, count):
        ctx.b.alu(k, op, imm)


def vector_kernel(ctx: LoweringContext, r: Region, j: int) -> UopKernel:
    """The kernel of acc[n][c][p] = op(acc[n][c][p], const[c][j]) over the whole region."""
    if r.npos > MAX_EXTENT or r.tn > MAX_EXTENT:
        raise TargetError(f"internal: ALU region {r} exceeds the loop extents")
    return ctx.kernel(("vec", r.base, r.tn, r.tc, r.npos, r.const_base, r.nconst, j), lambda: (
        [(r.base + c * r.npos, r.const_base + c * r.nconst + j) for c in range(r.tc)],
        [(r.tn, r.tc * r.npos, 0), (r.npos, 1, 0)]))


def vector_op(ctx: LoweringContext, r: Region, op: AluOp, j: int) -> None:
    """acc[n][c][p] = op(acc[n][c][p], const[c][j]) over the whole region."""
    ctx.b.alu(vector_kernel(ctx, r, j), op)


def _left_clamp(k: int, lo: int, hi: int) -> tuple[int, int]:
    """Clamp bounds before a left shift by k (see the module docstring)."""
    return -((-lo) >> k) - 1, (hi >> k) + 1


def requant_vectors(r: Requant, channels: int, cob: int, cfg, bias: np.ndarray | None,
                    with_half: bool) -> np.ndarray:
    """The constant vectors one Requant needs, packed (cob, nconst, BATCH, BLOCK_OUT) int32:
    [0] bias (+ 2**(s-1) when with_half), then for per-channel shifts [1] the shifts and,
    when some shift is a left shift, [2] upper and [3] lower clamp bounds."""
    shifts = np.array(r.shifts(channels), dtype=np.int64)
    add = np.zeros(channels, dtype=np.int64) if bias is None else bias.astype(np.int64)
    if with_half:
        add = add + np.where(shifts > 0, np.left_shift(1, np.maximum(shifts - 1, 0)), 0)
    if add.size and (add.min() < INT32_MIN or add.max() > INT32_MAX):
        raise TargetError(f"bias + rounding constant [{add.min()}, {add.max()}] does not fit int32")
    vecs = [add]
    if r.per_channel:
        vecs.append(shifts)
        if shifts.min() < 0:
            k = np.maximum(-shifts, 0)
            lo_b, hi_b = zip(*(_left_clamp(int(s), r.lo, r.hi) for s in k))
            vecs.append(np.where(shifts < 0, np.array(hi_b), INT32_MAX))
            vecs.append(np.where(shifts < 0, np.array(lo_b), INT32_MIN))
    bo, b = cfg.block_out, cfg.batch
    v = np.zeros((len(vecs), cob * bo), dtype=np.int64)
    v[:, :channels] = np.stack(vecs)
    # lanes: (cob, nconst, BATCH, BLOCK_OUT), the same vector for every batch row
    v = v.reshape(len(vecs), cob, bo).transpose(1, 0, 2)[:, :, None, :]
    return np.ascontiguousarray(np.broadcast_to(v, (cob, len(vecs), b, bo))).astype(np.int32)


AluStep = tuple[UopKernel, AluOp, "int | None"]


def requant_steps(ctx: LoweringContext, r: Region, req: Requant, *, vectors: bool,
                  half_folded: bool) -> list[AluStep]:
    """The ALU instructions (kernel, op, immediate or None for the vector operand) that
    requantise region `r` in place (see the module docstring), without emitting them: a
    caller can load their kernels ahead of time. `vectors`: r's constant vectors (from
    requant_vectors) are loaded; vector 0 is then added first."""
    steps: list[AluStep] = []

    def rng(op, imm):
        steps.extend((k, op, imm) for k in range_kernels(ctx, r.base, r.size))

    def vec(op, j):
        steps.append((vector_kernel(ctx, r, j), op, None))
    if vectors:
        vec(AluOp.ADD, 0)
    if req.per_channel:
        if not vectors:
            raise TargetError("internal: per-channel requantisation needs its vectors")
        if min(req.shift) < 0:
            vec(AluOp.MIN, 2)
            vec(AluOp.MAX, 3)
        vec(AluOp.SHR, 1)
    else:
        s = req.shift
        if s > 0 and half_folded:
            rng(AluOp.SHR, s)
        elif s > 0 and (1 << (s - 1)) <= IMM_MAX:
            rng(AluOp.ADD, 1 << (s - 1))
            rng(AluOp.SHR, s)
        elif s > 0:
            rng(AluOp.SHR, s - 1)
            rng(AluOp.ADD, 1)
            rng(AluOp.SHR, 1)
        elif s < 0:
            lo_b, hi_b = _left_clamp(-s, req.lo, req.hi)
            rng(AluOp.MIN, hi_b)
            rng(AluOp.MAX, lo_b)
            rng(AluOp.SHR, s)
    rng(AluOp.MIN, req.hi)
    rng(AluOp.MAX, req.lo)
    return steps


def emit_steps(ctx: LoweringContext, steps: list[AluStep]) -> None:
    for k, op, imm in steps:
        ctx.b.alu(k, op, imm)


def emit_requant(ctx: LoweringContext, r: Region, req: Requant, *, vectors: bool,
                 half_folded: bool) -> None:
    """Requantise region `r` in place (requant_steps, emitted)."""
    emit_steps(ctx, requant_steps(ctx, r, req, vectors=vectors, half_folded=half_folded))

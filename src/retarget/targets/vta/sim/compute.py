"""GEMM and ALU instructions, vectorised over their whole loop nest.

An instruction's semantics are the spec's triple loop

    for y < iter_out, x < iter_in, u in [uop_bgn, uop_end):
        dst = uop[u].dst + y*dst_factor_out + x*dst_factor_in   (likewise src, wgt)

Here all (y, x, u) index triples are generated at once with broadcasting, bounds-checked in one
go, and turned into a *plan*: index arrays that let the instruction run as a few array operations.
Plans depend only on the instruction's fields and the micro-ops it reads, so they are cached
(keyed by both), and a stream that re-issues the same kernel pays for planning once.

GEMM plan (integer addition commutes, so order within one instruction is free): the triples are
grouped by destination; every destination receives R contributions (padded with a zero input row
when counts differ); destinations whose sequence of weight indices is identical form a *class*.
One class is then a single dense product, exactly im2col:

    acc[dsts] += X[dsts, R*BLOCK_IN] @ W[R*BLOCK_IN, BLOCK_OUT]

and all classes (padded to a common size) run as one stacked np.matmul in float32, exact (see
EXACT_TERMS). When padding would waste too much, a chunked per-micro-op einsum is used instead.

ALU plan: elementwise ops do depend on order when a destination is written twice or read after
being written within one instruction. The plan splits the triple sequence into the fewest
consecutive segments that are free of such hazards (usually one) and runs each vectorised.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..isa import AluInsn, AluOp, GemmInsn
from .errors import SimFault
from .memory import SimMemory

# Largest number of (y, x, u) triples planned at once; bigger instructions are split over y so
# index arrays stay a few tens of MB. Splitting is exact: the loop order is y-major.
MAX_TRIPLES_PER_CHUNK = 1 << 21
# A GEMM plan pads destinations and classes; above this ratio of padded to real work it falls
# back to the per-micro-op path.
MAX_PADDING_WASTE = 3.0
DENSE_CHUNK = 8192
PLAN_CACHE_SIZE = 512
# Why float32 products are exact. An int8 x int8 product lies in [-2^14, 2^14] (-128 * -128 =
# 2^14 is the extreme) and is exact in float32 (24-bit significand). A sum of K such products,
# added in any order or blocking (BLAS reorders freely, with or without FMA), only ever holds
# partial sums of some subset of the terms, each at most K * 2^14 in magnitude; every one is an
# integer exactly representable in float32 while K * 2^14 <= 2^24, i.e. K <= 1024, and then each
# addition is exact. So a GEMM sums at most EXACT_TERMS products per float32 matmul; longer
# reductions are split into chunks whose exact results are added in int32, wrapping modulo 2^32
# like the hardware's accumulator.
EXACT_TERMS = (1 << 24) >> 14


@dataclass(slots=True)
class GemmPlan:
    """Index arrays for one (chunk of a) non-reset GEMM. Either `x_idx` is set (class mode) or
    `src`/`wgt`/`order`/`starts` are (dense mode)."""
    dst: np.ndarray | slice         # acc entries written, unique (a slice when consecutive);
                                    # order matches the result rows
    x_idx: np.ndarray | None = None  # [C, M, R] entries of inp_f (pad = the zero entry)
    w_idx: np.ndarray | None = None  # [C, R] entries of wgt_t
    valid: np.ndarray | None = None  # flat rows of the [C*M] result that are real destinations
    src: np.ndarray | None = None    # dense mode: per-triple inp / wgt entries, triple order
    wgt: np.ndarray | None = None
    order: np.ndarray | None = None  # dense mode: triples sorted by destination
    starts: np.ndarray | None = None  # dense mode: first sorted triple of each destination


@dataclass(slots=True)
class AluPlan:
    dst: np.ndarray | slice          # per triple, in loop order (a slice when consecutive and
    src: np.ndarray | slice | None   # hazard-free); src None when the operand is the immediate
    segments: tuple[int, ...]        # boundaries of hazard-free runs: (0, ..., N)


class PlanCache:
    """LRU cache of plans keyed by instruction fields, chunk and the micro-ops read."""

    def __init__(self, size: int = PLAN_CACHE_SIZE):
        self.size = size
        self._plans: OrderedDict = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key):
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            self.hits += 1
        return plan

    def put(self, key, plan) -> None:
        self.misses += 1
        self._plans[key] = plan
        if len(self._plans) > self.size:
            self._plans.popitem(last=False)


# ---- index triples ------------------------------------------------------------------------------

def _y_chunks(insn) -> list[tuple[int, int]]:
    per_y = insn.iter_in * (insn.uop_end - insn.uop_bgn)
    if per_y == 0 or insn.iter_out == 0:
        return []
    step = max(1, MAX_TRIPLES_PER_CHUNK // per_y)
    return [(y, min(y + step, insn.iter_out)) for y in range(0, insn.iter_out, step)]


def _check_uop_range(insn, mem: SimMemory) -> None:
    depth = mem.uop.shape[0]
    if insn.uop_bgn > insn.uop_end:
        raise SimFault(f"uop_bgn {insn.uop_bgn} > uop_end {insn.uop_end}")
    if insn.uop_end > depth:
        raise SimFault(f"uop SRAM index out of range: micro-ops [{insn.uop_bgn}, {insn.uop_end}) "
                       f"but the uop buffer has depth {depth}")


def _triples(insn, uops: np.ndarray, y_lo: int, y_hi: int, columns) -> list[np.ndarray]:
    """Flattened index arrays, in loop order (y, x, u), for the requested uop columns:
    (column number, factor_out, factor_in)."""
    y = np.arange(y_lo, y_hi, dtype=np.int64)[:, None, None]
    x = np.arange(insn.iter_in, dtype=np.int64)[None, :, None]
    out = []
    for col, f_out, f_in in columns:
        idx = uops[None, None, :, col] + y * f_out + x * f_in
        out.append(idx.reshape(-1))
    return out


def _check_index(name: str, idx: np.ndarray, depth: int, insn, uops, y_lo: int,
                 uop_field: str) -> None:
    """Raise SimFault naming the first out-of-range triple (its y, x, micro-op and value)."""
    bad = (idx < 0) | (idx >= depth)
    if not bad.any():
        return
    n = int(np.argmax(bad))
    nu = insn.uop_end - insn.uop_bgn
    y, rest = divmod(n, insn.iter_in * nu)
    x, u = divmod(rest, nu)
    col = {"dst": 0, "src": 1, "wgt": 2}[uop_field]
    raise SimFault(f"{name} SRAM index out of range: index {int(idx[n])} >= depth {depth} "
                   f"(or negative) at y={y + y_lo}, x={x}, uop {insn.uop_bgn + u} "
                   f"({uop_field}_idx={int(uops[u, col])}); {int(bad.sum())} of {idx.size} "
                   f"iterations are out of range")


# ---- GEMM ---------------------------------------------------------------------------------------

def run_gemm(insn: GemmInsn, mem: SimMemory, cache: PlanCache) -> None:
    """Execute one GEMM instruction (reset or multiply-accumulate) on `mem`."""
    execute_gemm(insn, gemm_plans(insn, mem, cache)[1], mem)


def gemm_plans(insn: GemmInsn, mem: SimMemory, cache: PlanCache) -> tuple[bytes, list]:
    """(the micro-ops the instruction reads, as bytes; its plans, one per chunk of y)."""
    return _cached_plans(insn, mem, cache, _plan_gemm, (
        "gemm", insn.reset, insn.wgt_factor_out, insn.wgt_factor_in))


def _cached_plans(insn, mem: SimMemory, cache: PlanCache, planner, kind: tuple
                  ) -> tuple[bytes, list]:
    """Plans of `insn` per chunk of y from `cache`, made by `planner` on a miss. A plan depends
    on the loop fields, the chunk and the micro-ops read (and `kind`: opcode-specific fields)."""
    _check_uop_range(insn, mem)
    uops = mem.uop[insn.uop_bgn:insn.uop_end]
    uop_key = uops.tobytes()
    plans = []
    for y_lo, y_hi in _y_chunks(insn):
        key = kind + (insn.uop_bgn, insn.uop_end, insn.iter_in, insn.dst_factor_out,
                      insn.dst_factor_in, insn.src_factor_out, insn.src_factor_in, y_lo, y_hi,
                      uop_key)
        plan = cache.get(key)
        if plan is None:
            plan = planner(insn, mem, uops, y_lo, y_hi)
            cache.put(key, plan)
        plans.append(plan)
    return uop_key, plans


def execute_gemm(insn: GemmInsn, plans: list, mem: SimMemory) -> None:
    for plan in plans:
        if insn.reset:
            mem.acc[plan] = 0
        else:
            _execute_gemm(plan, mem)


def _plan_gemm(insn: GemmInsn, mem: SimMemory, uops, y_lo, y_hi):
    c = mem.cfg
    if insn.reset:
        # A reset touches only the accumulator: src/wgt of its micro-ops are not read.
        (dst,) = _triples(insn, uops, y_lo, y_hi, [(0, insn.dst_factor_out, insn.dst_factor_in)])
        _check_index("acc", dst, c.acc_depth, insn, uops, y_lo, "dst")
        return _as_slice(np.unique(dst))
    dst, src, wgt = _triples(insn, uops, y_lo, y_hi, [
        (0, insn.dst_factor_out, insn.dst_factor_in),
        (1, insn.src_factor_out, insn.src_factor_in),
        (2, insn.wgt_factor_out, insn.wgt_factor_in)])
    _check_index("acc", dst, c.acc_depth, insn, uops, y_lo, "dst")
    _check_index("inp", src, c.inp_depth, insn, uops, y_lo, "src")
    _check_index("wgt", wgt, c.wgt_depth, insn, uops, y_lo, "wgt")
    return _plan_classes(dst, src, wgt, mem.inp_pad_index) or _plan_dense(dst, src, wgt)


def _plan_classes(dst, src, wgt, pad_src: int) -> GemmPlan | None:
    """Group by destination, then by identical weight sequence (see module docstring)."""
    n = dst.size
    # One int64 key sorts by destination, then weight (order among equal keys is irrelevant:
    # it only permutes terms of an integer sum).
    order = np.argsort(dst * (int(wgt.max()) + 1) + wgt)
    d, s, w = dst[order], src[order], wgt[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(d[1:], d[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    n_dst = starts.size
    counts = np.diff(np.append(starts, n))
    r = int(counts.max())
    if n_dst * r > MAX_PADDING_WASTE * n:
        return None
    if n_dst * r == n:
        S, W = s.reshape(n_dst, r), w.reshape(n_dst, r)
    else:
        # Pad short destinations with the zero input row: it adds nothing whatever the weight.
        pos = np.arange(n) - np.repeat(starts, counts)
        group = np.repeat(np.arange(n_dst), counts)
        S = np.full((n_dst, r), pad_src, dtype=np.int64)
        W = np.zeros((n_dst, r), dtype=np.int64)
        S[group, pos], W[group, pos] = s, w
    uniq_dst = d[starts]
    w_seqs, cls = _unique_rows(W)
    n_cls = w_seqs.shape[0]
    # Number the classes in order of their first destination: a conv tile's classes (one per
    # output channel block) then write consecutive runs, and the result rows, in class order,
    # land on one slice of the accumulator instead of a scatter.
    first = np.full(n_cls, n_dst, dtype=np.int64)
    np.minimum.at(first, cls, np.arange(n_dst))
    renumber = np.empty(n_cls, dtype=np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(n_cls)
    w_seqs[renumber] = w_seqs.copy()
    cls = renumber[cls]
    sizes = np.bincount(cls, minlength=n_cls)
    m = int(sizes.max())
    if n_cls * m * r > MAX_PADDING_WASTE * n:
        return None
    by_cls = np.argsort(cls, kind="stable")
    slot = np.arange(n_dst) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    x_idx = np.full((n_cls, m, r), pad_src, dtype=np.int64)
    x_idx[cls[by_cls], slot] = S[by_cls]
    flat = cls[by_cls] * m + slot
    valid = None if n_cls * m == n_dst else flat
    return GemmPlan(dst=_as_slice(uniq_dst[by_cls]), x_idx=x_idx, w_idx=w_seqs, valid=valid)


def _as_slice(idx: np.ndarray) -> np.ndarray | slice:
    """`idx` as a slice when it is a run of consecutive entries (indexing by a slice is a view,
    much cheaper than a gather and scatter), else unchanged."""
    if idx.size and idx[-1] - idx[0] == idx.size - 1 and np.all(np.diff(idx) == 1):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


_ROW_HASH = np.random.default_rng(0x5eed).integers(1, 1 << 62, size=1 << 14, dtype=np.int64) | 1


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, class of each row). Hashes rows to one int64 each (much faster than
    np.unique(axis=0)), then verifies the grouping exactly and falls back if a hash collided."""
    if rows.shape[1] <= _ROW_HASH.size:
        keys = rows @ _ROW_HASH[:rows.shape[1]]          # wraps modulo 2^64: fine for a hash
        _, first, cls = np.unique(keys, return_index=True, return_inverse=True)
        cls = cls.reshape(-1)
        uniq = rows[first]
        if np.array_equal(uniq[cls], rows):
            return uniq, cls
    uniq, cls = np.unique(rows, axis=0, return_inverse=True)
    return uniq, cls.reshape(-1)


def _plan_dense(dst, src, wgt) -> GemmPlan:
    order = np.argsort(dst, kind="stable")
    d = dst[order]
    new = np.empty(d.size, dtype=bool)
    new[0] = True
    np.not_equal(d[1:], d[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    return GemmPlan(dst=d[starts], src=src, wgt=wgt, order=order, starts=starts)


def _execute_gemm(plan: GemmPlan, mem: SimMemory) -> None:
    b, k_in, k_out = mem.cfg.batch, mem.cfg.block_in, mem.cfg.block_out
    if plan.x_idx is not None:
        n_cls, m, r = plan.x_idx.shape
        step = max(1, EXACT_TERMS // k_in)     # micro-ops per exact float32 product
        y = None
        for lo in range(0, r, step):
            x_idx = plan.x_idx if step >= r else plan.x_idx[:, :, lo:lo + step]
            w_idx = plan.w_idx if step >= r else plan.w_idx[:, lo:lo + step]
            rc = x_idx.shape[2]
            # np.take: several times faster than fancy indexing for these gathers
            x = np.take(mem.inp_f, x_idx, axis=0)     # [C, M, rc, B, K_in]
            if b == 1:
                x = x.reshape(n_cls, m, rc * k_in)
            else:
                x = x.transpose(0, 1, 3, 2, 4).reshape(n_cls, m * b, rc * k_in)
            w = np.take(mem.wgt_t, w_idx, axis=0).reshape(n_cls, rc * k_in, k_out)
            part = np.matmul(x, w).astype(np.int32)   # exact integers below 2^24
            y = part if y is None else np.add(y, part, out=y)   # int32: wraps like hardware
        y = y.reshape(n_cls * m, b, k_out)
        if plan.valid is not None:
            y = y[plan.valid]
    else:
        rows = np.empty((plan.src.size, b, k_out), dtype=np.int64)
        for lo in range(0, plan.src.size, DENSE_CHUNK):
            hi = lo + DENSE_CHUNK
            rows[lo:hi] = np.einsum("nbk,nko->nbo", mem.inp_f[plan.src[lo:hi]],
                                    mem.wgt_t[plan.wgt[lo:hi]])   # one micro-op: exact
        y = np.add.reduceat(rows[plan.order], plan.starts, axis=0)
    # int32 addition wraps modulo 2^32, like the hardware's int32 accumulator.
    acc = mem.acc
    if isinstance(plan.dst, slice):
        np.add(acc[plan.dst], y, out=acc[plan.dst], casting="unsafe")
    else:
        acc[plan.dst] = np.add(acc[plan.dst], y, dtype=np.int32, casting="unsafe")


# ---- ALU ----------------------------------------------------------------------------------------

def run_alu(insn: AluInsn, mem: SimMemory, cache: PlanCache) -> None:
    """Execute one ALU instruction on the accumulator."""
    execute_alu(insn, alu_plans(insn, mem, cache)[1], mem)


def alu_plans(insn: AluInsn, mem: SimMemory, cache: PlanCache) -> tuple[bytes, list[AluPlan]]:
    """Check the instruction's fields; (the micro-ops it reads, as bytes; its plans)."""
    if insn.reset:
        raise SimFault("ALU with reset_reg=1 is not defined by the spec (only GEMM resets)")
    if not -(1 << 15) <= insn.imm < (1 << 15):
        raise SimFault(f"imm {insn.imm} does not fit the signed 16-bit immediate")
    try:
        AluOp(insn.alu_op)
    except ValueError:
        raise SimFault(f"unknown ALU opcode {insn.alu_op}; known: "
                       + ", ".join(f"{o.name}={o.value}" for o in AluOp)) from None
    return _cached_plans(insn, mem, cache, _plan_alu, ("alu", insn.use_imm))


def execute_alu(insn: AluInsn, plans: list[AluPlan], mem: SimMemory) -> None:
    op = AluOp(insn.alu_op)
    for plan in plans:
        _execute_alu(op, insn, plan, mem)


def _plan_alu(insn: AluInsn, mem: SimMemory, uops, y_lo, y_hi) -> AluPlan:
    depth = mem.cfg.acc_depth
    cols = [(0, insn.dst_factor_out, insn.dst_factor_in)]
    if not insn.use_imm:
        cols.append((1, insn.src_factor_out, insn.src_factor_in))
    idx = _triples(insn, uops, y_lo, y_hi, cols)
    dst, src = idx[0], (idx[1] if len(idx) > 1 else None)
    _check_index("acc", dst, depth, insn, uops, y_lo, "dst")
    if src is not None:
        _check_index("acc", src, depth, insn, uops, y_lo, "src")
    segments = _hazard_free_segments(dst, src, depth)
    if len(segments) == 2:    # one run: consecutive entries become slices (views, no gathers)
        return AluPlan(dst=_as_slice(dst), src=None if src is None else _as_slice(src),
                       segments=segments)
    return AluPlan(dst=dst, src=src, segments=segments)


def _hazard_free_segments(dst: np.ndarray, src: np.ndarray | None, depth: int) -> tuple[int, ...]:
    """Boundaries of runs in which reading everything first and writing everything after gives
    the sequential result: no destination written twice, no source read after a write to it."""
    n = dst.size
    first_write = np.full(depth, n, dtype=np.int64)
    np.minimum.at(first_write, dst, np.arange(n))
    unique_dst = np.unique(dst).size == n
    reads_late = src is None or bool(np.all(first_write[src] >= np.arange(n)))
    if unique_dst and reads_late:
        return (0, n)
    # Rare (reductions, overlapping windows): one sequential scan to cut at each hazard.
    bounds, written = [0], set()
    dl = dst.tolist()
    sl = src.tolist() if src is not None else None
    for i, d in enumerate(dl):
        if d in written or (sl is not None and sl[i] in written):
            bounds.append(i)
            written = set()
        written.add(d)
    bounds.append(n)
    return tuple(bounds)


def alu_apply(op: AluOp, a: np.ndarray, b) -> np.ndarray:
    """The tensor ALU on int32 lanes with int32 wrap-around; `b` is an int32 array or scalar."""
    if op is AluOp.MIN:
        return np.minimum(a, b)
    if op is AluOp.MAX:
        return np.maximum(a, b)
    if op is AluOp.ADD:
        return np.add(a, b, dtype=np.int32, casting="unsafe")
    if op is AluOp.MUL:
        return np.multiply(a, b, dtype=np.int32, casting="unsafe")
    if op is AluOp.SHR:
        # Amount y >= 0 shifts right (arithmetic), y < 0 shifts left by -y; the hardware
        # uses the low 5 bits of the amount. Left shifts run on uint32 so they wrap.
        y = np.asarray(b, dtype=np.int64)
        right = np.right_shift(a, (y & 31).astype(np.int32))
        left = np.left_shift(a.view(np.uint32), ((-y) & 31).astype(np.uint32)).view(np.int32)
        return np.where(y >= 0, right, left)
    raise SimFault(f"unknown ALU opcode {op}")


def _execute_alu(op: AluOp, insn: AluInsn, plan: AluPlan, mem: SimMemory) -> None:
    acc = mem.acc
    imm = np.int32(insn.imm)
    seg = plan.segments
    if len(seg) == 2:     # one hazard-free run (its indices may be slices)
        b = imm if plan.src is None else acc[plan.src]
        acc[plan.dst] = alu_apply(op, acc[plan.dst], b)
        return
    for lo, hi in zip(seg[:-1], seg[1:]):
        d = plan.dst[lo:hi]
        b = imm if plan.src is None else acc[plan.src[lo:hi]]
        acc[d] = alu_apply(op, acc[d], b)

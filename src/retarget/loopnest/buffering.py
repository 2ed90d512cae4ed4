"""swTVM's buffering algorithms (Sec. 5 of the swTVM paper), target-neutral: which box of
each tensor a nest keeps in local memory, in which order the remaining loops run, and where
the box copies go. On Sunway the local memory is a CPE's 64 KB LDM and a copy is a DMA; on a
host it is a cache-sized local array and a copy is a memcpy. Everything works on a perfect
loop band (`schedule.Band`); `buffer_kernel` is the entry point for a whole kernel.

- Algorithm 4, `correlation`: the loop variables of each dimension of each tensor's index.
- Algorithm 5, `classify`: sizevars / numvars / compvars. A tensor's curBufDim is the lowest
  dimension (the paper counts dimensions from the innermost, contiguous one) still indexed by
  a variable whose range is not wholly buffered. UPDATE(UP) / UPDATE(DOWN) in the paper keep
  exactly that invariant, so here UPDATE is adding or removing a variable from the unbuffered
  set and curBufDim is recomputed from it.
- Algorithm 1, `plan_buffers`: a buffer extent per loop variable under a capacity in bytes.
- Algorithm 2, `order_outer_loops`: the order of the loops outside the buffered band.
- Algorithm 3, `copy_depths` + `buffer_nest`: local buffers, get / put copies, accesses
  rewritten relative to the box start.

Buffer extents are always divisors of the loop's range (halving and doubling move to the
nearest divisor), so the splits are exact: no ragged tails. A nest whose loops may not be
reordered, or whose boxes a copy cannot express, gets `Unbufferable` naming the reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..errors import ResourceLimitError, UnsupportedOpError
from .ir import Access, Affine, Const, Copy, Kernel, Loop, Stmt, Store, Tensor, loads
from .schedule import (Axis, Band, ScheduleError, distribute, map_accesses, nest, perfect_band,
                       substitute)
from .verify import verify_kernel


class Unbufferable(UnsupportedOpError):
    """A nest outside what the buffering algorithms handle; the caller keeps the naive nest."""


class CapacityError(ResourceLimitError):
    """The local memory cannot hold even one element of every buffered tensor."""


def _itemsize(t: Tensor) -> int:
    return Tensor("_", (1,), t.dtype).nbytes


# ---- operands and correlation (Algorithm 4) -------------------------------------------------
@dataclass(frozen=True, slots=True)
class Operand:
    """A tensor as one nest uses it, one local buffer's worth: its distinct accesses (all with
    the same variable terms, differing in constants only, so one box holds them), whether the
    nest reads or writes it, and the reduce op of its writes (None: plain stores)."""
    key: str
    tensor: Tensor
    accesses: tuple[Access, ...]
    reads: bool
    writes: bool
    reduce: str | None = None

    @property
    def vars(self) -> frozenset[str]:
        return frozenset().union(*(a.vars for a in self.accesses))

    def levels(self) -> tuple[frozenset[str], ...]:
        """The variables of each dimension, innermost dimension first (the paper's order)."""
        rank = len(self.tensor.shape)
        return tuple(frozenset().union(*(a.index[d].vars for a in self.accesses))
                     for d in reversed(range(rank)))


def _pinned(acc: Access) -> set[str]:
    """Variables some dimension's index is a multiple of (plus a constant): the element
    determines their values."""
    return {v for i in acc.index if len(i.terms) == 1 for v in i.vars}


def operands(band: Band, check: bool = True) -> tuple[Operand, ...]:
    """The operands of `band`'s statements, checking (unless `check` is false: a nest this
    module split itself) that the algorithms may reorder its loops freely: a written tensor
    is accessed through one index only, and either that index determines every loop variable
    (each element is touched in one iteration) or every write is a reduction with one op and
    nothing else reads it (accumulation order is free)."""
    where = f"nest over {list(band.vars)}"
    groups: dict[tuple, list] = {}     # (tensor, index less constants) -> accs, r, w, ops
    loaded: set[str] = set()
    for s in band.body:
        if not isinstance(s, Store):
            raise Unbufferable(f"{where}: {s} is already a copy; it cannot be buffered again")
        for ld in loads(s.value):
            if ld.fill is not None:
                raise Unbufferable(f"{where}: {ld} reads out of bounds (padding); a box copy "
                                   "cannot, so pad the tensor in its own kernel first")
            loaded.add(ld.access.tensor.name)
        for acc, w in [(ld.access, False) for ld in loads(s.value)] + [(s.dst, True)]:
            if not acc.vars <= set(band.vars):
                raise Unbufferable(f"{where}: {acc} uses {sorted(acc.vars - set(band.vars))}, "
                                   "which the nest does not bind")
            g = groups.setdefault((acc.tensor, tuple(i - i.const for i in acc.index)),
                                  [[], False, False, set()])
            g[0] += [] if acc in g[0] else [acc]
            g[1] |= not w or s.reduce is not None          # a reduction reads its dst
            g[2] |= w
            g[3] |= {s.reduce} if w else set()
    out, count = [], {}
    for (t, _), (accs, r, w, ops) in groups.items():
        count[t.name] = count.get(t.name, 0) + 1
        key = t.name if count[t.name] == 1 else f"{t.name}.{count[t.name]}"
        out.append(Operand(key, t, tuple(accs), r, w, next(iter(ops)) if len(ops) == 1 else None))
    written = {op.tensor.name for op in out if op.writes}
    for op in out if check else ():
        if op.tensor.name not in written:
            continue
        if count[op.tensor.name] > 1 or len(op.accesses) > 1:
            raise Unbufferable(f"{where}: {op.tensor.name!r} is written and accessed through "
                               "more than one index; reordering its loops could break a "
                               "dependence")
        free = set(band.vars) - _pinned(op.accesses[0])
        if free and (op.reduce is None or op.tensor.name in loaded):
            raise Unbufferable(f"{where}: {op.accesses[0]} is updated across iterations of "
                               f"{sorted(free)} other than by one reduction; its result "
                               "depends on the loop order")
    return tuple(out)


def correlation(ops: Sequence[Operand]) -> dict[str, tuple[frozenset[str], ...]]:
    """Algorithm 4: for each operand (by key), the loop variables of each dimension's index,
    in the tensor's dimension order."""
    return {op.key: tuple(reversed(op.levels())) for op in ops}


# ---- variable classification (Algorithm 5) ------------------------------------------------
@dataclass(frozen=True, slots=True)
class VarClasses:
    sizevars: tuple[str, ...]    # index some tensor's curBufDim only: they grow buffers
    numvars: tuple[str, ...]     # index higher dimensions only: they count copies
    compvars: tuple[str, ...]    # both


def cur_buf_dim(levels: Sequence[frozenset[str]], unbuffered: frozenset[str]) -> int:
    """The lowest level indexed by a variable not yet wholly buffered; len(levels) if none."""
    return next((lv for lv, vs in enumerate(levels) if vs & unbuffered), len(levels))


def _vartype(v: str, op: Operand, unbuffered: frozenset[str]) -> tuple[bool, bool]:
    """Whether `v` indexes `op`'s curBufDim, and whether it indexes a higher dimension."""
    levels = op.levels()
    cur = cur_buf_dim(levels, unbuffered)
    return cur < len(levels) and v in levels[cur], any(v in vs for vs in levels[cur + 1:])


def classify(variables: Sequence[str], ops: Sequence[Operand],
             unbuffered: frozenset[str]) -> VarClasses:
    """VARTYPE / CLASSIFY over the unbuffered `variables`; one in no remaining index is none."""
    kinds = ((True, False), (False, True), (True, True))      # size, num, comp
    out: dict[tuple[bool, bool], list[str]] = {k: [] for k in kinds}
    for v in (v for v in variables if v in unbuffered):
        types = [_vartype(v, op, unbuffered) for op in ops]
        out.get((any(t[0] for t in types), any(t[1] for t in types)), []).append(v)
    return VarClasses(*(tuple(out[k]) for k in kinds))


# ---- LDM management (Algorithm 1) ---------------------------------------------------------
def box(op: Operand, extents: Mapping[str, int]) -> tuple[tuple[int, int], ...]:
    """Per dimension, (lowest offset, size) of the box `op`'s accesses cover while each
    variable v runs over [0, extents.get(v, 1)): the box a buffer of those extents holds."""
    out = []
    for d in range(len(op.tensor.shape)):
        spans = [a.index[d].bounds({v: extents.get(v, 1) for v in a.index[d].vars})
                 for a in op.accesses]
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        out.append((lo, hi - lo + 1))
    return tuple(out)


def operand_bytes(op: Operand, extents: Mapping[str, int]) -> int:
    return _itemsize(op.tensor) * math.prod(n for _, n in box(op, extents))


def buffer_bytes(ops: Sequence[Operand], extents: Mapping[str, int]) -> int:
    """Local memory the buffers of `ops` take with these buffer extents (missing: 1)."""
    return sum(operand_bytes(op, extents) for op in ops)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _at_most(n: int, cap: int) -> int:
    return max(d for d in _divisors(n) if d <= max(cap, 1))


def _grow(n: int, b: int) -> int:
    """Double `b`, moving to a divisor of `n`: the largest one up to 2b, else the next one."""
    d = _at_most(n, 2 * b)
    return d if d > b else min(x for x in _divisors(n) if x > b)


@dataclass(frozen=True, slots=True)
class PlanStep:
    phase: str      # "initial" or "expand"
    var: str
    extent: int     # the extent tried
    bytes: int      # the local memory it needs
    fits: bool


@dataclass(frozen=True, slots=True)
class BufferPlan:
    """Algorithm 1's result: each loop variable's buffer extent (1: the loop stays outside
    the buffers; its range: inside; between: split), the bytes each operand's buffer takes,
    and the steps taken (for tests and reports)."""
    extents: tuple[tuple[str, int], ...]
    ranges: tuple[tuple[str, int], ...]
    operand_bytes: tuple[tuple[str, int], ...]
    capacity_bytes: int
    trace: tuple[PlanStep, ...] = ()

    def extent(self, var: str) -> int:
        return dict(self.extents)[var]

    @property
    def total_bytes(self) -> int:
        return sum(b for _, b in self.operand_bytes)


def plan_buffers(axes: Sequence[Axis], ops: Sequence[Operand], capacity_bytes: int,
                 initial_extent: int = 64, limits: Mapping[str, int] | None = None
                 ) -> BufferPlan:
    """Algorithm 1. Initial part: sizevars (smallest buffers first), then compvars (fewest
    tensors first) each get min(range, initial_extent), halved while over capacity; a var
    whose range is wholly buffered leaves the unbuffered set (UPDATE UP) and the rest are
    re-classified, which may make numvars of a higher dimension sizevars for another round.
    Expanding part: repeatedly double the candidate with the smallest extent (our `select`,
    which the paper leaves open: it keeps boxes square-ish); a doubling that
    does not fit retires that var (the paper stops at the first; retiring lets the others
    still use the room); stop when none is left.

    Every extent is checked against the capacity, including ranges below initial_extent (the
    paper's listing takes those unchecked), so a var only ever grows from a state that fits,
    and the listing's step back to the previous var is never needed.

    `limits` caps some variables' buffer extents (e.g. to leave a loop outside the buffers
    with enough iterations to share among cores)."""
    ranges = {a.var: a.extent for a in axes}
    limits = dict(limits or {})
    buf = {v: 1 for v in ranges}
    need = buffer_bytes(ops, buf)
    if need > capacity_bytes:
        raise CapacityError(
            f"local memory of {capacity_bytes} bytes cannot hold even one element of each of "
            f"{[op.key for op in ops]} (that needs {need} bytes); raise the capacity")
    by_nesting = list(reversed(ranges))          # ties: innermost loop first
    unbuffered = frozenset(v for v, n in ranges.items() if n > 1)
    trace: list[PlanStep] = []

    def candidates() -> list[str]:
        cls = classify(by_nesting, ops, unbuffered)
        sizing = lambda v: sum(operand_bytes(op, buf) for op in ops      # buffers v sizes
                               if _vartype(v, op, unbuffered)[0])
        return (sorted(cls.sizevars, key=sizing)
                + sorted(cls.compvars, key=lambda v: sum(v in op.vars for op in ops)))

    def attempt(phase: str, v: str, b: int) -> bool:
        if b > limits.get(v, b):
            return False
        old, buf[v] = buf[v], b
        used = buffer_bytes(ops, buf)
        trace.append(PlanStep(phase, v, b, used, used <= capacity_bytes))
        if used > capacity_bytes:
            buf[v] = old
        return used <= capacity_bytes

    initialised: set[str] = set()
    while todo := [v for v in candidates() if v not in initialised]:
        for v in todo:
            initialised.add(v)
            b = _at_most(ranges[v], min(initial_extent, limits.get(v, initial_extent)))
            while not attempt("initial", v, b):
                b = _at_most(ranges[v], b // 2)      # b = 1 always fits: it did before
            if b == ranges[v]:
                unbuffered -= {v}                    # UPDATE(UP)
    retired: set[str] = set()
    while cands := [v for v in candidates() if v not in retired]:
        v = min(cands, key=lambda x: buf[x])
        if not attempt("expand", v, _grow(ranges[v], buf[v])):
            retired.add(v)
        elif buf[v] == ranges[v]:
            unbuffered -= {v}
    return BufferPlan(tuple(buf.items()), tuple(ranges.items()),
                      tuple((op.key, operand_bytes(op, buf)) for op in ops),
                      capacity_bytes, tuple(trace))


# ---- loop reordering (Algorithm 2) --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LoopOrder:
    order: tuple[str, ...]                             # outer loops, outermost first
    steps: tuple[tuple[tuple[str, int], ...], ...]     # per choice: each candidate's count


def order_outer_loops(outer: Sequence[tuple[str, int]], corr: Mapping[str, frozenset[str]],
                      innermost: frozenset[str] = frozenset()) -> LoopOrder:
    """Algorithm 2 for the loops outside the buffered band, chosen from the inside out. A
    candidate placed next (just outside the loops already chosen) costs, summed over the
    tensors whose copies are not yet placed and still depend on a remaining loop: all the
    remaining loops' iterations if the tensor depends on it (its copy must go inside it),
    else those of the other remaining loops (its copy hoists above it). The cheapest wins (the
    paper's text; its listing compares the other way); ties keep the original order. Vars in
    `innermost` are chosen before all others (a folded init needs this, see buffer_nest)."""
    remaining = list(outer)
    pending = set(corr)
    chosen, steps = [], []
    while remaining:
        rvars = {v for v, _ in remaining}
        pending = {t for t in pending if corr[t] & rvars}
        total = math.prod(n for _, n in remaining)
        counts = {v: sum(total if v in corr[t] else total // n for t in pending)
                  for v, n in remaining}
        allowed = [v for v, _ in remaining if v in innermost] or [v for v, _ in remaining]
        best = min(reversed(allowed), key=counts.__getitem__)
        steps.append(tuple(counts.items()))
        chosen.append(best)
        remaining = [(v, n) for v, n in remaining if v != best]
        pending = {t for t in pending if best not in corr[t]}
    return LoopOrder(tuple(reversed(chosen)), tuple(steps))


# ---- copy insertion (Algorithm 3) ---------------------------------------------------------
def copy_depths(order: Sequence[str], iters: Mapping[str, frozenset[str]],
                inner: frozenset[str]) -> dict[str, int]:
    """Algorithm 3's placement: walking the outer loops outside-in, a tensor's copy goes at
    the first depth where every variable it depends on is either an enclosing loop or inside
    its buffer. Depth d: inside the d outermost loops of `order`."""
    left = {t: set(vs) - inner for t, vs in iters.items()}
    depth: dict[str, int] = {}
    for d in range(len(order) + 1):
        for t in [t for t, vs in left.items() if not vs]:
            depth[t] = d
            del left[t]
        if d < len(order):
            if order[d] in inner:
                raise ScheduleError(f"copy insertion: loop {order[d]!r} is both outside and "
                                    "inside the buffers")
            for vs in left.values():
                vs.discard(order[d])
    if left:
        raise ScheduleError(f"copy insertion: {sorted(left)} depend on "
                            f"{sorted(set().union(*left.values()))}, which no loop binds")
    return depth


def copy_transfers(c: Copy) -> tuple[int, int]:
    """How many contiguous transfers (DMAs) the box copy `c` takes and the elements of each:
    the box's rows are adjacent transfers, merged wherever the rows are contiguous in both
    memories (the box spans whole dimensions on both sides)."""
    k, run = len(c.extents) - 1, c.extents[-1] if c.extents else 1
    while k > 0 and c.extents[k] == c.src.tensor.shape[k] == c.dst.tensor.shape[k]:
        k -= 1
        run *= c.extents[k]
    return math.prod(c.extents[:k]), run


def _merge(a: Copy, b: Copy) -> Copy | None:
    if (a.dst.tensor, a.src.tensor) != (b.dst.tensor, b.src.tensor) or a.dst.tensor == a.src.tensor:
        return None
    same = [a.dst.index[d] == b.dst.index[d] and a.src.index[d] == b.src.index[d]
            and a.extents[d] == b.extents[d] for d in range(len(a.extents))]
    if same.count(False) != 1:
        return None
    d = same.index(False)
    if (b.dst.index[d], b.src.index[d]) != (a.dst.index[d] + a.extents[d],
                                            a.src.index[d] + a.extents[d]):
        return None
    ext = list(a.extents)
    ext[d] += b.extents[d]
    return Copy(a.dst, a.src, tuple(ext))


def merge_adjacent_copies(stmts: Sequence[Stmt]) -> tuple[Stmt, ...]:
    """Merge consecutive copies between the same two tensors whose boxes continue each other
    along one dimension in both memories: one box copy, so fewer, longer transfers."""
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Loop):
            s = Loop(s.var, s.extent, merge_adjacent_copies(s.body), s.kind)
        merged = None
        if out and isinstance(s, Copy) and isinstance(out[-1], Copy):
            merged = _merge(out[-1], s)
        if merged is None:
            out.append(s)
        else:
            out[-1] = merged
    return tuple(out)


def fresh_name(base: str, taken: set[str]) -> str:
    name, n = base, 2
    while name in taken:
        name, n = f"{base}{n}", n + 1
    taken.add(name)
    return name


@dataclass(frozen=True, slots=True)
class NestReport:
    plan: BufferPlan
    order: LoopOrder                          # the loops outside the buffers
    inner: tuple[str, ...]                    # the loops inside them, outermost first
    depths: tuple[tuple[str, int], ...]       # operand key -> depth of its copies
    folded: tuple[str, ...] = ()              # tensors whose init became a buffer fill


def writes_whole_box(op: Operand, inner: frozenset[str]) -> bool:
    """Whether the band writes every element of the box (so no get is needed before a put):
    each dimension's inner part is one inner variable with coefficient +-1, or none."""
    seen: list[str] = []
    for i in op.accesses[0].index:
        terms = [(v, c) for v, c in i.terms if v in inner]
        if len(terms) > 1 or (terms and abs(terms[0][1]) != 1):
            return False
        seen += [v for v, _ in terms]
    return len(op.accesses) == 1 and len(seen) == len(set(seen))


def local_buffer(op: Operand, inner: Mapping[str, int], outer_vars: frozenset[str], name: str
                 ) -> tuple[Tensor, Access, dict[Access, Access]]:
    """The local buffer `name` holding the box of `op` that the loops `inner` (var -> extent)
    sweep for fixed values of the loops `outer_vars`: the buffer, the access where the box
    starts in the tensor (the copy's main-memory side), and each of `op`'s accesses rewritten
    into the buffer."""
    spans = box(op, inner)
    buf = Tensor(name, tuple(n for _, n in spans), op.tensor.dtype, "local")
    outer_part = [Affine(tuple((v, c) for v, c in i.terms if v in outer_vars))
                  for i in op.accesses[0].index]
    rewritten = {acc: buf[tuple(i - o - lo for i, o, (lo, _) in zip(acc.index, outer_part, spans))]
                 for acc in op.accesses}
    start = op.tensor[tuple(o + lo for o, (lo, _) in zip(outer_part, spans))]
    return buf, start, rewritten


def buffer_nest(band: Band, capacity_bytes: int, *, fill: Mapping[str, float] | None = None,
                tensor_names: set[str] | None = None, initial_extent: int = 64,
                limits: Mapping[str, int] | None = None
                ) -> tuple[tuple[Stmt, ...], tuple[Tensor, ...], NestReport]:
    """Algorithms 1, 2 and 3 on one perfect band: the new statements, their local buffers,
    and a report. `fill` maps a written tensor to the constant an init nest (dropped by the
    caller) stored everywhere in it: its buffer is filled with that constant instead of being
    read, which is right only when each box is visited once, so the loops its copies do not
    depend on are ordered innermost. `tensor_names`: names in use in the kernel (the new
    buffers' names are added). Loop variables need only be fresh within the nest.
    The new loops are all serial; parallelising one is the caller's choice (`parallel`)."""
    fill = dict(fill or {})
    tensor_names = tensor_names if tensor_names is not None else set()
    taken = set(band.vars) | tensor_names       # loop variables and tensors in this nest
    ops = operands(band)
    plan = plan_buffers(band.axes, ops, capacity_bytes, initial_extent, limits)
    outer, inner, at = [], [], {}
    for a in band.axes:
        b = plan.extent(a.var)
        if b == 1:
            outer.append((a.var, a.extent))
        elif b == a.extent:
            inner.append(Axis(a.var, a.extent))
        else:
            vo, vi = fresh_name(f"{a.var}_o", taken), fresh_name(f"{a.var}_i", taken)
            outer.append((vo, a.extent // b))
            inner.append(Axis(vi, b))
            at[a.var] = Affine.of(vo) * b + vi
    body = tuple(substitute(s, at) for s in band.body)
    inner_ext = {a.var: a.extent for a in inner}
    ops = operands(Band(tuple(Axis(v, n) for v, n in outer) + tuple(inner), body), check=False)
    outer_vars = frozenset(v for v, _ in outer)
    folded = [op for op in ops if op.tensor.name in fill]
    order = order_outer_loops(outer, {op.key: op.vars & outer_vars for op in ops},
                              frozenset(v for op in folded for v in outer_vars - op.vars))
    depths = copy_depths(order.order, {op.key: op.vars for op in ops}, frozenset(inner_ext))

    pre: dict[int, list[Stmt]] = {}
    post: dict[int, list[Stmt]] = {}
    locals_, local_of = [], {}
    for op in ops:
        name = fresh_name(f"{op.key.replace('.', '_')}_local", taken | tensor_names)
        tensor_names.add(name)
        taken.add(name)
        buf, start, rewritten = local_buffer(op, inner_ext, outer_vars, name)
        shape = buf.shape
        locals_.append(buf)
        local_of.update(rewritten)
        origin = buf[(0,) * len(shape)]
        d = depths[op.key]
        if op.tensor.name in fill:
            fv = [fresh_name(f"{buf.name}_f{k}", taken) for k in range(len(shape))]
            init = Store(buf[tuple(fv)], Const(fill[op.tensor.name]))
            pre.setdefault(d, []).extend(nest([Axis(v, n) for v, n in zip(fv, shape)], (init,)))
        elif op.reads or (op.writes and not writes_whole_box(op, frozenset(inner_ext))):
            pre.setdefault(d, []).append(Copy(origin, start, shape))
        if op.writes:
            post.setdefault(d, []).append(Copy(start, origin, shape))

    stmts = nest(inner, tuple(map_accesses(s, lambda a: local_of[a]) for s in body))
    for d in reversed(range(len(order.order) + 1)):
        stmts = tuple(pre.get(d, ())) + stmts + tuple(post.get(d, ()))
        if d:
            v = order.order[d - 1]
            stmts = (Loop(v, dict(outer)[v], stmts),)
    report = NestReport(plan, order, tuple(a.var for a in inner),
                        tuple((op.key, depths[op.key]) for op in ops),
                        tuple(op.tensor.name for op in folded))
    return merge_adjacent_copies(stmts), tuple(locals_), report


# ---- the whole kernel -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BufferReport:
    nests: tuple[NestReport, ...]
    capacity_bytes: int
    local_bytes: int


def _covering(band: Band, acc: Access) -> bool:
    """Whether the band stores to every element of the tensor: each dimension indexed by its
    own loop variable (coefficient 1, offset 0) whose range is the dimension's size."""
    ranges = {a.var: a.extent for a in band.axes}
    vs = [i.terms[0][0] if i.terms and len(i.terms) == 1 and i.terms[0][1] == 1 and not i.const
          else None for i in acc.index]
    return (None not in vs and len(set(vs)) == len(vs)
            and all(ranges[v] == n for v, n in zip(vs, acc.tensor.shape)))


def _init_fold(init: Band, main: Band) -> dict[str, float] | None:
    """The constants of `init` when it only stores constants over the whole of tensors that
    `main` then only accumulates into (one reduction, over the whole tensor, never loaded,
    all of them depending on the same loops): `main`'s buffers may then start from the
    constant instead of reading the tensor."""
    stores = [s for s in init.body if isinstance(s, Store) and s.reduce is None
              and isinstance(s.value, Const) and _covering(init, s.dst)]
    values = {s.dst.tensor.name: s.value.value for s in stores}
    if not stores or len(stores) != len(init.body) or len(values) != len(stores):
        return None
    try:
        ops = {op.tensor.name: op for op in operands(main)}
    except Unbufferable:
        return None
    targets = [ops.get(name) for name in values]
    if any(op is None or op.reduce is None or not _covering(main, op.accesses[0])
           for op in targets) or len({op.vars for op in targets}) != 1:
        return None
    if any(ld.access.tensor.name in values for s in main.body for ld in loads(s.value)):
        return None
    return values


def buffer_kernel(kernel: Kernel, capacity_bytes: int, *, initial_extent: int = 64,
                  limits: Mapping[str, int] | None = None) -> tuple[Kernel, BufferReport]:
    """Buffer every nest of `kernel` in local memory of `capacity_bytes`.

    The kernel is first distributed into perfect nests (`schedule.distribute`), so GEMM's
    `C = 0` becomes its own nest. An init nest that only stores a constant over whole tensors
    the next nest accumulates into is folded: the accumulator buffer is filled with the
    constant instead of read (swTVM's Fig. 2 "initialize buffer"), and the init nest goes. Any
    other nest is buffered on its own (an init nest that cannot fold becomes a put-only nest).
    All nests' buffers are live at once (locals have no lifetimes in the IR), so they share
    the capacity: each nest is guaranteed its one-element minimum, and the rest is shared out
    evenly, a nest that needs less passing its remainder on. Raises Unbufferable (keep the
    naive nest) or CapacityError."""
    if kernel.locals:
        raise Unbufferable(f"kernel {kernel.name!r} already has local buffers")
    bands = []
    for s in distribute(kernel).body:
        try:
            bands.append(perfect_band(s))
        except ScheduleError as e:
            raise Unbufferable(f"kernel {kernel.name!r}: {e}") from None
    work: list[tuple[Band, dict[str, float]]] = []
    i = 0
    while i < len(bands):
        fold = _init_fold(bands[i], bands[i + 1]) if i + 1 < len(bands) else None
        work.append((bands[i + 1], fold) if fold else (bands[i], {}))
        i += 2 if fold else 1
    try:
        minimum = [buffer_bytes(operands(b), {}) for b, _ in work]
    except Unbufferable as e:
        raise Unbufferable(f"kernel {kernel.name!r}: {e}") from None
    if sum(minimum) > capacity_bytes:
        raise CapacityError(f"kernel {kernel.name!r}: local memory of {capacity_bytes} bytes "
                            f"cannot hold one element of each buffered tensor ({sum(minimum)} "
                            "bytes); raise the capacity")
    names = {t.name for t in kernel.params}
    body: list[Stmt] = []
    locals_: list[Tensor] = []
    reports = []
    spare = capacity_bytes - sum(minimum)
    for n, ((band, fold), least) in enumerate(zip(work, minimum)):
        share = least + spare // (len(work) - n)
        stmts, locs, rep = buffer_nest(band, share, fill=fold, tensor_names=names,
                                       initial_extent=initial_extent, limits=limits)
        spare -= rep.plan.total_bytes - least
        body += stmts
        locals_ += locs
        reports.append(rep)
    out = Kernel(kernel.name, kernel.inputs, kernel.outputs, tuple(body), tuple(locals_))
    verify_kernel(out, capacity_bytes)
    return out, BufferReport(tuple(reports), capacity_bytes, out.local_bytes)

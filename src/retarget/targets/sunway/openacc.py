"""The faithful baseline: each layer as a careful programmer writes it with Sunway's OpenACC
(swACC), which is what swTVM measures itself against ("hand-optimised OpenACC", swTVM
Sec. 6.2: it "manipulates the DMA data transfer" for simple layers, and on VGG-19's conv1_1
its "convolution kernels are small enough to be fitted in LDM").

What the programmer writes, per nest of the lowered layer:

- `#pragma acc parallel loop` on the outer independent loop: the outermost loop the CPEs can
  share (`mark_cpe_loops` without a cost model), its iterations split over the 64 CPEs;
- `copyin` / `copyout` of each tensor's slice, at the outermost level of the nest where the
  slice fits in what is left of the 64 KB LDM: the tensor's box over every loop inside that
  level, copied by DMA before the level's body and (for outputs) back after it. A level
  outside the CPE loop (the CPE's whole share, e.g. a weight tensor that fits whole) may
  hold only tensors the layer reads; outputs are written inside the CPE loop, and only from
  a level that writes every element of its box (a strided write stays a global store: the
  put of a whole box would overwrite what other CPEs wrote in between);
- global loads / stores for whatever does not fit anywhere, and for a tensor whose copies
  at the level where it fits would cost more than the global accesses they replace (a box
  of short rows copied for a few reads: the programmer measures and keeps the faster; both
  sides priced with the cost model's machine numbers, `acc_copy_rule = "cheaper"`).

What it does not do (swTVM's contributions, which the comparison measures): no
multi-dimensional buffer sizing (Algorithm 1: a level's box is whatever the loops inside it
sweep, no loop is split to make a tile fit), no loop reordering (Algorithm 2: the loops run
in the lowering's order), no DMA hoisting or merging (Algorithm 3: a copy sits at a level of
the original nest, adjacent copies are not merged), no double buffering.

For the sensitivity table: `acc_copy_levels = "iteration"` restricts the copies to the CPE
loop's iteration and outside it (the literal reading "each iteration's slices");
`acc_copy_rule = "fits"` copies whatever fits, worthwhile or not.
"""
from __future__ import annotations

import math

from ...loopnest.buffering import (Operand, Unbufferable, copy_transfers, fresh_name,
                                   local_buffer, operand_bytes, operands, writes_whole_box)
from ...loopnest.ir import Copy, Kernel, Loop, Stmt, Store, Tensor
from ...loopnest.ir import loads as loads_of
from ...loopnest.schedule import Band, ScheduleError, map_accesses, nest, perfect_band
from ...loopnest.verify import verify_kernel
from .config import SunwayConfig
from .double_buffer import ldm_bytes
from .cost import Work, cpe_seconds
from .cpe_loops import mark_cpe_loops


def _aligned(n: int) -> int:
    return -(-n // 64) * 64         # RT_LDM buffers start at 64-byte boundaries (ldm_bytes)


def openacc_kernel(kernel: Kernel, config: SunwayConfig) -> Kernel:
    """`kernel` as the OpenACC programmer writes it: CPE loops marked, copies placed, the
    rest global loads / stores. The nests share the LDM (all buffers are declared at the top
    of the slave function); the biggest nest (most iterations) chooses first."""
    marked = mark_cpe_loops(kernel)
    body = list(marked.body)
    names = {t.name for t in kernel.params}
    order = sorted(range(len(body)), key=lambda i: -_iterations(body[i]))
    buffers: list[Tensor] = []           # in LDM layout order: the order they are chosen
    for i in order:
        body[i], new = _place_copies(body[i], ldm_bytes(tuple(buffers)), names, config)
        buffers += new
    out = Kernel(kernel.name, kernel.inputs, kernel.outputs, tuple(body), tuple(buffers))
    verify_kernel(out, config.ldm_bytes)
    return out


def _iterations(s: Stmt) -> int:
    if not isinstance(s, Loop):
        return 1
    return s.extent * max((_iterations(b) for b in s.body), default=1)


def _place_copies(stmt: Stmt, used: int, names: set[str], config: SunwayConfig
                  ) -> tuple[Stmt, tuple[Tensor, ...]]:
    """One nest with its copies, given the LDM bytes other nests' buffers already take:
    (statement, its LDM buffers). A nest that is not a perfect band, has padded reads, or has
    no CPE loop is left to global accesses."""
    try:
        band = perfect_band(stmt)
        ops = {op.key: op for op in operands(band, check=False)}
    except (ScheduleError, Unbufferable):
        return stmt, ()
    cpe = next((d for d, a in enumerate(band.axes) if a.kind == "parallel"), None)
    if cpe is None:
        return stmt, ()
    pre: dict[int, list[Stmt]] = {}
    post: dict[int, list[Stmt]] = {}
    local_of, buffers = {}, []
    for key, d in _choose_levels(band, tuple(ops.values()), cpe, used, config).items():
        op = ops[key]
        inner = {a.var: a.extent for a in band.axes[d:]}
        outer = frozenset(a.var for a in band.axes[:d])
        name = fresh_name(f"{op.key.replace('.', '_')}_acc", names)
        buf, start, rewritten = local_buffer(op, inner, outer, name)
        buffers.append(buf)
        local_of.update(rewritten)
        origin = buf[(0,) * len(buf.shape)]
        if op.reads or not writes_whole_box(op, frozenset(inner)):
            pre.setdefault(d, []).append(Copy(origin, start, buf.shape))
        if op.writes:
            post.setdefault(d, []).append(Copy(start, origin, buf.shape))
    stmts = tuple(map_accesses(s, lambda a: local_of.get(a, a)) for s in band.body)
    for d in reversed(range(len(band.axes) + 1)):
        stmts = tuple(pre.get(d, ())) + stmts + tuple(post.get(d, ()))
        if d:
            stmts = nest(band.axes[d - 1:d], stmts)
    (out,) = stmts
    return out, tuple(buffers)


def _choose_levels(band: Band, ops: tuple[Operand, ...], cpe: int, used: int,
                   config: SunwayConfig) -> dict[str, int]:
    """Each operand's copy level (d: inside the d outermost loops), outermost first and,
    within a level, smallest slice first, while the LDM (`used` bytes of it taken already)
    has room; in the order chosen. Outputs only inside the CPE loop and only where the level
    writes every element of the box; with the "cheaper" rule, only where the copies cost less
    than the global accesses they replace."""
    deepest = cpe + 1 if config.acc_copy_levels == "iteration" else len(band.axes)
    capacity = config.ldm_bytes
    level: dict[str, int] = {}
    for d in range(1, deepest + 1):
        inner = {a.var: a.extent for a in band.axes[d:]}
        for op in sorted(ops, key=lambda op: operand_bytes(op, inner)):
            if op.key in level or (op.writes and d <= cpe):
                continue
            if op.writes and not writes_whole_box(op, frozenset(inner)):
                continue        # a put of the whole box could overwrite other CPEs' results
            nbytes = operand_bytes(op, inner)
            if _aligned(used) + nbytes > capacity:
                continue
            if config.acc_copy_rule == "cheaper" and not _worth_copying(band, op, d, config):
                continue
            level[op.key] = d
            used = _aligned(used) + nbytes
    return level


def _worth_copying(band: Band, op: Operand, d: int, config: SunwayConfig) -> bool:
    """Whether copying `op`'s box at level d (in, and out for an output) takes a CPE less
    time than the global loads / stores of it that the loops inside the level make."""
    inner = {a.var: a.extent for a in band.axes[d:]}
    buf, start, _ = local_buffer(op, inner, frozenset(), "_probe")
    calls, _ = copy_transfers(Copy(buf[(0,) * len(buf.shape)], start, buf.shape))
    gets = op.reads or not writes_whole_box(op, frozenset(inner))
    ways = int(gets) + int(op.writes)
    dma = Work(get_bytes=ways * buf.nbytes, get_calls=ways * calls)
    loads = stores = 0
    for s in band.body:
        if not isinstance(s, Store):
            continue
        loads += sum(ld.access.tensor.name == op.tensor.name for ld in loads_of(s.value))
        if s.dst.tensor.name == op.tensor.name:
            stores += 1
            loads += s.reduce is not None
    times = math.prod(inner.values())
    direct = Work(gld=loads * times, gst=stores * times)
    return sum(cpe_seconds(dma, config)) < sum(cpe_seconds(direct, config))


__all__ = ["openacc_kernel"]

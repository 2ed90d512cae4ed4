"""Double buffering, beyond swTVM: while a CPE computes on one tile it already fetches the
next. swTVM's Sec. 4.2 says the LDM is "accessed through DMA instructions and overlapped with
the computation", but its algorithms (Sec. 5) insert blocking copies only and describe no
double buffering; our swTVM-mode code waits for every DMA, and this adds the overlap.

Which loops (`pipelines`): a loop whose body starts with copies into LDM that fetch, from a
tensor the layer only reads, a box that moves with the loop's variable. Its buffers get a
second half: iteration i computes on half i % 2 while the copies of iteration i + 1 fill the
other (the generated code issues them with rt_dma_iget before the body, waits for them with
rt_dma_wait_async at the top of the next iteration). Only read-only tensors: a prefetched box
can then never depend on a put of the current iteration. Loops are taken in program order
while the doubled buffers still fit the LDM; the schedule (schedule.py) re-sizes the buffers
with less capacity when doubling them would not fit, and keeps whichever the cost model
prefers.

The plan is a pure function of the kernel and the LDM size, so the printer, the LDM check
and the cost model all read the same one (and a loaded artifact prints the same code).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...loopnest.ir import Copy, Kernel, Loop, Tensor, walk


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Loop `loop` (its index in walk order among the kernel's loops, and its variable)
    prefetches `copies` (the leading copies of its body) into the doubled buffers `buffers`."""
    loop: int
    var: str
    copies: tuple[Copy, ...]
    buffers: tuple[str, ...]


def ldm_bytes(locals_: tuple[Tensor, ...], doubled: frozenset[str] = frozenset()) -> int:
    """The LDM the buffers take as RT_LDM lays them out: each at a 64-byte boundary, a
    doubled one twice its size."""
    used = 0
    for t in locals_:
        used = -(-used // 64) * 64 + t.nbytes * (2 if t.name in doubled else 1)
    return used


def _prefetchable(s, loop: Loop, read_only: set[str]) -> bool:
    return (isinstance(s, Copy) and s.src.tensor.name in read_only
            and s.dst.tensor.scope == "local" and loop.var in s.src.vars)


def pipelines(kernel: Kernel, ldm_capacity: int) -> tuple[Pipeline, ...]:
    """The loops of `kernel` that double-buffer, and what, within `ldm_capacity` bytes."""
    read_only = {t.name for t in kernel.inputs} - {t.name for t in kernel.outputs}
    doubled: set[str] = set()
    out = []
    loops = [s for s, _ in walk(kernel.body) if isinstance(s, Loop)]
    for index, loop in enumerate(loops):
        if loop.extent < 2:
            continue
        lead = []
        for s in loop.body:
            if not isinstance(s, Copy):
                break
            if _prefetchable(s, loop, read_only):
                lead.append(s)
        names = tuple(dict.fromkeys(c.dst.tensor.name for c in lead))
        if not names or doubled & set(names):
            continue
        if ldm_bytes(kernel.locals, frozenset(doubled | set(names))) > ldm_capacity:
            continue
        doubled |= set(names)
        out.append(Pipeline(index, loop.var, tuple(lead), names))
    return tuple(out)


def doubled_buffers(plan: tuple[Pipeline, ...]) -> frozenset[str]:
    return frozenset(n for p in plan for n in p.buffers)


__all__ = ["Pipeline", "doubled_buffers", "ldm_bytes", "pipelines"]

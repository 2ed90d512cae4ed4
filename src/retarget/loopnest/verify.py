"""Checks a Kernel is well formed before anything prints or runs it. Each problem is a
GraphError naming the kernel, the statement and the loop context:

- every variable an index uses is bound by an enclosing loop, and no loop rebinds one;
- every tensor is one of the kernel's parameters or locals, and inputs are never written;
- every index is in bounds over the whole loop ranges (Affine.bounds), except loads with a
  `fill` value, which read it out of bounds; copy boxes lie inside both tensors;
- a parallel loop's iterations write disjoint elements of global tensors: each store to a
  global tensor, and each copy into one, indexes it with the parallel variable (a sufficient
  condition; locals are per-thread by the C printer's contract);
- with `capacity_bytes`, the locals fit in it.
"""
from __future__ import annotations

from ..errors import GraphError
from .ir import Access, Copy, Kernel, Loop, Store, loads, walk


def _check_access(k: Kernel, s, acc: Access, extents: dict[str, int], known: dict,
                  may_overrun: bool) -> None:
    t = acc.tensor
    if known.get(t.name) != t:
        raise GraphError(f"kernel {k.name!r}: {s} uses tensor {t.name!r} {list(t.shape)}, "
                         "which is not one of its parameters or locals")
    unbound = acc.vars - set(extents)
    if unbound:
        raise GraphError(f"kernel {k.name!r}: {s} uses {sorted(unbound)} outside any loop "
                         "binding them")
    if may_overrun:
        return
    for d, (i, n) in enumerate(zip(acc.index, t.shape)):
        lo, hi = i.bounds(extents)
        if lo < 0 or hi >= n:
            raise GraphError(f"kernel {k.name!r}: {s}: index {i} of dimension {d} of "
                             f"{t.name!r} {list(t.shape)} ranges over {lo}..{hi} with loops "
                             f"{extents}")


def _check_box(k: Kernel, c: Copy, acc: Access, extents: dict[str, int]) -> None:
    for d, (i, e, n) in enumerate(zip(acc.index, c.extents, acc.tensor.shape)):
        lo, hi = i.bounds(extents)
        if lo < 0 or hi + e > n:
            raise GraphError(f"kernel {k.name!r}: {c}: dimension {d} of {acc.tensor.name!r} "
                             f"{list(acc.tensor.shape)} covers {lo}..{hi + e - 1}")


def verify_kernel(k: Kernel, capacity_bytes: int | None = None) -> None:
    known = {t.name: t for t in k.params + k.locals}
    if len(known) != len(k.params) + len(k.locals):
        raise GraphError(f"kernel {k.name!r}: two tensors share a name")
    inputs = {t.name for t in k.inputs}
    for s, loops in walk(k.body):
        extents: dict[str, int] = {}
        for lp in loops:
            if lp.var in extents:
                raise GraphError(f"kernel {k.name!r}: loop variable {lp.var!r} is bound twice")
            extents[lp.var] = lp.extent
        if isinstance(s, Loop):
            if s.var in extents:
                raise GraphError(f"kernel {k.name!r}: loop variable {s.var!r} is bound twice")
            continue
        dst = s.dst
        if dst.tensor.name in inputs:
            raise GraphError(f"kernel {k.name!r}: {s} writes its input {dst.tensor.name!r}")
        if isinstance(s, Store):
            _check_access(k, s, dst, extents, known, False)
            for ld in loads(s.value):
                _check_access(k, s, ld.access, extents, known, ld.fill is not None)
        elif isinstance(s, Copy):
            for acc in (s.dst, s.src):
                _check_access(k, s, acc, extents, known, True)
                _check_box(k, s, acc, extents)
        if dst.tensor.scope == "global":
            for lp in loops:
                if lp.kind == "parallel" and lp.var not in dst.vars:
                    raise GraphError(f"kernel {k.name!r}: {s} inside parallel loop {lp.var!r} "
                                     f"does not index {dst.tensor.name!r} with {lp.var!r}: "
                                     "its iterations would write the same elements")
    if capacity_bytes is not None and k.local_bytes > capacity_bytes:
        raise GraphError(f"kernel {k.name!r}: local buffers take {k.local_bytes} bytes, more "
                         f"than the {capacity_bytes} bytes of local memory")

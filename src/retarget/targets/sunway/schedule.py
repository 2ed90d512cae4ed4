"""How each layer's loop nest is scheduled for the CPEs, and where it runs.

- "swtvm": swTVM's algorithms (loopnest/buffering.py) size the LDM buffers for `ldm_bytes`
  (Algorithm 1), order the loops around them (Algorithm 2) and insert the DMA copies
  (Algorithm 3); then each nest's CPE loop is chosen (`mark_cpe_loops`). A nest the
  algorithms refuse (a read that can fall outside its tensor: Pad, a padded pooling window,
  LRN) cannot run on a CPE without touching main memory directly, so its layer runs on the
  MPE (`runs_on`).
- "baseline": the OpenACC-style code: the nest as lowered, its outer independent loop split
  over the CPEs, every main-memory element read and written by a global load / store.

The CPE loop of a nest is marked `parallel` in the IR: the CPE code runs its share of that
loop's iterations (RT_LO .. RT_HI) and every loop outside it in full. It is the outermost loop
whose iterations write disjoint main-memory elements (the verifier's rule for parallel loops)
with no main-memory write outside it; a nest without one runs on CPE 0 alone.
"""
from __future__ import annotations

from ...errors import GraphError
from ...loopnest.buffering import CapacityError, Unbufferable, buffer_kernel
from ...loopnest.ir import Copy, Kernel, Loop, Stmt, Store, accesses, walk
from ...loopnest.register_tile import Tiled
from ...loopnest.verify import verify_kernel
from .config import SunwayConfig


def _writes_main_memory(s: Stmt) -> bool:
    return any(rw == "w" and acc.tensor.scope == "global"
               for st, _ in walk((s,)) if not isinstance(st, Loop) for acc, rw in accesses(st))


def _serial(stmts) -> tuple[Stmt, ...]:
    return tuple(Loop(s.var, s.extent, _serial(s.body)) if isinstance(s, Loop) else s
                 for s in stmts)


def _with_parallel(nest: Loop, var: str) -> Loop:
    def mark(s):
        if not isinstance(s, Loop):
            return s
        return Loop(s.var, s.extent, tuple(mark(b) for b in s.body),
                    "parallel" if s.var == var else s.kind)
    return mark(nest)


def cpe_loop(kernel: Kernel, nest: Loop) -> str | None:
    """The variable of `nest`'s CPE loop (see the module docstring), or None."""
    s = nest
    while isinstance(s, Loop):
        if s.extent > 1:
            trial = Kernel(kernel.name, kernel.inputs, kernel.outputs,
                           (_with_parallel(nest, s.var),), kernel.locals)
            try:
                verify_kernel(trial)
                return s.var
            except GraphError:
                pass
        inner = [b for b in s.body if isinstance(b, Loop)]
        if len(inner) != 1 or any(_writes_main_memory(b) for b in s.body if b is not inner[0]):
            return None
        s = inner[0]
    return None


def mark_cpe_loops(kernel: Kernel) -> Kernel:
    """`kernel` with every loop serial except each top-level nest's CPE loop."""
    body = []
    for s in _serial(kernel.body):
        if isinstance(s, Loop):
            var = cpe_loop(kernel, s)
            if var is not None:
                s = _with_parallel(s, var)
        body.append(s)
    return Kernel(kernel.name, kernel.inputs, kernel.outputs, tuple(body), kernel.locals)


def runs_on(kernel: Kernel, mode: str) -> str:
    """"cpe" or "mpe": in swtvm mode a kernel whose statements read or write main memory
    other than by DMA copies runs on the MPE; in baseline mode everything runs on the CPEs."""
    if mode == "baseline":
        return "cpe"
    direct = any(acc.tensor.scope == "global" for s, _ in walk(kernel.body)
                 if isinstance(s, Store) for acc, _ in accesses(s))
    return "mpe" if direct else "cpe"


def schedule(kernel: Kernel, config: SunwayConfig) -> Tiled:
    if config.mode == "baseline":
        return Tiled(mark_cpe_loops(kernel))
    try:
        buffered, _ = buffer_kernel(kernel, config.ldm_bytes)
    except (Unbufferable, CapacityError):
        return Tiled(_plain(kernel))       # runs_on says "mpe"
    return Tiled(mark_cpe_loops(buffered))


def _plain(kernel: Kernel) -> Kernel:
    return Kernel(kernel.name, kernel.inputs, kernel.outputs, _serial(kernel.body),
                  kernel.locals)


__all__ = ["cpe_loop", "mark_cpe_loops", "runs_on", "schedule"]

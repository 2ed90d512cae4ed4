"""How each layer's loop nest is scheduled for the CPEs, and where it runs.

- "swtvm": swTVM's algorithms (loopnest/buffering.py) size the LDM buffers for `ldm_bytes`
  (Algorithm 1), order the loops around them (Algorithm 2) and insert the DMA copies
  (Algorithm 3); then each nest's CPE loop is chosen (`mark_cpe_loops`). A nest the
  algorithms refuse (a read that can fall outside its tensor: Pad, a padded pooling window,
  LRN) cannot run on a CPE without touching main memory directly, so its layer runs on the
  MPE (`runs_on`).
- "openacc": the faithful baseline (openacc.py): the nest as lowered, its outer independent
  loop split over the CPEs, each tensor's slice copied into LDM where it fits, global loads
  for the rest.
- "elementwise": the naive OpenACC code: the nest as lowered, its outer independent loop
  split over the CPEs, every main-memory element read and written by a global load / store.

The CPE loop of a nest is marked `parallel` in the IR: the CPE code runs its share of that
loop's iterations (RT_LO .. RT_HI) and every loop outside it in full. Candidates are the loops
whose iterations write disjoint main-memory elements (the verifier's rule for parallel loops)
with no main-memory write outside them; swTVM's code takes the outermost, ours the one the
cost model finds fastest (a loop of 4 iterations keeps 60 CPEs idle). A nest without one is
run by every CPE, CPE 0 alone writing main memory.
"""
from __future__ import annotations

from ...errors import GraphError
from ...loopnest.buffering import CapacityError, Unbufferable, buffer_kernel
from ...loopnest.ir import Kernel, Loop, Stmt, Store, accesses, walk
from ...loopnest.register_tile import Scheduled
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


def _locals(stmts, rw: str) -> set[str]:
    return {acc.tensor.name for st, _ in walk(tuple(stmts)) if not isinstance(st, Loop)
            for acc, kind in accesses(st) if acc.tensor.scope == "local" and kind == rw}


def cpe_loops(kernel: Kernel, nest: Loop) -> list[str]:
    """The variables of the loops of `nest` that can be its CPE loop, outermost first. Along
    the nest's spine, a loop qualifies when
    - its iterations write disjoint main-memory elements (the verifier's parallel rule) and it
      writes main memory at all: splitting a loop that only fills LDM would leave each CPE's
      own LDM partly filled;
    - no LDM buffer it writes is read or written outside it: each CPE has its own LDM, so what
      one CPE's share leaves in a buffer is not what another statement would expect there;
    - nothing outside it, on the way down the spine, writes main memory."""
    found = []
    s = nest
    while isinstance(s, Loop):
        inside = _locals(s.body, "w")
        elsewhere = {acc.tensor.name for st, _ in walk(kernel.body) if not isinstance(st, Loop)
                     and not _within(st, s) for acc, _ in accesses(st)}
        if s.extent > 1 and _writes_main_memory(s) and not inside & elsewhere:
            trial = Kernel(kernel.name, kernel.inputs, kernel.outputs,
                           (_with_parallel(nest, s.var),), kernel.locals)
            try:
                verify_kernel(trial)
                found.append(s.var)
            except GraphError:
                pass
        inner = [b for b in s.body if isinstance(b, Loop)]
        if len(inner) != 1 or any(_writes_main_memory(b) for b in s.body if b is not inner[0]):
            break
        s = inner[0]
    return found


def _within(stmt, loop: Loop) -> bool:
    return any(st is stmt for st, _ in walk(loop.body))


def mark_cpe_loops(kernel: Kernel, config: SunwayConfig | None = None) -> Kernel:
    """`kernel` with every loop serial except each top-level nest's CPE loop: of the legal
    ones, the one the cost model finds fastest with `config`'s CPEs (the outermost on a tie,
    or when there is no config)."""
    from .cost import cpe_counts, cpe_seconds    # cost reads schedules: import when used

    def modelled(nest: Loop) -> float:
        one = Kernel(kernel.name, kernel.inputs, kernel.outputs, (nest,), kernel.locals)
        return max(sum(cpe_seconds(w, config)) for w in cpe_counts(one, config.cpes))

    body = []
    for s in _serial(kernel.body):
        if isinstance(s, Loop):
            options = [_with_parallel(s, v) for v in cpe_loops(kernel, s)]
            if options:
                s = options[0] if config is None or len(options) == 1 else \
                    min(options, key=modelled)
        body.append(s)
    return Kernel(kernel.name, kernel.inputs, kernel.outputs, tuple(body), kernel.locals)


def runs_on(kernel: Kernel, mode: str) -> str:
    """"cpe" or "mpe": in swtvm mode a kernel whose statements read or write main memory
    other than by DMA copies runs on the MPE; in the baselines everything runs on the CPEs
    (they may use global loads)."""
    if mode != "swtvm":
        return "cpe"
    direct = any(acc.tensor.scope == "global" for s, _ in walk(kernel.body)
                 if isinstance(s, Store) for acc, _ in accesses(s))
    return "mpe" if direct else "cpe"


def schedule(kernel: Kernel, config: SunwayConfig) -> Scheduled:
    if config.mode == "elementwise":
        return Scheduled(mark_cpe_loops(kernel))        # the outer independent loop, as OpenACC
    if config.mode == "openacc":
        from .openacc import openacc_kernel             # it builds on mark_cpe_loops
        return Scheduled(openacc_kernel(kernel, config))
    limits = _share_limits(kernel, config) if config.share_first else None
    try:
        buffered, _ = buffer_kernel(kernel, config.ldm_bytes, limits=limits)
    except (Unbufferable, CapacityError):
        return Scheduled(_plain(kernel))       # runs_on says "mpe"
    best = mark_cpe_loops(buffered, config)
    if config.double_buffer:
        best = _double_buffered(kernel, best, limits, config)
    return Scheduled(best)


# the fractions of the LDM the buffers are sized for when double buffering: doubling the
# buffers of Algorithm 1, which fills the LDM, would not fit, so smaller ones are tried
DOUBLE_BUFFER_FRACTIONS = (0.75, 0.5, 0.375, 0.25)


def _double_buffered(kernel: Kernel, single: Kernel, limits, config: SunwayConfig) -> Kernel:
    """Of `single` (buffers sized for the whole LDM) and the kernel buffered for each of
    DOUBLE_BUFFER_FRACTIONS of it, the one the cost model finds fastest with double
    buffering (double_buffer.py: the loops whose doubled buffers fit the whole LDM)."""
    from .cost import kernel_seconds    # cost reads schedules: import when used
    best, best_s = single, kernel_seconds(single, "swtvm", config)
    for fraction in DOUBLE_BUFFER_FRACTIONS:
        try:
            buffered, _ = buffer_kernel(kernel, int(config.ldm_bytes * fraction), limits=limits)
        except (Unbufferable, CapacityError):
            continue
        trial = mark_cpe_loops(buffered, config)
        seconds = kernel_seconds(trial, "swtvm", config)
        if seconds < best_s:
            best, best_s = trial, seconds
    return best


def _share_limits(kernel: Kernel, config: SunwayConfig) -> dict[str, int]:
    """Buffer-extent caps that leave each nest's outer independent loop (the one the lowering
    marks parallel) outside the buffers with at least one iteration per CPE where it can:
    what swTVM's athread_parallel splits over the CPEs before the buffers are sized. Without
    them a layer whose tensors fit the LDM would be buffered whole, with no loop left to
    share."""
    return {s.var: max(1, s.extent // config.cpes) for s, _ in walk(kernel.body)
            if isinstance(s, Loop) and s.kind == "parallel"}


def _plain(kernel: Kernel) -> Kernel:
    return Kernel(kernel.name, kernel.inputs, kernel.outputs, _serial(kernel.body),
                  kernel.locals)


__all__ = ["cpe_loops", "mark_cpe_loops", "runs_on", "schedule"]

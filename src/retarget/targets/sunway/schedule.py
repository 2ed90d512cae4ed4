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

from ...loopnest.buffering import CapacityError, Unbufferable, buffer_kernel
from ...loopnest.ir import Kernel, Loop, walk
from ...loopnest.register_tile import Scheduled
from .config import SunwayConfig
from .cores import runs_on
from .cost import kernel_seconds
from .cpe_loops import cpe_loops, mark_cpe_loops, serial_loops
from .openacc import openacc_kernel


def schedule(kernel: Kernel, config: SunwayConfig) -> Scheduled:
    if config.mode == "elementwise":
        return Scheduled(mark_cpe_loops(kernel))        # the outer independent loop, as OpenACC
    if config.mode == "openacc":
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
    return Kernel(kernel.name, kernel.inputs, kernel.outputs, serial_loops(kernel.body),
                  kernel.locals)


__all__ = ["cpe_loops", "mark_cpe_loops", "runs_on", "schedule"]

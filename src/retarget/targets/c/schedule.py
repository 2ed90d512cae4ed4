"""The `c` target's schedules: what each kernel looks like before it is printed."""
from __future__ import annotations

from ...errors import GraphError
from ...loopnest.buffering import CapacityError, Unbufferable, buffer_kernel
from ...loopnest.c_printer import print_kernel
from ...loopnest.inner_order import order_reductions
from ...loopnest.ir import Kernel as LoopKernel, Loop
from ...loopnest.register_tile import Scheduled, register_tile
from ...loopnest.schedule import ScheduleError, parallel
from ...loopnest.verify import verify_kernel
from .config import CConfig


def schedule_kernel(kernel: LoopKernel, constants: frozenset[str], config: CConfig) -> Scheduled:
    """Each kernel's schedule before it is printed (docs/aot-c.md):

    - "naive": the nest exactly as `lower_node` made it (its outer independent loop
      parallel): the OpenACC-style baseline;
    - "buffered": swTVM's algorithms (loopnest/buffering.py) with `local_bytes` of local
      memory, the outermost loop of each nest parallel where that is legal; a nest they
      cannot buffer stays as lowered;
    - "optimized": weighted reductions (conv, dense, matmul by a constant) register-tiled
      along their output channels, their weights packed to match (loopnest/register_tile.py);
      the remaining reductions with their contiguous output loops innermost
      (loopnest/inner_order.py).

    `constants` names the kernel inputs that are compile-time constants."""
    if config.mode == "naive":
        return Scheduled(kernel)
    if config.mode == "buffered":
        try:
            buffered, _ = buffer_kernel(kernel, config.local_bytes)
        except (Unbufferable, CapacityError):
            return Scheduled(kernel)
        return Scheduled(_parallel_outer_loops(buffered))
    tiled = register_tile(kernel, constants, config.tile_channels, config.tile_columns)
    return Scheduled(order_reductions(tiled.kernel), tiled.relayouts)


def _parallel_outer_loops(kernel: LoopKernel) -> LoopKernel:
    """`kernel` with the outermost loop of each top-level nest parallel where the verifier
    (disjoint writes) and the C printer (per-thread locals) accept it; the rest serial."""
    for s in kernel.body:
        if not isinstance(s, Loop):
            continue
        try:
            candidate = parallel(kernel, s.var)
            verify_kernel(candidate)
            print_kernel(candidate)
        except (ScheduleError, GraphError):
            continue
        kernel = candidate
    return kernel


__all__ = ["schedule_kernel"]

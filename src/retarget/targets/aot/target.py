"""What every ahead-of-time C target shares: which nodes it can hold (those the op lowering
turns into loop nests), how a region becomes a built library (lower.py, then the target's
LibraryKernel) and the device it runs on. A target supplies its kernel class, its device
class and `schedule` (what each kernel looks like before it is printed)."""
from __future__ import annotations

import time
from typing import ClassVar

from ...errors import RetargetError
from ...ir.graph import Graph, Node
from ...loopnest.ir import Kernel as LoopKernel
from ...loopnest.register_tile import Scheduled
from ..base import Region, Support, Target
from .device import LibraryDevice
from .kernel import LibraryKernel, new_build_dir
from .lower import Fused, OpLowering, default_op_lowering, lower_region, node_support_problem


class LibraryTarget(Target):
    """Subclass as `class T(LibraryTarget, kernel=K, config=C, presets=P)`."""
    kernel_class: ClassVar[type[LibraryKernel]] = LibraryKernel
    bit_exact: ClassVar[bool] = False
    # `run --check`'s tolerance: float sums in another order, BatchNorm folded into weights
    check_rtol: ClassVar[float] = 1e-4
    # The loading machine's compiler builds the library (docs/guarantees.md): an artifact
    # carries none of these; RETARGET_CC / RETARGET_CFLAGS or an explicit option set them.
    host_fields: ClassVar[dict[str, str | None]] = {
        "cc": "RETARGET_CC", "cflags": "RETARGET_CFLAGS", "build_dir": None,
        "memory_bytes": None}

    def __init_subclass__(cls, *, kernel: type[LibraryKernel] | None = None,
                          config: type | None = None, presets: dict | None = None, **kw):
        super().__init_subclass__(**kw)
        if kernel is not None:
            cls.kernel_class, cls.kernel_kinds = kernel, {kernel.kind: kernel}
        if config is not None:
            cls.config_class = config
        if presets is not None:
            cls.presets = presets

    def op_lowering(self) -> OpLowering | None:
        """How nodes become loop nests (loopnest/ops/); a subclass may supply another."""
        return default_op_lowering()

    def schedule(self, kernel: LoopKernel, constants: frozenset[str]) -> Scheduled:
        """`kernel` as it will be printed; `constants` names its compile-time constant inputs."""
        raise NotImplementedError(f"target {self.name!r} does not implement schedule()")

    def fuse(self, region: Region) -> list[Fused]:
        """The groups of `region` computed by one call each (none by default)."""
        return []

    def supports(self, node: Node, graph: Graph) -> Support:
        lowering = self.op_lowering()
        if lowering is None:
            return Support.no(f"the {self.name} target lowers ops with retarget.loopnest.ops, "
                              f"which is not available in this installation")
        if node.op not in lowering.supported:
            return Support.no(f"{self.name} has no loop-nest lowering for {node.op}")
        problem = node_support_problem(node)
        if problem:
            return Support.no(problem)
        try:   # an attribute combination the lowering refuses stays on the CPU, with its reason
            lowering.lower_node(node)
        except RetargetError as e:
            return Support.no(f"{node.op} cannot be lowered to a loop nest: {e}")
        return Support.yes()

    def lower(self, region: Region) -> LibraryKernel:
        lowering = self.op_lowering()
        if lowering is None:
            raise RetargetError("retarget.loopnest.ops is not available to lower ops to C")
        t0 = time.perf_counter()
        program, blob = lower_region(region, lowering, self.schedule, self.config.mode,
                                     self.fuse)
        lower_s = time.perf_counter() - t0
        directory, temporary = new_build_dir(region.name, self.config.build_dir)
        kernel = self.kernel_class(program, blob, self.config, directory, temporary)
        kernel.lower_seconds = lower_s
        kernel.ensure_built()      # writes the project, then builds it (timed: build_seconds)
        return kernel

    def make_device(self) -> LibraryDevice:
        return LibraryDevice(self.name, memory_bytes=self.config.memory_bytes)


__all__ = ["LibraryTarget"]

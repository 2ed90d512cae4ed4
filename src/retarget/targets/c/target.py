"""The `c` target: ahead-of-time C for the host (issue 14).

    m = retarget.compile(graph, "c")                          # -O3 -march=native, OpenMP
    m = retarget.compile(graph, "c", config={"cflags": "-O1 -std=c99", "openmp": False})
    m = retarget.compile(graph, "c:naive")                    # the baseline schedule
    m.run({"input": x}); m.save("out/")                       # kernels/<region>/: a C project

float32 (and integer index tensors), no quantisation. Every op the loop-nest lowering
(`retarget.loopnest.ops`) supports runs as C; any other op stays on the CPU reference, with
the reason in the placement report. Each offloaded region becomes one C project (lower.py,
emit.py), built at compile time with the system compiler into a shared library (kernel.py,
build.py), run through ctypes on the CDevice (device.py).

Results are float: not bit-exact with the NumPy reference (a different summation order, FMA
contraction), so `retarget run --check` compares with a tolerance (`bit_exact = False`); the
tests hold the generated code to 1e-4 relative of the reference.
"""
from __future__ import annotations

import time
from typing import ClassVar

from ...errors import RetargetError
from ...ir.graph import Graph, Node
from ...passes.explicit_padding import explicit_padding
from ...passes.fold_batchnorm import fold_batchnorm
from ..base import Region, Support, Target
from .config import CConfig, PRESETS
from .device import CDevice
from .kernel import CLibraryKernel, build_options, new_build_dir
from .lower import OpLowering, default_op_lowering, lower_region, node_support_problem


class CTarget(Target):
    name: ClassVar[str] = "c"
    description: ClassVar[str] = ("the host CPU through ahead-of-time generated C (a static "
                                  "library per region, built with the system compiler)")
    config_class: ClassVar[type] = CConfig
    presets: ClassVar[dict] = PRESETS
    kernel_kinds: ClassVar[dict] = {CLibraryKernel.kind: CLibraryKernel}
    bit_exact: ClassVar[bool] = False
    # `run --check`'s tolerance: float sums in another order, BatchNorm folded into weights
    check_rtol: ClassVar[float] = 1e-4

    def op_lowering(self) -> OpLowering | None:
        """How nodes become loop nests (loopnest/ops.py); a subclass may supply another."""
        return default_op_lowering()

    def supports(self, node: Node, graph: Graph) -> Support:
        lowering = self.op_lowering()
        if lowering is None:
            return Support.no("the c target lowers ops with retarget.loopnest.ops, which is "
                              "not available in this installation")
        if node.op not in lowering.supported:
            return Support.no(f"c has no loop-nest lowering for {node.op}")
        problem = node_support_problem(node)
        if problem:
            return Support.no(problem)
        try:   # an attribute combination the lowering refuses stays on the CPU, with its reason
            lowering.lower_node(node)
        except RetargetError as e:
            return Support.no(f"{node.op} cannot be lowered to a loop nest: {e}")
        return Support.yes()

    def prepare(self, graph: Graph) -> Graph:
        """Optimised and buffered modes: BatchNorm folded into the convs before it, and
        convolutions read an explicitly padded input (no bounds test in their inner loops, and
        a box the buffering can copy) where the op lowering runs Pad. Naive mode lowers the
        graph as imported."""
        if self.config.mode == "naive":
            return graph
        graph = fold_batchnorm(graph)
        lowering = self.op_lowering()
        return explicit_padding(graph) if lowering and "Pad" in lowering.supported else graph

    def lower(self, region: Region) -> CLibraryKernel:
        lowering = self.op_lowering()
        if lowering is None:
            raise RetargetError("retarget.loopnest.ops is not available to lower ops to C")
        t0 = time.perf_counter()
        program, blob = lower_region(region, lowering, self.config)
        lower_s = time.perf_counter() - t0
        directory, temporary = new_build_dir(region.name, self.config.build_dir)
        kernel = CLibraryKernel(program, blob, build_options(self.config), directory, temporary,
                                build_dir=self.config.build_dir)
        kernel.lower_seconds = lower_s
        kernel.ensure_built()      # writes the project, then builds it (timed: build_seconds)
        return kernel

    def make_device(self) -> CDevice:
        return CDevice(memory_bytes=self.config.memory_bytes)


__all__ = ["CTarget"]

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

from typing import ClassVar

from ...ir.graph import Graph
from ...loopnest.ir import Kernel as LoopKernel
from ...loopnest.register_tile import Scheduled
from ...passes.explicit_padding import explicit_padding
from ...passes.fold_batchnorm import fold_batchnorm
from ..aot.build import BuildOptions
from ..aot.kernel import LibraryKernel
from ..aot.target import LibraryTarget
from .config import CConfig, PRESETS
from .emit import sources
from .schedule import schedule_kernel


class CLibraryKernel(LibraryKernel, target="c"):
    @staticmethod
    def emit(program, config) -> dict[str, str]:
        return sources(program)

    @staticmethod
    def build_options(program, config) -> BuildOptions:
        return BuildOptions(config.cc, config.cflags, bool(config.openmp))


class CTarget(LibraryTarget, kernel=CLibraryKernel, config=CConfig, presets=PRESETS):
    name: ClassVar[str] = "c"
    host_fields = {**LibraryTarget.host_fields, "openmp": "RETARGET_OPENMP"}   # -fopenmp: a build flag
    description: ClassVar[str] = ("the host CPU through ahead-of-time generated C (a static "
                                  "library per region, built with the system compiler)")

    def schedule(self, kernel: LoopKernel, constants: frozenset[str]) -> Scheduled:
        return schedule_kernel(kernel, constants, self.config)

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


__all__ = ["CLibraryKernel", "CTarget"]

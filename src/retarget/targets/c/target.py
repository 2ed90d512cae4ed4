"""The `c` target: ahead-of-time C for the host.

    m = retarget.compile(graph, "c")                          # -O3 -march=native, OpenMP
    m = retarget.compile(graph, "c", config={"cflags": "-O1 -std=c99", "openmp": False})
    m = retarget.compile(graph, "c:naive")                    # the baseline schedule
    m.run({"input": x}); m.save("out/")                       # kernels/<region>/: a C project

float32, and the int8 ops of a quantised graph (routines_int8.py, bit-exact with the
integer reference) or of an imported int8 TFLite model (routines_tflite.py, after
zero_points.py has folded the convolutions' input zero points into their biases).
Convolutions and dense layers run on hand-written routines (routines.py);
every other op the loop-nest lowering (`retarget.loopnest.ops`) supports runs as a printed
loop nest; any other op stays on the CPU reference, with the reason in the placement report. Each offloaded region becomes one C project (lower.py,
emit.py), built at compile time with the system compiler into a shared library (kernel.py,
build.py), run through ctypes on the CDevice (device.py).

Float results are not bit-exact with the NumPy reference (a different summation order, FMA
contraction), so `retarget run --check` compares with a tolerance (`bit_exact = False`); the
tests hold the generated code to 1e-4 relative of the reference.
"""
from __future__ import annotations

from typing import ClassVar

from ...ir.graph import Graph, Node
from ...loopnest.ir import Kernel as LoopKernel
from ...loopnest.register_tile import Scheduled
from ..aot.build import BuildOptions
from ..aot.kernel import LibraryKernel
from ..aot.lower import Fused, node_support_problem
from ..aot.target import LibraryTarget
from ..base import Region, Support
from .config import CConfig, PRESETS
from .emit import sources
from .routines import plan_routines
from .routines_int8 import int8_support, is_integer_node, plan_int8
from .routines_ort import is_ort_node, ort_support, plan_ort
from .routines_tflite import is_tflite_node, plan_tflite, tflite_support
from .schedule import schedule_kernel
from .unsigned_shift import shift_uint8
from .zero_points import fold_input_zero_points


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
    in_demo = True   # at the default config

    def schedule(self, kernel: LoopKernel, constants: frozenset[str]) -> Scheduled:
        return schedule_kernel(kernel, constants, self.config)

    def fuse(self, region: Region) -> list[Fused]:
        """Optimised mode: convolutions and dense layers with their epilogues (bias, residual
        add, ReLU / Clip) as calls of the hand-written routines (routines.py); every mode: the
        integer nodes as calls of the int8 routines (routines_int8.py), then of TFLite's
        (routines_tflite.py)."""
        float_groups = plan_routines(region) if self.config.mode == "optimized" else []
        taken = {n.name for g in float_groups for n in g.nodes}
        int8_groups = plan_int8(region, taken)
        taken |= {n.name for g in int8_groups for n in g.nodes}
        return float_groups + int8_groups + plan_tflite(region, taken) + plan_ort(region, taken)

    def supports(self, node: Node, graph: Graph) -> Support:
        """Integer nodes (the int8 mode) run on the routines of int8.c, or of int8_tflite.c /
        int8_ort.c where those do not, in every mode; the rest as the loop-nest lowering allows."""
        checks = ([int8_support] if is_integer_node(node) else []) + \
            ([tflite_support] if is_tflite_node(node) else []) + \
            ([ort_support] if is_ort_node(node) else [])
        if not checks:
            return super().supports(node, graph)
        problem = node_support_problem(node)
        if problem is None:
            problems = [check(node) for check in checks]
            problem = None if None in problems else problems[-1]
        return Support.no(f"c int8 mode: {problem}") if problem else Support.yes()

    def prepare(self, graph: Graph) -> Graph:
        """An int8-ort graph's u8 values become s8 (unsigned_shift.py); int8 convolutions and
        dense layers read their int8 input, their input zero point folded into the bias
        (zero_points.py), so that they run on the int8 routines."""
        return fold_input_zero_points(shift_uint8(graph))

    def graph_passes(self) -> tuple[str, ...]:
        """Optimised and buffered modes: BatchNorm folded into the convs before it, and
        convolutions read an explicitly padded input (no bounds test in their inner loops, and
        a box the buffering can copy) where the op lowering runs Pad. Naive mode lowers the
        graph as imported."""
        if self.config.mode == "naive":
            return ()
        lowering = self.op_lowering()
        padding = ("explicit_padding",) if lowering and "Pad" in lowering.supported else ()
        return ("fold_batchnorm", *padding)


__all__ = ["CLibraryKernel", "CTarget"]

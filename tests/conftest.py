"""Fixtures shared across test directories, and the hypothesis profile."""
import os

import numpy as np
import pytest
from hypothesis import settings

# CI runs the property tests on a fixed sequence of examples, so a landing never depends on
# luck; local runs keep exploring new examples (and keep any failure in .hypothesis/). No
# deadlines anywhere: these machines are shared and a slow moment is not a bug.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

from retarget.targets.vta.builder import StreamBuilder
from retarget.targets.vta.isa import AluOp, MemType


def _blocked_gemm_stream(cfg, tiles=4, kb=2, vthreads=2, gemm_loop=None):
    """A builder-made blocked GEMM with `vthreads` contexts taking turns: per tile load x and
    w, reset, GEMM over kb input blocks (repeated by `gemm_loop`: (extent, dst, src) factors),
    SHR, store, with the RAW/WAR tokens double buffering needs."""
    b = StreamBuilder(cfg)
    b.alloc("x", (tiles, kb, cfg.batch, cfg.block_in))
    b.alloc("w", (1, kb, cfg.block_out, cfg.block_in))
    b.alloc("y", (tiles, 1, cfg.batch, cfg.block_out))
    loops = [gemm_loop] if gemm_loop else []
    for t in range(tiles):
        ctx = t % vthreads
        if t >= vthreads:
            b.dep_pop(2, 1)
        b.load_2d(MemType.INP, ctx * kb, "x", t * kb, kb, 1, kb)
        b.load_2d(MemType.WGT, ctx * kb, "w", 0, kb, 1, kb)
        b.dep_push(1, 2)
        b.dep_pop(1, 2)
        if t >= vthreads:
            b.dep_pop(3, 2)
        b.gemm(b.uop_kernel([(ctx, 0, 0)]), reset=True)
        b.gemm(b.uop_kernel([(ctx, ctx * kb + k, ctx * kb + k) for k in range(kb)], loops))
        b.alu(b.uop_kernel([(ctx, ctx)]), AluOp.SHR, 4)
        if t + vthreads < tiles:
            b.dep_push(2, 1)
        b.dep_push(2, 3)
        b.dep_pop(2, 3)
        b.store_2d(ctx, "y", t, 1, 1, 1)
        if t + vthreads < tiles:
            b.dep_push(3, 2)
    return b.finish()


@pytest.fixture(scope="session")
def blocked_gemm_stream():
    return _blocked_gemm_stream


# ---- comparing two float executions of the same graph -------------------------------------
# Two code paths that compute the same float32 maths (the reference and a device that runs the
# same ops on its own buffers, BLAS and generated loops, one BLAS core type and another) sum in
# different orders, and which order a CPU gets depends on its vector width and on alignment. A
# length-K sum rounded in any order is within K * 2**-24 of the exact sum relative to the sum of
# its magnitudes (the classic forward bound), and errors add up layer after layer: so two paths
# agree to within the sum of the graph's reduction lengths times 2**-24, relative to the output's
# magnitude. A wrong op or a wrong weight is off by the output's own size, far outside it.
_FLOAT32_UNIT_ROUNDOFF = 2.0 ** -24


def _reduction_length(node) -> int:
    if node.op == "Conv":
        w = node.inputs[1].type.shape
        return int(np.prod(w[1:]))
    if node.op in ("Gemm", "MatMul"):
        a = node.inputs[0].type.shape
        return int(a[0] if node.op == "Gemm" and node.attrs.get("transA") else a[-1])
    return 1


def float_paths_rtol(graph) -> float:
    """The relative tolerance between two float32 executions of `graph` (see above)."""
    return sum(_reduction_length(n) for n in graph.nodes) * _FLOAT32_UNIT_ROUNDOFF


@pytest.fixture
def assert_float_paths_agree():
    """check(got, want, graph): every output of `got` within float_paths_rtol(graph) of `want`,
    relative to the largest magnitude of that output in `want`."""
    def check(got: dict, want: dict, graph) -> None:
        rtol = float_paths_rtol(graph)
        for k in want:
            scale = float(np.abs(want[k]).max(initial=0.0))
            np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=rtol * scale,
                                       err_msg=f"output {k!r}")
    return check

"""Fixtures shared across test directories, and the hypothesis profile."""
import os

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

"""Helpers for the lowering tests: build a segment from layers, run it on the simulator, check
the token discipline statically, compare with the op-table reference."""
import numpy as np

from retarget.targets.vta.config import preset
from retarget.targets.vta.hazards import check_hazards
from retarget.targets.vta.lower import LoweringContext, run_segment

CONFIGS = ["pynq", "1x32", "2x16"]


def rand_int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def run_one(cfg_name, lower_fn, layer, arrays, **kw):
    """Lower one layer over fresh input buffers, run it; (output array, segment, SegmentRun)."""
    ctx = LoweringContext(preset(cfg_name))
    names = [f"in{i}" for i in range(len(arrays))]
    ts = [ctx.input(n, a.shape, str(a.dtype)) for n, a in zip(names, arrays)]
    consts = kw.pop("consts", ())
    y = lower_fn(ctx, layer, *ts, *consts, **kw)
    seg = ctx.finish([y])
    run = run_segment(seg, dict(zip(names, arrays)))
    check_hazards(seg.program)            # every cross-module SRAM conflict ordered by tokens
    assert run.result.tokens_left == {}   # every token pushed was consumed
    return run.outputs[y.buffer], seg, run

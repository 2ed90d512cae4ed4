"""A pooling tile whose row step (stride x input-window columns) exceeds the ALU src factor
field (as wide as an INP index) is refused, and the chooser picks a narrower one: found by
`retarget explore` on a 2x32x32 core with an 8 KiB INP buffer, where ResNet's stem pool
failed with an IsaError instead."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import TargetError
from retarget.targets.accel.layers import Pool2d
from retarget.targets.vta.config import PRESETS
from retarget.targets.vta.lower import LoweringContext, choose_schedule, lower_pool2d, run_segment
from retarget.targets.vta.lower.schedule import Schedule, alu_geom, check_schedule

CFG = PRESETS["pynq"].with_(log_batch=1, log_block_in=5, log_block_out=5,
                            log_inp_buff_size=13, name="small_inp")
POOL = Pool2d("pool", "max", (2, 64, 112, 112), (3, 3), (2, 2), (1, 1, 1, 1))


def test_wide_pool_tile_is_refused():
    assert CFG.inp_depth == 128
    with pytest.raises(TargetError, match="row step .* src factor"):
        check_schedule(POOL, CFG, Schedule(tile_n=1, tile_h=1, tile_w=56, tile_co=1))


def test_the_chosen_tile_fits_and_the_pool_is_exact():
    s = choose_schedule(POOL, CFG)
    g = alu_geom(POOL, CFG)
    assert g.sh * g.in_cols(s.tile_w) < CFG.inp_depth
    check_schedule(POOL, CFG, s)
    x = np.random.default_rng(0).integers(-128, 128, POOL.in_shape).astype(np.int8)
    ctx = LoweringContext(CFG)
    xt = ctx.input("x", POOL.in_shape)
    y = lower_pool2d(ctx, POOL, xt, schedule=s)
    seg = ctx.finish([y])
    run = run_segment(seg, {"x": x})
    want = x.reshape(2, 64, 112, 112)
    padded = np.pad(want.astype(np.int16), ((0, 0), (0, 0), (1, 1), (1, 1)),
                    constant_values=-128)
    ref = np.max([padded[:, :, i:i + 111:2, j:j + 111:2] for i in range(3) for j in range(3)],
                 axis=0).astype(np.int8)
    np.testing.assert_array_equal(run.outputs["pool/out"], ref)

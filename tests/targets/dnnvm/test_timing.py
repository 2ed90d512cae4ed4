"""The dnnvm cycle model: per-instruction costs from the config, overlap across engines under
the dependency fields, the shared DDR port, deadlocks, and per-layer aggregates."""
from dataclasses import replace

import pytest

from retarget.errors import TargetError
from retarget.targets.accel.layers import Conv2d, Requant
from retarget.targets.accel.sim_errors import DeadlockError
from retarget.targets.dnnvm.config import PRESETS
from retarget.targets.dnnvm.isa import CONV_E, LOAD_E, Conv, End, Load, Save
from retarget.targets.dnnvm.lower import Lowering
from retarget.targets.dnnvm.timing import simulate_timing

ZU2 = PRESETS["zu2"]


def test_instruction_costs_follow_the_config():
    c = ZU2
    conv = Conv(kh=3, kw=3, in_h=6, in_w=10, ic=48, out_h=4, out_w=8, oc=24)
    steps = 1 * 8 * 9 * 2 * 2               # rows/h_p, cols, taps, ic/ic_p, oc/oc_p
    t = simulate_timing([conv, End()], c)
    assert t.end[0] - t.start[0] == c.insn_overhead + c.conv_pipeline + steps * c.step_cycles
    assert t.gemm_cycles == steps * c.step_cycles
    assert t.macs == steps * c.macs_per_step
    load = Load(rows=10, cols=10, vec_bytes=100)
    t = simulate_timing([load, End()], c)
    assert t.end[0] == c.insn_overhead + c.ddr_latency + -int(-10000 // c.ddr_bytes_per_cycle)
    assert t.bytes["inp"] == 10000



def test_channel_augmentation_packs_kernel_columns_of_a_thin_input():
    """A CONV on fewer than ic_p channels takes kw*ic window bytes per step (kernel columns
    in the idle input lanes); at ic_p channels and above, and with the option off, one tap
    per step as before."""
    c = ZU2
    stem = Conv(kh=7, kw=7, in_h=13, in_w=13, ic=3, out_h=4, out_w=4, oc=12)
    t = simulate_timing([stem, End()], c)
    assert t.gemm_cycles == 1 * 4 * 7 * 1 * 1 * c.step_cycles     # 7 rows of ceil(21/24)
    plain = c.with_(channel_augmentation=False)
    assert simulate_timing([stem, End()], plain).gemm_cycles == 4 * 49 * plain.step_cycles
    assert c.window_steps(3, 3, 16) == 3 * 2                     # ceil(48 / 24) per row
    assert c.window_steps(3, 3, 24) == 9                          # full lanes: no gain
    assert c.window_steps(3, 3, 16, depthwise=True) == 9
    with pytest.raises(TargetError, match="channel_augmentation"):
        c.with_(channel_augmentation=1)

def test_engines_overlap_and_share_the_ddr_port():
    c = ZU2
    conv = Conv(kh=3, kw=3, in_h=6, in_w=66, ic=24, out_h=4, out_w=64, oc=12)
    # independent: a load and a conv start together
    t = simulate_timing([Load(rows=64, cols=64, vec_bytes=16), conv, End()], c)
    assert t.start[0] == t.start[1] == 0
    # dependent: the conv waits for the load's token
    t = simulate_timing([Load(rows=64, cols=64, vec_bytes=16, signal=1 << CONV_E),
                         replace(conv, wait=1 << LOAD_E), End()], c)
    assert t.start[1] == t.end[0]
    # a load and a save both use the DDR port: the second transfer waits for the first
    t = simulate_timing([Load(rows=64, cols=64, vec_bytes=16),
                         Save(rows=64, cols=64, vec_bytes=16), End()], c)
    dma = -int(-64 * 64 * 16 // c.ddr_bytes_per_cycle)
    assert t.total_cycles >= 2 * dma


def test_a_tiled_conv_overlaps_loads_with_compute():
    layer = Conv2d("c", (1, 48, 28, 28), 48, (3, 3), (1, 1), (1, 1, 1, 1), 1, Requant(6))
    ctx = Lowering(ZU2)
    x, y = ctx.input("x", layer.in_shape), ctx.feature_map("y", layer.out_shape)
    ctx.conv(layer, x, [y], None, None)
    t = simulate_timing(ctx.finish())
    serial = sum(int(e - s) for s, e in zip(t.start, t.end))
    assert t.total_cycles < 0.8 * serial            # double buffering hides most transfers
    assert [lt.name for lt in t.layers] == ["c"]
    assert t.busy["conv"] > 0 and t.busy["load"] > 0 and t.busy["save"] > 0


def test_timing_deadlock_is_reported():
    with pytest.raises(DeadlockError, match="conv engine blocked at instruction #0"):
        simulate_timing([Conv(wait=1 << LOAD_E), End()], ZU2)

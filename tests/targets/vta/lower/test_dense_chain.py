"""Dense / blocked GEMM, several layers chained in one stream, and the schedule chooser."""
import numpy as np
import pytest

from retarget.targets.vta.config import preset
from retarget.targets.vta.hazards import check_hazards
from retarget.targets.vta.lower import (Conv2d, Dense, LoweringContext, Pool2d, Requant,
                                        RequantizeLayer, ResidualAdd, Schedule, choose_schedule,
                                        estimate, lower_conv2d, lower_dense, lower_pool2d,
                                        lower_requantize, lower_residual_add, reference,
                                        run_segment)

from .conftest import CONFIGS, rand_int8, run_one


@pytest.mark.parametrize("cfg", CONFIGS + ["1x64"])
@pytest.mark.parametrize("v", [1, 2])
def test_blocked_gemm_128(cfg, v):
    """Dense 128 x 128 x 128 in forced 64-wide tiles (several reduction phases, tiles over
    batch and outputs); counters match the blocked traffic exactly."""
    c = preset(cfg)
    rng = np.random.default_rng(1)
    a, w = rand_int8(rng, (128, 128)), rand_int8(rng, (128, 128))
    b = rng.integers(-(1 << 14), 1 << 14, 128).astype(np.int32)
    layer = Dense("fc", 128, 128, 128, Requant(8, 0, 127))
    t = 64
    s = Schedule(t // c.batch, 1, 1, t // c.block_out, t // c.block_in, v)
    got, seg, run = run_one(cfg, lower_dense, layer, [a], consts=(w, b), schedule=s)
    np.testing.assert_array_equal(got, reference(layer, a, w, b))
    k = run.result.counters
    assert run.result.macs(c) == 128 ** 3
    assert k.out_store_nbytes == 128 * 128
    assert k.wgt_load_nbytes == 2 * 128 * 128        # re-read once per batch tile
    assert k.inp_load_nbytes == 2 * 128 * 128        # re-read once per output tile


@pytest.mark.parametrize("cfg", CONFIGS)
def test_dense_odd_sizes_default_schedule(cfg):
    rng = np.random.default_rng(2)
    a, w = rand_int8(rng, (3, 70)), rand_int8(rng, (10, 70))
    layer = Dense("fc", 3, 70, 10, Requant(6))
    got, _, _ = run_one(cfg, lower_dense, layer, [a], consts=(w, None))
    np.testing.assert_array_equal(got, reference(layer, a, w, None))


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("v", [1, 2])
def test_chain_in_one_stream(cfg, v):
    """conv -> maxpool -> conv -> residual add -> ReLU -> avgpool -> dense in one stream,
    intermediates packed in DRAM, against the composed op-table reference."""
    rng = np.random.default_rng(3)
    x = rand_int8(rng, (1, 3, 16, 16))
    c1 = Conv2d("c1", (1, 3, 16, 16), 16, (3, 3), (1, 1), (1, 1, 1, 1), requant=Requant(9, 0, 127))
    p1 = Pool2d("p1", "max", (1, 16, 16, 16), (3, 3), (2, 2), (1, 1, 1, 1))
    c2 = Conv2d("c2", (1, 16, 8, 8), 16, (3, 3), (1, 1), (1, 1, 1, 1), requant=Requant(10))
    add = ResidualAdd("add", (1, 16, 8, 8), 0, 1, 1)
    relu = RequantizeLayer("relu", (1, 16, 8, 8), Requant(0, 0, 127))
    gap = Pool2d("gap", "avg", (1, 16, 8, 8), (8, 8), (8, 8))
    fc = Dense("fc", 1, 16, 10, Requant(7))
    w1, w2, wf = rand_int8(rng, (16, 3, 3, 3)), rand_int8(rng, (16, 16, 3, 3)), rand_int8(rng, (10, 16))
    b1, b2 = (rng.integers(-999, 999, 16).astype(np.int32) for _ in range(2))
    bf = rng.integers(-999, 999, 10).astype(np.int32)

    ctx = LoweringContext(preset(cfg))
    t = ctx.input("x", x.shape)
    t1 = lower_conv2d(ctx, c1, t, w1, b1, vthreads=v)
    t2 = lower_pool2d(ctx, p1, t1, vthreads=v)
    t3 = lower_conv2d(ctx, c2, t2, w2, b2, vthreads=v)
    t4 = lower_residual_add(ctx, add, t3, t2, vthreads=v)
    t5 = lower_requantize(ctx, relu, t4, vthreads=v)
    t6 = lower_pool2d(ctx, gap, t5, vthreads=v)
    t7 = lower_dense(ctx, fc, t6.as_matrix(), wf, bf, vthreads=v)
    seg = ctx.finish([t4, t7])
    run = run_segment(seg, {"x": x})
    check_hazards(seg.program)
    assert run.result.tokens_left == {}

    r1 = reference(c1, x, w1, b1)
    r2 = reference(p1, r1)
    r4 = reference(add, reference(c2, r2, w2, b2), r2)
    r6 = reference(gap, reference(relu, r4))
    np.testing.assert_array_equal(run.outputs[t4.buffer], r4)
    np.testing.assert_array_equal(run.outputs[t7.buffer], reference(fc, r6.reshape(1, 16), wf, bf))
    assert [r.name for r in seg.reports] == ["c1", "p1", "c2", "add", "relu", "gap", "fc"]
    assert any("3 input channels padded" in n for n in seg.reports[0].notes)


def test_chooser_uses_the_cost_function():
    cfg = preset("pynq")
    layer = Conv2d("c", (1, 64, 28, 28), 64, (3, 3), (1, 1), (1, 1, 1, 1))
    default = choose_schedule(layer, cfg)
    calls = []

    def narrow(layer_, cfg_, s, e):
        calls.append(e)
        return s.tile_co                      # prefer one output block per tile
    small = choose_schedule(layer, cfg, cost=narrow)
    assert calls and small.tile_co == 1 < default.tile_co
    e = estimate(layer, cfg, default)
    assert e.dram_bytes > 64 * 28 * 28 and e.instructions > 0


def test_estimate_matches_counters_without_reuse_effects():
    """The analytic estimate's output and weight traffic are exact for a 1-thread schedule."""
    rng = np.random.default_rng(4)
    layer = Conv2d("c", (1, 32, 10, 10), 48, (3, 3), (1, 1), (1, 1, 1, 1))
    x, w = rand_int8(rng, (1, 32, 10, 10)), rand_int8(rng, (48, 32, 3, 3))
    s = Schedule(1, 5, 10, 3, 2, 1)
    _, _, run = run_one("pynq", lower_conv2d, layer, [x], consts=(w, None), schedule=s)
    k, cfg = run.result.counters, preset("pynq")
    e = estimate(layer, cfg, s)
    consts = 3 * cfg.acc_elem_bytes                       # bias vectors, once per layer
    assert e.dram_bytes == (k.inp_load_nbytes + k.wgt_load_nbytes + k.out_store_nbytes
                            + consts) == k.inp_load_nbytes + k.wgt_load_nbytes \
        + k.out_store_nbytes + k.acc_load_nbytes

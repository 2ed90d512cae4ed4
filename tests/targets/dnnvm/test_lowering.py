"""Layers lowered alone, every tile candidate, bit-exact against the op-table reference on
every preset; tile choice and the refusal of a config no tile fits."""
import numpy as np
import pytest

from retarget.errors import TargetError
from retarget.targets.accel.layers import Conv2d, Pool2d, Requant, RequantizeLayer, ResidualAdd
from retarget.targets.accel.reference import conv2d, pool2d, requantize, residual_add
from retarget.targets.dnnvm.config import PRESETS
from retarget.targets.dnnvm.lower import (choose_conv_tile, conv_candidates, conv_fit, eq5_tile)

from .conftest import run_lowered

CONVS = [  # in_shape, out_channels, kernel, stride, pads, groups
    ((1, 8, 9, 7), 12, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    ((2, 5, 8, 8), 6, (1, 1), (2, 2), (0, 0, 0, 0), 1),
    ((1, 8, 10, 10), 8, (3, 3), (2, 2), (1, 1, 1, 1), 8),      # depthwise
    ((1, 3, 12, 12), 10, (5, 5), (1, 1), (2, 2, 2, 2), 1),
    ((1, 6, 11, 11), 7, (7, 7), (2, 2), (3, 3, 2, 2), 1),      # 7x7 stem-like, odd pads
    ((1, 4, 6, 6), 4, (2, 3), (1, 2), (1, 0, 0, 2), 1),        # non-square
]


def conv_case(shape, oc, k, s, pads, g, seed=0, name="c"):
    rng = np.random.default_rng(seed)
    layer = Conv2d(name, shape, oc, k, s, pads, g, Requant(7, 0, 127))
    x = rng.integers(-128, 128, shape).astype(np.int8)
    w = rng.integers(-128, 128, (oc, shape[1] // g) + k).astype(np.int8)
    b = rng.integers(-2000, 2000, oc).astype(np.int32)
    return layer, x, w, b


@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c[0])) + f"k{c[2][0]}")
def test_conv_every_tile_is_bit_exact(preset, case):
    layer, x, w, b = conv_case(*case)
    want = conv2d(layer, x, w, b)
    tiles = [eq5_tile(layer, preset)] + conv_candidates(layer, preset)[:8]
    for t in tiles:
        got, program, counters = run_lowered(
            preset, lambda ctx, m, y: ctx.conv(layer, m["x"], [y], w, b, tile=t), {"x": x},
            layer.out_shape)
        np.testing.assert_array_equal(got, want, err_msg=f"{preset.name} {t}")
        assert counters.macs >= layer.macs


def test_eq5_tile_is_the_papers_and_fits():
    cfg = PRESETS["zu2"]
    layer = Conv2d("c", (1, 256, 56, 56), 256, (3, 3), (1, 1), (1, 1, 1, 1))
    t = eq5_tile(layer, cfg)
    assert (t.th, t.toc, t.tic) == (cfg.h_p, cfg.oc_p, cfg.ic_p) and t.tw == 56
    assert conv_fit(layer, t, cfg) is None
    # the search keeps eq. 5 unless the cycle model times something faster
    chosen = choose_conv_tile(layer, cfg)
    assert conv_fit(layer, chosen, cfg) is None


def test_a_config_no_tile_fits_is_refused_naming_the_buffer():
    cfg = PRESETS["test"].with_(wgt_buf_bytes=64)
    layer = Conv2d("big", (1, 4, 16, 16), 4, (7, 7), (1, 1), (3, 3, 3, 3))
    with pytest.raises(TargetError, match="'big'.*weight buffer"):
        eq5_tile(layer, cfg)


@pytest.mark.parametrize("pool", [
    Pool2d("p", "max", (1, 6, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1)),
    Pool2d("p", "avg", (2, 5, 8, 8), (2, 2), (2, 2)),
    Pool2d("p", "max", (1, 40, 13, 13), (3, 3), (1, 1), (1, 1, 1, 1)),
    Pool2d("p", "max", (1, 3, 7, 7), (3, 3), (2, 2), (0, 0, 1, 1)),   # ceil_mode as padding
], ids=["max3s2", "avg2", "max-wide", "max-ceil"])
def test_pool_bit_exact(preset, pool):
    x = np.random.default_rng(1).integers(-128, 128, pool.in_shape).astype(np.int8)
    got, _, _ = run_lowered(preset, lambda ctx, m, y: ctx.pool(pool, m["x"], [y]), {"x": x},
                            pool.out_shape)
    np.testing.assert_array_equal(got, pool2d(pool, x))


def test_add_and_requantize_bit_exact(preset):
    rng = np.random.default_rng(2)
    add = ResidualAdd("a", (1, 40, 13, 13), 1, 0, 1, 0, 127)
    a = rng.integers(-128, 128, add.shape).astype(np.int8)
    b = rng.integers(-128, 128, add.shape).astype(np.int8)
    got, _, _ = run_lowered(preset, lambda ctx, m, y: ctx.add(add, m["a"], m["b"], [y]),
                            {"a": a, "b": b}, add.shape)
    np.testing.assert_array_equal(got, residual_add(add, a, b))
    rq = RequantizeLayer("r", (1, 9, 5, 5), Requant(2, -3, 90))
    got, _, _ = run_lowered(preset, lambda ctx, m, y: ctx.requantize(rq, m["a"], [y]),
                            {"a": a[:, :9, :5, :5].copy()}, rq.shape)
    np.testing.assert_array_equal(got, requantize(rq, a[:, :9, :5, :5]))


def test_concat_is_saves_into_place_not_a_copy(preset):
    """Two convs saving into channel slices of one map: the result is their concatenation,
    and the stream has no instruction but the convs' own."""
    l1, x, w1, b1 = conv_case((1, 5, 6, 6), 6, (3, 3), (1, 1), (1, 1, 1, 1), 1, seed=3, name="c1")
    l2, _, w2, b2 = conv_case((1, 5, 6, 6), 3, (1, 1), (1, 1), (0, 0, 0, 0), 1, seed=4, name="c2")

    def build(ctx, m, y):
        ctx.conv(l1, m["x"], [y.channels(0, 6)], w1, b1)
        ctx.conv(l2, m["x"], [y.channels(6, 3)], w2, b2)

    got, program, _ = run_lowered(preset, build, {"x": x}, (1, 9, 6, 6))
    want = np.concatenate([conv2d(l1, x, w1, b1), conv2d(l2, x, w2, b2)], axis=1)
    np.testing.assert_array_equal(got, want)
    assert [name for name, _, _ in program.layers] == ["c1", "c2"]


def test_tile_search_off_keeps_eq5_and_the_search_never_loses_to_it():
    from retarget.targets.dnnvm.lower import time_conv
    layer = Conv2d("c", (1, 64, 28, 28), 128, (3, 3), (1, 1), (1, 1, 1, 1))
    cfg = PRESETS["zu2"]
    assert choose_conv_tile(layer, cfg.with_(tile_search=False)) == eq5_tile(layer, cfg)
    chosen = choose_conv_tile(layer, cfg)
    assert time_conv(layer, chosen, cfg) <= time_conv(layer, eq5_tile(layer, cfg), cfg)


def test_a_pool_no_tile_fits_is_refused_naming_the_buffer():
    from retarget.targets.dnnvm.lower import Lowering
    cfg = PRESETS["test"].with_(inp_buf_bytes=64)
    ctx = Lowering(cfg)
    pool = Pool2d("p", "max", (1, 4, 16, 16), (7, 7), (1, 1), (3, 3, 3, 3))
    with pytest.raises(TargetError, match="pool 'p'.*input buffer slot"):
        ctx.pool(pool, ctx.input("x", pool.in_shape), [ctx.feature_map("y", pool.out_shape)])


ESTIMATED = CONVS + [((1, 32, 28, 28), 64, (3, 3), (1, 1), (1, 1, 1, 1), 1),
                     ((1, 3, 56, 56), 16, (7, 7), (2, 2), (3, 3, 3, 3), 1),
                     ((1, 96, 14, 14), 192, (1, 1), (2, 2), (0, 0, 0, 0), 1)]


@pytest.mark.parametrize("case", ESTIMATED, ids=lambda c: "x".join(map(str, c[0])) + f"k{c[2][0]}")
def test_the_closed_form_estimate_tracks_the_cycle_model(case):
    """choose_conv_tile skips the full model when the estimate puts eq. 5 more than
    JUDGE_GAP behind the best candidate: then the full model must agree that it is behind,
    and the estimate must stay near the full model for the ranking to mean anything."""
    from retarget.targets.accel.tile_search import rank
    from retarget.targets.dnnvm.lower import JUDGE_GAP, conv_estimate, time_conv
    layer = conv_case(*case)[0]
    for cfg in (PRESETS["zu2"], PRESETS["test"]):
        base = eq5_tile(layer, cfg)
        est, best = rank(conv_candidates(layer, cfg), lambda t: conv_estimate(layer, t, cfg),
                         keep=1)[0]
        true5, trueb = time_conv(layer, base, cfg), time_conv(layer, best, cfg)
        for t, true in ((base, true5), (best, trueb)):
            assert 0.75 < conv_estimate(layer, t, cfg) / true < 1.5, (cfg.name, t)
        if conv_estimate(layer, base, cfg) > JUDGE_GAP * est:
            assert true5 > trueb, (cfg.name, base, best)

"""Hypothesis: random small convolutions and pools (shapes, strides, kernels, pads, channels,
groups, schedules, threads) lowered and simulated equal the op-table reference."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retarget.targets.vta.config import preset
from retarget.targets.vta.lower import (Conv2d, Pool2d, Requant, candidates, lower_conv2d,
                                        lower_pool2d, reason, reference)

from .conftest import run_one

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def conv_layers(draw):
    k = draw(st.integers(1, 7))
    pads = tuple(draw(st.integers(0, k - 1)) for _ in range(4))
    s = draw(st.integers(1, 3))
    h, w = (draw(st.integers(max(1, k - pads[0] - pads[2]), 10)),
            draw(st.integers(max(1, k - pads[1] - pads[3]), 10)))
    depthwise = draw(st.booleans()) and k <= 5
    ci = draw(st.integers(1, 40))
    co = ci if depthwise else draw(st.integers(1, 40))
    n = draw(st.integers(1, 2))
    shift = draw(st.one_of(st.integers(-3, 20), st.tuples(*[st.integers(-2, 16)] * co)))
    lo = draw(st.integers(-128, 0))
    req = Requant(shift, lo, draw(st.integers(lo, 127)))
    layer = Conv2d("c", (n, ci, h, w), co, (k, k), (s, s), pads, ci if depthwise else 1, req)
    return layer, draw(st.sampled_from(["pynq", "1x32", "2x16"])), draw(st.integers(0, 10 ** 6))


@SETTINGS
@given(conv_layers(), st.data())
def test_random_conv(case, data):
    layer, cfg, seed = case
    assert reason(layer, preset(cfg)) is None, reason(layer, preset(cfg))
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, layer.in_shape).astype(np.int8)
    w = rng.integers(-128, 128, (layer.out_channels, layer.in_shape[1] // layer.groups)
                     + layer.kernel).astype(np.int8)
    b = rng.integers(-(1 << 12), 1 << 12, layer.out_channels).astype(np.int32)
    v = data.draw(st.integers(1, 2))
    sched = data.draw(st.sampled_from(candidates(layer, preset(cfg), v)))
    # a random smaller tiling too, to exercise border tiles and reduction phases
    sched = type(sched)(sched.tile_n, data.draw(st.integers(1, sched.tile_h)),
                        data.draw(st.integers(1, sched.tile_w)), sched.tile_co,
                        sched.tile_ci, v)
    got, _, _ = run_one(cfg, lower_conv2d, layer, [x], consts=(w, b), schedule=sched)
    np.testing.assert_array_equal(got, reference(layer, x, w, b))


@SETTINGS
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 40), st.integers(0, 10 ** 6), st.booleans(), st.data())
def test_random_pool(kh, kw, sh, sw, c, seed, is_max, data):
    if not is_max:      # power-of-two windows only for the average
        kh, kw = data.draw(st.sampled_from([(1, 1), (1, 2), (2, 2), (2, 4), (4, 4), (4, 2)]))
    pads = (data.draw(st.integers(0, kh - 1)), data.draw(st.integers(0, kw - 1)),
            data.draw(st.integers(0, kh - 1)), data.draw(st.integers(0, kw - 1)))
    h = data.draw(st.integers(max(1, kh - pads[0] - pads[2]), 9))
    w = data.draw(st.integers(max(1, kw - pads[1] - pads[3]), 9))
    layer = Pool2d("p", "max" if is_max else "avg", (1, c, h, w), (kh, kw), (sh, sw), pads)
    x = np.random.default_rng(seed).integers(-128, 128, layer.in_shape).astype(np.int8)
    cfg = data.draw(st.sampled_from(["pynq", "2x16"]))
    got, _, _ = run_one(cfg, lower_pool2d, layer, [x], vthreads=data.draw(st.integers(1, 2)))
    np.testing.assert_array_equal(got, reference(layer, x))

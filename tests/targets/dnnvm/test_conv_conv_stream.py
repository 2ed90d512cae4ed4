"""CONV -> CONV with streamed weights: a pair whose two convs' weights do not fit the
weight buffer at once is fused with both convs' weights streamed through the two weight slots
(each chunk of the first conv's per intermediate chunk, each output chunk of the second conv's
for every intermediate chunk at once, stored chunk-major), the second conv's output chunks
taking turns in two places. The search only offers it as one tile covering the map with the
whole output buffer, so every weight is loaded once, as alone. Bit-exact against the unfused
references with forced small buffers, forced multi-tile streamed tiles, groups in a row (the
second group starting on the other output slot), and resnet50 compiled with fusion optimized;
pairs whose weights fit keep their resident lowering unchanged."""
from dataclasses import replace

import numpy as np
import pytest

import retarget
from retarget.passes.partition import partition
from retarget.targets.accel.layers import Conv2d, Requant, ResidualAdd
from retarget.targets.accel.reference import conv2d, residual_add
from retarget.ops.reference import run_graph
from retarget.targets.dnnvm.config import PRESETS
from retarget.targets.dnnvm.fusion import GroupCosts
from retarget.targets.dnnvm.lower import (ConvConvTile, Lowering, choose_conv_conv_tile,
                                          conv_conv_candidates, conv_conv_fit,
                                          conv_conv_resident)
from retarget.targets.dnnvm.sim import Simulator
from retarget.targets.registry import get_target

from .conftest import build_graph, nhwc, run_lowered, samples
from .test_conv_conv import PAIRS, pair

# the test preset with a weight buffer too small for both convs of every pair at once, an
# output buffer large enough for a whole map
SMALL = replace(PRESETS["test"], wgt_buf_bytes=1024, out_buf_bytes=8 * 1024)
STREAMED = ["1x1-3x3", "3x3-5x5-batch2", "1x1-3x3s2-nopad", "3x3s2-3x3s2", "dw3x3-1x1"]
FORCED = [ConvConvTile(1, 1, 1, 1, 1, True), ConvConvTile(2, 3, 2, 3, 2, True),
          ConvConvTile(3, 2, 4, 4, 3, True), ConvConvTile(2, 4, 3, 5, 4, True)]


def _tiny_weights(cfg, l1, l2):
    """`cfg` with a weight buffer that holds neither pair at once (but a chunk of each)."""
    need = l1.out_channels * l1.kernel[0] * l1.kernel[1] * \
        (1 if l1.groups > 1 else l1.in_shape[1]) + \
        l2.out_channels * l2.kernel[0] * l2.kernel[1] * l1.out_channels
    return replace(cfg, wgt_buf_bytes=min(cfg.wgt_buf_bytes, (need - 1) // 16 * 16))


@pytest.mark.parametrize("name", STREAMED)
def test_streamed_pair_bit_exact(name):
    l1, l2, (w1, b1, w2, b2), x = pair(*PAIRS[name])
    cfg = _tiny_weights(SMALL, l1, l2)
    assert conv_conv_resident(l1, l2, cfg) is not None
    want = conv2d(l2, conv2d(l1, x, w1, b1), w2, b2)
    tiles = list(FORCED)
    if l1.in_shape[0] == 1:
        chosen = choose_conv_conv_tile(l1, l2, cfg)
        assert chosen.stream and chosen.whole
        tiles.append(None)
    ran = 0
    for t in tiles:
        if t is not None and conv_conv_fit(l1, l2, t, cfg):
            continue
        got, program, counters = run_lowered(
            cfg, lambda ctx, m, out: ctx.conv_conv(l1, m["x"], w1, b1, l2, w2, b2, [out],
                                                   tile=t),
            {"x": x}, l2.out_shape)
        np.testing.assert_array_equal(got, want, err_msg=f"{name} tile {t}")
        assert counters.save_bytes == want.size          # the intermediate stays on chip
        if t is None:                                   # one tile: each weight loaded once
            assert counters.load_bytes["wgt"] == w1.size + w2.size
            assert counters.load_bytes["bias"] == 4 * (b1.size + b2.size)
        ran += 1
    assert ran >= 2


@pytest.mark.parametrize("conv_is_a", [True, False])
@pytest.mark.parametrize("name", ["3x3-1x1", "1x1-3x3", "3x3s2-3x3s2"])
def test_streamed_pair_with_add_bit_exact(name, conv_is_a):
    l1, l2, (w1, b1, w2, b2), x = pair(*PAIRS[name])
    cfg = _tiny_weights(SMALL, l1, l2)
    assert conv_conv_resident(l1, l2, cfg) is not None
    other = np.random.default_rng(5).integers(-128, 128, l2.out_shape).astype(np.int8)
    add = ResidualAdd("add", l2.out_shape, 1, 0, 1, 0, 127)
    y = conv2d(l2, conv2d(l1, x, w1, b1), w2, b2)
    want = residual_add(add, y, other) if conv_is_a else residual_add(add, other, y)
    ran = 0
    for t in [None] + FORCED:
        if t is not None and conv_conv_fit(l1, l2, t, cfg, True):
            continue
        got, program, counters = run_lowered(
            cfg, lambda ctx, m, out: ctx.conv_conv(l1, m["x"], w1, b1, l2, w2, b2, [out],
                                                   tile=t, add=add, other=m["r"],
                                                   conv_is_a=conv_is_a),
            {"x": x, "r": other}, l2.out_shape)
        np.testing.assert_array_equal(got, want, err_msg=f"{name} tile {t}")
        assert counters.save_bytes == want.size
        ran += 1
    assert ran >= 2


def test_streamed_groups_in_a_row_on_either_output_slot():
    """Three streamed whole-buffer groups and a plain conv in one stream: the second group
    starts on the other output slot, and every group waits for the one before it."""
    l1, l2, (w1, b1, w2, b2), x = pair(*PAIRS["1x1-3x3"])
    cfg = _tiny_weights(SMALL, l1, l2)
    rng = np.random.default_rng(3)
    l3 = Conv2d("c", l2.out_shape, 10, (1, 1), requant=Requant(8, -128, 127))
    w3 = rng.integers(-128, 128, (10, l2.out_channels, 1, 1)).astype(np.int8)
    b3 = rng.integers(-3000, 3000, 10).astype(np.int32)
    ctx = Lowering(cfg)
    xm = ctx.input("x", x.shape)
    ys = [ctx.feature_map(f"y{k}", l2.out_shape) for k in range(3)]
    z = ctx.feature_map("z", l3.out_shape)
    tiles = [ctx.conv_conv(replace(l1, name=f"a{k}"), xm, w1, b1, replace(l2, name=f"b{k}"),
                           w2, b2, [ys[k]]) for k in range(3)]
    ctx.conv(l3, ys[2], [z], w3, b3)
    program = ctx.finish()
    assert all(t.stream and t.whole for t in tiles)
    img = program.dram_image({**ctx.constants, "x": nhwc(x)})
    Simulator(cfg, img).run(program.insns)
    y = conv2d(l2, conv2d(l1, x, w1, b1), w2, b2)
    for k in range(3):
        np.testing.assert_array_equal(program.read(img, f"y{k}").transpose(0, 3, 1, 2), y)
    np.testing.assert_array_equal(program.read(img, "z").transpose(0, 3, 1, 2),
                                  conv2d(l3, y, w3, b3))


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_pairs_that_fit_keep_resident_weights(preset, name):
    """Where both convs' weights fit, no streamed tile is offered: the lowering is as before."""
    l1, l2, _, _ = pair(*PAIRS[name])
    cfg = PRESETS[preset]
    if conv_conv_resident(l1, l2, cfg) is None:
        assert not any(t.stream for t in conv_conv_candidates(l1, l2, cfg))
        assert not choose_conv_conv_tile(l1, l2, cfg).stream


def test_search_cost_of_a_streamed_group_is_its_cycle_model():
    g = build_graph("resnet50")
    target = get_target("dnnvm:test")
    m = retarget.compile(g, "dnnvm:test", calibration=samples(g), fusion="none")
    fg = target.fusion_graph(partition(m.graph, target).offloaded[0])
    costs = GroupCosts(target.config)
    streamed = 0
    for k, v in enumerate(fg.vertices):
        for s in fg.succ[k] if v.type == "conv" else ():
            if fg.vertices[s].type == "conv" and (k, s) and \
                    conv_conv_resident(v.attrs["layer"], fg.vertices[s].attrs["layer"],
                                       target.config):
                c = costs(fg, (k, s))
                streamed += c is not None
                assert c is None or c > 0
    assert streamed
    m.close()


@pytest.mark.parametrize("preset_name", ["zu2", "test"])
def test_resnet50_bit_exact_with_streamed_groups(preset_name):
    g = build_graph("resnet50")
    target = get_target(f"dnnvm:{preset_name}")
    m = retarget.compile(g, f"dnnvm:{preset_name}", calibration=samples(g, 2),
                         fusion="optimized")
    x = samples(g, seed=7)[0]
    got, want = m.run(x), run_graph(m.graph, x)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    chained = [f for f in m.report.fused if f.template in ("conv_conv", "conv_conv_add")]
    assert chained and all(f.cycles <= f.alone_cycles for f in chained)
    if preset_name == "test":               # some chosen pairs stream their weights
        fg = target.fusion_graph(partition(m.graph, target).offloaded[0])
        layer = {v.name: v.attrs.get("layer") for v in fg.vertices}
        assert any(conv_conv_resident(layer[f.members[0]], layer[f.members[1]],
                                      target.config) for f in chained)
    m.close()

"""Fused groups lowered as one unit: conv -> add, conv -> pool, horizontally fused convs,
bit-exact against the unfused references on every preset, and never more DDR traffic."""
import numpy as np
import pytest

from retarget.targets.accel.layers import Conv2d, Pool2d, Requant, ResidualAdd
from retarget.targets.accel.reference import conv2d, pool2d, residual_add
from retarget.targets.dnnvm.config import PRESETS
from retarget.targets.dnnvm.lower import ConvHead

from .conftest import run_lowered


def conv_case(name, shape, oc, k, s=(1, 1), pads=(0, 0, 0, 0), seed=0):
    rng = np.random.default_rng(seed)
    layer = Conv2d(name, shape, oc, k, s, pads, 1, Requant(7, -128, 127))
    w = rng.integers(-128, 128, (oc, shape[1]) + k).astype(np.int8)
    b = rng.integers(-3000, 3000, oc).astype(np.int32)
    return layer, w, b


@pytest.mark.parametrize("conv_is_a", [True, False])
def test_conv_add_bit_exact(preset, conv_is_a):
    rng = np.random.default_rng(1)
    layer, w, b = conv_case("c", (1, 6, 9, 9), 10, (3, 3), pads=(1, 1, 1, 1))
    x = rng.integers(-128, 128, layer.in_shape).astype(np.int8)
    other = rng.integers(-128, 128, layer.out_shape).astype(np.int8)
    add = ResidualAdd("add", layer.out_shape, 1, 0, 1, 0, 127)
    y = conv2d(layer, x, w, b)
    want = residual_add(add, y, other) if conv_is_a else residual_add(add, other, y)
    got, program, counters = run_lowered(
        preset, lambda ctx, m, out: ctx.conv_add(layer, m["x"], w, b, add, m["r"], conv_is_a,
                                                 [out]),
        {"x": x, "r": other}, layer.out_shape)
    np.testing.assert_array_equal(got, want)
    assert [name for name, _, _ in program.layers] == ["c + add"]
    # the conv's result never leaves the chip: one save of the sum
    assert counters.save_bytes == other.size


@pytest.mark.parametrize("pool", [
    Pool2d("p", "max", (1, 10, 12, 12), (2, 2), (2, 2)),
    Pool2d("p", "max", (1, 10, 12, 12), (3, 3), (2, 2), (1, 1, 1, 1)),
    Pool2d("p", "max", (1, 10, 12, 12), (3, 3), (1, 1), (1, 1, 1, 1)),
    Pool2d("p", "max", (1, 10, 12, 12), (3, 3), (2, 2), (0, 0, 1, 1)),   # ceil_mode's padding
    Pool2d("p", "avg", (1, 10, 12, 12), (2, 2), (2, 2)),
], ids=["2s2", "3s2p1", "3s1p1", "3s2-ceil", "avg2s2"])
def test_conv_pool_bit_exact(preset, pool):
    rng = np.random.default_rng(2)
    layer, w, b = conv_case("c", (1, 5, 12, 12), 10, (3, 3), pads=(1, 1, 1, 1))
    x = rng.integers(-128, 128, layer.in_shape).astype(np.int8)
    want = pool2d(pool, conv2d(layer, x, w, b))
    got, program, counters = run_lowered(
        preset, lambda ctx, m, out: ctx.conv_pool(layer, m["x"], w, b, pool, [out]),
        {"x": x}, pool.out_shape)
    np.testing.assert_array_equal(got, want)
    assert counters.save_bytes == want.size                 # only the pooled map is saved


def test_horizontal_convs_load_their_input_once(preset):
    rng = np.random.default_rng(3)
    heads = [conv_case(f"c{i}", (1, 8, 7, 7), oc, (1, 1), seed=i) for i, oc in
             enumerate((6, 4, 9))]
    x = rng.integers(-128, 128, (1, 8, 7, 7)).astype(np.int8)
    wants = [conv2d(layer, x, w, b) for layer, w, b in heads]

    def build(ctx, m, out):
        outs = [out.channels(0, 6), out.channels(6, 4), out.channels(10, 9)]
        ctx.conv_group([ConvHead(layer, (o,), w, b) for (layer, w, b), o in zip(heads, outs)],
                       m["x"])

    got, program, counters = run_lowered(preset, build, {"x": x}, (1, 19, 7, 7))
    np.testing.assert_array_equal(got, np.concatenate(wants, axis=1))

    def separate(ctx, m, out):
        for (layer, w, b), o in zip(heads, [out.channels(0, 6), out.channels(6, 4),
                                            out.channels(10, 9)]):
            ctx.conv(layer, m["x"], [o], w, b)

    _, _, alone = run_lowered(preset, separate, {"x": x}, (1, 19, 7, 7))
    assert counters.load_bytes["in"] <= alone.load_bytes["in"]


@pytest.mark.parametrize("shape,kernel,pads", [((1, 8, 7, 7), (3, 3), (1, 1, 1, 1)),
                                               ((1, 40, 12, 9), (5, 5), (2, 2, 2, 2)),
                                               ((2, 20, 6, 5), (3, 3), (0, 0, 2, 2))])
def test_convs_and_a_pool_share_their_input_tiles(preset, shape, kernel, pads):
    """An Inception module's branches: 1x1 convs and a stride-1 pool keeping the map's size
    read one input; bit-exact, the input loaded once, the pool's halo rows with the convs'
    rows (tiles, chunks and bands of rows that the small preset forces included)."""
    rng = np.random.default_rng(5)
    c = shape[1]
    heads = [conv_case(f"c{i}", shape, oc, (1, 1), seed=i) for i, oc in enumerate((6, 4, 9))]
    pool = Pool2d("p", "max", shape, kernel, (1, 1), pads)
    assert pool.out_shape == shape
    x = rng.integers(-128, 128, shape).astype(np.int8)
    want = np.concatenate([conv2d(layer, x, w, b) for layer, w, b in heads]
                          + [pool2d(pool, x)], axis=1)
    split = [(0, 6), (6, 4), (10, 9), (19, c)]

    def build(ctx, m, out):
        outs = [out.channels(c0, n) for c0, n in split]
        ctx.conv_pool_group([ConvHead(layer, (o,), w, b)
                             for (layer, w, b), o in zip(heads, outs)], pool, [outs[-1]], m["x"])

    got, program, counters = run_lowered(preset, build, {"x": x}, (shape[0], 19 + c)
                                         + shape[2:])
    np.testing.assert_array_equal(got, want)
    assert [name for name, _, _ in program.layers] == ["c0 + c1 + c2 + p"]

    def separate(ctx, m, out):
        for (layer, w, b), o in zip(heads, [out.channels(c0, n) for c0, n in split]):
            ctx.conv(layer, m["x"], [o], w, b)
        ctx.pool(pool, m["x"], [out.channels(19, c)])

    _, _, alone = run_lowered(preset, separate, {"x": x}, (shape[0], 19 + c) + shape[2:])
    assert counters.load_bytes["in"] < alone.load_bytes["in"]


def test_a_pool_group_refuses_what_cannot_share_tiles():
    from retarget.errors import TargetError
    from retarget.targets.dnnvm.lower import Lowering
    layer, w, b = conv_case("c", (1, 8, 7, 7), 4, (3, 3), pads=(1, 1, 1, 1))
    pool = Pool2d("p", "max", (1, 8, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1))
    ctx = Lowering(PRESETS["zu2"])
    x = ctx.input("x", (1, 8, 7, 7))
    with pytest.raises(TargetError, match="'c' \\+ pool 'p': the convs are not dense 1x1"):
        ctx.conv_pool_group([ConvHead(layer, (ctx.feature_map("y", layer.out_shape),), w, b)],
                            pool, [ctx.feature_map("p", pool.out_shape)], x)
    strided = Pool2d("p", "max", (1, 8, 7, 7), (3, 3), (2, 2), (1, 1, 1, 1))
    one, w1, b1 = conv_case("c", (1, 8, 7, 7), 4, (1, 1))
    with pytest.raises(TargetError, match="does not keep the map's size at stride 1"):
        ctx.conv_pool_group([ConvHead(one, (ctx.feature_map("y2", one.out_shape),), w1, b1)],
                            strided, [ctx.feature_map("p2", strided.out_shape)], x)


def test_compile_fusion_choices_and_report():
    import retarget
    from retarget.errors import TargetError

    from .conftest import build_graph, samples
    g = build_graph("resnet18")
    m = retarget.compile(g, "dnnvm:zu2", calibration=samples(g))     # default: optimized
    assert m.report.fusion == "optimized" and m.report.fused
    assert all(grp.cycles < grp.alone_cycles for grp in m.report.fused)
    text = m.report.table()
    assert "fused groups (fusion=optimized" in text and "conv_add" in text
    with pytest.raises(TargetError, match="fusion='fastest'; choose one of none, greedy"):
        retarget.compile(g, "dnnvm:zu2", calibration=samples(g), fusion="fastest")
    with pytest.raises(TargetError, match="target 'vta' declares no fusion templates"):
        retarget.compile(g, "vta", calibration=samples(g), fusion="optimized")
    m = retarget.compile(g, "vta", calibration=samples(g))           # no templates: none
    assert m.report.fusion == "none" and not m.report.fused

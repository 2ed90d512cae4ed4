"""The CONV -> CONV vertical fusion: the first conv's int8 result kept in the output
buffer, the second conv reading it from there (CONV in_buf=OUT, its border padding as the
CONV's own zero rows / columns), only the second conv's result saved; with a residual add
fused after it (conv_conv_add). Bit-exact against the unfused references on every preset,
forced tiles that cut every dimension, the target's buffer-fit check, the ISA fields, and small
zoo networks compiled with fusion optimized and greedy."""
import numpy as np
import pytest

import retarget
from retarget.errors import TargetError
from retarget.passes.fusion import find_embeddings
from retarget.passes.partition import partition
from retarget.targets.accel.layers import Conv2d, Requant, ResidualAdd
from retarget.targets.accel.reference import conv2d, residual_add
from retarget.targets.accel.sim_errors import SimulationError
from retarget.ops.reference import run_graph
from retarget.targets.dnnvm.config import PRESETS
from retarget.targets.dnnvm.fusion import GroupCosts
from retarget.targets.dnnvm.isa import Buf, Conv, decode_insn, encode_insn
from retarget.targets.dnnvm.lower import (ConvConvTile, Lowering, conv_conv_fit,
                                          choose_conv_conv_tile)
from retarget.targets.dnnvm.sim import Simulator
from retarget.targets.registry import get_target

from .conftest import build_graph, run_lowered, samples

# (input NCHW, c1, k1, s1, pads1, c2, k2, s2, pads2, groups1)
PAIRS = {
    "1x1-3x3": ((1, 8, 9, 9), 10, (1, 1), (1, 1), (0, 0, 0, 0), 12, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    "3x3-1x1": ((1, 6, 11, 10), 9, (3, 3), (1, 1), (1, 1, 1, 1), 7, (1, 1), (1, 1), (0, 0, 0, 0), 1),
    "3x3s2-3x3s2": ((1, 5, 12, 12), 8, (3, 3), (2, 2), (1, 0, 1, 0), 6, (3, 3), (2, 2), (1, 1, 1, 1),
                    1),
    "dw3x3-1x1": ((1, 6, 9, 9), 6, (3, 3), (1, 1), (1, 1, 1, 1), 5, (1, 1), (1, 1), (0, 0, 0, 0), 6),
    "3x3-5x5-batch2": ((2, 7, 10, 9), 9, (3, 3), (1, 1), (1, 1, 1, 1), 5, (5, 5), (1, 1),
                       (2, 2, 2, 2), 1),
    "1x1-3x3s2-nopad": ((1, 9, 13, 11), 11, (1, 1), (1, 1), (0, 0, 0, 0), 13, (3, 3), (2, 1),
                        (0, 1, 0, 0), 1),
}
TILES = [None, ConvConvTile(1, 1, 1, 1, 1), ConvConvTile(2, 3, 2, 3, 2),
         ConvConvTile(3, 2, 4, 4, 3)]


def pair(shape, c1, k1, s1, p1, c2, k2, s2, p2, groups1, seed=0):
    rng = np.random.default_rng(seed)
    l1 = Conv2d("a", shape, c1, k1, s1, p1, groups1, Requant(9, 0, 127))
    l2 = Conv2d("b", l1.out_shape, c2, k2, s2, p2, 1, Requant(8, -128, 127))
    w1 = rng.integers(-128, 128, (c1, 1 if groups1 > 1 else shape[1]) + k1).astype(np.int8)
    b1 = rng.integers(-3000, 3000, c1).astype(np.int32)
    w2 = rng.integers(-128, 128, (c2, c1) + k2).astype(np.int8)
    b2 = rng.integers(-3000, 3000, c2).astype(np.int32)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    return l1, l2, (w1, b1, w2, b2), x


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_conv_conv_bit_exact(preset, name):
    l1, l2, (w1, b1, w2, b2), x = pair(*PAIRS[name])
    want = conv2d(l2, conv2d(l1, x, w1, b1), w2, b2)
    for t in TILES if preset.name == "test" else TILES[:1]:
        got, program, counters = run_lowered(
            preset, lambda ctx, m, out: ctx.conv_conv(l1, m["x"], w1, b1, l2, w2, b2, [out],
                                                      tile=t),
            {"x": x}, l2.out_shape)
        np.testing.assert_array_equal(got, want, err_msg=f"{name} tile {t}")
        assert [n for n, _, _ in program.layers] == ["a + b"]
        # the intermediate never goes to DDR: one save of the second conv's result
        assert counters.save_bytes == want.size
        # ... nor loaded: it has no DDR buffer; the second conv reads it from OUT
        assert set(program.buffers) == {"x", "y", "a/w", "a/b", "b/w", "b/b"}
        assert any(isinstance(i, Conv) and i.in_buf == Buf.OUT for i in program.insns)


@pytest.mark.parametrize("conv_is_a", [True, False])
@pytest.mark.parametrize("name", ["3x3-1x1", "1x1-3x3", "3x3s2-3x3s2"])
def test_conv_conv_add_bit_exact(preset, name, conv_is_a):
    l1, l2, (w1, b1, w2, b2), x = pair(*PAIRS[name])
    other = np.random.default_rng(5).integers(-128, 128, l2.out_shape).astype(np.int8)
    add = ResidualAdd("add", l2.out_shape, 1, 0, 1, 0, 127)
    y = conv2d(l2, conv2d(l1, x, w1, b1), w2, b2)
    want = residual_add(add, y, other) if conv_is_a else residual_add(add, other, y)
    for t in TILES[:3] if preset.name == "test" else TILES[:1]:
        got, program, counters = run_lowered(
            preset, lambda ctx, m, out: ctx.conv_conv(l1, m["x"], w1, b1, l2, w2, b2, [out],
                                                      tile=t, add=add, other=m["r"],
                                                      conv_is_a=conv_is_a),
            {"x": x, "r": other}, l2.out_shape)
        np.testing.assert_array_equal(got, want, err_msg=f"{name} tile {t}")
        assert [n for n, _, _ in program.layers] == ["a + b + add"]
        assert counters.save_bytes == want.size


def test_weights_stay_resident_and_are_loaded_once():
    cfg = PRESETS["zu2"]
    l1, l2, (w1, b1, w2, b2), x = pair(*PAIRS["1x1-3x3"])
    _, _, counters = run_lowered(
        cfg, lambda ctx, m, out: ctx.conv_conv(l1, m["x"], w1, b1, l2, w2, b2, [out],
                                               tile=ConvConvTile(2, 3, 4, 4, 8)),
        {"x": x}, l2.out_shape)
    assert counters.load_bytes["wgt"] == w1.size + w2.size
    assert counters.load_bytes["bias"] == 4 * (b1.size + b2.size)


def test_buffer_fit_is_the_targets_check():
    cfg = PRESETS["test"]                       # 4 KiB weight buffer
    l1 = Conv2d("a", (1, 32, 8, 8), 32, (3, 3), (1, 1), (1, 1, 1, 1), 1, Requant(8, -128, 127))
    l2 = Conv2d("b", l1.out_shape, 32, (3, 3), (1, 1), (1, 1, 1, 1), 1, Requant(8, -128, 127))
    why = conv_conv_fit(l1, l2, ConvConvTile(1, 1, 1, 1, 1), cfg)
    assert why and why.startswith("weight buffer")
    with pytest.raises(TargetError, match="no fused tile fits"):
        choose_conv_conv_tile(l1, l2, cfg)
    # a pair whose intermediate rows do not fit the output slot is refused the same way
    wide = Conv2d("c", (1, 2, 8, 40), 16, (1, 1), requant=Requant(8, -128, 127))
    nxt = Conv2d("d", wide.out_shape, 4, (3, 3), pads=(1, 1, 1, 1),
                 requant=Requant(8, -128, 127))
    assert conv_conv_fit(wide, nxt, ConvConvTile(1, 20, 4, 16, 2), cfg).startswith("output")
    assert conv_conv_fit(wide, nxt, ConvConvTile(1, 2, 4, 16, 2), cfg) is None
    assert conv_conv_fit(l1, l2, ConvConvTile(4, 8, 32, 32, 32), PRESETS["zu2"]) is None


def test_search_costs_conv_conv_and_refuses_what_does_not_fit():
    g = build_graph("resnet50")
    for preset in ("zu2", "test"):
        target = get_target(f"dnnvm:{preset}")
        m = retarget.compile(g, f"dnnvm:{preset}", calibration=samples(g), fusion="none")
        region = partition(m.graph, target).offloaded[0]
        fg = target.fusion_graph(region)
        found = {e.template.name: [] for e in find_embeddings(fg, target.fusion_templates)}
        for e in find_embeddings(fg, target.fusion_templates):
            found[e.template.name].append(e)
        assert found.get("conv_conv") and found.get("conv_conv_add")
        costs = GroupCosts(target.config)
        for e in found["conv_conv"] + found["conv_conv_add"]:
            c = costs(fg, e.group)
            assert c is None or c > 0
        m.close()


@pytest.mark.parametrize("fusion", ["optimized", "greedy"])
@pytest.mark.parametrize("name", ["resnet50", "googlenet"])
@pytest.mark.parametrize("preset_name", ["zu2", "test"])
def test_networks_bit_exact_with_conv_conv(name, fusion, preset_name):
    g = build_graph(name)
    m = retarget.compile(g, f"dnnvm:{preset_name}", calibration=samples(g, 2), fusion=fusion)
    x = samples(g, seed=7)[0]
    got, want = m.run(x), run_graph(m.graph, x)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    chained = [f for f in m.report.fused if f.template in ("conv_conv", "conv_conv_add")]
    # greedy always takes a pair; the search, on GoogLeNet at test size, finds none that pays
    if preset_name == "zu2" and (fusion == "greedy" or name == "resnet50"):
        assert chained, [f.template for f in m.report.fused]
    if fusion == "optimized":          # chosen only when it pays (additive model)
        assert all(f.cycles <= f.alone_cycles for f in chained)
    if name == "googlenet":            # the Inception branches with their pool, bit-exact
        assert any(f.template in ("horizontal3_pool", "horizontal2_pool")
                   for f in m.report.fused)
    m.close()


def test_conv_isa_fields_round_trip_and_default_encoding():
    plain = Conv(in_addr=64, wgt_addr=128, out_addr=256, kh=3, kw=3, in_h=6, in_w=6, ic=8,
                 out_h=4, out_w=4, oc=4)
    raw = encode_insn(plain)
    # the appended fields are zero by default: a stream that does not use them is unchanged
    assert int.from_bytes(raw, "little") >> 222 == 0
    fused = Conv(in_buf=int(Buf.OUT), in_addr=64, kh=3, kw=3, in_h=4, in_w=4, ic=8, out_h=4,
                 out_w=4, oc=4, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    assert decode_insn(encode_insn(fused)) == fused


def test_sim_refuses_a_conv_reading_its_own_accumulators():
    cfg = PRESETS["test"]
    ctx = Lowering(cfg)
    program = ctx.finish()
    bad = Conv(in_buf=int(Buf.OUT), in_addr=0, out_addr=8, kh=1, kw=1, in_h=2, in_w=2, ic=4,
               out_h=2, out_w=2, oc=4)
    sim = Simulator(cfg, program.dram_image())
    with pytest.raises(SimulationError, match="overlaps the accumulators"):
        sim.run([bad] + program.insns)


def test_stream_cost_sees_overlap_and_waits_for_what_a_unit_reads():
    """GroupCosts.stream lowers units as one stream: two branches reading the same input
    overlap (less than their costs alone), a unit reading another's output waits for it
    (more than the same units with fresh inputs), one unit alone costs its cost alone; and
    the cost caches ignore quantisation scales, which do not change the timing."""
    from dataclasses import replace

    from retarget.targets.accel.layers import Requant
    from retarget.targets.dnnvm.fusion import _anonymous, _Unit
    g = build_graph("resnet50")
    target = get_target("dnnvm:zu2")
    m = retarget.compile(g, "dnnvm:zu2", calibration=samples(g), fusion="none")
    fg = target.fusion_graph(partition(m.graph, target).offloaded[0])
    index = {v.name: i for i, v in enumerate(fg.vertices)}
    c1, c2, ds = (index[f"/layer1.0.{n}/Conv"] for n in ("conv1", "conv2", "downsample.0"))
    costs = GroupCosts(target.config)
    assert costs.stream(fg, [(c1,)]) == costs(fg, (c1,))
    assert costs.stream(fg, [(c1,), (ds,)]) < costs(fg, (c1,)) + costs(fg, (ds,))
    units = [_Unit.of(fg, (c1,)), _Unit.of(fg, (c2,))]
    wired = costs._timed([(units[0], ((-1, 0),)), (units[1], ((0, 0),))])
    fresh = costs._timed([(units[0], ((-1, 0),)), (units[1], ((-1, 0),))])
    assert wired == costs.stream(fg, [(c2,), (c1,)]) and wired > fresh
    conv = fg.vertices[c1].attrs["layer"]
    assert _anonymous(conv) == _anonymous(replace(conv, name="x", requant=Requant(3, 0, 127)))
    m.close()

"""Several layers lowered into one segment: each must get its own micro-op kernels.

The lowering caches micro-op kernels by a key of the tile parameters; two layers that share
tile sizes but differ in kernel size or stride once reused each other's micro-ops (found on
ResNet-18's downsample branch: a 1x1 stride-2 conv after a 3x3 stride-2 conv of the same input).
"""
import numpy as np
import pytest

from retarget.targets.vta.config import preset
from retarget.targets.vta.lower import (Conv2d, LoweringContext, Pool2d, Requant, lower_conv2d,
                                        lower_pool2d, run_segment)
from retarget.targets.vta.lower.reference import conv2d, reference

from .conftest import rand_int8

SHAPE = (1, 16, 8, 8)


def _run(cfg_name, build):
    ctx = LoweringContext(preset(cfg_name))
    x = ctx.input("x", SHAPE)
    outs = build(ctx, x)
    seg = ctx.finish(outs)
    xi = rand_int8(np.random.default_rng(3), SHAPE)
    run = run_segment(seg, {"x": xi})
    return xi, [run.outputs[t.buffer] for t in outs]


@pytest.mark.parametrize("cfg", ["pynq", "2x16"])
@pytest.mark.parametrize("order", ["3x3 first", "1x1 first"])
def test_two_convs_of_one_input_with_equal_tiles(cfg, order):
    rng = np.random.default_rng(0)
    req = Requant(4, -128, 127)
    a = Conv2d("a", SHAPE, 32, (3, 3), (2, 2), (1, 1, 1, 1), 1, req)
    b = Conv2d("b", SHAPE, 32, (1, 1), (2, 2), (0, 0, 0, 0), 1, req)
    layers = [(a, rand_int8(rng, (32, 16, 3, 3))), (b, rand_int8(rng, (32, 16, 1, 1)))]
    if order == "1x1 first":
        layers.reverse()
    xi, outs = _run(cfg, lambda ctx, x: [lower_conv2d(ctx, l, x, w) for l, w in layers])
    for (layer, w), got in zip(layers, outs):
        np.testing.assert_array_equal(got, conv2d(layer, xi, w), err_msg=layer.name)


def test_two_pools_of_one_input_with_other_strides():
    # 5x5/1 and 2x2/2 both map 8x8 to 4x4 from the same 8x8 input tile: only the stride differs.
    pools = [Pool2d("s2", "max", SHAPE, (2, 2), (2, 2)), Pool2d("s1", "max", SHAPE, (5, 5), (1, 1))]
    xi, outs = _run("pynq", lambda ctx, x: [lower_pool2d(ctx, p, x) for p in pools])
    for p, got in zip(pools, outs):
        np.testing.assert_array_equal(got, reference(p, xi), err_msg=p.name)

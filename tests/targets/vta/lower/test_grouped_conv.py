"""Grouped convolutions beyond depthwise on vta: groups whose channels do not fill whole blocks
run several at a time as block-diagonal weights (lower/layers.py conv_groups), bit-exact
against the integer reference on every preset; a grouping no merge can fit is refused with
the reason."""
import numpy as np
import pytest

from retarget.targets.vta.config import preset
from retarget.targets.vta.lower import Conv2d, Requant, conv_groups, lower_conv2d, reason, reference

from .conftest import CONFIGS, rand_int8, run_one

# (in channels, out channels, groups, kernel, stride): ResNeXt's 4 per group, RegNet's 8,
# a depthwise with channel multiplier 2, two groups of whole blocks, RegNet's odd 13 groups
# of 8 (the last merged group half padding) and 3 groups of 8 (refused on 1x32).
SHAPES = [(32, 32, 8, 3, 1), (64, 64, 16, 3, 2), (48, 96, 6, 3, 1), (32, 64, 4, 1, 1),
          (104, 104, 13, 3, 1), (24, 24, 3, 3, 1),
          (16, 32, 16, 3, 1), (64, 128, 2, 3, 1)]


def layer(cfg_name, c, o, g, k, s):
    batch = preset(cfg_name).batch
    return Conv2d("g", (batch, c, 6, 6), o, (k, k), (s, s), ((k - 1) // 2,) * 4, g,
                  Requant(6, 0, 127))


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("shape", SHAPES)
def test_grouped_conv_bit_exact(cfg_name, shape):
    L = layer(cfg_name, *shape)
    groups = conv_groups(L, preset(cfg_name))
    if isinstance(groups, str):
        assert reason(L, preset(cfg_name)) and "fills whole weight blocks" in groups
        return
    rng = np.random.default_rng(sum(shape))
    c, o, g = shape[:3]
    x, w = rand_int8(rng, L.in_shape), rand_int8(rng, (o, c // g, L.kernel[0], L.kernel[1]))
    b = rng.integers(-500, 500, o).astype(np.int32)
    got, seg, _ = run_one(cfg_name, lower_conv2d, L, [x], consts=(w, b))
    np.testing.assert_array_equal(got, reference(L, x, w, b))
    merged = groups[3]
    assert merged == 1 or any(f"merged {merged} at a time" in n for n in seg.reports[0].notes)


def test_merge_is_the_fewest_groups_that_fill_blocks():
    cfg = preset("pynq")
    assert conv_groups(layer("pynq", 128, 128, 32, 3, 1), cfg)[2:] == (False, 4)   # 4 per group
    assert conv_groups(layer("pynq", 64, 64, 8, 3, 1), cfg)[2:] == (False, 2)      # 8 per group
    assert conv_groups(layer("pynq", 64, 64, 4, 3, 1), cfg)[2:] == (False, 1)      # whole blocks
    assert conv_groups(layer("pynq", 64, 64, 64, 3, 1), cfg)[2:] == (True, 1)      # depthwise
    why = conv_groups(layer("pynq", 12, 12, 3, 3, 1), cfg)
    assert isinstance(why, str) and "groups=3 with 4 input / 4 output" in why
    assert conv_groups(layer("pynq", 104, 104, 13, 3, 1), cfg)[2:] == (False, 2)    # odd count

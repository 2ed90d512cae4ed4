"""Pooling, residual add and Requantize alone on the tensor ALU, bit-exact against MaxPool /
Conv+Requantize (average) / QAdd / Requantize / Relu from the op table."""
import numpy as np
import pytest

from retarget.errors import TargetError
from retarget.targets.vta.config import preset
from retarget.targets.vta.lower import (LoweringContext, Pool2d, Requant, RequantizeLayer,
                                        ResidualAdd, Schedule, lower_pool2d, lower_requantize,
                                        lower_residual_add, reference)
from retarget.targets.vta.lower.reference import run_op

from .conftest import CONFIGS, rand_int8, run_one

POOLS = [("max", (3, 3), (2, 2), (1, 1, 1, 1)), ("max", (2, 2), (2, 2), (0, 0, 0, 0)),
         ("max", (3, 2), (1, 2), (2, 0, 1, 1)), ("avg", (2, 2), (2, 2), (0, 0, 1, 1)),
         ("avg", (4, 4), (1, 1), (0, 0, 0, 0)), ("avg", (1, 2), (1, 1), (0, 1, 0, 0))]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("pool", POOLS, ids=lambda p: f"{p[0]}{p[1]}s{p[2]}p{p[3]}")
def test_pool_bit_exact(cfg, pool):
    kind, k, s, p = pool
    x = rand_int8(np.random.default_rng(1), (1, 24, 9, 8))
    layer = Pool2d("pool", kind, x.shape, k, s, p)
    got, _, _ = run_one(cfg, lower_pool2d, layer, [x])
    np.testing.assert_array_equal(got, reference(layer, x))


def test_maxpool_padding_never_wins():
    """All-negative input: zero padding would win; the lowering pads with -128."""
    x = np.full((1, 16, 6, 6), -100, np.int8)
    x[0, :, 2, 3] = -7
    layer = Pool2d("pool", "max", x.shape, (3, 3), (2, 2), (1, 1, 1, 1))
    got, _, _ = run_one("pynq", lower_pool2d, layer, [x])
    assert got.max() < 0
    np.testing.assert_array_equal(got, reference(layer, x))


@pytest.mark.parametrize("v", [1, 2])
def test_pool_small_tiles_and_threads(v):
    x = rand_int8(np.random.default_rng(2), (2, 32, 11, 11))
    for kind in ("max", "avg"):
        layer = Pool2d("pool", kind, x.shape, (3, 3) if kind == "max" else (2, 2), (2, 2),
                       (1, 1, 1, 1) if kind == "max" else (0, 0, 0, 0), lo=-50, hi=90)
        got, _, _ = run_one("2x16", lower_pool2d, layer, [x], schedule=Schedule(1, 2, 3, 1, 1, v))
        np.testing.assert_array_equal(got, reference(layer, x))


def test_avgpool_reference_is_the_average_rounded_half_up():
    """The integer average pool: sum >> log2(window), rounding half up."""
    x = np.array([[[[1, 2], [3, 5]]]], dtype=np.int8)          # sum 11 / 4 = 2.75 -> 3
    layer = Pool2d("p", "avg", x.shape, (2, 2), (2, 2))
    assert reference(layer, x).item() == 3
    y = np.array([[[[1, 2], [3, 4]]]], dtype=np.int8)          # 10 / 4 = 2.5 -> 3
    assert reference(Pool2d("p", "avg", y.shape, (2, 2), (2, 2)), y).item() == 3


def test_avgpool_refuses_non_power_of_two():
    ctx = LoweringContext(preset("pynq"))
    x = ctx.input("x", (1, 16, 7, 7))
    with pytest.raises(TargetError, match="average over 9 elements: not a power of two"):
        lower_pool2d(ctx, Pool2d("gap", "avg", (1, 16, 7, 7), (3, 3)), x)


ADDS = [(0, 0, 0, -128, 127), (1, 0, 1, 0, 127), (0, 2, 3, -128, 127), (3, 1, 0, -20, 20),
        (0, 0, -1, -128, 127), (2, 2, 17, -128, 127)]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("add", ADDS, ids=str)
def test_residual_add_bit_exact(cfg, add):
    rng = np.random.default_rng(3)
    a, b = rand_int8(rng, (1, 40, 5, 6)), rand_int8(rng, (1, 40, 5, 6))
    layer = ResidualAdd("add", a.shape, *add)
    got, _, _ = run_one(cfg, lower_residual_add, layer, [a, b])
    np.testing.assert_array_equal(got, reference(layer, a, b))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_relu_and_clip_alone(cfg):
    x = rand_int8(np.random.default_rng(4), (2, 20, 4, 5))
    relu = RequantizeLayer("relu", x.shape, Requant(0, 0, 127))
    got, _, _ = run_one(cfg, lower_requantize, relu, [x])
    np.testing.assert_array_equal(got, run_op("Relu", x))
    clip = RequantizeLayer("clip", x.shape, Requant(0, -30, 60))
    got, _, _ = run_one(cfg, lower_requantize, clip, [x], vthreads=2)
    np.testing.assert_array_equal(got, reference(clip, x))


@pytest.mark.parametrize("shift", [0, 1, 5, 15, 16, 23, 31, -1, -4, -30])
def test_requantize_int32_every_shift_form(shift):
    """Shifts handled by ADD imm + SHR, by the 16-bit-free identity (s > 15), and left shifts
    with the pre-clamp; values near the int32 edges where the definition allows."""
    rng = np.random.default_rng(5)
    x = rng.integers(-(1 << 30), 1 << 30, (1, 16, 4, 4)).astype(np.int32)
    x.flat[:4] = [1 << 29, -(1 << 30), 3, -3]
    layer = RequantizeLayer("rq", x.shape, Requant(shift, -100, 101), "int32")
    got, _, _ = run_one("pynq", lower_requantize, layer, [x])
    np.testing.assert_array_equal(got, reference(layer, x))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_requantize_per_channel(cfg):
    rng = np.random.default_rng(6)
    x = rng.integers(-(1 << 20), 1 << 20, (1, 37, 3, 5)).astype(np.int32)
    shifts = tuple(int(s) for s in rng.integers(-5, 25, 37))
    layer = RequantizeLayer("rq", x.shape, Requant(shifts, -128, 127), "int32")
    got, _, _ = run_one(cfg, lower_requantize, layer, [x], vthreads=2)
    np.testing.assert_array_equal(got, reference(layer, x))

"""conv2d on the GEMM core, bit-exact against Conv + Requantize from the op table."""
import numpy as np
import pytest

from retarget.errors import InputError, TargetError
from retarget.targets.vta.config import preset
from retarget.targets.vta.lower import (Conv2d, LoweringContext, Requant, Schedule,
                                        choose_schedule, lower_conv2d, reference)

from .conftest import CONFIGS, rand_int8, run_one


def conv_case(rng, shape, co, k, s=1, p=0, groups=1, req=Requant(8, 0, 127)):
    layer = Conv2d("conv", shape, co, (k, k), (s, s), (p,) * 4, groups, req)
    x = rand_int8(rng, shape)
    w = rand_int8(rng, (co, shape[1] // groups, k, k))
    b = rng.integers(-(1 << 14), 1 << 14, co).astype(np.int32)
    return layer, x, w, b


def check(cfg, layer, x, w, b, **kw):
    got, seg, run = run_one(cfg, lower_conv2d, layer, [x], consts=(w, b), **kw)
    ref = reference(layer, x, w, b)
    np.testing.assert_array_equal(got, ref)
    return seg, run


CASES = [  # shape, out channels, kernel, stride, pad, groups
    ((1, 32, 8, 8), 32, 3, 1, 1, 1),
    ((1, 3, 11, 11), 20, 7, 2, 3, 1),         # a first conv: 3 channels padded to the block
    ((1, 40, 6, 7), 24, 1, 2, 0, 1),
    ((2, 16, 5, 5), 16, 5, 1, 2, 1),
    ((1, 32, 8, 8), 32, 3, 2, 1, 32),         # depthwise
    ((1, 64, 4, 4), 64, 3, 1, 1, 2),          # groups of 32 channels
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}->{c[1]}k{c[2]}s{c[3]}p{c[4]}g{c[5]}")
def test_conv_bit_exact(cfg, case):
    shape, co, k, s, p, groups = case
    if groups == 2 and shape[1] // groups % preset(cfg).block_in:
        pytest.skip("groups not aligned to this config's block (refusal tested separately)")
    layer, x, w, b = conv_case(np.random.default_rng(1), shape, co, k, s, p, groups)
    seg, run = check(cfg, layer, x, w, b)
    rep = seg.reports[0]
    assert rep.performed_macs == run.result.macs(preset(cfg)) >= rep.useful_macs == layer.macs


def test_conv_1x64():
    layer, x, w, b = conv_case(np.random.default_rng(2), (1, 96, 6, 6), 128, 3, 1, 1)
    check("1x64", layer, x, w, b)


@pytest.mark.parametrize("cfg", ["pynq", "2x16"])
@pytest.mark.parametrize("sched", [Schedule(1, 3, 5, 1, 1, 1), Schedule(1, 2, 8, 2, 1, 1),
                                   Schedule(1, 8, 3, 1, 2, 1)])
def test_one_vs_two_virtual_threads_identical(cfg, sched):
    """Forced small tiles (border tiles with partial pads, several reduction phases): the
    same result with one and two virtual threads, and both equal the reference."""
    layer, x, w, b = conv_case(np.random.default_rng(3), (1, 32, 8, 8), 32, 3, 1, 1)
    outs = []
    for v in (1, 2):
        s = Schedule(sched.tile_n, sched.tile_h, sched.tile_w, sched.tile_co, sched.tile_ci, v)
        outs.append(run_one(cfg, lower_conv2d, layer, [x], consts=(w, b), schedule=s)[0])
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], reference(layer, x, w, b))


def test_two_threads_overlap_and_reuse():
    """With two threads each thread keeps its own input tile: the input is loaded twice as
    often as with one thread when the reduction is a single phase and output tiles alternate."""
    layer, x, w, b = conv_case(np.random.default_rng(4), (1, 32, 6, 6), 64, 1)
    counters = []
    for v in (1, 2):
        _, _, run = run_one("pynq", lower_conv2d, layer, [x], consts=(w, b),
                            schedule=Schedule(1, 6, 6, 1, 2, v))
        counters.append(run.result.counters)
    assert counters[0].inp_load_nbytes == 32 * 36          # loaded once, reused by 4 tiles
    assert counters[1].inp_load_nbytes == 2 * 32 * 36      # once per thread
    assert counters[0].wgt_load_nbytes == counters[1].wgt_load_nbytes == 64 * 32


# ResNet-18 convolution workloads C2..C11 (specs/vta.md) at reduced spatial size: full
# channel counts, kernels, pads and strides; H = W divided so the test stays fast.
RESNET = {"C2": (56, 64, 64, 3, 1, 1), "C3": (56, 64, 128, 3, 1, 2), "C4": (56, 64, 128, 1, 0, 2),
          "C5": (28, 128, 128, 3, 1, 1), "C6": (28, 128, 256, 3, 1, 2),
          "C7": (28, 128, 256, 1, 0, 2), "C8": (14, 256, 256, 3, 1, 1),
          "C9": (14, 256, 512, 3, 1, 2), "C10": (14, 256, 512, 1, 0, 2),
          "C11": (7, 512, 512, 3, 1, 1)}


@pytest.mark.parametrize("name", list(RESNET))
def test_resnet18_workloads_reduced(name):
    hw, ci, co, k, p, s = RESNET[name]
    small = max(hw // 7, 3)
    layer, x, w, b = conv_case(np.random.default_rng(5), (1, ci, small, small), co, k, s, p)
    cfg = "pynq" if name in ("C2", "C5", "C8", "C11") else ("1x32" if name in ("C3", "C6", "C9")
                                                              else "2x16")
    check(cfg, layer, x, w, b, vthreads=2 if name in ("C2", "C9") else 1)


def test_per_channel_and_left_shifts():
    rng = np.random.default_rng(6)
    shifts = tuple(int(v) for v in rng.integers(-3, 14, 24))
    layer, x, w, b = conv_case(rng, (1, 16, 5, 5), 24, 3, 1, 1, req=Requant(shifts, -90, 100))
    check("pynq", layer, x, w, b)
    layer, x, w, b = conv_case(rng, (1, 16, 5, 5), 24, 3, 1, 1, req=Requant(-2, -128, 127))
    check("1x32", layer, x, w, b, vthreads=2)
    layer, x, w, b = conv_case(rng, (1, 16, 5, 5), 24, 3, 1, 1, req=Requant(20, -128, 127))
    check("pynq", layer, x, w, b)


def test_refusals_and_bad_operands():
    cfg = preset("pynq")
    ctx = LoweringContext(cfg)
    x = ctx.input("x", (1, 24, 6, 6))
    w = np.zeros((24, 3, 3, 3), np.int8)
    with pytest.raises(TargetError, match="groups=8 .* neither depthwise nor a multiple"):
        lower_conv2d(ctx, Conv2d("g8", (1, 24, 6, 6), 24, (3, 3), groups=8), x, w)
    with pytest.raises(TargetError, match="pads .* not smaller than the kernel"):
        lower_conv2d(ctx, Conv2d("p", (1, 24, 6, 6), 24, (1, 1), pads=(1, 1, 1, 1)), x,
                     np.zeros((24, 24, 1, 1), np.int8))
    with pytest.raises(TargetError, match="shift 40"):
        lower_conv2d(ctx, Conv2d("s", (1, 24, 6, 6), 24, (1, 1), requant=Requant(40)), x,
                     np.zeros((24, 24, 1, 1), np.int8))
    with pytest.raises(InputError, match="weight int8\\[24, 24, 3, 3\\], expected int8\\[24, 24, 1, 1\\]"):
        lower_conv2d(ctx, Conv2d("w", (1, 24, 6, 6), 24, (1, 1)), x,
                     np.zeros((24, 24, 3, 3), np.int8))
    with pytest.raises(InputError, match="reads int8\\[1, 16, 6, 6\\]"):
        lower_conv2d(ctx, Conv2d("x", (1, 16, 6, 6), 24, (1, 1)), x,
                     np.zeros((24, 16, 1, 1), np.int8))
    big = ctx.input("big", (1, 256, 40, 40))
    with pytest.raises(TargetError, match="does not fit config 'pynq': inp 28224 > 1024"):
        lower_conv2d(ctx, Conv2d("big", (1, 256, 40, 40), 16, (3, 3), pads=(1, 1, 1, 1)), big,
                     np.zeros((16, 256, 3, 3), np.int8), schedule=Schedule(1, 40, 40, 1, 16, 2))


def test_schedule_fits_every_preset_at_full_size():
    """The chooser finds a fitting tiling for the largest ResNet-18 workloads on every
    preset, with one and two threads (no sizes tied to one config)."""
    from retarget.targets.vta.config import PRESETS
    for cfg in PRESETS.values():
        for name in ("C2", "C11"):
            hw, ci, co, k, p, s = RESNET[name]
            layer = Conv2d(name, (1, ci, hw, hw), co, (k, k), (s, s), (p,) * 4)
            for v in (1, 2):
                sch = choose_schedule(layer, cfg, v)
                assert sch.vthreads == v

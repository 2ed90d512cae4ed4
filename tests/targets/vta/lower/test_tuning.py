"""The cycle model chooses schedules (lower/tuning.py): its choice is never slower on the model
than the DRAM-traffic choice, the analytic ranking tracks the model, and choices are cached."""
import numpy as np
import pytest

from retarget.report.layers import row_from_result

from retarget.targets.vta.config import preset
from retarget.targets.vta.lower import (Conv2d, Requant, candidates, choose_schedule, dram_cost,
                                        lower_conv2d, reference, tuning)

from .conftest import rand_int8, run_one

CFG = preset("pynq")
LAYER = Conv2d("c", (1, 64, 14, 14), 64, (3, 3), (1, 1), (1, 1, 1, 1), 1, Requant(8, 0, 127))


def test_model_choice_beats_dram_choice_on_the_model():
    for v in (1, 2):
        by_dram = choose_schedule(LAYER, CFG, v, cost=dram_cost)
        by_model = choose_schedule(LAYER, CFG, v)
        assert by_model.vthreads == v
        assert (tuning.time_schedule(LAYER, CFG, by_model).total_cycles
                <= tuning.time_schedule(LAYER, CFG, by_dram).total_cycles)


def test_none_lets_the_model_pick_the_thread_count():
    s = choose_schedule(LAYER, CFG)             # vthreads=None, cost=None
    best_each = [tuning.time_schedule(LAYER, CFG, choose_schedule(LAYER, CFG, v)).total_cycles
                 for v in (1, 2)]
    assert tuning.time_schedule(LAYER, CFG, s).total_cycles == min(best_each)


def test_analytic_estimate_tracks_the_model_and_bounds_hold():
    for v in (1, 2):
        for s in candidates(LAYER, CFG, v):
            model = tuning.time_schedule(LAYER, CFG, s).total_cycles
            est = tuning.conv_cycles(LAYER, CFG, s)
            assert tuning.conv_cycles_lower_bound(LAYER, CFG, s) <= est
            assert abs(est - model) <= 0.3 * model, (s, est, model)


def test_compute_ceiling_depends_on_the_layer_not_the_schedule():
    # Per output vector of 16 channels: (64 / 16) * 3 * 3 = 36 GEMM cycles, one reset, and four
    # requantisation passes (bias ADD, SHR, MIN, MAX) at II alu_ii: no tiling can beat
    # 36 / (36 + 1 + 4 * alu_ii) GEMM utilisation, because GEMM and ALU share the compute module.
    vectors = 14 * 14 * 64 // 16
    want = 36 / (36 + 1 + 4 * CFG.alu_ii)
    for v in (1, 2):
        for s in candidates(LAYER, CFG, v)[:4]:
            t = tuning.time_schedule(LAYER, CFG, s)
            row = row_from_result("c", t)
            assert (t.gemm_cycles, t.reset_cycles) == (36 * vectors, vectors)
            assert row.compute_ceiling == pytest.approx(want)
            assert row.utilisation < row.compute_ceiling


def test_choices_are_cached_by_geometry_not_name_or_shift():
    tuning.clear_cache()
    a = tuning.model_schedule(LAYER, CFG)
    other = Conv2d("other", LAYER.in_shape, 64, (3, 3), (1, 1), (1, 1, 1, 1), 1,
                   Requant(5, 0, 127))
    assert tuning.model_schedule(other, CFG) == a
    assert len(tuning._CACHE) == 1              # the second layer was a hit
    wider = Conv2d("w", LAYER.in_shape, 128, (3, 3), (1, 1), (1, 1, 1, 1), 1, Requant(5, 0, 127))
    tuning.model_schedule(wider, CFG)
    assert len(tuning._CACHE) == 2


def test_default_lowering_with_model_choice_is_bit_exact():
    rng = np.random.default_rng(7)
    x, w = rand_int8(rng, LAYER.in_shape), rand_int8(rng, (64, 64, 3, 3))
    b = rng.integers(-3000, 3000, 64).astype(np.int32)
    got, seg, _ = run_one("pynq", lower_conv2d, LAYER, [x], consts=(w, b))
    np.testing.assert_array_equal(got, reference(LAYER, x, w, b))
    assert seg.reports[0].schedule == choose_schedule(LAYER, CFG)

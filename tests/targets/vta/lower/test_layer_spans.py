"""The lowered Program carries per-layer instruction spans (Program.layers), which the cycle
model and the reports use for per-layer figures."""
import numpy as np

from retarget.targets.vta.builder import Program
from retarget.targets.vta.config import preset
from retarget.targets.vta.lower import (Conv2d, LoweringContext, Pool2d, Requant, lower_conv2d,
                                        lower_pool2d)
from retarget.targets.vta.timing import simulate_timing

from .conftest import rand_int8


def _segment():
    rng = np.random.default_rng(0)
    ctx = LoweringContext(preset("pynq"))
    x = ctx.input("x", (1, 16, 8, 8))
    a = Conv2d("conv_a", (1, 16, 8, 8), 32, (3, 3), (1, 1), (1, 1, 1, 1), 1, Requant(6, -128, 127))
    y = lower_conv2d(ctx, a, x, rand_int8(rng, (32, 16, 3, 3)))
    z = lower_pool2d(ctx, Pool2d("pool_b", "max", (1, 32, 8, 8), (2, 2), (2, 2)), y)
    return ctx.finish([z])


def test_spans_are_ordered_disjoint_and_match_reports():
    seg = _segment()
    spans = seg.program.layers
    assert [s[0] for s in spans] == ["conv_a", "pool_b"]
    assert spans == seg.layer_spans
    n = len(seg.program.insns)
    prev_stop = 0
    for (name, first, stop), rep in zip(spans, seg.reports):
        assert prev_stop <= first < stop <= n - 1     # FINISH belongs to no layer
        assert stop - first == rep.instructions
        prev_stop = stop


def test_timing_uses_program_spans():
    seg = _segment()
    t = simulate_timing(seg.program)
    assert [lt.name for lt in t.layers] == ["conv_a", "pool_b"]
    conv = t.layer("conv_a")
    assert conv.macs >= 32 * 16 * 9 * 8 * 8        # at least the useful MACs
    assert t.layer("pool_b").gemm_cycles == 0 and t.layer("pool_b").alu_cycles > 0
    assert conv.end_cycle <= t.total_cycles


def test_spans_survive_save_and_load(tmp_path):
    seg = _segment()
    seg.program.save(str(tmp_path / "p"))
    back = Program.load(str(tmp_path / "p"))
    assert back.layers == seg.program.layers

"""Activation x activation products on vta (lower_batched_matmul): per slice a dense layer on
views of A and of the result, B laid out as weight blocks by the host (pack_weight_slices);
bit-exact against the integer definition on every preset."""
import numpy as np
import pytest

from retarget.targets.vta.config import preset
from retarget.targets.vta.kernel import pack_weight_slices
from retarget.targets.vta.lower import Dense, LoweringContext, Requant, lower_batched_matmul
from retarget.targets.vta.sim import Simulator

from .conftest import CONFIGS, rand_int8


def product(cfg_name, slices, n, k, m, shift=7, seed=0):
    cfg = preset(cfg_name)
    rng = np.random.default_rng(seed)
    a = rand_int8(rng, (slices, n, k))
    b = rand_int8(rng, (slices, k, m))
    ctx = LoweringContext(cfg)
    at = ctx.input("a", (slices * n, k))
    ctx.b.alloc("b", (slices, -(-m // cfg.block_out), -(-k // cfg.block_in), 1, 1,
                      cfg.block_out, cfg.block_in), "int8")
    layer = Dense("qk", n, k, m, Requant(shift, -128, 127), op="MatMul")
    y = lower_batched_matmul(ctx, layer, at, "b", slices)
    seg = ctx.finish([y])
    dram = seg.program.dram_image({
        **seg.constants,
        "a": at.pack(a.reshape(slices * n, k)).reshape(seg.program.buffers["a"].shape),
        "b": pack_weight_slices(b.reshape(slices * k, m), slices, cfg)})
    Simulator(cfg, dram=dram).run(seg.program.stream())
    got = y.unpack(seg.program.read(dram, y.buffer))
    acc = np.matmul(a.astype(np.int64), b.astype(np.int64))
    want = np.clip((acc + (1 << (shift - 1))) >> shift, -128, 127).astype(np.int8)
    return got.reshape(slices, n, m), want, seg


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("slices,n,k,m", [(3, 18, 64, 18), (2, 16, 16, 64), (4, 10, 24, 40)])
def test_batched_product_bit_exact(cfg_name, slices, n, k, m):
    got, want, seg = product(cfg_name, slices, n, k, m)
    np.testing.assert_array_equal(got, want)
    assert [r.kind for r in seg.reports] == ["matmul"] * slices


def test_rows_must_be_whole_batch_blocks():
    with pytest.raises(Exception, match="whole batch blocks"):
        product("2x16", 2, 9, 16, 16)

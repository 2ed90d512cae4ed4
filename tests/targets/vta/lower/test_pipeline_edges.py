"""The conv pipeline's start and end: a layer's micro-op kernels arrive in one LOAD UOP
(builder.preload_kernels) and the last tile's epilogue and store go in pieces. Both must stay
bit-exact and hazard-free, and the pieces must actually shorten the layer's tail."""
import numpy as np
import pytest

from retarget.targets.vta.builder import StreamBuilder
from retarget.targets.vta.config import preset
from retarget.targets.vta.isa import AluInsn, GemmInsn, MemInsn, MemType, Opcode
from retarget.targets.vta.lower import Conv2d, Requant, Schedule, lower_conv2d, reference
from retarget.targets.vta.timing import simulate_timing

from .conftest import rand_int8, run_one


def _case(seed, shape, cout, k, stride=1, requant=Requant(7, 0, 127)):
    rng = np.random.default_rng(seed)
    layer = Conv2d("c", shape, cout, (k, k), (stride, stride), (k // 2,) * 4, 1, requant)
    x = rand_int8(rng, shape)
    w = rand_int8(rng, (cout, shape[1], k, k))
    b = rng.integers(-2000, 2000, cout).astype(np.int32)
    return layer, x, w, b


def _uop_loads(prog):
    return [i for i in prog.insns if isinstance(i, MemInsn) and i.opcode is Opcode.LOAD
            and i.memory_type is MemType.UOP and i.x_size > 0]


def _stores_after_last_gemm(prog):
    last = max(i for i, x in enumerate(prog.insns) if isinstance(x, GemmInsn) and not x.reset)
    return [x for x in prog.insns[last:] if isinstance(x, MemInsn) and x.opcode is Opcode.STORE
            and x.x_size > 0]


@pytest.mark.parametrize("cfg", ["pynq", "2x16"])
@pytest.mark.parametrize("sched", [Schedule(1, 4, 8, 2, 1, 2), Schedule(1, 8, 8, 1, 2, 2),
                                   Schedule(1, 3, 5, 3, 2, 1)])
def test_preloaded_kernels_and_pieces_bit_exact(cfg, sched):
    layer, x, w, b = _case(1, (1, 32, 8, 8), 48, 3)
    got, seg, _ = run_one(cfg, lower_conv2d, layer, [x], consts=(w, b), schedule=sched)
    np.testing.assert_array_equal(got, reference(layer, x, w, b))
    assert len(_uop_loads(seg.program)) == 1      # every kernel of the layer in one transfer


def test_per_channel_left_shift_pieces_bit_exact():
    req = Requant((3, -2, 5, 0) * 8, -100, 90)
    layer, x, w, b = _case(2, (1, 16, 6, 6), 32, 3, 1, req)
    got, _, _ = run_one("pynq", lower_conv2d, layer, [x], consts=(w, b),
                        schedule=Schedule(1, 6, 6, 2, 1, 2))
    np.testing.assert_array_equal(got, reference(layer, x, w, b))


@pytest.mark.parametrize("sched,min_pieces", [(Schedule(1, 14, 14, 4, 1, 2), 2),
                                              (Schedule(1, 14, 14, 1, 1, 2), 2)])
def test_last_tile_pieces_shorten_the_tail(sched, min_pieces):
    """Pieces by channel block (tile_co 4) or by rows (tile_co 1): the store module drains
    earlier pieces while the ALU works, so the time after the last ALU instruction is one
    piece's store, not the whole tile's."""
    layer, x, w, b = _case(3, (1, 64, 14, 14), 64, 3)
    got, seg, _ = run_one("pynq", lower_conv2d, layer, [x], consts=(w, b), schedule=sched)
    np.testing.assert_array_equal(got, reference(layer, x, w, b))
    prog = seg.program
    assert len(_stores_after_last_gemm(prog)) >= min_pieces
    r = simulate_timing(prog)
    last_alu = max(i for i, x in enumerate(prog.insns) if isinstance(x, AluInsn))
    tail = r.total_cycles - r.end[last_alu]
    cfg = prog.config
    whole_tile_store = sched.tile_co * sched.tile_h * sched.tile_w * cfg.out_elem_bytes \
        // cfg.bus_bytes
    assert tail < 0.75 * whole_tile_store, (tail, whole_tile_store)


def test_builder_preload_kernels_one_load_and_fallback():
    cfg = preset("pynq")
    b = StreamBuilder(cfg)
    ks = [b.uop_kernel([(i, 0, 0)], [(4, 1, 0)], name=f"k{i}") for i in range(3)]
    b.preload_kernel(ks[0])                   # already resident: not loaded again
    n0 = len(b.insns)
    b.preload_kernels(ks + [ks[1]])           # duplicates count once
    loads = b.insns[n0:]
    assert len(loads) == 1 and loads[0].x_size == 2
    for k in ks:                              # all resident: no further LOAD UOP
        b.gemm(k, reset=True)
    assert len(b.insns) == n0 + 1 + 3
    big = b.uop_kernel([(0, 0, 0)] * (cfg.uop_depth // 2 + 1), name="big")
    big2 = b.uop_kernel([(1, 0, 0)] * (cfg.uop_depth // 2 + 1), name="big2")
    n1 = len(b.insns)
    b.preload_kernels([big, big2])            # together too large: one load each
    assert len(b.insns) == n1 + 2


@pytest.mark.parametrize("v", [1, 2])
def test_one_row_kernel_with_stride_loads_only_the_rows_it_reads(v):
    """A 1x1 stride-2 conv reads every other input row: the LOAD skips the rest (DRAM row
    stride 2w), so the input bytes are the read rows' only, and the result is unchanged."""
    rng = np.random.default_rng(5)
    layer = Conv2d("c", (1, 32, 9, 9), 32, (1, 1), (2, 2), (0, 0, 0, 0), 1, Requant(6, 0, 127))
    x, w = rand_int8(rng, layer.in_shape), rand_int8(rng, (32, 32, 1, 1))
    b = rng.integers(-500, 500, 32).astype(np.int32)
    got, _, run = run_one("pynq", lower_conv2d, layer, [x], consts=(w, b),
                          schedule=Schedule(1, 5, 5, 1, 2, v))
    np.testing.assert_array_equal(got, reference(layer, x, w, b))
    # 5 of the 9 rows, all 9 columns (a row is one contiguous run), 2 blocks of 16 channels,
    # loaded once per thread that holds it
    assert run.result.counters.inp_load_nbytes == v * 5 * 9 * 32

"""VTAKernel plumbing, independent of the lowering: a hand-written ReLU stream (ACC_8BIT load,
ALU MAX 0, STORE) wrapped as a kernel; host-side packing through device views, upload,
run, release, and the artifact round trip."""
import numpy as np
import pytest

from retarget.errors import ModelLoadError, TargetError
from retarget.targets.registry import get_target
from retarget.targets.vta.builder import StreamBuilder
from retarget.targets.vta.isa import AluOp, MemType
from retarget.targets.vta.kernel import Binding, VTAKernel


def relu_kernel(target, shape):
    cfg = target.config
    n, c, h, w = shape
    nb, cb = -(-n // cfg.batch), -(-c // cfg.block_in)
    elems = nb * cb * h * w                  # one element = BATCH x BLOCK blocks
    b = StreamBuilder(cfg)
    packed = (nb, cb, h, w, cfg.batch, cfg.block_in)
    b.alloc("x", packed, "int8")
    b.alloc("y", packed, "int8")
    b.alloc("unused_const", (4,), "int8")
    b.load_2d(MemType.ACC_8BIT, 0, "x", 0, elems, 1, elems)
    b.alu(b.uop_kernel([(0, 0)], [(elems, 1, 1)], "relu"), AluOp.MAX, imm=0)
    b.dep_push(2, 3)
    b.dep_pop(2, 3)
    b.store_2d(0, "y", 0, elems, 1, elems)
    prog = b.finish()
    return VTAKernel("vta_0", prog, [Binding("in", "x", shape)], [Binding("out", "y", shape)],
                     {"unused_const": np.arange(4, dtype=np.int8)})


@pytest.mark.parametrize("spec", ["vta", "vta:1x32", "vta:2x16"])
def test_kernel_runs_through_device_views(spec):
    t = get_target(spec)
    shape = (1, 20, 3, 5)   # channels not a multiple of the block, batch below BATCH
    k = relu_kernel(t, shape)
    dev = t.make_device()
    k.upload(dev)
    x = np.random.default_rng(0).integers(-128, 128, shape).astype(np.int8)
    pin, pout = dev.malloc(x.nbytes), dev.malloc(x.nbytes)
    dev.copy_to_device(pin, x)
    records = k.run(dev, [pin], [pout])
    y = dev.copy_from_device(pout, shape, np.int8)
    assert np.array_equal(y, np.maximum(x, 0))
    assert records[-1].counters["alu_counter"] > 0
    k.release(dev)
    assert dev.stats().memory.live_allocations == 2


def test_kernel_save_load_round_trip(tmp_path):
    t = get_target("vta:1x32")
    shape = (1, 16, 2, 2)
    k = relu_kernel(t, shape)
    weights = {}
    spec = k.save(tmp_path, weights)
    assert (tmp_path / "program.insn.bin").is_file() and (tmp_path / "program.uop.bin").is_file()
    k2 = t.load_kernel(tmp_path, spec, weights)
    assert k2.program.insns == k.program.insns
    assert np.array_equal(k2.constants["unused_const"], k.constants["unused_const"])
    dev = t.make_device()
    k2.upload(dev)
    x = np.random.default_rng(1).integers(-128, 128, shape).astype(np.int8)
    pin, pout = dev.malloc(x.nbytes), dev.malloc(x.nbytes)
    dev.copy_to_device(pin, x)
    k2.run(dev, [pin], [pout])
    assert np.array_equal(dev.copy_from_device(pout, shape, np.int8), np.maximum(x, 0))
    # loading into a target of another config is refused with both names
    with pytest.raises(ModelLoadError, match="1x32"):
        get_target("vta").load_kernel(tmp_path, spec, weights)
    with pytest.raises(ModelLoadError, match="missing"):
        t.load_kernel(tmp_path, spec, {})


def test_kernel_errors():
    t = get_target("vta")
    k = relu_kernel(t, (1, 16, 2, 2))
    dev = t.make_device()
    with pytest.raises(TargetError, match="not uploaded"):
        k.run(dev, [0], [0])
    k.upload(dev)
    with pytest.raises(TargetError, match="expects 1 / 1"):
        k.run(dev, [], [])
    with pytest.raises(TargetError, match="unknown DRAM buffer"):
        VTAKernel("r", k.program, [Binding("in", "nope", (1, 16, 2, 2))], [], {})

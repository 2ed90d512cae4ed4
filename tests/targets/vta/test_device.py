"""VTADevice: the behavioural simulator behind the runtime's Device API."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import DeviceError
from retarget.device.base import SimulatedDevice, Task
from retarget.targets.vta.builder import StreamBuilder
from retarget.targets.vta.config import preset
from retarget.targets.vta.device import VTADevice, relocate
from retarget.targets.vta.isa import (NO_DEPS, AluOp, Deps, FinishInsn, GemmInsn, MemInsn,
                                      MemType, Opcode, encode_stream, layout_for)
from retarget.targets.vta.sim import DeadlockError, SimulationError

LOAD, COMPUTE, STORE = 1, 2, 3
CONFIGS = ["pynq", "1x32", "2x16"]


def gemm_program(cfg, m=4, k=2, n=3, shift=7):
    """y[i, j] = clip((sum_kk x[i, kk] . w[j, kk]^T) >> shift, -128, 127) over packed blocks."""
    b = StreamBuilder(cfg)
    b.alloc("x", (m, k, cfg.batch, cfg.block_in), "int8")
    b.alloc("w", (n, k, cfg.block_out, cfg.block_in), "int8")
    b.alloc("y", (m, n, cfg.batch, cfg.block_out), "int8")
    b.load_2d(MemType.INP, 0, "x", 0, m * k, 1, m * k)
    b.load_2d(MemType.WGT, 0, "w", 0, n * k, 1, n * k)
    b.dep_push(LOAD, COMPUTE)
    b.dep_pop(LOAD, COMPUTE)
    cells = [(i * n + j) for i in range(m) for j in range(n)]
    b.gemm(b.uop_kernel([(d, 0, 0) for d in cells]), reset=True)
    b.gemm(b.uop_kernel([(i * n + j, i * k + kk, j * k + kk)
                         for i in range(m) for j in range(n) for kk in range(k)]))
    each = b.uop_kernel([(d, d) for d in cells])
    b.alu(each, AluOp.SHR, shift)
    b.alu(each, AluOp.MIN, 127)
    b.alu(each, AluOp.MAX, -128)
    b.dep_push(COMPUTE, STORE)
    b.dep_pop(COMPUTE, STORE)
    b.store_2d(0, "y", 0, m * n, 1, m * n)
    return b.finish()


def numpy_gemm(x, w, shift):
    acc = np.einsum("ikbc,jkoc->ijbo", x.astype(np.int64), w.astype(np.int64))
    return np.clip(acc >> shift, -128, 127).astype(np.int8)


@pytest.mark.parametrize("cfg_name", CONFIGS)
def test_builder_program_runs_on_the_device_at_a_relocated_address(cfg_name):
    cfg = preset(cfg_name)
    dev = VTADevice(cfg, memory_bytes=1 << 22)
    assert isinstance(dev, SimulatedDevice) and dev.sim.dram is dev._memory
    dev.malloc(4096 + 64)                      # so the program does not sit at address 0
    prog = gemm_program(cfg)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, prog.buffers["x"].shape).astype(np.int8)
    w = rng.integers(-128, 128, prog.buffers["w"].shape).astype(np.int8)
    loaded = dev.load_program(prog, {"x": x, "w": w})
    assert loaded.base > 0
    record = dev.run(loaded, name="gemm")
    np.testing.assert_array_equal(dev.read_buffer(loaded, "y"), numpy_gemm(x, w, 7))
    c = record.counters
    assert record.kernel == "vta.run" and record.name == "gemm"
    assert c["gemm_counter"] == 4 * 3 * 2 and c["alu_counter"] == 3 * 4 * 3
    assert c["inp_load_nbytes"] == x.nbytes and c["wgt_load_nbytes"] == w.nbytes
    assert c["out_store_nbytes"] == 4 * 3 * cfg.out_elem_bytes
    assert c["instructions"] == len(prog.insns)


def test_raw_task_fifo_and_sram_state_persisting_between_tasks():
    """Task 1 computes into ACC, task 2 (a separate stream) only stores it: the SRAMs keep
    their contents between tasks, like the board."""
    cfg = preset("pynq")
    dev = VTADevice(cfg, memory_bytes=1 << 20)
    acc_vals = np.arange(-8, 8, dtype=np.int32).reshape(1, 16) * 9
    src = dev.malloc(64)
    dst = dev.malloc(16)
    dev.copy_to_device(src, acc_vals)
    layout = layout_for(cfg)
    first = encode_stream([
        MemInsn(Opcode.LOAD, NO_DEPS, MemType.ACC, 5, src // cfg.acc_elem_bytes, 1, 1, 1),
        FinishInsn()], layout)
    second = encode_stream([
        MemInsn(Opcode.STORE, Deps(push_prev=True), MemType.OUT, 5, dst // cfg.out_elem_bytes,
                1, 1, 1),
        FinishInsn(Deps(pop_next=True))], layout)
    p1, p2 = dev.malloc(len(first)), dev.malloc(len(second))
    dev.copy_to_device(p1, np.frombuffer(first, np.uint8))
    dev.copy_to_device(p2, np.frombuffer(second, np.uint8))
    ids = [dev.submit(Task("vta.run", {"insns": p1, "count": 2, "memory": (src,)}, "load")),
           dev.submit(Task("vta.run", {"insns": p2, "count": 2, "memory": (dst,)}, "store"))]
    records = dev.synchronize()
    assert [r.task_id for r in records] == ids and [r.name for r in records] == ["load", "store"]
    got = dev.copy_from_device(dst, (16,), np.int8)
    np.testing.assert_array_equal(got, acc_vals.reshape(-1).astype(np.int8))
    assert records[1].counters["store_insns"] == 1


def test_bad_tasks_and_faulting_streams_name_the_task_and_instruction():
    cfg = preset("pynq")
    dev = VTADevice(cfg, memory_bytes=1 << 20)
    layout = layout_for(cfg)
    stream = encode_stream([GemmInsn(NO_DEPS, False, 0, 1, 3000, 1, 1, 0, 0, 0, 0, 0),
                            FinishInsn()], layout)
    p = dev.malloc(len(stream))
    dev.copy_to_device(p, np.frombuffer(stream, np.uint8))
    with pytest.raises(DeviceError, match="count"):
        dev.submit(Task("vta.run", {"insns": p, "count": 0}, "zero"))
        dev.synchronize()
    dev.submit(Task("vta.run", {"insns": p, "count": 3}, "overrun"))
    with pytest.raises(DeviceError, match="overrun.*instruction stream.*overruns"):
        dev.synchronize()
    dev.submit(Task("vta.run", {"insns": p, "count": 2}, "bad-index"))
    with pytest.raises(SimulationError, match=r"bad-index.*instruction #0 \(GEMM.*acc SRAM index "
                                              r"out of range"):
        dev.synchronize()
    # A deadlock keeps its class through the device's task wrapper.
    dead = encode_stream([FinishInsn(Deps(pop_prev=True))], layout)
    q = dev.malloc(16)
    dev.copy_to_device(q, np.frombuffer(dead, np.uint8))
    dev.submit(Task("vta.run", {"insns": q, "count": 1}, "dead"))
    with pytest.raises(DeadlockError, match="dead.*waiting on l2g"):
        dev.synchronize()
    with pytest.raises(DeviceError, match="unknown kernel"):
        dev.submit(Task("vta.gemm", {}, "x"))


def test_program_for_another_config_and_misaligned_relocation_are_refused():
    dev = VTADevice("pynq", memory_bytes=1 << 20)
    with pytest.raises(DeviceError, match="config '1x32'"):
        dev.load_program(gemm_program(preset("1x32")))
    prog = gemm_program(preset("pynq"))
    with pytest.raises(DeviceError, match="not a multiple"):
        relocate(prog.insns, prog.config, 8)

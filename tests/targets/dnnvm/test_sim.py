"""The dnnvm simulator refuses what the hardware could not do, names the instruction, and
reports deadlocks; the device confines a stream to its own DRAM image."""
import numpy as np
import pytest

from retarget.errors import DeviceError
from retarget.device.base import MEMORY_ARG, Task
from retarget.targets.accel.sim_errors import DeadlockError, SimulationError
from retarget.targets.dnnvm.config import PRESETS
from retarget.targets.dnnvm.device import DNNVMDevice
from retarget.targets.dnnvm.isa import (CONV_E, LOAD_E, Buf, Conv, End, Load, Save,
                                        encode_stream)
from retarget.targets.dnnvm.sim import Simulator

CFG = PRESETS["test"]


def sim(nbytes=4096):
    return Simulator(CFG, np.zeros(nbytes, np.uint8))


def test_deadlock_names_the_blocked_instruction():
    stream = [Load(rows=1, cols=1, vec_bytes=4), Conv(wait=1 << CONV_E), End()]
    with pytest.raises(DeadlockError, match=r"conv engine blocked at instruction #1 .*"
                                            r"waiting on conv->conv") as e:
        sim().run(stream)
    assert e.value.blocked[0][1] == 1
    # a token that is pushed to the wrong engine never arrives either
    stream = [Load(signal=1 << 1), Conv(wait=1 << LOAD_E), End()]
    with pytest.raises(DeadlockError, match="load->conv"):
        sim().run(stream)


@pytest.mark.parametrize("insn, message", [
    (Load(sram_addr=CFG.inp_buf_bytes - 2, rows=1, cols=1, vec_bytes=4),
     "outside the 4096-byte IN buffer"),
    (Load(ddr_addr=4094, rows=1, cols=1, vec_bytes=4), "outside the 4096-byte memory"),
    (Load(buf=int(Buf.OUT), sram_addr=CFG.out_buf_bytes), "OUT buffer"),
    (Save(sram_addr=CFG.out_buf_bytes, rows=1, cols=1, vec_bytes=1), "OUT buffer"),
    (Conv(kh=3, kw=3, in_h=2, in_w=3, out_h=1, out_w=1), "reads beyond the 2x3 input tile"),
    (Conv(depthwise=1, ic=2, oc=3), "depthwise needs ic == oc"),
    (Load(rows=2, cols=2, vec_bytes=4, ddr_row_stride=4, ddr_col_stride=4),
     "overlapping DDR vectors"),
])
def test_bad_instructions_are_refused_naming_them(insn, message):
    with pytest.raises(SimulationError, match=message) as e:
        sim().run([insn, End()])
    assert e.value.index == 0 and "instruction #0" in str(e.value)


def test_malformed_streams_are_refused():
    with pytest.raises(SimulationError, match="does not end with END"):
        sim().run([Load()])
    with pytest.raises(SimulationError, match="END before the end"):
        sim().run([End(), Load(), End()])
    with pytest.raises(SimulationError, match="unknown opcode 9"):
        sim().run(bytes([9]) + bytes(31) + encode_stream([End()]))
    with pytest.raises(SimulationError, match="kernel 0x1 / stride 1x1 must be at least 1"):
        sim().run([Conv(kh=0), End()])


def test_a_stream_touching_memory_outside_its_image_is_stopped():
    dev = DNNVMDevice(CFG, memory_bytes=1 << 16)
    mine = dev.malloc(256)
    other = dev.malloc(256)
    dev.copy_to_device(other, np.full(256, 7, np.uint8))
    stream = encode_stream([Load(ddr_addr=other, rows=1, cols=1, vec_bytes=16), End()])
    insns = dev.malloc(len(stream))
    dev.copy_to_device(insns, np.frombuffer(stream, np.uint8))
    dev.submit(Task("dnnvm.run", {"insns": insns, "count": 2, MEMORY_ARG: (mine,)}))
    with pytest.raises(DeviceError, match="outside the memory this task was given"):
        dev.synchronize()
    # the device stays usable, and the same load of its own memory works
    stream = encode_stream([Load(ddr_addr=mine, rows=1, cols=1, vec_bytes=16), End()])
    dev.copy_to_device(insns, np.frombuffer(stream, np.uint8))
    dev.submit(Task("dnnvm.run", {"insns": insns, "count": 2, MEMORY_ARG: (mine,)}))
    assert dev.synchronize()[-1].counters["load_in_bytes"] == 16


def test_a_stream_asking_for_too_much_work_is_refused_before_it_runs():
    from retarget.errors import ResourceLimitError
    from retarget.limits import work_limit
    huge = Conv(kh=15, kw=15, in_h=4095, in_w=4095, ic=4095, out_h=4081, out_w=4081, oc=4095)
    with work_limit(10**9), pytest.raises(ResourceLimitError, match="dnnvm stream of 2"):
        sim().run([huge, End()])

"""Memory confinement (docs/guarantees.md): a running task touches only the allocations it was
given; freed memory is poisoned; violations name the instruction, the address and what it hit."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import DeviceError
from retarget.device.base import POISON, SimulatedDevice, Task
from retarget.targets.vta.config import preset
from retarget.targets.vta.device import VTADevice
from retarget.targets.vta.isa import (NO_DEPS, Deps, FinishInsn, MemInsn, MemType, Opcode,
                                      encode_stream, layout_for)

CFG = preset("pynq")


def store_stream(dst_elem: int, rows: int = 1):
    """LOAD one ACC vector (from element 0 of the task's own buffer), STORE it `rows` times."""
    return [MemInsn(Opcode.LOAD, NO_DEPS, MemType.ACC, 0, 0, 1, 1, 1),
            MemInsn(Opcode.STORE, Deps(push_prev=True), MemType.OUT, 0, dst_elem, rows, 1, 1),
            FinishInsn(Deps(pop_next=True))]


def upload(dev, insns):
    raw = encode_stream(insns, layout_for(CFG))
    p = dev.malloc(len(raw))
    dev.copy_to_device(p, np.frombuffer(raw, np.uint8))
    return p, len(raw) // 16


def test_a_store_past_its_own_allocation_is_refused_naming_the_instruction():
    dev = VTADevice(CFG, memory_bytes=1 << 20)
    own = dev.malloc(64)           # ACC element 0 lives at byte 0 of this allocation
    victim = dev.malloc(256)
    dev.copy_to_device(victim, np.full(256, 7, np.uint8))
    assert own == 0, "the test relies on the first allocation starting at 0"
    # STORE to the 16-byte OUT element just past `own`'s 64 bytes: inside device memory, inside
    # `victim`, but not memory this task was given.
    insns, n = upload(dev, store_stream(dst_elem=victim // CFG.out_elem_bytes))
    dev.submit(Task("vta.run", {"insns": insns, "count": n, "memory": (own,)}, "rogue"))
    with pytest.raises(DeviceError, match=r"rogue.*instruction #1 \(STORE.*memory confinement.*"
                                          r"outside the memory this task was given"):
        dev.synchronize()
    np.testing.assert_array_equal(dev.copy_from_device(victim, (256,), np.uint8), 7)


def test_a_program_cannot_overwrite_another_loaded_programs_weights():
    dev = VTADevice(CFG, memory_bytes=1 << 20)
    first = dev.malloc(4096)
    dev.copy_to_device(first, np.arange(4096, dtype=np.uint32).astype(np.uint8))
    before = dev.copy_from_device(first, (4096,), np.uint8)
    second = dev.malloc(4096)
    insns, n = upload(dev, [MemInsn(Opcode.LOAD, NO_DEPS, MemType.ACC, 0,
                                    second // CFG.acc_elem_bytes, 1, 1, 1),
                            MemInsn(Opcode.STORE, Deps(push_prev=True), MemType.OUT, 0,
                                    (first + 32) // CFG.out_elem_bytes, 1, 1, 1),
                            FinishInsn(Deps(pop_next=True))])
    dev.submit(Task("vta.run", {"insns": insns, "count": n, "memory": (second,)}, "second"))
    with pytest.raises(DeviceError, match=r"0x[0-9a-f]+ is inside the allocation at 0x0"):
        dev.synchronize()
    np.testing.assert_array_equal(dev.copy_from_device(first, (4096,), np.uint8), before)


def test_poisoning_is_an_option_the_c_library_device_turns_off():
    from retarget.targets.aot.device import LibraryDevice
    for dev, poisoned in [(VTADevice(CFG, memory_bytes=1 << 20), True),
                          (LibraryDevice(memory_bytes=1 << 20), False),
                          (LibraryDevice(memory_bytes=1 << 20, poison_freed=True), True)]:
        p = dev.malloc(256)
        dev.copy_to_device(p, np.ones(256, np.uint8))
        dev.free(p)
        assert (dev._memory[p:p + 256] == POISON).all() == poisoned, type(dev).__name__
        with pytest.raises(DeviceError, match="use after free"):
            dev.copy_from_device(p, (16,), np.uint8)
    with pytest.raises(DeviceError, match="poison_freed must be True or False"):
        LibraryDevice(poison_freed="yes")


def test_freed_memory_is_poisoned_and_use_after_free_is_named():
    dev = VTADevice(CFG, memory_bytes=1 << 20)
    keep = dev.malloc(256)
    gone = dev.malloc(256)
    # a stream given only `keep` that LOADs from `gone` once it is freed (uploaded first so
    # the stream's own allocation cannot reuse the freed range)
    insns, n = upload(dev, [MemInsn(Opcode.LOAD, NO_DEPS, MemType.ACC, 0,
                                    gone // CFG.acc_elem_bytes, 1, 1, 1), FinishInsn()])
    dev.copy_to_device(gone, np.ones(256, np.uint8))
    dev.free(gone)
    assert (dev._memory[gone:gone + 256] == POISON).all()
    with pytest.raises(DeviceError, match="use after free"):
        dev.copy_from_device(gone, (16,), np.uint8)
    with pytest.raises(DeviceError, match="not inside a live allocation"):
        dev.submit(Task("vta.run", {"insns": keep, "count": 1, "memory": (gone,)}, "late"))
    dev.submit(Task("vta.run", {"insns": insns, "count": n, "memory": (keep,)}, "stale"))
    with pytest.raises(DeviceError, match=r"instruction #0 \(LOAD.*is in free memory"):
        dev.synchronize()


class Doubler(SimulatedDevice):
    """A view-based simulated device: execute() may view only the task's allocations."""
    name = "doubler"
    kernels = {"double": ("x",)}

    def execute(self, task):
        x = self.view(task.args["x"], (task.args["n"],), np.int32)
        x *= 2
        return {}


def test_every_simulated_device_confines_its_views_to_the_task():
    dev = Doubler(memory_bytes=4096)
    a, b = dev.malloc(64), dev.malloc(64)
    dev.copy_to_device(a, np.ones(16, np.int32))
    dev.submit(Task("double", {"x": a, "n": 16}))
    dev.synchronize()
    np.testing.assert_array_equal(dev.copy_from_device(a, (16,), np.int32), 2)
    dev.submit(Task("double", {"x": b - 32, "n": 16}, "straddle"))   # a's tail and b's head
    with pytest.raises(DeviceError, match="straddle"):
        dev.synchronize()


def test_a_stream_whose_loops_would_run_for_hours_is_refused_before_it_runs():
    from retarget.errors import ResourceLimitError
    from retarget.limits import work_limit
    from retarget.targets.vta.isa import GemmInsn
    dev = VTADevice(CFG, memory_bytes=1 << 20)
    # 16383 x 16383 iterations of a 1-micro-op GEMM: ~6.9e10 MACs
    insns, n = upload(dev, [GemmInsn(NO_DEPS, False, 0, 1, 16383, 16383, 0, 0, 0, 0, 0, 0),
                            FinishInsn()])
    with work_limit(10 ** 9):
        dev.submit(Task("vta.run", {"insns": insns, "count": n}, "spin"))
        with pytest.raises(ResourceLimitError, match=r"spin.*6\.87e\+10 operations.*"
                                                     r"RETARGET_MAX_DEVICE_WORK"):
            dev.synchronize()
    # the device stays usable after the refusal
    ok, m = upload(dev, [FinishInsn()])
    dev.submit(Task("vta.run", {"insns": ok, "count": m}, "fine"))
    assert dev.synchronize()[0].name == "fine"

"""Stale program handles (docs/guarantees.md, "Memory confinement"): a loaded program or
library whose image, stream, weights or arena was freed is refused, naming the freed
allocation, even when a new allocation reuses the memory: it never runs into the new
owner's bytes."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import DeviceError, RetargetError
from retarget.runtime.device import SimulatedDevice

from .conftest import compile_digits

# (target, which allocation of the loaded kernel is freed)
CASES = [("vta", "DRAM image"), ("vta", "instruction stream"), ("dnnvm", "DRAM image"),
         ("nvdla", "DRAM image"), ("c", "weights"), ("c", "arena"), ("sunway", "weights"),
         ("sunway", "arena")]


@pytest.fixture(scope="module")
def modules(digits):
    g, x = digits
    cache = {}

    def get(target):
        if target not in cache:
            cache[target] = compile_digits(g, x, target)
        return cache[target]
    yield get
    for m in cache.values():
        m.close()


def _allocation(kernel, device, part: str) -> int:
    """Where `part` of `kernel`'s upload to `device` starts."""
    if hasattr(kernel, "_loaded"):
        loaded = kernel._loaded[id(device)]
        return {"DRAM image": loaded.base, "instruction stream": loaded.insns}[part]
    _, weights, arena = kernel._on_device[id(device)]
    return {"weights": weights, "arena": arena}[part]


@pytest.mark.parametrize("target,part", CASES)
def test_a_program_whose_memory_was_freed_and_reused_is_refused(modules, digits, target, part):
    g, x = digits
    m = modules(target)
    expected = m.run(x)
    device = m._executor.device
    region = m.offloaded[0]
    kernel = m.kernels[region.name]
    start = _allocation(kernel, device, part)
    size = device.allocator.allocation_at(start).size
    device.free(start)
    reused = device.malloc(size)
    assert reused == start                       # best fit: the new owner gets the same bytes
    mine = np.arange(size, dtype=np.int64).astype(np.uint8)
    device.copy_to_device(reused, mine)
    with pytest.raises(DeviceError) as e:
        m.run(x)
    msg = str(e.value)
    assert "stale" in msg and part in msg and f"0x{start:x}" in msg, msg
    # the new owner's bytes are untouched
    assert np.array_equal(device.copy_from_device(reused, (size,), np.uint8), mine)
    # the module recovers on a fresh device (what a user does: load it again)
    device.free(reused)
    m._executor = None
    got = m.run(x)
    for k in expected:
        np.testing.assert_array_equal(got[k], expected[k])


def test_a_raw_run_of_a_stale_vta_program_is_refused(modules, digits):
    """The Device API itself (not only the kernel) refuses the stale handle."""
    g, x = digits
    m = modules("vta")
    m.run(x)
    device = m._executor.device
    kernel = m.kernels[m.offloaded[0].name]
    loaded = kernel._loaded[id(device)]
    device.free(loaded.base)
    other = device.malloc(loaded.program.dram_bytes)
    with pytest.raises(DeviceError, match=r"stale: its DRAM image, allocation #\d+ at 0x") as e:
        device.run(loaded)
    assert "now belongs to allocation" in str(e.value)
    with pytest.raises(DeviceError, match="stale"):
        device.read_buffer(loaded, next(iter(loaded.program.buffers)))
    device.free(other)
    m._executor = None


def test_a_handle_is_bound_to_live_allocations():
    class Dev(SimulatedDevice):
        name = "d"
        kernels = {"k": ("p",)}
        handle_arg = "h"

        def execute(self, task):
            return {}

    from retarget.runtime.device import Task
    dev = Dev(memory_bytes=1 << 16)
    p = dev.malloc(64)
    h = dev.hold("thing", {"buffer": p})
    dev.submit(Task("k", {"p": p, "h": h}))
    dev.synchronize()
    with pytest.raises(DeviceError, match="not a live allocation"):
        dev.hold("thing", {"buffer": p + 8})
    dev.free(p)
    with pytest.raises(RetargetError, match="'thing' .*stale|thing \\(handle"):
        dev.submit(Task("k", {"p": dev.malloc(64), "h": h}))
    dev.drop(h)
    with pytest.raises(DeviceError, match="not loaded"):
        dev.check_held(h)

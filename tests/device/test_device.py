"""SimulatedDevice: memory, bounds-checked copies and views, FIFO task queue, task validation.

The device under test is a tiny "vector add" accelerator written the way real simulator devices
are: it declares its kernels and implements execute(), nothing else.
"""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import DeviceError, UnsupportedOpError
from retarget.device.base import Device, SimulatedDevice, Task


class VectorAddDevice(SimulatedDevice):
    name = "vadd"
    kernels = {"vadd": ("a", "b", "out"), "fill": ("out",), "scale": ("x",)}
    default_options = {**SimulatedDevice.default_options, "lanes": 4}

    def execute(self, task: Task) -> dict[str, int]:
        n = task.args["n"]
        if task.kernel == "vadd":
            a = self.view(task.args["a"], (n,), np.int32)
            b = self.view(task.args["b"], (n,), np.int32)
            out = self.view(task.args["out"], (n,), np.int32)
            out[:] = a + b
        elif task.kernel == "fill":
            self.view(task.args["out"], (n,), np.int32)[:] = task.args["value"]
        else:
            raise UnsupportedOpError(f"kernel {task.kernel} is declared but not simulated")
        lanes = self.options["lanes"]
        return {"elements": n, "cycles": -(-n // lanes)}


def make_device(memory_bytes: int = 4096) -> VectorAddDevice:
    return VectorAddDevice(memory_bytes=memory_bytes, alignment=64)


def test_copy_roundtrip_and_counters():
    dev = make_device()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    p = dev.malloc(x.nbytes)
    dev.copy_to_device(p, x)
    y = dev.copy_from_device(p, (3, 4), np.float32)
    np.testing.assert_array_equal(x, y)
    assert y.base is None or not np.shares_memory(y, dev.view(p, (3, 4), np.float32))
    # Non-contiguous input is copied in C order.
    q = dev.malloc(x.nbytes)
    dev.copy_to_device(q, x.T)
    np.testing.assert_array_equal(dev.copy_from_device(q, (4, 3), np.float32), x.T)
    s = dev.stats()
    assert (s.bytes_to_device, s.bytes_from_device) == (96, 96)
    assert (s.copies_to_device, s.copies_from_device) == (2, 2)
    assert s.memory.used == 128 and s.memory.live_allocations == 2  # 48 -> 64 each


def test_fifo_order_and_records():
    dev = make_device()
    n = 8
    a, b, out = (dev.malloc(4 * n) for _ in range(3))
    dev.copy_to_device(a, np.arange(n, dtype=np.int32))
    ids = [
        dev.submit(Task("fill", {"out": b, "n": n, "value": 10}, name="fill b")),
        dev.submit(Task("vadd", {"a": a, "b": b, "out": out, "n": n}, name="out=a+b")),
        dev.submit(Task("vadd", {"a": out, "b": out, "out": out, "n": n}, name="out*=2")),
        dev.submit(Task("fill", {"out": b, "n": n, "value": -1}, name="clobber b")),
    ]
    assert ids == [0, 1, 2, 3]
    assert dev.stats().tasks_queued == 4
    # Nothing runs before synchronize (the queue is asynchronous).
    np.testing.assert_array_equal(dev.copy_from_device(out, (n,), np.int32), np.zeros(n))
    records = dev.synchronize()
    assert [r.task_id for r in records] == ids
    assert [r.name for r in records] == ["fill b", "out=a+b", "out*=2", "clobber b"]
    assert records[1].counters == {"elements": 8, "cycles": 2}
    assert all(r.seconds >= 0 for r in records)
    # Only in-order execution gives 2*(a+10); the last fill ran after both adds.
    np.testing.assert_array_equal(dev.copy_from_device(out, (n,), np.int32),
                                  2 * (np.arange(n) + 10))
    np.testing.assert_array_equal(dev.copy_from_device(b, (n,), np.int32), -np.ones(n))
    assert dev.synchronize() == []
    s = dev.stats()
    assert (s.tasks_submitted, s.tasks_completed, s.tasks_queued) == (4, 4, 0)
    assert len(dev.history) == 4


def test_history_keeps_the_last_records_and_the_count_keeps_them_all(monkeypatch):
    import retarget.device.base as base
    monkeypatch.setattr(base, "HISTORY", 3)
    dev = make_device()
    out = dev.malloc(16)
    for i in range(5):
        dev.submit(Task("fill", {"out": out, "n": 4, "value": i}, name=f"fill {i}"))
        dev.synchronize()
    assert [r.name for r in dev.history] == ["fill 2", "fill 3", "fill 4"]
    assert dev.stats().tasks_completed == 5


def test_unknown_kernel_lists_known_ones():
    dev = make_device()
    with pytest.raises(DeviceError, match=r"kernel 'conv'.*unknown kernel; this device has: "
                                          r"fill, scale, vadd"):
        dev.submit(Task("conv", {}, name="layer1"))


def test_dangling_missing_and_non_pointer_args_rejected_at_submit():
    dev = make_device()
    a = dev.malloc(64)
    with pytest.raises(DeviceError, match=r"pointer argument 'out' = 0x200 is in free memory"):
        dev.submit(Task("fill", {"out": 512, "n": 1, "value": 0}))
    with pytest.raises(DeviceError, match="missing pointer argument 'b'"):
        dev.submit(Task("vadd", {"a": a, "out": a, "n": 1}))
    with pytest.raises(DeviceError, match="'out' = 'a' is not a device address"):
        dev.submit(Task("fill", {"out": "a", "n": 1, "value": 0}))
    with pytest.raises(DeviceError, match="outside device memory"):
        dev.submit(Task("fill", {"out": 1 << 20, "n": 1, "value": 0}))
    with pytest.raises(DeviceError, match="argument 'value' is a function; a Task holds only data"):
        dev.submit(Task("fill", {"out": a, "n": 1, "value": lambda: 0}))
    with pytest.raises(DeviceError, match="argument 'value' is a ndarray"):
        dev.submit(Task("fill", {"out": a, "n": 1, "value": np.zeros(3)}))
    with pytest.raises(DeviceError, match="takes a Task"):
        dev.submit({"kernel": "fill"})
    assert dev.stats().tasks_queued == 0


def test_queued_task_is_a_snapshot_of_its_arguments():
    dev = make_device()
    p = dev.malloc(16)
    args = {"out": p, "n": np.int64(4), "value": 7}
    dev.submit(Task("fill", args))
    args["value"] = 99  # must not affect the queued task
    dev.synchronize()
    np.testing.assert_array_equal(dev.copy_from_device(p, (4,), np.int32), [7, 7, 7, 7])


@pytest.mark.parametrize("direction", ["to", "from"])
def test_out_of_bounds_copies(direction):
    dev = make_device()
    p = dev.malloc(40)  # 64 reserved, only 40 usable
    q = dev.malloc(64)

    def copy(ptr, n_floats):
        if direction == "to":
            dev.copy_to_device(ptr, np.ones(n_floats, np.float32))
        else:
            dev.copy_from_device(ptr, (n_floats,), np.float32)

    copy(p, 10)        # exactly fits
    copy(p + 8, 8)     # interior pointer, still fits
    with pytest.raises(DeviceError, match=r"\(0x0, 44 bytes \(shape \(11,\), float32\)\) overruns "
                                          r"the allocation at 0x0 \(40 bytes\) by 4 bytes"):
        copy(p, 11)    # would spill into rounding padding
    with pytest.raises(DeviceError, match="overruns the allocation at 0x40"):
        copy(q + 60, 2)
    with pytest.raises(DeviceError, match=r"\(0x28, 4 bytes.*rounding padding"):
        copy(p + 40, 1)
    with pytest.raises(DeviceError, match="outside device memory"):
        copy(4096, 1)
    with pytest.raises(DeviceError, match="outside device memory"):
        copy(-4, 1)
    with pytest.raises(DeviceError, match="not a device address"):
        copy(1.5, 1)
    # Failed copies moved nothing.
    s = dev.stats()
    assert (s.copies_to_device + s.copies_from_device) == 2


def test_use_after_free():
    dev = make_device()
    p = dev.malloc(64)
    dev.free(p)
    with pytest.raises(DeviceError, match=r"copy_to_device\(0x0.*in free memory.*use after free"):
        dev.copy_to_device(p, np.zeros(4, np.int32))
    with pytest.raises(DeviceError, match="use after free"):
        dev.copy_from_device(p, (4,), np.int32)
    with pytest.raises(DeviceError, match="dangling pointer"):
        dev.submit(Task("fill", {"out": p, "n": 4, "value": 1}))
    with pytest.raises(DeviceError, match=r"vadd: free\(0x0\).*double free"):
        dev.free(p)


def test_free_while_a_queued_task_uses_the_buffer_is_refused():
    dev = make_device()
    p = dev.malloc(64)
    dev.submit(Task("fill", {"out": p + 16, "n": 4, "value": 3}, name="late fill"))
    with pytest.raises(DeviceError, match=r"still used by queued task #0 'late fill'"):
        dev.free(p)
    dev.synchronize()
    dev.free(p)
    assert dev.stats().memory.used == 0


def test_view_is_bounds_checked_and_writes_through():
    dev = make_device()
    p = dev.malloc(32)
    v = dev.view(p, (2, 4), np.int32)
    v[1, :] = 5
    np.testing.assert_array_equal(dev.copy_from_device(p + 16, (4,), np.int32), [5] * 4)
    with pytest.raises(DeviceError, match="overruns"):
        dev.view(p, (3, 4), np.int32)
    with pytest.raises(DeviceError, match="shape"):
        dev.view(p, (-1,), np.int32)
    with pytest.raises(DeviceError, match="cannot live in device memory"):
        dev.view(p, (1,), object)


def test_task_reading_past_its_buffer_fails_naming_the_task_and_drops_the_rest():
    dev = make_device()
    small = dev.malloc(16)
    dev.submit(Task("fill", {"out": small, "n": 4, "value": 1}, name="ok"))
    dev.submit(Task("fill", {"out": small, "n": 100, "value": 1}, name="too long"))
    dev.submit(Task("fill", {"out": small, "n": 4, "value": 2}, name="after"))
    with pytest.raises(DeviceError, match=r"task #1 'too long' \(kernel 'fill'\) failed: .*overruns"
                                          r".*1 queued task\(s\) after it were discarded"):
        dev.synchronize()
    assert [r.name for r in dev.history] == ["ok"]
    assert dev.stats().tasks_queued == 0
    np.testing.assert_array_equal(dev.copy_from_device(small, (4,), np.int32), [1] * 4)


def test_unimplemented_kernel_keeps_its_error_class():
    dev = make_device()
    p = dev.malloc(16)
    dev.submit(Task("scale", {"x": p, "n": 4}, name="s"))
    with pytest.raises(UnsupportedOpError, match="task #0 's'.*declared but not simulated"):
        dev.synchronize()


def test_configure_options():
    dev = make_device(memory_bytes=1024)
    assert dev.stats().memory.capacity == 1024
    dev.configure(memory_bytes=2048, lanes=8)
    assert dev.stats().memory.capacity == 2048 and dev.options["lanes"] == 8
    assert dev.options["alignment"] == 64  # earlier options are kept
    with pytest.raises(DeviceError, match=r"unknown option\(s\) clock; known: alignment, blas_threads, lanes, "
                                          r"memory_bytes"):
        dev.configure(clock=100)
    with pytest.raises(DeviceError, match="memory_bytes must be a positive int"):
        dev.configure(memory_bytes=0)
    with pytest.raises(DeviceError, match="power of two"):
        dev.configure(alignment=48)
    assert dev.stats().memory.capacity == 2048  # failed configure changed nothing
    p = dev.malloc(8)
    with pytest.raises(DeviceError, match="1 live allocation"):
        dev.configure(memory_bytes=4096)
    dev.free(p)
    dev.configure(memory_bytes=4096)


def test_out_of_memory_names_the_device():
    dev = make_device(memory_bytes=256)
    dev.malloc(256)
    with pytest.raises(DeviceError, match="vadd: out of device memory: requested 1 bytes"):
        dev.malloc(1)


def test_malformed_kernel_table_is_caught_at_class_definition():
    with pytest.raises(TypeError, match="pointer-argument names"):
        class Bad(SimulatedDevice):  # noqa: F841
            kernels = {"k": "out"}  # a string, not a tuple of names


def test_kernels_declared_by_name_only_are_accepted():
    class NamesOnly(SimulatedDevice):
        kernels = ("noop",)

        def execute(self, task):
            return None

    dev = NamesOnly(memory_bytes=256)
    dev.submit(Task("noop", {"anything": 5}))
    assert dev.synchronize()[0].counters == {}


def test_base_interface_is_abstract():
    with pytest.raises(NotImplementedError, match="Device.malloc is not implemented"):
        Device().malloc(64)
    dev = SimulatedDevice(memory_bytes=256)
    with pytest.raises(DeviceError, match="unknown kernel; this device has: none"):
        dev.submit(Task("x"))

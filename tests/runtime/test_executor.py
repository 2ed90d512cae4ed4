"""The executor: copies only where data crosses host<->device, device memory freed after use,
per-region profiles, and clear errors for invalid tasks and out-of-bounds copies."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import retarget
from retarget.errors import DeviceError, InputError, TargetError
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.runtime.device import Task
from retarget.runtime.executor import Executor, execute, format_profile
from retarget.targets.cpu.reference import run_graph
from retarget.targets.registry import load_plugin

ROOT = Path(__file__).resolve().parents[2]
SHAPE = (1, 4, 6, 6)
NBYTES = 4 * int(np.prod(SHAPE))


def toy():
    """The example target (examples/toy_accelerator.py), registered once per process."""
    return load_plugin(ROOT / "examples" / "toy_accelerator.py")


def chain(ops: str) -> Graph:
    """x -> op -> op ... for ops in 'c' (3x3 conv), 'r' (relu), 'a' (add with x)."""
    rng = np.random.default_rng(0)
    x = Value("x", TensorType(SHAPE, "float32"))
    v, nodes = x, []
    for i, op in enumerate(ops):
        out = Value(f"v{i}")
        if op == "c":
            w = constant(f"w{i}", rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
            nodes.append(Node("Conv", f"conv{i}", [v, w], [out], {"pads": [1, 1, 1, 1]}))
        elif op == "r":
            nodes.append(Node("Relu", f"relu{i}", [v], [out]))
        else:
            nodes.append(Node("Add", f"add{i}", [v, x], [out]))
        v = out
    return Graph(nodes, [x], [v])


def x_in():
    return {"x": np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)}


def test_values_stay_on_the_device_between_device_regions(assert_float_paths_agree):
    toy()
    # conv0 | add1 (cpu) | conv2 conv3 -> one device region after the cpu one
    g = chain("cacc")
    m = retarget.compile(g, "toy", min_region_macs=0)
    assert [r.target for r in m.regions] == ["toy", "cpu", "toy"]
    out = m.run(x_in())
    # the device runs the reference's Conv on its own buffers: not bit for bit on every CPU
    assert_float_paths_agree(out, run_graph(g, x_in()), g)
    prof = {p.region: p for p in m.profile}
    assert prof["toy_0"].bytes_in == NBYTES and prof["toy_0"].bytes_out == NBYTES
    assert prof["toy_1"].bytes_in == NBYTES and prof["toy_1"].bytes_out == NBYTES
    assert prof["toy_1"].tasks == 2 and prof["toy_1"].counters["macs"] == 2 * 36 * 4 * 36
    assert prof["cpu_0"].bytes_in == prof["cpu_0"].bytes_out == 0
    assert "toy_1" in format_profile(m.profile)


def test_device_memory_after_a_run_holds_only_the_weights():
    toy()
    # conv0 reads x; add1 (cpu) reads x and conv0; conv2 reads the add.
    g = chain("cac")
    m = retarget.compile(g, "toy", min_region_macs=0)
    ex = Executor(m)
    ex.run(x_in())
    assert sum(p.bytes_in for p in ex.profile) == 2 * NBYTES   # x, then add1's output
    # each conv has its weight and a zero bias the lowering added
    weights = sum(len(k.consts) for k in m.kernels.values())
    assert weights == 4
    assert ex.device.stats().memory.live_allocations == weights
    ex.close()
    assert ex.device is None


def test_repeated_runs_and_fresh_executors_agree():
    toy()
    g = chain("crcra")
    m = retarget.compile(g, "toy", min_region_macs=0)
    a = m.run(x_in())["v4"]
    b = m.run(x_in())["v4"]
    c, prof = execute(m, x_in())
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c["v4"])
    assert len(prof) == len(m.regions)


def test_input_errors_name_the_input():
    toy()
    m = retarget.compile(chain("c"), "toy", min_region_macs=0)
    with pytest.raises(InputError, match="missing input 'x'"):
        m.run({})
    with pytest.raises(InputError, match="expected shape"):
        m.run({"x": np.zeros((1, 4, 5, 5), np.float32)})


def test_device_refuses_invalid_tasks_and_out_of_bounds_copies():
    dev = toy().ToyDevice(memory_bytes=1 << 16)
    p = dev.malloc(64)
    with pytest.raises(DeviceError, match="unknown kernel"):
        dev.submit(Task("fft", {}))
    with pytest.raises(DeviceError, match="missing pointer argument 'w'"):
        dev.submit(Task("conv2d", {"x": p}))
    with pytest.raises(DeviceError, match="not inside a live allocation"):
        dev.submit(Task("dense", {"a": p, "b": p, "c": p, "y": 1 << 15}))
    with pytest.raises(DeviceError, match="overruns the allocation"):
        dev.copy_to_device(p, np.zeros(17, np.float32))
    with pytest.raises(DeviceError, match="overruns"):
        dev.copy_from_device(p, (100,), np.float32)
    # A task whose shapes do not fit its buffers fails at execution with the task named.
    dev.submit(Task("dense", {"a": p, "b": p, "c": p, "y": p, "a_shape": (4, 8), "b_shape": (8, 4),
                              "c_shape": (4,), "y_shape": (4, 4), "dtype": "float32",
                              "alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
                    name="too_big"))
    with pytest.raises(DeviceError, match="too_big"):
        dev.synchronize()


def test_out_of_memory_is_a_clear_error():
    toy()
    g = chain("cc")
    m = retarget.compile(g, "toy", min_region_macs=0, config={"memory_bytes": 256})
    with pytest.raises(DeviceError, match="toy"):
        m.run(x_in())


def test_target_without_device_for_offloaded_regions_is_an_error():
    mod = toy()

    class NoDevice(mod.ToyTarget):
        name = "toy_nodevice"

        def make_device(self):
            return None

    m = retarget.compile(chain("c"), NoDevice(), min_region_macs=0)
    with pytest.raises(TargetError, match="has no device"):
        m.run(x_in())

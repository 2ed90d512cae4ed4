"""Device memory sized to need (docs/guarantees.md, "Resource limits"): a device's
`memory_bytes` is its address space; host memory backs only what has been allocated, so a
small model runs under a small address-space limit on every target."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import retarget
from retarget.runtime.device import SimulatedDevice

from .conftest import compile_digits

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("vta", "dnnvm", "nvdla", "c", "sunway")


class _Echo(SimulatedDevice):
    name = "echo"
    kernels = {"noop": ()}

    def execute(self, task):
        return {}


def test_device_memory_is_backed_only_as_far_as_it_is_allocated():
    dev = _Echo(memory_bytes=1 << 31)
    assert dev.stats().backing_bytes <= 1 << 20
    small = dev.malloc(1000)
    dev.copy_to_device(small, np.arange(1000, dtype=np.uint8).view(np.uint8))
    big = dev.malloc(3 << 20)                      # past the initial backing: grows
    assert 3 << 20 < dev.stats().backing_bytes <= 8 << 20
    # what was there before the growth is still there, and the new allocation is usable
    assert np.array_equal(dev.copy_from_device(small, (1000,), np.uint8),
                          np.arange(1000, dtype=np.uint8).view(np.uint8))
    dev.copy_to_device(big, np.full(3 << 20, 7, np.uint8))
    assert int(dev.copy_from_device(big + (3 << 20) - 1, (1,), np.uint8)[0]) == 7


@pytest.mark.parametrize("target", TARGETS)
def test_a_loaded_program_keeps_running_after_its_device_memory_grew(digits, target):
    """A loaded program keeps working when later allocations grow the device's memory (a
    simulator re-points to the new array, keeping its on-chip state; a C library is handed
    the new addresses at each run)."""
    g, x = digits
    m = compile_digits(g, x, target)
    expected = m.run(x)
    dev = m.target.make_device()
    m.bind(dev)
    first = dev.stats().backing_bytes
    dev.malloc(4 * first)                # everything from now on lies past the first backing
    assert dev.stats().backing_bytes > first
    got = m.run(x)
    dev.malloc(8 * first)                # grow again with the program already loaded
    again = m.run(x)
    for name in expected:   # the same code on the same data: equal, float targets included
        assert np.array_equal(got[name], expected[name])
        assert np.array_equal(again[name], expected[name])
    m.close()


@pytest.mark.parametrize("target", TARGETS)
def test_a_small_model_reserves_little_host_memory(digits, target):
    g, x = digits
    m = compile_digits(g, x, target)
    m.run(x)
    assert m._executor.device.stats().backing_bytes <= 8 << 20
    m.close()


def test_a_small_model_runs_under_a_1_5_gb_address_space_limit_on_every_target(tmp_path):
    """`ulimit -v 1500000` (a container, a small board): each target compiles and runs the
    digits CNN in one process."""
    script = textwrap.dedent(f"""
        import numpy as np, retarget
        g = retarget.load({str(ROOT / 'src/retarget/data/digits_cnn.onnx')!r})
        x = {{v.name: np.zeros(v.type.shape, np.float32) for v in g.inputs}}
        for t in {TARGETS!r}:
            m = retarget.compile(g, t, calibration=None if t in ("c", "sunway") else [x])
            m.run(x)
            m.close()
            print("ran", t)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RETARGET_CFLAGS": "-O0 -std=c99"}
    done = subprocess.run(["bash", "-c", f"ulimit -v 1500000; exec {sys.executable} -c \"$0\"",
                           script], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [w for t in TARGETS for w in ("ran", t)]

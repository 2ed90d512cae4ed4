"""The nvdla engine-level simulator behind the Device API: a descriptor reading or writing
outside the device memory, or outside the memory its task was given, is refused naming the
layer; the per-engine counters count what the region's layers do."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import DeviceError
from retarget.device.base import Task
from retarget.targets.nvdla.device import NvdlaDevice
from retarget.targets.nvdla.loadable import CONV, LAYER_BYTES, LAYER_DTYPE
from retarget.targets.nvdla.sim import Simulator

MEMORY = 1 << 20
# the tiny net (conftest.tiny_model): conv_a 5->8, 3x3, 9x9 out; conv_b 8->12, 3x3, groups 4,
# 5x5 out
CONV_A_MACS = 1 * 8 * 9 * 9 * 5 * 3 * 3
CONV_B_MACS = 1 * 12 * 5 * 5 * (8 // 4) * 3 * 3


@pytest.fixture(scope="module")
def tiny(compiled):
    g, m = compiled("tiny", "nv_full")
    assert len(m.offloaded) == 1
    return m, m.kernels[m.offloaded[0].name]


def loaded(kernel, seed: int = 0):
    """A fresh device with the kernel's program (random int8 inputs in place) loaded."""
    dev = NvdlaDevice(kernel.program.config, memory_bytes=MEMORY)
    rng = np.random.default_rng(seed)
    data = {b.buffer: rng.integers(-128, 128, kernel.program.buffers[b.buffer].shape,
                                   dtype=np.int8) for b in kernel.inputs}
    return dev, dev.load_program(kernel.program, data)


def run_stream(dev, lp, records: np.ndarray, name: str = "rogue"):
    """Upload a (corrupted) relocated stream and run it as a task given only the program's
    image."""
    raw = np.ascontiguousarray(records, LAYER_DTYPE).tobytes()
    p = dev.malloc(len(raw), 64)
    dev.copy_to_device(p, np.frombuffer(raw, np.uint8))
    dev.submit(Task("nvdla.run", {"insns": p, "count": len(records), "memory": (lp.base,)},
                    name))
    return dev.synchronize()


def relocated(kernel, lp) -> np.ndarray:
    return np.frombuffer(kernel.program.relocated(lp.base), LAYER_DTYPE).copy()


def test_the_uncorrupted_stream_runs(tiny):
    m, kernel = tiny
    dev, lp = loaded(kernel)
    [rec] = run_stream(dev, lp, relocated(kernel, lp), "fine")
    assert rec.counters["layers_conv"] == 2


@pytest.mark.parametrize("field,what", [("src", "input map"), ("dst", "output map"),
                                        ("wgt", "weights"), ("bias", "bias")])
def test_an_access_past_device_memory_is_refused_naming_the_layer(tiny, field, what):
    m, kernel = tiny
    dev, lp = loaded(kernel)
    recs = relocated(kernel, lp)
    i = len(recs) - 1                           # the last layer (conv_b): earlier ones run
    assert recs[i]["op"] == CONV
    recs[i][field] = MEMORY - 16                # starts inside memory, ends past it
    with pytest.raises(DeviceError, match=rf"task #\d+ 'rogue'.*nvdla: layer {i} \(CONV\): "
                                          rf"{what} .* at {MEMORY - 16:#x} lies outside the "
                                          rf"{MEMORY}-byte memory"):
        run_stream(dev, lp, recs)
    recs[i][field] = MEMORY + 4096              # wholly past it
    with pytest.raises(DeviceError, match=rf"layer {i} \(CONV\): {what} .*lies outside"):
        run_stream(dev, lp, recs)


def test_an_access_outside_the_task_memory_is_refused_naming_the_layer(tiny):
    m, kernel = tiny
    dev, lp = loaded(kernel)
    victim = dev.malloc(4096)                   # inside device memory, not given to the task
    dev.copy_to_device(victim, np.full(4096, 7, np.uint8))
    recs = relocated(kernel, lp)
    recs[0]["dst"] = victim                     # conv_a writes into another allocation
    with pytest.raises(DeviceError, match=r"layer 0: output map: bytes \[0x[0-9a-f]+, "
                                          r"0x[0-9a-f]+\) are outside the memory this task "
                                          r"was given"):
        run_stream(dev, lp, recs)
    np.testing.assert_array_equal(dev.copy_from_device(victim, (4096,), np.uint8), 7)
    recs = relocated(kernel, lp)
    recs[0]["src"] = victim                     # ... or reads another allocation
    with pytest.raises(DeviceError, match=r"layer 0: input map: bytes .* outside the memory "
                                          r"this task was given"):
        run_stream(dev, lp, recs)


def test_malformed_streams_and_placements_are_refused(tiny):
    m, kernel = tiny
    sim = Simulator(kernel.program.config, np.zeros(4096, np.uint8))
    with pytest.raises(DeviceError, match=f"not whole {LAYER_BYTES}-byte layer descriptors"):
        sim.run(b"\0" * (LAYER_BYTES + 3))
    with pytest.raises(DeviceError, match="layer 0: unknown engine 0"):
        sim.run(b"\0" * LAYER_BYTES)
    with pytest.raises(DeviceError, match="31-bit descriptor address"):
        kernel.program.relocated(1 << 31)
    dev, lp = loaded(kernel)
    recs = relocated(kernel, lp)
    recs[0]["groups"] = 3                       # 5 input channels
    with pytest.raises(DeviceError, match="layer 0: 3 groups do not divide 5 input"):
        run_stream(dev, lp, recs)
    recs = relocated(kernel, lp)
    recs[0]["dst_ch0"] = 4                      # channels 4..12 of an 8-channel map
    with pytest.raises(DeviceError, match="layer 0: result .* does not fit"):
        run_stream(dev, lp, recs)


def test_counters_count_the_regions_layers_and_macs(tiny):
    m, kernel = tiny
    region = m.offloaded[0]
    dev, lp = loaded(kernel)
    rec = dev.run(lp, "tiny")
    c = rec.counters
    ld = kernel.program.loadable
    assert c["instructions"] == len(ld.layers)
    assert c["layers_conv"] == 2 == sum(n.op == "Conv" for n in region.nodes)
    assert c["layers_conv"] + c["layers_sdp"] + c["layers_pdp"] == len(ld.layers)
    assert c["layers_pdp"] == 0
    assert c["macs"] == CONV_A_MACS + CONV_B_MACS == region.macs
    conv_macs = sum(n.macs for n in m.report.nodes if n.op == "Conv")
    assert c["macs"] == conv_macs
    # conv_b writes 12x5x5 int8 at the end; everything written is int8 maps
    written = sum(int(r["dst_c"]) * int(r["dst_h"]) * int(r["dst_w"]) * int(r["src_n"])
                  for r in ld.layers)
    assert c["bytes_written"] == written >= 8 * 9 * 9 + 12 * 5 * 5
    # reads: at least the input map and every weight once
    assert c["bytes_read"] >= 5 * 9 * 9 + 8 * 5 * 9 + 12 * 2 * 9
    # the same counters come back through Module.run's profile
    g = m.graph
    x = {v.name: np.random.default_rng(3).standard_normal(v.type.shape).astype(np.float32)
         for v in g.inputs}
    m.run(x)
    prof = {p.region: p for p in m.profile}[region.name]
    assert prof.counters["macs"] == c["macs"] and prof.counters["layers_conv"] == 2


def test_counters_on_a_network(compiled):
    g, m = compiled("resnet18", "nv_small")
    x = {v.name: np.random.default_rng(4).standard_normal(v.type.shape).astype(np.float32)
         for v in g.inputs}
    m.run(x)
    prof = {p.region: p for p in m.profile}
    for r in m.offloaded:
        c = prof[r.name].counters
        convs = [n for n in r.nodes if n.op in ("Conv", "Gemm", "MatMul")]
        assert c["macs"] == r.macs
        assert c["layers_conv"] == len(convs)
        assert c["layers_pdp"] == sum(n.op in ("MaxPool", "GlobalMaxPool", "SumPool")
                                      for n in r.nodes)

"""The C simulator against the Python simulator byte for byte on the VTA test networks: the whole
device memory (DRAM), the four SRAMs and every region's counters after one inference, plus the
outputs. Each network once, the configs rotated over them (alu_stage included)."""
import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.targets.vta.csim import available
from retarget.targets.vta.device import VTADevice

from .conftest import NETS, build_graph, calibration_for, input_for

pytestmark = pytest.mark.skipif(not available(), reason="no C compiler")

CASES = [("resnet18", "pynq"), ("resnet50", "2x16"), ("mobilenet_v1", "1x32"),
         ("vgg11", "1x64"), ("googlenet", "pynq"), ("resnet18", "pynq_alu"),
         ("resnext50", "pynq"), ("regnet_y", "2x16")]
GROUPED = {"resnext50": dict(size=32, width=0.25), "regnet_y": dict(size=32)}


def graph_for(name):
    if name in NETS:
        return build_graph(name)
    return import_model(zoo.build(name, num_classes=10, seed=0, **GROUPED[name]))


def state_after_one_inference(module, x, simulator):
    cfg = module.target.config
    device = VTADevice(cfg, memory_bytes=min(1 << 28, cfg.dram_bytes), simulator=simulator)
    module.bind(device)
    out = module.run(x)
    srams = [getattr(device.sim.mem, s).astype(np.int64) for s in ("uop", "inp", "wgt", "acc")]
    # copied now: binding the next device frees (and poisons) this one's memory
    return out, device._memory.copy(), srams, [p.counters for p in module.profile], device


@pytest.mark.parametrize("name,cfg", CASES)
def test_c_simulator_byte_for_byte(name, cfg):
    g = graph_for(name)
    m = retarget.compile(g, f"vta:{cfg}", calibration=calibration_for(g))
    x = input_for(g)
    out_p, dram_p, srams_p, counters_p, dev_p = state_after_one_inference(m, x, "python")
    out_c, dram_c, srams_c, counters_c, dev_c = state_after_one_inference(m, x, "c")
    assert type(dev_p.sim).__name__ == "Simulator" and type(dev_c.sim).__name__ == "CSimulator"
    assert np.array_equal(dram_p, dram_c)
    for s, a, b in zip(("uop", "inp", "wgt", "acc"), srams_p, srams_c):
        assert np.array_equal(a, b), s
    assert counters_p == counters_c and any(c.get("gemm_counter") for c in counters_c)
    for k in out_p:
        assert np.array_equal(out_p[k], out_c[k]), k
    m.close()

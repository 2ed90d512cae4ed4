"""End to end on vta: zoo networks quantised, partitioned, lowered, run on the simulator with
the CPU regions on the reference, and compared with the integer reference (the quantised graph
on the reference executor) bit for bit, on three hardware configs."""
import numpy as np
import pytest

import retarget
from retarget.runtime.module import Module
from retarget.ops.reference import run_graph

from .conftest import build_graph, calibration_for, input_for

# Every net on every required config (pynq 1x16, 1x32, 2x16 with BATCH = 2).
CASES = [(net, cfg) for net in ("resnet18", "resnet50", "mobilenet_v1", "vgg11", "googlenet")
         for cfg in ("pynq", "1x32", "2x16")]


def compile_net(name, cfg):
    g = build_graph(name)
    return g, retarget.compile(g, f"vta:{cfg}", calibration=calibration_for(g))


@pytest.mark.parametrize("name,cfg", CASES)
def test_bit_exact_vs_integer_reference(name, cfg):
    g, m = compile_net(name, cfg)
    x = input_for(g)
    got = m.run(x)
    ref = run_graph(m.graph, x)        # the integer graph on the reference executor
    for k in ref:
        assert got[k].dtype == ref[k].dtype and np.array_equal(got[k], ref[k]), (name, cfg, k)
    # the accelerator did the work: every Conv the rules accepted ran in a vta region and the
    # simulator reports GEMM work for it
    convs = [n for n in m.report.nodes if n.op == "Conv"]
    on_vta = [n for n in convs if n.placement == "vta"]
    assert on_vta, m.report.table()
    assert sum(n.macs for n in on_vta) >= 0.9 * sum(n.macs for n in convs) or name == "mobilenet_v1"
    assert sum(p.counters.get("gemm_counter", 0) for p in m.profile) > 0
    for n in convs:
        if n.placement != "vta":
            assert n.reason and "vta" in n.reason or "cpu" in n.reason, n
    m.close()


def test_save_load_run_identical(tmp_path):
    g, m = compile_net("resnet18", "1x32")
    x = input_for(g)
    first = m.run(x)
    m.save(tmp_path / "r18")
    m2 = Module.load(tmp_path / "r18")
    assert m2.target.spec == "vta:1x32"
    again = m2.run(x)
    for k in first:
        assert np.array_equal(first[k], again[k])
    assert [p.counters for p in m.profile] == [p.counters for p in m2.profile]
    m.close(), m2.close()


def test_placement_report_names_the_rules():
    g, m = compile_net("resnet18", "pynq")
    by_name = {n.name: n for n in m.report.nodes}
    first_conv = next(n for n in m.report.nodes if n.op == "Conv")
    assert first_conv.placement == "vta"
    # the 3-channel stem: its window packed into channels on the host (window_packing.py)
    assert "packed into channels on the host" in first_conv.reason
    assert "BLOCK_IN=16" in first_conv.reason
    packing = [n for n in m.report.nodes if n.name.startswith(f"{first_conv.name}/pack_")]
    assert packing and all(n.placement == "cpu" and "window packing" in n.reason
                           for n in packing)
    assert all(n.placement == "cpu" for n in m.report.nodes
               if n.op in ("QuantizeP2", "DequantizeP2", "GlobalAveragePool"))
    rq = [n for n in by_name.values() if n.op == "Requantize"]
    assert rq and all(n.placement == "vta" for n in rq)
    assert "vta:pynq" in m.report.table()
    m.close()

"""Zoo networks compiled for dnnvm on every preset: bit-exact against the integer reference,
and the same after save -> load; what stays on the CPU says why."""
import numpy as np
import pytest

import retarget
from retarget.runtime.module import Module
from retarget.ops.reference import run_graph

from .conftest import NETS, build_graph, samples


@pytest.mark.parametrize("fusion", ["none", "greedy", "optimized"])
@pytest.mark.parametrize("name", sorted(NETS))
def test_network_bit_exact_on_every_preset(name, preset, fusion, tmp_path):
    g = build_graph(name)
    m = retarget.compile(g, f"dnnvm:{preset.name}", calibration=samples(g, 2), fusion=fusion)
    assert m.report.fusion == fusion and (fusion != "none" or not m.report.fused)
    x = samples(g, seed=7)[0]
    got, want = m.run(x), run_graph(m.graph, x)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    placed = [n for n in m.report.nodes if n.op in ("Conv", "MaxPool", "Concat")]
    if name != "unet":        # unet's concats join float ConvTranspose outputs: cpu
        assert all(n.placement == "dnnvm" for n in placed), \
            [(n.name, n.reason) for n in placed if n.placement != "dnnvm"]
    if fusion == "optimized":          # save -> load -> run: identical, groups reported
        m.save(tmp_path / "art")
        m2 = Module.load(tmp_path / "art")
        again = m2.run(x)
        assert all(np.array_equal(again[k], got[k]) for k in got)
        assert m2.report.fused == m.report.fused
        m2.close()
    m.close()


def test_fc_layers_stay_on_cpu_unless_offloaded():
    g = build_graph("vgg11")
    m = retarget.compile(g, "dnnvm:test", calibration=samples(g))
    fc = [n for n in m.report.nodes if n.op == "Gemm"]
    assert fc and all(n.placement == "cpu" and "fully-connected" in n.reason for n in fc)
    m.close()
    m = retarget.compile(g, "dnnvm:test", calibration=samples(g), config={"offload_fc": True})
    placed = {n.name: n for n in m.report.nodes}
    assert all(placed[n.name].placement == "dnnvm" for n in fc)
    flat = [n for n in m.report.nodes if n.op == "Flatten"]
    assert flat and all(n.placement == "dnnvm" for n in flat)
    x = samples(g, seed=3)[0]
    got, want = m.run(x), run_graph(m.graph, x)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    m.close()

"""Zoo networks compiled for nvdla on both presets: bit-exact against the integer reference,
the convolutions (and so most MACs) on the engine, and the same after save -> load."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.runtime.module import Module
from retarget.ops.reference import run_graph
from retarget.targets.nvdla.loadable import Loadable
from retarget.targets.nvdla.program import NvdlaProgram

from .conftest import NETS, PRESETS, samples


def assert_bit_exact(got, want):
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", NETS)
def test_network_is_bit_exact_and_offloads_the_convolutions(compiled, name, preset):
    g, m = compiled(name, preset)
    assert m.target.config.name == preset
    for seed in (7, 8):
        x = samples(g, seed=seed)[0]
        assert_bit_exact(m.run(x), run_graph(m.graph, x))
    # every convolution (and its converter) runs on the engine; so do most MACs
    convs = [n for n in m.report.nodes if n.op == "Conv"]
    assert convs and all(n.placement == "nvdla" for n in convs), \
        [(n.name, n.reason) for n in convs if n.placement != "nvdla"]
    total = sum(n.macs for n in m.report.nodes)
    on = sum(n.macs for n in m.report.nodes if n.placement == "nvdla")
    assert total > 0 and on / total > 0.9, (on, total)
    assert m.report.summary["macs_on_target"] == on
    # each offloaded region was compiled into a loadable for this preset
    assert m.offloaded
    for r in m.offloaded:
        k = m.kernels[r.name]
        ld = k.program.loadable
        assert ld.config_name == preset and ld.hardware == m.target.config.hardware()
        assert len(ld.layers) > 0 and k.compiler_run.binary_bytes == len(ld.to_bytes())
        # the kernel's per-layer MACs are the region's
        assert sum(info.macs for info in k.layers) == r.macs


@pytest.mark.parametrize("name,preset", [("resnet18", "nv_small"), ("googlenet", "nv_full")])
def test_save_load_run_gives_identical_outputs(compiled, name, preset, tmp_path):
    g, m = compiled(name, preset)
    x = samples(g, seed=11)[0]
    before = m.run(x)
    art = m.save(tmp_path / "art")
    # every offloaded region's kernel directory holds its loadable, byte for byte
    for r in m.offloaded:
        d = tmp_path / "art" / "kernels" / r.name
        f = d / "program.loadable"
        assert f.is_file() and (d / "kernel.json").is_file()
        data = f.read_bytes()
        assert data == m.kernels[r.name].program.loadable.to_bytes()
        Loadable.from_bytes(data)
        assert isinstance(NvdlaProgram.load(str(d / "program")), NvdlaProgram)
    m2 = Module.load(art)
    try:
        assert m2.target.name == "nvdla" and m2.target.config.name == preset
        assert sorted(m2.kernels) == sorted(m.kernels)
        after = m2.run(x)
        assert_bit_exact(after, before)
        assert_bit_exact(after, run_graph(m2.graph, x))
    finally:
        m2.close()

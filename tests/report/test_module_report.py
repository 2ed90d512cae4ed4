"""LayerRow's ALU/kind fields and the module-level report on a hand-made module: two timed
builder streams as two VTA regions with a CPU region between them (no compiler involved)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from retarget.errors import TargetError
from retarget.report.layers import make_row, total_row
from retarget.report.module import module_report
from retarget.targets.vta.config import preset
from retarget.targets.vta.kernel import LayerInfo
from retarget.targets.vta.timing import simulate_timing


CFG = preset("pynq")


def test_layer_without_macs_is_alu_bound_with_no_roof():
    r = make_row("pool", CFG, macs=0, cycles=100, gemm_cycles=0, nbytes={"acc": 64},
                 kind="maxpool", alu_cycles=40)
    assert r.bound == "alu" and r.alu_utilisation == pytest.approx(0.4)
    d = r.as_dict()
    assert d["roof_gops"] is None and d["roof_fraction"] is None and d["kind"] == "maxpool"
    other = make_row("x", preset("1x32"), 1, 1, 1, {})
    with pytest.raises(ValueError, match="different configs"):
        total_row([r, other])


class FakeKernel:
    """Just what the report reads: timing(), layers, layer_info(), program.insns."""

    def __init__(self, prog, spans, infos):
        self.program, self.layers, self._spans = prog, infos, spans

    def timing(self):
        return simulate_timing(self.program, layers=self._spans)

    def layer_info(self, name):
        return next((i for i in self.layers if i.name == name), None)


def fake_module(program, profile=()):
    a, b = program(tiles=6), program(tiles=4, vthreads=1)
    na, nb = len(a.insns), len(b.insns)
    ka = FakeKernel(a, [("a1", 0, na // 2), ("a2", na // 2, na - 1)],
                    [LayerInfo("a1", "dense", 1000, 0), LayerInfo("a2", "dense", 2000, 0)])
    kb = FakeKernel(b, [("b1", 0, nb - 1)], [LayerInfo("b1", "dense", 500, 0)])
    regions = [SimpleNamespace(name="vta_0", target="vta", nodes=[1, 2]),
               SimpleNamespace(name="cpu_0", target="cpu", nodes=[3]),
               SimpleNamespace(name="vta_1", target="vta", nodes=[4])]
    graph = SimpleNamespace(inputs=[SimpleNamespace(type=SimpleNamespace(rank=4,
                                                                         shape=(2, 3, 8, 8)))])
    target = SimpleNamespace(name="vta", spec="vta:pynq", config=CFG)
    return SimpleNamespace(regions=regions, kernels={"vta_0": ka, "vta_1": kb}, graph=graph,
                           target=target, profile=list(profile),
                           offloaded=[regions[0], regions[2]]), ka, kb


def test_regions_in_order_and_network_totals(program):
    m, ka, kb = fake_module(program)
    rep = module_report(m)
    ta, tb = ka.timing(), kb.timing()
    assert [r.name for r in rep.regions] == ["vta_0", "cpu_0", "vta_1"]
    assert [r.name for r in rep.modelled] == ["vta_0", "vta_1"]
    assert rep.regions[2].start_cycle == ta.total_cycles
    assert rep.cycles == ta.total_cycles + tb.total_cycles
    assert rep.network.macs == 3500 and rep.frames == 2
    assert rep.fps == pytest.approx(2 / (rep.cycles / 100e6))
    assert rep.regions[1].host_seconds is None and rep.host_cpu_seconds is None
    assert [x.macs for x in rep.regions[0].layers] == [1000, 2000]
    assert rep.regions[0].total.gemm_cycles == ta.gemm_cycles
    json.dumps(rep.to_json())                       # JSON-able as it is


def test_measured_host_time_comes_from_the_profile(program):
    prof = [SimpleNamespace(region="cpu_0", seconds=0.002),
            SimpleNamespace(region="vta_0", seconds=0.5)]
    rep = module_report(fake_module(program, prof)[0])
    assert rep.host_cpu_seconds == pytest.approx(0.002)
    assert rep.regions[0].host_seconds == pytest.approx(0.5)   # simulator wall time, shown
    assert rep.cycles == module_report(fake_module(program)[0]).cycles  # never enters the model
    assert "2.000 ms host time on this machine" in rep.network_line()


def test_no_modelled_region_is_an_error(program):
    m, _, _ = fake_module(program)
    m.kernels = {}
    with pytest.raises(TargetError, match="no cycle model"):
        module_report(m)

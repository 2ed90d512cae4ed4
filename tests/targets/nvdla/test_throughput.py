"""The nvdla throughput model (throughput.py): the convolution core's MAC-array cycles follow
N*OH*OW*KH*KW*groups*ceil(C/g/atomic_c)*ceil(K/g/atomic_k); the bigger configuration is
faster; the model feeds the module report (one row per hardware layer)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from retarget.report.module import module_report
from retarget.targets.nvdla.config import PRESETS
from retarget.targets.nvdla.loadable import (ADDRESS_FIELDS, CONV, HAS_CVT, LAYER_DTYPE, NONE,
                                             Loadable, Memory)
from retarget.targets.nvdla.throughput import layer_cost, throughput


def one_conv(n, c, h, w, k, kh, kw, oh, ow, groups) -> Loadable:
    """A loadable holding one CONV descriptor (no bias / converter tables), for the model."""
    rec = np.zeros(1, LAYER_DTYPE)
    for f in ADDRESS_FIELDS:
        rec[0][f] = NONE
    for f, v in dict(op=CONV, flags=HAS_CVT, src_n=n, src_c=c, src_h=h, src_w=w, dst_c=k,
                     dst_h=oh, dst_w=ow, dst_ctotal=k, kernel_h=kh, kernel_w=kw, stride_h=1,
                     stride_w=1, groups=groups).items():
        rec[0][f] = v
    return Loadable("hand", {}, [Memory(0, "weights", "weights", 0, 0)], [], rec, ["conv"],
                    [], [], np.zeros(0, np.int32))


def formula(cfg, n, oh, ow, kh, kw, groups, c, k):
    return (n * oh * ow * kh * kw * groups * math.ceil(c / groups / cfg.atomic_c)
            * math.ceil(k / groups / cfg.atomic_k))


def test_mac_cycles_of_a_hand_computed_conv():
    # N=2, C=40, K=24, groups=2 (20 -> 12 channels per group), 3x3 kernel, 7x7 output
    ld = one_conv(2, 40, 9, 9, 24, 3, 3, 7, 7, 2)
    small, full = PRESETS["nv_small"], PRESETS["nv_full"]
    # nv_small (8x8 atoms): ceil(20/8) = 3, ceil(12/8) = 2
    cost = layer_cost(small, ld, 0)
    assert cost.mac_cycles == 2 * 7 * 7 * 3 * 3 * 2 * 3 * 2 == 10584
    assert cost.mac_cycles == formula(small, 2, 7, 7, 3, 3, 2, 40, 24)
    assert cost.macs == 2 * 7 * 7 * 24 * 20 * 3 * 3 == 423360
    assert cost.engine == "CONV" and cost.name == "conv"
    assert cost.cycles == max(cost.mac_cycles, cost.engine_cycles, cost.memory_cycles) \
        + small.layer_overhead_cycles
    assert cost.bound == "MAC"
    # nv_full (64x32 atoms): one atom per group either way
    cost = layer_cost(full, ld, 0)
    assert cost.mac_cycles == 2 * 7 * 7 * 3 * 3 * 2 == 1764
    assert cost.mac_cycles == formula(full, 2, 7, 7, 3, 3, 2, 40, 24)
    # a depthwise conv wastes the array: one channel per group costs a whole atom
    dw = one_conv(1, 32, 8, 8, 32, 3, 3, 8, 8, 32)
    assert layer_cost(small, dw, 0).mac_cycles == 8 * 8 * 9 * 32 * 1 * 1 == 18432
    # channels one past an atom cost a second one
    ld = one_conv(1, 65, 4, 4, 33, 1, 1, 4, 4, 1)
    assert layer_cost(full, ld, 0).mac_cycles == 16 * 2 * 2
    assert layer_cost(replace(full, atomic_c=65, atomic_k=33), ld, 0).mac_cycles == 16


def test_mac_utilisation_is_a_fraction_of_the_array():
    # 423360 useful MACs in 10584 cycles of an 8x8 = 64-MAC array: 62.5 % of it is used
    ld = one_conv(2, 40, 9, 9, 24, 3, 3, 7, 7, 2)
    cost = layer_cost(PRESETS["nv_small"], ld, 0)
    assert cost.mac_cycles == 10584 and cost.macs == 423360
    assert 0 < cost.mac_utilisation <= 1
    assert cost.mac_utilisation == pytest.approx(423360 / (10584 * 64))


def test_mac_cycles_of_the_compiled_tiny_net(compiled):
    # conv_a: 5 -> 8, 3x3, 9x9 out; conv_b: 8 -> 12, 3x3, groups 4, 5x5 out
    for preset in ("nv_small", "nv_full"):
        g, m = compiled("tiny", preset)
        kernel = m.kernels[m.offloaded[0].name]
        ld, cfg = kernel.program.loadable, m.target.config
        costs = [c for c in throughput(cfg, ld).layers if c.engine == "CONV"]
        assert [c.mac_cycles for c in costs] == [
            1 * 9 * 9 * 3 * 3 * 1 * math.ceil(5 / cfg.atomic_c) * math.ceil(8 / cfg.atomic_k),
            1 * 5 * 5 * 3 * 3 * 4 * math.ceil(2 / cfg.atomic_c) * math.ceil(3 / cfg.atomic_k)]
        assert [c.mac_cycles for c in costs] == [729, 900]
        assert [c.macs for c in costs] == [8 * 81 * 5 * 9, 12 * 25 * 2 * 9]
        # the kernel's layer info is the model's: useful and performed MACs
        conv_info = [i for i in kernel.layers if i.kind == "conv"]
        assert [i.macs for i in conv_info] == [c.macs for c in costs]
        assert [i.performed_macs for i in conv_info] == \
            [c.mac_cycles * cfg.macs_per_cycle for c in costs]


def test_every_conv_layer_of_resnet18_follows_the_formula(compiled):
    g, m = compiled("resnet18", "nv_small")
    cfg = m.target.config
    n = 0
    for r in m.offloaded:
        ld = m.kernels[r.name].program.loadable
        for i, rec in enumerate(ld.layers):
            if rec["op"] != CONV:
                continue
            n += 1
            r_ = {k: int(rec[k]) for k in LAYER_DTYPE.names}
            assert layer_cost(cfg, ld, i).mac_cycles == formula(
                cfg, r_["src_n"], r_["dst_h"], r_["dst_w"], r_["kernel_h"], r_["kernel_w"],
                r_["groups"], r_["src_c"], r_["dst_c"])
    assert n >= 20


def test_nv_full_is_faster_than_nv_small_on_resnet18(compiled):
    totals = {}
    for preset in ("nv_small", "nv_full"):
        g, m = compiled("resnet18", preset)
        cfg = m.target.config
        tps = [throughput(cfg, m.kernels[r.name].program.loadable) for r in m.offloaded]
        totals[preset] = sum(t.cycles for t in tps)
        assert totals[preset] == sum(m.kernels[r.name].timing().total_cycles
                                     for r in m.offloaded)
        assert sum(t.macs for t in tps) == sum(r.macs for r in m.offloaded)
    assert 0 < totals["nv_full"] < totals["nv_small"]
    # 32x more MACs per cycle and 8x the memory interface: several times faster
    assert totals["nv_small"] / totals["nv_full"] > 3


@pytest.mark.parametrize("preset", ["nv_small", "nv_full"])
def test_module_report_of_an_nvdla_module(compiled, preset):
    g, m = compiled("resnet18", preset)
    rep = module_report(m)
    assert rep.target == f"nvdla:{preset}"
    modelled = rep.modelled
    assert [r.name for r in modelled] == [r.name for r in m.offloaded]
    total = 0
    for reg in modelled:
        kernel = m.kernels[reg.name]
        ld = kernel.program.loadable
        # one row per hardware layer, named after the nodes it runs
        assert [row.name for row in reg.layers] == [ld.string(int(x["name"])) for x in ld.layers]
        assert all(row.cycles > 0 for row in reg.layers)
        assert reg.cycles == throughput(m.target.config, ld).cycles > 0
        assert sum(row.macs for row in reg.layers) == m.regions[
            [r.name for r in m.regions].index(reg.name)].macs
        total += reg.cycles
    assert rep.cycles == rep.network.cycles == total > 0
    assert rep.network.macs == sum(r.macs for r in m.offloaded)
    assert rep.seconds == pytest.approx(total / (m.target.config.clock_mhz * 1e6))
    text = rep.table()
    assert "nvdla" in text and "/conv1/Conv" in text
    assert rep.summary_table() and rep.network_line()

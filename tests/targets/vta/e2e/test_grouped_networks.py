"""ResNeXt-50 32x4d and a RegNetY-400MF-shaped net end to end on vta: every grouped 3x3 runs on
the accelerator (groups merged into block-diagonal weights), bit-exact against the integer
reference."""
import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.ops.reference import run_graph

from .conftest import calibration_for, input_for

# Whether a grouped conv runs on vta is the cycle model's choice against the host
# (rules.grouped_conv_times); at these small sizes some would go to the host. These tests are
# about the lowering, so they model a slow host and every grouped conv is offloaded.
SLOW_HOST = {"host_gmacs": 0.01}


@pytest.mark.parametrize("cfg", ["pynq", "2x16"])
def test_resnext_grouped_convs_on_vta_bit_exact(cfg):
    g = import_model(zoo.build("resnext50", size=32, width=0.25, num_classes=10, seed=0))
    m = retarget.compile(g, f"vta:{cfg}", calibration=calibration_for(g), config=SLOW_HOST)
    x = input_for(g)
    assert np.array_equal(m.run(x)["output"], run_graph(m.graph, x)["output"])
    grouped = {n.name for n in g.nodes if n.op == "Conv" and n.attrs.get("group", 1) > 1}
    placed = {n.name: n for n in m.report.nodes}
    assert len(grouped) == 16 and all(placed[n].placement == "vta" for n in grouped)
    # at this width stage 1 has one channel per group (depthwise); the others merge groups
    assert sum("block-diagonal" in placed[n].reason for n in grouped) == 13
    s = m.report.summary
    assert s["macs_on_target"] >= 0.95 * (s["macs_on_target"] + s["macs_on_cpu"])
    m.close()


def test_regnet_y_odd_group_counts_and_se_on_vta_bit_exact():
    """13 and 55 groups of 8 channels: merged in pairs, the odd last pair half padding."""
    g = import_model(zoo.build("regnet_y", size=32, num_classes=10, seed=0))
    m = retarget.compile(g, "vta", calibration=calibration_for(g), config=SLOW_HOST)
    x = input_for(g)
    assert np.array_equal(m.run(x)["output"], run_graph(m.graph, x)["output"])
    grouped = {n.name for n in g.nodes if n.op == "Conv" and n.attrs.get("group", 1) > 1}
    placed = {n.name: n for n in m.report.nodes}
    assert grouped and all(placed[n].placement == "vta" for n in grouped)
    s = m.report.summary
    assert s["macs_on_target"] >= 0.9 * (s["macs_on_target"] + s["macs_on_cpu"])
    m.close()


def test_resnest_split_attention_on_vta_bit_exact():
    """ResNeSt's radix-2 grouped 3x3 and its attention 1x1s run on vta; the rSoftmax and the
    weighted sum of the splits on the host."""
    g = import_model(zoo.build("resnest14d", size=32, num_classes=10, seed=0))
    m = retarget.compile(g, "vta", calibration=calibration_for(g))
    x = input_for(g)
    assert np.array_equal(m.run(x)["output"], run_graph(m.graph, x)["output"])
    placed = {n.name: n for n in m.report.nodes}
    convs = [n.name for n in g.nodes if n.op == "Conv"]
    assert all(placed[n].placement == "vta" for n in convs)
    s = m.report.summary
    assert s["macs_on_target"] >= 0.9 * (s["macs_on_target"] + s["macs_on_cpu"])
    m.close()

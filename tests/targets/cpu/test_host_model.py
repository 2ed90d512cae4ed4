"""The host CPU roofline model (targets/cpu/host_model.py): peak arithmetic, the roofline
max, per-node flops and bytes from shapes, fused ops free, bad fields refused."""
from dataclasses import replace

import pytest

from retarget.errors import TargetError
from retarget.frontend.onnx import import_model
from retarget.passes.infer_shapes import infer_shapes
from retarget.targets.cpu.host_model import PYNQ_A9, HostCPU, graph_work, node_work
from retarget.zoo.builder import OnnxBuilder


def small_graph():
    """x[1,4,8,8] -> conv (6, 3x3, pad 1, bias) -> bn -> relu -> + x2 -> maxpool 2x2."""
    b = OnnxBuilder("host", seed=0)
    x = b.input("x", (1, 4, 8, 8))
    h = b.relu(b.batchnorm(b.conv(x, 6, 3, "conv", pad=1, bias=True), "bn"), "relu")
    x2 = b.conv(x, 6, 1, "proj", bias=False)
    y = b.maxpool(b.add(h, x2, "add"), 2, 2, "pool")
    b.output(y, "y")
    return infer_shapes(import_model(b.model()))


def test_pynq_peak_is_two_cores_of_two_neon_macs_per_cycle():
    assert PYNQ_A9.peak_gflops == pytest.approx(2 * 4 * 0.667)
    assert PYNQ_A9.sustained_gflops == pytest.approx(PYNQ_A9.peak_gflops * 0.25)


def test_seconds_is_the_roofline_max():
    cpu = HostCPU("t", clock_mhz=1000, cores=1, flops_per_cycle=2, efficiency=0.5, dram_gbs=4)
    assert cpu.seconds(1e9, 0) == pytest.approx(1.0)           # 1 GFLOP/s sustained
    assert cpu.seconds(0, 8e9) == pytest.approx(2.0)           # 4 GB/s
    assert cpu.seconds(1e9, 8e9) == pytest.approx(2.0)
    assert replace(cpu, efficiency=1.0).seconds(1e9, 0) == pytest.approx(0.5)


def test_node_work_counts_macs_and_every_tensor_touched():
    g = small_graph()
    work = {w.op if w.op != "Conv" else w.node: w for w in graph_work(g)}
    conv = next(w for name, w in work.items() if "conv" in name.lower() and "proj" not in name)
    macs = 6 * 8 * 8 * 4 * 9
    assert conv.flops == 2 * macs
    assert conv.nbytes == 4 * (4 * 64 + 6 * 4 * 9 + 6 + 6 * 64)   # x, weights, bias, y
    assert work["BatchNormalization"].flops == work["Relu"].nbytes == 0   # fused: free
    add = work["Add"]
    assert add.flops == 2 * 6 * 64 and add.nbytes == 4 * 3 * 6 * 64
    pool = work["MaxPool"]
    assert pool.nbytes == 4 * (6 * 64 + 6 * 16)


def test_bad_fields_and_missing_shapes_are_refused():
    with pytest.raises(TargetError, match="efficiency"):
        replace(PYNQ_A9, efficiency=0.0)
    with pytest.raises(TargetError, match="dram_gbs"):
        replace(PYNQ_A9, dram_gbs=-1.0)
    b = OnnxBuilder("noshape", seed=0)
    b.output(b.add(b.input("x", (1, 2)), b.input("z", (1, 2)), "add"), "y")
    g = import_model(b.model())
    for v in g.nodes[0].outputs:
        v.type = None
    with pytest.raises(TargetError, match="no inferred shapes"):
        node_work(g.nodes[0])

"""Window packing (targets/vta/window_packing.py): a narrow convolution's kernel window moved
into channels on the host computes exactly the same int32 result, the cycle model picks the
form, and a compiled network with a packed stem equals the unpacked integer graph bit for bit."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import retarget
from retarget.frontend.onnx import import_model
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.infer_shapes import infer_shapes
from retarget.passes.quantize import quantize
from retarget.ops.reference import run_graph
from retarget.targets.vta.config import preset
from retarget.targets.vta.lower import Conv2d, Requant, compute_floor, model_cycles
from retarget.targets.vta.window_packing import (FORMS, apply_packing, choose_packing,
                                                 gemm_uops_per_vector, packed_layer)

from .e2e.conftest import build_graph, calibration_for, input_for

CFG = preset("pynq")
RQ = Requant(8, 0, 127)

# (in_shape, out_channels, kernel, stride, pads (top, left, bottom, right))
CONVS = [
    ((1, 3, 20, 20), 8, (7, 7), (2, 2), (3, 3, 3, 3)),     # ResNet's stem, small
    ((1, 1, 9, 11), 4, (3, 3), (1, 1), (1, 1, 1, 1)),      # a digits-style first layer
    ((2, 2, 10, 13), 5, (3, 5), (1, 2), (1, 2, 0, 1)),     # batch 2, asymmetric everything
    ((1, 4, 9, 9), 16, (3, 3), (2, 2), (0, 0, 0, 0)),      # no padding
]


def conv_graph(in_shape, cout, kernel, stride, pads, seed=0):
    """x (int8) -> Conv with int8 weights and an int32 bias -> int32 output."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (cout, in_shape[1]) + kernel).astype(np.int8)
    b = rng.integers(-5000, 5000, cout).astype(np.int32)
    x = Value("x", TensorType(in_shape, "int8"))
    y = Value("y")
    node = Node("Conv", "conv", [x, constant("w", w), constant("b", b)], [y],
                dict(kernel_shape=list(kernel), strides=list(stride), pads=list(pads)))
    g = infer_shapes(Graph([node], [x], [y], "conv"))
    layer = Conv2d("conv", in_shape, cout, kernel, stride, pads, 1, RQ)
    return g, layer, rng.integers(-128, 128, in_shape).astype(np.int8)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("conv", CONVS, ids=lambda c: "x".join(map(str, c[0])))
def test_packed_conv_equals_the_original(conv, form):
    g, layer, x = conv_graph(*conv)
    want = run_graph(g, {"x": x})["y"]
    packed = g.copy()
    apply_packing(packed, layer, form)
    packed = infer_shapes(packed)
    p = packed_layer(layer, form)
    node = packed.node("conv")
    assert tuple(node.inputs[0].type.shape) == p.in_shape
    assert node.inputs[1].type.shape[2:] == p.kernel
    assert [n.op for n in packed.nodes][-1] == "Conv" and len(packed.nodes) > 1
    got = run_graph(packed, {"x": x})["y"]
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_model_picks_the_form_of_fewest_cycles():
    stem = Conv2d("stem", (1, 3, 32, 32), 16, (7, 7), (2, 2), (3, 3, 3, 3), 1, RQ)
    d = choose_packing(stem, CFG)
    assert d.form in FORMS and set(d.cycles) == {"none", *FORMS}
    assert d.cycles[d.form] == min(d.cycles.values()) <= d.cycles["none"]
    # the original's compute floor already loses, so it was not timed; the floor is a true
    # lower bound of what timing it would have said
    assert d.floors == ("none",) and "none >= " in d.summary
    assert d.cycles["none"] == compute_floor(stem, CFG) <= model_cycles(stem, CFG)
    assert (gemm_uops_per_vector(packed_layer(stem, d.form), CFG)
            < gemm_uops_per_vector(stem, CFG) == 49)
    assert "packed into channels" in d.summary
    # nothing to gain: a full channel block, or a 1x1 kernel
    for layer in (Conv2d("wide", (1, 16, 8, 8), 16, (3, 3), (1, 1), (1, 1, 1, 1), 1, RQ),
                  Conv2d("pointwise", (1, 3, 8, 8), 16, (1, 1), (1, 1), (0, 0, 0, 0), 1, RQ)):
        d = choose_packing(layer, CFG)
        assert d.form is None and d.cycles == {}


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: "x".join(map(str, c[0])))
def test_compute_floor_bounds_the_model(conv):
    _, layer, _ = conv_graph(*conv)
    for form in (None, *FORMS):
        lay = layer if form is None else packed_layer(layer, form)
        assert compute_floor(lay, CFG) <= model_cycles(lay, CFG)


@pytest.mark.parametrize("cfg", ["pynq", "1x32", "2x16"])
def test_compiled_network_equals_the_unpacked_integer_graph(cfg):
    g = build_graph("resnet18")
    calib = calibration_for(g)
    m = retarget.compile(g, f"vta:{cfg}", calibration=calib)
    packed = [d for d in m.target.packings if d.form is not None]
    assert [d.conv for d in packed] == ["/conv1/Conv"]
    assert any(n.name.startswith("/conv1/Conv/pack_") for n in m.graph.nodes)
    unpacked = quantize(g, calib, per_channel=False)     # what prepare did before packing
    assert not any("/pack_" in n.name for n in unpacked.nodes)
    x = input_for(g)
    got, want = m.run(x), run_graph(unpacked, x)
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    m.close()


def _two_narrow_convs():
    """x -> conv a (3 -> 8 channels) -> Relu -> conv b (8 -> 16): both narrow, but b is fed
    by the accelerator."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("wa", (8, 3, 3, 3)), ("wb", (16, 8, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ra"], name="relu"),
             helper.make_node("Conv", ["ra", "wb"], ["y"], name="b", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 12, 12])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 16, 12, 12])], inits)
    return import_model(helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]))


def test_only_convs_fed_by_the_host_are_packed():
    g = _two_narrow_convs()
    m = retarget.compile(g, "vta:pynq", calibration=calibration_for(g))
    assert [d.conv for d in m.target.packings if d.form is not None] == ["a"]
    assert not any(n.name.startswith("b/pack_") for n in m.graph.nodes)
    placed = {n.name: n for n in m.report.nodes}
    assert placed["a"].placement == placed["b"].placement == "vta"
    assert placed["a"].region == placed["b"].region          # one region: nothing split
    x = input_for(g)
    got, want = m.run(x), run_graph(m.graph, x)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    # preparing the prepared graph again packs nothing more
    assert m.target.prepare(m.graph) is m.graph
    m.close()
    # a conv the user keeps on the CPU is not packed either
    m = retarget.compile(g, "vta:pynq", calibration=calibration_for(g), cpu_nodes=["a"])
    assert not any("/pack_" in n.name for n in m.graph.nodes) and not m.target.packings
    assert {n.name: n.placement for n in m.report.nodes}["a"] == "cpu"
    m.close()


def test_a_window_wider_than_vta_takes_is_packed_onto_vta():
    """ViT's patch embedding (16x16 / 16 here 8x8 / 8): too wide for the GEMM core's kernels,
    so the window is packed into channels on the host and the conv runs on vta."""
    import retarget
    from retarget import zoo
    from retarget.frontend.onnx import import_model
    from retarget.ops.reference import run_graph
    g = import_model(zoo.build("vit", size=32, patch=8, depth=1, num_classes=10, seed=0))
    rng = np.random.default_rng(0)
    m = retarget.compile(g, "vta", calibration=[
        {"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}])
    conv = next(n for n in m.report.nodes if n.name == "/patch_embed.proj/Conv")
    assert conv.placement == "vta" and "window packed into channels" in conv.reason
    x = {"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    assert np.array_equal(m.run(x)["output"], run_graph(m.graph, x)["output"])
    m.close()

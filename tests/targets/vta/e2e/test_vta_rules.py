"""The vta target's rules, prepare and naming: no lowering involved (partition only)."""
import numpy as np
import pytest

from retarget.compiler import prepare
from retarget.errors import TargetError
from retarget.passes.infer_shapes import infer_shapes
from retarget.passes.partition import partition
from retarget.targets.registry import get_target, target_names
from retarget.targets.vta.lower import Conv2d

from .conftest import build_graph, calibration_for


def placed(name, spec="vta", config=None, **kw):
    t = get_target(spec, config)
    g = build_graph(name)
    q = prepare(infer_shapes(g), t, calibration_for(g))
    q.toposort()
    return partition(q, t, **kw).report


def test_names_and_presets():
    assert "vta" in target_names()
    for p in ("pynq", "ultra96", "1x32", "1x64", "2x16"):
        t = get_target(f"vta:{p}")
        assert t.spec == f"vta:{p}" and t.config.name == p
    assert get_target("vta").config.block_in == 16
    assert get_target("vta:2x16").config.batch == 2
    with pytest.raises(TargetError, match="presets: pynq"):
        get_target("vta:nope")
    with pytest.raises(TargetError, match="log_block_in"):
        get_target("vta", {"log_block_in": 9})


def test_prepare_quantises_and_warns_without_calibration():
    t = get_target("vta")
    g = infer_shapes(build_graph("resnet18"))
    with pytest.warns(UserWarning, match="random data"):
        q = prepare(g, t)
    ops = {n.op for n in q.nodes}
    assert "BatchNormalization" not in ops and {"Requantize", "QAdd", "QuantizeP2"} <= ops
    conv_in = [n.inputs[0].type.dtype for n in q.nodes if n.op == "Conv"]
    assert conv_in and set(conv_in) == {"int8"}
    assert prepare(q, t).nodes == q.nodes    # already integer: left alone


def test_resnet_convs_offloaded_with_reasons():
    rep = placed("resnet18")
    convs = [n for n in rep.nodes if n.op == "Conv"]
    assert convs and all(n.placement == "vta" for n in convs)
    assert "input channels, not a multiple of BLOCK_IN=16; padded" in convs[0].reason
    fp = [n for n in rep.nodes if n.op == "GlobalAveragePool"][0]
    assert fp.placement == "cpu" and "float op" in fp.reason


def test_depthwise_convs_are_offloaded():
    # depthwise maps onto the GEMM core as diagonal weight blocks (targets/vta/lower/conv.py);
    # with a slow host the cycle model offloads every one, whatever its size
    rep = placed("mobilenet_v1", config={"host_gmacs": 0.01})
    convs = [n for n in rep.nodes if n.op == "Conv"]
    assert convs and all(n.placement == "vta" for n in convs)


def test_grouped_convs_go_where_the_cycle_model_says_they_are_faster():
    from retarget.targets.vta.lower import model_cycles
    from retarget.targets.vta.rules import grouped_conv_times
    fast, slow = (placed("mobilenet_v1", config={"host_gmacs": g}) for g in (1e4, 0.01))
    depthwise = [n.name for n in fast.nodes if n.op == "Conv" and "groups=" in n.reason]
    assert len(depthwise) == 13
    by_name = {n.name: n for n in fast.nodes}
    for name in depthwise:   # a host of 10 T MAC/s beats vta on every one, and it says so
        n = by_name[name]
        assert n.placement == "cpu", n.reason
        assert "on vta's cycle model against" in n.reason and "the host is faster" in n.reason
    assert all(n.placement == "vta" for n in slow.nodes if n.name in depthwise)
    # the times in the reason are the full cycle model's and the useful MACs at host_gmacs
    t = get_target("vta")
    layer = Conv2d("dw", (1, 32, 8, 8), 32, (3, 3), pads=(1, 1, 1, 1), groups=32)
    vta_us, host_us = grouped_conv_times(layer, t.config)
    assert vta_us == model_cycles(layer, t.config) / t.config.clock_mhz
    assert host_us == layer.macs / (t.config.host_gmacs * 1e3)


def test_forcing_requantize_to_cpu_takes_its_conv_along():
    rep = placed("resnet18", cpu_nodes=["/layer1.0.conv1/Conv/requant"])
    conv = next(n for n in rep.nodes if n.name == "/layer1.0.conv1/Conv")
    assert conv.placement == "cpu" and "int32 accumulator" in conv.reason


def test_float_graph_gets_no_offload_without_quantisation():
    # rules alone on a float graph (prepare skipped): nothing runs on vta, and it says why
    t = get_target("vta")
    g = infer_shapes(build_graph("vgg11"))
    rep = partition(g, t).report
    assert all(n.placement == "cpu" for n in rep.nodes)
    assert any("int8" in n.reason for n in rep.nodes if n.op == "Conv")


def _grouped_conv_placement(cin: int, cout: int, group: int):
    from onnx import TensorProto, helper, numpy_helper

    from retarget.frontend.onnx import from_onnx_model
    from retarget.passes.simplify import simplify
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal(
        (cout, cin // group, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], group=group, pads=[1] * 4, name="gconv")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    graph = simplify(from_onnx_model(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17)])))
    t = get_target("vta")
    q = prepare(graph, t, {"x": np.ones((1, cin, 8, 8), np.float32)})
    return next(n for n in partition(q, t).report.nodes if n.name == "gconv")


def test_grouped_convs_run_on_vta_or_stay_on_cpu_with_the_reason():
    assert _grouped_conv_placement(32, 32, 2).placement == "vta"      # whole blocks per group
    conv = _grouped_conv_placement(64, 64, 16)                         # 4 per group: merged
    assert conv.placement == "vta" and "4 at a time as block-diagonal weights" in conv.reason
    conv = _grouped_conv_placement(12, 12, 3)                          # nothing fills a block
    assert conv.placement == "cpu" and "groups=3" in conv.reason and "fills whole" in conv.reason

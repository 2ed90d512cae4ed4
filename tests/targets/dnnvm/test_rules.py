"""What the overlay refuses stays on the CPU with the reason in the placement report."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import retarget
from retarget.frontend.onnx import from_onnx_model
from retarget.passes.simplify import simplify


def one_conv(name="conv", x_shape=(1, 8, 12, 12), w_shape=(8, 8, 3, 3), then=None, **attrs):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name=name, **attrs)]
    out = "c"
    if then:
        nodes.append(helper.make_node(then, ["c"], ["y"], name="act", alpha=0.125))
        out = "y"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      list(x_shape))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], [w])
    return simplify(from_onnx_model(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)])))


def placement(graph, spec="dnnvm:test", **config):
    calib = {"x": np.random.default_rng(1).standard_normal(
        graph.inputs[0].type.shape).astype(np.float32)}
    m = retarget.compile(graph, spec, calibration=calib, min_region_macs=0,
                         config=config or None)
    return {n.name: n for n in m.report.nodes}


@pytest.mark.parametrize("graph, node, reason", [
    (one_conv(dilations=[2, 2], pads=[2, 2, 2, 2]), "conv", "dilation"),
    (one_conv(w_shape=(8, 4, 3, 3), group=2, pads=[1] * 4), "conv", "neither dense nor depthwise"),
    (one_conv(then="LeakyRelu", pads=[1] * 4), "act", "float op"),
], ids=["dilation", "grouped", "leaky-relu"])
def test_unsupported_layers_stay_on_cpu_with_the_reason(graph, node, reason):
    n = placement(graph)[node]
    assert n.placement == "cpu" and reason in n.reason


def test_kernel_too_big_for_the_weight_buffer_stays_on_cpu():
    n = placement(one_conv(w_shape=(8, 8, 7, 7), pads=[3] * 4), wgt_buf_bytes=64)["conv"]
    assert n.placement == "cpu" and "weight buffer" in n.reason
    n = placement(one_conv(w_shape=(8, 8, 5, 5), pads=[2] * 4), max_kernel=3)["conv"]
    assert n.placement == "cpu" and "kernel 5x5 outside 1..3" in n.reason


def test_config_errors_name_the_field():
    from retarget.errors import TargetError
    from retarget.targets.registry import get_target
    with pytest.raises(TargetError, match="max_kernel"):
        get_target("dnnvm", {"max_kernel": 16})
    with pytest.raises(TargetError, match="ddr_bytes_per_cycle"):
        get_target("dnnvm", {"ddr_bytes_per_cycle": 0})
    with pytest.raises(TargetError, match="presets: zu2, zu9, test"):
        get_target("dnnvm:zu7")

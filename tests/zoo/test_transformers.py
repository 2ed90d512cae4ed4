"""Transformer-era zoo networks (ViT, ConvNeXt-style, MobileViT-style, LeViT): the reference against
onnxruntime, with LayerNorm and GELU as single ops (opset 17) and as the decomposed chains older
exports write (opset 13); and on vta, bit-exact against the integer reference with the dense
layers over tokens and attention's activation x activation products on the accelerator."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.ops.reference import run_graph

ort = pytest.importorskip("onnxruntime")

NETS = {
    "vit": dict(size=32, patch=8, depth=2),
    "convnext": dict(size=32, depths=(1, 1, 2, 1)),
    "mobilevit": dict(size=32),
    "levit": dict(size=64, depths=(1, 1, 1)),
}
RNG = np.random.default_rng(4)


def build(name: str, opset: int = 17):
    return zoo.build(name, num_classes=10, opset=opset, seed=1, **NETS[name])


def x_for(name: str) -> np.ndarray:
    s = NETS[name]["size"]
    return RNG.standard_normal((1, 3, s, s)).astype(np.float32)


@pytest.mark.parametrize("opset", [17, 13])
@pytest.mark.parametrize("name", list(NETS))
def test_reference_matches_onnxruntime(name, opset):
    model, x = build(name, opset), x_for(name)
    ops = {n.op_type for n in model.graph.node}
    if name != "levit":          # LeViT normalises with BatchNorm and activates with Hardswish
        assert ("LayerNormalization" in ops) == (opset >= 17)   # else the ReduceMean... chain
        assert "Erf" in ops                                      # GELU's Erf form below 20
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    graph = import_model(model)
    # the importer puts the exporters' chains back together (passes/recompose.py)
    if name != "levit":
        assert any(n.op == "LayerNormalization" for n in graph.nodes)
        assert any(n.op == "Gelu" for n in graph.nodes)
    got = retarget.run(graph, {"input": x})["output"]
    scale = float(np.abs(want).max())
    assert scale > 1e-2
    assert float(np.abs(got - want).max()) <= 1e-5 * scale


@pytest.mark.parametrize("name", list(NETS))
def test_vta_bit_exact_with_token_dense_layers_on_the_accelerator(name):
    graph = import_model(build(name))
    calib = [{"input": x_for(name)} for _ in range(2)]
    m = retarget.compile(graph, "vta", calibration=calib)
    x = {"input": x_for(name)}
    got = m.run(x)
    ref = run_graph(m.graph, x)
    assert np.array_equal(got["output"], ref["output"])
    s = m.report.summary
    share = s["macs_on_target"] / (s["macs_on_target"] + s["macs_on_cpu"])
    assert share >= 0.9, (name, share, m.report.table())
    token = [n for n in m.report.nodes if n.op == "MatMul" and n.placement == "vta"
             and "activation x activation" not in n.reason]
    assert token and all("token rows" in n.reason for n in token)
    # attention's products run on vta too, one dense layer per head
    const_b = {n.name for n in m.graph.nodes if n.op == "MatMul" and n.inputs[1].is_const}
    attn = [n for n in m.report.nodes if n.op == "MatMul" and n.name not in const_b]
    assert all(n.placement == "vta" and "activation x activation" in n.reason for n in attn)
    assert attn or name == "convnext"
    m.close()


def test_dense_over_vta_made_4d_input_stays_on_cpu_with_a_reason():
    """A MatMul reading a conv's NCHW output directly cannot see row-major tokens."""
    w = (RNG.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32)
    m = (RNG.standard_normal((8, 8)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MatMul", ["r", "m"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", 1, [1, 16, 8, 8])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(m, "m")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    graph = import_model(model)
    calib = [{"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}]
    mod = retarget.compile(graph, "vta", calibration=calib)
    mm = [n for n in mod.report.nodes if n.op == "MatMul"]
    assert mm and mm[0].placement == "cpu"
    assert "channel-blocked layout" in mm[0].reason
    x = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    assert np.array_equal(mod.run(x)["y"], run_graph(mod.graph, x)["y"])
    mod.close()


def _matmul_graph(a_shape, b_shape, conv_b: bool):
    """MatMul(a, b) of two activations; b made by a Conv (on vta) when conv_b."""
    ins = [helper.make_tensor_value_info("a", 1, list(a_shape)),
           helper.make_tensor_value_info("b", 1, list(b_shape))]
    nodes, inits = [], []
    if conv_b:
        w = (RNG.standard_normal((b_shape[1], b_shape[1], 1, 1)) * 0.3).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
        nodes.append(helper.make_node("Conv", ["b", "w"], ["bc"]))
    nodes.append(helper.make_node("MatMul", ["a", "bc" if conv_b else "b"], ["y"],
                                  name="mm"))
    g = helper.make_graph(nodes, "g", ins, [helper.make_empty_tensor_value_info("y")], inits)
    graph = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                           ir_version=8))
    calib = [{"a": RNG.standard_normal(a_shape).astype(np.float32),
              "b": RNG.standard_normal(b_shape).astype(np.float32)}]
    m = retarget.compile(graph, "vta", calibration=calib)
    return m, next(n for n in m.report.nodes if n.name == "mm")


def test_activation_products_that_stay_on_cpu_say_why():
    m, mm = _matmul_graph((1, 16, 8, 8), (1, 16, 8, 8), conv_b=True)
    assert mm.placement == "cpu" and "on vta, in the channel-blocked layout" in mm.reason
    m.close()
    m, mm = _matmul_graph((2, 16, 8), (1, 8, 16), conv_b=False)
    assert mm.placement == "cpu" and "must share their leading" in mm.reason
    m.close()
    m, mm = _matmul_graph((2, 16, 8), (2, 8, 16), conv_b=False)
    assert mm.placement == "vta" and "2 slice(s) of 16x8 . 8x16" in mm.reason
    x = {"a": RNG.standard_normal((2, 16, 8)).astype(np.float32),
         "b": RNG.standard_normal((2, 8, 16)).astype(np.float32)}
    assert np.array_equal(m.run(x)["y"], run_graph(m.graph, x)["y"])
    m.close()


def test_artifact_with_weight_laid_out_operands_round_trips(tmp_path):
    graph = import_model(build("vit"))
    calib = [{"input": RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)}]
    m = retarget.compile(graph, "vta", calibration=calib)
    x = {"input": x_for("vit")}
    first = m.run(x)["output"]
    m.save(tmp_path / "vit")
    again = retarget.runtime.module.Module.load(tmp_path / "vit")
    assert np.array_equal(again.run(x)["output"], first)
    m.close(), again.close()


def test_dnnvm_keeps_token_dense_layers_on_the_cpu_and_stays_bit_exact():
    """dnnvm's dense layers read a whole feature map: tokens are not that, so they stay on the
    CPU with the reason, even with offload_fc (only vta reads tokens as rows)."""
    graph = import_model(build("vit"))
    m = retarget.compile(graph, "dnnvm", config={"offload_fc": True},
                         calibration=[{"input": x_for("vit")}])
    x = {"input": x_for("vit")}
    assert np.array_equal(m.run(x)["output"], run_graph(m.graph, x)["output"])
    qkv = next(n for n in m.report.nodes if n.name == "/blocks.0.attn.qkv/MatMul")
    assert qkv.placement == "cpu" and "dnnvm runs int8 dense layers" in qkv.reason
    m.close()

"""quantize(): structure of the integer graph, float-vs-int8 agreement on zoo networks,
determinism, per-channel scales, shared Concat scales and float fallback."""

import numpy as np
import pytest

from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.verify import verify
from retarget.passes.calibrate import frac_bits_for
from retarget.passes.infer_shapes import infer_shapes
from retarget.passes.quantize import quantize, quantize_with_info
from retarget.ops.reference import run_graph

INTEGER_OPS = {"Conv", "Gemm", "MatMul", "Requantize", "QAdd", "MaxPool", "Flatten", "Concat",
               "Relu", "Reshape"}


def cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_frac_bits_for():
    assert frac_bits_for(1.0) == 6        # 64 <= 127 < 128
    assert frac_bits_for(127.0) == 0
    assert frac_bits_for(127.5) == -1
    assert frac_bits_for(0.99) == 7       # 0.99 * 128 = 126.7
    assert frac_bits_for(300.0) == -2     # 300 / 4 = 75
    assert frac_bits_for(0.0) == 24       # all-zero tensor: the clamp


@pytest.fixture(scope="module")
def resnet():
    g = import_model(zoo.build("resnet18", size=32, num_classes=10, width=0.25))
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((8, 3, 32, 32)).astype(np.float32)
    test = rng.standard_normal((6, 3, 32, 32)).astype(np.float32)
    return g, calib, test


def test_resnet18_int8_agrees_with_float(resnet):
    g, calib, test = resnet
    q = quantize_with_info(g, calib)
    verify(q.graph)
    ops = [n.op for n in q.graph.nodes]
    assert "BatchNormalization" not in ops and "Relu" not in ops  # folded
    assert ops.count("QAdd") == 8 and ops.count("Conv") == 20
    for n in q.graph.nodes:
        if n.op == "Conv":
            assert [v.type.dtype for v in n.inputs] == ["int8", "int8", "int32"]
            assert n.outputs[0].type.dtype == "int32"
    # names stay traceable: every float Conv name survives, with its requantisation beside it
    names = {n.name for n in q.graph.nodes}
    for n in g.nodes:
        if n.op == "Conv":
            assert n.name in names and f"{n.name}/requant" in names
    agree = 0
    for i in range(len(test)):
        x = {g.inputs[0].name: test[i:i + 1]}
        a = run_graph(g, x)[g.outputs[0].name]
        b = run_graph(q.graph, x)[g.outputs[0].name]
        assert b.dtype == np.float32 and b.shape == a.shape
        assert cosine(a, b) > 0.99
        agree += int(a.argmax() == b.argmax())
    assert agree >= len(test) - 1


def test_quantize_is_deterministic(resnet):
    g, calib, test = resnet
    x = {g.inputs[0].name: test[:1]}
    runs = [run_graph(quantize(g, calib[:2]), x, intermediates=True) for _ in range(2)]
    assert runs[0].keys() == runs[1].keys()
    for k in runs[0]:
        assert runs[0][k].dtype == runs[1][k].dtype
        assert np.array_equal(runs[0][k], runs[1][k]), k


def test_per_channel_uses_shift_vectors_and_is_no_worse():
    g = import_model(zoo.build("mobilenet_v1", size=32, num_classes=10, width=0.25))
    rng = np.random.default_rng(2)
    calib = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
    x = {g.inputs[0].name: rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    ref = run_graph(g, x)[g.outputs[0].name]
    pt, pc = quantize(g, calib), quantize(g, calib, per_channel=True)
    req = [n for n in pc.nodes if n.op == "Requantize"]
    assert req and all(len(n.inputs) == 2 and n.inputs[1].type.dtype == "int32" for n in req)
    assert all(len(n.inputs) == 1 for n in pt.nodes if n.op == "Requantize")
    c_pt = cosine(ref, run_graph(pt, x)[g.outputs[0].name])
    c_pc = cosine(ref, run_graph(pc, x)[g.outputs[0].name])
    assert c_pc > 0.99 and c_pt > 0.98


def test_googlenet_concat_inputs_share_one_scale():
    g = import_model(zoo.build("googlenet", size=32, num_classes=10, width=0.25))
    rng = np.random.default_rng(3)
    calib = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    q = quantize_with_info(g, calib)
    producers = q.graph.producers()
    concats = [n for n in q.graph.nodes if n.op == "Concat"]
    assert concats
    for n in concats:
        assert all(v.type.dtype == "int8" for v in n.inputs)
        # each input is a requantised conv output or an explicit alignment
        assert all(producers[v].op == "Requantize" for v in n.inputs)
    x = {g.inputs[0].name: rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    assert cosine(run_graph(g, x)[g.outputs[0].name],
                  run_graph(q.graph, x)[g.outputs[0].name]) > 0.99


def small_graph(op_after: str) -> Graph:
    """x -> Conv -> Relu -> Concat(with a MaxPool branch) -> <op_after> -> y."""
    rng = np.random.default_rng(4)
    x = Value("x", TensorType((1, 2, 4, 4), "float32"))
    c, r, m, cat, y = (Value(n) for n in ("c", "r", "m", "cat", "y"))
    nodes = [
        Node("Conv", "conv", [x, constant("w", rng.standard_normal((3, 2, 1, 1)).astype(np.float32) * 4),
                              constant("b", np.zeros(3, np.float32))], [c]),
        Node("Relu", "relu", [c], [r]),
        Node("MaxPool", "pool", [x], [m], {"kernel_shape": [1, 1]}),
        Node("Concat", "cat", [r, m], [cat], {"axis": 1}),
        Node(op_after, "last", [cat], [y]),
    ]
    return infer_shapes(Graph(nodes, [x], [y]))


def test_concat_realigns_pass_through_inputs_and_sigmoid_stays_float():
    g = small_graph("Sigmoid")
    rng = np.random.default_rng(5)
    calib = [{"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)} for _ in range(3)]
    q = quantize_with_info(g, calib)
    ops = [n.op for n in q.graph.nodes]
    assert ops.count("Sigmoid") == 1 and "DequantizeP2" in ops
    sig = q.graph.node("last")
    assert sig.inputs[0].type.dtype == "float32"
    cat = q.graph.node("cat")
    fr = q.frac_bits
    assert fr["r"] == fr["m"] == fr["cat"]  # one shared scale
    x = {"x": calib[0]["x"]}
    # The input is quantised at the shared (coarser) scale and the weights are up to ~8, so a
    # few LSBs of error reach the Sigmoid, whose slope is at most 1/4.
    lsb = 2.0 ** -fr["cat"]
    got, want = run_graph(q.graph, x)["y"], run_graph(g, x)["y"]
    assert np.abs(got - want).max() <= lsb and cosine(got, want) > 0.999
    assert cat.inputs[0].type.dtype == "int8"


def test_no_calibration_inputs_warns_and_uses_random_data():
    g = small_graph("Relu")
    with pytest.warns(UserWarning, match="random data"):
        q = quantize(g)
    assert q.outputs[0].name == "y" and q.outputs[0].type.dtype == "float32"


def test_gemm_alpha_beta_and_clip_fold():
    rng = np.random.default_rng(6)
    x = Value("x", TensorType((2, 8), "float32"))
    h, y = Value("h"), Value("y")
    g = infer_shapes(Graph([
        Node("Gemm", "fc", [x, constant("w", rng.standard_normal((5, 8)).astype(np.float32)),
                            constant("b", rng.standard_normal(5).astype(np.float32))], [h],
             {"alpha": 0.5, "beta": 2.0, "transB": 1}),
        Node("Clip", "relu6", [h, constant("lo", np.float32(0)), constant("hi", np.float32(1.5))],
             [y])], [x], [y]))
    calib = rng.standard_normal((16, 8)).astype(np.float32)
    q = quantize_with_info(g, calib)
    req = q.graph.node("fc/requant")
    f = q.frac_bits["y"]
    assert req.attrs["lo"] == 0 and req.attrs["hi"] == min(127, int(1.5 * 2 ** f))
    assert "alpha" not in q.graph.node("fc").attrs
    xin = {"x": calib[:2]}
    want, got = run_graph(g, xin)["y"], run_graph(q.graph, xin)["y"]
    assert got.max() <= 1.5 and got.min() >= 0
    np.testing.assert_allclose(got, want, atol=4 * 2.0 ** -f + 0.05)


def test_bad_calibration_input_is_a_clear_error():
    g = small_graph("Relu")
    from retarget.errors import InputError
    with pytest.raises(InputError, match="does not fit"):
        quantize(g, np.zeros((3, 5, 4, 4), np.float32))

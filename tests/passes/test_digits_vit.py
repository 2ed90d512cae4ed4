"""The shipped tiny digits ViT (scripts/train_digits_vit.py, a real PyTorch export at opset 17):
the reference against onnxruntime, int8 top-1 within a point of float on the held-out digits,
and vta bit-exact against the integer reference with its dense layers and attention products
on the accelerator."""
import numpy as np
import pytest

import retarget
from retarget import data, quantize, run
from retarget.frontend.onnx import load_onnx
from retarget.ops.reference import run_graph

MODEL = data.DIGITS_VIT
B = 8     # the export folds the batch into its Reshape shapes: load, calibrate, run at one batch


def batches(x):
    return [x[i:i + B] for i in range(0, len(x), B)]


@pytest.fixture(scope="module")
def graph():
    return load_onnx(MODEL, input_shapes={"image": (B, 1, 8, 8)})


def test_shipped_file_is_small_and_recomposed(graph):
    assert MODEL.stat().st_size < 200 * 1024
    ops = {n.op for n in graph.nodes}
    assert {"LayerNormalization", "Gelu", "Softmax", "MatMul"} <= ops and "Erf" not in ops


def test_reference_matches_onnxruntime(graph):
    ort = pytest.importorskip("onnxruntime")
    x, _ = data.digits_test()
    sess = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"image": x[:B]})[0]
    got = run(graph, {"image": x[:B]})["logits"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_int8_within_one_point_of_float(graph):
    x, y = data.digits_test()
    q = quantize(graph, [{"image": c} for c in batches(data.digits_calibration())])
    top1 = {}
    for name, g in (("float", graph), ("int8", q)):
        logits = np.concatenate([run(g, {"image": xb})["logits"] for xb in batches(x)])
        top1[name] = float((logits.argmax(1) == y).mean())
    print(f"digits ViT held-out top-1: float {100 * top1['float']:.2f}%, "
          f"int8 {100 * top1['int8']:.2f}%")
    assert top1["float"] > 0.93
    assert top1["int8"] >= top1["float"] - 0.01


def test_vta_bit_exact_with_every_matmul_on_vta(graph):
    x, _ = data.digits_test()
    calib = [{"image": c} for c in batches(data.digits_calibration())]
    m = retarget.compile(graph, "vta", calibration=calib)
    for xb in batches(x)[:3]:
        assert np.array_equal(m.run({"image": xb})["logits"],
                              run_graph(m.graph, {"image": xb})["logits"])
    on_vta = {n.name for n in m.report.nodes if n.op == "MatMul" and n.placement == "vta"}
    assert len(on_vta) == 12         # qkv, proj, fc1, fc2 and the two attention products, x 2
    m.close()

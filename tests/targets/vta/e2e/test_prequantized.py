"""An already-quantised ONNX model (QDQ, power-of-two scales) compiled for vta: converted to
integer ops requantised half-up, bit-exact on the simulator against that integer graph, and
within one output LSB of the file's own (half-to-even) semantics on onnxruntime."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import retarget
from retarget.zoo.qdq import qdq_cnn

OUT_LSB = 2.0 ** -2  # the model's output scale


def test_qdq_model_on_vta_bit_exact_and_within_an_lsb_of_onnx(tmp_path):
    model = qdq_cnn(per_channel=False)
    path = tmp_path / "qdq.onnx"
    onnx.save(model, path)
    x = {"x": (np.random.default_rng(1).integers(-200, 200, (2, 2, 4, 4)) / 64.0).astype(np.float32)}
    with pytest.warns(UserWarning, match="half-up"):
        module = retarget.compile(retarget.load(path), "vta")
    assert {r.target for r in module.regions} >= {"vta"}
    assert "QuantizeLinear" not in {n.op for n in module.graph.nodes}
    got = module.run(x)["y"]
    np.testing.assert_array_equal(got, retarget.run(module.graph, x)["y"])
    want = ort.InferenceSession(str(path)).run(None, x)[0]
    assert np.abs(got - want).max() <= OUT_LSB


def test_qdq_with_per_channel_weights_keeps_those_convs_on_the_cpu(tmp_path):
    # vta's ALU shifts by one immediate per instruction: per-channel shifts stay on the host.
    with pytest.warns(UserWarning, match="half-up"):
        module = retarget.compile(retarget.load(_save(qdq_cnn(per_channel=True), tmp_path)), "vta")
    conv = [p for p in module.report.nodes if p.name == "conv"][0]
    assert conv.placement == "cpu" and "per-channel" in conv.reason


def _save(model, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path

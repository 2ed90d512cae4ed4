"""Already-quantised ONNX models (QDQ, any scale) compile onto nvdla through the multiplier +
shift format; `retarget compile` reports the error against onnxruntime's run of the file."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import retarget
from retarget.cli import main
from retarget.frontend.onnx import from_onnx_model
from retarget.ops.reference import run_graph
from retarget.zoo.qdq import qdq_cnn, qdq_residual


@pytest.mark.parametrize("build", [qdq_residual, lambda: qdq_cnn(x_scale=0.0213,
                                                                  y_scale=0.0871)])
@pytest.mark.parametrize("config", ["nv_small", "nv_full"])
def test_qdq_model_runs_bit_exact_on_nvdla(build, config):
    model = build()
    module = retarget.compile(from_onnx_model(model), f"nvdla:{config}")
    assert module.offloaded and any(n.op == "RequantizeMul" for n in module.graph.nodes)
    rng = np.random.default_rng(1)
    name = module.graph.inputs[0].name
    x = rng.standard_normal(module.graph.inputs[0].type.shape).astype(np.float32)
    got, ref = module.run({name: x}), run_graph(module.graph, {name: x})
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])


def test_compile_reports_the_error_against_onnxruntime(tmp_path, capsys):
    path = tmp_path / "qdq.onnx"
    onnx.save(qdq_residual(), str(path))
    assert main(["compile", str(path), "--target", "nvdla"]) == 0
    out = capsys.readouterr().out
    assert "error against onnxruntime's result on the same file" in out
    assert "max |error|" in out

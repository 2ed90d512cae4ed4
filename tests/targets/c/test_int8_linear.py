"""ONNX QuantizeLinear / DequantizeLinear (one float32 scale and zero point, int8) on the c
target's int8 routines: bit-exact with the reference on ties of the float32 quotient,
saturation and negative zero points; what they refuse stays on the CPU with the reason."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import retarget
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.infer_shapes import infer_shapes
from retarget.targets.cpu.reference import run_graph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
BUILDS = {"vector": "-O1 -std=c99", "native": "-O3 -march=native -std=c99"}


def _graph(scale: float, zp: int, per_axis: bool = False) -> Graph:
    x = Value("x", TensorType((2, 3, 4, 5), "float32"))
    s = constant("s", np.full(3, scale, np.float32) if per_axis else np.float32(scale))
    z = constant("z", np.full(3, zp, np.int8) if per_axis else np.int8(zp))
    q, y = Value("q"), Value("y")
    nodes = [Node("QuantizeLinear", "quant", [x, s, z], [q], {}),
             Node("DequantizeLinear", "dequant", [q, s, z], [y], {})]
    return infer_shapes(Graph(nodes, [x], [q, y], name="qdq"))


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("scale,zp", [(0.5, 0), (0.1, -3), (0.0173, 5)])
def test_quantize_and_dequantize_linear_are_bit_exact(scale, zp, build):
    g = _graph(scale, zp)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32) * 2
    # ties of x / s (k + 1/2 after the float32 division), saturation both ways, zeros
    ties = (np.arange(-6, 6) + 0.5).astype(np.float32) * np.float32(scale)
    x.flat[:12] = ties
    x.flat[12:16] = [1e4, -1e4, 0.0, -0.0]
    m = retarget.compile(g, "c", config={"cflags": BUILDS[build], "openmp": False})
    try:
        assert {p.op for p in m.report.nodes if p.placement == "c"} == {"QuantizeLinear",
                                                                         "DequantizeLinear"}
        out, ref = m.run({"x": x}), run_graph(g, {"x": x})
        for k in ref:
            assert out[k].dtype == ref[k].dtype and np.array_equal(out[k], ref[k]), k
    finally:
        m.close()


def test_per_axis_scales_stay_on_the_cpu():
    m = retarget.compile(_graph(0.5, 0, per_axis=True), "c", config={"openmp": False})
    reasons = {p.op: p.reason for p in m.report.nodes}
    assert all(p.placement == "cpu" for p in m.report.nodes)
    assert "only one constant float32 scale" in reasons["QuantizeLinear"]

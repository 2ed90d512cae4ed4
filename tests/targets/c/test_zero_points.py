"""zero_points.py (the c target's prepare): Conv / Gemm on Cast(x) - z read x with the zero
point folded into the bias, exactly; where that would not be exact the layer is left alone."""
from __future__ import annotations

import numpy as np

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.ops.reference import run_graph
from retarget.passes.infer_shapes import infer_shapes
from retarget.targets.c.zero_points import fold_input_zero_points


def _offset_layers(bias: np.ndarray, zero_point: int = -7) -> Graph:
    """x (int8) -> Cast -> Sub z -> Conv (bias `bias`) and -> Gemm; the offset value is also
    a graph output (so the Cast / Sub must stay)."""
    rng = np.random.default_rng(0)
    x = Value("x", TensorType((1, 3, 5, 5), "int8"))
    wide, off, conv, flat, dense = (Value(n) for n in ("wide", "off", "conv", "flat", "dense"))
    w = constant("w", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8))
    wd = constant("wd", rng.integers(-127, 128, (6, 75)).astype(np.int8))
    nodes = [Node("Cast", "cast", [x], [wide], {"to": 6}),
             Node("Sub", "sub", [wide, constant("z", np.int32(zero_point))], [off]),
             Node("Conv", "conv", [off, w, constant("b", bias)], [conv]),
             Node("Reshape", "flatten", [off, constant("shape", np.array([1, 75]))], [flat]),
             Node("Gemm", "dense", [flat, wd], [dense], {"transB": 1})]
    return infer_shapes(Graph(nodes, [x], [conv, dense, off]))


def test_the_fold_is_exact_and_keeps_what_others_read():
    g = _offset_layers(np.array([5, -3, 0, 2**20], np.int32))
    folded = fold_input_zero_points(g)
    conv = folded.node("conv")
    assert conv.inputs[0].name == "x" and conv.inputs[2].name == "conv.bias_zp"
    # the Gemm reads a Reshape of the offset, not a Cast - z: left alone; the Sub stays
    assert folded.node("dense").inputs[0].name == "flat"
    assert {"cast", "sub"} <= {n.name for n in folded.nodes}
    x = {"x": np.random.default_rng(1).integers(-128, 128, (1, 3, 5, 5)).astype(np.int8)}
    for k, v in run_graph(g, x).items():
        np.testing.assert_array_equal(run_graph(folded, x)[k], v, err_msg=k)


def test_a_bias_that_would_leave_int32_is_not_folded():
    g = _offset_layers(np.array([2**31 - 1, 0, 0, 0], np.int32), zero_point=-128)
    w = g.node("conv").inputs[1].const.astype(np.int64)
    assert w[0].sum() > 0          # b - z * sum(w) > 2**31 - 1 for the first channel
    assert fold_input_zero_points(g) is g

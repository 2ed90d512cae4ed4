"""Dense layers over tokens in the integer graph: a Linear exported as MatMul + Add keeps its
bias in the int32 accumulator, and a BatchNorm of the MatMul's features (LeViT's Linear +
BatchNorm1d on the flattened tokens) folds into it; both bit-exact on vta."""
import numpy as np
import pytest
from onnx import helper, numpy_helper

import retarget
from retarget.errors import ShapeError
from retarget.frontend.onnx import import_model
from retarget.passes.fold_batchnorm import fold_batchnorm
from retarget.ops.reference import run_graph

RNG = np.random.default_rng(8)
N, K, M = 16, 32, 48


def linear_model(bn: bool):
    w = (RNG.standard_normal((K, M)) / np.sqrt(K)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([N, M], np.int64), "rows"),
             numpy_helper.from_array(np.array([1, N, M], np.int64), "back")]
    if bn:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
                 helper.make_node("Reshape", ["h", "rows"], ["f"]),
                 helper.make_node("BatchNormalization", ["f", "g", "b", "m", "v"], ["n"]),
                 helper.make_node("Reshape", ["n", "back"], ["y"])]
        for name, val in (("g", 1 + 0.2 * RNG.standard_normal(M)), ("b", 0.1 * RNG.standard_normal(M)),
                          ("m", 0.1 * RNG.standard_normal(M)), ("v", RNG.uniform(0.5, 2, M))):
            inits.append(numpy_helper.from_array(val.astype(np.float32), name))
    else:
        inits.append(numpy_helper.from_array((0.1 * RNG.standard_normal(M)).astype(np.float32),
                                             "bias"))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
                 helper.make_node("Add", ["h", "bias"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, N, K])],
                          [helper.make_tensor_value_info("y", 1, [1, N, M])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("bn", [False, True])
def test_bias_and_batchnorm_end_in_the_dense_layer(bn):
    graph = import_model(linear_model(bn))
    if bn:
        folded = fold_batchnorm(graph)
        assert [n.op for n in folded.nodes] == ["MatMul", "Add", "Reshape", "Reshape"]
        x = {"x": RNG.standard_normal((1, N, K)).astype(np.float32)}
        np.testing.assert_allclose(run_graph(folded, x)["y"], run_graph(graph, x)["y"],
                                   rtol=1e-5, atol=1e-5)
    calib = [{"x": RNG.standard_normal((1, N, K)).astype(np.float32)} for _ in range(2)]
    m = retarget.compile(graph, "vta", calibration=calib)
    mm = next(n for n in m.graph.nodes if n.op == "MatMul")
    assert len(mm.inputs) == 3 and mm.inputs[2].type.dtype == "int32"
    assert not any(n.op in ("Add", "BatchNormalization") for n in m.graph.nodes)
    assert next(n for n in m.report.nodes if n.op == "MatMul").placement == "vta"
    x = {"x": RNG.standard_normal((1, N, K)).astype(np.float32)}
    assert np.array_equal(m.run(x)["y"], run_graph(m.graph, x)["y"])
    m.close()


def test_a_float_matmul_with_a_third_input_is_refused():
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w", "c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", 1, [2, 4])], [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
         numpy_helper.from_array(np.ones(3, np.float32), "c")])
    with pytest.raises(ShapeError, match="MatMul takes two inputs"):
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                       ir_version=8))

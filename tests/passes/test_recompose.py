"""passes/recompose.py: exporters' LayerNorm and GELU chains become single ops, computing the
same function (checked against onnxruntime on the chain), and only when that is safe."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from retarget.frontend.onnx import import_model
from retarget.ops.reference import run_graph

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(6)
X = RNG.standard_normal((2, 5, 8)).astype(np.float32) * 2 + 0.5


def model(nodes, consts: dict, outputs=("y",), opset=13):
    inits = [numpy_helper.from_array(np.asarray(v, np.float32 if np.asarray(v).dtype.kind == "f"
                                                else np.int64), k) for k, v in consts.items()]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, list(X.shape))],
                          [helper.make_empty_tensor_value_info(o) for o in outputs], inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8))


def ln_chain(axes=(-1,), square="Pow", weight=True, bias=True, mean_out=False):
    n = [helper.make_node("ReduceMean", ["x"], ["m"], axes=list(axes)),
         helper.make_node("Sub", ["x", "m"], ["d"]),
         (helper.make_node("Pow", ["d", "two"], ["p"]) if square == "Pow"
          else helper.make_node("Mul", ["d", "d"], ["p"])),
         helper.make_node("ReduceMean", ["p"], ["v"], axes=list(axes)),
         helper.make_node("Add", ["v", "eps"], ["e"]),
         helper.make_node("Sqrt", ["e"], ["s"]),
         helper.make_node("Div", ["d", "s"], ["n" if weight or bias else "y"])]
    consts = {"two": np.float32(2.0), "eps": np.float32(1e-5)}
    last = "n"
    if weight:
        n.append(helper.make_node("Mul", [last, "w"], ["nw" if bias else "y"]))
        consts["w"] = (1 + 0.1 * RNG.standard_normal(X.shape[-1])).astype(np.float32)
        last = "nw"
    if bias:
        n.append(helper.make_node("Add", [last, "b"], ["y"]))
        consts["b"] = (0.1 * RNG.standard_normal(X.shape[-1])).astype(np.float32)
    return model(n, consts, outputs=("y", "m") if mean_out else ("y",))


def ops_and_check(m):
    graph = import_model(m)
    got = run_graph(graph, {"x": X})
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": X})
    for v, w in zip(graph.outputs, want):
        np.testing.assert_allclose(got[v.name], w, rtol=1e-5, atol=1e-6)
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("square", ["Pow", "Mul"])
@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, False)])
def test_layer_norm_chain_becomes_one_op(square, weight, bias):
    ops = ops_and_check(ln_chain(square=square, weight=weight, bias=bias))
    assert ops == ["LayerNormalization"]


def test_layer_norm_over_two_trailing_axes():
    assert ops_and_check(ln_chain(axes=(1, 2))) == ["LayerNormalization"]


def test_chains_that_cannot_be_one_op_are_kept():
    # a middle axis (channels-first) has no LayerNormalization form
    assert "LayerNormalization" not in ops_and_check(ln_chain(axes=(1,)))
    # the mean is also a graph output: replacing the chain would lose it
    assert "LayerNormalization" not in ops_and_check(ln_chain(mean_out=True))


@pytest.mark.parametrize("order", ["x_f_then_half", "half_x_then_f", "mul_by_inv_sqrt2"])
def test_gelu_erf_forms_become_one_op(order):
    c = {"one": np.float32(1.0), "half": np.float32(0.5)}
    if order == "mul_by_inv_sqrt2":
        first = helper.make_node("Mul", ["x", "k"], ["a"])
        c["k"] = np.float32(1 / math.sqrt(2))
    else:
        first = helper.make_node("Div", ["x", "k"], ["a"])
        c["k"] = np.float32(math.sqrt(2))
    n = [first, helper.make_node("Erf", ["a"], ["e"]), helper.make_node("Add", ["e", "one"], ["f"])]
    if order == "half_x_then_f":
        n += [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "f"], ["y"])]
    else:
        n += [helper.make_node("Mul", ["x", "f"], ["g"]), helper.make_node("Mul", ["g", "half"], ["y"])]
    assert ops_and_check(model(n, c)) == ["Gelu"]


def test_a_wrong_constant_is_not_gelu():
    c = {"k": np.float32(1.5), "one": np.float32(1.0), "half": np.float32(0.5)}
    n = [helper.make_node("Div", ["x", "k"], ["a"]), helper.make_node("Erf", ["a"], ["e"]),
         helper.make_node("Add", ["e", "one"], ["f"]), helper.make_node("Mul", ["x", "f"], ["g"]),
         helper.make_node("Mul", ["g", "half"], ["y"])]
    assert "Gelu" not in ops_and_check(model(n, c))

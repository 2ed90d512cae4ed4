"""fold_batchnorm: before/after structure and a numeric check."""
import numpy as np

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.fold_batchnorm import fold_batchnorm
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph


def conv_bn_graph(with_bias: bool, extra_use: bool = False) -> Graph:
    rng = np.random.default_rng(0)
    x = Value("x", TensorType((2, 3, 6, 6), "float32"))
    c, y = Value("c"), Value("y")
    conv_in = [x, constant("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))]
    if with_bias:
        conv_in.append(constant("b", rng.standard_normal(4).astype(np.float32)))
    bn = [constant(n, a.astype(np.float32)) for n, a in (
        ("gamma", rng.uniform(0.5, 2, 4)), ("beta", rng.standard_normal(4)),
        ("mean", rng.standard_normal(4)), ("var", rng.uniform(0.1, 3, 4)))]
    nodes = [Node("Conv", "conv", conv_in, [c], {"pads": [1, 1, 1, 1]}),
             Node("BatchNormalization", "bn", [c] + bn, [y], {"epsilon": 1e-3})]
    outputs = [y]
    if extra_use:
        r = Value("r")
        nodes.append(Node("Relu", "relu", [c], [r]))
        outputs.append(r)
    return infer_shapes(Graph(nodes, [x], outputs))


def test_conv_bn_becomes_one_conv_with_the_same_result():
    for with_bias in (False, True):
        g = conv_bn_graph(with_bias)
        f = fold_batchnorm(g)
        assert [n.op for n in f.nodes] == ["Conv"]
        assert f.nodes[0].name == "conv" and f.outputs[0].name == "y"
        assert len(f.nodes[0].inputs) == 3  # a bias appears even when the Conv had none
        x = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype(np.float32)
        before = run_graph(g, {"x": x})["y"]
        after = run_graph(f, {"x": x})["y"]
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
        assert [n.op for n in g.nodes] == ["Conv", "BatchNormalization"]  # input untouched


def test_conv_output_used_elsewhere_is_not_folded():
    g = conv_bn_graph(True, extra_use=True)
    assert [n.op for n in fold_batchnorm(g).nodes] == ["Conv", "BatchNormalization", "Relu"]


def test_bn_without_conv_is_left_alone():
    x = Value("x", TensorType((1, 2, 3, 3), "float32"))
    y = Value("y")
    params = [constant(n, np.ones(2, np.float32)) for n in ("s", "b", "m", "v")]
    g = infer_shapes(Graph([Node("BatchNormalization", "bn", [x] + params, [y])], [x], [y]))
    assert [n.op for n in fold_batchnorm(g).nodes] == ["BatchNormalization"]

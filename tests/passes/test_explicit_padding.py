import numpy as np
import pytest

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.explicit_padding import explicit_padding
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.registry import resolve_attrs
from retarget.ops.reference import run_graph

RNG = np.random.default_rng(5)


def conv_graph(shape, attrs) -> Graph:
    x, y = Value("x", TensorType(shape, "float32")), Value("y")
    w = constant("w", RNG.standard_normal((4, shape[1], 3, 3)).astype(np.float32))
    return infer_shapes(Graph([Node("Conv", "conv", [x, w], [y], attrs)], [x], [y]))


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1]},
    {"pads": [0, 2, 1, 0], "strides": [2, 2]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER"},
])
def test_padded_conv_reads_an_explicit_pad_and_computes_the_same(attrs):
    g = conv_graph((1, 2, 7, 6), attrs)
    g2 = explicit_padding(g)
    assert [n.op for n in g2.nodes] == ["Pad", "Conv"]
    conv = g2.nodes[1]
    assert conv.name == "conv" and conv.outputs[0].name == "y"
    a = resolve_attrs(conv)
    assert a["auto_pad"] == "NOTSET" and not any(a["pads"])
    x = {"x": RNG.standard_normal((1, 2, 7, 6)).astype(np.float32)}
    np.testing.assert_array_equal(run_graph(g2, x)["y"], run_graph(g, x)["y"])
    assert [n.op for n in g.nodes] == ["Conv"]          # the input graph is untouched


def test_unpadded_conv_is_left_alone():
    g = conv_graph((1, 2, 7, 6), {"auto_pad": "VALID"})
    assert [n.op for n in explicit_padding(g).nodes] == ["Conv"]

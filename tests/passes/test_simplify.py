import numpy as np

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.printer import format_graph
from retarget.ir.types import TensorType
from retarget.passes.verify import verify
from retarget.passes.simplify import simplify
from retarget.ops.reference import run_graph


def test_fixpoint_pipeline():
    """Flatten via a Shape chain, an Identity, a constant branch and dead code, all at once."""
    x = Value("x", TensorType((2, 3, 4), "float32"))
    s, g, u, cat, r, i, y, dead = (Value(n) for n in ("s", "g", "u", "cat", "r", "i", "y", "dead"))
    bias_a = constant("bias_a", np.full((1, 12), 0.5, np.float32))
    bias_b = constant("bias_b", np.full((1, 12), 0.25, np.float32))
    bias, unused = Value("bias"), Value("unused")
    before = Graph([
        Node("Shape", "shape", [x], [s]),
        Node("Gather", "gather", [s, constant("zero", np.array(0, np.int64))], [g], {"axis": 0}),
        Node("Unsqueeze", "unsq", [g, constant("ax", np.array([0], np.int64))], [u]),
        Node("Concat", "concat", [u, constant("m1", np.array([-1], np.int64))], [cat], {"axis": 0}),
        Node("Reshape", "reshape", [x, cat], [r]),
        Node("Identity", "id", [r], [i]),
        Node("Add", "bias_sum", [bias_a, bias_b], [bias]),
        Node("Relu", "dead_relu", [x], [dead]),
        Node("Neg", "dead_neg", [bias], [unused]),
        Node("Add", "add", [i, bias], [y]),
    ], [x], [y], name="net")
    after = simplify(before)
    verify(after)
    x2 = Value("x", x.type)
    r2 = Value("r", TensorType((2, 12), "float32"))
    y2 = Value("y", TensorType((2, 12), "float32"))
    expected = Graph([Node("Reshape", "reshape", [x2, constant("cat", np.array([2, -1], np.int64))], [r2]),
                      Node("Add", "add", [r2, constant("bias", np.full((1, 12), 0.75, np.float32))], [y2])],
                     [x2], [y2], name="net")
    assert format_graph(after) == format_graph(expected)
    assert after.nodes[1].inputs[1].const.tolist() == [[0.75] * 12]
    xs = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)}
    assert np.array_equal(run_graph(after, xs)["y"], xs["x"].reshape(2, 12) + np.float32(0.75))
    assert len(before.nodes) == 10  # not modified


def test_simplify_is_idempotent():
    x = Value("x", TensorType((4,), "float32"))
    y = Value("y")
    g = simplify(Graph([Node("Relu", "relu", [x], [y])], [x], [y]))
    assert format_graph(simplify(g)) == format_graph(g)
    assert g.outputs[0].type == TensorType((4,), "float32")

import numpy as np

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.printer import format_graph
from retarget.ir.types import TensorType
from retarget.passes.verify import verify
from retarget.passes.fold_constants import fold_constants
from retarget.ops.reference import run_graph

X = TensorType((2, 3, 4), "float32")


def _view_chain():
    """y = x.view(x.size(0), -1) the way PyTorch exports it."""
    x = Value("x", X)
    s, g, u, cat, y = (Value(n) for n in ("s", "g", "u", "cat", "y"))
    nodes = [Node("Shape", "shape", [x], [s]),
             Node("Gather", "gather", [s, constant("zero", np.array(0, np.int64))], [g], {"axis": 0}),
             Node("Unsqueeze", "unsq", [g, constant("ax", np.array([0], np.int64))], [u]),
             Node("Concat", "concat", [u, constant("m1", np.array([-1], np.int64))], [cat], {"axis": 0}),
             Node("Reshape", "reshape", [x, cat], [y])]
    return Graph(nodes, [x], [y], name="view")


def test_shape_chain_folds_into_reshape_constant():
    before = _view_chain()
    after = fold_constants(before)
    x = Value("x", X)
    expected = Graph([Node("Reshape", "reshape", [x, constant("cat", np.array([2, -1], np.int64))],
                           [Value("y", TensorType((2, 12), "float32"))])], [x],
                     [], name="view")
    expected.outputs = [expected.nodes[0].outputs[0]]
    assert format_graph(after) == format_graph(expected)
    assert after.nodes[0].inputs[1].const.tolist() == [2, -1]
    verify(after)
    # The input graph is untouched: still five nodes, untyped intermediates.
    assert [n.op for n in before.nodes] == ["Shape", "Gather", "Unsqueeze", "Concat", "Reshape"]
    assert before.nodes[-1].inputs[1].const is None and before.outputs[0].type is None


def test_constant_subgraph_is_evaluated_and_input_dependent_part_kept():
    x = Value("x", TensorType((2,), "float32"))
    a = constant("a", np.array([1.0, 2.0], np.float32))
    b = constant("b", np.array([10.0, 20.0], np.float32))
    ab, nab, y = Value("ab"), Value("nab"), Value("y")
    before = Graph([Node("Add", "add_c", [a, b], [ab]), Node("Neg", "neg", [ab], [nab]),
                    Node("Add", "add_x", [x, nab], [y])], [x], [y])
    after = fold_constants(before)
    assert [n.name for n in after.nodes] == ["add_x"]
    assert after.nodes[0].inputs[1].name == "nab"
    assert after.nodes[0].inputs[1].const.tolist() == [-11.0, -22.0]
    xs = {"x": np.array([1.0, 1.0], np.float32)}
    assert np.array_equal(run_graph(after, xs)["y"], np.array([-10.0, -21.0], np.float32))


def test_shape_with_start_end_and_size():
    x = Value("x", X)
    s, n = Value("s"), Value("n")
    before = Graph([Node("Shape", "shape", [x], [s], {"start": -2}),
                    Node("Size", "size", [x], [n])], [x], [s, n])
    after = fold_constants(before)
    assert after.nodes == []
    assert [v.name for v in after.outputs] == ["s", "n"]  # graph output names are kept
    assert after.outputs[0].const.tolist() == [3, 4] and after.outputs[0].const.dtype == np.int64
    assert int(after.outputs[1].const) == 24


def test_large_expansion_is_not_materialised():
    x = Value("x", TensorType((2048, 1024), "float32"))
    shape = constant("shape", np.array([2048, 1024], np.int64))
    one = constant("one", np.array([1.0], np.float32))
    e, y = Value("e"), Value("y")
    before = Graph([Node("Expand", "expand", [one, shape], [e]), Node("Add", "add", [x, e], [y])],
                   [x], [y])
    after = fold_constants(before)
    assert [n.op for n in after.nodes] == ["Expand", "Add"]
    assert after.nodes[0].outputs[0].type == TensorType((2048, 1024), "float32")

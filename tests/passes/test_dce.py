import numpy as np

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.printer import format_graph
from retarget.ir.types import TensorType
from retarget.passes.dce import eliminate_dead_code

F = TensorType((4,), "float32")


def test_dead_nodes_and_their_constants_go():
    x, unused_in = Value("x", F), Value("unused_in", F)
    w = constant("w", np.ones(4, np.float32))
    a, b, c = Value("a", F), Value("b", F), Value("c", F)
    before = Graph([Node("Relu", "live", [x], [a]),
                    Node("Add", "dead_add", [x, w], [b]),
                    Node("Relu", "dead_relu", [b], [c])], [x, unused_in], [a])
    after = eliminate_dead_code(before)
    x2, a2 = Value("x", F), Value("a", F)
    expected = Graph([Node("Relu", "live", [x2], [a2])], [x2, Value("unused_in", F)], [a2])
    assert format_graph(after) == format_graph(expected)
    assert after.constants() == []  # w was read only by dead code
    assert len(before.nodes) == 3 and len(before.constants()) == 1  # input graph untouched


def test_multi_output_node_kept_when_one_output_is_used():
    x = Value("x", F)
    y, mask = Value("y", F), Value("mask", TensorType((4,), "bool"))
    before = Graph([Node("Dropout", "drop", [x], [y, mask])], [x], [y])
    after = eliminate_dead_code(before)
    assert [n.name for n in after.nodes] == ["drop"]
    assert [v.name for v in after.nodes[0].outputs] == ["y", "mask"]

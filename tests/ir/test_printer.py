import numpy as np

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.printer import format_node
from retarget.ir.types import TensorType


def test_node_line_format():
    x = Value("x", TensorType((1, 3, 112, 112), "float32"))
    w = constant("w", np.zeros((64, 3, 7, 7), np.float32))
    b = constant("b", np.zeros((64,), np.float32))
    y = Value("y", TensorType((1, 64, 56, 56), "float32"))
    n = Node("Conv", "conv1", [x, w, b], [y], {"strides": [2, 2], "pads": [3, 3, 3, 3]})
    assert format_node(n) == ("%y: float32[1,64,56,56] = Conv(%x, %w, %b) "
                              "{pads=[3,3,3,3], strides=[2,2]}  # conv1")


def test_graph_summarises_constants_without_data():
    x = Value("x", TensorType((2, 2), "float32"))
    big = constant("big", np.arange(1000, dtype=np.float32).reshape(10, 100))
    t = Value("t")  # untyped values print as '?'
    y = Value("y", TensorType((2, 2), "float32"))
    g = Graph([Node("Add", "add", [x, big], [t], {"table": np.arange(20)}),
               Node("Resize", "rs", [t, None, None], [y], {"mode": "linear", "alpha": 0.5})],
              [x], [y], name="tiny")
    text = str(g)
    assert text.splitlines()[0] == "graph tiny(%x: float32[2,2]) {"
    assert "const %big: float32[10,100]" in text
    assert "4000 bytes" in text
    assert "999" not in text  # constant data is never printed
    assert "%t: ? = Add(%x, %big) {table=int64[20](...)}  # add" in text
    assert "= Resize(%t, _, _) {alpha=0.5, mode='linear'}  # rs" in text
    assert text.splitlines()[-2] == "  return %y"

import numpy as np

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.printer import format_graph
from retarget.ir.types import TensorType
from retarget.passes.verify import verify
from retarget.passes.remove_identities import remove_identities

F = TensorType((4,), "float32")


def test_identity_and_inference_dropout_removed():
    x = Value("x", F)
    i, d, y = Value("i", F), Value("d", F), Value("y", F)
    off = constant("off", np.array(False))
    before = Graph([Node("Identity", "id", [x], [i]),
                    Node("Dropout", "drop", [i, constant("ratio", np.array(0.5, np.float32)), off], [d]),
                    Node("Relu", "relu", [d], [y])], [x], [y])
    after = remove_identities(before)
    x2, y2 = Value("x", F), Value("y", F)
    assert format_graph(after) == format_graph(Graph([Node("Relu", "relu", [x2], [y2])], [x2], [y2]))
    verify(after)
    assert len(before.nodes) == 3


def test_identity_feeding_graph_output_keeps_output_name():
    x = Value("x", F)
    r, y = Value("r", F), Value("y", F)
    before = Graph([Node("Relu", "relu", [x], [r]), Node("Identity", "id", [r], [y])], [x], [y])
    after = remove_identities(before)
    assert [n.name for n in after.nodes] == ["relu"]
    assert after.nodes[0].outputs[0] is after.outputs[0] and after.outputs[0].name == "y"
    verify(after)


def test_kept_when_removal_would_change_the_interface_or_semantics():
    x = Value("x", F)
    y = Value("y", F)
    # Graph input passed straight to the output: removing the Identity would rename an output.
    g = Graph([Node("Identity", "id", [x], [y])], [x], [y])
    assert [n.name for n in remove_identities(g).nodes] == ["id"]
    # Dropout whose mask is read, or whose training_mode is not known to be off.
    d, m, z = Value("d", F), Value("m", TensorType((4,), "bool")), Value("z", F)
    g = Graph([Node("Dropout", "drop", [x], [d, m])], [x], [d, m])
    assert [n.name for n in remove_identities(g).nodes] == ["drop"]
    t = Value("t", TensorType((), "bool"))
    g = Graph([Node("Dropout", "drop", [x, None, t], [d]), Node("Relu", "r", [d], [z])], [x, t], [z])
    assert [n.name for n in remove_identities(g).nodes] == ["drop", "r"]

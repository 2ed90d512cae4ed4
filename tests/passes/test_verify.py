import numpy as np
import pytest

from retarget.errors import GraphError
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.verify import verify

F = TensorType((2, 3), "float32")


def _chain():
    x = Value("x", F)
    c = constant("c", np.ones((2, 3), np.float32))
    t, y = Value("t", F), Value("y", F)
    return Graph([Node("Add", "add", [x, c], [t]), Node("Relu", "relu", [t], [y])], [x], [y])


def test_well_formed_graph_passes():
    verify(_chain())


def test_untyped_graph_passes_structural_checks():
    g = _chain()
    for n in g.nodes:
        for v in n.outputs:
            v.type = None
    verify(g)


def test_use_before_definition():
    g = _chain()
    g.nodes.reverse()
    with pytest.raises(GraphError, match="Relu 'relu'.*'t'.*before.*Add 'add'.*toposort"):
        verify(g)


def test_cycle_is_named():
    g = _chain()
    add, relu = g.nodes
    add.inputs[0] = relu.outputs[0]
    with pytest.raises(GraphError, match="cycle"):
        verify(g)


def test_undefined_input():
    g = _chain()
    g.nodes[1].inputs[0] = Value("ghost", F)
    with pytest.raises(GraphError, match="Relu 'relu'.*'ghost'.*not defined"):
        verify(g)


def test_value_defined_twice():
    g = _chain()
    g.nodes[1].outputs[0] = g.nodes[0].outputs[0]
    g.outputs = [g.nodes[0].outputs[0]]
    with pytest.raises(GraphError, match="Relu 'relu'.*'t'.*already defined by Add 'add'"):
        verify(g)


def test_duplicate_names():
    g = _chain()
    g.nodes[1].outputs[0].name = "t"
    with pytest.raises(GraphError, match="named 't'"):
        verify(g)
    g = _chain()
    g.nodes[1].name = "add"
    with pytest.raises(GraphError, match="nodes are both named 'add'"):
        verify(g)


def test_undefined_graph_output():
    g = _chain()
    g.outputs = [Value("nowhere", F)]
    with pytest.raises(GraphError, match="graph output 'nowhere'"):
        verify(g)


def test_arity_and_unknown_op():
    g = _chain()
    g.nodes[1].inputs.append(g.inputs[0])
    with pytest.raises(GraphError, match="Relu 'relu'.*inputs"):
        verify(g)
    g = _chain()
    g.nodes[1].op = "NoSuchOp"
    with pytest.raises(GraphError, match="NoSuchOp 'relu'.*unknown op"):
        verify(g)


def test_type_mismatch_names_node_and_types():
    g = _chain()
    g.nodes[1].outputs[0].type = TensorType((3, 2), "float32")
    with pytest.raises(GraphError, match=r"Relu 'relu'.*'y'.*float32\[3,2\].*float32\[2,3\]"):
        verify(g)
    g = _chain()
    with pytest.raises(GraphError, match="after my_pass"):
        g.nodes[0].outputs[0].type = TensorType((2, 3), "int32")
        verify(g, context="after my_pass")

"""passes/transposes.py: inverse transposes cancel, transposes sink past element-wise ops."""
import numpy as np

import retarget
from retarget.ir import Graph, Node, TensorType, Value
from retarget.passes.infer_shapes import infer_shapes
from retarget.passes.transposes import cancel_transposes

NCHW, NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _chain():
    """x (NHWC) -> to NCHW -> Relu -> to NHWC -> [a]; y (NHWC) -> to NCHW -> to NHWC -> [b];
    Add(a, b) -> to NCHW -> out."""
    x = Value("x", TensorType((1, 4, 5, 3), "float32"))
    y = Value("y", TensorType((1, 4, 5, 3), "float32"))
    vals = {n: Value(n) for n in "t1 r t2 u1 u2 s t3".split()}
    nodes = [Node("Transpose", "T1", [x], [vals["t1"]], {"perm": NCHW}),
             Node("Relu", "relu", [vals["t1"]], [vals["r"]]),
             Node("Transpose", "T2", [vals["r"]], [vals["t2"]], {"perm": NHWC}),
             Node("Transpose", "U1", [y], [vals["u1"]], {"perm": NCHW}),
             Node("Transpose", "U2", [vals["u1"]], [vals["u2"]], {"perm": NHWC}),
             Node("Add", "add", [vals["t2"], vals["u2"]], [vals["s"]]),
             Node("Transpose", "T3", [vals["s"]], [vals["t3"]], {"perm": NCHW})]
    return infer_shapes(Graph(nodes, [x, y], [vals["t3"]]))


def test_pairs_cancel_and_transposes_sink_to_the_end():
    g = _chain()
    h = cancel_transposes(g)
    rng = np.random.default_rng(0)
    feed = {"x": rng.normal(size=(1, 4, 5, 3)).astype(np.float32),
            "y": rng.normal(size=(1, 4, 5, 3)).astype(np.float32)}
    np.testing.assert_array_equal(retarget.run(g, feed)["t3"], retarget.run(h, feed)["t3"])
    assert [n.op for n in h.nodes].count("Transpose") < 4
    assert h.outputs[0].name == "t3"


def test_a_value_read_elsewhere_keeps_its_layout():
    g = _chain()
    extra = Value("t2_copy")
    g.nodes.insert(3, Node("Identity", "keep", [g.nodes[2].outputs[0]], [extra]))
    g.outputs.append(extra)
    g = infer_shapes(g)
    h = cancel_transposes(g)
    feed = {"x": np.arange(60, dtype=np.float32).reshape(1, 4, 5, 3) - 30,
            "y": np.ones((1, 4, 5, 3), np.float32)}
    want, got = retarget.run(g, feed), retarget.run(h, feed)
    assert [v.name for v in h.outputs] == ["t3", "t2_copy"]
    for name in want:
        np.testing.assert_array_equal(want[name], got[name])

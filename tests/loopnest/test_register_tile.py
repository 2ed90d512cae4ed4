"""The optimised schedule's transformations (register_tile.py, inner_order.py): a tiled or
reordered kernel computes exactly what the lowered kernel computes (same summation order:
bit-identical under the interpreter), with its weights packed by the Relayout it reports."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.loopnest import Loop, run_kernel, verify_kernel, walk
from retarget.loopnest.inner_order import order_reductions
from retarget.loopnest.ops import lower_node
from retarget.loopnest.register_tile import Relayout, largest_divisor, register_tile

from .test_ops import f32, make_node

CASES = {
    "conv3x3": ("Conv", [f32(1, 4, 9, 9), f32(32, 4, 3, 3), f32(32)], {}),
    "conv_stride2_dilated": ("Conv", [f32(1, 3, 13, 11), f32(8, 3, 3, 3), f32(8)],
                             {"strides": [2, 2], "dilations": [2, 1]}),
    "conv_grouped": ("Conv", [f32(1, 8, 6, 6), f32(12, 2, 3, 3), f32(12)], {"group": 4}),
    "conv_1x1_no_bias": ("Conv", [f32(2, 6, 5, 7), f32(20, 6, 1, 1)], {}),
    "gemm_transB": ("Gemm", [f32(3, 10), f32(24, 10), f32(24)], {"transB": 1}),
    "matmul_tokens": ("MatMul", [f32(2, 5, 8), f32(8, 48)], {}),
}


def _constants(node):
    return {v.name: v.const for v in node.inputs if v is not None and v.is_const}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("channels,columns", [(16, 8), (4, 3), (1, 1)])
def test_tiled_kernel_is_bit_identical_to_the_lowered_one(case, channels, columns):
    op, inputs, attrs = CASES[case]
    node, data = make_node(op, inputs, attrs, consts=tuple(range(1, len(inputs))))
    kernel = lower_node(node)
    consts = _constants(node)
    tiled = register_tile(kernel, frozenset(consts), channels, columns)
    verify_kernel(tiled.kernel)
    assert tiled.relayouts, "a weighted reduction is tiled"
    assert len(tiled.kernel.locals) == len(kernel.locals) + 1
    acc = tiled.kernel.locals[-1]
    assert acc.scope == "local" and np.prod(acc.shape) <= channels * columns
    args = dict(data)
    for r in tiled.relayouts:
        args[r.name] = r.apply(consts[r.source])
    expected = run_kernel(kernel, {t.name: data[t.name] for t in kernel.inputs})
    got = run_kernel(tiled.kernel, {t.name: args[t.name] for t in tiled.kernel.inputs})
    for name, e in expected.items():
        np.testing.assert_array_equal(got[name], e, err_msg=name)


def test_relayout_blocks_the_channel_dimension_innermost():
    w = np.arange(8 * 3 * 2 * 2, dtype=np.float32).reshape(8, 3, 2, 2)
    r = Relayout("w.block4", "w", 0, 4)
    p = r.apply(w)
    assert p.shape == r.shape(w.shape) == (2, 3, 2, 2, 4)
    assert p[1, 2, 1, 0, 3] == w[1 * 4 + 3, 2, 1, 0]
    assert p.flags.c_contiguous


def test_weights_read_by_a_data_operand_are_not_tiled():
    # depthwise: every output channel reads its own input channel, so no loop is "only the
    # weights'": the nest is left to inner_order
    node, _ = make_node("Conv", [f32(1, 6, 7, 7), f32(6, 1, 3, 3)], {"group": 6}, consts=(1,))
    kernel = lower_node(node)
    assert register_tile(kernel, frozenset({"in1"})).kernel is kernel
    # without knowing the weights are constant nothing may be packed either
    node, _ = make_node("Conv", [f32(1, 4, 5, 5), f32(8, 4, 3, 3)], {})
    kernel = lower_node(node)
    assert register_tile(kernel, frozenset()).kernel is kernel


def test_largest_divisor():
    assert [largest_divisor(n, 8) for n in (7, 56, 112, 13, 1)] == [7, 8, 8, 1, 1]
    assert largest_divisor(48, 16) == 16 and largest_divisor(10, 16) == 10


def _innermost_loops(kernel):
    """The variables of the innermost loop of each accumulating statement."""
    out = []
    for s, loops in walk(kernel.body):
        if not isinstance(s, Loop) and getattr(s, "reduce", None):
            out.append(tuple(lp.var for lp in loops))
    return out


def test_reductions_go_outside_the_contiguous_output_loops():
    node, data = make_node("Conv", [f32(1, 6, 8, 8), f32(6, 1, 3, 3)],
                           {"group": 6, "pads": [1, 1, 1, 1]}, consts=(1,))
    kernel = lower_node(node)
    moved = order_reductions(kernel)
    (order,) = _innermost_loops(moved)
    assert order[-2:] == ("oh", "ow") and order.index("kh") < order.index("oh")
    verify_kernel(moved)
    expected = run_kernel(kernel, {t.name: data[t.name] for t in kernel.inputs})
    got = run_kernel(moved, {t.name: data[t.name] for t in moved.inputs})
    np.testing.assert_array_equal(got["out0"], expected["out0"])


def test_a_dense_layer_read_across_its_weight_rows_keeps_its_order():
    # W[o, k] along o has stride K: moving k outside would make the inner loop a gather
    node, _ = make_node("Gemm", [f32(1, 64), f32(16, 64)], {"transB": 1}, consts=(1,))
    kernel = lower_node(node)
    assert order_reductions(kernel).body == kernel.body


def test_two_kernels_sharing_a_weight_share_its_packed_copy():
    import retarget
    from retarget.ir.graph import Graph, Node, Value, constant
    from retarget.ir.types import TensorType
    from retarget.passes.infer_shapes import infer_shapes
    from retarget.ops.reference import run_graph
    x = Value("x", TensorType((1, 4, 6, 6), "float32"))
    w = constant("w", np.random.default_rng(0).standard_normal((16, 4, 3, 3)).astype(np.float32))
    a, b, y = Value("a"), Value("b"), Value("y")
    # dilated: no routine of the c target takes them, so both are register-tiled nests
    dil = {"pads": [2, 2, 2, 2], "dilations": [2, 2]}
    g = infer_shapes(Graph([Node("Conv", "c1", [x, w], [a], dil),
                            Node("Conv", "c2", [x, w], [b], dil),
                            Node("Add", "add", [a, b], [y])], [x], [y]))
    m = retarget.compile(g, "c", config={"cflags": "-O1 -std=c99", "openmp": False})
    try:
        (k,) = m.kernels.values()
        assert [c.spec.name for c in k.program.constants].count("w.block16") == 1
        feed = {"x": np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)}
        np.testing.assert_allclose(m.run(feed)["y"], run_graph(g, feed)["y"], rtol=1e-5,
                                   atol=1e-5)
    finally:
        m.close()

"""The `c` target's hand-written routines (targets/c/kernels, targets/c/routines.py) against
the NumPy reference on odd shapes: channel counts that leave a partial weight block, widths
that leave a partial register tile, strided and non-square windows, 1x1 layers on both
routines (with a partial group of positions), a depthwise layer, dense layers at batch > 1,
and every fused
epilogue (bias, residual add, ReLU, Clip). Built with the vector extensions and with the
portable C99 fallback (-DRT_PORTABLE); and the loop nest each fused call carries is checked
through the interpreter."""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import retarget
from retarget.frontend.onnx import import_model
from retarget.loopnest.interp import run_kernel
from retarget.passes.explicit_padding import explicit_padding
from retarget.targets.base import Region
from retarget.targets.c.routines import POINTWISE_MIN_POSITIONS, plan_routines
from retarget.ops.reference import run_graph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

BUILDS = {"vector": "-O1 -std=c99", "portable": "-O1 -std=c99 -DRT_PORTABLE",
          "native": "-O1 -march=native -std=c99"}


def _layers_model() -> onnx.ModelProto:
    """Independent layers side by side, one graph (one build per test)."""
    rng = np.random.default_rng(7)
    inits, nodes, inputs, outputs = [], [], [], []

    def const(name, shape):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    def inp(name, shape):
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        return name

    def out(name):
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))

    # 3x3, K = 40 (a full block of 32 and a partial one), OW = 13 (a tile of 12 and one of 1)
    nodes.append(helper.make_node("Conv", [inp("xa", [1, 3, 13, 13]), const("wa", [40, 3, 3, 3]),
                                           const("ba", [40])], ["ca"], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["ca"], ["ya"]))
    out("ya")
    # stride 2, residual add then ReLU, K = 33
    nodes.append(helper.make_node("Conv", [inp("xb", [1, 5, 11, 11]), const("wb", [33, 5, 3, 3])],
                                  ["cb"], pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Add", [inp("rb", [1, 33, 6, 6]), "cb"], ["sb"]))
    nodes.append(helper.make_node("Relu", ["sb"], ["yb"]))
    out("yb")
    # 1x1 with enough positions for rt_pointwise_f32 (529: a partial group), Clip(0, 6)
    nodes.append(helper.make_node("Conv", [inp("xc", [1, 7, 23, 23]), const("wc", [13, 7, 1, 1]),
                                           const("bc", [13])], ["cc"]))
    nodes.append(helper.make_node("Clip", ["cc", const("lo", []), const("hi", [])], ["yc"]))
    out("yc")
    # 1x1 with few positions (rt_conv_f32 over the flattened positions), batch 2, no epilogue
    nodes.append(helper.make_node("Conv", [inp("xd", [2, 6, 5, 5]), const("wd", [70, 6, 1, 1])],
                                  ["yd"]))
    out("yd")
    # a 5x3 window at strides (2, 1), no padding
    nodes.append(helper.make_node("Conv", [inp("xe", [1, 4, 9, 10]), const("we", [32, 4, 5, 3]),
                                           const("be", [32])], ["ye"], strides=[2, 1]))
    out("ye")
    # depthwise, strided, with its Clip and a bias
    nodes.append(helper.make_node("Conv", [inp("xh", [1, 6, 9, 11]), const("wh", [6, 1, 3, 3]),
                                           const("bh", [6])], ["ch"], pads=[1, 1, 1, 1],
                                  strides=[2, 2], group=6))
    nodes.append(helper.make_node("Clip", ["ch", "lo", "hi"], ["yh"]))
    out("yh")
    # dense: Gemm (transB) at batch 3 with ReLU, MatMul by a constant at batch 2
    nodes.append(helper.make_node("Gemm", [inp("xf", [3, 50]), const("wf", [37, 50]),
                                           const("bf", [37])], ["gf"], transB=1))
    nodes.append(helper.make_node("Relu", ["gf"], ["yf"]))
    out("yf")
    nodes.append(helper.make_node("MatMul", [inp("xg", [2, 50]), const("wg", [50, 20])], ["yg"]))
    out("yg")
    inits[[i.name for i in inits].index("lo")] = numpy_helper.from_array(np.float32(0.0), "lo")
    inits[[i.name for i in inits].index("hi")] = numpy_helper.from_array(np.float32(0.5), "hi")
    g = helper.make_graph(nodes, "layers", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _inputs(graph):
    rng = np.random.default_rng(11)
    return {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in graph.inputs}


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_routines_match_the_reference_on_odd_shapes(build):
    graph = import_model(_layers_model())
    x = _inputs(graph)
    module = retarget.compile(graph, "c", config={"cflags": BUILDS[build], "openmp": False})
    try:
        assert all(p.placement == "c" for p in module.report.nodes)
        calls = [c for k in module.kernels.values() for c in k.program.calls]
        used = sorted(c.routine.name for c in calls if c.routine is not None)
        assert used.count("rt_pointwise_f32") == 1 and used.count("rt_conv_f32") == 6, used
        assert used.count("rt_dwconv_f32") == 1, used
        # the epilogues were fused: no Relu, Add or Clip call is left
        assert not [c.node for c in calls if c.routine is None and "Conv" not in c.node
                    and "Pad" not in c.node], [c.node for c in calls]
        out, ref = module.run(x), run_graph(graph, x)
        for k in ref:
            scale = float(np.max(np.abs(ref[k]))) or 1.0
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-5 * scale, err_msg=k)
    finally:
        module.close()


def test_the_loop_nest_of_a_fused_call_is_what_the_nodes_compute():
    """The carrier kernel (over the packed weights) run by the interpreter equals the
    reference on the Conv + Add + ReLU group."""
    graph = explicit_padding(import_model(_layers_model()))
    region = Region("r", "c", list(graph.nodes), list(graph.inputs), list(graph.outputs))
    x = _inputs(graph)
    values = run_graph(graph, x, intermediates=True)
    consts = {v.name: v.const for n in graph.nodes for v in n.inputs
              if v is not None and v.is_const}
    groups = plan_routines(region)
    assert len(groups) == 8
    for g in groups:
        k = g.scheduled.kernel         # a depthwise layer reads its weights unpacked
        arrays = {p.name: p.apply(consts[p.source]) for p in g.scheduled.relayouts}
        for t in k.inputs:
            arrays.setdefault(t.name, consts.get(t.name, values.get(t.name)))
        got = run_kernel(k, arrays)
        for name, y in got.items():
            np.testing.assert_allclose(y, values[name], rtol=1e-4, atol=1e-4, err_msg=name)


def test_pointwise_threshold_is_what_the_docstring_says():
    assert 23 * 23 >= POINTWISE_MIN_POSITIONS > 5 * 5


def test_every_build_of_the_routines_gives_the_same_bits():
    """No contraction and one summation order per lane: the portable, generic-vector and
    native (AVX-512 here) builds agree bit for bit, so an artifact rebuilt elsewhere computes
    what it did."""
    graph = import_model(_layers_model())
    x = _inputs(graph)
    outs = []
    for cflags in BUILDS.values():
        module = retarget.compile(graph, "c", config={"cflags": cflags, "openmp": False})
        try:
            outs.append(module.run(x))
        finally:
            module.close()
    for other in outs[1:]:
        for k in outs[0]:
            np.testing.assert_array_equal(other[k], outs[0][k], err_msg=k)

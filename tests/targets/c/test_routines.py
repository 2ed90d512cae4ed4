"""The `c` target's hand-written routines (targets/c/kernels, targets/c/routines.py) against
the NumPy reference on odd shapes: channel counts that leave a partial weight block, widths
that leave a partial register tile, strided and non-square windows, 1x1 layers (with a
partial group of positions, at a stride, and with more channels than the pointwise panel
holds), depthwise layers (random shapes, padding inside), dense layers at batch > 1, and
every fused epilogue (bias, residual add, ReLU, Clip). Built with the vector extensions and
with the portable C99 fallback (-DRT_PORTABLE); the loop nest each fused call carries is
checked through the interpreter; and rt_pointwise_f32 is held bit for bit to a NumPy loop
that sums its channels in its order, on random shapes across its channel chunks."""
from __future__ import annotations

import re
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
from retarget.targets.c.routines import kernel_source, plan_routines
from retarget.ops.reference import run_graph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

BUILDS = {"vector": "-O1 -std=c99", "portable": "-O1 -std=c99 -DRT_PORTABLE",
          "native": "-O1 -march=native -std=c99"}


def _pointwise_chunk() -> int:
    """The input channels rt_pointwise_f32 reduces per chunk at most (pointwise_f32.c RT_PC,
    the same in every build), read from the kernel so that the shapes below straddle it."""
    src = kernel_source("pointwise_f32.c")
    assert "#define RT_PC (RT_PANEL / 32)" in src
    return int(re.search(r"#define RT_PANEL (\d+)", src).group(1)) // 32


_POINTWISE_CHUNK = _pointwise_chunk()


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
    nodes.append(helper.make_node("Conv", [inp("xa", [1, 4, 13, 13]), const("wa", [40, 4, 3, 3]),
                                           const("ba", [40])], ["ca"], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["ca"], ["ya"]))
    out("ya")
    # stride 2, residual add then ReLU, K = 33
    nodes.append(helper.make_node("Conv", [inp("xb", [1, 5, 11, 11]), const("wb", [33, 5, 3, 3])],
                                  ["cb"], pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Add", [inp("rb", [1, 33, 6, 6]), "cb"], ["sb"]))
    nodes.append(helper.make_node("Relu", ["sb"], ["yb"]))
    out("yb")
    # 1x1 on rt_pointwise_f32 (529 positions: a partial group), Clip(0, 0.5)
    nodes.append(helper.make_node("Conv", [inp("xc", [1, 7, 23, 23]), const("wc", [13, 7, 1, 1]),
                                           const("bc", [13])], ["cc"]))
    nodes.append(helper.make_node("Clip", ["cc", const("lo", []), const("hi", [])], ["yc"]))
    out("yc")
    # 1x1 on rt_pointwise_f32 at batch 2 (K = 70: a partial weight block), no epilogue
    nodes.append(helper.make_node("Conv", [inp("xd", [2, 6, 5, 5]), const("wd", [70, 6, 1, 1])],
                                  ["yd"]))
    out("yd")
    # 1x1 at strides (2, 3) on rt_pointwise_f32 (its panel gathers the positions), with a
    # residual add and ReLU
    nodes.append(helper.make_node("Conv", [inp("xi", [1, 5, 9, 8]), const("wi", [25, 5, 1, 1]),
                                           const("bi", [25])], ["ci"], strides=[2, 3]))
    nodes.append(helper.make_node("Add", ["ci", inp("ri", [1, 25, 5, 3])], ["si"]))
    nodes.append(helper.make_node("Relu", ["si"], ["yi"]))
    out("yi")
    # 1x1 with more input channels than a panel holds: rt_pointwise_f32 in two chunks
    nodes.append(helper.make_node("Conv", [inp("xj", [1, _POINTWISE_CHUNK + 1, 3, 3]),
                                           const("wj", [14, _POINTWISE_CHUNK + 1, 1, 1])],
                                  ["yj"]))
    out("yj")
    # im2col panels on rt_pointwise_f32 (C R S <= 32), their Pads inside: a 3 x 5 window at
    # strides (2, 1) with asymmetric pads, a residual add and Clip; a 3 x 3 at stride 2 on
    # rows long enough for whole vectors (70 columns), and one at stride 1 (40 columns) at
    # batch 2
    nodes.append(helper.make_node("Conv", [inp("xm", [1, 2, 9, 11]), const("wm", [13, 2, 3, 5]),
                                           const("bm", [13])], ["cm"], pads=[2, 1, 0, 3],
                                  strides=[2, 1]))
    nodes.append(helper.make_node("Add", ["cm", inp("rm", [1, 13, 5, 11])], ["sm"]))
    nodes.append(helper.make_node("Clip", ["sm", "lo", "hi"], ["ym"]))
    out("ym")
    nodes.append(helper.make_node("Conv", [inp("xn", [1, 3, 9, 70]), const("wn", [26, 3, 3, 3])],
                                  ["yn"], pads=[1, 1, 1, 1], strides=[2, 2]))
    out("yn")
    nodes.append(helper.make_node("Conv", [inp("xo", [2, 3, 6, 40]), const("wo", [5, 3, 3, 3]),
                                           const("bo", [5])], ["co"], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["co"], ["yo"]))
    out("yo")
    # a residual block's join: two convs into one Add + ReLU; the first fuses them, the
    # second still runs as a routine
    nodes.append(helper.make_node("Conv", [inp("xk", [1, 3, 4, 4]), const("wk", [8, 3, 1, 1])],
                                  ["ck"], strides=[2, 2]))
    nodes.append(helper.make_node("Conv", [inp("xl", [1, 4, 4, 4]), const("wl", [8, 4, 3, 3])],
                                  ["cl"], pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Add", ["cl", "ck"], ["sk"]))
    nodes.append(helper.make_node("Relu", ["sk"], ["yk"]))
    out("yk")
    # a 5x3 window at strides (2, 1), no padding
    nodes.append(helper.make_node("Conv", [inp("xe", [1, 4, 9, 10]), const("we", [32, 4, 5, 3]),
                                           const("be", [32])], ["ye"], strides=[2, 1]))
    out("ye")
    # depthwise, strided, with its Clip and a bias
    # (20 channels: across channels, groups of 8 or 16 and 4 or 12 planes left)
    nodes.append(helper.make_node("Conv", [inp("xh", [1, 20, 9, 11]),
                                           const("wh", [20, 1, 3, 3]), const("bh", [20])],
                                  ["ch"], pads=[1, 1, 1, 1], strides=[2, 2], group=20))
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
        # (the 1 x 1 layers at stride 1 on fewer than 64 positions: rt_pointwise_cl_f32)
        assert used.count("rt_pointwise_f32") == 6 and used.count("rt_conv_f32") == 6 and \
            used.count("rt_pointwise_cl_f32") == 2, used
        # the im2col layers' Pads were folded into their calls; rt_conv_f32's stay
        pads = [c.routine.name if c.routine else None for c in calls
                if c.node.startswith("Pad")]
        assert sorted(pads, key=str) == [None] * 3 + ["rt_dwconv_f32"] + \
            ["rt_pointwise_f32"] * 3, [c.node for c in calls]
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
    assert len(groups) == 15
    for g in groups:
        k = g.scheduled.kernel         # a depthwise layer reads its weights unpacked
        arrays = {p.name: p.apply(consts[p.source]) for p in g.scheduled.relayouts}
        for t in k.inputs:
            arrays.setdefault(t.name, consts.get(t.name, values.get(t.name)))
        got = run_kernel(k, arrays)
        for name, y in got.items():
            np.testing.assert_allclose(y, values[name], rtol=1e-4, atol=1e-4, err_msg=name)


def test_every_build_of_the_routines_gives_the_same_bits():
    """One summation order per lane: builds with the same RT_FMA agree bit for bit, whatever
    their vectors (portable, generic 8-lane, native AVX-512 here), so an artifact rebuilt
    elsewhere with FMA as it had computes what it did; the fused build (on an FMA machine)
    differs from the unfused ones only by rounding."""
    graph = import_model(_layers_model())
    x = _inputs(graph)
    unfused = [BUILDS["vector"], BUILDS["portable"], BUILDS["native"] + " -DRT_FMA=0",
               BUILDS["native"] + " -DRT_PORTABLE -DRT_FMA=0"]
    fused = [BUILDS["native"], BUILDS["native"] + " -DRT_PORTABLE"]   # FMA if the CPU has it
    outs = {}
    for cflags in unfused + fused:
        module = retarget.compile(graph, "c", config={"cflags": cflags, "openmp": False})
        try:
            outs[cflags] = module.run(x)
        finally:
            module.close()
    for group in (unfused, fused):
        for cflags in group[1:]:
            for k in outs[group[0]]:
                np.testing.assert_array_equal(outs[cflags][k], outs[group[0]][k],
                                              err_msg=f"{k}: {cflags} against {group[0]}")
    for k in outs[unfused[0]]:
        np.testing.assert_allclose(outs[fused[0]][k], outs[unfused[0]][k], rtol=1e-5,
                                   atol=1e-5, err_msg=k)


def _depthwise_model(seed: int) -> onnx.ModelProto:
    """Depthwise layers of random shapes side by side: widths around the 8- and 16-lane
    vectors (a partial last vector, planes of one row), strides 1 to 3, square and
    non-square windows, asymmetric pads (some wider than the window's reach), a residual add
    and each activation. One of them pads a tensor another node also reads, so that its Pad
    stays a node of its own."""
    rng = np.random.default_rng(seed)
    inits, nodes, inputs, outputs = [], [], [], []
    for i in range(6):
        c = int(rng.choice([2, 3, 5, 16, 21]))   # group = C > 1: depthwise (from 16
        #                                         channels on: across channels)
        h, w = int(rng.integers(1, 9)), int(rng.integers(1, 40))
        r, s = (int(v) for v in rng.choice([1, 2, 3, 5, 7], 2))
        sh, sw = (int(v) for v in rng.integers(1, 4, 2))
        pads = [int(v) for v in rng.integers(0, 4, 4)]
        if h + pads[0] + pads[2] < r or w + pads[1] + pads[3] < s:
            pads[2], pads[3] = r, s            # the window must fit the padded input
        x, wt, b = f"x{i}", f"w{i}", f"b{i}"
        inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, h, w]))
        inits.append(numpy_helper.from_array(
            rng.standard_normal((c, 1, r, s)).astype(np.float32), wt))
        inits.append(numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), b))
        nodes.append(helper.make_node("Conv", [x, wt, b], [f"c{i}"], group=c, pads=pads,
                                      strides=[sh, sw]))
        oh, ow = (h + pads[0] + pads[2] - r) // sh + 1, (w + pads[1] + pads[3] - s) // sw + 1
        last = f"c{i}"
        if i % 3 == 1:
            inputs.append(helper.make_tensor_value_info(f"r{i}", TensorProto.FLOAT,
                                                        [1, c, oh, ow]))
            nodes.append(helper.make_node("Add", [last, f"r{i}"], [f"a{i}"]))
            last = f"a{i}"
        if i % 3 != 2:
            nodes.append(helper.make_node("Relu", [last], [f"y{i}"]))
            last = f"y{i}"
        outputs.append(helper.make_tensor_value_info(last, TensorProto.FLOAT, None))
    # a Pad whose result is also an output: it stays a node of its own
    nodes.append(helper.make_node("Pad", ["xs", "pp"], ["ps"], mode="constant"))
    nodes.append(helper.make_node("Conv", ["ps", "ws"], ["ys"], group=2))
    inputs.append(helper.make_tensor_value_info("xs", TensorProto.FLOAT, [1, 2, 5, 6]))
    inits.append(numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 1, 0], np.int64), "pp"))
    inits.append(numpy_helper.from_array(rng.standard_normal((2, 1, 3, 3)).astype(np.float32),
                                         "ws"))
    outputs += [helper.make_tensor_value_info(v, TensorProto.FLOAT, None) for v in ("ps", "ys")]
    g = helper.make_graph(nodes, "depthwise", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_depthwise_routine_pads_inside_on_random_shapes(seed):
    """rt_dwconv_f32 against the NumPy reference on random shapes, in every build; the Pad
    before each depthwise layer is folded into its call unless something else reads it."""
    graph = import_model(_depthwise_model(seed))
    x = _inputs(graph)
    ref = run_graph(graph, x)
    for calls, out, cflags in _every_build(graph, x):
        dw = [c for c in calls if c.routine is not None and c.routine.name == "rt_dwconv_f32"]
        assert len(dw) == 7, [c.node for c in calls]
        pads = [c.node for c in calls if c.routine is None and c.node.startswith("Pad")]
        assert len(pads) == 1 and "'ps'" not in pads[0], pads   # only the shared one
        for k in ref:
            scale = float(np.max(np.abs(ref[k]))) or 1.0
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-5 * scale,
                                       err_msg=f"{k} ({cflags})")


def _every_build(graph, x):
    """(the calls, the outputs on `x`, the flags) of `graph` compiled in each of BUILDS."""
    for cflags in BUILDS.values():
        module = retarget.compile(graph, "c", config={"cflags": cflags, "openmp": False})
        try:
            yield [c for k in module.kernels.values() for c in k.program.calls], \
                module.run(x), cflags
        finally:
            module.close()


def _maxpool_model(seed: int) -> onnx.ModelProto:
    """MaxPool layers of random shapes: windows 1-4 x 1-4, strides 1-3, pads below the
    window, ceil_mode on and off, widths around the vector lengths."""
    rng = np.random.default_rng(seed)
    nodes, inputs, outputs = [], [], []
    for i in range(6):
        r, s = (int(v) for v in rng.integers(1, 5, 2))
        sh, sw = (int(v) for v in rng.integers(1, 4, 2))
        pads = [int(rng.integers(0, r)), int(rng.integers(0, s)),
                int(rng.integers(0, r)), int(rng.integers(0, s))]
        h, w = int(rng.integers(r, 10)), int(rng.integers(s, 40))
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT,
                                                    [1, int(rng.integers(1, 4)), h, w]))
        nodes.append(helper.make_node("MaxPool", [f"x{i}"], [f"y{i}"], kernel_shape=[r, s],
                                      strides=[sh, sw], pads=pads,
                                      ceil_mode=int(rng.integers(0, 2))))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "maxpool", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("seed", [0, 1])
def test_maxpool_routine_on_random_shapes(seed):
    """rt_maxpool_f32 equals the reference exactly (a max rounds nothing) in every build."""
    graph = import_model(_maxpool_model(seed))
    x = _inputs(graph)
    ref = run_graph(graph, x)
    for calls, out, cflags in _every_build(graph, x):
        assert all(c.routine is not None and c.routine.name == "rt_maxpool_f32"
                   for c in calls), [c.node for c in calls]
        for k in ref:
            np.testing.assert_array_equal(out[k], ref[k], err_msg=f"{k} ({cflags})")


def _window_layers_model() -> onnx.ModelProto:
    """Depthwise and max-pool layers that rt_window_f32 takes flat (strides 1 and 2, planes
    small enough, every input column inside sw * OW): 7 x 7 planes (a partial last vector),
    odd widths, a 5 x 5 window, asymmetric pads, strides (1, 2), a residual add, Clip, a
    ceil_mode pool; and a stride-1 plane too large to go flat. And depthwise layers of at
    least 16 channels, which go across channels (groups of channels, then the planes left),
    at batch 1 and 2, strides 1 to 3, and max pools of 20 and 17 channels."""
    rng = np.random.default_rng(5)
    inits, nodes, inputs, outputs = [], [], [], []
    layers = [  # C, H, W, R, S, sh, sw, pads, N
        (5, 7, 7, 3, 3, 1, 1, [1, 1, 1, 1], 1), (3, 14, 15, 3, 3, 2, 2, [1, 1, 1, 1], 1),
        (4, 9, 20, 5, 5, 1, 1, [2, 2, 2, 2], 1), (2, 14, 14, 3, 3, 2, 2, [1, 1, 0, 0], 1),
        (3, 11, 13, 3, 3, 1, 2, [1, 1, 1, 1], 1), (2, 13, 17, 3, 3, 2, 1, [0, 1, 2, 1], 1),
        (2, 60, 61, 3, 3, 1, 1, [1, 1, 1, 1], 1),
        (37, 7, 7, 3, 3, 1, 1, [1, 1, 1, 1], 1), (16, 14, 15, 3, 3, 2, 2, [1, 1, 1, 1], 2),
        (20, 9, 20, 5, 5, 1, 1, [2, 2, 2, 2], 2), (33, 10, 11, 3, 2, 3, 1, [0, 1, 2, 0], 1)]
    for i, (c, h, w, r, s, sh, sw, pads, n) in enumerate(layers):
        oh, ow = (h + pads[0] + pads[2] - r) // sh + 1, (w + pads[1] + pads[3] - s) // sw + 1
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [n, c, h, w]))
        inits += [numpy_helper.from_array(rng.standard_normal((c, 1, r, s)).astype(np.float32),
                                          f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"c{i}"], group=c,
                                      pads=pads, strides=[sh, sw]))
        last = f"c{i}"
        if i in (2, 9):
            inputs.append(helper.make_tensor_value_info(f"r{i}", TensorProto.FLOAT,
                                                        [n, c, oh, ow]))
            nodes.append(helper.make_node("Add", [last, f"r{i}"], [f"a{i}"]))
            last = f"a{i}"
        if i % 2 == 0:
            nodes.append(helper.make_node("Clip", [last, "lo", "hi"], [f"y{i}"]))
            last = f"y{i}"
        outputs.append(helper.make_tensor_value_info(last, TensorProto.FLOAT, None))
    inits += [numpy_helper.from_array(np.float32(-0.5), "lo"),
              numpy_helper.from_array(np.float32(1.0), "hi")]
    pools = [(3, 15, 15, 2, 0), (3, 7, 9, 1, 0), (3, 12, 13, 2, 1), (20, 15, 15, 2, 0),
             (17, 12, 13, 2, 1)]    # C, H, W, stride, ceil_mode (from 16 channels: across)
    for i, (c, h, w, sh, ceil) in enumerate(pools):
        inputs.append(helper.make_tensor_value_info(f"xm{i}", TensorProto.FLOAT, [1, c, h, w]))
        nodes.append(helper.make_node("MaxPool", [f"xm{i}"], [f"ym{i}"], kernel_shape=[3, 3],
                                      strides=[sh, sh], pads=[1, 1, 1, 1], ceil_mode=ceil))
        outputs.append(helper.make_tensor_value_info(f"ym{i}", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "windows", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("build", ["native", "portable"])
def test_window_routines_across_channels_flat_and_by_rows_give_the_same_bits(build):
    """rt_window_f32's three paths (dwconv_f32.c: across channels; flat, forced for every
    layer with -DRT_DW_LANES=0; by rows, with -DRT_DW_FLAT=0 too) sum every lane's taps in
    one order: the same bits, and the reference's values."""
    graph = import_model(_window_layers_model())
    x = _inputs(graph)
    ref = run_graph(graph, x)
    outs = []
    for paths in ("", " -DRT_DW_LANES=0", " -DRT_DW_LANES=0 -DRT_DW_FLAT=0"):
        module = retarget.compile(graph, "c", config={"cflags": BUILDS[build] + paths,
                                                      "openmp": False})
        try:
            calls = [c for k in module.kernels.values() for c in k.program.calls]
            assert sorted(c.routine.name for c in calls) == \
                ["rt_dwconv_f32"] * 11 + ["rt_maxpool_f32"] * 5, [c.node for c in calls]
            outs.append(module.run(x))
        finally:
            module.close()
    for k in ref:
        for other in outs[1:]:
            np.testing.assert_array_equal(outs[0][k], other[k], err_msg=k)
        scale = float(np.max(np.abs(ref[k]))) or 1.0
        np.testing.assert_allclose(outs[0][k], ref[k], rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=k)


def _pointwise_model(seed: int) -> tuple[onnx.ModelProto, list[dict]]:
    """1x1 layers of random shapes side by side, and what each is: input channels just
    below, at and past one and two of rt_pointwise_f32's channel chunks (and odd, and few:
    a band of groups), output channels leaving a partial weight block, maps whose positions
    end inside a group of positions (and one of whole groups), strides 1-3, batch 1-2, with
    and without bias, residual add, ReLU or Clip. And maps of fewer than 64 positions at
    stride 1, which rt_pointwise_cl_f32 takes: 7 x 7 (its groups of 25 positions, the last
    starting early), 10, 5 and 3 positions (its groups of 8, 4 and 1)."""
    rng = np.random.default_rng(seed)
    chunk = _POINTWISE_CHUNK
    channels = [chunk - 3, chunk, chunk + 1, 2 * chunk + 37, int(rng.integers(3, 3 * chunk)) | 1,
                2 * chunk + 1, 7, chunk + 5, 9, 33, 4]
    # 64 positions (whole groups only); 7 channels on 150 positions (one chunk, a band of
    # several groups' panels); then rt_pointwise_cl_f32's
    maps = {len(channels) - 6 + i: m for i, m in enumerate(
        [(8, 8, 1, 1), (10, 15, 1, 1), (7, 7, 1, 1), (2, 5, 1, 1), (1, 5, 1, 1), (3, 1, 1, 1)])}
    inits, nodes, inputs, outputs, layers = [], [], [], [], []
    for i, c in enumerate(channels):
        n, k = int(rng.integers(1, 3)), int(rng.integers(1, 40))
        if i in maps:
            h, w, sh, sw = maps[i]
        else:
            h, w = int(rng.integers(1, 10)), int(rng.integers(1, 14))
            sh, sw = (int(v) for v in rng.integers(1, 4, 2))
        oh, ow = (h - 1) // sh + 1, (w - 1) // sw + 1
        layer = dict(x=f"x{i}", w=rng.standard_normal((k, c, 1, 1)).astype(np.float32),
                     b=rng.standard_normal(k).astype(np.float32) if i % 2 == 0 else None,
                     res=f"r{i}" if i % 3 == 1 else None, act=("relu", "clip", None)[i % 3],
                     strides=(sh, sw))
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [n, c, h, w]))
        inits.append(numpy_helper.from_array(layer["w"], f"w{i}"))
        conv_in = [f"x{i}", f"w{i}"]
        if layer["b"] is not None:
            inits.append(numpy_helper.from_array(layer["b"], f"b{i}"))
            conv_in.append(f"b{i}")
        nodes.append(helper.make_node("Conv", conv_in, [f"c{i}"], strides=[sh, sw]))
        last = f"c{i}"
        if layer["res"]:
            inputs.append(helper.make_tensor_value_info(f"r{i}", TensorProto.FLOAT,
                                                        [n, k, oh, ow]))
            nodes.append(helper.make_node("Add", [last, f"r{i}"], [f"a{i}"]))
            last = f"a{i}"
        if layer["act"] == "relu":
            nodes.append(helper.make_node("Relu", [last], [f"y{i}"]))
            last = f"y{i}"
        elif layer["act"] == "clip":
            nodes.append(helper.make_node("Clip", [last, "lo", "hi"], [f"y{i}"]))
            last = f"y{i}"
        layer["y"] = last
        outputs.append(helper.make_tensor_value_info(last, TensorProto.FLOAT, None))
        layers.append(layer)
    inits += [numpy_helper.from_array(np.float32(-0.5), "lo"),
              numpy_helper.from_array(np.float32(0.75), "hi")]
    g = helper.make_graph(nodes, "pointwise", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), layers


def _pointwise_in_order(layer: dict, x: dict) -> np.ndarray:
    """What rt_pointwise_f32 computes, as a plain loop in float32 in its order: per output
    element, 0 + x[c] * w[k, c] for c = 0, 1, ... (each product and sum rounded to float32, no
    fused multiply-add), then the bias + that sum, + the residual, then ReLU / Clip as the
    loop-nest IR's max / min."""
    sh, sw = layer["strides"]
    xs = x[layer["x"]][:, :, ::sh, ::sw]
    n, c, oh, ow = xs.shape
    w = layer["w"].reshape(layer["w"].shape[0], c)
    flat = xs.reshape(n, c, oh * ow)
    acc = np.zeros((n, w.shape[0], oh * ow), np.float32)
    for ci in range(c):
        acc = acc + w[None, :, ci, None] * flat[:, None, ci, :]
    bias = np.float32(0.0) if layer["b"] is None else layer["b"][None, :, None]
    t = (bias + acc).reshape(n, -1, oh, ow)
    if layer["res"]:
        t = t + x[layer["res"]]
    if layer["act"] == "relu":
        t = np.where(np.float32(0.0) > t, np.float32(0.0), t)
    elif layer["act"] == "clip":
        t = np.where(np.float32(-0.5) > t, np.float32(-0.5), t)
        t = np.where(np.float32(0.75) < t, np.float32(0.75), t)
    return t


@pytest.mark.parametrize("seed", [0, 1])
def test_pointwise_routine_is_its_in_order_sum_across_chunks(seed):
    """rt_pointwise_f32 on random 1x1 layers, several wider than one chunk of its panel, and
    rt_pointwise_cl_f32 on small maps, equal the float32 loop of _pointwise_in_order bit for
    bit in every unfused build and on two
    threads: the partial sums kept between chunks change nothing, no chunk, tail or lane is
    lost."""
    model, layers = _pointwise_model(seed)
    graph = import_model(model)
    x = _inputs(graph)
    want = {layer["y"]: _pointwise_in_order(layer, x) for layer in layers}
    # unfused (RT_FMA=0): _pointwise_in_order rounds each product, then each sum
    builds = [(cflags + " -DRT_FMA=0", False) for cflags in BUILDS.values()] + \
        [(BUILDS["native"] + " -DRT_FMA=0", True)]
    for cflags, openmp in builds:
        module = retarget.compile(graph, "c", config={"cflags": cflags, "openmp": openmp})
        try:
            calls = [c for k in module.kernels.values() for c in k.program.calls]
            names = [c.routine.name for c in calls if c.routine is not None]
            assert len(names) == len(calls) == len(layers), [c.node for c in calls]
            assert set(names) == {"rt_pointwise_f32", "rt_pointwise_cl_f32"} and \
                names[-4:] == ["rt_pointwise_cl_f32"] * 4, names
            got = module.run(x)
        finally:
            module.close()
        for name, y in want.items():
            np.testing.assert_array_equal(got[name], y, err_msg=f"{name} ({cflags}, "
                                                                 f"openmp={openmp})")

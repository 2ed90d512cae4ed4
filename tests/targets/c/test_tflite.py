"""The `c` target on int8 TFLite models (targets/c/routines_tflite.py, kernels/int8_tflite.c,
zero_points.py): every TFLite test model of the zoo runs with every node on `c`, bit-exactly
with the reference executor and with LiteRT's reference kernels, in the native and the
portable build; each routine against its NumPy op on random odd shapes, negative zero points,
saturating values and shifts of both signs; what has no routine is refused with its reason."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import retarget
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.ops.quantized_tflite import hard_swish_params, lut_int8, softmax_params
from retarget.ops.reference import run_graph
from retarget.passes.infer_shapes import infer_shapes

from .node_graphs import (BUILDS, NodeGraph, assert_routines_equal_numpy, compile_c as _compile,
                          off_c as _off_c)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _assert_same(out: dict, ref: dict) -> None:
    for k in ref:
        assert out[k].dtype == ref[k].dtype, k
        np.testing.assert_array_equal(out[k], ref[k], err_msg=k)


# ---- the zoo's TFLite models -------------------------------------------------------------------
@pytest.fixture(scope="module")
def tflite_models():
    pytest.importorskip("tflite")
    pytest.importorskip("flatbuffers")
    from retarget.zoo.tflite import MODELS, tflite_model
    return {name: tflite_model(name) for name in MODELS}


def _inputs(buf: bytes) -> list[np.ndarray]:
    """The calibration distribution quantised, and uniform int8 noise (or 4x wider floats):
    the saturating paths."""
    from retarget.zoo.tflite import model_inputs
    xs = model_inputs(buf, 2, seed=1)
    return xs + [np.random.default_rng(s).integers(-128, 128, x.shape).astype(np.int8)
                 if x.dtype == np.int8 else 4 * x for s, x in enumerate(model_inputs(buf, 2))]


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_every_tflite_model_runs_on_c_bit_exactly(tflite_models, build):
    from retarget.frontend.tflite import load_tflite
    for name, buf in tflite_models.items():
        graph = load_tflite(buf)
        module = _compile(graph, build)
        try:
            assert _off_c(module) == [], name
            for x in _inputs(buf):
                feed = {graph.inputs[0].name: x}
                _assert_same(module.run(feed), run_graph(graph, feed))
        finally:
            module.close()


def test_tflite_models_on_c_equal_litert_reference_kernels(tflite_models):
    pytest.importorskip("ai_edge_litert")
    from retarget.frontend.litert_check import run_litert
    from retarget.frontend.tflite import load_tflite
    for name, buf in tflite_models.items():
        graph = load_tflite(buf)
        module = retarget.compile(graph, "c", config={"cflags": BUILDS["native"]})   # OpenMP
        try:
            xs = _inputs(buf)
            ours = [next(iter(module.run({graph.inputs[0].name: x}).values())) for x in xs]
        finally:
            module.close()
        for a, b in zip(ours, run_litert(buf, xs)):
            assert a.dtype == b.dtype and a.shape == b.shape, name
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_input_zero_points_fold_into_the_int8_layers(tflite_models):
    """After the c target's rewrite the convolutions and dense layers read int8 (no Cast /
    Sub left in front of them) and the result is unchanged."""
    from retarget.frontend.tflite import load_tflite
    from retarget.passes import rewrite_for
    from retarget.targets.c import CTarget
    buf = tflite_models["mobilenet"]
    graph = load_tflite(buf)
    rewritten = rewrite_for(graph, CTarget())
    layers = [n for n in rewritten.nodes if n.op in ("Conv", "Gemm")]
    assert len(layers) == 8 and all(n.inputs[0].type.dtype == "int8" for n in layers)
    assert not any(n.op in ("Cast", "Sub") for n in rewritten.nodes)
    # the 3x3 convolutions pad (SAME), the 1x1 ones do not
    # and pad their int8 input with its zero point (0 once offset)
    zero_point = {n.name.split("/")[0]: int(n.inputs[1].const) for n in graph.nodes
                  if n.op == "Sub"}
    pads = {n.name.split(".")[0]: n for n in rewritten.nodes if n.op == "Pad"}
    assert len(pads) == 4 and {-128, 11} <= set(zero_point.values())
    for conv, pad in pads.items():
        assert pad.inputs[0].type.dtype == "int8"
        assert int(pad.inputs[2].const) == zero_point[conv]
    for x in _inputs(buf):
        _assert_same(run_graph(rewritten, {"input": x}), run_graph(graph, {"input": x}))


# ---- each routine against its NumPy op -----------------------------------------------------------
def _q31(rng, n=None):
    """Multipliers as QuantizeMultiplier makes them, in [2**30, 2**31)."""
    return rng.integers(1 << 30, (1 << 31) - 1, n, dtype=np.int64)


def _routine_graph(seed: int) -> tuple[Graph, dict[str, np.ndarray]]:
    """One node of every routine with random odd shapes and parameters (negative zero points,
    narrow clamps, left and right shifts), and its inputs (full int8 ranges, int32 values as
    large as each left shift allows)."""
    b = NodeGraph(seed)
    rng, feeds, inp, node, odd = b.rng, b.feeds, b.input, b.node, b.odd
    n, c, h, w = 1 + seed % 2, odd() + 2, odd() + 4, odd() + 2
    a8 = inp("a8", (n, c, h, w), "int8", rng.integers(-128, 128, (n, c, h, w)).astype(np.int8))
    b8 = inp("b8", (n, c, h, w), "int8", rng.integers(-128, 128, (n, c, h, w)).astype(np.int8))
    feeds["a8"].flat[:4] = [-128, 127, 0, -1]
    shifts = rng.integers(-12, 6, c).astype(np.int32)
    shifts[:2] = [3, -31]
    big = int(rng.integers(1, 1 << 22))
    acc = inp("acc", (n, c, h, w), "int32",
              rng.integers(-big, big, (n, c, h, w)).astype(np.int32))
    zp = int(rng.integers(-128, 128))
    # RequantizeQ31: per channel (shifts of both signs) double and single rounding, per tensor
    for rounding in ("double", "single"):
        node("RequantizeQ31", [acc, constant(f"m_{rounding}", _q31(rng, c).astype(np.int32)),
                               constant(f"s_{rounding}", shifts)],
             axis=1, zero_point=zp, rounding=rounding, lo=-100, hi=int(rng.integers(0, 128)))
    node("RequantizeQ31", [acc], multiplier=int(_q31(rng)), shift=7 - big.bit_length(),
         zero_point=-zp // 2, rounding="double", axis=1)
    # ADD / MUL with negative zero points and their clamps
    za, zb, zy = (int(v) for v in rng.integers(-128, 128, 3))
    node("QAddQ31", [a8, b8], a_zero_point=za, a_multiplier=int(_q31(rng)),
         a_shift=int(rng.integers(-3, 1)), b_zero_point=zb, b_multiplier=int(_q31(rng)),
         b_shift=int(rng.integers(-3, 1)), multiplier=int(_q31(rng)),
         shift=-int(rng.integers(20, 23)), zero_point=zy, lo=-120, hi=110)
    node("QAddQ31", [a8, a8], a_zero_point=za, a_multiplier=int(_q31(rng)), a_shift=0,
         b_zero_point=za, b_multiplier=int(_q31(rng)), b_shift=-1, multiplier=int(_q31(rng)),
         shift=-19, zero_point=zy)
    # broadcasting: a per-channel operand (NCHW [1, C, 1, 1]) and a row ([W], right-aligned)
    pc = inp("pc", (1, c, 1, 1), "int8", rng.integers(-128, 128, (1, c, 1, 1)).astype(np.int8))
    row = inp("row", (w,), "int8", rng.integers(-128, 128, (w,)).astype(np.int8))
    node("QAddQ31", [a8, pc], a_zero_point=za, a_multiplier=int(_q31(rng)), a_shift=-1,
         b_zero_point=zb, b_multiplier=int(_q31(rng)), b_shift=0, multiplier=int(_q31(rng)),
         shift=-20, zero_point=zy)
    node("QMulQ31", [row, a8], a_zero_point=zb, b_zero_point=za, multiplier=int(_q31(rng)),
         shift=-9, zero_point=zy // 2)
    node("QMulQ31", [a8, b8], a_zero_point=za, b_zero_point=zb, multiplier=int(_q31(rng)),
         shift=-int(rng.integers(8, 11)), zero_point=zy // 2, lo=-128,
         hi=int(rng.integers(100, 128)))
    # a left shift on small operands (|a - z| <= 4), so that not every product saturates
    t8 = inp("t8", (n, c, h, w), "int8", rng.integers(-4, 5, (n, c, h, w)).astype(np.int8))
    zt = int(rng.integers(-2, 3))
    node("QMulQ31", [t8, t8], a_zero_point=zt, b_zero_point=-zt, multiplier=int(_q31(rng)),
         shift=int(rng.integers(1, 4)), zero_point=-zy // 4)
    # pooling with pads, strides and clamps; MEAN of an NHWC map (shifts of both signs)
    k = int(rng.integers(2, 4))
    node("AveragePoolInt", [a8], kernel_shape=[k, k + 1], strides=[odd(), 2],
         pads=[1, 0, k - 1, 1], lo=-110, hi=int(rng.integers(0, 128)))
    for s in (0, 1):       # the ratio includes 1 / (H W), as the importer computes it
        node("MeanInt8", [a8], input_zero_point=za, multiplier=int(_q31(rng)),
             shift=s - (h * w).bit_length(), zero_point=zy // 2)
    # softmax on rows of odd lengths (the planner allows up to 511), LUT, hard swish
    rows = int(rng.choice([3, 7, 301]))
    s8 = inp("s8", (3, rows), "int8", rng.integers(-128, 128, (3, rows)).astype(np.int8))
    feeds["s8"][0] = 5                               # a flat row: the largest sum
    node("SoftmaxInt8", [s8], **softmax_params(1.0, float(rng.uniform(0.01, 0.3))))
    table = lut_int8(lambda v: np.float32(1) / (np.float32(1) + np.exp(-v)), 0.05, zp,
                     1 / 256, -128)
    node("LookupInt8", [a8, constant("table", table)])
    node("HardSwishInt8", [a8], **hard_swish_params(float(rng.uniform(0.01, 0.1)), za,
                                                    float(rng.uniform(0.01, 0.1)), zy))
    # QUANTIZE float -> int8: exact half-way ties, saturating values
    scale = np.float32(rng.uniform(0.01, 0.2))
    f = (rng.integers(-300, 300, (n, c, w)) + 0.5).astype(np.float32) * scale
    f.flat[:3] = [1e9, -1e9, 0.0]
    fv = inp("f", f.shape, "float32", f)
    node("QuantizeAffine", [fv], scale=float(scale), zero_point=zp, dtype="int8")
    # QUANTIZE int8 -> int8's offset (Cast, Sub), Pad with a value on any axes, Slice
    wide = node("Cast", [a8], to=6)
    node("Sub", [wide, constant("zp32", np.int32(zp))])
    node("Pad", [a8, constant("pads", np.array([0, 1, 0, 2, 1, 0, 3, 0], np.int64)),
                 constant("pad_value", np.int8(zp))], mode="constant")
    node("Slice", [a8, *(constant(nm, np.array(v, np.int64)) for nm, v in (
        ("starts", [-1, 1, 0]), ("ends", [-100, 100, 100]), ("axes", [2, 1, 3]),
        ("steps", [-2, 2, 3])))])
    return b.graph(f"tflite_routines_{seed}")


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_routine_equals_its_numpy_op(seed, build):
    from retarget.targets.c.routines_tflite import TFLITE_ROUTINES
    graph, feeds = _routine_graph(seed)
    assert_routines_equal_numpy(graph, feeds, build, TFLITE_ROUTINES)


def test_what_has_no_routine_stays_on_the_cpu_with_its_reason():
    s = Value("s", TensorType((2, 600), "int8"))
    x = Value("x", TensorType((1, 1, 1, 1, 1, 1, 2), "int8"))
    outs = [Value("soft"), Value("sum")]
    nodes = [Node("SoftmaxInt8", "wide_softmax", [s], [outs[0]], softmax_params(1.0, 0.1)),
             Node("QMulQ31", "rank7_mul", [x, x], [outs[1]], dict(multiplier=1 << 30,
                                                                   shift=-2))]
    graph = infer_shapes(Graph(nodes, [s, x], outs))
    module = retarget.compile(graph, "c", config={"openmp": False})
    try:
        reasons = {name: why for name, _, why in _off_c(module)}
        assert "rows of 600 > 511 elements" in reasons["wide_softmax"]
        assert "only rank <= 6" in reasons["rank7_mul"]
    finally:
        module.close()


def test_a_call_whose_arguments_disagree_with_its_tensors_is_refused():
    """check_tflite (run before the C is printed): a slice reading past its input, a
    requantisation over more elements than its tensors hold."""
    from dataclasses import replace
    from retarget.errors import GraphError
    from retarget.targets.c.routines_tflite import check_tflite
    graph, _ = _routine_graph(0)
    module = retarget.compile(graph, "c", config={"cc": "sh -c 'touch libmodel.so' sh"})
    try:
        calls = {c.routine.name: c for k in module.kernels.values() for c in k.program.calls
                 if c.routine is not None}
    finally:
        module.close()
    for name in ("rt_slice_s8", "rt_requantize_q31"):
        check_tflite(calls[name])
    sl = calls["rt_slice_s8"]
    with pytest.raises(GraphError, match="view reads elements"):
        check_tflite(replace(sl, routine=replace(sl.routine, ints=(10**6,) + sl.routine.ints[1:])))
    rq = calls["rt_requantize_q31"]
    bigger = (rq.routine.ints[0] + 1,) + rq.routine.ints[1:]
    with pytest.raises(GraphError, match=r"expected int32\["):
        check_tflite(replace(rq, routine=replace(rq.routine, ints=bigger)))

"""The `c` target on QDQ models in onnxruntime's arithmetic (int8-ort: targets/c/routines_ort.py,
kernels/int8_ort.c, unsigned_shift.py, zero_points.py): the zoo's QDQ test models run with every
node on `c`, bit-exactly with the reference executor in the native and the portable build
wherever the model is all integer; each routine against its NumPy op on random odd shapes,
exact ties at .5, saturating values and negative zero points; what has no routine is refused
with its reason."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import retarget
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.ops.quantized_ort import global_average_pool_scale
from retarget.ops.reference import run_graph
from retarget.passes.infer_shapes import infer_shapes

from .node_graphs import (BUILDS, NodeGraph, assert_routines_equal_numpy, compile_c as _compile,
                          off_c as _off_c, routines_of)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


# ---- the zoo's QDQ models -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def qdq_models():
    pytest.importorskip("onnxruntime")
    from retarget.zoo.ort_quantized import ort_quantized
    return {(name, act, pc): ort_quantized(name, activations=act, per_channel=pc)
            for name in ("residual_block", "branch_add") for act in ("uint8", "int8")
            for pc in (False, True)}


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_every_qdq_model_runs_on_c_bit_exactly(qdq_models, build):
    from retarget.frontend.onnx_quantized import float_accumulations, load_quantized
    from retarget.zoo.ort_quantized import model_inputs
    used = set()
    for key, model in qdq_models.items():
        graph = load_quantized(model, scales="onnxruntime")
        module = _compile(graph, build)
        try:
            assert _off_c(module) == [], key
            used |= routines_of(module)
            xs = model_inputs(model, 2, seed=1) + [{k: 3 * v for k, v in x.items()}
                                                   for x in model_inputs(model, 1, seed=2)]
            for x in xs:
                out, ref = module.run(x)["output"], run_graph(graph, x)["output"]
                if not float_accumulations(graph):
                    np.testing.assert_array_equal(out, ref, err_msg=str(key))
                else:
                    # s8 models keep onnxruntime's float groups: a float32 Conv summed in
                    # another order than NumPy's can move a QuantizeLinear tie by one LSB,
                    # which later layers carry (measured 0 here, up to 1 on resnet18)
                    step = _step(model)
                    assert np.abs(out - ref).max() <= 4 * step + 1e-6, key
        finally:
            module.close()
    from retarget.targets.c.routines_ort import ORT_ROUTINES
    assert set(ORT_ROUTINES) <= used


def _step(model) -> float:
    from retarget.frontend.onnx_quantized import output_grid
    return float(np.max(output_grid(model, "output")[0]))


def test_u8_models_on_c_equal_onnxruntime_where_its_kernels_are_exact(qdq_models):
    from retarget.frontend.onnx_quantized import load_quantized
    from retarget.frontend.ort_check import ort_integer_arithmetic, run_onnxruntime
    from retarget.zoo.ort_quantized import model_inputs
    model = qdq_models[("residual_block", "uint8", True)]
    if not ort_integer_arithmetic().exact_for(model):
        pytest.skip("onnxruntime's integer kernels saturate on this CPU (docs/quantization.md)")
    module = retarget.compile(load_quantized(model, scales="onnxruntime"), "c")
    try:
        for x in model_inputs(model, 2, seed=5):
            np.testing.assert_array_equal(module.run(x)["output"],
                                          run_onnxruntime(model, x)["output"])
    finally:
        module.close()


def test_u8_values_become_s8_exactly_and_the_layers_run_int8(qdq_models):
    from retarget.frontend.onnx_quantized import load_quantized
    from retarget.passes import rewrite_for
    from retarget.targets.registry import get_target
    from retarget.zoo.ort_quantized import model_inputs
    model = qdq_models[("residual_block", "uint8", False)]
    graph = infer_shapes(load_quantized(model, scales="onnxruntime"))
    assert any(v.type.dtype == "uint8" for n in graph.nodes for v in n.outputs)
    shifted = rewrite_for(graph, get_target("c"))
    assert not any(v.type.dtype == "uint8" for n in shifted.nodes for v in n.outputs)
    assert all(n.inputs[0].type.dtype == "int8" for n in shifted.nodes
               if n.op in ("Conv", "Gemm"))
    for x in model_inputs(model, 3):
        np.testing.assert_array_equal(run_graph(shifted, x)["output"],
                                      run_graph(graph, x)["output"])


# ---- each routine against its NumPy op ---------------------------------------------------------
def _routine_graph(seed: int) -> tuple[Graph, dict[str, np.ndarray]]:
    """One node per routine variant with random odd shapes: accumulators on exact .5 ties
    (scale 0.5 on odd values) and far beyond int8 (saturation), per-channel scales on every
    axis, adds through the s8 and the u8 kernel with negative zero points and a single-element
    operand on either side, pools with negative zero points."""
    b = NodeGraph(seed)
    rng, feeds, inp, node, odd = b.rng, b.feeds, b.input, b.node, b.odd
    n, c, h, w = 1 + seed % 2, odd() + 2, odd() + 4, odd() + 2
    shape = (n, c, h, w)
    acc_values = rng.integers(-600, 600, shape).astype(np.int32)
    acc_values.flat[:6] = [1, -1, 3, -3, 2 ** 31 - 1, -2 ** 31]     # +-0.5, +-1.5, extremes
    acc = inp("acc", shape, "int32", acc_values)
    zp = int(rng.integers(-128, 0))
    node("RequantizeOrt", [acc], scale=0.5, zero_point=zp, lo=-128, hi=127, dtype="int8")
    node("RequantizeOrt", [acc], scale=float(rng.uniform(0.001, 0.3)), zero_point=-zp // 3,
         lo=-100, hi=int(rng.integers(0, 128)), dtype="int8")
    for axis in (1, 2, -1):
        k = shape[axis]
        scales = rng.uniform(0.01, 0.6, k).astype(np.float32)
        scales[0] = 0.5
        node("RequantizeOrt", [acc, constant(f"scales{axis}", scales)], axis=axis,
             zero_point=int(rng.integers(-128, 128)), lo=-128, hi=127, dtype="int8")
    a8 = inp("a8", shape, "int8", rng.integers(-128, 128, shape).astype(np.int8))
    b8 = inp("b8", shape, "int8", rng.integers(-128, 128, shape).astype(np.int8))
    one = inp("one", (1, 1, 1, 1), "int8", rng.integers(-128, 128, (1, 1, 1, 1)).astype(np.int8))
    feeds["a8"].flat[:4] = [-128, 127, 0, -1]
    sy = float(rng.uniform(0.02, 0.1))
    za, zb, zy = (int(v) for v in rng.integers(-128, 0, 3))
    feeds["one"][...] = zb + int(rng.integers(-20, 21))      # near its zero point: no clamp
    for kernel in ("int8", "uint8"):
        params = dict(a_scale=sy / 2, a_zero_point=za, b_scale=sy * float(rng.uniform(0.2, 1.5)),
                      b_zero_point=zb, scale=sy, zero_point=zy, dtype="int8", kernel=kernel)
        node("QLinearAddOrt", [a8, b8], **params)          # a_scale / scale = 0.5: ties
        node("QLinearAddOrt", [one, b8], **params)
        node("QLinearAddOrt", [a8, one], **params)
        node("QLinearAddOrt", [a8, a8], **params)
    count = h * w
    node("GlobalAveragePoolOrt", [a8], scale=float(global_average_pool_scale(0.05, 0.02, count)),
         input_zero_point=-3, zero_point=int(rng.integers(-20, 20)), dtype="int8")
    # sums of -1, 0, 1 (offset by a negative zero point) at scale 0.5: ties
    t8 = inp("t8", shape, "int8", (rng.integers(-1, 2, shape) - 2).astype(np.int8))
    node("GlobalAveragePoolOrt", [t8], scale=0.5, input_zero_point=-2, zero_point=-3,
         dtype="int8")
    return b.graph(f"ort_routines_{seed}")


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_routine_equals_its_numpy_op(seed, build):
    from retarget.targets.c.routines_ort import ORT_ROUTINES
    graph, feeds = _routine_graph(seed)
    assert_routines_equal_numpy(graph, feeds, build, ORT_ROUTINES)


def test_ties_are_rounded_to_even():
    """The .5 ties of the per-tensor scale-0.5 requantisation: 0.5 -> 0, 1.5 -> 2, -1.5 -> -2."""
    acc = Value("acc", TensorType((6,), "int32"))
    y = Value("y")
    graph = infer_shapes(Graph([Node("RequantizeOrt", "rq", [acc], [y],
                                     dict(scale=0.5, zero_point=0, axis=0))], [acc], [y]))
    module = _compile(graph, "native")
    try:
        out = module.run({"acc": np.array([1, 3, -3, 5, -1, 7], np.int32)})["y"]
    finally:
        module.close()
    assert out.tolist() == [0, 2, -2, 2, 0, 4]


def test_what_has_no_routine_stays_on_the_cpu_with_its_reason():
    """A u8 result that is a graph output cannot move to s8 (the caller reads u8)."""
    acc = Value("acc", TensorType((2, 3), "int32"))
    y = Value("y")
    graph = infer_shapes(Graph([Node("RequantizeOrt", "to_u8", [acc], [y],
                                     dict(scale=0.1, zero_point=3, lo=0, hi=255,
                                          dtype="uint8"))], [acc], [y]))
    module = retarget.compile(graph, "c", config={"openmp": False})
    try:
        reasons = {name: why for name, _, why in _off_c(module)}
        assert "is uint8; generated C computes" in reasons["to_u8"]
    finally:
        module.close()


def test_a_call_whose_arguments_disagree_with_its_tensors_is_refused():
    from dataclasses import replace
    from retarget.errors import GraphError
    from retarget.targets.c.routines_ort import check_ort
    graph, _ = _routine_graph(0)
    module = retarget.compile(graph, "c", config={"cc": "sh -c 'touch libmodel.so' sh"})
    try:
        calls = [c for k in module.kernels.values() for c in k.program.calls
                 if c.routine is not None]
    finally:
        module.close()
    for call in calls:
        check_ort(call)
    rq = next(c for c in calls if c.routine.name == "rt_requantize_ort")
    bigger = (rq.routine.ints[0] + 1,) + rq.routine.ints[1:]
    with pytest.raises(GraphError, match=r"expected int32\["):
        check_ort(replace(rq, routine=replace(rq.routine, ints=bigger)))
    add = next(c for c in calls if c.routine.name == "rt_qlinear_add_ort")
    with pytest.raises(GraphError, match="neither the s8 kernel"):
        check_ort(replace(add, routine=replace(add.routine,
                                               ints=add.routine.ints[:3] + (128, -128, 127))))


def _unfused_add(a, b, ra, rb, fixed):
    """QLinearAdd with each product rounded before its sum (what contraction-free C without
    fmaf would compute): the form the routine must not be."""
    f32 = np.float32
    return np.rint((a.astype(f32) * ra).astype(f32) + ((b.astype(f32) * rb).astype(f32) + fixed))


def test_qlinear_add_rounds_its_multiply_adds_once():
    """Every pair of u8 operands, on a parameter set (searched here) where the fused and the
    separately rounded multiply-adds give different sums: the routine equals the reference,
    which the separately rounded form does not."""
    from retarget.ops.quantized_ort import fma32, qlinear_add_ort
    a = np.repeat(np.arange(256), 256).astype(np.int16)
    b = np.tile(np.arange(256), 256).astype(np.int16)
    rng = np.random.default_rng(0)
    for _ in range(200):
        sa, sb, sy = (float(np.float32(v)) for v in rng.uniform(0.005, 0.05, 3))
        za, zb, zy = (int(v) for v in rng.integers(0, 256, 3))
        ra, rb = np.float32(sa) / np.float32(sy), np.float32(sb) / np.float32(sy)
        fixed = np.float32(zy) - fma32(ra, np.float32(za), rb * np.float32(zb))
        fused = np.rint(fma32(a, ra, fma32(b, rb, fixed)))
        if np.any((fused != _unfused_add(a, b, ra, rb, fixed)) & (fused >= 0) & (fused <= 255)):
            break
    else:
        pytest.fail("no parameter set separates the two forms")
    params = dict(a_scale=sa, a_zero_point=za - 128, b_scale=sb, b_zero_point=zb - 128,
                  scale=sy, zero_point=zy - 128, dtype="int8", kernel="uint8")
    x, yv = Value("a", TensorType((256 * 256,), "int8")), Value("b", TensorType((256 * 256,),
                                                                                 "int8"))
    out = Value("y")
    graph = infer_shapes(Graph([Node("QLinearAddOrt", "add", [x, yv], [out], params)],
                               [x, yv], [out]))
    feeds = {"a": (a - 128).astype(np.int8), "b": (b - 128).astype(np.int8)}
    ref = run_graph(graph, feeds)["y"]
    np.testing.assert_array_equal(ref, qlinear_add_ort(feeds["a"], feeds["b"], **params))
    unfused = np.clip(_unfused_add(a, b, ra, rb, fixed), 0, 255) - 128
    assert np.any(unfused != ref)
    for build in sorted(BUILDS):
        module = _compile(graph, build)
        try:
            np.testing.assert_array_equal(module.run(feeds)["y"], ref, err_msg=build)
        finally:
            module.close()

"""The onnxruntime number format (load_quantized(..., scales="onnxruntime")): QDQ models made by
onnxruntime's own quantiser run on retarget's reference executor bit for bit as onnxruntime
runs them, wherever onnxruntime's own integer kernels are exact (OrtIntegerArithmetic: VNNI /
AMX CPUs, and every x86-64 CPU for 7-bit weights, reduce_range). Also run under QEMU's Haswell
model (tests/frontend/test_ort_avx2_emulated.py), where 8-bit-weight models are not exact and
only the LSB report is checked."""
from fractions import Fraction

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from retarget.errors import ShapeError
from retarget.frontend.onnx_quantized import (float_accumulations, format_qdq_error,
                                              load_quantized, qdq_error)
from retarget.frontend.ort_check import ort_integer_arithmetic
from retarget.ops.quantized_ort import (fma32, global_average_pool_ort,
                                        global_average_pool_scale, qlinear_add_ort,
                                        requantize_ort)
from retarget.targets.cpu.reference import run_graph

ort = pytest.importorskip("onnxruntime")
from retarget.zoo.ort_quantized import model_inputs, ort_quantized  # noqa: E402

ORT_OPS = {"RequantizeOrt", "QLinearAddOrt", "GlobalAveragePoolOrt"}


# ---- the arithmetic, without onnxruntime ---------------------------------------------------------
def _round_to_float32(q: Fraction) -> np.float32:
    """q correctly rounded to float32 (ties to even), by exact comparison."""
    f = np.float32(float(q))
    cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - q),
                                     int(np.array(v).view(np.int32)) & 1))


def test_fma32_rounds_once():
    rng = np.random.default_rng(0)
    n = 3000
    a = rng.integers(-128, 256, n).astype(np.float32)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-40, 5, n)).astype(np.float32)
    c = (rng.standard_normal(n) * 100).astype(np.float32)
    got = fma32(a, b, c)
    want = [_round_to_float32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
            for x, y, z in zip(a, b, c)]
    assert np.array_equal(got, np.array(want, np.float32))
    # and it is not the twice-rounded a * b + c
    twice = (a * b).astype(np.float32) + c
    assert not np.array_equal(got, twice)


def test_requantize_rounds_half_to_even_in_float32():
    acc = np.array([5, 15, 25, -5, -15, 1 << 25 | 1], np.int32)   # * 0.1 lands near .5
    y = requantize_ort(acc, scale=np.float32(0.1), axis=1, zero_point=3, lo=0, hi=255,
                       dtype="uint8")
    real = acc.astype(np.float32) * np.float32(0.1)                  # float32(acc) first
    assert y.tolist() == np.clip(np.rint(real.astype(np.float64)) + 3, 0, 255).tolist()
    assert y[0] == 3 + 0 and y[1] == 3 + 2                           # 0.5 -> 0, 1.5 -> 2


def test_qlinear_add_ort_refuses_general_broadcast():
    from retarget.ops.registry import get_op
    from retarget.ir.types import TensorType
    op = get_op("QLinearAddOrt")
    with pytest.raises(ShapeError, match="equal shapes"):
        op.infer(dict(a_scale=1.0, a_zero_point=0, b_scale=1.0, b_zero_point=0, scale=1.0,
                      zero_point=0, dtype="uint8"),
                 [TensorType((1, 4, 2, 2), "uint8"), TensorType((1, 4, 1, 1), "uint8")], {})


# ---- single kernels against onnxruntime's contrib ops --------------------------------------------
def _ort_run(node, inputs, out_type, out_shape, inits, feed):
    g = helper.make_graph([node], "k", inputs,
                          [helper.make_tensor_value_info("y", out_type, out_shape)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return s.run(None, feed)[0]


TYPES = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _add_rounded_separately(a, b, sa, za, sb, zb, sy, zy, dtype):
    """QLinearAdd's formula with every product and sum rounded on its own (no fused
    multiply-add): what the kernel's source says before the compiler contracts it."""
    off = 128 if dtype == "int8" else 0
    f = np.float32
    ra, rb = f(sa) / f(sy), f(sb) / f(sy)
    fixed = f(zy + off) - (ra * f(za + off) + rb * f(zb + off))
    a, b = (np.asarray(v).astype(np.float32) + off for v in (a, b))
    if b.size == 1:
        out = a * ra + (fixed + b.reshape(()) * rb)
    else:
        out = a * ra + (b * rb + fixed)
    info = np.iinfo(dtype)
    return np.clip(np.rint(out.astype(np.float64)) - off, info.min, info.max)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("scalar_b", [False, True])
def test_qlinear_add_equals_onnxruntime(dtype, scalar_b):
    """Every (a, b) pair, on parameter sets where rounding each step separately would give
    another result somewhere: the fused multiply-adds are what onnxruntime computes."""
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    vals = np.arange(info.min, info.max + 1).astype(dtype)
    if scalar_b:
        a = vals.reshape(1, 1, 1, 256)
    else:
        a, b_full = np.repeat(vals, 256).reshape(1, 1, 256, 256), \
            np.tile(vals, 256).reshape(1, 1, 256, 256)
    found = 0
    for _ in range(20000):
        sa, sb, sy = (np.float32(rng.uniform(0.001, 0.2)) for _ in range(3))
        za, zb, zy = (int(rng.integers(info.min, info.max + 1)) for _ in range(3))
        b = np.array(rng.integers(info.min, info.max + 1), dtype).reshape(1, 1, 1, 1) \
            if scalar_b else b_full
        kw = dict(a_scale=sa, a_zero_point=za, b_scale=sb, b_zero_point=zb, scale=sy,
                  zero_point=zy, dtype=dtype)
        got = qlinear_add_ort(a, b, **kw)
        if np.array_equal(got, _add_rounded_separately(a, b, sa, za, sb, zb, sy, zy, dtype)):
            continue
        inits = dict(sa=sa, za=np.array(za, dtype), sb=sb, zb=np.array(zb, dtype), sy=sy,
                     zy=np.array(zy, dtype))
        node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                                ["y"], domain="com.microsoft")
        want = _ort_run(node, [helper.make_tensor_value_info("a", TYPES[dtype], a.shape),
                               helper.make_tensor_value_info("b", TYPES[dtype], b.shape)],
                        TYPES[dtype], a.shape, inits, {"a": a, "b": b})
        assert np.array_equal(got, want), kw
        found += 1
        if found == 4:
            break
    assert found == 4


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_global_average_pool_equals_onnxruntime(dtype):
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    for hw in (1, 3, 7, 8, 13):
        x = rng.integers(info.min, info.max + 1, (2, 11, hw, hw)).astype(dtype)
        sx, sy = (np.float32(rng.uniform(0.001, 0.2)) for _ in range(2))
        zx, zy = (int(rng.integers(info.min, info.max + 1)) for _ in range(2))
        node = helper.make_node("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"],
                                ["y"], domain="com.microsoft", channels_last=0)
        want = _ort_run(node, [helper.make_tensor_value_info("x", TYPES[dtype], x.shape)],
                        TYPES[dtype], (2, 11, 1, 1),
                        dict(sx=sx, zx=np.array(zx, dtype), sy=sy, zy=np.array(zy, dtype)),
                        {"x": x})
        got = global_average_pool_ort(x, scale=global_average_pool_scale(sx, sy, hw * hw),
                                      input_zero_point=zx, zero_point=zy, dtype=dtype)
        assert np.array_equal(got, want), hw


# ---- whole models made by quantize_static -----------------------------------------------
_CACHE: dict = {}


def _model(name, **kw):
    key = (name, tuple(sorted(kw.items())))
    if key not in _CACHE:
        _CACHE[key] = ort_quantized(name, **kw)
    return _CACHE[key]


def _check(m, n_inputs=3):
    """(graph, error report) of the onnxruntime-format import of m against onnxruntime."""
    g = load_quantized(m, scales="onnxruntime")
    err = qdq_error(m, g, model_inputs(m, n_inputs))["output"]
    print(format_qdq_error({"output": err}, graph=g))
    assert err.step is not None and err.max_lsb is not None
    return g, err


def _ort_exact(reduce_range: bool) -> bool:
    return reduce_range or ort_integer_arithmetic().exact


CASES = [  # (model, activations, per_channel, reduce_range)
    ("residual_block", "uint8", False, False), ("residual_block", "uint8", True, False),
    ("residual_block", "int8", False, False), ("residual_block", "int8", True, True),
    ("residual_block", "uint8", True, True),
    ("mobilenet", "uint8", True, False), ("mobilenet", "int8", False, True),
    ("resnet18", "uint8", False, False), ("resnet18", "uint8", True, True),
]


@pytest.mark.parametrize("name, activations, per_channel, reduce_range", CASES)
def test_equals_onnxruntime(name, activations, per_channel, reduce_range):
    m = _model(name, activations=activations, per_channel=per_channel,
               reduce_range=reduce_range)
    g, err = _check(m)
    ops = {n.op for n in g.nodes}
    assert "RequantizeOrt" in ops and "GlobalAveragePoolOrt" in ops
    if activations == "uint8":
        # onnxruntime fuses every group of a u8 model: no float convolution is left
        assert not float_accumulations(g)
        assert "Add" not in ops
        if name != "mobilenet":
            assert "QLinearAddOrt" in ops
    if _ort_exact(reduce_range):
        assert err.max_error == 0 and err.mismatch == 0
    else:      # pair-saturating kernels (AVX2 without VNNI): onnxruntime's result is off
        assert "saturate" in format_qdq_error({"output": err}, graph=g)


def test_int8_activations_keep_onnxruntimes_float_groups():
    """quantize_static's QInt8 activations: onnxruntime 1.32 fuses only the groups whose Q/DQ
    pairs it can turn into u8 (9 of resnet18's 20 convs) and runs the rest in float32; the
    import leaves the same ones float. Those float sums round differently from onnxruntime's,
    so the output is close, not exact (measured on AVX-512 VNNI: max 4 LSB, 32 % of the
    outputs), and the report names them."""
    m = _model("resnet18", activations="int8", per_channel=False, reduce_range=False)
    g, err = _check(m, n_inputs=4)
    floats = float_accumulations(g)
    assert len(floats) == 11
    assert sum(n.op == "Conv" and n.inputs[0].type.dtype == "int32" for n in g.nodes) == 9
    assert "Add" in {n.op for n in g.nodes} and "QLinearAddOrt" not in {n.op for n in g.nodes}
    assert "run in float32" in format_qdq_error({"output": err}, graph=g)
    if ort_integer_arithmetic().exact:
        assert err.max_lsb <= 8


def test_int8_add_onnxruntime_fuses_runs_on_u8_shifted_values():
    """Both operands and the sum of branch_add's Add are read once, so onnxruntime turns
    their s8 Q/DQ pairs into u8 and fuses a u8 QLinearAdd; the import does the same (the
    kernel on x + 128), while the two convs of the shared input stay float there and here."""
    m = _model("branch_add", activations="int8", per_channel=False, reduce_range=True)
    g, err = _check(m, n_inputs=4)
    add = next(n for n in g.nodes if n.op == "QLinearAddOrt")
    assert add.attrs["dtype"] == "int8" and add.attrs["kernel"] == "uint8"
    assert sorted(float_accumulations(g)) == ["conv_a", "conv_b"]
    assert err.max_error == 0


def test_a_target_in_the_onnxruntime_format_compiles_qdq_models_as_onnxruntime_runs_them():
    """The number format INT8_ORT: compiler.to_number_format converts a QDQ model with
    scales="onnxruntime" (no half-up warning: it rounds half to even), and refuses to
    quantise a float graph into it."""
    import warnings

    from retarget.compiler import to_number_format
    from retarget.frontend.onnx import import_model, from_onnx_model
    from retarget.passes.infer_shapes import infer_shapes
    from retarget.targets.base import INT8_ORT
    from retarget.zoo.ort_quantized import float_model

    class OrtTarget:
        name, number_format = "ort-like", INT8_ORT
    m = _model("residual_block", activations="uint8", per_channel=True, reduce_range=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = to_number_format(infer_shapes(from_onnx_model(m)), OrtTarget())
    assert "RequantizeOrt" in {n.op for n in g.nodes}
    x = model_inputs(m, 1)[0]
    from retarget.frontend.ort_check import run_onnxruntime
    assert np.array_equal(run_graph(g, x)["output"], run_onnxruntime(m, x)["output"])
    with pytest.raises(NotImplementedError, match="quantize_static"):
        to_number_format(import_model(float_model("residual_block")), OrtTarget())

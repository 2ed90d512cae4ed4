"""onnxruntime's integer arithmetic on x86-64: the number format "int8-ort" (docs/quantization.md).

A u8 or s8 tensor q with scale s and zero point z stands for (q - z) * s. onnxruntime's CPU
provider (graph optimisation on, the default) fuses a QDQ model's DequantizeLinear -> op ->
QuantizeLinear groups into QLinearConv, QGemm, QLinearAdd, QLinearGlobalAveragePool and
integer MaxPool, and its MLAS kernels compute those in float32 after an exact integer
accumulation. The ops here are those output stages, written as onnxruntime's x86 kernels
compute them (read from its source: mlas/lib/quantize.cpp MlasRequantizeOutput,
intrinsics/avx2/qladd_avx2.cpp, qlgavgpool.cpp; the scales as qlinearconv.cc and
contrib_ops/cpu/quantization/quant_gemm.cc compute them):

- requantisation (QLinearConv, QGemm): float32(acc) * float32(scale), where the scale is
  float32(float32(s_x * s_w) / s_y) per output channel, clamped to [qmin - z_y, qmax - z_y],
  rounded to nearest with ties to even (cvtps2dq), plus z_y;
- QLinearAdd (AVX2 kernel, used on every AVX2 CPU): r_a = s_a / s_y, r_b = s_b / s_y in
  float32, a constant part c = z_y - fma(r_a, z_a, r_b z_b) in float32, then per element
  fma(a, r_a, fma(b, r_b, c)) (two fused multiply-adds, each rounded once to float32), rounded
  half to even, saturated to the output type;
- QLinearGlobalAveragePool: the sum of x minus z_x * (H W) in int32, times the float32 scale
  s_x / (s_y * float(H W)), then as the requantisation above.

Every step is computed exactly as IEEE float32 does it (a float32 product or sum of two
float32 values is correctly rounded in NumPy; the fused multiply-add is emulated exactly, see
`fma32`), so results do not depend on the machine that runs retarget. The accumulating parts
(Conv, Gemm on x - z_x) are the ordinary IR ops, exact in int64.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.types import TensorType
from .common import broadcast_shapes
from .quantized import _need_int, _per_channel
from .registry import REQUIRED, OpDef, register

ORT_DTYPES = ("int8", "uint8")


def _check_out(op: str, dtype: str, zero_point: int) -> np.iinfo:
    if dtype not in ORT_DTYPES:
        raise ShapeError(f"{op}: output dtype {dtype!r}; supported: {', '.join(ORT_DTYPES)}")
    info = np.iinfo(dtype)
    if not info.min <= zero_point <= info.max:
        raise ShapeError(f"{op}: zero point {zero_point} outside {dtype}")
    return info


def fma32(a, b, c) -> np.ndarray:
    """float32 fused multiply-add: a * b + c rounded once to float32 (vfmadd*ps).

    a * b of two float32 values is exact in float64; the float64 sum is made round-to-odd
    (when it is inexact and its last bit is even it moves one ulp towards the exact value),
    and a round-to-odd result with 29 more bits than float32 rounds to float32 exactly as
    the exact sum would (no double-rounding error)."""
    x = np.asarray(a, np.float32).astype(np.float64) * np.asarray(b, np.float32)
    y = np.broadcast_to(np.asarray(c, np.float32).astype(np.float64), x.shape)
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)                 # TwoSum: s + err == x + y exactly
    even = (s.view(np.int64) & 1) == 0
    fix = (err != 0) & even
    s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def round_even_saturate(v: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> int: round half to even (cvtps2dq), saturate to `dtype` (the packs that
    follow in MLAS saturate, the requantisation clamps in float first: the same result)."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(np.asarray(v, np.float64)), info.min, info.max).astype(dtype)


def ort_requant_scale(x_scale, w_scale, y_scale) -> np.ndarray:
    """QLinearConv's / QGemm's output scale per channel: (s_x * s_w) / s_y, each step rounded
    to float32 (qlinearconv.cc: X_scale_value * W_scale_data[i] / Y_scale_value)."""
    return (np.float32(x_scale) * np.asarray(w_scale, np.float32)).astype(np.float32) / \
        np.float32(y_scale)


def _requantize(acc: np.ndarray, scale: np.ndarray, zero_point: int, lo: int, hi: int,
                dtype: str) -> np.ndarray:
    real = np.asarray(acc).astype(np.int64).astype(np.float32) * scale.astype(np.float32)
    y = round_even_saturate(real, "int32").astype(np.int64) + zero_point
    return np.clip(y, lo, hi).astype(dtype)


# ---- RequantizeOrt: QLinearConv's / QGemm's output stage ---------------------------------------
def requantize_ort(x, scales=None, *, scale, axis, zero_point, lo, hi, dtype):
    """int32 accumulator -> u8/s8: clip(rint(float32(x) * scale) + zero_point, lo, hi), the
    scale a float32 attribute, or per channel the float32 `scales` input along `axis`."""
    if scales is None:
        s = np.float32(scale)
    else:
        s = _per_channel(np.asarray(scales, np.float32), x.ndim, axis % x.ndim)
    return _requantize(x, s, zero_point, lo, hi, dtype)


def _requantize_ort_infer(attrs, types, consts):
    x = types[0]
    _need_int("RequantizeOrt", x)
    info = _check_out("RequantizeOrt", attrs["dtype"], attrs["zero_point"])
    if not info.min <= attrs["lo"] <= attrs["hi"] <= info.max:
        raise ShapeError(f"RequantizeOrt clip range [{attrs['lo']}, {attrs['hi']}] outside "
                         f"{attrs['dtype']}")
    if len(types) > 1:
        s, ax = types[1], attrs["axis"]
        if attrs["scale"] is not None:
            raise ShapeError("RequantizeOrt takes the `scale` attribute or the scales input, "
                             "not both")
        if s.dtype != "float32" or not -x.rank <= ax < x.rank or s.shape != (x.shape[ax],):
            raise ShapeError(f"RequantizeOrt: per-channel scales {s} do not match input {x} "
                             f"on axis {ax}")
    elif attrs["scale"] is None or not attrs["scale"] > 0:
        raise ShapeError(f"RequantizeOrt needs a positive `scale` (got {attrs['scale']}) or a "
                         f"per-channel scales input")
    return [TensorType(x.shape, attrs["dtype"])]


register(OpDef("RequantizeOrt", requantize_ort, _requantize_ort_infer,
               attrs=dict(scale=None, axis=1, zero_point=0, lo=-128, hi=127, dtype="int8"),
               num_inputs=(1, 2),
               doc="onnxruntime's requantisation: rint(float32(x) * scale) + zp, clipped"))


# ---- QLinearAddOrt: MLAS's QLinearAdd ---------------------------------------------------------
def qlinear_add_ort(a, b, *, a_scale, a_zero_point, b_scale, b_zero_point, scale, zero_point,
                    dtype, kernel=None):
    """MlasQLinearAddKernelAvx2Helper, element for element (equal shapes, or one operand with a
    single element, which the kernel folds into the constant part first).

    `kernel` is the type the kernel computes in (default: `dtype`). kernel="uint8" on s8
    values is how onnxruntime runs the s8 adds of a QDQ model that it fuses: it turns their
    s8 Q -> DQ pairs into u8 first, so the kernel sees x + 128 with zero points z + 128,
    which rounds differently from the same kernel on the s8 values."""
    if dtype == "int8" and (kernel or dtype) == "uint8":
        shift = lambda v: (np.asarray(v).astype(np.int16) + 128).astype(np.uint8)  # noqa: E731
        out = qlinear_add_ort(shift(a), shift(b), a_scale=a_scale,
                              a_zero_point=a_zero_point + 128, b_scale=b_scale,
                              b_zero_point=b_zero_point + 128, scale=scale,
                              zero_point=zero_point + 128, dtype="uint8")
        return (out.astype(np.int16) - 128).astype(np.int8)
    if dtype == "uint8" and (kernel or dtype) != "uint8":
        raise ShapeError(f"QLinearAddOrt: a uint8 add computed as {kernel} is not implemented")
    ra = np.float32(a_scale) / np.float32(scale)
    rb = np.float32(b_scale) / np.float32(scale)
    # (float)ZeroPointC - (ScaleRatio_AC * ZeroPointA + ScaleRatio_BC * ZeroPointB) in float32,
    # the compiler contracting the inner sum into fma(r_a, z_a, r_b * z_b): measured (every
    # u8 pair on 30 parameter sets where the forms differ: this one matches onnxruntime 1.32
    # on all of them, the uncontracted form on none)
    fixed = np.float32(zero_point) - fma32(ra, np.float32(a_zero_point),
                                           rb * np.float32(b_zero_point))
    fa, fb = np.asarray(a).astype(np.float32), np.asarray(b).astype(np.float32)
    # A single-element operand is folded into the constant part first; the kernel writes
    # add(c, mul(v, r)), which the compiler contracts into one fma as well (measured: the
    # separately rounded form differs from onnxruntime on every parameter set where the two
    # differ, the fused form on none).
    if fa.size == 1:
        out = fma32(fb, rb, fma32(fa.reshape(()), ra, fixed))
    elif fb.size == 1:
        out = fma32(fa, ra, fma32(fb.reshape(()), rb, fixed))
    else:
        out = fma32(fa, ra, fma32(fb, rb, fixed))
    return round_even_saturate(out, dtype).reshape(broadcast_shapes(np.shape(a), np.shape(b)))


def _qlinear_add_ort_infer(attrs, types, consts):
    a, b = types
    _need_int("QLinearAddOrt", a)
    _need_int("QLinearAddOrt", b)
    _check_out("QLinearAddOrt", attrs["dtype"], attrs["zero_point"])
    kernel = attrs.get("kernel")
    if kernel not in (None,) + ORT_DTYPES or (attrs["dtype"] == "uint8" and
                                                kernel == "int8"):
        raise ShapeError(f"QLinearAddOrt: kernel={kernel!r} for {attrs['dtype']} "
                         f"values; use the value type, or uint8 for int8 values")
    sa, sb = int(np.prod(a.shape)), int(np.prod(b.shape))
    if a.shape != b.shape and 1 not in (sa, sb):
        raise ShapeError(f"QLinearAddOrt: operands {list(a.shape)} and {list(b.shape)}; "
                         f"only equal shapes or a single-element operand are implemented")
    return [TensorType(broadcast_shapes(a.shape, b.shape), attrs["dtype"])]


register(OpDef("QLinearAddOrt", qlinear_add_ort, _qlinear_add_ort_infer,
               attrs=dict(a_scale=REQUIRED, a_zero_point=0, b_scale=REQUIRED, b_zero_point=0,
                          scale=REQUIRED, zero_point=0, dtype="uint8", kernel=None),
               num_inputs=(2, 2), doc="onnxruntime's QLinearAdd (AVX2 kernel, FMA)"))


# ---- GlobalAveragePoolOrt: MLAS's QLinearGlobalAveragePool ---------------------------------------
def global_average_pool_scale(x_scale: float, y_scale: float, count: int) -> np.float32:
    """ScaleInput / (ScaleOutput * (float)ImageSize), in float32."""
    return np.float32(x_scale) / (np.float32(y_scale) * np.float32(count))


def global_average_pool_ort(x, *, scale, input_zero_point, zero_point, dtype):
    """N x C x H x W -> N x C x 1 x 1: (sum(x) - z_x * H W) * scale, rounded half to even,
    plus z_y, saturated."""
    x = np.asarray(x).astype(np.int64)
    count = int(np.prod(x.shape[2:]))
    acc = x.sum(axis=tuple(range(2, x.ndim)), keepdims=True) - input_zero_point * count
    info = np.iinfo(dtype)
    return _requantize(acc, np.float32(scale), zero_point, info.min, info.max, dtype)


def _global_average_pool_ort_infer(attrs, types, consts):
    x = types[0]
    _need_int("GlobalAveragePoolOrt", x)
    if x.rank < 3:
        raise ShapeError(f"GlobalAveragePoolOrt needs an N x C x spatial input, got {x}")
    _check_out("GlobalAveragePoolOrt", attrs["dtype"], attrs["zero_point"])
    return [TensorType(x.shape[:2] + (1,) * (x.rank - 2), attrs["dtype"])]


register(OpDef("GlobalAveragePoolOrt", global_average_pool_ort, _global_average_pool_ort_infer,
               attrs=dict(scale=REQUIRED, input_zero_point=0, zero_point=0, dtype="uint8"),
               doc="onnxruntime's QLinearGlobalAveragePool"))

INT8_ORT_OPS = ("RequantizeOrt", "QLinearAddOrt", "GlobalAveragePoolOrt")

__all__ = ["INT8_ORT_OPS", "fma32", "global_average_pool_scale", "ort_requant_scale",
           "round_even_saturate"]

"""TFLite's integer arithmetic: the number format "int8-tflite" (docs/quantization.md).

An int8 tensor q with scale s and zero point z stands for the real values (q - z) * s
(asymmetric activations, symmetric weights with z = 0, int32 biases at s_x * s_w). A change of
scale by a real ratio r is a 32-bit fixed-point multiplier m (2**30 <= m < 2**31, r =
m * 2**(shift - 31)) applied the way gemmlowp and TFLite's reference kernels do it:

    MultiplyByQuantizedMultiplier(x, m, shift) =
        RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x << max(shift, 0), m),
                            max(-shift, 0))

i.e. two roundings: the doubling high multiply rounds to nearest with ties upwards (its
negative nudge is 1 - 2**30, so -0.5 goes to 0), the power-of-two division rounds ties away
from zero (both in 32-bit two's complement). Everything here is
exact integer arithmetic in int64 that mirrors those 32-bit operations step for step (and
checks that the values that are int32 in C fit), so a C implementation needs nothing but
int32 / int64 arithmetic to reproduce it. The ops are the output stages of TFLite's int8
kernels; the accumulating parts (Conv, Gemm on x - z_x) are the ordinary IR ops.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..ir.types import TensorType
from .common import broadcast_shapes
from .nn import pad_spatial
from .quantized import INT8_MAX, INT8_MIN, _check_int32_range, _check_range, _need_int, \
    _per_channel, saturate
from .registry import REQUIRED, OpDef, register

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
# TFLite's int8 ADD scales both operands up by 2**20 before rescaling them (add.cc: the
# kernel's `left_shift` for 8-bit types), so that the two rescalings keep precision.
ADD_LEFT_SHIFT = 20


# ---- the primitives (gemmlowp / tensorflow/lite/kernels/internal/common.h) ----------------------
def _as_int32(op: str, x) -> np.ndarray:
    x = np.asarray(x).astype(np.int64)
    _check_int32_range(op, x)
    return x


def round_half_away(v) -> np.ndarray:
    """std::round (TfLiteRound): to nearest, ties away from zero; exact for float32 values
    (computed in float64, where adding 1/2 to a float32 loses nothing)."""
    v = np.asarray(v, np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _doubling_high_mul(a: np.ndarray, b: np.ndarray, bits: int, rounding: bool = True
                       ) -> np.ndarray:
    """The high `bits` bits of 2 * a * b for `bits`-bit a, b, in int64: rounded to nearest
    with ties upwards (gemmlowp's nudge, 1 - 2**(bits-2) when negative) or truncated towards
    zero (SQDMULH); MIN * MIN, the one overflow, saturates to MAX."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    ab = a * b                                  # |ab| <= 2**62: exact in int64
    t = ab + (np.where(ab >= 0, 1 << (bits - 2), 1 - (1 << (bits - 2))) if rounding else 0)
    # C++ integer division truncates towards zero.
    high = np.where(t >= 0, t >> (bits - 1), -((-t) >> (bits - 1)))
    return np.where((a == lo) & (b == lo), hi, high)


def _saturating_shl(x, k: int, bits: int = 32) -> np.ndarray:
    """x << k saturated to `bits` bits (gemmlowp's SaturatingRoundingMultiplyByPOT with a
    positive exponent; TFLite's SaturatingLeftShift for 16 bits)."""
    return np.clip(np.asarray(x).astype(np.int64) << k, -(1 << (bits - 1)),
                   (1 << (bits - 1)) - 1)


def srdhm(a, b) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul: the high 32 bits of 2 * a * b, rounded to nearest
    with ties upwards (gemmlowp's nudge); INT32_MIN * INT32_MIN saturates to INT32_MAX."""
    return _doubling_high_mul(_as_int32("SaturatingRoundingDoublingHighMul", a),
                              _as_int32("SaturatingRoundingDoublingHighMul", b), 32)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """x / 2**exponent rounded half away from zero (gemmlowp's RoundingDivideByPOT)."""
    x = np.asarray(x).astype(np.int64)
    e = np.asarray(exponent).astype(np.int64)
    if e.size and (e.min() < 0 or e.max() > 31):
        raise ShapeError(f"RoundingDivideByPOT exponent {e.min()}..{e.max()} outside [0, 31]")
    mask = np.left_shift(np.int64(1), e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """x * multiplier * 2**(shift - 31), TFLite-rounded (shift > 0 is a left shift of x
    first, which must not leave int32)."""
    shift = np.asarray(shift).astype(np.int64)
    left = np.maximum(shift, 0)
    x = np.left_shift(np.asarray(x).astype(np.int64), left)
    return rounding_divide_by_pot(srdhm(_as_int32("MultiplyByQuantizedMultiplier", x),
                                        multiplier), np.maximum(-shift, 0))


def multiply_by_quantized_multiplier_single(x, multiplier, shift) -> np.ndarray:
    """x * multiplier * 2**(shift - 31) with one rounding (half up) of the exact 64-bit
    product: TFLite's single-rounding variant, which LiteRT's int8 FULLY_CONNECTED reference
    kernel uses (measured: the double-rounding form differs from it by one LSB on some
    outputs, this one on none)."""
    total = 31 - np.asarray(shift).astype(np.int64)
    x = _as_int32("MultiplyByQuantizedMultiplier", x)
    return (x * np.asarray(multiplier).astype(np.int64) + (np.int64(1) << (total - 1))) >> total


ROUNDINGS_Q31 = {"double": multiply_by_quantized_multiplier,
                 "single": multiply_by_quantized_multiplier_single}


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(m, shift) with m * 2**(shift - 31) ~= real, as TFLite's QuantizeMultiplier computes it
    from the double `real`: frexp, the mantissa times 2**31 rounded half away from zero, a
    carry into 2**31 renormalised, shifts below -31 flushed to zero, above 30 saturated."""
    if real < 0 or not math.isfinite(real):
        raise ShapeError(f"requantisation ratio {real} must be a finite number >= 0")
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    fixed = q * (1 << 31)
    q_fixed = int(math.floor(fixed + 0.5))      # std::round of a positive double
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return INT32_MAX, 30
    return q_fixed, shift


def activation_range(activation: str, scale: float, zero_point: int) -> tuple[int, int]:
    """The int8 clamp of a fused activation ("NONE", "RELU", "RELU6", "RELU_N1_TO_1") at
    an output's (scale, zero point), as TFLite's CalculateActivationRangeQuantized: the real
    bounds quantised with round-half-away, then limited to the int8 range."""
    def q(v: float) -> int:
        return zero_point + int(round_half_away(np.float32(v) / np.float32(scale)))
    bounds = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0),
              "RELU_N1_TO_1": (-1.0, 1.0)}
    if activation not in bounds:
        raise ShapeError(f"fused activation {activation!r}; supported: {', '.join(bounds)}")
    lo_r, hi_r = bounds[activation]
    lo = INT8_MIN if lo_r is None else max(INT8_MIN, q(lo_r))
    hi = INT8_MAX if hi_r is None else min(INT8_MAX, q(hi_r))
    return lo, hi


def _check_multipliers(op: str, m, shift) -> tuple[np.ndarray, np.ndarray]:
    m, shift = np.asarray(m), np.asarray(shift)
    if m.dtype.kind not in "iu" or shift.dtype.kind not in "iu":
        raise ShapeError(f"{op}: multiplier and shift must be integers, got {m.dtype}, "
                         f"{shift.dtype}")
    m, shift = m.astype(np.int64), shift.astype(np.int64)
    if m.size and (m.min() < 0 or m.max() > INT32_MAX):
        raise ShapeError(f"{op}: multiplier {m.min()}..{m.max()} outside [0, 2**31 - 1]")
    if shift.size and (shift.min() < -31 or shift.max() > 30):
        raise ShapeError(f"{op}: shift {shift.min()}..{shift.max()} outside [-31, 30]")
    return m, shift


def _output(op: str, attrs, shape) -> list[TensorType]:
    _check_range(op, attrs["lo"], attrs["hi"], attrs["dtype"])
    if not INT8_MIN <= attrs["zero_point"] <= INT8_MAX:
        raise ShapeError(f"{op}: output zero point {attrs['zero_point']} outside int8")
    return [TensorType(shape, attrs["dtype"])]


# ---- RequantizeQ31: the output stage of CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, QUANTIZE ----
def requantize_q31(x, multipliers=None, shifts=None, *, multiplier, shift, axis, zero_point,
                   lo, hi, rounding, dtype):
    """int32 -> int8: clamp(MultiplyByQuantizedMultiplier(x, m, shift) + zero_point, lo, hi);
    per tensor with the attributes, per channel along `axis` with int32 vector inputs.
    rounding: "double" (SaturatingRoundingDoublingHighMul then RoundingDivideByPOT: CONV_2D,
    DEPTHWISE_CONV_2D) or "single" (FULLY_CONNECTED)."""
    if multipliers is None:
        m, s = _check_multipliers("RequantizeQ31", multiplier, shift)
    else:
        m, s = _check_multipliers("RequantizeQ31", multipliers, shifts)
        if m.shape != (x.shape[axis],) or s.shape != m.shape:
            raise ShapeError(f"RequantizeQ31: per-channel multipliers {list(m.shape)} / shifts "
                             f"{list(s.shape)} must be [{x.shape[axis]}] (input "
                             f"{list(x.shape)}, axis {axis})")
        m, s = _per_channel(m, x.ndim, axis), _per_channel(s, x.ndim, axis)
    _check_rounding_q31(rounding)
    y = ROUNDINGS_Q31[rounding](x, m, s) + zero_point
    return saturate(y, lo, hi, dtype)


def _check_rounding_q31(rounding: str) -> None:
    if rounding not in ROUNDINGS_Q31:
        raise ShapeError(f"RequantizeQ31 rounding={rounding!r}; known: "
                         f"{', '.join(ROUNDINGS_Q31)}")


def _requantize_q31_infer(attrs, types, consts):
    x = types[0]
    _need_int("RequantizeQ31", x)
    if len(types) == 3:
        ax = attrs["axis"]
        if not -x.rank <= ax < x.rank or any(t.shape != (x.shape[ax],) for t in types[1:]):
            raise ShapeError(f"RequantizeQ31: per-channel {types[1]} / {types[2]} do not match "
                             f"input {x} on axis {ax}")
    elif len(types) == 2:
        raise ShapeError("RequantizeQ31 takes per-channel multipliers and shifts together")
    else:
        _check_multipliers("RequantizeQ31", attrs["multiplier"], attrs["shift"])
    _check_rounding_q31(attrs["rounding"])
    return _output("RequantizeQ31", attrs, x.shape)


register(OpDef("RequantizeQ31", requantize_q31, _requantize_q31_infer,
               attrs=dict(multiplier=None, shift=None, axis=1, zero_point=0, lo=INT8_MIN,
                          hi=INT8_MAX, rounding="double", dtype="int8"),
               num_inputs=(1, 3),
               doc="clamp(MultiplyByQuantizedMultiplier(x, m, shift) + zero_point, lo, hi)"))


# ---- QAddQ31 / QMulQ31: TFLite's int8 ADD and MUL -----------------------------------------------
def _rescale_smaller_than_one(x, m, shift):
    # MultiplyByQuantizedMultiplierSmallerThanOneExp: shift <= 0, a pure rounding division.
    return rounding_divide_by_pot(srdhm(_as_int32("QAddQ31", x), m), -shift)


def qadd_q31(a, b, *, a_zero_point, a_multiplier, a_shift, b_zero_point, b_multiplier,
             b_shift, multiplier, shift, zero_point, lo, hi, dtype):
    """TFLite's int8 ADD (reference_integer_ops::Add): both operands offset, scaled up by
    2**20, rescaled to a common scale, summed, rescaled to the output; broadcasts."""
    broadcast_shapes(a.shape, b.shape)
    sa = _rescale_smaller_than_one((a.astype(np.int64) - a_zero_point) << ADD_LEFT_SHIFT,
                                   a_multiplier, a_shift)
    sb = _rescale_smaller_than_one((b.astype(np.int64) - b_zero_point) << ADD_LEFT_SHIFT,
                                   b_multiplier, b_shift)
    y = _rescale_smaller_than_one(sa + sb, multiplier, shift) + zero_point
    return saturate(y, lo, hi, dtype)


def add_q31_params(s_a: float, s_b: float, s_y: float) -> dict:
    """The multipliers of TFLite's int8 ADD from the float32 scales (add.cc's Prepare)."""
    twice_max = 2.0 * float(max(np.float32(s_a), np.float32(s_b)))
    out = {}
    for key, real in (("a", float(np.float32(s_a)) / twice_max),
                      ("b", float(np.float32(s_b)) / twice_max),
                      ("", twice_max / ((1 << ADD_LEFT_SHIFT) * float(np.float32(s_y))))):
        m, s = quantize_multiplier(real)
        if s > 0:
            raise ShapeError(f"ADD: ratio {real:.6g} must be below 1 (the output scale is "
                             f"too fine for TFLite's int8 ADD)")
        out[f"{key}_multiplier" if key else "multiplier"] = m
        out[f"{key}_shift" if key else "shift"] = s
    return out


def _binary_infer(op):
    def infer(attrs, types, consts):
        a, b = types
        _need_int(op, a)
        _need_int(op, b)
        for k, v in attrs.items():
            if k.endswith("multiplier"):
                _check_multipliers(op, v, attrs[k[:-len("multiplier")] + "shift"])
        return _output(op, attrs, broadcast_shapes(a.shape, b.shape))
    return infer


register(OpDef("QAddQ31", qadd_q31, _binary_infer("QAddQ31"),
               attrs=dict(a_zero_point=0, a_multiplier=REQUIRED, a_shift=REQUIRED,
                          b_zero_point=0, b_multiplier=REQUIRED, b_shift=REQUIRED,
                          multiplier=REQUIRED, shift=REQUIRED, zero_point=0, lo=INT8_MIN,
                          hi=INT8_MAX, dtype="int8"),
               num_inputs=(2, 2), doc="TFLite int8 ADD"))


def qmul_q31(a, b, *, a_zero_point, b_zero_point, multiplier, shift, zero_point, lo, hi,
             dtype):
    """TFLite's int8 MUL: clamp(MBQM((a - z_a) * (b - z_b), m, shift) + z_y, lo, hi)."""
    broadcast_shapes(a.shape, b.shape)
    prod = (a.astype(np.int64) - a_zero_point) * (b.astype(np.int64) - b_zero_point)
    y = multiply_by_quantized_multiplier(prod, multiplier, shift) + zero_point
    return saturate(y, lo, hi, dtype)


register(OpDef("QMulQ31", qmul_q31, _binary_infer("QMulQ31"),
               attrs=dict(a_zero_point=0, b_zero_point=0, multiplier=REQUIRED, shift=REQUIRED,
                          zero_point=0, lo=INT8_MIN, hi=INT8_MAX, dtype="int8"),
               num_inputs=(2, 2), doc="TFLite int8 MUL"))


# ---- AveragePoolInt: TFLite's int8 AVERAGE_POOL_2D ---------------------------------------------
def _divide_half_away(acc: np.ndarray, count: np.ndarray) -> np.ndarray:
    """acc / count rounded half away from zero, in C's truncating integer division."""
    num = np.where(acc > 0, acc + count // 2, acc - count // 2)
    q = np.abs(num) // count
    return np.where(num < 0, -q, q)


def average_pool_int(x, *, kernel_shape, strides, pads, lo, hi):
    """int8 N x C x H x W -> int8: each window's in-bounds sum divided by the number of
    in-bounds elements, rounded half away from zero, clamped (the input and output share
    scale and zero point, so no rescaling)."""
    from .pool import pool_window
    win = pool_window("AveragePoolInt", x.shape, kernel_shape, strides, None, pads, "NOTSET", 0)
    xp = pad_spatial(np.asarray(x).astype(np.int64), win.pads_begin, win.pads_end, 0)
    ones = pad_spatial(np.ones((1, 1) + x.shape[2:], np.int64), win.pads_begin, win.pads_end, 0)
    total = np.zeros(x.shape[:2] + win.out, np.int64)
    count = np.zeros((1, 1) + win.out, np.int64)
    for tap in np.ndindex(*win.kernel):
        sl = (slice(None), slice(None)) + win.tap_slices(tap)
        total += xp[sl]
        count += ones[sl]
    return saturate(_divide_half_away(total, count), lo, hi, x.dtype.name)


def _average_pool_int_infer(attrs, types, consts):
    from .pool import pool_window
    x = types[0]
    _need_int("AveragePoolInt", x)
    win = pool_window("AveragePoolInt", x.shape, attrs["kernel_shape"], attrs["strides"],
                      None, attrs["pads"], "NOTSET", 0)
    _check_range("AveragePoolInt", attrs["lo"], attrs["hi"], x.dtype)
    return [TensorType(x.shape[:2] + win.out, x.dtype)]


register(OpDef("AveragePoolInt", average_pool_int, _average_pool_int_infer,
               attrs=dict(kernel_shape=REQUIRED, strides=None, pads=None, lo=INT8_MIN,
                          hi=INT8_MAX),
               doc="int8 average pool: in-bounds sum / count, rounded half away, clamped"))


# ---- MeanInt8: TFLite's int8 MEAN over the spatial axes of an NHWC map ---------------------------
def mean_int8(x, *, input_zero_point, multiplier, shift, zero_point):
    """N x H x W x C -> N x 1 x 1 x C: the sum of x - z_x rescaled by
    MultiplyByQuantizedMultiplier with the ratio s_x / s_y / (H * W) (the division is part
    of the multiplier, as in the LiteRT reference kernel this is tested against; older
    TFLite versions divided by H * W after rescaling by s_x / s_y, which differs by one LSB
    on some outputs), plus z_y, clamped."""
    acc = (np.asarray(x).astype(np.int64) - input_zero_point).sum(axis=(1, 2), keepdims=True)
    y = multiply_by_quantized_multiplier(acc, multiplier, shift) + zero_point
    return np.clip(y, INT8_MIN, INT8_MAX).astype(np.int8)


def _mean_int8_infer(attrs, types, consts):
    x = types[0]
    if x.dtype != "int8" or x.rank != 4:
        raise ShapeError(f"MeanInt8 needs an int8 N x H x W x C input, got {x}")
    _check_multipliers("MeanInt8", attrs["multiplier"], attrs["shift"])
    return [TensorType((x.shape[0], 1, 1, x.shape[3]), "int8")]


register(OpDef("MeanInt8", mean_int8, _mean_int8_infer,
               attrs=dict(input_zero_point=REQUIRED, multiplier=REQUIRED, shift=REQUIRED,
                          zero_point=REQUIRED),
               doc="TFLite's int8 MEAN over axes 1, 2 (NHWC, keep_dims)"))


# ---- SoftmaxInt8: TFLite's reference int8 SOFTMAX (gemmlowp fixed point) ------------------------
# The input differences x - max(x) are rescaled into Q5.26, exp() is evaluated in fixed point
# (a Taylor polynomial on [-1/4, 0) times a barrel of exp(-2**k) constants), summed in Q12.19,
# and the sum's reciprocal computed by Newton-Raphson, as reference_ops::Softmax does. The
# output scale is 1/256 with zero point -128 (TFLite requires that for int8 softmax).
SOFTMAX_DIFF_INTEGER_BITS, SOFTMAX_ACCUM_INTEGER_BITS = 5, 12
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))     # round(exp(-2**k) * 2**31)


def _exp_on_interval(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), all Q0.31: gemmlowp's
    exp_on_interval_between_negative_one_quarter_and_0_excl."""
    constant_term, one_third = 1895147668, 715827883   # exp(-1/8), 1/3 in Q0.31
    x = a + (1 << 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(srdhm(x4_over_4 + x3, one_third) + x2, 1)
    return constant_term + srdhm(constant_term, x + poly)


def exp_on_negative_values(a: np.ndarray, integer_bits: int = SOFTMAX_DIFF_INTEGER_BITS
                           ) -> np.ndarray:
    """exp(a) for a <= 0 given in Q(integer_bits).(31 - integer_bits); result in Q0.31."""
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = (a & (quarter - 1)) - quarter
    result = _exp_on_interval(_saturating_shl(a_mod, integer_bits))
    remainder = a_mod - a
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder & (1 << (frac + exponent))) != 0
            result = np.where(bit, srdhm(result, multiplier), result)
    return np.where(a == 0, INT32_MAX, result)


def _one_over_one_plus_x(a: np.ndarray) -> np.ndarray:
    """1 / (1 + a) for a in [0, 1), Q0.31 in and out (Newton-Raphson, 3 steps)."""
    s = a + INT32_MAX
    half_denominator = np.where(s >= 0, s + 1, s - 1)
    half_denominator = np.where(half_denominator >= 0, half_denominator // 2,
                                -((-half_denominator) // 2))
    x = 1515870810 + srdhm(half_denominator, -1010580540)      # 48/17 - 32/17 * d, Q2.29
    for _ in range(3):
        one_minus = (1 << 29) - srdhm(half_denominator, x)
        x = x + _saturating_shl(srdhm(x, one_minus), 2)
    return _saturating_shl(x, 1)


def softmax_params(beta: float, input_scale: float) -> dict:
    """input_multiplier, input_left_shift and diff_min of the reference int8 softmax
    (PreprocessSoftmaxScaling and CalculateInputRadius)."""
    real = min(float(beta) * float(np.float32(input_scale)) *
               (1 << (31 - SOFTMAX_DIFF_INTEGER_BITS)), (1 << 31) - 1.0)
    m, left = quantize_multiplier(real)
    if left < 0:
        raise ShapeError(f"SOFTMAX: input scale {input_scale} * beta {beta} too small for "
                         f"TFLite's int8 softmax")
    radius = ((1 << SOFTMAX_DIFF_INTEGER_BITS) - 1) * \
        (1 << (31 - SOFTMAX_DIFF_INTEGER_BITS)) / (1 << left)
    return dict(input_multiplier=m, input_left_shift=left, diff_min=-int(math.floor(radius)))


def softmax_int8(x, *, input_multiplier, input_left_shift, diff_min):
    """int8 -> int8 softmax over the last axis (output scale 1/256, zero point -128)."""
    x = np.asarray(x).astype(np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    live = diff >= diff_min
    scaled = srdhm(np.where(live, diff, 0) << input_left_shift, input_multiplier)
    exps = exp_on_negative_values(scaled)
    total = np.where(live, rounding_divide_by_pot(exps, SOFTMAX_ACCUM_INTEGER_BITS), 0) \
        .sum(axis=-1, keepdims=True)
    _check_int32_range("SoftmaxInt8 (sum of exponentials)", total)
    # CountLeadingZeros of the (positive) uint32 sum
    headroom = 32 - np.vectorize(lambda t: int(t).bit_length(), otypes=[np.int64])(total)
    bits_over_unit = SOFTMAX_ACCUM_INTEGER_BITS - headroom
    shifted = ((total << headroom) & 0xFFFFFFFF) - (1 << 31)
    scale = _one_over_one_plus_x(shifted)
    out = rounding_divide_by_pot(srdhm(scale, exps), bits_over_unit + 31 - 8) + INT8_MIN
    return np.where(live, np.clip(out, INT8_MIN, INT8_MAX), INT8_MIN).astype(np.int8)


def _softmax_int8_infer(attrs, types, consts):
    x = types[0]
    if x.dtype != "int8":
        raise ShapeError(f"SoftmaxInt8 needs an int8 input, got {x}")
    _check_multipliers("SoftmaxInt8", attrs["input_multiplier"], 0)
    return [TensorType(x.shape, "int8")]


register(OpDef("SoftmaxInt8", softmax_int8, _softmax_int8_infer,
               attrs=dict(input_multiplier=REQUIRED, input_left_shift=REQUIRED,
                          diff_min=REQUIRED),
               doc="TFLite's reference int8 softmax over the last axis (fixed-point exp)"))


# ---- LookupInt8: an int8 -> int8 function as a 256-entry table (TFLite's int8 LOGISTIC) -------
def lookup_int8(x, table):
    """table[x + 128]: TFLite evaluates int8 LOGISTIC through such a table, filled when the
    model is prepared (`lut_int8`)."""
    table = np.asarray(table)
    if table.shape != (256,):
        raise ShapeError(f"LookupInt8: the table has shape {list(table.shape)}, expected [256]")
    return table[np.asarray(x).astype(np.int64) + 128].astype(np.int8)


def lut_int8(fn, input_scale: float, input_zero_point: int, output_scale: float,
             output_zero_point: int) -> np.ndarray:
    """TFLite's LUTPopulate<int8_t>: each int8 input dequantised, transformed, requantised
    (round half away from zero) and clamped, in float32 as its kernels compute it."""
    q = np.arange(-128, 128, dtype=np.int32)
    real = np.float32(input_scale) * (q - input_zero_point).astype(np.float32)
    y = round_half_away(fn(real).astype(np.float32) * (np.float32(1) / np.float32(output_scale)))
    return np.clip(y.astype(np.int64) + output_zero_point, INT8_MIN, INT8_MAX).astype(np.int8)


def _lookup_int8_infer(attrs, types, consts):
    x, table = types
    if x.dtype != "int8" or table.dtype != "int8" or table.shape != (256,):
        raise ShapeError(f"LookupInt8 needs an int8 input and an int8[256] table, got {x}, "
                         f"{table}")
    return [TensorType(x.shape, "int8")]


register(OpDef("LookupInt8", lookup_int8, _lookup_int8_infer, num_inputs=(2, 2),
               doc="int8 -> int8 through a 256-entry table"))


# ---- HardSwishInt8: TFLite's reference int8 HARD_SWISH (16-bit fixed point) -------------------
INT16_MAX = (1 << 15) - 1


def _high_mul16(a, b, rounding: bool) -> np.ndarray:
    return _doubling_high_mul(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64),
                              16, rounding)


def int16_multiplier(real: float) -> tuple[int, int]:
    """(m16, exponent): QuantizeMultiplier's 32-bit multiplier rounded to its high 16 bits
    (DownScaleInt32ToInt16Multiplier)."""
    m, e = quantize_multiplier(real)
    return (INT16_MAX if m >= INT32_MAX - (1 << 15) else (m + (1 << 15)) >> 16), e


def hard_swish_params(input_scale: float, input_zero_point: int, output_scale: float,
                      output_zero_point: int) -> dict:
    """HardSwishPrepare: the multipliers computed in float32 as the kernel does."""
    hires = np.float32(1 / 128) * np.float32(input_scale)
    out_m, out_e = int16_multiplier(float(hires / np.float32(output_scale)))
    relu_m, relu_e = int16_multiplier(float(hires / np.float32(3 / 32768)))
    if out_e > 0:
        raise ShapeError(f"HARD_SWISH: output scale {output_scale} is too fine for TFLite's "
                         f"int8 kernel")
    return dict(input_zero_point=input_zero_point, output_zero_point=output_zero_point,
                output_multiplier=out_m, output_exponent=out_e, reluish_multiplier=relu_m,
                reluish_exponent=relu_e)


def hard_swish_int8(x, *, input_zero_point, output_zero_point, output_multiplier,
                    output_exponent, reluish_multiplier, reluish_exponent):
    """x * relu6(x + 3) / 6 on int8, as reference_ops::HardSwish computes it in int16."""
    v = (np.asarray(x).astype(np.int64) - input_zero_point) << 7       # hi-res input scale
    pre_out = _high_mul16(v, output_multiplier, rounding=True)
    reluish = v
    if reluish_exponent > 0:
        reluish = _saturating_shl(reluish, reluish_exponent - 1, 16)
    reluish = _high_mul16(reluish, reluish_multiplier, rounding=True)
    if reluish_exponent > 0:
        reluish = _saturating_shl(reluish, 1, 16)
    if reluish_exponent < 0:
        reluish = rounding_divide_by_pot(reluish, -reluish_exponent)
    reluish = (reluish + (1 << 15)) >> 1                               # [-1, 1] -> [0, 1]
    out = rounding_divide_by_pot(_high_mul16(reluish, pre_out, rounding=False),
                                 -output_exponent) + output_zero_point
    return np.clip(out, INT8_MIN, INT8_MAX).astype(np.int8)


def _hard_swish_int8_infer(attrs, types, consts):
    if types[0].dtype != "int8":
        raise ShapeError(f"HardSwishInt8 needs an int8 input, got {types[0]}")
    return [TensorType(types[0].shape, "int8")]


register(OpDef("HardSwishInt8", hard_swish_int8, _hard_swish_int8_infer,
               attrs=dict(input_zero_point=REQUIRED, output_zero_point=REQUIRED,
                          output_multiplier=REQUIRED, output_exponent=REQUIRED,
                          reluish_multiplier=REQUIRED, reluish_exponent=REQUIRED),
               doc="TFLite's reference int8 hard swish (16-bit fixed point)"))


# ---- QuantizeAffine: float -> int8 as TFLite's QUANTIZE computes it ------------------------------
def quantize_affine(x, *, scale, zero_point, dtype):
    """clamp(round_half_away(x / scale) + zero_point) with the division in float32."""
    v = round_half_away(np.asarray(x, np.float32) / np.float32(scale)) + zero_point
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


def _quantize_affine_infer(attrs, types, consts):
    if np.dtype(types[0].dtype).kind != "f":
        raise ShapeError(f"QuantizeAffine needs a float input, got {types[0]}")
    if not attrs["scale"] > 0:
        raise ShapeError(f"QuantizeAffine: scale {attrs['scale']} must be positive")
    return [TensorType(types[0].shape, attrs["dtype"])]


register(OpDef("QuantizeAffine", quantize_affine, _quantize_affine_infer,
               attrs=dict(scale=REQUIRED, zero_point=0, dtype="int8"),
               doc="float -> int8: round_half_away(x / scale) + zero_point, saturated"))


__all__ = ["ADD_LEFT_SHIFT", "activation_range", "add_q31_params", "round_half_away",
           "multiply_by_quantized_multiplier", "quantize_multiplier", "rounding_divide_by_pot",
           "srdhm"]

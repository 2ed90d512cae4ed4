"""Integer ops of the int8 flow with power-of-two scales, and ONNX's own quantisation ops.

Number format: an integer tensor q with `frac_bits` f stands for the real values q * 2**-f
(symmetric, zero point 0). Changing scale is therefore a shift, and requantising an int32
accumulator is "add the rounding constant, arithmetic shift right, clip" — exactly what VTA's
ALU (ADD imm, SHR imm, MIN, MAX, truncating STORE) and DNNVM's fixed-point datapath do, with no
multiplies. Every compute function below is exact integer arithmetic in int64, so the result
is bit-for-bit reproducible on any machine and is the golden model every target is checked
against (docs/quantization.md has the full semantics).

Rounding: "half_up" (floor(v + 1/2), what add-then-shift computes) is the default and what
the hardware does; "half_even" exists so that imported ONNX QDQ models, whose QuantizeLinear
rounds half to even, convert bit-exactly.

Also here: QuantizeLinear, DequantizeLinear and QLinearConv with ONNX semantics (any scale),
so a QDQ model loads and runs on the reference before `frontend.onnx_quantized` rewrites it.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError, ShapeError, UnsupportedOpError
from ..ir.types import TensorType
from .common import broadcast_shapes
from .nn import _conv_macs, conv, conv_window, exact_int32, pad_spatial
from .registry import REQUIRED, OpDef, register
from .pool import pool_window

ROUNDINGS = ("half_up", "half_even")
INT8_MIN, INT8_MAX = -128, 127
# The ops that multiply-accumulate int8 operands into an int32 result, which a Requantize then
# takes back to int8: what quantisation produces, QDQ import recognises and VTA's GEMM runs.
ACCUMULATING_OPS = ("Conv", "Gemm", "MatMul")
INT32_MIN, INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)
# Shifts beyond these would move every int32 value out of range (left) or to 0/-1 (right); a
# scale that needs them is a calibration bug, so they are rejected rather than computed.
MAX_LEFT_SHIFT, MAX_RIGHT_SHIFT = 31, 62
OUT_DTYPES = ("int8", "int16", "int32")


# ---- the integer primitives every op here is made of --------------------------------------------
def _check_rounding(rounding: str) -> None:
    if rounding not in ROUNDINGS:
        raise UnsupportedOpError(f"rounding={rounding!r}; known: {', '.join(ROUNDINGS)}")


def _check_shift(shift) -> np.ndarray:
    s = np.asarray(shift)
    if s.dtype.kind not in "iu":
        raise ShapeError(f"shift must be an integer, got {s.dtype} {s}")
    s = s.astype(np.int64)
    if s.size and (s.min() < -MAX_LEFT_SHIFT or s.max() > MAX_RIGHT_SHIFT):
        raise ShapeError(f"shift {s.min()}..{s.max()} outside [-{MAX_LEFT_SHIFT}, "
                         f"{MAX_RIGHT_SHIFT}]")
    return s


def round_shift(x: np.ndarray, shift, rounding: str = "half_up") -> np.ndarray:
    """x * 2**-shift rounded to an integer, exactly, in int64.

    shift > 0: right shift with rounding (half_up adds 1 << (shift-1) before the arithmetic
    shift, so -2.5 -> -2 and 2.5 -> 3; half_even sends ties to the even neighbour).
    shift <= 0: left shift by -shift (exact). `shift` may be an array broadcasting against x
    (per-channel shifts)."""
    _check_rounding(rounding)
    x = np.asarray(x).astype(np.int64)
    s = _check_shift(shift)
    right = np.maximum(s, 0)
    left = np.maximum(-s, 0)
    # Where shift <= 0 the rounding constant is 0 (1 << -1 would be meaningless).
    half = np.where(right > 0, np.left_shift(np.int64(1), np.maximum(right - 1, 0)), 0)
    y = np.right_shift(x + half, right)
    if rounding == "half_even":
        # A tie is exactly when the dropped bits equal `half`; half_up rounded it up, so take
        # one back when the result came out odd.
        mask = np.left_shift(np.int64(1), right) - 1
        tie = (right > 0) & ((x & mask) == half)
        y = y - (tie & (y & 1 == 1))
    return np.left_shift(y, left)


def saturate(x: np.ndarray, lo: int, hi: int, dtype: str) -> np.ndarray:
    """Clip to [lo, hi] and cast (the range must fit the dtype, checked by the shape rules)."""
    return np.clip(x, lo, hi).astype(dtype)


def _check_range(op: str, lo: int, hi: int, dtype: str) -> None:
    if dtype not in OUT_DTYPES:
        raise ShapeError(f"{op} output dtype {dtype!r}; supported: {', '.join(OUT_DTYPES)}")
    info = np.iinfo(dtype)
    if not (info.min <= lo <= hi <= info.max):
        raise ShapeError(f"{op} clip range [{lo}, {hi}] must satisfy {info.min} <= lo <= hi <= "
                         f"{info.max} ({dtype})")


def _need_int(op: str, t: TensorType, what: str = "input") -> None:
    if not np.issubdtype(np.dtype(t.dtype), np.integer):
        raise ShapeError(f"{op} needs an integer {what}, got {t}")


def _check_int32_range(op: str, y: np.ndarray) -> None:
    # The hardware holds these intermediates in 32-bit accumulators; exceeding that would make
    # the hardware wrap while this definition does not, so it is an error, not a silent mismatch.
    if y.size and (y.min() < INT32_MIN or y.max() > INT32_MAX):
        raise ShapeError(f"{op}: intermediate [{y.min()}, {y.max()}] does not fit the int32 "
                         f"accumulator")


# ---- QuantizeP2 / DequantizeP2 --------------------------------------------------------------------
def quantize_p2(x, *, frac_bits, rounding, lo, hi, dtype):
    """float -> integer: saturate(round(x * 2**frac_bits)) to [lo, hi].

    `frac_bits` is an int in graphs; passes also call this with an array of per-channel
    fractional bits (broadcasting against x) to quantise weights."""
    _check_rounding(rounding)
    if np.isnan(x).any():
        raise InputError("QuantizeP2: input contains NaN")
    scale = np.ldexp(1.0, np.asarray(frac_bits).astype(np.int32))
    v = np.asarray(x, np.float64) * scale  # exact: multiplying by a power of two
    v = np.floor(v + 0.5) if rounding == "half_up" else np.rint(v)
    return saturate(v, lo, hi, dtype)


def _quantize_p2_infer(attrs, types, consts):
    x = types[0]
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise ShapeError(f"QuantizeP2 needs a float input, got {x}")
    _check_rounding(attrs["rounding"])
    _check_range("QuantizeP2", attrs["lo"], attrs["hi"], attrs["dtype"])
    return [TensorType(x.shape, attrs["dtype"])]


register(OpDef("QuantizeP2", quantize_p2, _quantize_p2_infer,
               attrs=dict(frac_bits=REQUIRED, rounding="half_up", lo=INT8_MIN, hi=INT8_MAX,
                          dtype="int8"),
               doc="float -> int: saturate(round(x * 2^frac_bits), lo, hi)"))


def dequantize_p2(x, *, frac_bits, dtype):
    """integer -> float: x * 2**-frac_bits (exact in float64, then rounded to `dtype`)."""
    return (x.astype(np.float64) * np.ldexp(1.0, -int(frac_bits))).astype(dtype)


def _dequantize_p2_infer(attrs, types, consts):
    _need_int("DequantizeP2", types[0])
    if attrs["dtype"] not in ("float32", "float64"):
        raise ShapeError(f"DequantizeP2 output dtype {attrs['dtype']!r}; use float32 or float64")
    return [TensorType(types[0].shape, attrs["dtype"])]


register(OpDef("DequantizeP2", dequantize_p2, _dequantize_p2_infer,
               attrs=dict(frac_bits=REQUIRED, dtype="float32"),
               doc="int -> float: x * 2^-frac_bits"))


# ---- Requantize ----------------------------------------------------------------------------------
def _per_channel(shifts: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A per-channel shift vector shaped to broadcast along `axis` of an ndim tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return shifts.reshape(shape)


def requantize(x, shifts=None, *, shift, axis, lo, hi, rounding, dtype):
    """int32 accumulator -> int8: saturate(round_shift(x, shift), lo, hi).

    ReLU is lo = 0, ReLU6 at frac f is hi = min(127, 6 * 2**f), plain int8 is [-128, 127].
    With the optional `shifts` input (one int per channel along `axis`) the shift is
    per-channel and the `shift` attribute must be left at its default None."""
    s = _requant_shift(x.ndim, x.shape, shifts, shift, axis)
    x64 = x.astype(np.int64)
    if (np.asarray(s) > 0).any():
        half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
        _check_int32_range("Requantize (accumulator + rounding constant)", x64 + half)
    return saturate(round_shift(x64, s, rounding), lo, hi, dtype)


def _requant_shift(ndim, shape, shifts, shift, axis):
    if shifts is None:
        if shift is None:
            raise ShapeError("Requantize needs a `shift` attribute or a per-channel shifts input")
        return _check_shift(shift)
    if shift is not None:
        raise ShapeError("Requantize takes either the `shift` attribute or the shifts input, "
                         "not both")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} out of range for a rank-{ndim} input")
    shifts = np.asarray(shifts)
    if shifts.ndim != 1 or shifts.shape[0] != shape[axis]:
        raise ShapeError(f"per-channel shifts of shape {list(shifts.shape)} must be "
                         f"[{shape[axis]}] (input {list(shape)}, axis {axis})")
    return _per_channel(_check_shift(shifts), ndim, axis)


def _requantize_infer(attrs, types, consts):
    x = types[0]
    _need_int("Requantize", x)
    shifts = types[1] if len(types) > 1 else None
    if shifts is not None:
        _need_int("Requantize", shifts, "shifts input")
        if attrs["shift"] is not None:
            raise ShapeError("Requantize takes either the `shift` attribute or the shifts "
                             "input, not both")
        ax = attrs["axis"]
        if not -x.rank <= ax < x.rank or shifts.shape != (x.shape[ax],):
            raise ShapeError(f"per-channel shifts {shifts} do not match input {x} on axis {ax}")
    elif attrs["shift"] is None:
        raise ShapeError("Requantize needs a `shift` attribute or a per-channel shifts input")
    else:
        _check_shift(attrs["shift"])
    _check_rounding(attrs["rounding"])
    _check_range("Requantize", attrs["lo"], attrs["hi"], attrs["dtype"])
    return [TensorType(x.shape, attrs["dtype"])]


register(OpDef("Requantize", requantize, _requantize_infer,
               attrs=dict(shift=None, axis=1, lo=INT8_MIN, hi=INT8_MAX, rounding="half_up",
                          dtype="int8"),
               num_inputs=(1, 2),
               doc="saturate((x + 2^(shift-1)) >> shift, lo, hi); per-channel shifts optional"))


# ---- QAdd: the residual add of two fixed-point tensors --------------------------------------------
def qadd(a, b, *, shift_a, shift_b, out_shift, lo, hi, rounding, dtype):
    """saturate(round_shift((a << shift_a) + (b << shift_b), out_shift), lo, hi).

    shift_a / shift_b (>= 0) align both operands to their common fraction F = max(f_a, f_b);
    out_shift = F - f_out takes the sum to the output's scale. Broadcasts like ONNX Add."""
    broadcast_shapes(a.shape, b.shape)
    if shift_a < 0 or shift_b < 0:
        raise ShapeError(f"QAdd alignment shifts must be >= 0, got {shift_a}, {shift_b}")
    acc = round_shift(a, -shift_a) + round_shift(b, -shift_b)
    _check_int32_range("QAdd", acc)
    return saturate(round_shift(acc, out_shift, rounding), lo, hi, dtype)


def _qadd_infer(attrs, types, consts):
    a, b = types
    _need_int("QAdd", a)
    _need_int("QAdd", b)
    if attrs["shift_a"] < 0 or attrs["shift_b"] < 0:
        raise ShapeError(f"QAdd alignment shifts must be >= 0, got {attrs['shift_a']}, "
                         f"{attrs['shift_b']}")
    _check_shift(attrs["out_shift"])
    _check_rounding(attrs["rounding"])
    _check_range("QAdd", attrs["lo"], attrs["hi"], attrs["dtype"])
    return [TensorType(broadcast_shapes(a.shape, b.shape), attrs["dtype"])]


register(OpDef("QAdd", qadd, _qadd_infer,
               attrs=dict(shift_a=0, shift_b=0, out_shift=REQUIRED, lo=INT8_MIN, hi=INT8_MAX,
                          rounding="half_up", dtype="int8"),
               num_inputs=(2, 2),
               doc="fixed-point add with alignment shifts, then requantize"))


# ---- the multiplier + shift format (NVDLA-style: any scale, requantised by m * x >> s) ------------
# A scale that is not a power of two is applied as an integer multiplier then a rounding right
# shift, as NVDLA's SDP output converter does (docs/nvdla-facts.md: a 16-bit signed multiplier
# and a 6-bit shift). Multipliers are kept positive and below 2**15 so they fit that field.
MULTIPLIER_BITS = 15
MAX_MULTIPLIER = (1 << MULTIPLIER_BITS) - 1


def multiplier_shift(ratio, *, common: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(m, s) with m * 2**-s closest to each real `ratio` > 0: m <= MAX_MULTIPLIER, 0 <= s <=
    MAX_RIGHT_SHIFT, and s as large as the multiplier allows (most precision). `common`: one
    shift for all ratios (the element-wise add scales both operands before one shift).
    A ratio too large for s = 0 is an error: it would need a left shift, which means the
    scales are inconsistent (an output scale far finer than its inputs')."""
    r = np.asarray(ratio, np.float64)
    if r.size and (not np.all(np.isfinite(r)) or r.min() <= 0):
        raise ShapeError(f"requantisation ratio {r.min() if r.size else r} must be a finite "
                         f"positive number")
    if r.size and r.max() > MAX_MULTIPLIER + 0.5:
        raise ShapeError(f"requantisation ratio {r.max():.6g} exceeds the largest multiplier "
                         f"{MAX_MULTIPLIER} at shift 0")
    # Largest s with round(r * 2**s) <= MAX_MULTIPLIER: s = MULTIPLIER_BITS - 1 - floor(log2 r),
    # one less where rounding would carry into bit 15.
    _, e = np.frexp(r)                      # r = f * 2**e, 0.5 <= f < 1
    s = np.clip(MULTIPLIER_BITS - e, 0, MAX_RIGHT_SHIFT)
    if common and r.size:
        s = np.full_like(s, s.min())
    m = np.rint(np.ldexp(r, s))
    over = m > MAX_MULTIPLIER
    if common:
        # one element carrying into bit 15 lowers the shared shift for all of them
        over = np.full_like(over, over.any())
    s = np.where(over, s - 1, s)
    m = np.where(over, np.rint(np.ldexp(r, s)), m)
    return m.astype(np.int64), s.astype(np.int64)


def _output_stage(op: str, attrs, shape) -> list[TensorType]:
    """The checks every multiply-shift-clip output stage shares, and its output type."""
    _check_rounding(attrs["rounding"])
    _check_range(op, attrs["lo"], attrs["hi"], attrs["dtype"])
    return [TensorType(shape, attrs["dtype"])]


def _check_multiplier(m, what: str = "multiplier") -> np.ndarray:
    m = np.asarray(m)
    if m.dtype.kind not in "iu":
        raise ShapeError(f"{what} must be an integer, got {m.dtype} {m}")
    m = m.astype(np.int64)
    if m.size and (m.min() < -MAX_MULTIPLIER - 1 or m.max() > MAX_MULTIPLIER):
        raise ShapeError(f"{what} {m.min()}..{m.max()} outside the 16-bit signed range")
    return m


def _check_right_shift(s, what: str = "shift") -> np.ndarray:
    s = _check_shift(s)
    if s.size and s.min() < 0:
        raise ShapeError(f"{what} must be a right shift (>= 0), got {s.min()}")
    return s


def requantize_mul(x, multipliers=None, shifts=None, *, multiplier, shift, axis, lo, hi,
                   rounding, dtype):
    """int accumulator -> int8: saturate(round_shift(x * m, s), lo, hi), exact in int64.

    Per tensor: the `multiplier` and `shift` attributes. Per channel: the `multipliers` and
    `shifts` inputs (one int each per channel along `axis`), attributes left None."""
    m, s = _mul_shift_params(x.ndim, x.shape, multipliers, shifts, multiplier, shift, axis)
    return saturate(round_shift(x.astype(np.int64) * m, s, rounding), lo, hi, dtype)


def _mul_shift_params(ndim, shape, multipliers, shifts, multiplier, shift, axis):
    if multipliers is None and shifts is None:
        if multiplier is None or shift is None:
            raise ShapeError("RequantizeMul needs `multiplier` and `shift` attributes or "
                             "per-channel multipliers and shifts inputs")
        return _check_multiplier(multiplier), _check_right_shift(shift)
    if multipliers is None or shifts is None or multiplier is not None or shift is not None:
        raise ShapeError("RequantizeMul takes both per-channel inputs (multipliers, shifts) "
                         "and then no multiplier / shift attributes")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} out of range for a rank-{ndim} input")
    out = []
    for name, p in (("multipliers", multipliers), ("shifts", shifts)):
        p = np.asarray(p)
        if p.ndim != 1 or p.shape[0] != shape[axis]:
            raise ShapeError(f"per-channel {name} of shape {list(p.shape)} must be "
                             f"[{shape[axis]}] (input {list(shape)}, axis {axis})")
        out.append(p)
    return (_per_channel(_check_multiplier(out[0], "multipliers"), ndim, axis),
            _per_channel(_check_right_shift(out[1], "shifts"), ndim, axis))


def _requantize_mul_infer(attrs, types, consts):
    x = types[0]
    _need_int("RequantizeMul", x)
    if len(types) == 2:
        raise ShapeError("RequantizeMul takes per-channel multipliers and shifts together "
                         "(3 inputs), got 2")
    if len(types) == 3:
        for t, what in ((types[1], "multipliers input"), (types[2], "shifts input")):
            _need_int("RequantizeMul", t, what)
        if attrs["multiplier"] is not None or attrs["shift"] is not None:
            raise ShapeError("RequantizeMul takes per-channel inputs or the multiplier / shift "
                             "attributes, not both")
        ax = attrs["axis"]
        if not -x.rank <= ax < x.rank or any(t.shape != (x.shape[ax],) for t in types[1:]):
            raise ShapeError(f"per-channel multipliers {types[1]} / shifts {types[2]} do not "
                             f"match input {x} on axis {ax}")
    else:
        if attrs["multiplier"] is None or attrs["shift"] is None:
            raise ShapeError("RequantizeMul needs `multiplier` and `shift` attributes or "
                             "per-channel multipliers and shifts inputs")
        _check_multiplier(attrs["multiplier"])
        _check_right_shift(attrs["shift"])
    return _output_stage("RequantizeMul", attrs, x.shape)


register(OpDef("RequantizeMul", requantize_mul, _requantize_mul_infer,
               attrs=dict(multiplier=None, shift=None, axis=1, lo=INT8_MIN, hi=INT8_MAX,
                          rounding="half_up", dtype="int8"),
               num_inputs=(1, 3),
               doc="saturate(round_shift(x * multiplier, shift), lo, hi); per-channel optional"))


def qadd_mul(a, b, *, mul_a, mul_b, shift, lo, hi, rounding, dtype):
    """saturate(round_shift(a * mul_a + b * mul_b, shift), lo, hi): the element-wise add of
    two int8 tensors at any scales (mul_x / 2**shift = s_x / s_out). Broadcasts like Add."""
    broadcast_shapes(a.shape, b.shape)
    acc = a.astype(np.int64) * _check_multiplier(mul_a, "mul_a") + \
        b.astype(np.int64) * _check_multiplier(mul_b, "mul_b")
    _check_int32_range("QAddMul", acc)
    return saturate(round_shift(acc, _check_right_shift(shift), rounding), lo, hi, dtype)


def _qadd_mul_infer(attrs, types, consts):
    a, b = types
    _need_int("QAddMul", a)
    _need_int("QAddMul", b)
    _check_multiplier(attrs["mul_a"], "mul_a")
    _check_multiplier(attrs["mul_b"], "mul_b")
    _check_right_shift(attrs["shift"])
    _check_rounding(attrs["rounding"])
    _check_range("QAddMul", attrs["lo"], attrs["hi"], attrs["dtype"])
    return [TensorType(broadcast_shapes(a.shape, b.shape), attrs["dtype"])]


register(OpDef("QAddMul", qadd_mul, _qadd_mul_infer,
               attrs=dict(mul_a=REQUIRED, mul_b=REQUIRED, shift=REQUIRED, lo=INT8_MIN,
                          hi=INT8_MAX, rounding="half_up", dtype="int8"),
               num_inputs=(2, 2),
               doc="element-wise add at any scales: (a*mul_a + b*mul_b) >> shift, saturated"))


# ---- SumPool: the integer half of average pooling --------------------------------------------
def sum_pool(x, *, kernel_shape, strides, pads):
    """int -> int32: the sum of each window (zero padding), exactly. Average pooling in the
    multiplier + shift format is SumPool then RequantizeMul by s_x / (window size * s_y)."""
    win = pool_window("SumPool", x.shape, kernel_shape, strides, None, pads, "NOTSET", 0)
    xp = pad_spatial(np.asarray(x).astype(np.int64), win.pads_begin, win.pads_end, 0)
    total = np.zeros(x.shape[:2] + win.out, np.int64)
    for tap in np.ndindex(*win.kernel):
        total += xp[(slice(None), slice(None)) + win.tap_slices(tap)]
    return exact_int32(total, "SumPool")


def _sum_pool_infer(attrs, types, consts):
    x = types[0]
    _need_int("SumPool", x)
    win = pool_window("SumPool", x.shape, attrs["kernel_shape"], attrs["strides"], None,
                      attrs["pads"], "NOTSET", 0)
    return [TensorType(x.shape[:2] + win.out, "int32")]


register(OpDef("SumPool", sum_pool, _sum_pool_infer,
               attrs=dict(kernel_shape=REQUIRED, strides=None, pads=None),
               doc="int -> int32 window sums (zero padding): average pooling's integer part"))


# ---- QLrn: local response normalisation on int8, through a lookup table (NVDLA's CDP) ---------
LRN_LUT_ENTRIES = 257          # 256 intervals of the square sum, plus the value at the end


def lrn_square_sum(x: np.ndarray, size: int) -> np.ndarray:
    """Per element, the sum of squares over channels [c - (size-1)//2, c + size//2] (ONNX
    LRN's window), exactly in int64."""
    sq = np.square(x.astype(np.int64))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    return sum(padded[:, i:i + c] for i in range(size))


def qlrn(x, lut, *, size, lut_shift, multiplier, shift, lo, hi, rounding, dtype):
    """int8 -> int8: y = saturate(round_shift(x * f(s) * multiplier, shift), lo, hi), where s is
    the square sum over the channel window and f is `lut` (LRN_LUT_ENTRIES int values at
    s = i << lut_shift) interpolated linearly between entries (floor), its last entry beyond.
    The quantiser fills the table with (bias + alpha/size * s_x^2 * s)^-beta, scaled."""
    lut = np.asarray(lut).astype(np.int64)
    if lut.shape != (LRN_LUT_ENTRIES,):
        raise ShapeError(f"QLrn: the lookup table has shape {list(lut.shape)}, expected "
                         f"[{LRN_LUT_ENTRIES}]")
    s = lrn_square_sum(x, size)
    j = np.minimum(s >> lut_shift, LRN_LUT_ENTRIES - 1)
    frac = np.where(j < LRN_LUT_ENTRIES - 1, s - (j << lut_shift), 0)
    nxt = lut[np.minimum(j + 1, LRN_LUT_ENTRIES - 1)]
    f = lut[j] + np.right_shift((nxt - lut[j]) * frac, lut_shift)
    acc = x.astype(np.int64) * f * _check_multiplier(multiplier)
    return saturate(round_shift(acc, _check_right_shift(shift), rounding), lo, hi, dtype)


def _qlrn_infer(attrs, types, consts):
    x, lut = types
    _need_int("QLrn", x)
    _need_int("QLrn", lut, "lookup table")
    if lut.shape != (LRN_LUT_ENTRIES,):
        raise ShapeError(f"QLrn: the lookup table is {lut}, expected [{LRN_LUT_ENTRIES}]")
    if x.rank < 2 or attrs["size"] < 1 or not 0 <= attrs["lut_shift"] < 32:
        raise ShapeError(f"QLrn: input {x}, size {attrs['size']}, lut_shift "
                         f"{attrs['lut_shift']}")
    _check_multiplier(attrs["multiplier"])
    _check_right_shift(attrs["shift"])
    return _output_stage("QLrn", attrs, x.shape)


register(OpDef("QLrn", qlrn, _qlrn_infer,
               attrs=dict(size=REQUIRED, lut_shift=REQUIRED, multiplier=REQUIRED,
                          shift=REQUIRED, lo=INT8_MIN, hi=INT8_MAX, rounding="half_up",
                          dtype="int8"),
               num_inputs=(2, 2),
               doc="int8 LRN: x * LUT(square sum, interpolated) * multiplier >> shift"))


# ---- ONNX QuantizeLinear / DequantizeLinear / QLinearConv (any scale) ----------------------------
def _axis_shaped(p: np.ndarray, ndim: int, axis: int, op: str, shape) -> np.ndarray:
    """A scale / zero point: a scalar, or a 1-D per-axis vector reshaped to broadcast."""
    p = np.asarray(p)
    if p.size == 1:
        return p.reshape(())
    ax = axis % ndim
    if p.ndim != 1 or p.shape[0] != shape[ax]:
        raise ShapeError(f"{op}: per-axis parameter of shape {list(p.shape)} does not match "
                         f"input {list(shape)} on axis {axis}")
    return _per_channel(p, ndim, ax)


# ONNX TensorProto element types of the two integer outputs QuantizeLinear may produce here.
_ONNX_INT8, _ONNX_UINT8 = 3, 2


def _quantize_linear_dtype(zero_point_dtype, output_dtype: int) -> str:
    if zero_point_dtype is not None:
        dtype = str(zero_point_dtype)
    else:
        dtype = {0: "int8", _ONNX_UINT8: "uint8", _ONNX_INT8: "int8"}.get(output_dtype)
    if dtype not in ("int8", "uint8"):
        raise UnsupportedOpError(f"QuantizeLinear to {dtype or f'ONNX type {output_dtype}'}; "
                                 f"supported: int8, uint8")
    return dtype


def _reject_blocked(op: str, block_size: int) -> None:
    # Checked in the shape rule too, so a blocked model is refused at import, not mid-run.
    if block_size:
        raise UnsupportedOpError(f"{op} with block_size={block_size} (blocked quantisation)")


def quantize_linear(x, scale, zero_point=None, *, axis, saturate, block_size, output_dtype,
                    precision):
    """ONNX QuantizeLinear: clip(round_half_even(x / scale) + zero_point) to the int range.

    (`saturate` only matters for float8 outputs, which are not supported.)"""
    _reject_blocked("QuantizeLinear", block_size)
    dtype = np.dtype(_quantize_linear_dtype(None if zero_point is None else zero_point.dtype,
                                            output_dtype))
    if dtype.name not in ("int8", "uint8"):
        raise UnsupportedOpError(f"QuantizeLinear to {dtype.name}; supported: int8, uint8")
    s = _axis_shaped(scale, x.ndim, axis, "QuantizeLinear", x.shape).astype(np.float64)
    zp = 0 if zero_point is None else _axis_shaped(zero_point, x.ndim, axis, "QuantizeLinear",
                                                   x.shape).astype(np.int64)
    # ONNX divides in the input precision (float32): x / scale rounded to float32, then rint.
    v = np.rint((x.astype(np.float32) / s.astype(np.float32)).astype(np.float64)) + zp
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


def _quantize_linear_infer(attrs, types, consts):
    _reject_blocked("QuantizeLinear", attrs["block_size"])
    zp = types[2] if len(types) > 2 else None
    dtype = _quantize_linear_dtype(None if zp is None else zp.dtype, attrs["output_dtype"])
    return [TensorType(types[0].shape, dtype)]


register(OpDef("QuantizeLinear", quantize_linear, _quantize_linear_infer,
               attrs=dict(axis=1, saturate=1, block_size=0, output_dtype=0, precision=0),
               num_inputs=(2, 3), doc="ONNX QuantizeLinear (int8/uint8)"))


def dequantize_linear(x, scale, zero_point=None, *, axis, block_size):
    """ONNX DequantizeLinear: (x - zero_point) * scale, in the scale's float type."""
    _reject_blocked("DequantizeLinear", block_size)
    s = _axis_shaped(scale, x.ndim, axis, "DequantizeLinear", x.shape) if x.ndim else scale
    zp = 0 if zero_point is None else (
        _axis_shaped(zero_point, x.ndim, axis, "DequantizeLinear", x.shape) if x.ndim
        else zero_point).astype(np.int64)
    return ((x.astype(np.int64) - zp).astype(np.float32) * s.astype(np.float32)).astype(scale.dtype)


def _dequantize_linear_infer(attrs, types, consts):
    _reject_blocked("DequantizeLinear", attrs["block_size"])
    _need_int("DequantizeLinear", types[0])
    return [TensorType(types[0].shape, types[1].dtype)]


register(OpDef("DequantizeLinear", dequantize_linear, _dequantize_linear_infer,
               attrs=dict(axis=1, block_size=0), num_inputs=(2, 3),
               doc="ONNX DequantizeLinear"))


def qlinear_conv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b=None, **attrs):
    """ONNX QLinearConv: quantize_linear(conv(x - x_zp, w - w_zp) + b) * x_scale * w_scale)."""
    xi = x.astype(np.int32) - np.asarray(x_zp).astype(np.int32).reshape(())
    wz = _axis_shaped(w_zp, w.ndim, 0, "QLinearConv", w.shape)
    wi = w.astype(np.int32) - wz.astype(np.int32)
    acc = conv(xi, wi, None if b is None else b.astype(np.int32), **attrs)
    ws = np.asarray(w_scale, np.float32).reshape(-1)
    m = w.shape[0]
    real = acc.astype(np.float32) * (np.float32(np.asarray(x_scale).reshape(())) *
                                     (ws if ws.size == 1 else ws.reshape((m,) + (1,) * (acc.ndim - 2))))
    y = np.rint((real / np.float32(np.asarray(y_scale).reshape(()))).astype(np.float64))
    y = y + np.asarray(y_zp).astype(np.int64).reshape(())
    info = np.iinfo(y_zp.dtype)
    return np.clip(y, info.min, info.max).astype(y_zp.dtype)


def _qlinear_conv_infer(attrs, types, consts):
    x, w, y_zp = types[0], types[3], types[7]
    b = types[8] if len(types) > 8 else None
    win = conv_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    return [TensorType((x.shape[0], w.shape[0]) + win.out, y_zp.dtype)]


def _qlinear_conv_macs(attrs, in_types, out_types):
    return _conv_macs(attrs, [in_types[0], in_types[3]], out_types)


register(OpDef("QLinearConv", qlinear_conv, _qlinear_conv_infer,
               attrs=dict(auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                          pads=None, strides=None),
               macs=_qlinear_conv_macs, num_inputs=(8, 9), doc="ONNX QLinearConv"))

"""Elementwise ops: activations, unary math, broadcasting arithmetic, comparisons, logic, Cast.

Every compute function is the readable NumPy definition of the newest ONNX opset's semantics.
Results keep the input dtype (NumPy would promote int8 + int8 with a Python scalar, float16
through float64 and so on; ONNX never promotes), so each one ends in an explicit cast.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.types import TensorType
from .common import broadcast_shapes, same_as_input
from .registry import REQUIRED, OpDef, register

FLOATS = ("float16", "float32", "float64")
VARIADIC = (1, 2**31 - 1)  # Sum, Max, ... take any number of inputs


def _need_float(op: str, t: TensorType) -> None:
    if t.dtype not in FLOATS:
        raise ShapeError(f"{op} needs a floating-point input, got {t}")


def _same_dtypes(op: str, types) -> str:
    """The common dtype of all present inputs; ONNX binary ops never mix dtypes."""
    present = [t for t in types if t is not None]
    dtypes = {t.dtype for t in present}
    if len(dtypes) > 1:
        raise ShapeError(f"{op} needs inputs of one dtype, got {', '.join(map(str, present))}")
    return present[0].dtype


# ---- unary ops ---------------------------------------------------------------------------------
def _unary(name: str, fn, *, floats_only: bool = True, attrs=None, doc: str = "") -> OpDef:
    def infer(attrs, types, consts):
        if floats_only:
            _need_float(name, types[0])
        return [types[0]]

    def compute(x, **attrs):
        return np.asarray(fn(x, **attrs)).astype(x.dtype, copy=False)

    return register(OpDef(name, compute, infer, attrs=attrs or {}, doc=doc))


def _relu(x):
    return np.maximum(x, np.zeros((), x.dtype))


register(OpDef("Relu", _relu, same_as_input, doc="max(x, 0)"))


def _sigmoid(x):
    # Two branches so exp never overflows: for x < 0 use e^x / (1 + e^x).
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    # NumPy has no erf; math.erf is exact to double precision (slow, but this is the definition).
    return _erf_scalar(np.asarray(x, np.float64)).astype(np.float64)


def _gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if approximate == "none":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    raise UnsupportedOpError(f"Gelu approximate={approximate!r}; known: 'none', 'tanh'")


def _elu(x, alpha):
    # expm1 of min(x, 0): the positive branch is discarded, so keep it from overflowing.
    return np.where(x < 0, alpha * np.expm1(np.minimum(x, 0)), x)


def _shrink(x, bias, lambd):
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


def _round_half_even(x):
    return np.round(x)  # NumPy rounds halves to even, as ONNX Round specifies


_unary("Sigmoid", _sigmoid, doc="1 / (1 + exp(-x))")
_unary("Tanh", np.tanh)
_unary("Exp", np.exp)
_unary("Log", np.log)
_unary("Sqrt", np.sqrt)
_unary("Reciprocal", lambda x: 1 / x)
_unary("Floor", np.floor)
_unary("Ceil", np.ceil)
_unary("Round", _round_half_even, doc="round half to even")
_unary("Erf", _erf)
_unary("Sin", np.sin)
_unary("Cos", np.cos)
_unary("Tan", np.tan)
_unary("Asin", np.arcsin)
_unary("Acos", np.arccos)
_unary("Atan", np.arctan)
_unary("Sinh", np.sinh)
_unary("Cosh", np.cosh)
_unary("Asinh", np.arcsinh)
_unary("Acosh", np.arccosh)
_unary("Atanh", np.arctanh)
_unary("Softsign", lambda x: x / (1 + np.abs(x)))
_unary("Softplus", lambda x: np.logaddexp(0, x), doc="log(1 + exp(x)), overflow-free")
_unary("Mish", lambda x: x * np.tanh(np.logaddexp(0, x)))
_unary("Neg", np.negative, floats_only=False)
_unary("Abs", np.abs, floats_only=False)
_unary("Sign", np.sign, floats_only=False)
_unary("Gelu", _gelu, attrs={"approximate": "none"})
_unary("LeakyRelu", lambda x, alpha: np.where(x < 0, x * alpha, x), attrs={"alpha": 0.01})
_unary("Elu", _elu, attrs={"alpha": 1.0})
_unary("Celu", lambda x, alpha: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha)),
       attrs={"alpha": 1.0})
_unary("Selu", lambda x, alpha, gamma: gamma * _elu(x, alpha),
       attrs={"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875})
_unary("ThresholdedRelu", lambda x, alpha: np.where(x > alpha, x, 0), attrs={"alpha": 1.0})
_unary("HardSigmoid", lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1),
       attrs={"alpha": 0.2, "beta": 0.5})
_unary("HardSwish", lambda x: x * np.clip(x / 6 + 0.5, 0, 1), doc="x * HardSigmoid(x, 1/6, 0.5)")
_unary("Swish", lambda x, alpha: x * _sigmoid(alpha * x), attrs={"alpha": 1.0})
_unary("Shrink", _shrink, floats_only=False, attrs={"bias": 0.0, "lambd": 0.5})


def _bool_out(name: str, fn, attrs=None) -> OpDef:
    def infer(attrs, types, consts):
        _need_float(name, types[0])
        return [TensorType(types[0].shape, "bool")]

    return register(OpDef(name, lambda x, **a: np.asarray(fn(x, **a)), infer, attrs=attrs or {}))


def _is_inf(x, detect_negative, detect_positive):
    return (np.isneginf(x) & bool(detect_negative)) | (np.isposinf(x) & bool(detect_positive))


_bool_out("IsNaN", np.isnan)
_bool_out("IsInf", _is_inf, attrs={"detect_negative": 1, "detect_positive": 1})


def _not_infer(attrs, types, consts):
    if types[0].dtype != "bool":
        raise ShapeError(f"Not needs a bool input, got {types[0]}")
    return [types[0]]


register(OpDef("Not", np.logical_not, _not_infer))
register(OpDef("BitwiseNot", np.invert, same_as_input))


def _clip(x, lo=None, hi=None):
    # ONNX: when min > max every element becomes max; minimum(maximum(x, lo), hi) does exactly that.
    for bound in (lo, hi):
        if bound is not None and bound.size != 1:
            raise ShapeError(f"Clip bounds must be scalars, got shape {bound.shape}")
    y = x if lo is None else np.maximum(x, lo.reshape(()).astype(x.dtype))
    y = y if hi is None else np.minimum(y, hi.reshape(()).astype(x.dtype))
    return y.astype(x.dtype, copy=False)


def _clip_infer(attrs, types, consts):
    x = types[0]
    for bound in types[1:]:
        # Float bounds of another width come from upgraded Clip-6 nodes (float32 attributes).
        if bound is not None and bound.dtype != x.dtype and not (
                bound.dtype in FLOATS and x.dtype in FLOATS):
            raise ShapeError(f"Clip bounds must have the input's dtype: {bound} vs {x}")
    return [x]


register(OpDef("Clip", _clip, _clip_infer, num_inputs=(1, 3)))


# ---- binary and variadic ops with broadcasting ------------------------------------------------
def _binary(name: str, fn, *, out_dtype: str | None = None, mixed: bool = False,
            dtypes: tuple[str, ...] | None = None, attrs=None) -> OpDef:
    """A broadcasting binary op. `out_dtype` fixes the result dtype (comparisons: bool);
    `mixed` lets the second input have another dtype (Pow's exponent); `dtypes` restricts inputs."""
    def infer(attrs, types, consts):
        a, b = types
        if not mixed:
            _same_dtypes(name, types)
        if dtypes is not None and a.dtype not in dtypes:
            raise ShapeError(f"{name} takes {', '.join(dtypes)} inputs, got {a}")
        return [TensorType(broadcast_shapes(a.shape, b.shape), out_dtype or a.dtype)]

    def compute(a, b, **attrs):
        return np.asarray(fn(a, b, **attrs)).astype(out_dtype or a.dtype, copy=False)

    return register(OpDef(name, compute, infer, attrs=attrs or {}, num_inputs=(2, 2)))


def _check_no_int_zero_division(a, b):
    if b.dtype.kind in "iu" and np.any(b == 0):
        raise ValueError("integer division by zero")


def _div(a, b):
    if a.dtype.kind not in "iu":
        return a / b
    _check_no_int_zero_division(a, b)
    # ONNX integer Div truncates toward zero (like C), NumPy's // floors: fix the inexact
    # quotients whose operands have opposite signs.
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        q = q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))
    return q


def _mod(a, b, fmod):
    _check_no_int_zero_division(a, b)
    if fmod:
        return np.fmod(a, b)  # sign of the dividend, like C fmod
    return np.mod(a, b)  # sign of the divisor, like Python %


def _pow(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and np.all(b >= 0):
        return np.power(a, b.astype(a.dtype))  # exact integer powers
    return np.power(a.astype(np.float64), b.astype(np.float64))


def _prelu(x, slope):
    return np.where(x < 0, x * slope, x)


_binary("Add", np.add)
_binary("Sub", np.subtract)
_binary("Mul", np.multiply)
_binary("Div", _div)
_binary("Mod", _mod, attrs={"fmod": 0})
_binary("Pow", _pow, mixed=True)
_binary("PRelu", _prelu)
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _bit_shift(a, b, direction):
    if direction not in ("LEFT", "RIGHT"):
        raise UnsupportedOpError(f"BitShift direction={direction!r}; known: 'LEFT', 'RIGHT'")
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    # ONNX defines shifts by a negative amount or by >= the bit width: every bit shifted out,
    # so LEFT gives 0 and RIGHT gives the sign fill (0 or -1). C leaves them undefined.
    valid = (b >= 0) & (b < bits)
    amount = np.where(valid, b, 0).astype(a.dtype)
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    if direction == "LEFT":
        # Shift the bit pattern (as unsigned) so signed overflow wraps instead of being UB.
        shifted = np.left_shift(a.view(unsigned), amount.view(unsigned)).view(a.dtype)
        return np.where(valid, shifted, 0)
    fill = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
    return np.where(valid, np.right_shift(a, amount), fill)


_binary("BitShift", _bit_shift, attrs={"direction": REQUIRED}, dtypes=INTS)
for _name, _fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                   ("BitwiseXor", np.bitwise_xor)):
    _binary(_name, _fn, dtypes=INTS)
for _name, _fn in (("Equal", np.equal), ("Less", np.less), ("LessOrEqual", np.less_equal),
                   ("Greater", np.greater), ("GreaterOrEqual", np.greater_equal)):
    _binary(_name, _fn, out_dtype="bool")
for _name, _fn in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)):
    _binary(_name, _fn, out_dtype="bool", dtypes=("bool",))


def _variadic(name: str, fn) -> OpDef:
    def infer(attrs, types, consts):
        dtype = _same_dtypes(name, types)
        return [TensorType(broadcast_shapes(*(t.shape for t in types)), dtype)]

    def compute(*xs):
        return np.asarray(fn(xs)).astype(xs[0].dtype, copy=False)

    return register(OpDef(name, compute, infer, num_inputs=VARIADIC))


def _fold(fn):
    def run(xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = fn(acc, x)
        return np.broadcast_to(acc, np.broadcast_shapes(*(x.shape for x in xs)))
    return run


_variadic("Max", _fold(np.maximum))
_variadic("Min", _fold(np.minimum))
_variadic("Sum", _fold(np.add))
_variadic("Mean", lambda xs: _fold(np.add)(xs) / len(xs))


def _where_infer(attrs, types, consts):
    c, x, y = types
    if c.dtype != "bool":
        raise ShapeError(f"Where needs a bool condition, got {c}")
    dtype = _same_dtypes("Where", [x, y])
    return [TensorType(broadcast_shapes(c.shape, x.shape, y.shape), dtype)]


register(OpDef("Where", lambda c, x, y: np.where(c, x, y).astype(x.dtype, copy=False), _where_infer,
               num_inputs=(3, 3)))


# ---- Cast ---------------------------------------------------------------------------------------
# ONNX TensorProto.DataType numbers of the dtypes the IR has. Strings, bfloat16, float8, int4,
# complex... are deliberately missing: Cast to them raises UnsupportedOpError.
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def onnx_dtype(code: int) -> str:
    """Our dtype name for an ONNX element type number, or UnsupportedOpError."""
    try:
        return ONNX_DTYPES[int(code)]
    except KeyError:
        raise UnsupportedOpError(f"ONNX element type {code} is not supported; supported: "
                                 f"{sorted(set(ONNX_DTYPES.values()))}") from None


def _cast(x, to, saturate, round_mode):
    return _cast_to(x, onnx_dtype(to))


def _cast_to(x, dtype: str):
    if np.dtype(dtype).kind in "iu" and x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise ValueError(f"cannot cast non-finite {x.dtype} values to {dtype}")
    return x.astype(dtype)  # float -> int truncates toward zero, as ONNX specifies


def _cast_infer(attrs, types, consts):
    return [TensorType(types[0].shape, onnx_dtype(attrs["to"]))]


register(OpDef("Cast", _cast, _cast_infer,
               attrs={"to": REQUIRED, "saturate": 1, "round_mode": "up"},  # both only for float8
               doc="convert to the dtype numbered `to` (ONNX TensorProto numbering)"))
def _cast_like(x, like, saturate, round_mode):
    return _cast_to(x, like.dtype.name)


register(OpDef("CastLike", _cast_like,
               lambda attrs, types, consts: [TensorType(types[0].shape, types[1].dtype)],
               attrs={"saturate": 1, "round_mode": "up"}, num_inputs=(2, 2)))

"""Reductions along axes: ReduceX, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum.

ReduceX follow opset 18 (axes as an optional second input, `noop_with_empty_axes`,
`keepdims`); Softmax & co. follow opset 13 (one axis). Older forms are rewritten by
frontend/onnx_upgrades.py; `coerce_to_2d=1` is how it spells the opset < 13 Softmax, which
flattens the input to 2-D at `axis` and normalises over the whole second half.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.types import TensorType
from .common import need_const, same_as_input
from .registry import OpDef, register
from .tensor import normalize_axes, normalize_axis, optional

FLOATS = ("float16", "float32", "float64")


def _reduced_axes(rank: int, axes, noop_with_empty_axes: int) -> tuple[int, ...] | None:
    """The axes to reduce; None means "no reduction at all" (empty axes under noop)."""
    if axes is None or np.asarray(axes).size == 0:
        return None if noop_with_empty_axes else tuple(range(rank))
    return tuple(sorted(normalize_axes(axes, rank)))


def _reduced_shape(shape, axes, keepdims) -> tuple[int, ...]:
    if axes is None:
        return tuple(shape)
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _lowest(dtype: np.dtype):
    """The identity of max: what ReduceMax of an empty set is (ONNX: -inf for floats)."""
    if dtype.kind == "b":
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if dtype.kind == "b":
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _log_sum_exp(x, axis, keepdims):
    # Subtract the max so exp never overflows; an all -inf (or empty) slice stays -inf.
    x = x.astype(np.float64)
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _sum(x, axis, keepdims):
    return np.sum(x, axis=axis, keepdims=keepdims)


def _log_sum(x, axis, keepdims):
    with np.errstate(divide="ignore"):  # the log of an empty sum is -inf, as ONNX specifies
        return np.log(_sum(x, axis, keepdims))


_REDUCTIONS = {
    "ReduceSum": _sum,
    "ReduceMean": lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims),
    "ReduceMax": lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims,
                                                  initial=_lowest(x.dtype)),
    "ReduceMin": lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims,
                                                  initial=_highest(x.dtype)),
    "ReduceProd": lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims),
    "ReduceL1": lambda x, axis, keepdims: _sum(np.abs(x), axis, keepdims),
    "ReduceL2": lambda x, axis, keepdims: np.sqrt(_sum(x.astype(np.float64) ** 2, axis, keepdims)),
    "ReduceSumSquare": lambda x, axis, keepdims: _sum(x * x, axis, keepdims),
    "ReduceLogSum": _log_sum,
    "ReduceLogSumExp": _log_sum_exp,
}


def _reduce(name: str, fn) -> OpDef:
    def compute(x, axes=None, *, keepdims, noop_with_empty_axes):
        red = _reduced_axes(x.ndim, axes, noop_with_empty_axes)
        if red is None:
            return x
        if name == "ReduceMean" and any(x.shape[a] == 0 for a in red):
            # The mean of nothing is NaN; say so without NumPy's RuntimeWarning.
            return np.full(_reduced_shape(x.shape, red, keepdims), np.nan).astype(x.dtype)
        return np.asarray(fn(x, red, bool(keepdims))).astype(x.dtype, copy=False)

    def infer(attrs, types, consts):
        x = types[0]
        if x.dtype == "bool" and name not in ("ReduceMax", "ReduceMin"):
            raise ShapeError(f"{name} does not take bool tensors")
        axes = None if optional(types, 1) is None else need_const(consts, 1, f"{name}'s axes input")
        red = _reduced_axes(x.rank, axes, attrs["noop_with_empty_axes"])
        return [TensorType(_reduced_shape(x.shape, red, attrs["keepdims"]), x.dtype)]

    return register(OpDef(name, compute, infer, attrs={"keepdims": 1, "noop_with_empty_axes": 0},
                          num_inputs=(1, 2)))


for _name, _fn in _REDUCTIONS.items():
    _reduce(_name, _fn)


# ---- ArgMax / ArgMin -------------------------------------------------------------------------
def _arg(name: str, fn) -> OpDef:
    def compute(x, *, axis, keepdims, select_last_index):
        axis = normalize_axis(axis, x.ndim)
        if x.shape[axis] == 0:
            raise ShapeError(f"{name} over an empty axis {axis} of shape {x.shape}")
        if select_last_index:
            # Search the reversed axis: its first hit is the original's last.
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            idx = fn(x, axis=axis)
        idx = idx.astype(np.int64)
        return np.expand_dims(idx, axis) if keepdims else idx

    def infer(attrs, types, consts):
        x = types[0]
        axis = normalize_axis(attrs["axis"], x.rank)
        return [TensorType(_reduced_shape(x.shape, (axis,), attrs["keepdims"]), "int64")]

    return register(OpDef(name, compute, infer,
                          attrs={"axis": 0, "keepdims": 1, "select_last_index": 0}))


_arg("ArgMax", np.argmax)
_arg("ArgMin", np.argmin)


# ---- Softmax, LogSoftmax, Hardmax ---------------------------------------------------------------
def _over_axis(fn):
    """Apply fn(x, axis) on one axis, or (coerce_to_2d) over every axis from `axis` on."""
    def compute(x, *, axis, coerce_to_2d):
        if coerce_to_2d:
            rank = x.ndim
            if not -rank <= axis <= rank:
                raise ShapeError(f"axis {axis} is out of range for rank {rank}")
            axis = axis + rank if axis < 0 else axis
            rows = int(np.prod(x.shape[:axis], dtype=np.int64))
            return fn(x.reshape(rows, -1), 1).reshape(x.shape)
        return fn(x, normalize_axis(axis, x.ndim))
    return compute


def _softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype, copy=False)


def _log_softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(
        x.dtype, copy=False)


def _hardmax(x, axis):
    # 1 at the first maximum along the axis, 0 elsewhere.
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, first, 1, axis)
    return out


def _axis_infer(name: str):
    def infer(attrs, types, consts):
        x = types[0]
        if x.dtype not in FLOATS:
            raise ShapeError(f"{name} needs a floating-point input, got {x}")
        if attrs["coerce_to_2d"]:
            if not -x.rank <= attrs["axis"] <= x.rank:
                raise ShapeError(f"axis {attrs['axis']} is out of range for rank {x.rank}")
        else:
            normalize_axis(attrs["axis"], x.rank)
        return [x]
    return infer


for _name, _fn in (("Softmax", _softmax), ("LogSoftmax", _log_softmax), ("Hardmax", _hardmax)):
    register(OpDef(_name, _over_axis(_fn), _axis_infer(_name),
                   attrs={"axis": -1, "coerce_to_2d": 0},
                   doc="opset-13 semantics; coerce_to_2d=1 is the opset < 13 form"))


# ---- CumSum, CumProd --------------------------------------------------------------------------
def _scan(accumulate, identity: int):
    def compute(x, axis, *, exclusive, reverse):
        ax = normalize_axis(int(np.asarray(axis).reshape(())), x.ndim)
        y = np.flip(x, ax) if reverse else x
        out = accumulate(y, axis=ax, dtype=x.dtype)
        if exclusive and x.shape[ax]:
            # Shift by one along the axis: element i combines the elements before i.
            out = np.delete(np.insert(out, 0, identity, axis=ax), -1, axis=ax)
        return np.flip(out, ax) if reverse else out
    return compute


register(OpDef("CumSum", _scan(np.cumsum, 0), same_as_input,
               attrs={"exclusive": 0, "reverse": 0}, num_inputs=(2, 2)))
register(OpDef("CumProd", _scan(np.cumprod, 1), same_as_input,
               attrs={"exclusive": 0, "reverse": 0}, num_inputs=(2, 2)))

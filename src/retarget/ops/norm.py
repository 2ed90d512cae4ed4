"""Normalisation ops of the transformer era: LayerNormalization (opset 17), RMSNormalization
(opset 23), InstanceNormalization and GroupNormalization (opset 21 form; the opset-18 form with
per-group scale and bias is `per_group_scale=1`, set by frontend/onnx_upgrades.py).

All four standardise over some axes and then scale (and shift):

    Y = (X - mean) / sqrt(var + epsilon) * scale + bias      (RMS: X / sqrt(mean(X^2) + eps))

The statistics are computed in float64 and the result rounded once to X's dtype, so the
reference is at least as accurate as onnxruntime's float32 kernels it is compared with.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.types import TensorType
from .registry import REQUIRED, OpDef, register
from .tensor import normalize_axis, optional

FLOATS = ("float16", "float32", "float64")
# stash_type (an ONNX TensorProto data type) -> the dtype LayerNormalization's Mean and
# InvStdDev are returned in.
STASH_DTYPES = {1: "float32", 10: "float16", 11: "float64"}


def _standardize(x: np.ndarray, axes: tuple[int, ...], epsilon: float, center: bool = True):
    """(normalised x in float64, mean, 1 / sqrt(var + epsilon)), statistics kept on `axes`.
    center=False is RMS normalisation: no mean is subtracted and the 'variance' is mean(x^2)."""
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True) if center else np.zeros((1,) * x.ndim)
    d = xf - mean
    inv_std = 1.0 / np.sqrt(np.mean(d * d, axis=axes, keepdims=True) + epsilon)
    return d * inv_std, mean, inv_std


def _check_float(op: str, t) -> None:
    if t.dtype not in FLOATS:
        raise ShapeError(f"{op} needs a floating-point input, got {t}")


def _check_affine(op: str, x_shape, params) -> None:
    """Scale/bias must broadcast to X's shape without changing it."""
    for name, t in params:
        if t is None:
            continue
        try:
            fits = np.broadcast_shapes(tuple(x_shape), tuple(t.shape)) == tuple(x_shape)
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(f"{op}: {name} of shape {list(t.shape)} does not broadcast to the "
                             f"input's shape {list(x_shape)}")


def _stash_dtype(op: str, stash_type: int) -> str:
    try:
        return STASH_DTYPES[int(stash_type)]
    except KeyError:
        raise UnsupportedOpError(f"{op} with stash_type={stash_type}: only float32 (1), float16 "
                                 "(10) and float64 (11) statistics are supported") from None


# ---- LayerNormalization -------------------------------------------------------------------------
def _ln_infer(attrs, types, consts):
    x = types[0]
    _check_float("LayerNormalization", x)
    axis = normalize_axis(attrs["axis"], x.rank)
    _check_affine("LayerNormalization", x.shape, [("Scale", types[1]), ("B", optional(types, 2))])
    stats = TensorType(tuple(x.shape[:axis]) + (1,) * (x.rank - axis),
                       _stash_dtype("LayerNormalization", attrs["stash_type"]))
    return [x, stats, stats]


def layer_normalization(x, scale, bias=None, *, axis, epsilon, stash_type):
    """Standardise over axes [axis, rank), then * Scale + B. Outputs Y, Mean, InvStdDev."""
    a = normalize_axis(axis, x.ndim)
    y, mean, inv_std = _standardize(x, tuple(range(a, x.ndim)), epsilon)
    y = y * scale
    if bias is not None:
        y = y + bias
    stash = _stash_dtype("LayerNormalization", stash_type)
    return y.astype(x.dtype), mean.astype(stash), inv_std.astype(stash)


register(OpDef("LayerNormalization", layer_normalization, _ln_infer,
               attrs=dict(axis=-1, epsilon=1e-5, stash_type=1), num_inputs=(2, 3),
               num_outputs=3, macs=lambda attrs, i, o: 2 * o[0].numel,
               doc="opset 17; Mean and InvStdDev in the stash type"))


# ---- RMSNormalization ---------------------------------------------------------------------------
def _rms_infer(attrs, types, consts):
    x = types[0]
    _check_float("RMSNormalization", x)
    normalize_axis(attrs["axis"], x.rank)
    _stash_dtype("RMSNormalization", attrs["stash_type"])
    _check_affine("RMSNormalization", x.shape, [("scale", types[1])])
    return [x]


def rms_normalization(x, scale, *, axis, epsilon, stash_type):
    """X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale."""
    _stash_dtype("RMSNormalization", stash_type)
    a = normalize_axis(axis, x.ndim)
    y, _, _ = _standardize(x, tuple(range(a, x.ndim)), epsilon, center=False)
    return (y * scale).astype(x.dtype)


register(OpDef("RMSNormalization", rms_normalization, _rms_infer,
               attrs=dict(axis=-1, epsilon=1e-5, stash_type=1), num_inputs=(2, 2),
               macs=lambda attrs, i, o: 2 * o[0].numel, doc="opset 23"))


# ---- InstanceNormalization ----------------------------------------------------------------------
def _channel_params(op: str, x, params, channels: int) -> None:
    for name, t in params:
        if tuple(t.shape) != (channels,):
            raise ShapeError(f"{op}: {name} has shape {list(t.shape)}, expected [{channels}] "
                             f"for input {list(x.shape)}")


def _in_infer(attrs, types, consts):
    x = types[0]
    _check_float("InstanceNormalization", x)
    if x.rank < 3:
        raise ShapeError(f"InstanceNormalization needs an N x C x D1... input, got {x}")
    _channel_params("InstanceNormalization", x, [("scale", types[1]), ("B", types[2])],
                    x.shape[1])
    return [x]


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    return v.astype(np.float64).reshape((-1,) + (1,) * (rank - 2))


def instance_normalization(x, scale, bias, *, epsilon):
    """Standardise each (sample, channel) over its spatial axes, then per-channel scale + B."""
    y, _, _ = _standardize(x, tuple(range(2, x.ndim)), epsilon)
    return (y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype(x.dtype)


register(OpDef("InstanceNormalization", instance_normalization, _in_infer,
               attrs=dict(epsilon=1e-5), num_inputs=(3, 3),
               macs=lambda attrs, i, o: 2 * o[0].numel))


# ---- GroupNormalization -------------------------------------------------------------------------
def _gn_infer(attrs, types, consts):
    x = types[0]
    _check_float("GroupNormalization", x)
    g = attrs["num_groups"]
    if x.rank < 3:
        raise ShapeError(f"GroupNormalization needs an N x C x D1... input, got {x}")
    if g < 1 or x.shape[1] % g:
        raise ShapeError(f"GroupNormalization: num_groups={g} does not divide the input's "
                         f"{x.shape[1]} channels")
    _stash_dtype("GroupNormalization", attrs["stash_type"])
    n = g if attrs["per_group_scale"] else x.shape[1]
    _channel_params("GroupNormalization", x, [("scale", types[1]), ("bias", types[2])], n)
    return [x]


def group_normalization(x, scale, bias, *, num_groups, epsilon, stash_type, per_group_scale):
    """Standardise each (sample, group of C / num_groups channels) over its channels and
    spatial axes, then scale + bias per channel (per group with per_group_scale=1)."""
    _stash_dtype("GroupNormalization", stash_type)
    n, c = x.shape[:2]
    grouped = x.reshape((n, num_groups, -1))
    y, _, _ = _standardize(grouped, (2,), epsilon)
    y = y.reshape(x.shape)
    if per_group_scale:
        scale, bias = (np.repeat(v, c // num_groups) for v in (scale, bias))
    return (y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype(x.dtype)


register(OpDef("GroupNormalization", group_normalization, _gn_infer,
               attrs=dict(num_groups=REQUIRED, epsilon=1e-5, stash_type=1, per_group_scale=0),
               num_inputs=(3, 3), macs=lambda attrs, i, o: 2 * o[0].numel,
               doc="opset 21 (per-channel scale); per_group_scale=1 is the opset-18 form"))

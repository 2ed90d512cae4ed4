"""Pooling and normalisation ops: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool,
BatchNormalization (inference form), LRN.

The window geometry (pads, auto_pad, ceil_mode) is shared with Conv (nn.window_geometry).
MaxPool and AveragePool carry fast paths that loop over kernel taps on whole-tensor strided
views instead of over output pixels; the definitions visit each output window explicitly.
BatchNormalization's fast path is one multiply-add in the input's dtype.
"""
from __future__ import annotations

from math import prod

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.types import TensorType
from .nn import Window, pad_spatial, window_geometry
from .registry import REQUIRED, OpDef, register

POOL_ATTRS = dict(auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=REQUIRED,
                  pads=None, strides=None)
MAXPOOL_ATTRS = dict(POOL_ATTRS, storage_order=0)
AVGPOOL_ATTRS = dict(POOL_ATTRS, count_include_pad=0)


def pool_window(op: str, x_shape, kernel_shape, strides, dilations, pads, auto_pad,
                ceil_mode) -> Window:
    if len(x_shape) < 3:
        raise ShapeError(f"{op} input must be N x C x spatial..., got shape {list(x_shape)}")
    win = window_geometry(x_shape[2:], kernel_shape, strides, dilations, pads, auto_pad,
                          bool(ceil_mode))
    if any(p >= e for p, e in zip(win.pads_begin + win.pads_end, win.extents * 2)):
        raise ShapeError(f"{op}: pads {list(win.pads_begin + win.pads_end)} must be smaller "
                         f"than the window extents {list(win.extents)}")
    return win


def _axis_positions(win: Window, axis: int, o: int) -> np.ndarray:
    """Input coordinates (padding included, may be <0 or >= size) of window o along `axis`."""
    start = o * win.strides[axis] - win.pads_begin[axis]
    return start + win.dilations[axis] * np.arange(win.kernel[axis])


def _windows(x: np.ndarray, win: Window):
    """Yield (output index, per-axis in-bounds input positions) for every output window."""
    size = x.shape[2:]
    for o in np.ndindex(*win.out):
        pos = [p[(p >= 0) & (p < n)] for p, n in
               ((_axis_positions(win, a, oa), size[a]) for a, oa in enumerate(o))]
        if any(len(p) == 0 for p in pos):
            raise ShapeError(f"pooling window {o} covers no input element "
                             f"(kernel {list(win.kernel)}, dilations {list(win.dilations)})")
        yield o, pos


# ---- MaxPool ------------------------------------------------------------------------------------
def _maxpool_infer(attrs, types, consts):
    x = types[0]
    if x.dtype == "bool":
        raise ShapeError("MaxPool does not take bool inputs")
    win = pool_window("MaxPool", x.shape, attrs["kernel_shape"], attrs["strides"],
                      attrs["dilations"], attrs["pads"], attrs["auto_pad"], attrs["ceil_mode"])
    shape = x.shape[:2] + win.out
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _flat_spatial_index(positions, size, storage_order: int):
    order = "F" if storage_order else "C"  # column-major indices when storage_order=1
    return np.ravel_multi_index(positions, size, order=order)


def max_pool(x, *, auto_pad, ceil_mode, dilations, kernel_shape, pads, storage_order, strides):
    """ONNX MaxPool by definition: max over the in-bounds elements of each window. Indices
    are flat positions into x (spatial part column-major when storage_order=1)."""
    win = pool_window("MaxPool", x.shape, kernel_shape, strides, dilations, pads, auto_pad,
                      ceil_mode)
    n, c = x.shape[:2]
    size = x.shape[2:]
    y = np.empty((n, c) + win.out, dtype=x.dtype)
    idx = np.empty((n, c) + win.out, dtype=np.int64)
    base = np.arange(n * c, dtype=np.int64).reshape(n, c) * prod(size)
    for o, pos in _windows(x, win):
        vals = x[(slice(None), slice(None)) + np.ix_(*pos)].reshape(n, c, -1)
        arg = vals.argmax(axis=-1)  # first maximum in window order, like onnxruntime
        y[(slice(None), slice(None)) + o] = np.take_along_axis(vals, arg[..., None], -1)[..., 0]
        local = np.unravel_index(arg, [len(p) for p in pos])
        coords = tuple(p[i] for p, i in zip(pos, local))
        idx[(slice(None), slice(None)) + o] = base + _flat_spatial_index(coords, size,
                                                                         storage_order)
    return y, idx


def _lowest(dtype):
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def max_pool_fast(x, *, auto_pad, ceil_mode, dilations, kernel_shape, pads, storage_order,
                  strides, num_outputs=2):
    """MaxPool over kernel taps: pad with the dtype's lowest value and keep a running max
    over strided whole-tensor views, one step per tap. The argmax (Indices) is tracked only
    when the caller reads it (num_outputs=2): that costs several times the max alone."""
    win = pool_window("MaxPool", x.shape, kernel_shape, strides, dilations, pads, auto_pad,
                      ceil_mode)
    end = win.padded_needed(x.shape[2:])
    xp = pad_spatial(x, win.pads_begin, end, _lowest(x.dtype))
    taps = [(slice(None), slice(None)) + win.tap_slices(t) for t in np.ndindex(*win.kernel)]
    if num_outputs >= 2:
        return _max_pool_taps_with_indices(x, xp, win, taps, end, storage_order)
    best = xp[taps[0]].copy()
    for sl in taps[1:]:
        # np.maximum propagates NaN as the definition's argmax does (first NaN wins).
        np.maximum(best, xp[sl], out=best)
    return (best,)


def _max_pool_taps_with_indices(x, xp, win: Window, taps, end, storage_order):
    """The running max over `taps` of the padded `xp`, and the flat index it came from."""
    n, c = x.shape[:2]
    size = x.shape[2:]
    order = "F" if storage_order else "C"
    where = np.arange(prod(size), dtype=np.int64).reshape(size, order=order)
    where = pad_spatial(where, win.pads_begin, end, -1)  # -1 marks padding
    best = best_idx = None
    for sl in taps:
        v = xp[sl]
        i = np.broadcast_to(where[sl[2:]], v.shape)
        if best is None:
            best, best_idx = v.copy(), i.copy()
            continue
        # A real element beats padding even when equal (int8 -128 vs the int8 pad value).
        better = (v > best) | ((best_idx < 0) & (i >= 0))
        np.copyto(best, v, where=better)
        np.copyto(best_idx, i, where=better)
    best_idx += (np.arange(n * c, dtype=np.int64) * prod(size)).reshape(
        (n, c) + (1,) * len(size))
    return best, best_idx


register(OpDef("MaxPool", max_pool, _maxpool_infer, attrs=MAXPOOL_ATTRS, fast=max_pool_fast,
               num_outputs=2, fast_skips_outputs=True,
               doc="ONNX MaxPool with optional Indices output"))


# ---- AveragePool --------------------------------------------------------------------------------
def _avgpool_infer(attrs, types, consts):
    x = types[0]
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise ShapeError(f"AveragePool needs a float input, got {x.dtype}")
    win = pool_window("AveragePool", x.shape, attrs["kernel_shape"], attrs["strides"],
                      attrs["dilations"], attrs["pads"], attrs["auto_pad"], attrs["ceil_mode"])
    return [TensorType(x.shape[:2] + win.out, x.dtype)]


def _avg_window(x, attrs) -> Window:
    if not np.issubdtype(x.dtype, np.floating):
        raise ShapeError(f"AveragePool needs a float input, got {x.dtype}")
    return pool_window("AveragePool", x.shape, attrs["kernel_shape"], attrs["strides"],
                       attrs["dilations"], attrs["pads"], attrs["auto_pad"], attrs["ceil_mode"])


def _divisor(win: Window, axis: int, o: int, size: int, count_include_pad: int) -> int:
    """How many window elements the average divides by: the in-bounds ones, or with
    count_include_pad those inside the explicit padding too (never ceil_mode's overhang)."""
    p = _axis_positions(win, axis, o)
    lo, hi = (-win.pads_begin[axis], size + win.pads_end[axis]) if count_include_pad else (0, size)
    return int(((p >= lo) & (p < hi)).sum())


def average_pool(x, **attrs):
    """ONNX AveragePool by definition: sum of each window's in-bounds elements / divisor."""
    win = _avg_window(x, attrs)
    n, c = x.shape[:2]
    size = x.shape[2:]
    y = np.empty((n, c) + win.out, dtype=np.float64)
    for o, pos in _windows(x, win):
        total = x[(slice(None), slice(None)) + np.ix_(*pos)].astype(np.float64).sum(
            axis=tuple(range(2, x.ndim)))
        count = prod(_divisor(win, a, oa, size[a], attrs["count_include_pad"])
                     for a, oa in enumerate(o))
        y[(slice(None), slice(None)) + o] = total / count
    return y.astype(x.dtype)


def average_pool_fast(x, **attrs):
    """AveragePool as a zero-padded sum over kernel taps divided by a separable count grid."""
    win = _avg_window(x, attrs)
    size = x.shape[2:]
    xp = pad_spatial(x, win.pads_begin, win.padded_needed(size), 0)
    total = None
    for tap in np.ndindex(*win.kernel):
        v = xp[(slice(None), slice(None)) + win.tap_slices(tap)]
        total = v.copy() if total is None else np.add(total, v, out=total)
    count = np.ones((), dtype=np.float64)
    for a in range(len(size)):  # counts factor per axis, so build the grid as an outer product
        per_axis = np.array([_divisor(win, a, o, size[a], attrs["count_include_pad"])
                             for o in range(win.out[a])], dtype=np.float64)
        count = np.multiply.outer(count, per_axis)
    return (total / count.astype(x.dtype)).astype(x.dtype)


register(OpDef("AveragePool", average_pool, _avgpool_infer, attrs=AVGPOOL_ATTRS,
               fast=average_pool_fast, doc="ONNX AveragePool"))


# ---- global pools -------------------------------------------------------------------------------
def _global_infer(op: str, float_only: bool):
    def infer(attrs, types, consts):
        x = types[0]
        if x.rank < 3:
            raise ShapeError(f"{op} input must be N x C x spatial..., got {list(x.shape)}")
        if float_only and not np.issubdtype(np.dtype(x.dtype), np.floating):
            raise ShapeError(f"{op} needs a float input, got {x.dtype}")
        return [TensorType(x.shape[:2] + (1,) * (x.rank - 2), x.dtype)]
    return infer


def global_average_pool(x):
    """Mean over every spatial axis (accumulated in float64), keeping them as size 1."""
    return x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype)


def global_max_pool(x):
    """Max over every spatial axis, keeping them as size 1."""
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


register(OpDef("GlobalAveragePool", global_average_pool,
               _global_infer("GlobalAveragePool", True)))
register(OpDef("GlobalMaxPool", global_max_pool, _global_infer("GlobalMaxPool", False)))


# ---- BatchNormalization (inference) -------------------------------------------------------------
def _bn_check(x_shape, param_shapes, training_mode):
    if training_mode:
        raise UnsupportedOpError("BatchNormalization with training_mode=1 (batch statistics "
                                 "and running-mean outputs) is not supported; export the "
                                 "model in eval mode")
    if len(x_shape) < 2:
        raise ShapeError(f"BatchNormalization input must be N x C x ..., got {list(x_shape)}")
    c = x_shape[1]
    names = ("scale", "B", "input_mean", "input_var")
    for name, s in zip(names, param_shapes):
        if tuple(s) != (c,):
            raise ShapeError(f"BatchNormalization {name} has shape {list(s)}, expected [{c}] "
                             f"(one per channel of input {list(x_shape)})")


def _bn_infer(attrs, types, consts):
    x = types[0]
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise ShapeError(f"BatchNormalization needs a float input, got {x.dtype}")
    _bn_check(x.shape, [t.shape for t in types[1:]], attrs["training_mode"])
    return [TensorType(x.shape, x.dtype)]


def batch_normalization(x, scale, bias, mean, var, *, epsilon, momentum, training_mode):
    """Y = (X - mean) / sqrt(var + epsilon) * scale + B, per channel (axis 1)."""
    _bn_check(x.shape, [scale.shape, bias.shape, mean.shape, var.shape], training_mode)
    shape = (-1,) + (1,) * (x.ndim - 2)
    f = np.float64
    inv = scale.astype(f).reshape(shape) / np.sqrt(var.astype(f).reshape(shape) + epsilon)
    y = (x.astype(f) - mean.astype(f).reshape(shape)) * inv + bias.astype(f).reshape(shape)
    return y.astype(x.dtype)


def batch_normalization_fast(x, scale, bias, mean, var, *, epsilon, momentum, training_mode):
    """One fused multiply-add per element, y = x * k + c, with the per-channel k = scale /
    sqrt(var + eps) and c = B - mean * k computed in float64 (C values, cheap) and rounded
    to x's dtype; the full-size pass stays in x's dtype with no float64 temporaries."""
    if not np.issubdtype(x.dtype, np.floating):
        return batch_normalization(x, scale, bias, mean, var, epsilon=epsilon,
                                   momentum=momentum, training_mode=training_mode)
    _bn_check(x.shape, [scale.shape, bias.shape, mean.shape, var.shape], training_mode)
    shape = (-1,) + (1,) * (x.ndim - 2)
    f = np.float64
    k = scale.astype(f) / np.sqrt(var.astype(f) + epsilon)
    c = bias.astype(f) - mean.astype(f) * k
    y = np.multiply(x, k.astype(x.dtype).reshape(shape))
    y += c.astype(x.dtype).reshape(shape)
    return y


register(OpDef("BatchNormalization", batch_normalization, _bn_infer,
               attrs=dict(epsilon=1e-5, momentum=0.9, training_mode=0),
               fast=batch_normalization_fast,
               macs=lambda attrs, i, o: o[0].numel, num_inputs=(5, 5),
               doc="inference-form BatchNormalization (Y only)"))


# ---- LRN ----------------------------------------------------------------------------------------
def _lrn_infer(attrs, types, consts):
    x = types[0]
    if x.rank < 3 or not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise ShapeError(f"LRN needs a float N x C x spatial... input, got {x}")
    if attrs["size"] < 1:
        raise ShapeError(f"LRN size={attrs['size']} must be >= 1")
    return [TensorType(x.shape, x.dtype)]


def lrn(x, *, alpha, beta, bias, size):
    """Local response normalisation across channels (AlexNet):
    y = x / (bias + alpha / size * sum of x^2 over channels [c - (size-1)//2, c + size//2])^beta.
    """
    if size < 1:
        raise ShapeError(f"LRN size={size} must be >= 1")
    sq = np.square(x.astype(np.float64))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    total = sum(padded[:, i:i + c] for i in range(size))
    return (x / (bias + alpha / size * total) ** beta).astype(x.dtype)


register(OpDef("LRN", lrn, _lrn_infer,
               attrs=dict(alpha=1e-4, beta=0.75, bias=1.0, size=REQUIRED)))

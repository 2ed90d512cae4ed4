"""Resize (ONNX opset 11-19 semantics; old Upsample nodes are mapped here by the frontend).

Resize is separable: each resized axis maps every output index to a source coordinate
(coordinate_transformation_mode) and reads the input there, one axis after the other.
- nearest: round the coordinate (nearest_mode), clamp to the input, gather. Exact for any dtype.
- linear / cubic: a weight matrix per axis, W[out, in] = K((tap - x) * s) for the taps around
  x, with out-of-range taps clamped to the edge (or dropped and renormalised with
  exclude_outside). antialias widens K by 1/scale when downscaling (s = min(scale, 1)) and
  normalises each row. Interpolation runs in float64; integer inputs are only accepted with
  nearest (rounding rules for integer interpolation differ between runtimes).
- tf_crop_and_resize: coordinates inside roi; outputs whose coordinate falls outside the input
  on any axis get extrapolation_value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.types import TensorType
from .registry import OpDef, register

RESIZE_ATTRS = dict(antialias=0, axes=None, coordinate_transformation_mode="half_pixel",
                    cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
                    keep_aspect_ratio_policy="stretch", mode="nearest",
                    nearest_mode="round_prefer_floor")
MODES = ("nearest", "linear", "cubic")
COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


@dataclass(frozen=True, slots=True)
class ResizePlan:
    """Per axis of the input: output length, scale factor, and (start, end) roi."""
    out: tuple[int, ...]
    scales: tuple[float, ...]
    roi: tuple[tuple[float, float], ...]


def _given(a) -> bool:
    return a is not None and np.asarray(a).size > 0


def _check_attrs(attrs) -> None:
    for name, allowed in (("mode", MODES), ("coordinate_transformation_mode", COORD_MODES),
                          ("nearest_mode", NEAREST_MODES),
                          ("keep_aspect_ratio_policy", ASPECT_POLICIES)):
        if attrs[name] not in allowed:
            raise UnsupportedOpError(f"Resize {name}={attrs[name]!r} is not supported; "
                                     f"expected one of {', '.join(allowed)}")
    if attrs["antialias"] and attrs["mode"] == "nearest":
        raise UnsupportedOpError("Resize antialias=1 applies to linear and cubic modes only, "
                                 "not nearest")


def resize_plan(x_shape, roi, scales, sizes, attrs) -> ResizePlan:
    """Output shape, scales and roi of a Resize, following the ONNX rules (and validating)."""
    rank = len(x_shape)
    axes = list(range(rank)) if attrs["axes"] is None else [int(a) for a in attrs["axes"]]
    axes = [a + rank if a < 0 else a for a in axes]
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"Resize axes {attrs['axes']} are not distinct axes of a rank-{rank} "
                         f"input")
    if _given(scales) == _given(sizes):
        raise ShapeError("Resize needs exactly one of 'scales' and 'sizes'")
    out = list(x_shape)
    factors = [1.0] * rank
    if _given(sizes):
        sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(axes) or min(sizes) < 1:
            raise ShapeError(f"Resize sizes {sizes} must give one positive size per resized "
                             f"axis {axes}")
        for a, s in zip(axes, sizes):
            factors[a] = s / x_shape[a]
        policy = attrs["keep_aspect_ratio_policy"]
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            scale = pick(factors[a] for a in axes)
            for a in axes:
                factors[a] = scale
                out[a] = int(scale * x_shape[a] + 0.5)  # round half up
        else:
            for a, s in zip(axes, sizes):
                out[a] = s
    else:
        scales = [float(s) for s in np.asarray(scales).reshape(-1)]
        if len(scales) != len(axes) or min(scales) <= 0:
            raise ShapeError(f"Resize scales {scales} must give one positive scale per resized "
                             f"axis {axes}")
        for a, s in zip(axes, scales):
            factors[a] = s
            out[a] = int(math.floor(s * x_shape[a]))
        if min(out, default=1) < 1:
            raise ShapeError(f"Resize scales {scales} give an empty output {out} for input "
                             f"{list(x_shape)}")
    box = [(0.0, 1.0)] * rank
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        if not _given(roi):
            raise ShapeError("Resize with tf_crop_and_resize needs the 'roi' input")
        r = [float(v) for v in np.asarray(roi).reshape(-1)]
        if len(r) != 2 * len(axes):
            raise ShapeError(f"Resize roi has {len(r)} values; expected 2 x {len(axes)} "
                             f"(starts then ends of the resized axes)")
        for i, a in enumerate(axes):
            box[a] = (r[i], r[len(axes) + i])
    return ResizePlan(tuple(out), tuple(factors), tuple(box))


def _infer(attrs, types, consts):
    _check_attrs(attrs)
    x = types[0]
    padded = list(consts) + [None] * (4 - len(consts))
    scales, sizes = padded[2], padded[3]
    for i, name in ((2, "scales"), (3, "sizes")):
        if len(types) > i and types[i] is not None and types[i].numel > 0 and padded[i] is None:
            raise ShapeError(f"Resize {name} must be a constant for static shapes")
    if attrs["mode"] != "nearest" and not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise UnsupportedOpError(f"Resize mode={attrs['mode']} on {x.dtype} input is not "
                                 f"supported (only nearest for integers)")
    plan = resize_plan(x.shape, None if len(consts) < 2 else consts[1], scales, sizes,
                       dict(attrs, coordinate_transformation_mode="half_pixel"))
    return [TensorType(plan.out, x.dtype)]


def source_coords(mode: str, out_len: int, in_len: int, scale: float,
                  roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None]:
    """Input coordinate of every output index along one axis, and (tf_crop_and_resize only)
    which outputs fall outside the input. ONNX uses the real-valued resized length
    scale * in_len in align_corners/tf_crop_and_resize, so we do too."""
    y = np.arange(out_len, dtype=np.float64)
    length = scale * in_len
    if mode == "align_corners":
        x = np.zeros(out_len) if length == 1 else y * (in_len - 1) / (length - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / length)
        x = offset + (y + 0.5) / scale - 0.5
    else:  # tf_crop_and_resize
        start, end = roi
        if length == 1:
            x = np.full(out_len, (end - start) * (in_len - 1) / 2)
        else:
            x = y * (end - start) * (in_len - 1) / (length - 1)
        x = x + start * (in_len - 1)
        return x, (x < 0) | (x > in_len - 1)
    return x, None


def nearest_index(x: np.ndarray, nearest_mode: str, in_len: int) -> np.ndarray:
    """Round source coordinates to input indices, clamped to the input."""
    if nearest_mode == "round_prefer_floor":
        i = np.ceil(x - 0.5)  # x.5 goes down
    elif nearest_mode == "round_prefer_ceil":
        i = np.floor(x + 0.5)
    elif nearest_mode == "floor":
        i = np.floor(x)
    else:
        i = np.ceil(x)
    return np.clip(i, 0, in_len - 1).astype(np.intp)


def _kernel(mode: str, a: float):
    if mode == "linear":
        return lambda d: np.clip(1 - np.abs(d), 0, 1)

    def cubic(d):
        d = np.abs(d)
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        return np.where(d <= 1, near, np.where(d < 2, far, 0.0))
    return cubic


def interpolation_matrix(x: np.ndarray, in_len: int, scale: float, attrs) -> np.ndarray:
    """W[out, in]: the weights of one axis' linear/cubic interpolation at coordinates x."""
    support = 1 if attrs["mode"] == "linear" else 2
    s = min(scale, 1.0) if attrs["antialias"] else 1.0
    first = math.floor(-support / s) + 1  # leftmost tap relative to floor(x)
    n = 2 - 2 * first
    # One spare tap on the left covers integer x; taps beyond the support weigh exactly 0.
    taps = np.floor(x)[:, None] + np.arange(first - 1, first + n)[None, :]
    w = _kernel(attrs["mode"], attrs["cubic_coeff_a"])((taps - x[:, None]) * s)
    if attrs["antialias"]:
        w = w / w.sum(axis=1, keepdims=True)
    if attrs["exclude_outside"]:
        w = np.where((taps < 0) | (taps > in_len - 1), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    mat = np.zeros((len(x), in_len))
    rows = np.broadcast_to(np.arange(len(x))[:, None], taps.shape)
    np.add.at(mat, (rows, np.clip(taps, 0, in_len - 1).astype(np.intp)), w)  # edge clamp
    return mat


def resize(x, roi=None, scales=None, sizes=None, **attrs):
    """ONNX Resize (see the module docstring for the semantics)."""
    _check_attrs(attrs)
    mode, ctm = attrs["mode"], attrs["coordinate_transformation_mode"]
    if mode != "nearest" and not np.issubdtype(x.dtype, np.floating):
        raise UnsupportedOpError(f"Resize mode={mode} on {x.dtype} input is not supported "
                                 f"(only nearest for integers)")
    plan = resize_plan(x.shape, roi, scales, sizes, attrs)
    y = x if mode == "nearest" else x.astype(np.float64)
    outside = []
    for axis, (n_in, n_out, scale, box) in enumerate(zip(x.shape, plan.out, plan.scales,
                                                         plan.roi)):
        if math.isclose(scale, 1.0) and n_in == n_out and (
                ctm != "tf_crop_and_resize" or box == (0.0, 1.0)):
            continue  # identity along this axis in every mode
        coords, out_mask = source_coords(ctm, n_out, n_in, scale, box)
        if mode == "nearest":
            y = np.take(y, nearest_index(coords, attrs["nearest_mode"], n_in), axis=axis)
        else:
            mat = interpolation_matrix(coords, n_in, scale, attrs)
            y = np.moveaxis(np.tensordot(mat, y, axes=([1], [axis])), 0, axis)
        if out_mask is not None and out_mask.any():
            outside.append((axis, out_mask))
    if outside:
        y = y.astype(np.float64) if mode == "nearest" else y
        for axis, m in outside:
            shape = [1] * y.ndim
            shape[axis] = -1
            y = np.where(m.reshape(shape), attrs["extrapolation_value"], y)
    return y.astype(x.dtype, copy=False)


register(OpDef("Resize", resize, _infer, attrs=RESIZE_ATTRS, num_inputs=(1, 4),
               doc="ONNX Resize: nearest, linear, cubic; antialias, axes, aspect policies"))

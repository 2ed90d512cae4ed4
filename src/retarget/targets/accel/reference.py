"""The integer reference of each layer description, composed from the op table (ops/): the
same NumPy definitions the reference executor runs, never a re-derivation. Tests compare the
simulator against these bit for bit; a target can use them to check a lowered segment."""
from __future__ import annotations

import numpy as np

from ...ops.registry import OPS, REQUIRED
from .layers import Conv2d, Dense, Pool2d, Requant, RequantizeLayer, ResidualAdd


def run_op(op: str, *inputs, **attrs) -> np.ndarray:
    """OPS[op].compute with the op's attribute defaults filled in; the first output."""
    d = OPS[op]
    full = {k: v for k, v in d.attrs.items() if v is not REQUIRED}
    full.update(attrs)
    out = d.compute(*inputs, **full)
    return out[0] if isinstance(out, (tuple, list)) else out


def _requantize(acc: np.ndarray, r: Requant, axis: int = 1) -> np.ndarray:
    if r.per_channel:
        return run_op("Requantize", acc, np.array(r.shift, dtype=np.int64), axis=axis,
                      lo=r.lo, hi=r.hi)
    return run_op("Requantize", acc, shift=r.shift, lo=r.lo, hi=r.hi)


def _conv_attrs(kernel, stride, pads, groups=1) -> dict:
    pt, pl, pb, pr = pads
    return dict(kernel_shape=list(kernel), strides=list(stride), pads=[pt, pl, pb, pr],
                group=groups)


def conv2d(layer: Conv2d, x: np.ndarray, weight: np.ndarray, bias=None) -> np.ndarray:
    acc = run_op("Conv", x, weight, bias, **_conv_attrs(layer.kernel, layer.stride, layer.pads,
                                                       layer.groups))
    return _requantize(acc, layer.requant)


def dense(layer: Dense, x: np.ndarray, weight: np.ndarray, bias=None) -> np.ndarray:
    acc = run_op("Gemm", x, weight, bias, transB=1)
    return _requantize(acc, layer.requant)


def residual_add(layer: ResidualAdd, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return run_op("QAdd", a, b, shift_a=layer.shift_a, shift_b=layer.shift_b,
                  out_shift=layer.out_shift, lo=layer.lo, hi=layer.hi)


def requantize(layer: RequantizeLayer, x: np.ndarray) -> np.ndarray:
    return _requantize(x, layer.requant)


def pool2d(layer: Pool2d, x: np.ndarray) -> np.ndarray:
    if layer.kind == "max":
        y = run_op("MaxPool", x, kernel_shape=list(layer.kernel), strides=list(layer.stride),
                   pads=list(layer.pads))
        return np.clip(y, layer.lo, layer.hi).astype(np.int8)
    # average = sum over the window (a depthwise convolution with ones) >> log2(window)
    c = x.shape[1]
    ones = np.ones((c, 1) + tuple(layer.kernel), dtype=np.int8)
    acc = run_op("Conv", x, ones, None, **_conv_attrs(layer.kernel, layer.stride, layer.pads, c))
    return _requantize(acc, Requant(layer.shift, layer.lo, layer.hi))


def reference(layer, *arrays) -> np.ndarray:
    """Dispatch on the layer type: conv2d / dense (x, weight, bias), residual_add (a, b),
    requantize (x), pool2d (x)."""
    fn = {Conv2d: conv2d, Dense: dense, ResidualAdd: residual_add, RequantizeLayer: requantize,
          Pool2d: pool2d}[type(layer)]
    return fn(layer, *arrays)

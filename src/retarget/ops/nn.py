"""Neural-network ops: Conv, ConvTranspose, pooling, BatchNormalization, LRN.

Each op's `compute` is the readable definition (see registry.py). Conv, MaxPool and
AveragePool also carry a `fast` path (im2col + BLAS, windowed views) that tests check
against the definition.

Integer inputs (used by the int8 quantisation flow): Conv/ConvTranspose accumulate exactly in
int64 and return int32 (ShapeError if a result does not fit, rather than wrapping silently);
MaxPool keeps the input dtype. Float inputs keep their dtype; the definitions accumulate in
float64 so they are at least as accurate as any fast path.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from ..errors import ShapeError
from ..ir.types import TensorType
from . import winograd
from .registry import OpDef, register

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# ---- shared window geometry -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Window:
    """Where a sliding window (conv kernel or pooling window) lands along the spatial axes."""
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def extents(self) -> tuple[int, ...]:
        """Dilated kernel sizes: the span of input one window covers."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))

    def tap_slices(self, offset: tuple[int, ...]) -> tuple[slice, ...]:
        """Slices of the padded input that kernel tap `offset` reads, one element per output."""
        return tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                     for o, d, n, s in zip(offset, self.dilations, self.out, self.strides))

    def padded_needed(self, in_spatial) -> tuple[int, ...]:
        """Per axis, how many padding elements after the input the last window reaches
        (>= pads_end when ceil_mode makes the last window overhang the explicit padding)."""
        return tuple(max(pe, (n - 1) * s + e - i - pb) for n, s, e, i, pb, pe in zip(
            self.out, self.strides, self.extents, in_spatial, self.pads_begin, self.pads_end))


def _spatial(value, n: int, default: int, name: str) -> tuple[int, ...]:
    if value is None:
        return (default,) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        raise ShapeError(f"{name}={list(value)} has {len(value)} entries; "
                         f"the input has {n} spatial axes")
    return value


def window_geometry(in_spatial, kernel, strides, dilations, pads, auto_pad: str,
                    ceil_mode: bool = False) -> Window:
    """Output size and effective pads of a window op (ONNX Conv/MaxPool/AveragePool rules).

    NOTSET uses `pads` (begin..., end...); SAME_* pad so that out = ceil(in / stride), the odd
    element going at the end (UPPER) or the beginning (LOWER); VALID pads nothing. With
    ceil_mode the last partial window is kept unless it would start in the end padding.
    """
    n = len(in_spatial)
    kernel = tuple(int(k) for k in kernel)
    strides = _spatial(strides, n, 1, "strides")
    dilations = _spatial(dilations, n, 1, "dilations")
    if len(kernel) != n:
        raise ShapeError(f"kernel_shape {list(kernel)} has {len(kernel)} entries; "
                         f"the input has {n} spatial axes")
    if min(kernel + strides + dilations, default=1) < 1:
        raise ShapeError(f"kernel {list(kernel)}, strides {list(strides)} and dilations "
                         f"{list(dilations)} must all be >= 1")
    if auto_pad not in AUTO_PADS:
        raise ShapeError(f"auto_pad={auto_pad!r}; expected one of {', '.join(AUTO_PADS)}")
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad == "NOTSET":
        p = _spatial(pads, 2 * n, 0, "pads") if pads is not None else (0,) * (2 * n)
        if min(p, default=0) < 0:
            raise ShapeError(f"negative pads {list(p)} are not supported")
        begin, end = p[:n], p[n:]
        out = []
        for i, e, s, pb, pe in zip(in_spatial, extents, strides, begin, end):
            span = i + pb + pe - e
            if span < 0:
                raise ShapeError(f"window of extent {e} (kernel x dilation) is larger than the "
                                 f"padded input ({i} + {pb} + {pe})")
            o = -(-span // s) + 1 if ceil_mode else span // s + 1
            if ceil_mode and (o - 1) * s >= i + pb:  # last window would start in the end padding
                o -= 1
            out.append(o)
        return Window(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out))
    if auto_pad == "VALID":
        out = []
        for i, e, s in zip(in_spatial, extents, strides):
            if i < e:
                raise ShapeError(f"window of extent {e} is larger than the input ({i}) "
                                 f"with auto_pad=VALID")
            out.append((i - e) // s + 1)
        return Window(kernel, strides, dilations, (0,) * n, (0,) * n, tuple(out))
    out, begin, end = [], [], []
    for i, e, s in zip(in_spatial, extents, strides):
        o = -(-i // s)
        total = max(0, (o - 1) * s + e - i)
        small, big = total // 2, total - total // 2
        out.append(o)
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return Window(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out))


def pad_spatial(x: np.ndarray, begin, end, value) -> np.ndarray:
    """`x` with its trailing len(begin) axes padded by a constant (cheaper than np.pad)."""
    if not any(begin) and not any(end):
        return x
    lead = x.ndim - len(begin)
    shape = x.shape[:lead] + tuple(d + b + e for d, b, e in zip(x.shape[lead:], begin, end))
    out = np.full(shape, value, dtype=x.dtype)
    out[(slice(None),) * lead + tuple(slice(b, b + d) for b, d in zip(begin, x.shape[lead:]))] = x
    return out


def is_int_dtype(dtype) -> bool:
    """True for integer dtypes (the quantised forms of conv-like ops)."""
    return np.issubdtype(np.dtype(dtype), np.integer)


def exact_int32(y: np.ndarray, op: str) -> np.ndarray:
    """An int64 accumulator as int32; a result outside int32 is an error, not a silent wrap."""
    info = np.iinfo(np.int32)
    if y.size and (y.min() < info.min or y.max() > info.max):
        raise ShapeError(f"{op}: integer result [{y.min()}, {y.max()}] does not fit in int32")
    return y.astype(np.int32)


def exact_result(acc: np.ndarray, dtype, op: str) -> np.ndarray:
    """A float64/int64 accumulator as the op's output: the input's float dtype, or int32."""
    return exact_int32(acc, op) if is_int_dtype(dtype) else acc.astype(dtype)


def result_dtype(op: str, *types) -> str:
    """The output dtype of a conv-like op: the float input dtype, or int32 for integer inputs."""
    present = [t for t in types if t is not None]
    kinds = {is_int_dtype(t.dtype) for t in present}
    if len(kinds) > 1:
        raise ShapeError(f"{op} mixes integer and float inputs "
                         f"({', '.join(t.dtype for t in present)})")
    if kinds == {False}:
        floats = {t.dtype for t in present}
        if len(floats) > 1 or "bool" in floats:
            raise ShapeError(f"{op} inputs must share one float dtype, got {sorted(floats)}")
        return present[0].dtype
    return "int32"


# ---- Conv ---------------------------------------------------------------------------------------
CONV_ATTRS = dict(auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                  strides=None)


def conv_window(x_shape, w_shape, b_shape, auto_pad, dilations, group, kernel_shape, pads,
                strides) -> Window:
    """Validate Conv operand shapes and return the window geometry."""
    if len(x_shape) < 3:
        raise ShapeError(f"Conv input must be N x C x spatial..., got shape {list(x_shape)}")
    if len(w_shape) != len(x_shape):
        raise ShapeError(f"Conv weight shape {list(w_shape)} must have the input's rank "
                         f"{len(x_shape)} (M x C/group x kernel...)")
    c, m = x_shape[1], w_shape[0]
    if group < 1 or c % group or m % group:
        raise ShapeError(f"group={group} must divide input channels {c} and output channels {m}")
    if c != w_shape[1] * group:
        raise ShapeError(f"input has {c} channels, weight expects {w_shape[1] * group} "
                         f"(group={group})")
    if kernel_shape is not None and tuple(kernel_shape) != tuple(w_shape[2:]):
        raise ShapeError(f"kernel_shape {list(kernel_shape)} does not match weight spatial "
                         f"shape {list(w_shape[2:])}")
    if b_shape is not None and tuple(b_shape) != (m,):
        raise ShapeError(f"bias shape {list(b_shape)} must be [{m}] (one per output channel)")
    return window_geometry(x_shape[2:], w_shape[2:], strides, dilations, pads, auto_pad)


def _conv_infer(attrs, types, consts):
    x, w = types[0], types[1]
    b = types[2] if len(types) > 2 else None
    win = conv_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    return [TensorType((x.shape[0], w.shape[0]) + win.out, result_dtype("Conv", x, w, b))]


def _conv_macs(attrs, in_types, out_types) -> int:
    w = in_types[1].shape
    return out_types[0].numel * prod(w[1:])


def conv(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """ONNX Conv, by definition: for every kernel tap, add (shifted input) x (weight slice)."""
    win = conv_window(x.shape, w.shape, None if b is None else b.shape, auto_pad, dilations,
                      group, kernel_shape, pads, strides)
    acc = np.int64 if is_int_dtype(x.dtype) else np.float64
    n, c = x.shape[:2]
    m = w.shape[0]
    xg = pad_spatial(x.astype(acc), win.pads_begin, win.pads_end, 0)
    xg = xg.reshape(n, group, c // group, *xg.shape[2:])
    wg = w.astype(acc).reshape(group, m // group, c // group, *win.kernel)
    y = np.zeros((n, group, m // group) + win.out, dtype=acc)
    for tap in np.ndindex(*win.kernel):
        patch = xg[(slice(None),) * 3 + win.tap_slices(tap)]
        y += np.einsum("ngc...,gmc->ngm...", patch, wg[(Ellipsis,) + tap])
    y = y.reshape((n, m) + win.out)
    if b is not None:
        y += b.astype(acc).reshape((m,) + (1,) * len(win.out))
    return exact_result(y, x.dtype, "Conv")


def conv_fast(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """Conv via im2col + one BLAS GEMM per (batch, group); float32 only, else the definition.
    Large 3x3 stride-1 convs go to Winograd F(2x2, 3x3) instead (ops/winograd.py).

    The GEMM is W[M, C*K] @ cols[C*K, P] so the product is already N x M x pixels (NCHW) and
    needs no transpose. cols is filled with one strided copy per kernel tap (a Python loop over
    taps, never over pixels); 1x1 convs skip im2col; depthwise convs skip GEMM entirely.
    """
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group,
                 kernel_shape=kernel_shape, pads=pads, strides=strides)
    if _is_byte(x.dtype) and _is_byte(w.dtype) and (b is None or is_int_dtype(b.dtype)):
        # int8 x int8 on BLAS, exactly: each product is at most 2**14 in magnitude, so a sum of
        # fewer than 2**39 of them (any conv whose C/group * kernel taps fits in memory) is an
        # integer below 2**53, which float64 holds exactly whatever the summation order.
        y = _conv_gemm(x.astype(np.float64), w.astype(np.float64), None, group, attrs)
        y = np.rint(y).astype(np.int64)
        if b is not None:
            y += b.astype(np.int64).reshape((w.shape[0],) + (1,) * (y.ndim - 2))
        return exact_int32(y, "Conv")
    if x.dtype != np.float32 or w.dtype != np.float32 or (b is not None and b.dtype != np.float32):
        return conv(x, w, b, **attrs)
    return _conv_gemm(x, w, b, group, attrs, allow_winograd=True)


def _is_byte(dtype) -> bool:
    return np.dtype(dtype) in (np.dtype(np.int8), np.dtype(np.uint8))


def _conv_gemm(x, w, b, group, attrs, allow_winograd: bool = False):
    """conv_fast's float body, in x's dtype (float32, or float64 for exact integer sums)."""
    win = conv_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    n, c = x.shape[:2]
    m = w.shape[0]
    dt = x.dtype
    if allow_winograd and _winograd_pays(win, group, c, m):
        # Pad the end up to whole 2x2 output tiles when an output size is odd.
        end = tuple(pe + o % 2 for pe, o in zip(win.pads_end, win.out))
        xp = pad_spatial(x, win.pads_begin, end, 0)
        y = winograd.conv3x3_winograd(xp, w, win.out)
        if b is not None:
            y += b.reshape(m, 1, 1)
        return y
    cg, mg, k, p = c // group, m // group, prod(win.kernel), prod(win.out)
    lead = (slice(None),) * 3
    xp = pad_spatial(x, win.pads_begin, win.pads_end, 0)
    xp = xp.reshape(n, group, cg, *xp.shape[2:])
    if cg == 1 and mg == 1:  # depthwise: a weighted sum of shifted inputs, no GEMM
        wd = w.reshape(group, k)
        y = np.zeros((n, group) + win.out, dtype=dt)
        for i, tap in enumerate(np.ndindex(*win.kernel)):
            shape = (1, group) + (1,) * len(win.out)
            y += xp[lead + win.tap_slices(tap)][:, :, 0] * wd[:, i].reshape(shape)
        y = y.reshape((n, m) + win.out)
    else:
        if k == 1:  # 1x1: the (strided) input itself is the column matrix
            cols = np.ascontiguousarray(xp[lead + win.tap_slices((0,) * len(win.out))])
        else:
            cols = np.empty((n, group, cg) + win.kernel + win.out, dtype=dt)
            for tap in np.ndindex(*win.kernel):
                cols[lead + tap] = xp[lead + win.tap_slices(tap)]
        cols = cols.reshape(n, group, cg * k, p)
        y = np.matmul(w.reshape(group, mg, cg * k), cols).reshape((n, m) + win.out)
    if b is not None:
        y += b.reshape((m,) + (1,) * len(win.out))
    return y


def _winograd_pays(win: Window, group: int, c: int, m: int) -> bool:
    """Whether Winograd F(2x2, 3x3) beats im2col + GEMM: 3x3, stride 1, no dilation, no
    groups, and (measured, one BLAS thread) outputs of at least 12x12 and 16+ channels each
    way; below that its transforms cost more than the 5/9 of the GEMM it saves."""
    return (win.kernel == (3, 3) and win.strides == (1, 1) and win.dilations == (1, 1)
            and group == 1 and c >= 16 and m >= 16 and min(win.out) >= 12)


register(OpDef("Conv", conv, _conv_infer, attrs=CONV_ATTRS, macs=_conv_macs, fast=conv_fast,
               num_inputs=(2, 3), doc="ONNX Conv (N-D, groups, dilations, auto_pad)"))


# ---- ConvTranspose ------------------------------------------------------------------------------
CONV_T_ATTRS = dict(auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                    output_padding=None, output_shape=None, pads=None, strides=None)


@dataclass(frozen=True, slots=True)
class TransposedWindow:
    """ConvTranspose geometry: the full scattered output is cropped to [pads_begin, +out)."""
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    out: tuple[int, ...]
    full: tuple[int, ...]  # scatter buffer size (>= pads_begin + out)


def conv_transpose_window(x_shape, w_shape, b_shape, auto_pad, dilations, group, kernel_shape,
                          output_padding, output_shape, pads, strides) -> TransposedWindow:
    """Validate ConvTranspose shapes; output size and crop per the ONNX formulas."""
    if len(x_shape) < 3 or len(w_shape) != len(x_shape):
        raise ShapeError(f"ConvTranspose needs input N x C x spatial... and weight "
                         f"C x M/group x kernel... of the same rank, got {list(x_shape)} "
                         f"and {list(w_shape)}")
    c = x_shape[1]
    if group < 1 or c % group:
        raise ShapeError(f"group={group} must divide input channels {c}")
    if w_shape[0] != c:
        raise ShapeError(f"input has {c} channels, weight expects {w_shape[0]}")
    m = w_shape[1] * group
    if b_shape is not None and tuple(b_shape) != (m,):
        raise ShapeError(f"bias shape {list(b_shape)} must be [{m}]")
    ns = len(x_shape) - 2
    kernel = tuple(w_shape[2:])
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ShapeError(f"kernel_shape {list(kernel_shape)} does not match weight {list(kernel)}")
    strides = _spatial(strides, ns, 1, "strides")
    dilations = _spatial(dilations, ns, 1, "dilations")
    opad = _spatial(output_padding, ns, 0, "output_padding")
    if auto_pad not in AUTO_PADS:
        raise ShapeError(f"auto_pad={auto_pad!r}; expected one of {', '.join(AUTO_PADS)}")
    ins = x_shape[2:]
    full = tuple(s * (i - 1) + op + (k - 1) * d + 1
                 for s, i, op, k, d in zip(strides, ins, opad, kernel, dilations))
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            out = tuple(int(o) for o in output_shape)[-ns:]
        else:
            out = tuple(i * s for i, s in zip(ins, strides))
        total = [f - o for f, o in zip(full, out)]
        if auto_pad == "SAME_UPPER":
            begin = tuple(t // 2 for t in total)
        else:
            begin = tuple(t - t // 2 for t in total)
    elif auto_pad == "VALID":
        out, begin = full, (0,) * ns
    else:
        p = _spatial(pads, 2 * ns, 0, "pads")
        begin = p[:ns]
        out = tuple(f - pb - pe for f, pb, pe in zip(full, p[:ns], p[ns:]))
    if min(begin) < 0 or min(out) < 1:
        raise ShapeError(f"ConvTranspose output {list(out)} with crop offsets {list(begin)} is "
                         f"not realisable from a full output of {list(full)}")
    buf = tuple(max(f, b + o) for f, b, o in zip(full, begin, out))
    return TransposedWindow(kernel, strides, dilations, begin, out, buf)


def _conv_t_infer(attrs, types, consts):
    x, w = types[0], types[1]
    b = types[2] if len(types) > 2 else None
    win = conv_transpose_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    m = w.shape[1] * attrs["group"]
    return [TensorType((x.shape[0], m) + win.out, result_dtype("ConvTranspose", x, w, b))]


def _conv_t_macs(attrs, in_types, out_types) -> int:
    return in_types[0].numel * prod(in_types[1].shape[1:])


def conv_transpose(x, w, b=None, **attrs):
    """ONNX ConvTranspose, by definition: each kernel tap scatters input x weight into a
    strided slice of the full output, which is then cropped by the pads."""
    win = conv_transpose_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    group = attrs["group"]
    acc = np.int64 if is_int_dtype(x.dtype) else np.float64
    n, c = x.shape[:2]
    mg = w.shape[1]
    xg = x.astype(acc).reshape(n, group, c // group, *x.shape[2:])
    wg = w.astype(acc).reshape(group, c // group, mg, *win.kernel)
    buf = np.zeros((n, group, mg) + win.full, dtype=acc)
    for tap in np.ndindex(*win.kernel):
        dst = tuple(slice(o * d, o * d + (i - 1) * s + 1, s) for o, d, i, s in
                    zip(tap, win.dilations, x.shape[2:], win.strides))
        buf[(slice(None),) * 3 + dst] += np.einsum("ngc...,gcm->ngm...", xg,
                                                   wg[(Ellipsis,) + tap])
    crop = tuple(slice(b_, b_ + o) for b_, o in zip(win.pads_begin, win.out))
    y = buf[(slice(None),) * 3 + crop].reshape((n, group * mg) + win.out)
    if b is not None:
        y = y + b.astype(acc).reshape((-1,) + (1,) * len(win.out))
    return exact_result(y, x.dtype, "ConvTranspose")


register(OpDef("ConvTranspose", conv_transpose, _conv_t_infer, attrs=CONV_T_ATTRS,
               macs=_conv_t_macs, num_inputs=(2, 3), doc="ONNX ConvTranspose (N-D)"))

from . import pool  # noqa: E402,F401  (pooling, BatchNormalization, LRN; kept in its own file)

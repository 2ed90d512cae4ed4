"""Tensor ops: shape manipulation, indexing, constants (see registry.py for the conventions).

Ops whose output shape depends on a tensor's value (Reshape's shape, Slice's starts, Range's
limits...) read it from `consts` during shape inference and raise ShapeError when it is
only known at run time: the IR has static shapes.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.types import TensorType
from .common import broadcast_shapes, need_const, same_as_input
from .registry import REQUIRED, OpDef, register

VARIADIC = (1, 2**31 - 1)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [-rank, rank) made non-negative, or ShapeError."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes, rank: int, what: str = "axes") -> list[int]:
    """Each axis made non-negative; duplicates raise ShapeError."""
    out = [normalize_axis(a, rank, what) for a in np.asarray(axes, np.int64).reshape(-1)]
    if len(set(out)) != len(out):
        raise ShapeError(f"{what} {list(map(int, np.asarray(axes).reshape(-1)))} repeat an axis")
    return out


def optional(seq: list, i: int):
    """seq[i], or None when input i is omitted (infer sees only the inputs the node has)."""
    return seq[i] if i < len(seq) else None


def _ints(array) -> list[int]:
    return [int(v) for v in np.asarray(array).reshape(-1)]


def _check_int_input(op: str, t: TensorType, what: str) -> None:
    if t.dtype not in ("int32", "int64"):
        raise ShapeError(f"{op} {what} must be int32 or int64, got {t}")


# ---- Identity, Dropout, Constant ---------------------------------------------------------------
register(OpDef("Identity", lambda x: x, same_as_input))


def _reject_training(ratio, training_mode) -> None:
    # Training-mode dropout is random: retarget compiles inference graphs only. With ratio 0
    # it is the identity, so that one form is accepted.
    if training_mode is not None and bool(training_mode):
        if ratio is None or float(np.asarray(ratio).reshape(())) != 0.0:
            raise UnsupportedOpError("Dropout in training mode (random masking) is not "
                                     "supported; export the model in inference mode")


def _dropout(x, ratio=None, training_mode=None, seed=None):
    _reject_training(0.5 if ratio is None else ratio, training_mode)
    return x, np.ones(x.shape, dtype=bool)


def _dropout_infer(attrs, types, consts):
    if optional(types, 2) is not None:
        if consts[2] is None:
            raise UnsupportedOpError("Dropout with a run-time training_mode input is not "
                                     "supported; retarget compiles inference graphs")
        if optional(types, 1) is None:
            _reject_training(0.5, consts[2])  # ONNX's default ratio
        elif consts[1] is not None:
            _reject_training(consts[1], consts[2])
        elif bool(consts[2]):
            raise UnsupportedOpError("Dropout in training mode with a run-time ratio is not "
                                     "supported")
    return [types[0], TensorType(types[0].shape, "bool")]


register(OpDef("Dropout", _dropout, _dropout_infer, attrs={"seed": None}, num_inputs=(1, 3),
               num_outputs=2, doc="inference: identity; the mask output is all true"))

_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints",
                   "value_string", "value_strings", "sparse_value")


def _constant(**attrs) -> np.ndarray:
    given = [k for k in _CONSTANT_ATTRS if attrs[k] is not None]
    if len(given) != 1:
        raise ShapeError(f"Constant needs exactly one value attribute, got {given or 'none'}")
    k, v = given[0], attrs[given[0]]
    if k in ("value_string", "value_strings"):
        raise UnsupportedOpError("Constant string tensors are not supported (no string dtype)")
    if k == "sparse_value" or not (k != "value" or isinstance(v, np.ndarray)):
        raise UnsupportedOpError(f"Constant {k} of type {type(v).__name__} is not supported")
    if k == "value":
        if v.dtype.kind in "OUS":
            raise UnsupportedOpError("Constant string tensors are not supported (no string dtype)")
        return v
    dtype = np.float32 if k.startswith("value_float") else np.int64
    return np.asarray(v, dtype)


def _constant_infer(attrs, types, consts):
    return [TensorType.of(_constant(**attrs))]


register(OpDef("Constant", _constant, _constant_infer, attrs={k: None for k in _CONSTANT_ATTRS},
               num_inputs=(0, 0)))


def _constant_of_shape_type(shape, value=None) -> tuple[tuple[int, ...], np.ndarray]:
    """(output shape, the one-element fill) without allocating the output."""
    shape = _ints(shape)
    if any(d < 0 for d in shape):
        raise ShapeError(f"ConstantOfShape shape {shape} has a negative dimension")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if fill.size != 1:
        raise ShapeError(f"ConstantOfShape value must hold one element, got shape {fill.shape}")
    return shape, fill


def _constant_of_shape(shape, value=None):
    shape, fill = _constant_of_shape_type(shape, value)
    return np.full(shape, fill.reshape(()), dtype=fill.dtype)


def _constant_of_shape_infer(attrs, types, consts):
    shape, fill = _constant_of_shape_type(need_const(consts, 0, "ConstantOfShape's shape input"),
                                          attrs["value"])
    return [TensorType(shape, fill.dtype)]


register(OpDef("ConstantOfShape", _constant_of_shape, _constant_of_shape_infer,
               attrs={"value": None}))


# ---- shape queries -------------------------------------------------------------------------
def _shape_slice(rank: int, start: int, end) -> slice:
    # ONNX clamps start/end into [0, rank] after adding rank to negatives: Python slicing agrees.
    return slice(start, rank if end is None else end)


def _shape(x, start, end):
    return np.asarray(x.shape[_shape_slice(x.ndim, start, end)], dtype=np.int64).reshape(-1)


def _shape_infer(attrs, types, consts):
    dims = types[0].shape[_shape_slice(types[0].rank, attrs["start"], attrs["end"])]
    return [TensorType((len(dims),), "int64")]


register(OpDef("Shape", _shape, _shape_infer, attrs={"start": 0, "end": None}))
register(OpDef("Size", lambda x: np.asarray(x.size, np.int64),
               lambda attrs, types, consts: [TensorType((), "int64")]))


# ---- reshaping ----------------------------------------------------------------------------
def reshape_target(in_shape: tuple[int, ...], shape, allowzero: int) -> tuple[int, ...]:
    """The output shape of Reshape: 0 copies the input dim (unless allowzero), -1 is inferred."""
    shape = _ints(shape)
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ShapeError(f"Reshape shape {shape}: 0 at position {i} has no input dim "
                                 "to copy")
            d = in_shape[i]
        elif d < -1:
            raise ShapeError(f"Reshape shape {shape} has invalid dimension {d}")
        out.append(d)
    numel = int(np.prod(in_shape, dtype=np.int64))
    if out.count(-1) > 1:
        raise ShapeError(f"Reshape shape {shape} has more than one -1")
    if -1 in out:
        if allowzero and 0 in out:
            raise ShapeError(f"Reshape shape {shape}: -1 together with 0 under allowzero")
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or numel % known:
            raise ShapeError(f"cannot reshape {in_shape} ({numel} elements) to {shape}")
        out[out.index(-1)] = numel // known
    if int(np.prod(out, dtype=np.int64)) != numel:
        raise ShapeError(f"cannot reshape {in_shape} ({numel} elements) to {shape}")
    return tuple(out)


def _reshape(x, shape, allowzero):
    return x.reshape(reshape_target(x.shape, shape, allowzero))


def _reshape_infer(attrs, types, consts):
    _check_int_input("Reshape", types[1], "shape")
    shape = need_const(consts, 1, "Reshape's shape input")
    return [TensorType(reshape_target(types[0].shape, shape, attrs["allowzero"]), types[0].dtype)]


register(OpDef("Reshape", _reshape, _reshape_infer, attrs={"allowzero": 0}, num_inputs=(2, 2)))


def _flatten_shape(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise ShapeError(f"Flatten axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))


def _flatten_infer(attrs, types, consts):
    return [TensorType(_flatten_shape(types[0].shape, attrs["axis"]), types[0].dtype)]


register(OpDef("Flatten", lambda x, axis: x.reshape(_flatten_shape(x.shape, axis)), _flatten_infer,
               attrs={"axis": 1}))


def _perm(rank: int, perm) -> list[int]:
    if perm is None:
        return list(range(rank))[::-1]
    p = [normalize_axis(a, rank, "perm entry") for a in perm]
    if sorted(p) != list(range(rank)):
        raise ShapeError(f"Transpose perm {list(perm)} is not a permutation of {rank} axes")
    return p


register(OpDef("Transpose", lambda x, perm: np.transpose(x, _perm(x.ndim, perm)),
               lambda attrs, types, consts: [TensorType(
                   tuple(types[0].shape[i] for i in _perm(types[0].rank, attrs["perm"])),
                   types[0].dtype)],
               attrs={"perm": None}))


def _squeeze_shape(shape: tuple[int, ...], axes) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = normalize_axes(axes, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise ShapeError(f"Squeeze axis {a} of shape {shape} has size {shape[a]}, not 1")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _squeeze_infer(attrs, types, consts):
    axes = None if optional(types, 1) is None else need_const(consts, 1, "Squeeze's axes input")
    return [TensorType(_squeeze_shape(types[0].shape, axes), types[0].dtype)]


register(OpDef("Squeeze", lambda x, axes=None: x.reshape(_squeeze_shape(x.shape, axes)),
               _squeeze_infer, num_inputs=(1, 2)))


def _unsqueeze_shape(shape: tuple[int, ...], axes) -> tuple[int, ...]:
    rank = len(shape) + len(_ints(axes))
    axes = normalize_axes(axes, rank)
    it = iter(shape)
    return tuple(1 if i in axes else next(it) for i in range(rank))


def _unsqueeze_infer(attrs, types, consts):
    axes = need_const(consts, 1, "Unsqueeze's axes input")
    return [TensorType(_unsqueeze_shape(types[0].shape, axes), types[0].dtype)]


register(OpDef("Unsqueeze", lambda x, axes: x.reshape(_unsqueeze_shape(x.shape, axes)),
               _unsqueeze_infer, num_inputs=(2, 2)))


def _concat_infer(attrs, types, consts):
    first = types[0]
    axis = normalize_axis(attrs["axis"], first.rank)
    for t in types[1:]:
        if t.dtype != first.dtype or t.rank != first.rank or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise ShapeError(f"Concat on axis {axis}: {t} does not match {first}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return [TensorType(tuple(shape), first.dtype)]


register(OpDef("Concat", lambda *xs, axis: np.concatenate(xs, axis=axis), _concat_infer,
               attrs={"axis": REQUIRED}, num_inputs=VARIADIC))


def _split_sizes(dim: int, split, num_outputs) -> list[int]:
    if split is not None:
        sizes = _ints(split)
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise ShapeError(f"Split sizes {sizes} do not add up to the axis length {dim}")
        return sizes
    if num_outputs is None:
        raise ShapeError("Split needs a split input or the num_outputs attribute")
    # ONNX: equal chunks of ceil(dim / n); the last one takes what is left.
    chunk = -(-dim // num_outputs)
    sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(num_outputs)]
    if sum(sizes) != dim or sizes[-1] == 0 and dim >= num_outputs:
        raise ShapeError(f"Split of length {dim} into {num_outputs} outputs is not possible")
    return sizes


def _split(x, split=None, *, axis, num_outputs):
    axis = normalize_axis(axis, x.ndim)
    bounds = np.cumsum(_split_sizes(x.shape[axis], split, num_outputs))[:-1]
    return tuple(np.split(x, bounds, axis=axis))


def _split_infer(attrs, types, consts):
    x = types[0]
    axis = normalize_axis(attrs["axis"], x.rank)
    split = None if optional(types, 1) is None else need_const(consts, 1, "Split's split input")
    out = []
    for s in _split_sizes(x.shape[axis], split, attrs["num_outputs"]):
        shape = list(x.shape)
        shape[axis] = s
        out.append(TensorType(tuple(shape), x.dtype))
    return out


register(OpDef("Split", _split, _split_infer, attrs={"axis": 0, "num_outputs": None},
               num_inputs=(1, 2), num_outputs=VARIADIC[1],
               doc="split into the sizes given, or into num_outputs parts (the upgrade sets it)"))


# ---- indexing -----------------------------------------------------------------------------
def _check_indices(indices: np.ndarray, dim: int, op: str) -> np.ndarray:
    """Indices in [-dim, dim) made non-negative; IndexError (named by the executor) otherwise."""
    indices = np.asarray(indices).astype(np.int64)
    bad = (indices < -dim) | (indices >= dim)
    if np.any(bad):
        raise IndexError(f"{op} index {int(indices[bad].reshape(-1)[0])} is out of range "
                         f"for an axis of length {dim}")
    return np.where(indices < 0, indices + dim, indices)


def _gather(x, indices, axis):
    axis = normalize_axis(axis, x.ndim)
    return np.take(x, _check_indices(indices, x.shape[axis], "Gather"), axis=axis)


def _gather_infer(attrs, types, consts):
    x, idx = types
    _check_int_input("Gather", idx, "indices")
    axis = normalize_axis(attrs["axis"], x.rank)
    return [TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)]


register(OpDef("Gather", _gather, _gather_infer, attrs={"axis": 0}, num_inputs=(2, 2)))


def _gather_elements(x, indices, axis):
    axis = normalize_axis(axis, x.ndim)
    return np.take_along_axis(x, _check_indices(indices, x.shape[axis], "GatherElements"), axis)


def _gather_elements_infer(attrs, types, consts):
    x, idx = types
    _check_int_input("GatherElements", idx, "indices")
    normalize_axis(attrs["axis"], x.rank)
    if idx.rank != x.rank:
        raise ShapeError(f"GatherElements indices {idx} must have the data's rank {x.rank}")
    return [TensorType(idx.shape, x.dtype)]


register(OpDef("GatherElements", _gather_elements, _gather_elements_infer, attrs={"axis": 0},
               num_inputs=(2, 2)))


def _gather_nd(x, indices, batch_dims):
    idx = np.asarray(indices, np.int64)
    k = idx.shape[-1]
    b = batch_dims
    if k > x.ndim - b:
        raise ShapeError(f"GatherND index depth {k} exceeds data rank {x.ndim} - batch_dims {b}")
    batch = x.shape[:b]
    out_shape = idx.shape[:-1] + x.shape[b + k:]
    xs = x.reshape((-1,) + x.shape[b:])
    ids = idx.reshape((int(np.prod(batch, dtype=np.int64)), -1, k))
    out = []
    for bi in range(ids.shape[0]):
        for row in ids[bi]:
            pos = tuple(int(_check_indices(i, x.shape[b + j], "GatherND"))
                        for j, i in enumerate(row))
            out.append(xs[bi][pos])
    return np.asarray(out, x.dtype).reshape(out_shape)


def _gather_nd_infer(attrs, types, consts):
    x, idx = types
    b, k = attrs["batch_dims"], idx.shape[-1]
    if k > x.rank - b:
        raise ShapeError(f"GatherND index depth {k} exceeds data rank {x.rank} - batch_dims {b}")
    return [TensorType(idx.shape[:-1] + x.shape[b + k:], x.dtype)]


register(OpDef("GatherND", _gather_nd, _gather_nd_infer, attrs={"batch_dims": 0},
               num_inputs=(2, 2)))


def _slices(shape: tuple[int, ...], starts, ends, axes, steps) -> tuple[slice, ...]:
    starts, ends = _ints(starts), _ints(ends)
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else normalize_axes(axes, rank)
    steps = [1] * len(starts) if steps is None else _ints(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"Slice starts {starts}, ends {ends}, axes {axes}, steps {steps} "
                         "differ in length")
    out = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise ShapeError(f"Slice step on axis {a} is 0")
        # ONNX's clamping rules (negative = from the end, then clamp; for negative steps an end
        # below -dim means "through index 0") are exactly Python's slice.indices.
        r = range(*slice(s, e, st).indices(shape[a]))
        # range() holds the exact index set; as a slice, a stop of -1 ("through index 0")
        # would read as "the last element", so spell it None.
        out[a] = slice(r.start, r.stop if r.stop >= 0 else None, r.step) if len(r) else slice(0, 0)
    return tuple(out)


def _slice(x, starts, ends, axes=None, steps=None):
    return x[_slices(x.shape, starts, ends, axes, steps)]


def _slice_infer(attrs, types, consts):
    args = [need_const(consts, i, f"Slice's {n} input") if optional(types, i) is not None else None
            for i, n in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps"))]
    sl = _slices(types[0].shape, *args)
    shape = tuple(len(range(*s.indices(d))) for s, d in zip(sl, types[0].shape))
    return [TensorType(shape, types[0].dtype)]


register(OpDef("Slice", _slice, _slice_infer, num_inputs=(3, 5)))


# ---- padding, broadcasting, repetition -------------------------------------------------------
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad_widths(rank: int, pads, axes) -> list[tuple[int, int]]:
    pads = _ints(pads)
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank)
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"Pad pads {pads} must hold 2 values per padded axis ({len(axes)} axes)")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + len(axes)])
    return widths


def _pad(x, pads, constant_value=None, axes=None, *, mode):
    if mode not in _PAD_MODES:
        raise UnsupportedOpError(f"Pad mode {mode!r}; supported: {sorted(_PAD_MODES)}")
    widths = _pad_widths(x.ndim, pads, axes)
    # Negative pads crop: pad by the positive parts, then slice the negative ones away.
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        no_value = constant_value is None or constant_value.size == 0
        fill = 0 if no_value else constant_value.reshape(())
        y = np.pad(x, grow, mode="constant", constant_values=fill)
    else:
        for (b, e), d in zip(grow, x.shape):
            if (b or e) and d == 0:
                raise ShapeError(f"Pad mode {mode!r} cannot pad an empty axis")
        y = np.pad(x, grow, mode=_PAD_MODES[mode])
    crop = tuple(slice(-min(b, 0), y.shape[i] + min(e, 0)) for i, (b, e) in enumerate(widths))
    return y[crop]


def _pad_infer(attrs, types, consts):
    x = types[0]
    axes = None if optional(types, 3) is None else need_const(consts, 3, "Pad's axes input")
    widths = _pad_widths(x.rank, need_const(consts, 1, "Pad's pads input"), axes)
    shape = tuple(d + b + e for d, (b, e) in zip(x.shape, widths))
    if any(d < 0 for d in shape):
        raise ShapeError(f"Pad pads {widths} crop {x.shape} below zero")
    return [TensorType(shape, x.dtype)]


register(OpDef("Pad", _pad, _pad_infer, attrs={"mode": "constant"}, num_inputs=(2, 4)))


def _expand(x, shape):
    return np.broadcast_to(x, broadcast_shapes(x.shape, tuple(_ints(shape)))).copy()


register(OpDef("Expand", _expand,
               lambda attrs, types, consts: [TensorType(
                   broadcast_shapes(types[0].shape,
                                    tuple(_ints(need_const(consts, 1, "Expand's shape input")))),
                   types[0].dtype)],
               num_inputs=(2, 2)))


def _tile_reps(rank: int, repeats) -> list[int]:
    reps = _ints(repeats)
    if len(reps) != rank or any(r < 0 for r in reps):
        raise ShapeError(f"Tile repeats {reps} must be {rank} non-negative values")
    return reps


register(OpDef("Tile", lambda x, repeats: np.tile(x, _tile_reps(x.ndim, repeats)),
               lambda attrs, types, consts: [TensorType(tuple(
                   d * r for d, r in zip(types[0].shape, _tile_reps(
                       types[0].rank, need_const(consts, 1, "Tile's repeats input")))),
                   types[0].dtype)],
               num_inputs=(2, 2)))


def _range_length(start, limit, delta) -> int:
    for name, v in (("start", start), ("limit", limit), ("delta", delta)):
        if v.size != 1:
            raise ShapeError(f"Range {name} must be a scalar, got shape {v.shape}")
    s, l, d = (v.reshape(()) for v in (start, limit, delta))
    if d == 0:
        raise ShapeError("Range delta is 0")
    n = np.ceil((l - s) / d)
    if not np.isfinite(n):
        raise ShapeError(f"Range from {s} to {l} by {d} has no finite length")
    return max(int(n), 0)


def _range(start, limit, delta):
    n = _range_length(start, limit, delta)
    s, d = start.reshape(()), delta.reshape(())
    # ONNX defines element i as start + i * delta (not a running sum that drifts).
    return (s + np.arange(n, dtype=start.dtype) * d).astype(start.dtype)


def _range_infer(attrs, types, consts):
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ShapeError(f"Range inputs must share a dtype, got {', '.join(map(str, types))}")
    vals = [need_const(consts, i, f"Range's {n} input")
            for i, n in enumerate(("start", "limit", "delta"))]
    return [TensorType((_range_length(*vals),), types[0].dtype)]


register(OpDef("Range", _range, _range_infer, num_inputs=(3, 3)))


def _trilu(x, k=None, *, upper):
    k = 0 if k is None else int(np.asarray(k).reshape(()))
    return np.triu(x, k) if upper else np.tril(x, k)


register(OpDef("Trilu", _trilu, same_as_input, attrs={"upper": 1}, num_inputs=(1, 2)))

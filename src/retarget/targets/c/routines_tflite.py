"""The `c` target's int8 mode for TFLite's arithmetic (the int8-tflite number format,
ops/quantized_tflite.py): each op of an imported int8 TFLite model that the int8 routines of
routines_int8.py do not run becomes a call of a routine of targets/c/kernels/int8_tflite.c,
bit-exact with the reference (and so with LiteRT's reference kernels).

    tflite_support(node)     # None when a routine of int8_tflite.c runs the node, else why not
    plan_tflite(region, taken)   # a call (aot.lower.Fused) for each such node not in `taken`

The convolutions and dense layers themselves run on routines_int8.py's int8 x int8 routines
once zero_points.py has folded their input zero point into the bias; what is left is one call
per node:

    RequantizeQ31   rt_requantize_q31    clamp(MultiplyByQuantizedMultiplier(x, m, shift) + z),
                                         per tensor or per channel, double or single rounding
    QAddQ31, QMulQ31  rt_qbinary_q31     TFLite's int8 ADD / MUL, broadcasting (rank <= 6)
    AveragePoolInt  rt_avgpool_s8        in-bounds sum / count, rounded half away, clamped
    MeanInt8        rt_mean_s8           MEAN over H, W of an NHWC map
    SoftmaxInt8     rt_softmax_s8        gemmlowp's fixed-point exp and reciprocal, rows <= 511
    LookupInt8      rt_lookup_s8         table[x + 128] (LOGISTIC)
    HardSwishInt8   rt_hard_swish_s8     16-bit fixed point
    QuantizeAffine  rt_quantize_affine_s8  float32 -> int8, round half away
    Cast int8 -> int32, Sub of an int32 constant: rt_widen_s8, rt_sub_s32 (QUANTIZE int8 -> int8)
    Pad of int8 with any constant value, any axes (rank <= 6): rt_pad_value_s8
    Slice of int8 (STRIDED_SLICE; rank <= 6, any steps): rt_slice_s8

As in routines_int8.py, each call carries a signature kernel (its tensors, no statements) and
`check_tflite` checks the routine's integer arguments against the tensors' sizes before the C
is printed.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import GraphError
from ...ir.graph import Node, Value
from ...ir.types import TensorType
from ...ops.registry import resolve_attrs
from ...ops.tensor import _slices        # the Slice op's own index rules (ONNX clamping)
from ..aot.lower import Fused
from ..aot.program import Call
from ..base import Region
from .call_check import call_statement, check_call
from .packing import AsInt32
from .routines_int8 import _call, _const_int, _dtype, _pool_geometry, _t

TFLITE_FILES = ("int8_tflite.c",)
MAX_RANK = 6              # rt_pad_value_s8, rt_slice_s8, rt_qbinary_q31: their loop nests
MAX_SOFTMAX_ROW = 511     # rt_softmax_s8: its row buffer, and RoundingDivideByPOT's exponent
                          # 35 - clz(sum of exps) <= 31 needs the sum (<= D * 2**19) < 2**28
TFLITE_OPS = frozenset({"RequantizeQ31", "QAddQ31", "QMulQ31", "AveragePoolInt", "MeanInt8",
                        "SoftmaxInt8", "LookupInt8", "HardSwishInt8", "QuantizeAffine"})


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def is_tflite_node(node: Node) -> bool:
    """Whether `node` is one this module's routines are meant for (tflite_support says
    whether they run it)."""
    if node.op in TFLITE_OPS:
        return True
    if not node.inputs or not node.outputs:
        return False
    x, y = node.inputs[0], node.outputs[0]
    if node.op in ("Pad", "Slice"):
        return _dtype(x) == "int8"
    if node.op == "Cast":
        return (_dtype(x), _dtype(y)) == ("int8", "int32")
    return node.op == "Sub" and _dtype(x) == "int32" and _dtype(y) == "int32"


def _shift_problem(what: str, shifts, lo: int, hi: int) -> str | None:
    s = np.asarray(shifts)
    if s.size and (s.min() < lo or s.max() > hi):
        return f"{what} {s.min()}..{s.max()} outside [{lo}, {hi}]"
    return None


def tflite_support(node: Node) -> str | None:
    """None when a routine of int8_tflite.c runs `node`, else why not."""
    op, ins, y = node.op, node.inputs, node.outputs[0]
    a = resolve_attrs(node)
    if op == "RequantizeQ31":
        if _dtype(ins[0]) != "int32" or a["dtype"] != "int8":
            return "only int32 -> int8 requantisation"
        if len(ins) > 1 and not (_const_int(ins[1]) and _const_int(ins[2])):
            return "only constant per-channel multipliers and shifts"
        return None
    if op in ("QAddQ31", "QMulQ31"):
        if _dtype(ins[0]) != "int8" or _dtype(ins[1]) != "int8" or a["dtype"] != "int8":
            return "only int8 operands and result"
        if len(y.type.shape) > MAX_RANK:
            return f"only rank <= {MAX_RANK}"
        if op == "QAddQ31":
            return _shift_problem("shifts", [a["a_shift"], a["b_shift"], a["shift"]], -31, 0)
        return None
    if op == "AveragePoolInt":
        geo = _pool_geometry(node)
        return geo if isinstance(geo, str) else None
    if op == "SoftmaxInt8":
        d = ins[0].type.shape[-1] if ins[0].type.shape else 1
        if d > MAX_SOFTMAX_ROW:
            return (f"rows of {d} > {MAX_SOFTMAX_ROW} elements (the sum of exponentials may "
                    f"need a division by more than 2**31)")
        return _shift_problem("input_left_shift", a["input_left_shift"], 0, 31)
    if op == "HardSwishInt8":
        return _shift_problem("output_exponent", a["output_exponent"], -31, 0) or \
            _shift_problem("reluish_exponent", a["reluish_exponent"], -31, 16)
    if op == "LookupInt8":
        return None if ins[1].is_const else "only a constant table"
    if op == "QuantizeAffine":
        ok = _dtype(ins[0]) == "float32" and a["dtype"] == "int8"
        return None if ok else "only float32 -> int8"
    if op == "MeanInt8":
        return None
    if op in ("Cast", "Sub", "Pad", "Slice"):
        return _movement_problem(node)
    return f"no int8-tflite routine for {op}"


def _movement_problem(node: Node) -> str | None:
    """Cast int8 -> int32; Sub of a constant int32 scalar; Pad / Slice of int8 (rank <= 6)."""
    x, y = node.inputs[0], node.outputs[0]
    if node.op == "Cast":
        return None
    if node.op == "Sub":
        c = node.inputs[1]
        ok = c.is_const and np.asarray(c.const).size == 1 and x.type.shape == y.type.shape
        return None if ok else "only the subtraction of a constant int32 scalar"
    if len(x.type.shape) > MAX_RANK:
        return f"only rank <= {MAX_RANK}"
    if node.op == "Slice":
        ok = all(v is None or v.is_const for v in node.inputs[1:])
        return None if ok else "only constant starts, ends, axes and steps"
    value = node.input(2)
    pads = node.inputs[1]
    if resolve_attrs(node).get("mode", "constant") != "constant" or node.input(3) is not None \
            or pads is None or not pads.is_const or (value is not None and not value.is_const):
        return "only constant-mode padding by constant pads and value over all axes"
    if np.asarray(pads.const).min() < 0:
        return "only non-negative pads (no cropping)"
    return None


# ---- planning ----------------------------------------------------------------------------------
def _channel_view(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(outer, C, inner) of a tensor seen along `axis`."""
    axis %= max(len(shape), 1)
    return _numel(shape[:axis]), (shape[axis] if shape else 1), _numel(shape[axis + 1:])


def _padded6(values: Sequence[int], fill: int) -> tuple[int, ...]:
    """`values` padded in front to MAX_RANK entries."""
    return (fill,) * (MAX_RANK - len(values)) + tuple(int(v) for v in values)


def _requantize_call(node: Node) -> Fused:
    a = resolve_attrs(node)
    x, y = node.inputs[0], node.outputs[0]
    inputs, relayouts, pos = [_t(x)], [], []
    for v in (node.input(1), node.input(2)):
        if v is None:
            pos.append(-1)
            continue
        if _dtype(v) != "int32":
            cast = AsInt32(f"{v.name}__i32", v.name)
            relayouts.append(cast)
            v = Value(cast.name, TensorType(v.type.shape, "int32"))
        pos.append(len(inputs))
        inputs.append(_t(v))
    per_tensor = len(node.inputs) == 1
    ints = _channel_view(x.type.shape, a["axis"] if not per_tensor else 0) + (
        a["multiplier"] if per_tensor else 0, a["shift"] if per_tensor else 0,
        a["zero_point"], a["lo"], a["hi"], int(a["rounding"] == "single"))
    return _call((node,), inputs, _t(y), "rt_requantize_q31", ints,
                 (0, pos[0], pos[1], len(inputs)), relayouts)


def _broadcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides reading a tensor of `shape` broadcast to `out` (NumPy's rules: shapes
    aligned on the right, 0 along an axis of extent 1 that `out` repeats), padded to
    MAX_RANK."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides = [0 if d == 1 and o != 1 else _numel(shape[k + 1:])
               for k, (d, o) in enumerate(zip(shape, out))]
    return _padded6(strides, 0)


def _binary_call(node: Node) -> Fused:
    a = resolve_attrs(node)
    x, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    inputs = [_t(x)] + ([] if b is x else [_t(b)])
    out = tuple(y.type.shape)
    is_add = node.op == "QAddQ31"
    scales = ((a["a_multiplier"], a["a_shift"], a["b_multiplier"], a["b_shift"]) if is_add
              else (0, 0, 0, 0))
    ints = (int(not is_add),) + _padded6(out, 1) + _broadcast_strides(x.type.shape, out) + \
        _broadcast_strides(b.type.shape, out) + \
        (a["a_zero_point"], scales[0], scales[1], a["b_zero_point"], scales[2], scales[3],
         a["multiplier"], a["shift"], a["zero_point"], a["lo"], a["hi"])
    return _call((node,), inputs, _t(y), "rt_qbinary_q31", ints,
                 (0, len(inputs) - 1, len(inputs)))


def _pad_call(node: Node) -> Fused:
    x, y = node.inputs[0], node.outputs[0]
    rank = len(x.type.shape)
    pads = [int(p) for p in np.asarray(node.inputs[1].const).reshape(-1)]
    value = node.input(2)
    fill = 0 if value is None else int(np.asarray(value.const).reshape(-1)[0])
    ints = (fill,) + _padded6(x.type.shape, 1) + _padded6(pads[:rank], 0) + \
        _padded6(y.type.shape, 1)
    return _call((node,), [_t(x)], _t(y), "rt_pad_value_s8", ints)


def _slice_call(node: Node) -> Fused:
    """The slice as a strided view: a base offset and one element stride per output axis."""
    x, y = node.inputs[0], node.outputs[0]
    consts = [None if v is None else np.asarray(v.const) for v in node.inputs[1:5]]
    consts += [None] * (4 - len(consts))
    shape = x.type.shape
    strides = [_numel(shape[k + 1:]) for k in range(len(shape))]
    cuts = _slices(shape, *consts)
    base = sum((s.start or 0) * st for s, st in zip(cuts, strides))
    steps = [(s.step or 1) * st for s, st in zip(cuts, strides)]
    ints = (base,) + _padded6(y.type.shape, 1) + _padded6(steps, 0)
    return _call((node,), [_t(x)], _t(y), "rt_slice_s8", ints)


def _single_call(node: Node) -> Fused:
    op, a = node.op, resolve_attrs(node)
    x, y = node.inputs[0], node.outputs[0]
    n = y.type.numel
    if op == "RequantizeQ31":
        return _requantize_call(node)
    if op in ("QAddQ31", "QMulQ31"):
        return _binary_call(node)
    if op == "AveragePoolInt":
        return _call((node,), [_t(x)], _t(y), "rt_avgpool_s8",
                     _pool_geometry(node) + (a["lo"], a["hi"]))
    if op == "MeanInt8":
        nn, h, w, c = x.type.shape
        return _call((node,), [_t(x)], _t(y), "rt_mean_s8",
                     (nn, h * w, c, a["input_zero_point"], a["multiplier"], a["shift"],
                      a["zero_point"]))
    if op == "SoftmaxInt8":
        d = x.type.shape[-1] if x.type.shape else 1
        return _call((node,), [_t(x)], _t(y), "rt_softmax_s8",
                     (n // d, d, a["input_multiplier"], a["input_left_shift"], a["diff_min"]))
    if op == "LookupInt8":
        return _call((node,), [_t(x), _t(node.inputs[1])], _t(y), "rt_lookup_s8", (n,))
    if op == "HardSwishInt8":
        return _call((node,), [_t(x)], _t(y), "rt_hard_swish_s8",
                     (n, a["input_zero_point"], a["output_zero_point"], a["output_multiplier"],
                      a["output_exponent"], a["reluish_multiplier"], a["reluish_exponent"]))
    if op == "QuantizeAffine":
        return _call((node,), [_t(x)], _t(y), "rt_quantize_affine_s8", (n, a["zero_point"]),
                     floats=(float(np.float32(a["scale"])),))
    if op == "Cast":
        return _call((node,), [_t(x)], _t(y), "rt_widen_s8", (n,))
    if op == "Sub":
        c = int(np.asarray(node.inputs[1].const).reshape(-1)[0])
        return _call((node,), [_t(x)], _t(y), "rt_sub_s32", (n, c))
    if op == "Pad":
        return _pad_call(node)
    if op == "Slice":
        return _slice_call(node)
    raise GraphError(f"no int8-tflite routine for {op} {node.name!r}")


def plan_tflite(region: Region, taken: set[str] = frozenset()) -> list[Fused]:
    """A call for every node of the region that int8_tflite.c runs (those not in `taken`)."""
    return [_single_call(n) for n in region.nodes if n.name not in taken and
            is_tflite_node(n) and tflite_support(n) is None]


# ---- checking and printing a call ----------------------------------------------------------------
def _same(dtype_in: str, dtype_out: str, n: int) -> list[tuple[int, str, int]]:
    """An element-wise routine's two operands of n elements."""
    return [(0, dtype_in, n), (1, dtype_out, n)]


def _sizes_of(r) -> list[tuple[int, str, int]]:
    """(operand position, dtype, element count) every operand of routine `r` must have."""
    i = r.ints
    if r.name == "rt_requantize_q31":
        outer, c, inner = i[:3]
        return [(0, "int32", outer * c * inner), (1, "int32", c), (2, "int32", c),
                (3, "int8", outer * c * inner)]
    if r.name == "rt_qbinary_q31":
        o, ta, tb = i[1:7], i[7:13], i[13:19]
        return [(0, "int8", None, _view_span(0, o, ta)),
                (1, "int8", None, _view_span(0, o, tb)), (2, "int8", _numel(o))]
    if r.name == "rt_avgpool_s8":
        nc, h, w, *_, oh, ow, _lo, _hi = i
        return [(0, "int8", nc * h * w), (1, "int8", nc * oh * ow)]
    if r.name == "rt_mean_s8":
        n, hw, c = i[:3]
        return [(0, "int8", n * hw * c), (1, "int8", n * c)]
    if r.name == "rt_softmax_s8":
        if i[1] > MAX_SOFTMAX_ROW:
            raise ValueError(f"rows of {i[1]} > {MAX_SOFTMAX_ROW}")
        return _same("int8", "int8", i[0] * i[1])
    if r.name == "rt_lookup_s8":
        return [(0, "int8", i[0]), (1, "int8", 256), (2, "int8", i[0])]
    if r.name == "rt_hard_swish_s8":
        return _same("int8", "int8", i[0])
    if r.name == "rt_quantize_affine_s8":
        return _same("float32", "int8", i[0])
    if r.name == "rt_widen_s8":
        return _same("int8", "int32", i[0])
    if r.name == "rt_sub_s32":
        return _same("int32", "int32", i[0])
    if r.name == "rt_pad_value_s8":
        d, p, o = i[1:7], i[7:13], i[13:19]
        if any(pk + dk > ok for pk, dk, ok in zip(p, d, o)) or min(p) < 0:
            raise ValueError("the input does not fit the padded output")
        return [(0, "int8", _numel(d)), (1, "int8", _numel(o))]
    if r.name == "rt_slice_s8":
        base, o, t = i[0], i[1:7], i[7:13]
        return [(0, "int8", None, _view_span(base, o, t)), (1, "int8", _numel(o))]
    raise ValueError(f"unknown routine {r.name!r}")


def _view_span(base: int, dims, strides) -> tuple[int, int]:
    """The lowest and highest element offsets a strided view reads."""
    lo = base + sum((d - 1) * t for d, t in zip(dims, strides) if t < 0)
    hi = base + sum((d - 1) * t for d, t in zip(dims, strides) if t > 0)
    return lo, hi


# routine name -> (pointer operands, integer arguments, float arguments)
TFLITE_ROUTINES: dict[str, tuple[int, int, int]] = {
    "rt_requantize_q31": (4, 9, 0), "rt_qbinary_q31": (3, 30, 0),
    "rt_avgpool_s8": (2, 13, 0), "rt_mean_s8": (2, 7, 0), "rt_softmax_s8": (2, 5, 0),
    "rt_lookup_s8": (3, 1, 0), "rt_hard_swish_s8": (2, 7, 0),
    "rt_quantize_affine_s8": (2, 2, 1), "rt_widen_s8": (2, 1, 0), "rt_sub_s32": (2, 2, 0),
    "rt_pad_value_s8": (2, 19, 0), "rt_slice_s8": (2, 13, 0)}


def check_tflite(call: Call) -> None:
    """GraphError unless the call's routine reads and writes exactly its kernel's tensors
    with the sizes its integer arguments say."""
    check_call(call, TFLITE_ROUTINES, _sizes_of, positive_floats=True)


def tflite_call(call: Call, pointers: Sequence[str]) -> str:
    """The C statement of an int8_tflite.c routine call."""
    check_tflite(call)
    return call_statement(call, pointers)


__all__ = ["TFLITE_FILES", "TFLITE_OPS", "TFLITE_ROUTINES", "check_tflite", "is_tflite_node",
           "plan_tflite", "tflite_call", "tflite_support"]

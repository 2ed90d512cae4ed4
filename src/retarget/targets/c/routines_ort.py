"""The `c` target's int8 mode for onnxruntime's arithmetic (the int8-ort number format,
ops/quantized_ort.py): the output stages of a QDQ model imported with
`load_quantized(..., scales="onnxruntime")` become calls of targets/c/kernels/int8_ort.c,
bit-exact with the reference (and so with onnxruntime wherever the reference is).

    ort_support(node)         # None when a routine of int8_ort.c runs the node, else why not
    plan_ort(region, taken)   # a call (aot.lower.Fused) for each such node not in `taken`

By the time these run, unsigned_shift.py has turned the graph's u8 values into s8 and
zero_points.py has folded the convolutions' input zero points into their biases, so the
convolutions and dense layers are int8 x int8 layers of routines_int8.py; what is left is:

    RequantizeOrt         rt_requantize_ort       float32(acc) * scale, rint (half even), + z,
                                                  clip; per tensor or per channel (any axis)
    QLinearAddOrt         rt_qlinear_add_ort      two fmaf, rint, saturate; equal shapes or a
                                                  single-element operand; the u8 kernel on
                                                  shifted s8 values (kernel="uint8") or s8
    GlobalAveragePoolOrt  rt_global_avgpool_ort   int32 sum - z_x * HW, then as RequantizeOrt

Each call carries a signature kernel (its tensors) and `check_ort` checks the routine's
integer arguments against the tensors' sizes before the C is printed, as routines_tflite.py
does for TFLite's routines.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...ir.graph import Node
from ...ops.quantized_ort import fma32
from ...ops.registry import resolve_attrs
from ..aot.lower import Fused
from ..aot.program import Call
from ..base import Region
from .routines_int8 import _call, _dtype, _t
from .call_check import call_statement, check_call
from .routines_tflite import _channel_view, _numel

ORT_FILES = ("int8_ort.c",)
ORT_OPS = frozenset({"RequantizeOrt", "QLinearAddOrt", "GlobalAveragePoolOrt"})
U8_OFFSET = 128           # a u8 value q is the s8 value q - 128 (unsigned_shift.py)
# rt_global_avgpool_ort sums in int32: |x - z| <= 255 per element
MAX_POOL_COUNT = (2 ** 31 - 1) // 255


def is_ort_node(node: Node) -> bool:
    return node.op in ORT_OPS


def ort_support(node: Node) -> str | None:
    """None when a routine of int8_ort.c runs `node`, else why not."""
    a = resolve_attrs(node)
    ins = node.inputs
    if a["dtype"] != "int8":
        return (f"only int8 results ({a['dtype']}: a u8 value the c target could not move to "
                f"s8, targets/c/unsigned_shift.py)")
    if node.op == "RequantizeOrt":
        if _dtype(ins[0]) != "int32":
            return "only int32 -> int8 requantisation"
        if len(ins) > 1 and not (ins[1].is_const and _dtype(ins[1]) == "float32"):
            return "only constant float32 per-channel scales"
        return None
    if node.op == "QLinearAddOrt":
        if _dtype(ins[0]) != "int8" or _dtype(ins[1]) != "int8":
            return "only int8 operands"
        if ins[0].type.shape != ins[1].type.shape and 1 not in (ins[0].type.numel,
                                                                ins[1].type.numel):
            return "only equal shapes or a single-element operand"
        return None
    if _dtype(ins[0]) != "int8":
        return "only an int8 input"
    count = _numel(ins[0].type.shape[2:])
    return None if count <= MAX_POOL_COUNT else \
        f"{count} elements per channel > {MAX_POOL_COUNT} (the int32 sum could overflow)"


# ---- planning ----------------------------------------------------------------------------------
def _requantize_call(node: Node) -> Fused:
    a = resolve_attrs(node)
    x, y = node.inputs[0], node.outputs[0]
    per_channel = len(node.inputs) > 1 and node.inputs[1] is not None
    inputs = [_t(x)] + ([_t(node.inputs[1])] if per_channel else [])
    view = _channel_view(x.type.shape, a["axis"] if per_channel else 0)
    return _call((node,), inputs, _t(y), "rt_requantize_ort",
                 view + (a["zero_point"], a["lo"], a["hi"]),
                 (0, 1 if per_channel else -1, len(inputs)),
                 floats=(float(np.float32(0.0 if per_channel else a["scale"])),))


def _add_call(node: Node) -> Fused:
    """QLinearAddOrt in the kernel's own space (u8 kernel: values and zero points + 128): the
    fixed part c and the ratios computed here with the reference's own float32 steps."""
    a = resolve_attrs(node)
    x, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    offset = U8_OFFSET if a["kernel"] == "uint8" else 0
    info = np.iinfo("uint8" if offset else "int8")
    ra = np.float32(a["a_scale"]) / np.float32(a["scale"])
    rb = np.float32(a["b_scale"]) / np.float32(a["scale"])
    za, zb, zy = (np.float32(a[k] + offset) for k in ("a_zero_point", "b_zero_point",
                                                      "zero_point"))
    fixed = np.float32(zy - fma32(ra, za, rb * zb))
    # the operand folded into the constant part first: a single-element one, else b
    a_first = x.type.numel == 1
    (outer, r_outer), (inner, r_inner) = ((b, rb), (x, ra)) if a_first else ((x, ra), (b, rb))
    inputs = [_t(outer)] + ([] if inner is outer else [_t(inner)])
    strides = (int(outer.type.numel != 1 or y.type.numel == 1),
               int(inner.type.numel != 1 or y.type.numel == 1))
    return _call((node,), inputs, _t(y), "rt_qlinear_add_ort",
                 (y.type.numel,) + strides + (offset, int(info.min), int(info.max)),
                 (0, len(inputs) - 1, len(inputs)),
                 floats=(float(r_outer), float(r_inner), float(fixed)))


def _pool_call(node: Node) -> Fused:
    a = resolve_attrs(node)
    x, y = node.inputs[0], node.outputs[0]
    planes, count = _numel(x.type.shape[:2]), _numel(x.type.shape[2:])
    return _call((node,), [_t(x)], _t(y), "rt_global_avgpool_ort",
                 (planes, count, a["input_zero_point"], a["zero_point"]),
                 floats=(float(np.float32(a["scale"])),))


PLANNERS = {"RequantizeOrt": _requantize_call, "QLinearAddOrt": _add_call,
            "GlobalAveragePoolOrt": _pool_call}


def plan_ort(region: Region, taken: set[str] = frozenset()) -> list[Fused]:
    """A call for every node of the region that int8_ort.c runs (those not in `taken`)."""
    return [PLANNERS[n.op](n) for n in region.nodes if n.name not in taken and
            is_ort_node(n) and ort_support(n) is None]


# ---- checking and printing a call ----------------------------------------------------------------
# routine name -> (pointer operands, integer arguments, float arguments)
ORT_ROUTINES: dict[str, tuple[int, int, int]] = {
    "rt_requantize_ort": (3, 6, 1), "rt_qlinear_add_ort": (3, 6, 3),
    "rt_global_avgpool_ort": (2, 4, 1)}


def _sizes_of(r) -> list[tuple[int, str, int]]:
    """(operand position, dtype, element count) every operand of routine `r` must have."""
    i = r.ints
    if r.name == "rt_requantize_ort":
        outer, c, inner, zp, lo, hi = i
        if not -128 <= lo <= hi <= 127:
            raise ValueError(f"clip range [{lo}, {hi}] outside int8")
        return [(0, "int32", outer * c * inner), (1, "float32", c),
                (2, "int8", outer * c * inner)]
    if r.name == "rt_qlinear_add_ort":
        n, so, si, offset, lo, hi = i
        if so not in (0, 1) or si not in (0, 1):
            raise ValueError(f"strides {so}, {si} must be 0 or 1")
        if (offset, lo, hi) not in ((0, -128, 127), (U8_OFFSET, 0, 255)):
            raise ValueError(f"offset {offset} and range [{lo}, {hi}]: neither the s8 kernel "
                             f"nor the u8 one on shifted values")
        return [(0, "int8", n if so else 1), (1, "int8", n if si else 1), (2, "int8", n)]
    planes, count = i[:2]
    if count > MAX_POOL_COUNT:
        raise ValueError(f"{count} elements per channel > {MAX_POOL_COUNT}")
    return [(0, "int8", planes * count), (1, "int8", planes)]


def check_ort(call: Call) -> None:
    """GraphError unless the call's routine reads and writes exactly its kernel's tensors
    with the sizes its integer arguments say, and its float arguments are finite (the
    constant part of QLinearAdd can be negative)."""
    check_call(call, ORT_ROUTINES, _sizes_of, positive_floats=False)


def ort_call(call: Call, pointers: Sequence[str]) -> str:
    """The C statement of an int8_ort.c routine call."""
    check_ort(call)
    return call_statement(call, pointers)


__all__ = ["ORT_FILES", "ORT_OPS", "ORT_ROUTINES", "check_ort", "is_ort_node", "ort_call",
           "ort_support", "plan_ort"]

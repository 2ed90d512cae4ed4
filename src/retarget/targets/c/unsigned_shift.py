"""The `c` target's rewrite of an int8-ort graph's uint8 values into int8 (CTarget.prepare,
before zero_points.py): generated C computes int8, not uint8, so every u8 value q becomes the
s8 value q - 128 and each node reading or writing one is changed to compute the same thing on
the shifted values, exactly:

    QuantizeLinear(x, s, z)          -> zero point z - 128 (clip(rint(x/s) + z, 0, 255) - 128
                                        = clip(rint(x/s) + z - 128, -128, 127))
    DequantizeLinear(q, s, z)        -> zero point z - 128 ((q - z) = (q' - (z - 128)))
    RequantizeOrt(zero_point z, [lo, hi], uint8)   -> z - 128, [lo - 128, hi - 128], int8
    GlobalAveragePoolOrt(z_x, z_y, uint8)          -> z_x - 128, z_y - 128, int8
    QLinearAddOrt(z_a, z_b, z_y, uint8)            -> each zero point - 128, int8, kernel uint8
                                        (the op's own form of "the u8 kernel on x + 128")
    Cast(q, int32) [- z]             -> Cast(q', int32) - (z - 128)
    Conv / Gemm reading q [through a zero Pad]     -> reading Cast(q', int32) - (-128) [padded
                                        with 0]: the form zero_points.py folds into the bias
    MaxPool, Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Identity   unchanged (the shift
                                        is monotonic and moves no element)
    Pad(q, value v)                  -> value v - 128

Every result is the same integer (or float) the u8 graph gives, shifted by -128 where it is a
u8 value; the graph's inputs and outputs are untouched. A graph with a u8 value this table
does not cover (another op, a u8 graph input or output, an add mixing u8 and s8) is returned
unchanged: its u8 nodes then stay on the CPU, with the reason in the placement report.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node, Value, constant
from ...ir.types import TensorType
from ...ops.registry import resolve_attrs

SHIFT = 128
MOVEMENT = frozenset({"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                      "Identity"})
ZERO_POINT_ATTRS = {"RequantizeOrt": ("zero_point", "lo", "hi"),
                    "GlobalAveragePoolOrt": ("zero_point",),
                    "QLinearAddOrt": ("a_zero_point", "b_zero_point", "zero_point")}


def _u8(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.dtype == "uint8"


def _scalar(v: Value | None) -> int | None:
    if v is None or not v.is_const or np.asarray(v.const).size != 1:
        return None
    return int(np.asarray(v.const).reshape(-1)[0])


def _covered(g: Graph) -> bool:
    """Whether every node touching a u8 value is one the rewrite knows."""
    if any(_u8(v) for v in list(g.inputs) + list(g.outputs)):
        return False
    for n in g.nodes:
        ins, outs = [_u8(v) for v in n.inputs if v is not None], [_u8(v) for v in n.outputs]
        if not any(ins + outs):
            continue
        if n.op == "QLinearAddOrt":
            if not (all(ins) and all(outs)) or resolve_attrs(n)["kernel"] not in (None, "uint8"):
                return False
        elif n.op == "Pad":
            if _scalar(n.input(2)) is None and n.input(2) is not None:
                return False
        elif n.op in ("QuantizeLinear", "DequantizeLinear"):
            if _scalar(n.input(2)) is None:
                return False
        elif n.op not in ZERO_POINT_ATTRS and n.op not in MOVEMENT and \
                n.op not in ("Cast", "Conv", "Gemm"):
            return False
    return True


def shift_uint8(graph: Graph) -> Graph:
    """A copy of `graph` with its u8 values as s8 (the module docstring), or `graph` itself
    when it has none or one the rewrite does not cover. Values keep their shapes; the new
    ones are typed here (the compiler types the whole graph again after CTarget.prepare)."""
    if not any(_u8(v) for n in graph.nodes for v in n.outputs) or not _covered(graph):
        return graph
    g = graph.copy()
    consumers = g.consumers()
    widened: set[Value] = set()         # zero Pads of a layer's input, now padding int32
    nodes: list[Node] = []
    for n in g.nodes:
        x = n.inputs[0] if n.inputs else None
        if n.op in ("QuantizeLinear", "DequantizeLinear") and _u8(n.input(2)):
            z = _scalar(n.input(2))
            n.inputs = n.inputs[:2] + [constant(g.unique_name(f"{n.name}.zero_point_s8"),
                                                np.int8(z - SHIFT))]
        elif n.op in ZERO_POINT_ATTRS and any(_u8(v) for v in n.inputs + n.outputs):
            a = resolve_attrs(n)
            if n.op == "GlobalAveragePoolOrt" and _u8(x):
                n.attrs["input_zero_point"] = a["input_zero_point"] - SHIFT
            if _u8(n.outputs[0]):
                for k in ZERO_POINT_ATTRS[n.op]:
                    n.attrs[k] = a[k] - SHIFT
                n.attrs["dtype"] = "int8"
            if n.op == "QLinearAddOrt":
                n.attrs["kernel"] = "uint8"
        elif n.op == "Pad" and _u8(x) and _feeds_layer(n, consumers):
            # the explicit-padding pass's zero Pad before a layer: it pads the widened value
            nodes += _widened_input(g, n)
            n.inputs = n.inputs[:2] + ([None, n.inputs[3]] if n.input(3) is not None else [])
            n.outputs[0].type = TensorType(n.outputs[0].type.shape, "int32")
            widened.add(n.outputs[0])
        elif n.op == "Pad" and _u8(x):
            value = _scalar(n.input(2)) or 0
            n.inputs = n.inputs[:2] + [constant(g.unique_name(f"{n.name}.value_s8"),
                                                np.int8(value - SHIFT))] + n.inputs[3:]
        elif n.op == "Cast" and _u8(x):
            nodes += _widened(g, n, consumers)
            continue
        elif n.op in ("Conv", "Gemm") and _u8(x) and x not in widened:
            nodes += _widened_input(g, n)
        nodes.append(n)
    g.nodes = nodes
    for v in g.values():
        if _u8(v) and not v.is_const:
            v.type = TensorType(v.type.shape, "int8")
    return g


def _feeds_layer(pad: Node, consumers) -> bool:
    """A zero Pad whose output only Conv / Gemm read (the explicit-padding pass's)."""
    readers = consumers.get(pad.outputs[0], [])
    return bool(readers) and all(r.op in ("Conv", "Gemm") for r in readers) and \
        not _scalar(pad.input(2))


def _widened(g: Graph, cast: Node, consumers) -> list[Node]:
    """Cast(q, int32) [- z] on the shifted q: Cast(q') - (z - 128)."""
    readers = consumers.get(cast.outputs[0], [])
    sub = readers[0] if len(readers) == 1 and readers[0].op == "Sub" else None
    z = _scalar(sub.inputs[1]) if sub is not None and sub.inputs[0] is cast.outputs[0] \
        else None
    if z is not None:
        sub.inputs = [sub.inputs[0], constant(g.unique_name(f"{sub.name}.shifted"),
                                              np.int32(z - SHIFT))]
        return [cast]
    out = cast.outputs[0]
    mid = Value(g.unique_name(f"{out.name}.s8"), TensorType(out.type.shape, "int32"))
    cast.outputs = [mid]
    return [cast, Node("Sub", g.unique_name(f"{cast.name}/unshift"),
                       [mid, constant(g.unique_name(f"{cast.name}.minus_128"),
                                      np.int32(-SHIFT))], [out])]


def _widened_input(g: Graph, reader: Node) -> list[Node]:
    """Cast(q', int32) - (-128) as `reader`'s first input (its u8 q read as int32)."""
    q = reader.inputs[0]
    wide = Value(g.unique_name(f"{q.name}_i32"), TensorType(q.type.shape, "int32"))
    cast = Node("Cast", g.unique_name(f"{reader.name}/int32"), [q], [wide], {"to": 6})
    reader.inputs = [wide] + reader.inputs[1:]
    return _widened(g, cast, {})


__all__ = ["shift_uint8"]

"""The `c` target's own rewrite (CTarget.prepare) of convolutions and dense layers whose int8
input carries a zero point, as an int8 TFLite model imports them (frontend/tflite.py):

    Conv(Cast(x, int32) - z, w, b)            ->  Conv(x, w, b - z * sum(w[k]))
    Conv(Pad(Cast(x, int32) - z, 0), w, b)    ->  Conv(Pad(x, value z), w, b - z * sum(w[k]))

(and the same for Gemm). sum((x - z) * w) = sum(x * w) - z * sum(w) exactly, and a padded
element of value z is 0 once offset, so the int32 results are the same, bit for bit; the
convolution is then an int8 x int8 one, which the int8 routines (routines_int8.py) run on
their packed-weight micro-kernels instead of leaving an int32 convolution on the CPU. The Pad
that the explicit-padding pass put on the offset input becomes a Pad of the int8 input with
the zero point as its value.

A layer is left as it is where the rewrite would not be exact or cheap: weights that are not
a constant int8 tensor, a zero point outside int8, a convolution that pads implicitly (the
naive mode runs no explicit-padding pass: its pads would add zeros, not z), a new bias outside
int32. The Cast / Sub / Pad nodes the rewrite bypasses are removed when nothing else reads
them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.graph import Graph, Node, Value, constant
from ...ops.registry import resolve_attrs

_INT32 = np.iinfo(np.int32)


@dataclass(frozen=True, slots=True)
class _OffsetInput:
    """What a layer's int32 input is made of: the int8 source, its zero point, the nodes
    computing the offset (producer first) and the Pad of the offset input, if any."""
    source: Value
    zero_point: int
    chain: tuple[Node, ...]
    pad: Node | None


def _dtype(v: Value | None) -> str | None:
    return None if v is None or v.type is None else v.type.dtype


def _scalar_int(v: Value | None) -> int | None:
    if v is None or not v.is_const:
        return None
    a = np.asarray(v.const)
    return int(a.reshape(-1)[0]) if a.size == 1 and a.dtype.kind in "iu" else None


def _zero_pad(node: Node) -> bool:
    """A constant-mode Pad with constant pads, adding zeros, over all axes."""
    a = resolve_attrs(node)
    value = node.input(2)
    return (a.get("mode", "constant") == "constant" and node.inputs[1] is not None and
            node.inputs[1].is_const and node.input(3) is None and
            (value is None or (value.is_const and not np.asarray(value.const).any())))


def _offset_input(x: Value, producers: dict[Value, Node]) -> _OffsetInput | None:
    """x = [Pad](Cast(s, int32) [- z]) with s int8, or None."""
    node = producers.get(x)
    pad = None
    if node is not None and node.op == "Pad" and _zero_pad(node):
        pad, node = node, producers.get(node.inputs[0])
    zero_point, chain = 0, ()
    if node is not None and node.op == "Sub":
        zero_point = _scalar_int(node.inputs[1])
        if zero_point is None or not -128 <= zero_point <= 127:
            return None
        chain, node = (node,), producers.get(node.inputs[0])
    if node is None or node.op != "Cast" or _dtype(node.inputs[0]) != "int8" or \
            _dtype(node.outputs[0]) != "int32":
        return None
    return _OffsetInput(node.inputs[0], zero_point, (node,) + chain, pad)


def _weight_sums(layer: Node) -> np.ndarray | None:
    """sum(w[k]) per output channel k (int64), or None when the layer is not an int8 Conv /
    Gemm the rewrite applies to."""
    w = layer.inputs[1]
    if w is None or not w.is_const or np.asarray(w.const).dtype != np.int8:
        return None
    a = resolve_attrs(layer)
    data = np.asarray(w.const).astype(np.int64)
    if layer.op == "Conv":
        if any(a.get("pads") or ()) or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return None
        return data.reshape(data.shape[0], -1).sum(axis=1)
    if layer.op == "Gemm" and not a["transA"] and float(a["alpha"]) == 1.0 and \
            float(a["beta"]) == 1.0 and data.ndim == 2:
        return data.sum(axis=1 if a["transB"] else 0)
    return None


def _folded_bias(layer: Node, zero_point: int, sums: np.ndarray) -> np.ndarray | None:
    """b - z * sum(w[k]) in the bias's shape (int32), or None when it leaves int32."""
    b = layer.input(2)
    if b is not None and not (b.is_const and np.asarray(b.const).dtype.kind == "i"):
        return None
    old = np.zeros(sums.shape, np.int64) if b is None else np.asarray(b.const).astype(np.int64)
    if old.size != sums.size:
        return None
    new = old - zero_point * sums.reshape(old.shape)
    if new.min(initial=0) < _INT32.min or new.max(initial=0) > _INT32.max:
        return None
    return new.astype(np.int32)


def fold_input_zero_points(graph: Graph) -> Graph:
    """A copy of `graph` with every matching layer rewritten as the module docstring says
    (`graph` itself when none matches)."""
    g = graph.copy()
    producers = g.producers()
    changed: list[_OffsetInput] = []
    added: list[tuple[Node, Node]] = []            # (new Pad, the layer it feeds)
    for layer in g.nodes:
        if layer.op not in ("Conv", "Gemm") or _dtype(layer.inputs[0]) != "int32" or \
                _dtype(layer.outputs[0]) != "int32":
            continue
        found = _offset_input(layer.inputs[0], producers)
        sums = None if found is None else _weight_sums(layer)
        bias = None if sums is None else _folded_bias(layer, found.zero_point, sums)
        if bias is None:
            continue
        x = found.source
        if found.pad is not None:
            x = Value(g.unique_name(f"{found.source.name}.padded"))
            pad = Node("Pad", g.unique_name(f"{found.pad.name}.int8"),
                       [found.source, found.pad.inputs[1],
                        constant(g.unique_name(f"{found.pad.name}.zero_point"),
                                 np.int8(found.zero_point))], [x], {"mode": "constant"})
            added.append((pad, layer))
        bias_value = layer.input(2)
        if found.zero_point or bias_value is not None:
            bias_value = constant(g.unique_name(f"{layer.name}.bias_zp"), bias)
        layer.inputs = [x, layer.inputs[1], bias_value]
        changed.append(found)
    if not changed:
        return graph
    for pad, layer in added:
        g.nodes.insert(g.nodes.index(layer), pad)
    _drop_unread(g, [n for f in changed for n in ((f.pad,) if f.pad else ()) + f.chain[::-1]])
    return g


def _drop_unread(g: Graph, candidates: list[Node]) -> None:
    """Remove the `candidates` (readers before producers) whose outputs nothing reads."""
    for node in candidates:
        readers = g.consumers()
        if node in g.nodes and not any(readers.get(v) or v in g.outputs for v in node.outputs):
            g.nodes.remove(node)


__all__ = ["fold_input_zero_points"]

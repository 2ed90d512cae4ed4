"""Remove the layout transposes an NHWC import wraps around every NCHW op, where they cancel.

Two rewrites, to a fixpoint:
- Transpose(p2) of Transpose(p1) is one Transpose by the composed permutation, or nothing when
  that is the identity (a convolution's NCHW -> NHWC output feeding the next one's NHWC ->
  NCHW input);
- an element-wise node whose non-constant inputs all come from Transposes by the same
  permutation, read by nothing else, and whose constant inputs are scalars, runs before the
  transpose instead (so a residual Add between two convolutions stays in NCHW and the
  transposes around it cancel with the convolutions').
A graph output keeps its value (and name) and its layout: only the nodes in between change.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, Value
from .dce import eliminate_dead_code_inplace

# Ops that act on each element independently of its position (their scalar parameters
# broadcast), so they commute with any permutation of the axes. Not Cast: moving a transpose
# past a widening cast (int8 -> int32, before a convolution) would only move more bytes.
ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid", "HardSwish",
               "Identity", "QAddQ31", "QMulQ31", "RequantizeQ31", "Requantize",
               "DequantizeLinear", "QuantizeAffine")


def _perm(node: Node) -> tuple[int, ...] | None:
    p = node.attrs.get("perm")
    return None if p is None else tuple(int(i) for i in p)


def _cancel_pairs(graph: Graph) -> bool:
    producer = graph.producers()
    outputs = {id(v) for v in graph.outputs}
    changed = False
    for node in graph.nodes:
        if node.op != "Transpose" or _perm(node) is None:
            continue
        first = producer.get(node.inputs[0])
        if first is None or first.op != "Transpose" or _perm(first) is None:
            continue
        p1, p2 = _perm(first), _perm(node)
        composed = tuple(p1[j] for j in p2)
        src, dst = first.inputs[0], node.outputs[0]
        if composed == tuple(range(len(composed))) and id(dst) not in outputs:
            graph.replace_all_uses(dst, src)
        else:
            node.inputs = [src]
            node.attrs["perm"] = list(composed)
            if composed == tuple(range(len(composed))):
                node.op, node.attrs = "Identity", {}
        changed = True
    return changed


def _sink_one(graph: Graph) -> bool:
    producer = graph.producers()
    consumers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    for i, node in enumerate(graph.nodes):
        if node.op not in ELEMENTWISE or len(node.outputs) != 1:
            continue
        moved, perm = [], None
        for v in node.inputs:
            if v is None:
                continue
            if v.is_const:
                if v.const.size != 1:
                    break
                continue
            t = producer.get(v)
            if (t is None or t.op != "Transpose" or _perm(t) is None or id(v) in outputs
                    or len(consumers.get(v, [])) != 1 or perm not in (None, _perm(t))):
                break
            perm = _perm(t)
            moved.append(v)
        else:
            if not moved:
                continue
            node.inputs = [producer[v].inputs[0] if v in moved else v for v in node.inputs]
            y = node.outputs[0]
            inner = Value(graph.unique_name(f"{y.name}/pre_transpose"))
            node.outputs = [inner]
            graph.nodes.insert(i + 1, Node("Transpose", graph.unique_name(f"{node.name}/perm"),
                                           [inner], [y], {"perm": list(perm)}))
            return True
    return False


def cancel_transposes(graph: Graph) -> Graph:
    """A copy of `graph` with inverse Transpose pairs removed and transposes moved past
    element-wise ops where that lets them cancel."""
    g = graph.copy()
    changed = True
    while changed:
        changed = _cancel_pairs(g)
        eliminate_dead_code_inplace(g)
        if not changed:
            changed = _sink_one(g)
    return g


__all__ = ["ELEMENTWISE", "cancel_transposes"]

"""Readable text form of a Graph, one line per node:

    %y: float32[1,64,56,56] = Conv(%x, %w, %b) {strides=[2,2], pads=[3,3,3,3]}  # conv1

Constants are listed once in a header by name and type, never with their data, so printing a
ResNet stays a page long.
"""
from __future__ import annotations

import numpy as np

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # annotations only: graph.py prints itself with this module
    from .graph import Graph, Node, Value

# Arrays in attributes up to this many elements are printed in full; larger ones are summarised.
_SMALL_ARRAY = 8


def format_value(v: Value | None) -> str:
    """`%name` for a value, `_` for an omitted optional input."""
    return "_" if v is None else f"%{v.name}"


def format_typed(v: Value) -> str:
    return f"%{v.name}: {v.type if v.type is not None else '?'}"


def format_attr(value) -> str:
    """An attribute value in a compact, unambiguous form (arrays by shape unless tiny)."""
    if isinstance(value, np.ndarray):
        if value.size <= _SMALL_ARRAY:
            return f"{value.dtype.name}{list(value.shape)}({value.reshape(-1).tolist()})"
        return f"{value.dtype.name}{list(value.shape)}(...)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_attr(x) for x in value) + "]"
    return str(value)


def format_node(node: Node) -> str:
    outs = ", ".join(format_typed(v) for v in node.outputs)
    args = ", ".join(format_value(v) for v in node.inputs)
    line = f"{outs} = {node.op}({args})"
    if node.attrs:
        line += " {" + ", ".join(f"{k}={format_attr(node.attrs[k])}" for k in sorted(node.attrs)) + "}"
    return f"{line}  # {node.name}"


def format_graph(graph: Graph) -> str:
    """The whole graph as text: header with inputs, constants, then nodes, then outputs."""
    lines = [f"graph {graph.name}({', '.join(format_typed(v) for v in graph.inputs)}) {{"]
    consts = graph.constants()
    if consts:
        total = sum(v.const.nbytes for v in consts)
        lines.append(f"  // {len(consts)} constants, {total} bytes")
        for v in consts:
            lines.append(f"  const {format_typed(v)}")
    for n in graph.nodes:
        lines.append("  " + format_node(n))
    lines.append(f"  return {', '.join(format_value(v) for v in graph.outputs)}")
    lines.append("}")
    return "\n".join(lines)

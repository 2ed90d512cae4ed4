"""explicit_padding: a padded Conv -> Pad (zeros) followed by the same Conv without padding.

Why: a code generator that writes a convolution as loops reads its input through a bounds
test at every tap when the conv pads (`x[ih, iw]` or 0). That test sits in the innermost loop,
stops the C compiler from vectorising it, and makes the read impossible to buffer as one
rectangular copy (loopnest/buffering.py refuses such loads). Padding once into a new tensor
costs one pass over the input; every tap after it is a plain affine read.

The Conv keeps its name and output value; the Pad is named "<conv>.pad" and its output
"<input>.padded". auto_pad (SAME_UPPER/SAME_LOWER) is resolved to explicit pads with the
same rules the reference uses (ops/nn.py window_geometry), so the result is unchanged.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, Value, constant
from ..ops.nn import conv_window
from ..ops.registry import resolve_attrs
from .infer_shapes import infer_shapes


def explicit_padding(graph: Graph) -> Graph:
    """A copy of `graph` in which every typed Conv that pads reads an explicitly padded input."""
    g = graph.copy()
    nodes: list[Node] = []
    changed = False
    for n in g.nodes:
        pads = _conv_pads(n)
        if pads is None:
            nodes.append(n)
            continue
        x = n.inputs[0]
        rank = x.type.rank
        begin, end = pads
        onnx_pads = [0, 0, *begin, 0, 0, *end]     # all axes' begins, then all axes' ends
        padded = Value(g.unique_name(f"{x.name}.padded"))
        pad = Node("Pad", g.unique_name(f"{n.name}.pad"),
                   [x, constant(g.unique_name(f"{n.name}.pads"),
                                np.array(onnx_pads, dtype=np.int64))], [padded],
                   {"mode": "constant"})
        n.inputs = [padded] + list(n.inputs[1:])
        n.attrs = {**n.attrs, "pads": [0] * (2 * (rank - 2)), "auto_pad": "NOTSET"}
        nodes += [pad, n]
        changed = True
    if not changed:
        return g
    g.nodes = nodes
    return infer_shapes(g)


def _conv_pads(n: Node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The (begin, end) pads of a Conv whose input and weight are typed, None when it does
    not pad (or is not a Conv)."""
    if n.op != "Conv" or n.inputs[0].type is None or n.inputs[1].type is None:
        return None
    b = n.input(2)
    win = conv_window(n.inputs[0].type.shape, n.inputs[1].type.shape,
                      None if b is None or b.type is None else b.type.shape, **resolve_attrs(n))
    if not any(win.pads_begin) and not any(win.pads_end):
        return None
    return win.pads_begin, win.pads_end


__all__ = ["explicit_padding"]

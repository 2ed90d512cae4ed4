"""Shape propagation: fill in every Value's TensorType from the graph inputs and constants."""
from __future__ import annotations

from ..errors import RetargetError, ShapeError, UnsupportedOpError, node_context
from ..ir.graph import Graph
from ..ops.registry import check_arity, get_op, resolve_attrs


def infer_shapes(graph: Graph) -> Graph:
    """Return a copy of `graph` with every value typed. Raises ShapeError naming the node."""
    g = graph.copy()
    for v in g.inputs:
        if v.type is None:
            raise ShapeError(f"graph input {v.name!r} has no shape; give one when importing")
    for node in g.nodes:
        opdef = get_op(node.op, node)
        check_arity(node)
        attrs = resolve_attrs(node)
        types, consts = [], []
        for v in node.inputs:
            if v is not None and v.type is None:
                raise ShapeError(f"{node_context(node)}: input {v.name!r} has no type yet")
            types.append(None if v is None else v.type)
            consts.append(None if v is None else v.const)
        try:
            out_types = opdef.infer(attrs, types, consts)
        except RetargetError as e:
            # An unsupported feature stays an UnsupportedOpError (callers set those aside);
            # everything else the shape rule rejects is a ShapeError.
            kind = UnsupportedOpError if isinstance(e, UnsupportedOpError) else ShapeError
            raise kind(f"{node_context(node)} with inputs "
                       f"({', '.join(map(str, types))}): {e}") from None
        except (ValueError, TypeError, IndexError) as e:
            raise ShapeError(f"{node_context(node)} with inputs "
                             f"({', '.join(map(str, types))}): {e}") from None
        for v, t in zip(node.outputs, out_types):
            v.type = t
    return g

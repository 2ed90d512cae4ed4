"""The graph verifier: structural and type invariants every pass must preserve.

`verify(graph)` is cheap enough to run between passes. It raises GraphError naming the node,
its op and the value involved:
- every value is defined exactly once (a graph input, a constant, or one node output),
  and defined before it is used (nodes are in topological order; a cycle is reported as one);
- value names and node names are unique;
- graph outputs are defined;
- each node's op is known and its input/output counts are within the op's arity;
- stored types agree with what the op table infers from the node's inputs
  (only where both are known, so it also runs on a freshly imported, untyped graph).
"""
from __future__ import annotations

from ..errors import GraphError, RetargetError, node_context
from ..ir.graph import Graph, Node, Value
from ..ops.registry import OPS, check_arity, resolve_attrs


def _where(context: str) -> str:
    return f" ({context})" if context else ""


def verify(graph: Graph, *, check_types: bool = True, context: str = "") -> None:
    """Raise GraphError at the first broken invariant; return None when the graph is well formed.

    `context` (for example "after fold_constants") is appended to messages to say which pass
    broke the graph."""
    where = _where(context)
    _check_unique_names(graph, where)

    defined: set[int] = set()
    for v in graph.inputs:
        if v.is_const:
            raise GraphError(f"graph input {v.name!r} is also a constant{where}")
        if id(v) in defined:
            raise GraphError(f"graph input {v.name!r} is listed twice{where}")
        defined.add(id(v))
    for v in graph.constants():
        defined.add(id(v))

    producer: dict[int, Node] = {}
    for n in graph.nodes:
        for v in n.outputs:
            if v is None:
                raise GraphError(f"{node_context(n)}: has an omitted (None) output{where}")
            if v.is_const:
                raise GraphError(f"{node_context(n)}: output {v.name!r} is also a constant{where}")
            if id(v) in producer:
                raise GraphError(f"{node_context(n)}: output {v.name!r} is already defined by "
                                 f"{node_context(producer[id(v)])}{where}")
            producer[id(v)] = n
    for v in graph.inputs:
        if id(v) in producer:
            raise GraphError(f"graph input {v.name!r} is also an output of "
                             f"{node_context(producer[id(v)])}{where}")

    seen_nodes: set[int] = set()
    for n in graph.nodes:
        if id(n) in seen_nodes:
            raise GraphError(f"{node_context(n)}: appears twice in the node list{where}")
        seen_nodes.add(id(n))
        for i, v in enumerate(n.inputs):
            if v is None or id(v) in defined:
                continue
            if id(v) in producer:
                _raise_order_or_cycle(graph, n, v, producer[id(v)], where)
            raise GraphError(f"{node_context(n)}: input {i} {v.name!r} is not defined "
                             f"(no node, graph input or constant produces it){where}")
        for v in n.outputs:
            defined.add(id(v))
        _check_node(n, where, check_types)

    for v in graph.outputs:
        if v is None or id(v) not in defined:
            name = "None" if v is None else repr(v.name)
            raise GraphError(f"graph output {name} is not defined by any node, "
                             f"graph input or constant{where}")


def _check_unique_names(graph: Graph, where: str) -> None:
    names: dict[str, Value] = {}
    for v in graph.values():
        other = names.setdefault(v.name, v)
        if other is not v:
            raise GraphError(f"two different values are both named {v.name!r}{where}")
    node_names: set[str] = set()
    for n in graph.nodes:
        if n.name in node_names:
            raise GraphError(f"two nodes are both named {n.name!r} ({n.op}){where}")
        node_names.add(n.name)


def _raise_order_or_cycle(graph: Graph, user: Node, v: Value, prod: Node, where: str) -> None:
    # Say "cycle" when there is one (the more useful diagnosis), else the ordering problem.
    probe = Graph(graph.nodes, graph.inputs, graph.outputs, graph.name)
    probe.toposort()  # raises GraphError naming the cycle
    raise GraphError(f"{node_context(user)}: input {v.name!r} is used before "
                     f"{node_context(prod)} defines it (nodes are not in topological order; "
                     f"call graph.toposort()){where}")


def _check_node(n: Node, where: str, check_types: bool) -> None:
    opdef = OPS.get(n.op)
    if opdef is None:
        raise GraphError(f"{node_context(n)}: unknown op {n.op!r}{where}")
    try:
        check_arity(n)
    except RetargetError as e:
        raise GraphError(f"{e}{where}") from None
    if not 1 <= len(n.outputs) <= opdef.num_outputs:
        raise GraphError(f"{node_context(n)}: has {len(n.outputs)} outputs, the op has "
                         f"1..{opdef.num_outputs}{where}")
    if not check_types or any(v.type is None for v in n.outputs):
        return
    if any(v is not None and v.type is None for v in n.inputs):
        raise GraphError(f"{node_context(n)}: outputs are typed but input(s) "
                         f"{[v.name for v in n.inputs if v is not None and v.type is None]} "
                         f"are not{where}")
    types = [None if v is None else v.type for v in n.inputs]
    consts = [None if v is None else v.const for v in n.inputs]
    try:
        attrs = resolve_attrs(n)
        inferred = opdef.infer(attrs, types, consts)
    except (RetargetError, ValueError, TypeError, IndexError) as e:
        raise GraphError(f"{node_context(n)}: shape inference fails on inputs "
                         f"({', '.join(map(str, types))}): {e}{where}") from None
    for v, t in zip(n.outputs, inferred):
        if v.type != t:
            raise GraphError(f"{node_context(n)}: output {v.name!r} is stored as {v.type} but its "
                             f"inputs ({', '.join(map(str, types))}) give {t}{where}")

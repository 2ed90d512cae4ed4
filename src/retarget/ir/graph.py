"""The graph IR: Values flow between Nodes; a Graph keeps its nodes in topological order.

Values are identified by object identity (two Values with the same name are a bug the
verifier reports). A Value with `const` set is a constant (an ONNX initializer or a folded
result); it has no producer node.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import GraphError
from .types import TensorType


@dataclass(slots=True, eq=False)
class Value:
    name: str
    type: TensorType | None = None
    const: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def __repr__(self) -> str:
        return f"%{self.name}:{self.type}" if self.type else f"%{self.name}"


@dataclass(slots=True, eq=False)
class Node:
    op: str
    name: str
    inputs: list[Value | None]  # None marks an omitted optional input
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)

    def input(self, i: int) -> Value | None:
        """The i-th input, or None when it is omitted or beyond the end."""
        return self.inputs[i] if i < len(self.inputs) else None

    def __repr__(self) -> str:
        return f"Node({self.op} '{self.name}')"


def _copy_attr(a):
    if isinstance(a, list):
        return [_copy_attr(x) for x in a]
    if isinstance(a, np.ndarray):
        return a.copy()
    return a  # ints, floats, strings, tuples: immutable


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ... the first not in `taken`; added to `taken`."""
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def constant(name: str, array) -> Value:
    """A constant Value holding `array` (kept as given; dtype must be one the IR accepts)."""
    array = np.asarray(array)
    return Value(name, TensorType.of(array), array)


class Graph:
    """A dataflow graph: inputs, outputs and nodes in topological order."""

    def __init__(self, nodes: Iterable[Node], inputs: Iterable[Value], outputs: Iterable[Value],
                 name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = list(nodes)
        self.inputs: list[Value] = list(inputs)
        self.outputs: list[Value] = list(outputs)

    # ---- queries -------------------------------------------------------------------------
    def values(self) -> Iterator[Value]:
        """Every distinct Value: graph inputs, node inputs (constants included) and outputs."""
        seen: set[int] = set()
        for v in self._all_value_refs():
            if v is not None and id(v) not in seen:
                seen.add(id(v))
                yield v

    def _all_value_refs(self) -> Iterator[Value | None]:
        yield from self.inputs
        for n in self.nodes:
            yield from n.inputs
            yield from n.outputs
        yield from self.outputs

    def constants(self) -> list[Value]:
        return [v for v in self.values() if v.is_const]

    def producers(self) -> dict[Value, Node]:
        return {v: n for n in self.nodes for v in n.outputs}

    def consumers(self) -> dict[Value, list[Node]]:
        uses: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None:
                    uses.setdefault(v, []).append(n)
        return uses

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node named {name!r} in graph {self.name!r}")

    def value(self, name: str) -> Value:
        for v in self.values():
            if v.name == name:
                return v
        raise KeyError(f"no value named {name!r} in graph {self.name!r}")

    def unique_name(self, base: str) -> str:
        """A value/node name not yet used in this graph, derived from `base`."""
        taken = {v.name for v in self.values()} | {n.name for n in self.nodes}
        if base not in taken:
            return base
        i = 1
        while f"{base}_{i}" in taken:
            i += 1
        return f"{base}_{i}"

    # ---- edits -----------------------------------------------------------------------------
    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every node and graph output that reads `old` read `new` instead."""
        for n in self.nodes:
            n.inputs = [new if v is old else v for v in n.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def toposort(self) -> None:
        """Reorder nodes topologically (stable: keeps the given order where it is free).

        Raises GraphError naming a node on the cycle when there is one."""
        producer = self.producers()
        order: list[Node] = []
        state: dict[int, int] = {}  # 1 = on the stack, 2 = done
        for root in self.nodes:
            if state.get(id(root)) == 2:
                continue
            stack: list[tuple[Node, int]] = [(root, 0)]
            state[id(root)] = 1
            while stack:
                node, i = stack[-1]
                deps = [producer[v] for v in node.inputs if v is not None and v in producer]
                if i < len(deps):
                    stack[-1] = (node, i + 1)
                    d = deps[i]
                    s = state.get(id(d))
                    if s == 1:
                        cycle = [n.name for n, _ in stack[[x for x, _ in stack].index(d):]]
                        raise GraphError(f"graph {self.name!r} has a cycle through nodes "
                                         f"{' -> '.join(cycle + [d.name])} ({d.op} '{d.name}')")
                    if s is None:
                        state[id(d)] = 1
                        stack.append((d, 0))
                else:
                    stack.pop()
                    state[id(node)] = 2
                    order.append(node)
        self.nodes = order

    def copy(self) -> "Graph":
        """A structural copy: new Graph, Node and Value objects; constant arrays are shared.

        Written out by hand rather than with deepcopy: passes copy the graph each time they
        run, and deepcopy's generic walk was the bulk of simplify's time on ResNet-50.
        TensorTypes are frozen and constant arrays are treated as immutable, so both are shared;
        attribute lists and arrays are copied so a pass editing them cannot reach the original."""
        vmap: dict[int, Value] = {}

        def new(v: Value | None) -> Value | None:
            if v is None:
                return None
            nv = vmap.get(id(v))
            if nv is None:
                nv = vmap[id(v)] = Value(v.name, v.type, v.const)
            return nv

        nodes = [Node(n.op, n.name, [new(v) for v in n.inputs], [new(v) for v in n.outputs],
                      {k: _copy_attr(a) for k, a in n.attrs.items()}) for n in self.nodes]
        return Graph(nodes, [new(v) for v in self.inputs], [new(v) for v in self.outputs], self.name)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes)"

    def __str__(self) -> str:
        from .printer import format_graph
        return format_graph(self)

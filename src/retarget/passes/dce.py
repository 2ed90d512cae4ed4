"""Dead-code elimination: drop nodes none of whose outputs reach a graph output.

Constants live only as node inputs, so a constant read by no surviving node disappears with
its last reader. Graph inputs are the graph's interface and are kept even when unused.
"""
from __future__ import annotations

from ..ir.graph import Graph


def eliminate_dead_code_inplace(graph: Graph) -> bool:
    """Remove dead nodes from `graph` itself; True when something was removed."""
    live: set[int] = {id(v) for v in graph.outputs}
    kept = []
    # Walking backwards over a topological order sees every reader before its producer.
    for node in reversed(graph.nodes):
        if any(id(v) in live for v in node.outputs):
            kept.append(node)
            live.update(id(v) for v in node.inputs if v is not None)
    changed = len(kept) != len(graph.nodes)
    graph.nodes = kept[::-1]
    return changed


def eliminate_dead_code(graph: Graph) -> Graph:
    """A copy of `graph` without the nodes (and constants) that no graph output depends on."""
    g = graph.copy()
    eliminate_dead_code_inplace(g)
    return g

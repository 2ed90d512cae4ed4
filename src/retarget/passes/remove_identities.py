"""Remove nodes that pass their input through unchanged: Identity, and Dropout at inference.

A graph output keeps its name: when the removed node's output is a graph output, the value
feeding it is renamed instead (if that value is itself an input, a constant or another graph
output, renaming would change the interface, so the node is kept).
"""
from __future__ import annotations

from ..ir.graph import Graph, Node


def _is_passthrough(node: Node, used: set[int]) -> bool:
    if node.op == "Identity":
        return True
    if node.op == "Dropout":
        # Inference Dropout is the identity on output 0. It is not when training_mode is set
        # (or not known), and its mask output, if anyone reads it, would still be needed.
        training = node.input(2)
        if training is not None and (training.const is None or bool(training.const)):
            return False
        return all(id(v) not in used for v in node.outputs[1:])
    return False


def remove_identities_inplace(graph: Graph) -> bool:
    """Remove pass-through nodes from `graph` itself; True when something changed."""
    producer = graph.producers()
    graph_inputs = {id(v) for v in graph.inputs}
    used = {id(v) for n in graph.nodes for v in n.inputs if v is not None}
    used |= {id(v) for v in graph.outputs}
    kept: list[Node] = []
    changed = False
    for node in graph.nodes:
        if not _is_passthrough(node, used) or node.inputs[0] is None:
            kept.append(node)
            continue
        src, dst = node.inputs[0], node.outputs[0]
        outputs = {id(v) for v in graph.outputs}
        if id(dst) not in outputs:
            graph.replace_all_uses(dst, src)
        elif (src in producer and id(src) not in outputs and id(src) not in graph_inputs
              and not src.is_const):
            # dst is a graph output: let src's producer write dst directly, keeping its name.
            p = producer[src]
            p.outputs = [dst if v is src else v for v in p.outputs]
            producer[dst] = p
            graph.replace_all_uses(src, dst)
        else:
            kept.append(node)
            continue
        changed = True
    graph.nodes = kept
    return changed


def remove_identities(graph: Graph) -> Graph:
    """A copy of `graph` without Identity nodes and inference-mode Dropout nodes."""
    g = graph.copy()
    remove_identities_inplace(g)
    return g

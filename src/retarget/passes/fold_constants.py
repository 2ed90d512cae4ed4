"""Constant folding: evaluate at compile time every node whose result does not depend on the
graph inputs.

- A node whose inputs are all constants is run once with the reference executor's `run_node`
  (the op's own definition, so folding can never disagree with execution); its outputs
  become constants.
- Shape(x) and Size(x) become constants whenever x's type is static, which it always is in
  this IR. That is what dissolves the Shape -> Gather -> Unsqueeze -> Concat -> Reshape
  chains PyTorch's exporter emits for `x.view(x.size(0), -1)`.

Types are inferred on the way for nodes that have none yet: a Reshape whose target shape is
computed by such a chain can only be typed once the chain is folded, so folding and shape
inference have to advance together in one walk.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError, RetargetError, node_context
from ..ir.graph import Graph, Node
from ..ir.types import TensorType
from ..ops.registry import get_op, resolve_attrs
from ..ops.reference import run_node

# Ops left alone even with constant inputs: a DequantizeLinear of int8 weights is how a
# quantised model says "these weights are int8"; folding would turn them back into float32.
NOT_FOLDED = frozenset({"DequantizeLinear"})

# A folded result larger than this (in elements) and larger than its inputs together is not
# materialised: Expand/ConstantOfShape/Tile of a small constant are cheaper to run than to store.
MAX_GROWN_ELEMENTS = 1 << 20


def _shape_like(node: Node) -> list[np.ndarray] | None:
    """Shape/Size of a statically typed input, or None when the node is not such a query."""
    if node.op not in ("Shape", "Size"):
        return None
    x = node.input(0)
    if x is None or x.type is None:
        return None
    # Run the op's own definition on a stand-in with x's shape and dtype: a broadcast view
    # of one element, so no tensor of x's size is allocated.
    stand_in = np.broadcast_to(np.zeros((), x.type.dtype), x.type.shape)
    return run_node(node, [stand_in], fast=False)


def _too_big(node: Node) -> bool:
    if any(v.type is None for v in node.outputs):
        return False
    out = sum(v.type.numel for v in node.outputs)
    ins = sum(v.type.numel for v in node.inputs if v is not None and v.type is not None)
    return out > MAX_GROWN_ELEMENTS and out > ins


def _evaluate(node: Node) -> list[np.ndarray] | None:
    """The node's outputs when they are compile-time constants, else None."""
    shape = _shape_like(node)
    if shape is not None:
        return shape
    present = [v for v in node.inputs if v is not None]
    if not present or any(not v.is_const for v in present) or node.op in NOT_FOLDED:
        return None
    if _too_big(node):
        return None
    return run_node(node, [None if v is None else v.const for v in node.inputs], fast=False)


def infer_node_types(node: Node) -> None:
    """Type `node`'s outputs from its typed inputs when they are not typed yet.

    Leaves them untyped when an input is untyped or the shape rule needs a value that is not
    constant yet; infer_shapes, run afterwards, reports what is still missing."""
    if all(v.type is not None for v in node.outputs):
        return
    if any(v is not None and v.type is None for v in node.inputs):
        return
    opdef = get_op(node.op, node)
    try:
        types = opdef.infer(resolve_attrs(node), [None if v is None else v.type for v in node.inputs],
                            [None if v is None else v.const for v in node.inputs])
    except (RetargetError, ValueError, TypeError, IndexError):
        return
    for v, t in zip(node.outputs, types):
        if v.type is None:
            v.type = t


def fold_constants_inplace(graph: Graph) -> bool:
    """Fold `graph` itself; True when at least one node was folded away."""
    kept: list[Node] = []
    changed = False
    for node in graph.nodes:
        infer_node_types(node)
        results = _evaluate(node)
        if results is None:
            kept.append(node)
            continue
        for v, a in zip(node.outputs, results):
            a = np.asarray(a)
            actual = TensorType.of(a)
            if v.type is not None and v.type != actual:
                raise GraphError(f"{node_context(node)}: folding output {v.name!r} gave {actual} "
                                 f"but the op's shape rule says {v.type} (the op's definition "
                                 f"and shape rule disagree)")
            v.const, v.type = a, actual
        changed = True
    graph.nodes = kept
    return changed


def fold_constants(graph: Graph) -> Graph:
    """A copy of `graph` with constant subgraphs and static Shape/Size queries evaluated.

    Folded values keep their names, so graph outputs keep theirs. The constants the folded
    nodes read stay until eliminate_dead_code drops the ones nothing reads any more."""
    g = graph.copy()
    fold_constants_inplace(g)
    return g

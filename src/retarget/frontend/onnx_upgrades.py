"""Opset upgrades: rewrite a node from an older ONNX opset into the canonical form.

The IR's ops follow the newest ONNX signatures (for example Squeeze takes `axes` as an
input, as in opset 13+). An ONNX node from an older opset is rewritten here, once, so no op
definition needs to know about opsets.

`upgrade_node(node, opset, new_const)` returns the node to use (possibly the same one).
`new_const(name_hint, array)` makes a constant Value for attributes that became inputs.
"""
from __future__ import annotations

from typing import Callable

from ..ir.graph import Node

UPGRADES: dict[str, Callable] = {}


def upgrade_node(node: Node, opset: int, new_const) -> Node:
    fn = UPGRADES.get(node.op)
    return fn(node, opset, new_const) if fn else node

"""Opset upgrades: rewrite a node from an older ONNX opset into the canonical form.

The IR's ops follow the newest ONNX signatures (for example Squeeze takes `axes` as an
input, as in opset 13+). An ONNX node from an older opset is rewritten here, once, so no op
definition needs to know about opsets.

`upgrade_node(node, opset, new_const)` returns the node to use (possibly the same one).
`new_const(name_hint, array)` makes a constant Value for attributes that became inputs.

What is rewritten (opset = the model's default-domain opset):
- attributes that became inputs: Squeeze/Unsqueeze axes (< 13), ReduceSum axes (< 13), the
  other ReduceX axes (< 18), Split split (< 13), Dropout ratio (< 12), Clip min/max (< 11),
  Pad pads/value (< 11), Slice starts/ends/axes (< 10), Reshape shape (< 5);
- Split without sizes gets `num_outputs` = its output count (the op's shape rule cannot see
  how many outputs a node has);
- Softmax/LogSoftmax/Hardmax (< 13) keep their coerce-to-2-D meaning via `coerce_to_2d=1`;
- GroupNormalization (< 21) keeps its per-group scale and bias via `per_group_scale=1`;
- Upsample (7..9) and Resize (10) become Resize with the asymmetric coordinate mapping and
  floor rounding they were defined with;
- Cast (< 6) names its target type by string; the `consumed_inputs` attribute (< 6) is dropped.
Forms with no exact canonical equivalent raise UnsupportedOpError naming the node.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import onnx

from ..errors import UnsupportedOpError, node_context
from ..ir.graph import Node, Value

NewConst = Callable[[str, object], Value]
Upgrade = Callable[[Node, int, NewConst], Node]

UPGRADES: dict[str, Upgrade] = {}


def upgrade_node(node: Node, opset: int, new_const: NewConst) -> Node:
    """`node` rewritten to the canonical (newest-opset) form of its op."""
    if opset < 6 and "consumed_inputs" in node.attrs:
        # A memory-reuse hint of the first opsets, with no meaning for the computation.
        node = _without(node, "consumed_inputs")
    fn = UPGRADES.get(node.op)
    return fn(node, opset, new_const) if fn else node


def _upgrade(*ops: str):
    def add(fn: Upgrade) -> Upgrade:
        for op in ops:
            UPGRADES[op] = fn
        return fn
    return add


# ---- helpers -----------------------------------------------------------------------------
def _without(node: Node, *names: str) -> Node:
    return dataclasses.replace(node, attrs={k: v for k, v in node.attrs.items() if k not in names})


def _attrs_to_inputs(node: Node, new_const: NewConst, slots: dict[int, tuple[str, type]]) -> Node:
    """Move attributes into input slots: slots[i] = (attribute name, dtype of the constant).

    Absent attributes leave their slot omitted (None); trailing omitted slots are dropped."""
    inputs = list(node.inputs)
    attrs = dict(node.attrs)
    for index, (name, dtype) in sorted(slots.items()):
        while len(inputs) <= index:
            inputs.append(None)
        if name in attrs:
            if inputs[index] is not None:
                raise UnsupportedOpError(f"{node_context(node)}: has both a {name!r} attribute "
                                         f"and input {index}")
            inputs[index] = new_const(f"{node.name}_{name}", np.asarray(attrs.pop(name), dtype))
    while inputs and inputs[-1] is None:
        inputs.pop()
    return dataclasses.replace(node, inputs=inputs, attrs=attrs)


# ---- attributes that became inputs -----------------------------------------------------------
@_upgrade("Squeeze", "Unsqueeze")
def _squeeze(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 13:
        return node
    return _attrs_to_inputs(node, new_const, {1: ("axes", np.int64)})


_REDUCE_OPS = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@_upgrade("ReduceSum", *_REDUCE_OPS)
def _reduce(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= (13 if node.op == "ReduceSum" else 18):
        return node
    return _attrs_to_inputs(node, new_const, {1: ("axes", np.int64)})


@_upgrade("Split")
def _split(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset < 13:
        node = _attrs_to_inputs(node, new_const, {1: ("split", np.int64)})
    if node.input(1) is None and node.attrs.get("num_outputs") is None:
        # Equal parts, one per output: say how many, so the shape rule can split.
        node = dataclasses.replace(node, attrs={**node.attrs, "num_outputs": len(node.outputs)})
    return node


@_upgrade("Dropout")
def _dropout(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 12:
        return node
    attrs = dict(node.attrs)
    inputs = list(node.inputs[:1])
    inputs.append(new_const(f"{node.name}_ratio", np.float32(attrs.pop("ratio", 0.5))))
    # Before opset 7, Dropout was in training mode unless is_test=1.
    training = opset < 7 and not attrs.pop("is_test", 0)
    attrs.pop("is_test", None)
    if training:
        inputs.append(new_const(f"{node.name}_training_mode", np.bool_(True)))
    return dataclasses.replace(node, inputs=inputs, attrs=attrs)


@_upgrade("Clip")
def _clip(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 11:
        return node
    # Clip-6 was float-only and its bounds float attributes; the constants are float32 and
    # Clip's compute casts them to the input's dtype.
    return _attrs_to_inputs(node, new_const, {1: ("min", np.float32), 2: ("max", np.float32)})


@_upgrade("Pad")
def _pad(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 11:
        return node
    if "paddings" in node.attrs:  # the opset-1 name
        node = dataclasses.replace(node, attrs={("pads" if k == "paddings" else k): v
                                                for k, v in node.attrs.items()})
    return _attrs_to_inputs(node, new_const, {1: ("pads", np.int64), 2: ("value", np.float32)})


@_upgrade("Slice")
def _slice(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 10:
        return node
    return _attrs_to_inputs(node, new_const, {1: ("starts", np.int64), 2: ("ends", np.int64),
                                              3: ("axes", np.int64)})


@_upgrade("Reshape")
def _reshape(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 5:
        return node
    return _attrs_to_inputs(node, new_const, {1: ("shape", np.int64)})


# ---- changed meanings ------------------------------------------------------------------------
@_upgrade("Softmax", "LogSoftmax", "Hardmax")
def _softmax(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 13:
        return node
    # Before opset 13 these flattened the input to 2-D at `axis` (default 1) and normalised
    # each row as a whole; `coerce_to_2d` keeps exactly that meaning.
    return dataclasses.replace(node, attrs={**node.attrs, "axis": node.attrs.get("axis", 1),
                                            "coerce_to_2d": 1})


@_upgrade("GroupNormalization")
def _group_normalization(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 21:
        return node
    # Opset 18 gave scale and bias one value per group; 21 one per channel.
    return dataclasses.replace(node, attrs={**node.attrs, "per_group_scale": 1})


@_upgrade("Upsample")
def _upsample(node: Node, opset: int, new_const: NewConst) -> Node:
    attrs = dict(node.attrs)
    mode = attrs.pop("mode", "nearest")
    if mode not in ("nearest", "linear") or opset < 7:
        raise UnsupportedOpError(f"{node_context(node)}: Upsample (opset {opset}) mode {mode!r} "
                                 f"is not supported; supported: opset >= 7, nearest or linear")
    if "scales" in attrs:  # opset 7-8: an attribute; opset 9: the second input
        scales = new_const(f"{node.name}_scales", np.asarray(attrs.pop("scales"), np.float32))
    else:
        scales = node.input(1)
    if attrs:
        raise UnsupportedOpError(f"{node_context(node)}: unsupported Upsample attribute(s) "
                                 f"{sorted(attrs)}")
    return _asymmetric_resize(node, scales, mode)


@_upgrade("Resize")
def _resize(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 11:
        return node
    attrs = dict(node.attrs)
    mode = attrs.pop("mode", "nearest")
    if attrs:
        raise UnsupportedOpError(f"{node_context(node)}: unsupported Resize-10 attribute(s) "
                                 f"{sorted(attrs)}")
    return _asymmetric_resize(node, node.input(1), mode)


def _asymmetric_resize(node: Node, scales: Value | None, mode: str) -> Node:
    # Upsample and Resize-10 map output pixel i to input coordinate i / scale and (nearest)
    # take its floor: Resize's asymmetric mapping with floor rounding.
    return Node("Resize", node.name, [node.inputs[0], None, scales], node.outputs,
                {"mode": mode, "coordinate_transformation_mode": "asymmetric",
                 "nearest_mode": "floor"})


@_upgrade("Cast")
def _cast(node: Node, opset: int, new_const: NewConst) -> Node:
    to = node.attrs.get("to")
    if not isinstance(to, str):
        return node
    try:  # Cast-1 named the type ("FLOAT"); later opsets use the TensorProto number
        code = onnx.TensorProto.DataType.Value(to.upper())
    except ValueError:
        raise UnsupportedOpError(f"{node_context(node)}: unknown Cast target type {to!r}") from None
    return dataclasses.replace(node, attrs={**node.attrs, "to": code})


@_upgrade("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Less", "Greater",
          "PRelu")
def _legacy_broadcast(node: Node, opset: int, new_const: NewConst) -> Node:
    if opset >= 7 or not ({"broadcast", "axis"} & set(node.attrs)):
        return node
    if "axis" in node.attrs:
        # Aligning B at an arbitrary axis of A has no multidirectional equivalent without
        # knowing A's rank, which the importer does not track.
        raise UnsupportedOpError(f"{node_context(node)}: opset-{opset} broadcasting with "
                                 f"axis={node.attrs['axis']} is not supported")
    # broadcast=1 without axis aligns trailing dimensions, as NumPy broadcasting does.
    return _without(node, "broadcast")

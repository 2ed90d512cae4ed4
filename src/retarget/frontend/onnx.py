"""ONNX frontend: ModelProto -> Graph.

Initializers become constant Values; attributes become plain Python values (ints, floats,
strings, lists, NumPy arrays for tensor attributes); nodes from older opsets are rewritten
to the canonical form by `onnx_upgrades`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import ModelLoadError
from ..ir.graph import Graph, Node, Value, constant
from ..ir.types import TensorType
from .onnx_upgrades import upgrade_node


def attr_value(a: onnx.AttributeProto):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, list):
        return [x.decode("utf-8") if isinstance(x, bytes) else x for x in v]
    return v


def _tensor_type(vi: onnx.ValueInfoProto, given: tuple[int, ...] | None) -> TensorType | None:
    tt = vi.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
    if given is not None:
        return TensorType(given, dtype)
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(d.dim_value)
    return TensorType(tuple(dims), dtype)


def opset_of(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def from_onnx_model(model: onnx.ModelProto,
                    input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Graph:
    input_shapes = dict(input_shapes or {})
    opset = opset_of(model)
    g = model.graph
    values: dict[str, Value] = {}
    for init in g.initializer:
        values[init.name] = constant(init.name, numpy_helper.to_array(init))
    inputs = []
    for vi in g.input:
        if vi.name in values:  # old exporters list initializers as inputs too
            continue
        v = Value(vi.name, _tensor_type(vi, input_shapes.get(vi.name)))
        values[vi.name] = v
        inputs.append(v)
    counter = [0]

    def new_const(hint: str, array) -> Value:
        counter[0] += 1
        name = f"{hint}__c{counter[0]}"
        return constant(name, np.asarray(array))

    nodes = []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        ins = []
        for x in n.input:
            if x == "":
                ins.append(None)
            else:
                ins.append(values[x])
        outs = []
        for y in n.output:
            v = Value(y or f"{name}__unused{len(outs)}")
            if y:
                values[y] = v
            outs.append(v)
        attrs = {a.name: attr_value(a) for a in n.attribute}
        nodes.append(upgrade_node(Node(n.op_type, name, ins, outs, attrs), opset, new_const))
    outputs = [values[o.name] for o in g.output]
    return Graph(nodes, inputs, outputs, name=g.name or "graph")


def load_onnx(path, input_shapes=None, simplify: bool = True) -> Graph:
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise
    except Exception as e:  # protobuf raises DecodeError and friends
        raise ModelLoadError(f"{path}: not a readable ONNX model ({e})") from None
    graph = from_onnx_model(model, input_shapes)
    from ..passes.infer_shapes import infer_shapes
    return infer_shapes(graph)

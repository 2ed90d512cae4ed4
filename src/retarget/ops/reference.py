"""The reference executor: runs a Graph on NumPy by walking its nodes over the op table.

This is the golden model every target is checked against. `fast=False` uses each op's naive
definition only; the default uses the fast paths (im2col + BLAS conv, ...) that tests check
against the definitions.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import InputError, RetargetError, ShapeError, node_context
from ..ir.graph import Graph, Value
from ..ir.types import TensorType
from ..limits import check_tensor_bytes
from .registry import get_op, resolve_attrs


def check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[Value, np.ndarray]:
    """Match user arrays to graph inputs by name, checking shape and dtype."""
    names = [v.name for v in graph.inputs]
    unknown = set(inputs) - set(names)
    if unknown:
        raise InputError(f"unknown input(s) {sorted(unknown)}; the graph's inputs are {names}")
    env: dict[Value, np.ndarray] = {}
    for v in graph.inputs:
        if v.name not in inputs:
            raise InputError(f"missing input {v.name!r} ({v.type}); the graph's inputs are {names}")
        a = np.asarray(inputs[v.name])
        if v.type is not None:
            if tuple(a.shape) != v.type.shape:
                raise InputError(f"input {v.name!r}: expected shape {v.type.shape}, got {tuple(a.shape)}")
            if a.dtype.name != v.type.dtype:
                raise InputError(f"input {v.name!r}: expected dtype {v.type.dtype}, got {a.dtype.name}")
        env[v] = a
    return env


def run_graph(graph: Graph, inputs: Mapping[str, np.ndarray], *, intermediates: bool = False,
              fast: bool = True) -> dict[str, np.ndarray]:
    """Run `graph` on `inputs` (name -> array). Returns output name -> array; with
    `intermediates=True`, every value computed along the way as well."""
    env = check_inputs(graph, inputs)
    for v in graph.constants():
        env[v] = v.const
    last_use = _last_uses(graph) if not intermediates else {}
    keep = set(graph.outputs)
    for i, node in enumerate(graph.nodes):
        args = []
        for v in node.inputs:
            if v is None:
                args.append(None)
            elif v in env:
                args.append(env[v])
            else:
                raise RetargetError(f"{node_context(node)}: input {v.name!r} is not computed "
                                    f"before it is used (run the verifier)")
        outs = run_node(node, args, fast=fast)
        for v, a in zip(node.outputs, outs):
            env[v] = a
        for v in last_use.get(i, ()):  # free what no later node reads
            if v not in keep and not v.is_const:
                env.pop(v, None)
    if intermediates:
        return {v.name: a for v, a in env.items() if not v.is_const}
    return {v.name: env[v] for v in graph.outputs}


# Ops whose output size comes from the *values* of their inputs (a shape, repeats, pads,
# scales, a range): a few bytes of input can ask for terabytes, so the output is sized and
# checked against the tensor limit before the op allocates it.
DATA_SIZED_OPS = frozenset({"ConstantOfShape", "Expand", "Tile", "Pad", "Resize", "Upsample",
                            "Range", "OneHot"})


def _check_output_size(node, opdef, attrs, args) -> None:
    types = [None if a is None else TensorType.of(np.asarray(a)) for a in args]
    try:
        out_types = opdef.infer(attrs, types, list(args))
    except (RetargetError, ValueError, TypeError, IndexError, OverflowError):
        return   # the op itself reports what is wrong with its inputs
    for v, t in zip(node.outputs, out_types):
        check_tensor_bytes(f"{node_context(node)} output {v.name!r}", t.shape, t.dtype)


def run_node(node, args: list, fast: bool = True) -> list[np.ndarray]:
    """Execute one node; errors from inside NumPy come back naming the node and shapes."""
    opdef = get_op(node.op, node)
    attrs = resolve_attrs(node)
    if node.op in DATA_SIZED_OPS:
        _check_output_size(node, opdef, attrs, args)
    else:   # attributes can ask for huge outputs too (a pad of 2^40): the typed shape says so
        for v in node.outputs:
            if v.type is not None:
                check_tensor_bytes(f"{node_context(node)} output {v.name!r}", v.type.shape,
                                   v.type.dtype)
    try:
        outs = opdef.run(args, attrs, fast=fast, num_outputs=len(node.outputs))
    except RetargetError as e:
        if node.name in str(e):
            raise
        raise type(e)(f"{node_context(node)}: {e}") from None
    except (ValueError, TypeError, IndexError, FloatingPointError) as e:
        shapes = ", ".join("None" if a is None else f"{a.dtype}{list(a.shape)}" for a in args)
        raise ShapeError(f"{node_context(node)} failed on inputs ({shapes}): {e}") from None
    if len(outs) < len(node.outputs):
        raise ShapeError(f"{node_context(node)}: produced {len(outs)} outputs, "
                         f"the graph expects {len(node.outputs)}")
    return outs[:len(node.outputs)]


def _last_uses(graph: Graph) -> dict[int, list[Value]]:
    last: dict[Value, int] = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if v is not None:
                last[v] = i
    by_node: dict[int, list[Value]] = {}
    for v, i in last.items():
        by_node.setdefault(i, []).append(v)
    return by_node

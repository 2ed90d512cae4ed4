"""`retarget inspect MODEL [--input-shape NAME=1,3,224,224]`: load a model and print a table of
its layers (node, op, output shape, parameters, MACs), then totals and a breakdown by op.

Also home of the model-loading helpers `run` shares: --input-shape parsing and `load_model`.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from ..errors import InputError
from ..ir.graph import Graph, Node
from ..ops.registry import get_op, resolve_attrs
from ..report.table import format_table, si


# ---- shared with run_cmd -------------------------------------------------------------------------
def add_input_shape_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="bind an input's shape, e.g. input=1,3,224,224 (repeatable; the NAME= "
                        "may be left out when the model has one input)")


def parse_shape(text: str, item: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        dims = ()
    if not dims or any(d < 0 for d in dims):
        raise InputError(f"--input-shape {item!r}: expected NAME=D0,D1,... with non-negative "
                         f"integer dims, e.g. input=1,3,224,224")
    return dims


def model_input_names(model) -> list[str]:
    """The names of a ModelProto's real inputs (old exporters also list the weights)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


def parse_input_shapes(items: list[str], input_names: list[str]) -> dict[str, tuple[int, ...]]:
    """--input-shape arguments -> {name: shape}; an unnamed shape needs a one-input model."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        if not sep:
            if len(input_names) != 1:
                raise InputError(f"--input-shape {item!r}: the model has inputs {input_names}; "
                                 f"say which one, e.g. {input_names[0] if input_names else 'x'}={item}")
            name = input_names[0]
        elif name not in input_names:
            raise InputError(f"--input-shape {item!r}: the model has no input {name!r}; its "
                             f"inputs are {input_names}")
        shapes[name] = parse_shape(dims, item)
    return shapes


def load_model(path: str, input_shape_args: list[str],
               extra_shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """Read, import and simplify an ONNX file, binding input shapes from --input-shape (and
    `extra_shapes`, which --input-shape overrides)."""
    from ..frontend.tflite import is_tflite_path
    if is_tflite_path(path):
        if input_shape_args:
            raise InputError(f"--input-shape: {path} is a TFLite model, whose input shapes "
                             f"are fixed in the file")
        from ..frontend.tflite import load_tflite
        return load_tflite(path)
    from ..frontend.onnx import import_model, read_onnx
    model = read_onnx(path)
    shapes = dict(extra_shapes or {})
    shapes.update(parse_input_shapes(input_shape_args, model_input_names(model)))
    return import_model(model, shapes or None)


# ---- the layer table ------------------------------------------------------------------------------
def node_params(node: Node) -> int:
    """Parameters a node reads: elements of its constant inputs, except int64 ones (shapes,
    axes and indices in ONNX, not learned weights)."""
    return sum(int(v.const.size) for v in node.inputs
               if v is not None and v.is_const and v.const.dtype != np.int64)


def node_macs(node: Node) -> int:
    opdef = get_op(node.op, node)
    in_types = [None if v is None else v.type for v in node.inputs]
    out_types = [v.type for v in node.outputs]
    return int(opdef.macs(resolve_attrs(node), in_types, out_types))


def _shape_text(node: Node) -> str:
    return " ".join(f"[{','.join(map(str, v.type.shape))}]" if v.type else "?"
                    for v in node.outputs)


def format_inspection(graph: Graph, layers: bool = True) -> str:
    """The per-layer table (unless layers=False), the totals and the by-op table."""
    rows, by_op = [], defaultdict(lambda: [0, 0, 0])
    for node in graph.nodes:
        params, macs = node_params(node), node_macs(node)
        rows.append([node.name, node.op, _shape_text(node), params, macs])
        stats = by_op[node.op]
        stats[0] += 1
        stats[1] += params
        stats[2] += macs
    # Graph totals count each constant once even when several nodes read it.
    total_params = sum(int(v.const.size) for v in graph.constants() if v.const.dtype != np.int64)
    total_macs = sum(r[4] for r in rows)
    sig = lambda vs: ", ".join(f"{v.name}: {v.type}" for v in vs)  # noqa: E731
    out = [f"graph {graph.name}", f"inputs:  {sig(graph.inputs)}", f"outputs: {sig(graph.outputs)}",
           ""]
    if layers:
        out += [format_table(["node", "op", "output shape", "params", "MACs"], rows,
                             footer=[["total", "", "", total_params, total_macs]]), ""]
    op_rows = [[op, n, p, m, f"{100 * m / total_macs:.1f}%" if total_macs else "-"]
               for op, (n, p, m) in sorted(by_op.items(), key=lambda kv: (-kv[1][2], kv[0]))]
    out.append(format_table(["op", "nodes", "params", "MACs", "MAC share"], op_rows,
                            footer=[["total", len(graph.nodes), total_params, total_macs, ""]]))
    out.append("")
    out.append(f"{len(graph.nodes)} nodes, {si(total_params)} params, {si(total_macs)} MACs")
    return "\n".join(out)


def register(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="print a model's layers, parameters and MACs",
                              description="Load MODEL (simplified, as `run` sees it) and print "
                                          "one row per node, totals and a breakdown by op.")
    p.add_argument("model", help="ONNX model file")
    add_input_shape_option(p)
    p.add_argument("--summary", action="store_true",
                   help="only the totals and the by-op table, not a row per node")
    p.set_defaults(func=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    graph = load_model(args.model, args.input_shape)
    print(format_inspection(graph, layers=not args.summary))
    return 0

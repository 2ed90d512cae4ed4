"""Quantised-graph nodes as the shared layer descriptions, and the checks every integer
accelerator makes before taking a node: int8 operands, constant weights, and a conv/dense whose
int32 accumulator goes to exactly one per-tensor, half-up Requantize (fused into it on chip)."""
from __future__ import annotations

import numpy as np

from ...errors import TargetError
from ...ir.graph import Graph, Node, Value
from ...ops.quantized import ACCUMULATING_OPS
from ...ops.registry import resolve_attrs
from .layers import Conv2d, Requant


def requant_of(rq: Node) -> Requant:
    """The Requant description of a per-tensor Requantize node."""
    a = resolve_attrs(rq)
    return Requant(int(a["shift"]), int(a["lo"]), int(a["hi"]))


def conv_layer(node: Node, rq: Node) -> Conv2d:
    """The Conv2d description of Conv `node` requantised by `rq`."""
    a = resolve_attrs(node)
    x, w = node.inputs[0].type.shape, node.inputs[1].type.shape
    pads = list(a.get("pads") or [0, 0, 0, 0])
    return Conv2d(node.name, tuple(x), int(w[0]), (int(w[2]), int(w[3])),
                  tuple(int(s) for s in (a.get("strides") or [1, 1])),
                  (int(pads[0]), int(pads[1]), int(pads[2]), int(pads[3])),
                  int(a.get("group", 1)), requant_of(rq))


def dense_weight(node: Node) -> np.ndarray:
    """Gemm/MatMul weights as (out_features, in_features), what lower_dense takes."""
    b = node.inputs[1].const
    if node.op == "Gemm" and resolve_attrs(node)["transB"]:
        return b
    return np.ascontiguousarray(b.T)


def dense_bias(node: Node) -> np.ndarray | None:
    """A Gemm/MatMul bias as one int32 per output feature, what lower_dense takes. ONNX's Gemm
    broadcasts C to the (M, N) output, so a scalar, (N,), (1, N) or (1, 1) bias is one value
    per feature; a bias that varies along M is not, and raises TargetError naming the node."""
    b = node.input(2)
    if b is None:
        return None
    n_out = dense_weight(node).shape[0]
    bias = np.asarray(b.const)
    try:
        rows = np.broadcast_to(bias, (max(1, bias.shape[0] if bias.ndim == 2 else 1), n_out))
    except ValueError:
        raise TargetError(f"{node.op} '{node.name}': bias of shape {list(bias.shape)} does not "
                          f"broadcast to the {n_out} output features") from None
    if not (rows == rows[:1]).all():
        raise TargetError(f"{node.op} '{node.name}': bias of shape {list(bias.shape)} differs "
                          f"between rows; the accelerator adds one bias per output feature")
    return np.ascontiguousarray(rows[0])


def int8(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.dtype == "int8"


def sole_consumer(graph: Graph, v: Value) -> Node | None:
    uses = graph.consumers().get(v, [])
    if len(uses) != 1 or v in graph.outputs:
        return None
    return uses[0]


def fused_requantize(graph: Graph, node: Node) -> Node | None:
    """The Requantize that takes `node`'s int32 accumulator to int8 on the ALU, if it can
    (one consumer, one per-tensor shift, half-up rounding, int8 output)."""
    rq = sole_consumer(graph, node.outputs[0])
    if rq is None or rq.op != "Requantize" or rq.input(1) is not None:
        return None
    a = resolve_attrs(rq)
    if a["rounding"] != "half_up" or a["dtype"] != "int8" or a["shift"] is None:
        return None
    return rq


def requant_reason(target: str, graph: Graph, node: Node) -> str | None:
    """Why `node`'s accumulator cannot be requantised on the accelerator (None: it can)."""
    rq = sole_consumer(graph, node.outputs[0])
    if rq is None or rq.op != "Requantize":
        return (f"the int32 result of {node.op} '{node.name}' is used by something other than "
                f"one Requantize; {target} stores int8 only")
    if rq.input(1) is not None:
        return (f"Requantize '{rq.name}' has per-channel shifts; {target} shifts a tensor by one "
                f"amount (quantise with per_channel=False)")
    a = resolve_attrs(rq)
    if a["rounding"] != "half_up" or a["dtype"] != "int8":
        return (f"Requantize '{rq.name}' rounds {a['rounding']} to {a['dtype']}; {target}: half_up "
                f"to int8")
    return None


def operand_problem(target: str, node: Node, rank: int, what: str) -> str | None:
    """Why the GEMM core cannot take `node`'s operands (None: it can): an int8 input of `rank`,
    constant int8 weights, an optional constant int32 bias."""
    x, w, b = node.inputs[0], node.input(1), node.input(2)
    where = f"{node.op} '{node.name}'"
    if not int8(x) or x.type.rank != rank:
        return f"{where}: {target} runs int8 {what}; input is {x.type}"
    if not (int8(w) and w.is_const):
        return f"{where}: weights must be a constant int8 tensor"
    if b is not None and not (b.is_const and b.type.dtype == "int32"):
        return f"{where}: bias must be a constant int32 tensor"
    return None


def split_accumulators(target: str, nodes: list[Node], graph: Graph) -> dict[str, str]:
    """Nodes of a region that must go to the CPU because a conv/dense and the Requantize of
    its int32 accumulator would be split across it (the accelerator stores int8 only)."""
    here = {id(n) for n in nodes}
    producers = graph.producers()
    refused = {}
    for n in nodes:
        if n.op in ACCUMULATING_OPS:
            rq = fused_requantize(graph, n)
            if rq is None or id(rq) not in here:
                refused[n.name] = (f"{n.op} '{n.name}': its Requantize runs on cpu, and "
                                   f"{target} cannot hand an int32 accumulator to the host")
        elif n.op == "Requantize":
            src = producers.get(n.inputs[0])
            if src is not None and src.op in ACCUMULATING_OPS and id(src) not in here:
                refused[n.name] = f"requantises {src.op} '{src.name}', which runs on cpu"
    return refused


__all__ = ["conv_layer", "dense_bias", "dense_weight", "fused_requantize", "int8",
           "operand_problem", "requant_of", "requant_reason", "sole_consumer", "split_accumulators"]

"""Which quantised-graph nodes nvdla takes (the compiler's mapping, compile.py), each with the
reason when it does not. The graph is in the multiplier + shift format (RequantizeMul,
QAddMul); a shift-only Requantize is the converter with multiplier 1."""
from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node
from ...ops.registry import resolve_attrs
from ..accel.graph_layers import int8, operand_problem, sole_consumer
from ..base import Support, Target

REQUANT_OPS = ("RequantizeMul", "Requantize")
ACCUMULATING = ("Conv", "Gemm", "MatMul")
# int32 results that only the converter following them may turn into int8
WIDE = ACCUMULATING + ("SumPool",)


def converter_problem(node: Node) -> str | None:
    """Why `node` (RequantizeMul / Requantize) is not the SDP output converter."""
    a = resolve_attrs(node)
    if a["dtype"] != "int8":
        return f"{node.op} '{node.name}' writes {a['dtype']}; the SDP converter writes int8"
    if node.op == "Requantize":
        s = node.inputs[1].const if node.input(1) is not None else a["shift"]
        if s is None or np.min(s) < 0:
            return f"Requantize '{node.name}' shifts left; the SDP converter shifts right"
    if any(v is not None and not v.is_const for v in node.inputs[1:]):
        return f"{node.op} '{node.name}': per-channel parameters must be constants"
    return None


def _accumulator_rule(t: Target, node: Node, graph: Graph) -> Support:
    if node.op == "MatMul" and node.input(1) is not None and not node.inputs[1].is_const:
        return Support.no(f"MatMul '{node.name}': both operands are computed at run time; the "
                          f"convolution core takes constant weights")
    rank = 4 if node.op == "Conv" else tuple(range(2, 6))
    why = operand_problem("nvdla", node, rank, "convolutions and dense layers")
    if why:
        return Support.no(why)
    a = resolve_attrs(node)
    if node.op == "Conv" and any(d != 1 for d in (a.get("dilations") or [1, 1])):
        return Support.no(f"Conv '{node.name}': dilation {a['dilations']}")
    if node.op == "Gemm" and (a["transA"] or a["alpha"] != 1.0 or a["beta"] != 1.0):
        return Support.no(f"Gemm '{node.name}': transA/alpha/beta must be 0/1/1")
    if node.op != "Conv" and node.inputs[1].type.rank != 2:
        return Support.no(f"{node.op} '{node.name}': the weight must be a 2-D matrix")
    rq = sole_consumer(graph, node.outputs[0])
    if rq is None or rq.op not in REQUANT_OPS:
        return Support.no(f"the int32 result of {node.op} '{node.name}' goes somewhere other "
                          f"than one RequantizeMul; nvdla's SDP writes int8 only")
    why = converter_problem(rq)
    return Support.no(why) if why else Support.yes("convolution core + SDP")


def _map_problem(node: Node, values) -> str | None:
    if not all(int8(v) and v.type.rank in (2, 4) for v in values):
        return (f"{node.op} '{node.name}': nvdla's SDP / PDP read int8 maps (rank 2 or 4); "
                f"got {', '.join(str(v.type) for v in values)}")
    return None


def _requant_rule(t: Target, node: Node, graph: Graph) -> Support:
    src = graph.producers().get(node.inputs[0])
    if src is not None and src.op in WIDE:
        if t.supports(src, graph).ok:
            return Support.yes(f"the output converter of {src.op} '{src.name}'")
        return Support.no(f"requantises {src.op} '{src.name}', which runs on cpu")
    why = _map_problem(node, [node.inputs[0]]) or converter_problem(node)
    return Support.no(why) if why else Support.yes("SDP converter")


def _qadd_rule(t: Target, node: Node, graph: Graph) -> Support:
    a, b = node.inputs
    why = _map_problem(node, [a, b])
    if why:
        return Support.no(why)
    if tuple(a.type.shape) != tuple(b.type.shape):
        return Support.no(f"QAddMul '{node.name}': operands {a.type} and {b.type} differ; the "
                          f"SDP adds maps of one shape")
    if resolve_attrs(node)["dtype"] != "int8":
        return Support.no(f"QAddMul '{node.name}' writes {resolve_attrs(node)['dtype']}")
    return Support.yes("SDP element-wise stage")


def _relu_rule(t: Target, node: Node, graph: Graph) -> Support:
    why = _map_problem(node, [node.inputs[0]])
    return Support.no(why) if why else Support.yes("SDP converter clip at 0")


def _maxpool_rule(t: Target, node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    if not int8(x) or x.type.rank != 4:
        return Support.no(f"{node.op} '{node.name}': the PDP pools int8 NCHW maps, got {x.type}")
    if node.op == "MaxPool":
        a = resolve_attrs(node)
        if len(node.outputs) > 1 and graph.consumers().get(node.outputs[1]):
            return Support.no(f"MaxPool '{node.name}': its Indices output is used")
        if a.get("auto_pad", "NOTSET") != "NOTSET" or \
                any(d != 1 for d in (a.get("dilations") or [1, 1])):
            return Support.no(f"MaxPool '{node.name}': auto_pad / dilation")
    return Support.yes("PDP max pooling")


def _sum_pool_rule(t: Target, node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    if not int8(x) or x.type.rank != 4:
        return Support.no(f"SumPool '{node.name}': the PDP pools int8 NCHW maps, got {x.type}")
    rq = sole_consumer(graph, node.outputs[0])
    if rq is None or rq.op not in REQUANT_OPS or converter_problem(rq):
        return Support.no(f"SumPool '{node.name}': its int32 sums must go to one converter")
    return Support.yes("PDP average pooling (window sums, then the converter divides)")


def _lrn_rule(t: Target, node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    if not int8(x) or x.type.rank != 4 or not node.inputs[1].is_const:
        return Support.no(f"QLrn '{node.name}': the CDP normalises int8 NCHW maps with a "
                          f"constant table, got {x.type}")
    return Support.yes("CDP local response normalisation")


def _concat_rule(t: Target, node: Node, graph: Graph) -> Support:
    y = node.outputs[0]
    if not int8(y) or y.type.rank != 4 or resolve_attrs(node)["axis"] not in (1, -3):
        return Support.no(f"Concat '{node.name}': nvdla joins int8 NCHW maps along channels")
    return Support.yes("in place (producers write their channel slice) or an SDP copy")


def _view_rule(t: Target, node: Node, graph: Graph) -> Support:
    if not int8(node.inputs[0]):
        return Support.no(f"{node.op} '{node.name}': not an int8 tensor")
    ranks = [v.type.rank for v in (node.inputs[0], node.outputs[0])]
    if max(ranks) > 4:
        return Support.no(f"{node.op} '{node.name}': rank {max(ranks)}; a loadable's addresses "
                          f"have at most 4 dimensions")
    return Support.yes("a second name for the same bytes (no layer)")


RULES = {"Conv": _accumulator_rule, "Gemm": _accumulator_rule, "MatMul": _accumulator_rule,
         "RequantizeMul": _requant_rule, "Requantize": _requant_rule, "QAddMul": _qadd_rule,
         "Relu": _relu_rule, "MaxPool": _maxpool_rule, "GlobalMaxPool": _maxpool_rule,
         "SumPool": _sum_pool_rule, "QLrn": _lrn_rule,
         "Concat": _concat_rule, "Flatten": _view_rule, "Reshape": _view_rule,
         "Squeeze": _view_rule, "Unsqueeze": _view_rule, "Identity": _view_rule}


VIEW_OPS = tuple(op for op, rule in RULES.items() if rule is _view_rule)


def views_only(nodes: list[Node]) -> dict[str, str]:
    """A region of views alone (Reshape, Flatten, ...) compiles to a loadable of no layers:
    the engine would do nothing but the copies in and out, so its nodes go to the CPU."""
    if any(n.op not in VIEW_OPS for n in nodes):
        return {}
    why = ("a region of views only (no layer for the engine: it would only copy the bytes "
           "in and out)")
    return {n.name: why for n in nodes}


def converter_of(graph: Graph, node: Node) -> Node | None:
    """The node converting `node`'s int32 result to int8 (its sole consumer), if any: what
    the accelerators' split_accumulators rule keeps in one region with it on nvdla."""
    return sole_consumer(graph, node.outputs[0])


__all__ = ["REQUANT_OPS", "RULES", "VIEW_OPS", "WIDE", "converter_of", "converter_problem",
           "views_only"]

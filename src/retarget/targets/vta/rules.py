"""Which integer ops the vta target runs, and why it refuses the others.

One rule per op: rule(target, node, graph) -> Support. A convolution or dense layer runs on the
GEMM core only together with the Requantize that takes its int32 accumulator to int8 on the ALU
(`fused_requantize`); the reasons name the node and what would make it work.
"""
from __future__ import annotations

from ...errors import TargetError
from ...ir.graph import Graph, Node
from ...ops.quantized import ACCUMULATING_OPS
from ...ops.registry import resolve_attrs
from ..accel.graph_layers import (  # noqa: F401
    conv_layer,
    dense_bias,
    fused_requantize,
    int8,
    operand_problem,
    requant_reason,
)
from ..base import Support, Target
from .lower import reason

MAX_KERNEL = 7          # largest convolution / pooling window the lowering handles


def _conv_rule(t: Target, node: Node, graph: Graph) -> Support:
    x, w = node.inputs[0], node.input(1)
    where = f"Conv '{node.name}'"
    why = operand_problem(t.name, node, 4, "2-D convolutions")
    if why:
        return Support.no(why)
    a = resolve_attrs(node)
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") and not a.get("pads"):
        return Support.no(f"{where}: auto_pad={a['auto_pad']} without explicit pads")
    if any(d != 1 for d in (a.get("dilations") or [1, 1])):
        return Support.no(f"{where}: dilation {a['dilations']} does not map to the load padding")
    kh, kw = w.type.shape[2:]
    if not (1 <= kh <= MAX_KERNEL and 1 <= kw <= MAX_KERNEL):
        return Support.no(f"{where}: kernel {kh}x{kw} outside 1..{MAX_KERNEL}")
    group, cin = int(a.get("group", 1)), x.type.shape[1]
    if group != 1:
        cout = w.type.shape[0]
        if not group == cin == cout:
            return Support.no(f"{where}: grouped convolution (group={group}, {cin}->{cout} "
                              f"channels) does not map to the GEMM core; kept on cpu")
    why = requant_reason(t.name, graph, node)
    if why:
        return Support.no(why)
    why = reason(conv_layer(node, fused_requantize(graph, node)), t.config)
    if why:
        return Support.no(why)
    c = t.config
    if cin % c.block_in:
        padded = -(-cin // c.block_in) * c.block_in
        waste = 100 * (padded - cin) / padded
        return Support.yes(f"{where}: {cin} input channels, not a multiple of BLOCK_IN="
                           f"{c.block_in}; padded ({waste:.0f}% of the input buffer wasted)")
    return Support.yes("conv2d on the GEMM core, requantised on the ALU")


def _gemm_rule(t: Target, node: Node, graph: Graph) -> Support:
    where = f"{node.op} '{node.name}'"
    why = operand_problem(t.name, node, 2, "2-D dense layers")
    if why:
        return Support.no(why)
    if node.op == "Gemm":
        at = resolve_attrs(node)
        if at["transA"] or at["alpha"] != 1.0 or at["beta"] != 1.0:
            return Support.no(f"{where}: transA/alpha/beta must be 0/1/1 (the quantiser folds them)")
    try:
        dense_bias(node)
    except TargetError as e:
        return Support.no(str(e))
    why = requant_reason(t.name, graph, node)
    return Support.no(why) if why else Support.yes("dense on the GEMM core, requantised on the ALU")


def _requantize_rule(t: Target, node: Node, graph: Graph) -> Support:
    src = graph.producers().get(node.inputs[0])
    if src is not None and src.op in ACCUMULATING_OPS:
        if fused_requantize(graph, src) is node and t.supports(src, graph).ok:
            return Support.yes(f"fused into {src.op} '{src.name}' (ALU: add, shift, clip)")
        return Support.no(f"requantises {src.op} '{src.name}', which runs on cpu")
    a = resolve_attrs(node)
    if int8(node.inputs[0]) and node.input(1) is None and a["dtype"] == "int8" \
            and a["rounding"] == "half_up":
        return Support.yes("int8 shift/clip on the ALU")
    return Support.no(f"Requantize '{node.name}': only int8 -> int8 or fused after a conv/dense")


def _qadd_rule(t: Target, node: Node, graph: Graph) -> Support:
    a, b = node.inputs
    at = resolve_attrs(node)
    if not (int8(a) and int8(b)) or a.type.shape != b.type.shape or a.type.rank != 4:
        return Support.no(f"QAdd '{node.name}': vta adds two int8 NCHW tensors of one shape; "
                          f"got {a.type} + {b.type}")
    if at["rounding"] != "half_up" or at["dtype"] != "int8":
        return Support.no(f"QAdd '{node.name}': rounds {at['rounding']} to {at['dtype']}")
    return Support.yes("residual add on the ALU")


def _relu_rule(t: Target, node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    if not int8(x) or x.type.rank != 4:
        return Support.no(f"Relu '{node.name}': vta runs int8 NCHW Relu; input is {x.type}")
    return Support.yes("max(x, 0) on the ALU")


def _pool_rule(t: Target, node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    where = f"{node.op} '{node.name}'"
    if not int8(x) or x.type.rank != 4:
        return Support.no(f"{where}: vta pools int8 NCHW tensors; input is {x.type} "
                          f"(float ops stay on cpu)")
    a = resolve_attrs(node)
    if any(v is not None and v is not node.outputs[0] and graph.consumers().get(v)
           for v in node.outputs[1:]):
        return Support.no(f"{where}: its Indices output is used")
    if a.get("ceil_mode") or any(d != 1 for d in (a.get("dilations") or [1, 1])):
        return Support.no(f"{where}: ceil_mode / dilation not supported on the ALU")
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return Support.no(f"{where}: auto_pad={a['auto_pad']}")
    kh, kw = a["kernel_shape"]
    if not (1 <= kh <= MAX_KERNEL and 1 <= kw <= MAX_KERNEL):
        return Support.no(f"{where}: window {kh}x{kw} outside 1..{MAX_KERNEL}")
    if node.op == "AveragePool":
        if (kh * kw) & (kh * kw - 1) or (any(a.get("pads") or []) and not a["count_include_pad"]):
            return Support.no(f"{where}: divisor {kh * kw} is not a power of two (the ALU "
                              f"divides by shifting)")
        if not t.lowering_has("avgpool"):
            return Support.no(f"{where}: no average-pool lowering for vta yet")
    if a.get("storage_order"):
        return Support.no(f"{where}: storage_order=1")
    return Support.yes(f"{'max' if node.op == 'MaxPool' else 'average'} pooling on the ALU")


RULES = {"Conv": _conv_rule, "Gemm": _gemm_rule, "MatMul": _gemm_rule,
         "Requantize": _requantize_rule, "QAdd": _qadd_rule, "Relu": _relu_rule,
         "MaxPool": _pool_rule, "AveragePool": _pool_rule}

"""Which integer ops the vta target runs, and why it refuses the others.

One rule per op: rule(target, node, graph) -> Support. A convolution or dense layer runs on the
GEMM core only together with the Requantize that takes its int32 accumulator to int8 on the ALU
(`fused_requantize`); the reasons name the node and what would make it work.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node
from ...ops.registry import resolve_attrs
from ..accel.graph_layers import (conv_layer, conv_problem, dense_problem, fused_requantize, int8, map_problem,
                                  qadd_problem, requant_reason,
                                  requantize_support)
from ..base import Support, Target
from .lower import conv_groups, reason

MAX_KERNEL = 7          # largest convolution / pooling window the lowering handles


def _conv_rule(t: Target, node: Node, graph: Graph) -> Support:
    x, w = node.inputs[0], node.input(1)
    where = f"Conv '{node.name}'"
    why = conv_problem(t.name, node)
    if why:
        return Support.no(why)
    a = resolve_attrs(node)
    if any(d != 1 for d in (a.get("dilations") or [1, 1])):
        return Support.no(f"{where}: dilation {a['dilations']} does not map to the load padding")
    kh, kw = w.type.shape[2:]
    if not (1 <= kh <= MAX_KERNEL and 1 <= kw <= MAX_KERNEL):
        return Support.no(f"{where}: kernel {kh}x{kw} outside 1..{MAX_KERNEL}")
    why = requant_reason(t.name, graph, node)
    if why:
        return Support.no(why)
    layer = conv_layer(node, fused_requantize(graph, node))
    why = reason(layer, t.config)
    if why:
        return Support.no(why)
    c, cin = t.config, x.type.shape[1]
    notes = []
    merged = conv_groups(layer, c)[3]
    if merged > 1:
        notes.append(f"groups={layer.groups} run {merged} at a time as block-diagonal weights "
                     f"({merged}x the useful MACs on the GEMM core)")
    if cin % c.block_in and layer.groups == 1:
        padded = -(-cin // c.block_in) * c.block_in
        waste = 100 * (padded - cin) / padded
        notes.append(f"{cin} input channels, not a multiple of BLOCK_IN={c.block_in}; padded "
                     f"({waste:.0f}% of the input buffer wasted)")
    if notes:
        return Support.yes(f"{where}: " + "; ".join(notes))
    return Support.yes("conv2d on the GEMM core, requantised on the ALU")


def _gemm_rule(t: Target, node: Node, graph: Graph) -> Support:
    why = dense_problem(t.name, graph, node, "dense layers (2-D, or tokens [..., K])")
    if why:
        return Support.no(why)
    x = node.inputs[0]
    src = graph.producers().get(x)
    if x.type.rank == 4 and src is not None and t.supports(src, graph).ok:
        # Tokens [B, H, W, K] are read as the (B*H*W) x K matrix of their row-major bytes; a
        # 4-D tensor made on vta is in the channel-blocked NCHW layout instead.
        return Support.no(f"{node.op} '{node.name}': its 4-D input comes from {src.op} "
                          f"'{src.name}' on vta, in the channel-blocked layout; a dense layer "
                          "over [B, H, W, K] tokens needs them row-major (a host relayout)")
    rows = x.type.numel // x.type.shape[-1]
    how = "dense on the GEMM core, requantised on the ALU"
    return Support.yes(how if x.type.rank == 2 else f"{how}, over the {rows} token rows")


def _requantize_rule(t: Target, node: Node, graph: Graph) -> Support:
    return requantize_support(t, node, graph, "ALU: add, shift, clip",
                              "int8 shift/clip on the ALU")


def _qadd_rule(t: Target, node: Node, graph: Graph) -> Support:
    why = qadd_problem(t.name, node)
    return Support.no(why) if why else Support.yes("residual add on the ALU")


def _relu_rule(t: Target, node: Node, graph: Graph) -> Support:
    why = map_problem(t.name, node)
    return Support.no(why) if why else Support.yes("max(x, 0) on the ALU")


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

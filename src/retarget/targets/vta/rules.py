"""Which integer ops the vta target runs, and why it refuses the others.

One rule per op: rule(target, node, graph) -> Support. A convolution or dense layer runs on the
GEMM core only together with the Requantize that takes its int32 accumulator to int8 on the ALU
(`fused_requantize`); the reasons name the node and what would make it work.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node
from ...ops.registry import resolve_attrs
from ..accel.graph_layers import (conv_layer, conv_problem, dense_problem, fused_requantize, int8,
                                  map_problem, qadd_problem, requant_of, requant_reason,
                                  requantize_support)
from ..base import Support, Target
from .lower import Dense, model_cycles, reason
from .lower.schedule import conv_geom

MAX_KERNEL = 7          # largest convolution / pooling window the lowering handles


def conv_rule(t: Target, node: Node, graph: Graph, kernel_limit: bool = True) -> Support:
    """Whether vta runs Conv `node`. kernel_limit=False asks whether it would, but for its
    window size: window packing (window_packing.py) can turn a larger window into channels."""
    x, w = node.inputs[0], node.input(1)
    where = f"Conv '{node.name}'"
    why = conv_problem(t.name, node)
    if why:
        return Support.no(why)
    a = resolve_attrs(node)
    if any(d != 1 for d in (a.get("dilations") or [1, 1])):
        return Support.no(f"{where}: dilation {a['dilations']} does not map to the load padding")
    kh, kw = w.type.shape[2:]
    if kernel_limit and not (1 <= kh <= MAX_KERNEL and 1 <= kw <= MAX_KERNEL):
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
    merged = conv_geom(layer, c).merged
    if merged > 1:
        notes.append(f"groups={layer.groups} run {merged} at a time as block-diagonal weights "
                     f"({merged}x the useful MACs on the GEMM core)")
    if layer.groups > 1:
        vta_us, host_us = grouped_conv_times(layer, c)
        timing = (f"{vta_us:.1f} us on vta's cycle model against {host_us:.1f} us on the host "
                  f"at host_gmacs={c.host_gmacs:g} G MAC/s")
        if vta_us > host_us:
            return Support.no(f"{where}: groups={layer.groups}: {timing}; the host is faster" +
                              (f" ({notes[0]} on vta)" if notes else ""))
        notes.append(timing)
    if cin % c.block_in and layer.groups == 1:
        padded = -(-cin // c.block_in) * c.block_in
        waste = 100 * (padded - cin) / padded
        notes.append(f"{cin} input channels, not a multiple of BLOCK_IN={c.block_in}; padded "
                     f"({waste:.0f}% of the input buffer wasted)")
    if notes:
        return Support.yes(f"{where}: " + "; ".join(notes))
    return Support.yes("conv2d on the GEMM core, requantised on the ALU")


def grouped_conv_times(layer, cfg) -> tuple[float, float]:
    """A grouped conv's time on vta (the full cycle model of its chosen schedule; a mapping
    that wastes the GEMM core's MACs shows there) and on the host (its useful MACs at
    cfg.host_gmacs), in microseconds: which one runs it is the cycle model's choice."""
    cycles = model_cycles(layer, cfg)
    vta_us = float("inf") if cycles is None else cycles / cfg.clock_mhz
    return vta_us, layer.macs / (cfg.host_gmacs * 1e3)


def _on_vta_operand(t: Target, node: Node, graph: Graph, operands) -> str | None:
    """Why an operand that the host must lay out (tokens, weights of a product) cannot come
    from vta itself: what vta makes stays in its channel-blocked layout."""
    producers = graph.producers()
    for v in operands:
        src = producers.get(v)
        if src is not None and t.supports(src, graph).ok:
            return (f"{node.op} '{node.name}': its input {v.name!r} comes from {src.op} "
                    f"'{src.name}' on vta, in the channel-blocked layout; this product reads it "
                    "laid out by the host (a relayout)")
    return None


def _activation_matmul_rule(t: Target, node: Node, graph: Graph) -> Support:
    """A . B of two int8 activations, batched over leading dims (attention's Q . K^T, A . V):
    one dense layer per slice, B laid out as weights by the host."""
    a, b = node.inputs[0], node.inputs[1]
    where = f"MatMul '{node.name}'"
    if not (int8(a) and int8(b)):
        return Support.no(f"{where}: vta multiplies int8 operands, got {a.type} x {b.type}")
    sa, sb = a.type.shape, b.type.shape
    if len(sa) < 2 or len(sa) != len(sb) or sa[:-2] != sb[:-2]:
        return Support.no(f"{where}: operands {list(sa)} x {list(sb)} must share their leading "
                          "(batch, head) dimensions, without broadcasting")
    why = _on_vta_operand(t, node, graph, (a, b)) or requant_reason(t.name, graph, node)
    if why:
        return Support.no(why)
    n, k, m = int(sa[-2]), int(sa[-1]), int(sb[-1])
    if n % t.config.batch:
        return Support.no(f"{where}: {n} rows per slice are not whole batch blocks of "
                          f"BATCH={t.config.batch}")
    why = reason(Dense(node.name, n, k, m, requant_of(fused_requantize(graph, node))), t.config)
    if why:
        return Support.no(why)
    slices = a.type.numel // (n * k)
    return Support.yes(f"activation x activation product on the GEMM core: {slices} slice(s) "
                       f"of {n}x{k} . {k}x{m}, the second operand laid out as weights by the host")


def _gemm_rule(t: Target, node: Node, graph: Graph) -> Support:
    w = node.input(1)
    if node.op == "MatMul" and w is not None and not w.is_const:
        return _activation_matmul_rule(t, node, graph)
    why = dense_problem(t.name, graph, node, "dense layers (2-D, or tokens [..., K])",
                        token_ranks=(3, 4))
    if why:
        return Support.no(why)
    x = node.inputs[0]
    # Tokens [B, H, W, K] are read as the (B*H*W) x K matrix of their row-major bytes; a 4-D
    # tensor made on vta is in the channel-blocked NCHW layout instead.
    why = _on_vta_operand(t, node, graph, (x,)) if x.type.rank == 4 else None
    if why:
        return Support.no(why)
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


RULES = {"Conv": conv_rule, "Gemm": _gemm_rule, "MatMul": _gemm_rule,
         "Requantize": _requantize_rule, "QAdd": _qadd_rule, "Relu": _relu_rule,
         "MaxPool": _pool_rule, "AveragePool": _pool_rule}

"""Which integer ops the dnnvm overlay runs, and why it refuses the others.

The overlay runs what the paper's ISA has: convolutions (any kernel up to max_kernel, strides,
padding, depthwise) with their requantisation and ReLU folded into the CONV, max pooling,
element-wise add, Requantize / Relu alone (on the POOL engine), and concatenation and flatten
folded into SAVE / LOAD addressing. Dense layers stay on the CPU as in the paper unless the
config's `offload_fc` is set.
"""
from __future__ import annotations

from ...errors import TargetError
from ...ir.graph import Graph, Node
from ...ops.registry import resolve_attrs
from ..accel.graph_layers import (conv_layer, conv_problem, dense_problem, fused_requantize, int8, map_problem,
                                  qadd_problem, requant_reason,
                                  requantize_support)
from ..base import Support, Target
from .lower import MAX_PAD, eq5_tile
from .region import pool_pads


def _window_problem(t: Target, where: str, kernel, stride, pads, dilations) -> str | None:
    kh, kw = kernel
    if any(d != 1 for d in dilations):
        return f"{where}: dilation {list(dilations)} is not in the CONV/POOL instruction"
    if not (1 <= kh <= t.config.max_kernel and 1 <= kw <= t.config.max_kernel):
        return f"{where}: kernel {kh}x{kw} outside 1..{t.config.max_kernel}"
    if not all(1 <= s <= 15 for s in stride):
        return f"{where}: stride {list(stride)} outside 1..15 (4-bit fields)"
    pt, pl, pb, pr = pads
    if max(pads) > MAX_PAD or max(pt, pb) >= kh or max(pl, pr) >= kw:
        return f"{where}: pads {list(pads)} must be below the kernel and at most {MAX_PAD}"
    return None


def _conv_rule(t: Target, node: Node, graph: Graph) -> Support:
    where = f"Conv '{node.name}'"
    why = conv_problem(t.name, node)
    if why:
        return Support.no(why)
    a = resolve_attrs(node)
    x, w = node.inputs[0], node.inputs[1]
    pads = list(a.get("pads") or [0, 0, 0, 0])
    why = _window_problem(t, where, w.type.shape[2:], a.get("strides") or [1, 1],
                          (pads[0], pads[1], pads[2], pads[3]), a.get("dilations") or [1, 1])
    if why:
        return Support.no(why)
    group, cin, cout = int(a.get("group", 1)), x.type.shape[1], w.type.shape[0]
    if group != 1 and not group == cin == cout:
        return Support.no(f"{where}: grouped convolution (group={group}, {cin}->{cout} "
                          f"channels) is neither dense nor depthwise; the CONV engine runs "
                          f"those two only")
    why = requant_reason(t.name, graph, node)
    if why:
        return Support.no(why)
    layer = conv_layer(node, fused_requantize(graph, node))
    try:
        eq5_tile(layer, t.config)
    except TargetError as e:          # no tile fits: the buffer is named in the message
        return Support.no(str(e))
    return Support.yes("conv on the CONV engine, bias / requantise / ReLU folded in")


def _dense_rule(t: Target, node: Node, graph: Graph) -> Support:
    if not t.config.offload_fc:
        return Support.no(f"{node.op} '{node.name}': fully-connected layers run on the CPU (as "
                          f"in the DNNVM paper; set offload_fc to run them as whole-map "
                          f"convolutions)")
    why = dense_problem(t.name, graph, node, "dense layers")
    return Support.no(why) if why else Support.yes("dense as a whole-map convolution")


def _requantize_rule(t: Target, node: Node, graph: Graph) -> Support:
    return requantize_support(t, node, graph, "the CONV's requantise",
                              "int8 shift / clip on the POOL engine (a 1x1 average)", rank=4)


def _relu_rule(t: Target, node: Node, graph: Graph) -> Support:
    why = map_problem(t.name, node)
    return Support.no(why) if why else Support.yes("max(x, 0) on the POOL engine")


def _qadd_rule(t: Target, node: Node, graph: Graph) -> Support:
    why = qadd_problem(t.name, node)
    if why:
        return Support.no(why)
    at = resolve_attrs(node)
    if not (at["shift_a"] <= 31 and at["shift_b"] <= 31 and -64 <= at["out_shift"] <= 63):
        return Support.no(f"QAdd '{node.name}': shifts outside the ELEW fields")
    return Support.yes("element-wise add on the MISC engine")


def _maxpool_rule(t: Target, node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    where = f"MaxPool '{node.name}'"
    if not int8(x) or x.type.rank != 4:
        return Support.no(f"{where}: dnnvm pools int8 maps; input is {x.type}")
    a = resolve_attrs(node)
    if any(v is not None and graph.consumers().get(v) for v in node.outputs[1:]):
        return Support.no(f"{where}: its Indices output is used")
    if a.get("storage_order"):
        return Support.no(f"{where}: storage_order is not in the POOL instruction")
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return Support.no(f"{where}: auto_pad={a['auto_pad']}")
    why = _window_problem(t, where, a["kernel_shape"], a.get("strides") or [1, 1],
                          pool_pads(node), a.get("dilations") or [1, 1])
    return Support.no(why) if why else Support.yes(
        "max pooling on the POOL engine" + (" (ceil_mode as extra padding)"
                                            if a.get("ceil_mode") else ""))


def _concat_rule(t: Target, node: Node, graph: Graph) -> Support:
    a = resolve_attrs(node)
    y = node.outputs[0]
    if y.type is None or y.type.rank != 4 or a["axis"] not in (1, -3) \
            or not all(int8(v) for v in node.inputs):
        return Support.no(f"Concat '{node.name}': dnnvm folds int8 channel concatenation "
                          f"(axis 1) into SAVE addressing; got axis {a['axis']}, {y.type}")
    return Support.yes("folded into its producers' SAVEs (channel offset, pixel stride)")


def _flatten_rule(t: Target, node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    uses = graph.consumers().get(node.outputs[0], [])
    if not (t.config.offload_fc and int8(x) and x.type.rank == 4 and len(uses) == 1
            and uses[0].op in ("Gemm", "MatMul") and node.outputs[0] not in graph.outputs):
        return Support.no(f"Flatten '{node.name}': folded only into an offloaded dense layer "
                          f"that is its one consumer")
    return Support.yes("a view: the dense layer's weights are re-ordered to the map's layout")


RULES = {"Conv": _conv_rule, "Gemm": _dense_rule, "MatMul": _dense_rule,
         "Requantize": _requantize_rule, "Relu": _relu_rule, "QAdd": _qadd_rule,
         "MaxPool": _maxpool_rule, "Concat": _concat_rule, "Flatten": _flatten_rule}

__all__ = ["RULES"]

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
from ...ops.quantized import ACCUMULATING_OPS
from ...ops.registry import resolve_attrs
from ..accel.graph_layers import (conv_layer, dense_bias, fused_requantize, int8,
                                  operand_problem, requant_reason)
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
    why = operand_problem(t.name, node, 4, "2-D convolutions")
    if why:
        return Support.no(why)
    a = resolve_attrs(node)
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") and not a.get("pads"):
        return Support.no(f"{where}: auto_pad={a['auto_pad']} without explicit pads")
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
    where = f"{node.op} '{node.name}'"
    if not t.config.offload_fc:
        return Support.no(f"{where}: fully-connected layers run on the CPU (as in the DNNVM "
                          f"paper; set offload_fc to run them as whole-map convolutions)")
    why = operand_problem(t.name, node, 2, "dense layers")
    if why:
        return Support.no(why)
    if node.op == "Gemm":
        at = resolve_attrs(node)
        if at["transA"] or at["alpha"] != 1.0 or at["beta"] != 1.0:
            return Support.no(f"{where}: transA/alpha/beta must be 0/1/1")
    try:
        dense_bias(node)
    except TargetError as e:
        return Support.no(str(e))
    why = requant_reason(t.name, graph, node)
    return Support.no(why) if why else Support.yes("dense as a whole-map convolution")


def _requantize_rule(t: Target, node: Node, graph: Graph) -> Support:
    src = graph.producers().get(node.inputs[0])
    if src is not None and src.op in ACCUMULATING_OPS:
        if fused_requantize(graph, src) is node and t.supports(src, graph).ok:
            return Support.yes(f"folded into {src.op} '{src.name}'")
        return Support.no(f"requantises {src.op} '{src.name}', which runs on cpu")
    a = resolve_attrs(node)
    if int8(node.inputs[0]) and node.inputs[0].type.rank == 4 and node.input(1) is None \
            and a["dtype"] == "int8" and a["rounding"] == "half_up":
        return Support.yes("int8 shift / clip on the POOL engine (a 1x1 average)")
    return Support.no(f"Requantize '{node.name}': only int8 NHWC maps, one shift, half-up")


def _relu_rule(t: Target, node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    if not int8(x) or x.type.rank != 4:
        return Support.no(f"Relu '{node.name}': dnnvm runs int8 maps; input is {x.type}")
    return Support.yes("max(x, 0) on the POOL engine")


def _qadd_rule(t: Target, node: Node, graph: Graph) -> Support:
    a, b = node.inputs
    at = resolve_attrs(node)
    if not (int8(a) and int8(b)) or a.type.shape != b.type.shape or a.type.rank != 4:
        return Support.no(f"QAdd '{node.name}': dnnvm adds two int8 maps of one shape; got "
                          f"{a.type} + {b.type}")
    if at["rounding"] != "half_up" or at["dtype"] != "int8":
        return Support.no(f"QAdd '{node.name}': rounds {at['rounding']} to {at['dtype']}")
    if not (0 <= at["shift_a"] <= 31 and 0 <= at["shift_b"] <= 31
            and -64 <= at["out_shift"] <= 63):
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

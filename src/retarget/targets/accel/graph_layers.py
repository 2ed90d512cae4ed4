"""Quantised-graph nodes as the shared layer descriptions, and the checks every integer
accelerator makes before taking a node: int8 operands, constant weights, and a conv/dense whose
int32 accumulator goes to exactly one per-tensor, half-up Requantize (fused into it on chip)."""
from __future__ import annotations

from typing import Callable, Collection

import numpy as np

from ...errors import TargetError
from ...ir.graph import Graph, Node, Value
from ...ops.quantized import ACCUMULATING_OPS
from ...ops.registry import resolve_attrs
from ..base import Support
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


# Ops that convert between float and int8 at the edges of an integer graph (both number
# formats); the host runs them.
EDGE_OPS = ("QuantizeP2", "DequantizeP2", "QuantizeLinear", "DequantizeLinear")


def refuse_unknown(target: str, node: Node, unit: str) -> Support:
    """Why an integer accelerator without a rule for `node`'s op refuses it: an edge
    conversion, a float op, or simply no `unit` (instruction, engine) for it."""
    if node.op in EDGE_OPS:
        return Support.no(f"{node.op} '{node.name}' converts float <-> int8 at the edge of the "
                          f"integer graph; the host does it")
    if any(v is not None and v.type is not None and v.type.dtype.startswith("float")
           for v in node.inputs + node.outputs):
        return Support.no(f"{node.op} '{node.name}' is a float op; {target} runs int8")
    return Support.no(f"{target} has no {unit} for {node.op}")


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


def operand_problem(target: str, node: Node, rank: int | tuple[int, ...], what: str
                    ) -> str | None:
    """Why the GEMM core cannot take `node`'s operands (None: it can): an int8 input of `rank`
    (or one of several), constant int8 weights, an optional constant int32 bias."""
    x, w, b = node.inputs[0], node.input(1), node.input(2)
    where = f"{node.op} '{node.name}'"
    ranks = rank if isinstance(rank, tuple) else (rank,)
    if not int8(x) or x.type.rank not in ranks:
        return f"{where}: {target} runs int8 {what}; input is {x.type}"
    if not (int8(w) and w.is_const):
        return f"{where}: weights must be a constant int8 tensor"
    if b is not None and not (b.is_const and b.type.dtype == "int32"):
        return f"{where}: bias must be a constant int32 tensor"
    return None


def conv_problem(target: str, node: Node) -> str | None:
    """Why a Conv's operands or padding mode rule it out (None: look at its geometry next)."""
    why = operand_problem(target, node, 4, "2-D convolutions")
    if why:
        return why
    a = resolve_attrs(node)
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") and not a.get("pads"):
        return f"Conv '{node.name}': auto_pad={a['auto_pad']} without explicit pads"
    return None


def dense_problem(target: str, graph: Graph, node: Node, what: str,
                  token_ranks: tuple[int, ...] = ()) -> str | None:
    """Why a Gemm / MatMul cannot run as an int8 dense layer with one bias per output feature
    and a fused Requantize (None: it can). A target that reads tokens, [B, N, K] or
    [B, H, W, K] by a constant [K, M] weight as the dense layer over the B * N (B * H * W) rows
    (their bytes are the matrix's), names those ranks in `token_ranks`."""
    w = node.input(1)
    if node.op == "MatMul" and w is not None and not w.is_const:
        return (f"MatMul '{node.name}': both operands are computed at run time (an activation "
                f"x activation product such as attention's); {target}'s dense layers take a "
                f"constant weight")
    why = operand_problem(target, node, (2,) + token_ranks if node.op == "MatMul" else 2, what)
    if why:
        return why
    if node.inputs[1].type.rank != 2:
        return (f"{node.op} '{node.name}': the weight must be a 2-D matrix, got "
                f"{node.inputs[1].type}")
    if node.op == "Gemm":
        at = resolve_attrs(node)
        if at["transA"] or at["alpha"] != 1.0 or at["beta"] != 1.0:
            return (f"{node.op} '{node.name}': transA/alpha/beta must be 0/1/1 (the quantiser "
                    f"folds them)")
    try:
        dense_bias(node)
    except TargetError as e:
        return str(e)
    return requant_reason(target, graph, node)


def requantize_support(target, node: Node, graph: Graph, fused_how: str, alone_how: str,
                       rank: int | None = None) -> Support:
    """A Requantize of a conv/dense accumulator runs where its producer runs, folded into it
    (`fused_how` says how); any other runs alone (`alone_how`) when it is int8 -> int8 (of
    `rank`, if given) with one shift, rounding half up."""
    src = graph.producers().get(node.inputs[0])
    if src is not None and src.op in ACCUMULATING_OPS:
        if fused_requantize(graph, src) is node and target.supports(src, graph).ok:
            return Support.yes(f"fused into {src.op} '{src.name}' ({fused_how})")
        return Support.no(f"requantises {src.op} '{src.name}', which runs on cpu")
    x, a = node.inputs[0], resolve_attrs(node)
    if int8(x) and (rank is None or x.type.rank == rank) and node.input(1) is None \
            and a["dtype"] == "int8" and a["rounding"] == "half_up":
        return Support.yes(alone_how)
    return Support.no(f"Requantize '{node.name}': only int8 -> int8 (one shift, half up"
                      f"{f', rank {rank}' if rank else ''}) or fused after a conv/dense")


def map_problem(target: str, node: Node) -> str | None:
    """Why `node`'s data inputs are not int8 NCHW maps of one shape (None: they are)."""
    xs = [v for v in node.inputs if v is not None and not v.is_const]
    if not all(int8(v) and v.type.rank == 4 for v in xs) or \
            len({tuple(v.type.shape) for v in xs}) > 1:
        return (f"{node.op} '{node.name}': {target} runs int8 NCHW maps (of one shape); got "
                f"{' + '.join(str(v.type) for v in xs)}")
    return None


def qadd_problem(target: str, node: Node) -> str | None:
    """Why a QAdd cannot be the accelerator's element-wise add (None: it can)."""
    why = map_problem(target, node)
    if why:
        return why
    at = resolve_attrs(node)
    if at["rounding"] != "half_up" or at["dtype"] != "int8":
        return f"QAdd '{node.name}': rounds {at['rounding']} to {at['dtype']}"
    return None


def region_requantize_map(region) -> dict[int, Node]:
    """id(conv / dense node) -> the Requantize fused into it (both in the region)."""
    consumers: dict[int, list[Node]] = {}
    for n in region.nodes:
        for v in n.inputs:
            if v is not None:
                consumers.setdefault(id(v), []).append(n)
    fused = {}
    for n in region.nodes:
        if n.op in ACCUMULATING_OPS:
            uses = consumers.get(id(n.outputs[0]), [])
            if len(uses) != 1 or uses[0].op != "Requantize":
                raise TargetError(f"{n.op} '{n.name}': its Requantize is not in region "
                                  f"{region.name!r}")
            fused[id(n)] = uses[0]
    return fused


def split_accumulators(target: str, nodes: list[Node], graph: Graph, *,
                       wide: Collection[str] = ACCUMULATING_OPS,
                       requant_ops: Collection[str] = ("Requantize",),
                       requant_of: Callable[[Graph, Node], Node | None] | None = None,
                       stage: str = "Requantize") -> dict[str, str]:
    """Nodes of a region that must go to the CPU because an op with an int32 result (`wide`:
    conv/dense by default) and the node requantising it (`requant_of`, default the fused
    Requantize; its ops `requant_ops`, called `stage` in the reason) would be split across it:
    the accelerator hands only int8 to the host."""
    requant_of = requant_of or fused_requantize
    here = {id(n) for n in nodes}
    producers = graph.producers()
    refused = {}
    for n in nodes:
        if n.op in wide:
            rq = requant_of(graph, n)
            if rq is None or id(rq) not in here:
                refused[n.name] = (f"{n.op} '{n.name}': its {stage} runs on cpu, and "
                                   f"{target} cannot hand an int32 accumulator to the host")
        elif n.op in requant_ops:
            src = producers.get(n.inputs[0])
            if src is not None and src.op in wide and id(src) not in here:
                refused[n.name] = f"requantises {src.op} '{src.name}', which runs on cpu"
    return refused


__all__ = ["EDGE_OPS", "refuse_unknown", "conv_layer", "conv_problem", "dense_bias", "dense_problem", "dense_weight",
           "fused_requantize", "int8", "map_problem", "operand_problem", "qadd_problem",
           "region_requantize_map", "requant_of", "requant_reason", "requantize_support",
           "sole_consumer", "split_accumulators"]

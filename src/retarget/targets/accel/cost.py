"""What a node costs on an instruction-stream accelerator, for placement across devices.

`--placement cheapest` (docs/partitioning.md, "Several devices") asks every device what each
node would cost it. An accelerator with a cycle model answers by lowering the smallest region
that holds the node (the node and the Requantize fused into it: a conv's int32 accumulator
never leaves the accelerator) and timing that stream: the same model that chooses tiles and
fusion, so the placement and the `retarget report` figures agree. The unit's loads of its
inputs and stores of its outputs are part of its stream; the host copies between devices are
not priced (adjacent nodes on one device merge into one region and keep their tensors there).
"""
from __future__ import annotations

from typing import ClassVar

from ...errors import RetargetError
from ...ir.graph import Graph, Node
from ...ops.quantized import ACCUMULATING_OPS
from ..base import Region, external_inputs
from .graph_layers import fused_requantize

# (id of graph, names of the unit's nodes) -> seconds or None: one compile's prices
CostCache = dict[tuple[int, tuple[str, ...]], "float | None"]


def layer_unit(node: Node, graph: Graph) -> list[Node]:
    """The smallest set of nodes that lowers as one unit with `node`: an accumulating op with
    its fused Requantize (seen from either of them), or the node alone."""
    if node.op == "Requantize":
        src = graph.producers().get(node.inputs[0])
        if src is not None and src.op in ACCUMULATING_OPS and fused_requantize(graph, src) is node:
            return [src, node]
    if node.op in ACCUMULATING_OPS:
        rq = fused_requantize(graph, node)
        return [node] if rq is None else [node, rq]
    return [node]


def unit_region(nodes: list[Node], target: str) -> Region:
    """`nodes` (in graph order) as a region of their own: inputs what they read from outside
    (constants stay inside), outputs the last node's."""
    return Region(f"{target}_cost", target, list(nodes), external_inputs(nodes),
                  list(nodes[-1].outputs))


class StreamCost:
    """Target mixin: `estimate_cost` and `estimate_node_cost` from the target's cycle model
    (its kernels' `timing()`, targets/accel/kernel.py)."""

    has_cost_model: ClassVar[bool] = True

    def estimate_cost(self, region: Region) -> float | None:
        """Modelled seconds of `region` lowered for this target."""
        t = self.lower(region).timing()
        return t.total_cycles / (t.config.clock_mhz * 1e6)

    def estimate_node_cost(self, node: Node, graph: Graph,
                           cache: CostCache | None = None) -> float | None:
        """Modelled seconds of the unit holding `node` on this target; None when the target
        refuses a node of it or cannot lower it alone."""
        unit = layer_unit(node, graph)
        key = (id(graph), tuple(n.name for n in unit))
        if cache is not None and key in cache:
            return cache[key]
        cost = None
        if all(self.supports(n, graph).ok for n in unit) and not self.check_region(unit, graph):
            try:
                cost = self.estimate_cost(unit_region(unit, self.name))
            except RetargetError:
                cost = None      # not lowerable on its own: the caller says so
        if cache is not None:
            cache[key] = cost
        return cost


__all__ = ["CostCache", "StreamCost", "layer_unit", "unit_region"]

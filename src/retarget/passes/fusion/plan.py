"""Fusion for one offloaded region of a compile: build the target's graph, enumerate, choose."""
from __future__ import annotations

from dataclasses import dataclass

from ...targets.fusion import FusionGraph
from ..partition import FusedGroup
from .match import find_embeddings
from .strategy import FusionPlan, choose


@dataclass(slots=True)
class RegionFusion:
    """The chosen plan with the graph its vertex indices refer to."""
    graph: FusionGraph
    plan: FusionPlan

    def groups(self) -> list[tuple[str, tuple[str, ...]]]:
        """(template, member vertex names) of each fused group, for Target.lower."""
        names = [v.name for v in self.graph.vertices]
        return [(g.template, tuple(names[m] for m in g.members)) for g in self.plan.groups]

    def report(self, region: str) -> list[FusedGroup]:
        """The placement report's lines for the fused groups of `region`."""
        return [FusedGroup(region, template, members, g.cycles, g.alone_cycles)
                for (template, members), g in zip(self.groups(), self.plan.groups)]


def plan_region(target, region, strategy: str) -> RegionFusion:
    """Enumerate `target`'s templates on `region` and choose groups with `strategy`."""
    graph = target.fusion_graph(region)
    found = find_embeddings(graph, target.fusion_templates)
    plan = choose(graph, found, lambda members: target.fusion_cost(graph, members), strategy,
                  stream=(lambda units: target.fusion_stream_cost(graph, units))
                  if target.has_stream_cost else None)
    return RegionFusion(graph, plan)


__all__ = ["RegionFusion", "plan_region"]

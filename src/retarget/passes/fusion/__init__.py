"""Fusion as a search (the DNNVM paper, Secs. IV-V): templates a target declares, every
embedding of every template found by subgraph isomorphism, and a strategy that picks which
embeddings become fused groups.

    g = target.fusion_graph(region)                         # layers as labelled vertices
    found = find_embeddings(g, target.fusion_templates)     # Algorithm 1
    plan = choose(g, found, cost, "optimized")              # Algorithm 2 (or "greedy", "none")
    kernel = target.lower(region, plan)                     # each group lowered as one unit

`cost(members)` is the target's cycle model of a group (or of one layer) lowered alone; None
means the group does not fit the hardware. Everything here is target-neutral.
"""
from ...targets.fusion import FusionGraph, Template, Vertex
from .match import Embedding, find_embeddings
from .plan import RegionFusion, plan_region
from .strategy import STRATEGIES, FusionPlan, Group, choose

__all__ = ["Embedding", "FusionGraph", "FusionPlan", "Group", "RegionFusion", "STRATEGIES",
           "Template", "Vertex", "choose", "find_embeddings", "plan_region"]

"""Graph passes: functions Graph -> Graph (or analyses of one). `GRAPH_PASSES` names the
rewrites a target may ask for before partitioning (`Target.graph_passes`); `rewrite_for` runs
them and then the target's own `prepare` (compiler.rewrite, and the host code generation), so
targets state what they need as data and never import a pass."""
from __future__ import annotations

from typing import Callable

from ..errors import TargetError
from ..ir.graph import Graph
from .explicit_padding import explicit_padding
from .fold_batchnorm import fold_batchnorm
from .infer_shapes import infer_shapes

GRAPH_PASSES: dict[str, Callable[[Graph], Graph]] = {
    "fold_batchnorm": fold_batchnorm,
    "explicit_padding": explicit_padding,
}



def rewrite_for(graph: Graph, target) -> Graph:
    """`graph` (typed, in `target`'s number format) in the form `target`'s rules read: the
    shared passes it declares (`target.graph_passes()`, in order), then its own
    `target.prepare`; typed again when anything changed, and sorted."""
    rewritten = graph
    for name in target.graph_passes():
        if name not in GRAPH_PASSES:
            raise TargetError(f"target {target.name!r} asks for graph pass {name!r}; known "
                              f"passes: {', '.join(sorted(GRAPH_PASSES))}")
        rewritten = GRAPH_PASSES[name](rewritten)
    rewritten = target.prepare(rewritten)
    if rewritten is not graph:
        rewritten = infer_shapes(rewritten)
    rewritten.toposort()
    return rewritten


__all__ = ["GRAPH_PASSES", "rewrite_for"]

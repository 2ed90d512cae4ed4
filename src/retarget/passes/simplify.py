"""simplify: the clean-up pipeline every imported graph goes through, run to a fixpoint.

Each round folds constants (typing nodes as it goes), removes pass-through nodes, puts back
the single ops exporters write as chains (recompose.py: LayerNorm, GELU) and removes dead
code; it stops when a round changes nothing. Shape inference runs last so that every value
is typed, or a ShapeError names the node that cannot be.
"""
from __future__ import annotations

from ..ir.graph import Graph
from .dce import eliminate_dead_code_inplace
from .fold_constants import fold_constants_inplace
from .infer_shapes import infer_shapes
from .recompose import recompose_inplace
from .remove_identities import remove_identities_inplace

# Each round can only shrink the graph, so this bound is never reached on a sane graph; it
# guards against a pass bug turning into an endless loop.
MAX_ROUNDS = 20


def simplify(graph: Graph) -> Graph:
    """A simplified, fully typed copy of `graph`; graph input and output names are preserved."""
    g = graph.copy()
    for _ in range(MAX_ROUNDS):
        changed = fold_constants_inplace(g)
        changed |= remove_identities_inplace(g)
        changed |= recompose_inplace(g)
        changed |= eliminate_dead_code_inplace(g)
        if not changed:
            break
    return infer_shapes(g)

"""Graph passes: functions Graph -> Graph (or analyses of one). `GRAPH_PASSES` names the
rewrites a target may ask for before partitioning (`Target.graph_passes`); compiler.prepare
runs them, so targets state what they need as data and never import a pass."""
from __future__ import annotations

from typing import Callable

from ..ir.graph import Graph
from .explicit_padding import explicit_padding
from .fold_batchnorm import fold_batchnorm

GRAPH_PASSES: dict[str, Callable[[Graph], Graph]] = {
    "fold_batchnorm": fold_batchnorm,
    "explicit_padding": explicit_padding,
}

__all__ = ["GRAPH_PASSES"]

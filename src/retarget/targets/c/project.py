"""Generated C for a whole (sub)graph, float or int8, without compiling a Module: what another
target uses when it hands a region to the host CPU (an accelerator deployment's int8 layers
that the accelerator does not run).

    project = generate_c(rewrite_for(graph, CTarget()))   # every node as C, or TargetError
    project.sources["model.c"], project.weights     # model.h / model.c / main.c / Makefile
    project.write("out/")                           # the project directory, weights.bin too

The graph has been through the `c` target's rewrite (its declared passes, BatchNorm folding
and explicit padding: `passes.rewrite_for(graph, CTarget(config))`) and becomes one region: float convs and dense layers on the float routines, integer ops on
the int8 routines (bit-exact with the integer reference), everything else as printed loop
nests. The C is exactly what `retarget.compile(graph, "c")` builds for a graph that runs
entirely on C.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...errors import TargetError
from ...ir.graph import Graph
from ..aot.build import write_project
from ..aot.lower import lower_region
from ..aot.program import Program
from ..base import Region
from .config import CConfig
from .emit import sources
from .target import CTarget


@dataclass(frozen=True)
class CProject:
    """A region as a C project: its Program, the source files and the weights blob."""
    program: Program
    sources: Mapping[str, str]
    weights: np.ndarray

    def write(self, directory: str | Path) -> Path:
        """Write the sources and weights.bin into `directory` (`make` builds them there)."""
        path = Path(directory)
        write_project(path, self.sources, self.weights)
        return path


def generate_c(graph: Graph, config: CConfig | Mapping[str, Any] | None = None,
               name: str = "c_0") -> CProject:
    """Every node of `graph` (typed; float, or quantised by retarget.quantize; already
    rewritten for the c target, passes.rewrite_for) as one C project; TargetError naming the
    nodes the c target cannot run."""
    cfg = config if isinstance(config, CConfig) else CConfig(**dict(config or {}))
    target = CTarget(cfg)
    g = graph
    g.toposort()
    refused = [(n.name, n.op, s.reason) for n in g.nodes
               if not (s := target.supports(n, g)).ok]
    if refused:
        raise TargetError(f"generate_c: {len(refused)} nodes cannot run as C, e.g. "
                          + "; ".join(f"{op} {nm!r}: {why}" for nm, op, why in refused[:3]))
    lowering = target.op_lowering()
    region = Region(name, "c", list(g.nodes), list(g.inputs), list(g.outputs))
    program, blob = lower_region(region, lowering, target.schedule, cfg.mode, target.fuse)
    return CProject(program, sources(program), blob)


__all__ = ["CProject", "generate_c"]

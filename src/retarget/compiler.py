"""compile(graph, target) -> Module: the whole pipeline as one list of steps.

The idiom: placement overrides and size rules are keyword arguments of `compile`, because they
are properties of one compilation, not of the target or the graph:

    m = retarget.compile(graph, "toy")                               # default config
    m = retarget.compile(graph, "toy:small", cpu_nodes=["fc", "stem/*"])  # force nodes to cpu
    m = retarget.compile(graph, "my_target.toml", min_region_macs=0)  # offload every region
    m = retarget.compile(graph, "toy", config={"memory_bytes": 1 << 22})  # override a field
    print(m.report)                                                   # where every node runs
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import RetargetError
from .ir.graph import Graph
from .passes.infer_shapes import infer_shapes
from .passes.partition import partition
from .runtime.module import Module
from .targets.base import Target
from .targets.registry import get_target


def compile(graph: "Graph | str | Path", target: "str | Path | Target" = "cpu", *,
            cpu_nodes: Iterable[str] = (), min_region_macs: int | None = None,
            config: Mapping[str, Any] | None = None, calibration: Any = None) -> Module:
    """Compile `graph` (a Graph or an ONNX file path) for `target`.

    target: a name ("toy"), "name:preset", a .toml/.json config file, or a Target instance.
    cpu_nodes: node names or glob patterns that must run on the CPU.
    min_region_macs: offloaded regions with fewer MACs run on the CPU instead (default: the
        target's own rule).
    config: config fields overriding the target's (unknown fields raise TargetError).
    calibration: sample inputs for targets whose prepare() quantises (e.g. vta): a dict
        name -> array, a list of such dicts, or an array split along axis 0; None lets the
        target calibrate on random data (with a warning).
    """
    # 1. the graph: load a model file if given a path
    if not isinstance(graph, Graph):
        from . import load
        graph = load(graph)
    # 2. the target, with its config resolved (preset, file, overrides)
    tgt = get_target(target, config)
    # 3. type every value (a copy: the caller's graph is left alone); support rules, MAC
    #    counts and device buffer sizes all read shapes
    g = infer_shapes(graph)
    g.toposort()
    # 4. target-specific rewrites (vta: fold BatchNorm, quantise to int8); identity for most
    cpu_nodes = tuple(cpu_nodes)
    tgt.cpu_nodes = cpu_nodes
    g = tgt.prepare(g, calibration)
    g.toposort()
    # 5. partition: annotate, merge convex regions, apply the size rule, schedule
    parts = partition(g, tgt, cpu_nodes=cpu_nodes, min_region_macs=min_region_macs)
    # 6. lower each offloaded region to the target's kernel
    kernels = {}
    for region in parts.offloaded:
        try:
            kernels[region.name] = tgt.lower(region)
        except RetargetError as e:
            raise type(e)(f"lowering region {region.name!r} ({', '.join(region.node_names)}) "
                          f"for {tgt.name}: {e}") from None
    # 7. package graph, regions, kernels and the placement report as a Module
    return Module(g, tgt, parts.regions, kernels, parts.report)


__all__ = ["compile"]

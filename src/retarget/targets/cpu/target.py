"""The CPU target: the host runs every op in the op table with the reference executor.

It is the fallback every partition uses for what an accelerator refuses, and a target of its
own (`compile(graph, target="cpu")` places every node on the host). It has no device and no
kernels: the executor runs CPU regions node by node with `reference.run_node`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...ir.graph import Graph, Node
from ...ops.registry import OPS
from ..base import Kernel, Region, Support, Target


@dataclass(frozen=True, slots=True)
class CpuConfig:
    fast: bool = True   # use the ops' fast paths (checked against their definitions) or not


class CpuTarget(Target):
    name: ClassVar[str] = "cpu"
    description: ClassVar[str] = "the host, running the NumPy reference executor (the golden model)"
    config_class: ClassVar[type] = CpuConfig
    presets: ClassVar[dict] = {"reference": CpuConfig(fast=False)}

    def supports(self, node: Node, graph: Graph) -> Support:
        if node.op in OPS:
            return Support.yes("the reference executor runs every registered op")
        return Support.no(f"op {node.op} is not in the op table")

    def lower(self, region: Region) -> Kernel:
        raise NotImplementedError("the cpu target runs regions node by node in the executor; "
                                  "it has no kernels to lower")

    def make_device(self):
        return None  # the host itself


__all__ = ["CpuConfig", "CpuTarget"]

"""What a target declares for fusion (the DNNVM paper's templates), and the graph they match.

A target that fuses sets `fusion_templates` (Template: small patterns of layer types with
conditions) and builds a FusionGraph of a region's layers after its intrinsic fusion (a conv
with its requantisation, concatenations as addressing); passes/fusion/ enumerates every
embedding and chooses the groups; the target's `fusion_cost` and `lower(region, plan)` cost
and lower them. Types only: targets import this, never passes/.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass(slots=True)
class Vertex:
    """A layer. `type` is what templates match ("conv", "pool", "add", ...); `attrs` carry
    what their conditions read (kernel, stride, ...); `fusable` is False for vertices that only
    stand for data (a region input)."""
    name: str
    type: str
    attrs: dict[str, Any] = field(default_factory=dict)
    fusable: bool = True


@dataclass(slots=True)
class FusionGraph:
    vertices: list[Vertex]
    edges: list[tuple[int, int]]            # producer -> consumer, by vertex index
    succ: list[list[int]] = field(init=False)
    pred: list[list[int]] = field(init=False)

    def __post_init__(self):
        n = len(self.vertices)
        self.succ = [[] for _ in range(n)]
        self.pred = [[] for _ in range(n)]
        for a, b in self.edges:
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise ValueError(f"fusion graph: bad edge {a} -> {b} ({n} vertices)")
            if b not in self.succ[a]:
                self.succ[a].append(b)
                self.pred[b].append(a)

    def __len__(self) -> int:
        return len(self.vertices)

    def topological(self) -> list[int]:
        """Vertex indices in a topological order (ties by index)."""
        indeg = [len(p) for p in self.pred]
        ready = [i for i in range(len(self)) if indeg[i] == 0]
        order = []
        while ready:
            ready.sort()
            i = ready.pop(0)
            order.append(i)
            for j in self.succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if len(order) != len(self):
            raise ValueError("fusion graph has a cycle")
        return order

    def barriers(self) -> set[int]:
        """Vertices with more than one producer or more than one consumer (Algorithm 2)."""
        return {i for i in range(len(self)) if len(self.pred[i]) > 1 or len(self.succ[i]) > 1}


VertexOk = Callable[[FusionGraph, int, int], bool]
GroupOk = Callable[[FusionGraph, tuple[int, ...]], bool]


@dataclass(frozen=True)
class Template:
    name: str
    types: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]
    fused: tuple[int, ...]
    vertex_ok: Optional[VertexOk] = None
    group_ok: Optional[GroupOk] = None

    def __post_init__(self):
        n = len(self.types)
        if not n or any(not (0 <= a < n and 0 <= b < n) for a, b in self.edges):
            raise ValueError(f"template {self.name!r}: edges {self.edges} outside its "
                             f"{n} vertices")
        if not self.fused or any(not 0 <= i < n for i in self.fused):
            raise ValueError(f"template {self.name!r}: fused vertices {self.fused} invalid")

    def type_ok(self, t: int, vtype: str) -> bool:
        return self.types[t] == "*" or self.types[t] == vtype


__all__ = ["FusionGraph", "GroupOk", "Template", "Vertex", "VertexOk"]

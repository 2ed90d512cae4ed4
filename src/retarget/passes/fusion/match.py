"""Every embedding of every template: the DNNVM paper's Algorithm 1, a heuristic subgraph
isomorphism (monomorphism: template edges must exist in the graph; more graph edges may).

1. FilterCandidates: for each template vertex, the graph vertices of its type that pass its
   condition. An empty set means no embedding.
2. The start is the template vertex with the fewest candidates (the rarest type in the graph:
   start at the 15 pools, not the 120 convs).
3. NextQueryVertex: the template is walked breadth-first from the start, so every next vertex
   has a matched neighbour.
4. RefineCandidates: the next vertex's candidates are the matched neighbour's successors or
   predecessors (as the template edge points) among its filtered candidates, unused, with
   every template edge to already matched vertices present in the graph.
5. Recurse until every template vertex is matched; the whole-mapping condition decides.

Embeddings that differ only by a symmetry of the template (two horizontally fused convs
swapped) are all returned, as a subgraph matcher does; `groups` dedupes them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from ...targets.fusion import FusionGraph, Template


@dataclass(frozen=True, slots=True)
class Embedding:
    """Template `template` mapped onto graph vertices: mapping[t] is the graph vertex of
    template vertex t. `group` is the sorted graph vertices it fuses."""
    template: Template
    mapping: tuple[int, ...]

    @property
    def group(self) -> tuple[int, ...]:
        return tuple(sorted(self.mapping[t] for t in self.template.fused))


def _plan(template: Template, sizes: list[int]) -> list[tuple[int, int | None, bool | None]]:
    """The match order: (template vertex, its matched anchor, True if anchor -> vertex)."""
    n = len(template.types)
    adj: list[list[tuple[int, bool]]] = [[] for _ in range(n)]
    for a, b in template.edges:
        adj[a].append((b, True))      # b is a successor of a
        adj[b].append((a, False))     # a is a predecessor of b
    order: list[tuple[int, int | None, bool | None]] = []
    seen: set[int] = set()
    while len(seen) < n:
        start = min((t for t in range(n) if t not in seen), key=lambda t: (sizes[t], t))
        order.append((start, None, None))
        seen.add(start)
        queue = [start]
        while queue:
            u = queue.pop(0)
            for w, forward in adj[u]:
                if w not in seen:
                    seen.add(w)
                    order.append((w, u, forward))
                    queue.append(w)
    return order


def find_template(graph: FusionGraph, template: Template) -> Iterator[Embedding]:
    """Every embedding of one template (Algorithm 1)."""
    n = len(template.types)
    cands = []
    for t in range(n):
        c = [v for v, vert in enumerate(graph.vertices) if template.type_ok(t, vert.type)
             and (template.vertex_ok is None or template.vertex_ok(graph, t, v))]
        if not c:
            return
        cands.append(c)
    cand_sets = [set(c) for c in cands]
    order = _plan(template, [len(c) for c in cands])
    edges = template.edges
    mapping = [-1] * n
    used: set[int] = set()

    def consistent(t: int, v: int) -> bool:
        for a, b in edges:
            if a == t and mapping[b] >= 0 and mapping[b] not in graph.succ[v]:
                return False
            if b == t and mapping[a] >= 0 and v not in graph.succ[mapping[a]]:
                return False
        return True

    def extend(k: int) -> Iterator[Embedding]:
        if k == n:
            m = tuple(mapping)
            if template.group_ok is None or template.group_ok(graph, m):
                yield Embedding(template, m)
            return
        t, anchor, forward = order[k]
        if anchor is None:
            pool: Iterable[int] = cands[t]
        else:
            a = mapping[anchor]
            pool = [v for v in (graph.succ[a] if forward else graph.pred[a])
                    if v in cand_sets[t]]
        for v in pool:
            if v in used or not consistent(t, v):
                continue
            mapping[t] = v
            used.add(v)
            yield from extend(k + 1)
            used.discard(v)
            mapping[t] = -1

    yield from extend(0)


def find_embeddings(graph: FusionGraph, templates: Iterable[Template]) -> list[Embedding]:
    """Every embedding of every template whose fused vertices are all fusable."""
    out = []
    for template in templates:
        for e in find_template(graph, template):
            if all(graph.vertices[v].fusable for v in e.group):
                out.append(e)
    return out


def groups(embeddings: Iterable[Embedding]) -> dict[tuple[int, ...], Embedding]:
    """One embedding per distinct fused vertex set (the first found)."""
    out: dict[tuple[int, ...], Embedding] = {}
    for e in embeddings:
        out.setdefault(e.group, e)
    return out


__all__ = ["Embedding", "find_embeddings", "find_template", "groups"]

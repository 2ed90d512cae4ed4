"""Which embeddings become fused groups: none, greedy, or the DNNVM paper's Algorithm 2.

The cost of a plan is additive: each fused group costs its modelled cycles lowered alone, each
other layer its own (`cost(members)`; None when a group does not fit the hardware).

- **none**: every layer alone.
- **greedy** (what most compilers do, the baseline to beat): walk the layers in topological
  order; at each layer not yet taken, take the largest fitting group that contains it and
  none taken before; never revisit.
- **optimized** (Algorithm 2): vertices with several producers or consumers are *barriers*;
  between them the graph is chains. A group inside one chain is an extra edge of that chain's
  shortest-path problem (positions 0..k, an edge per single layer and per group); the exact
  shortest path is the chain's best plan. Groups that touch a barrier or span chains are the
  special cases (an add fused into one of its branches, horizontally fused convs): those that
  share a vertex or a chain form a component, every vertex-disjoint choice within a component
  is enumerated, the chains it touches are re-solved without the vertices it takes, and the
  cheapest total is kept. Components are independent, so the result is the exact optimum of
  the additive cost: never worse than greedy or none.

A target with a stream model (`stream(units)`: the cycles of several units lowered as one
stream) re-ranks each component's few best choices by it (RERANK): units of a component
overlap in a stream (a branch's loads under another branch's compute) in ways a sum of costs
alone cannot see, so the additive optimum can run slower than a choice a few cycles behind
it. The plan's `cycles` stay the additive total of what was chosen.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ...targets.fusion import FusionGraph
from .match import Embedding, groups as distinct_groups

Cost = Callable[[tuple[int, ...]], "int | None"]
StreamCost = Callable[[list[tuple[int, ...]]], "int | None"]
STRATEGIES = ("none", "greedy", "optimized")
MAX_SPECIALS = 22        # per component; beyond this the enumeration would take too long
RERANK = 3               # at most this many of a component's best additive choices are
RERANK_NEAR = 0.05       # re-ranked by a stream model: those within 5 % of the best


@dataclass(frozen=True, slots=True)
class Group:
    """A fused group in a plan: its template, members (vertex indices), modelled cycles, and
    the cycles of its members run one by one (the alternative)."""
    template: str
    members: tuple[int, ...]
    cycles: int
    alone_cycles: int


@dataclass(slots=True)
class FusionPlan:
    strategy: str
    groups: list[Group] = field(default_factory=list)
    cycles: int = 0                       # the plan's modelled total (additive)


class _Costs:
    """cost() memoised, singles always fitting."""

    def __init__(self, graph: FusionGraph, cost: Cost):
        self.graph, self.cost, self.memo = graph, cost, {}

    def __call__(self, members: tuple[int, ...]) -> int | None:
        if members not in self.memo:
            c = self.cost(members)
            if c is None and len(members) == 1:
                raise ValueError(f"fusion cost: layer {self.graph.vertices[members[0]].name!r} "
                                 f"has no cost alone")
            self.memo[members] = c
        return self.memo[members]

    def alone(self, members: Iterable[int]) -> int:
        return sum(self((v,)) for v in members)


def choose(graph: FusionGraph, embeddings: list[Embedding], cost: Cost,
           strategy: str = "optimized", stream: StreamCost | None = None) -> FusionPlan:
    """The plan of `strategy` over the distinct fitting groups of `embeddings`; `stream`: the
    target's stream model, if it has one (optimized re-ranks with it)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"fusion strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    costs = _Costs(graph, cost)
    found = distinct_groups(embeddings)
    cands = {m: e.template.name for m, e in found.items()
             if len(m) > 1 and costs(m) is not None}
    if strategy == "none":
        chosen: list[tuple[int, ...]] = []
    elif strategy == "greedy":
        chosen = _greedy(graph, cands)
    else:
        chosen = _optimized(graph, cands, costs, stream)
    plan = FusionPlan(strategy)
    covered = set()
    for m in chosen:
        plan.groups.append(Group(cands[m], m, costs(m), costs.alone(m)))
        covered.update(m)
    plan.cycles = (sum(g.cycles for g in plan.groups)
                   + costs.alone(v for v in range(len(graph)) if v not in covered))
    return plan


def _greedy(graph: FusionGraph, cands: dict[tuple[int, ...], str]) -> list[tuple[int, ...]]:
    order = list(cands)                    # template order, then discovery order
    taken: set[int] = set()
    chosen = []
    for v in graph.topological():
        if v in taken:
            continue
        fits = [m for m in order if v in m and not taken.intersection(m)]
        if fits:
            best = max(fits, key=len)      # the largest; ties: the first template
            chosen.append(best)
            taken.update(best)
    return chosen


def _chains(graph: FusionGraph, barriers: set[int]) -> list[list[int]]:
    """Maximal paths of non-barrier vertices (each has at most one producer and consumer)."""
    chains = []
    for v in graph.topological():
        if v in barriers:
            continue
        p = graph.pred[v]
        if p and p[0] not in barriers:
            continue                        # v continues its producer's chain
        chain = [v]
        while graph.succ[chain[-1]] and graph.succ[chain[-1]][0] not in barriers:
            chain.append(graph.succ[chain[-1]][0])
        chains.append(chain)
    return chains


def _optimized(graph: FusionGraph, cands: dict[tuple[int, ...], str], costs: _Costs,
               stream: StreamCost | None = None) -> list[tuple[int, ...]]:
    barriers = graph.barriers()
    chains = _chains(graph, barriers)
    where = {v: (c, k) for c, chain in enumerate(chains) for k, v in enumerate(chain)}
    in_chain: dict[int, list[tuple[int, ...]]] = {}      # chain -> its groups
    specials = []
    for m in cands:
        cs = {where[v][0] for v in m if v in where}
        pos = sorted(where[v][1] for v in m if v in where)
        if len(cs) == 1 and len(pos) == len(m) and pos == list(range(pos[0], pos[0] + len(m))):
            in_chain.setdefault(cs.pop(), []).append(m)
        else:
            specials.append(m)
    memo: dict[tuple[int, frozenset], tuple[int, list]] = {}

    def solve_chain(c: int, removed: frozenset) -> tuple[int, list[tuple[int, ...]]]:
        """Shortest path over chain c without `removed`: (cycles, groups chosen)."""
        key = (c, removed)
        if key in memo:
            return memo[key]
        chain = chains[c]
        n = len(chain)
        # dist[i]: best cost of chain[:i]; removed vertices cost nothing (a special has them)
        dist = [0] + [None] * n
        back: list = [None] * (n + 1)
        edges: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
        for m in in_chain.get(c, []):
            if not removed.intersection(m):
                first = min(where[v][1] for v in m)
                edges.setdefault(first, []).append((first + len(m), m))
        for i in range(n):
            if dist[i] is None:
                continue
            step = 0 if chain[i] in removed else costs((chain[i],))
            if dist[i + 1] is None or dist[i] + step < dist[i + 1]:
                dist[i + 1], back[i + 1] = dist[i] + step, (i, None)
            for j, m in edges.get(i, []):
                if dist[j] is None or dist[i] + costs(m) < dist[j]:
                    dist[j], back[j] = dist[i] + costs(m), (i, m)
        chosen, i = [], n
        while i:
            i, m = back[i]
            if m is not None:
                chosen.append(m)
        memo[key] = (dist[n], chosen)
        return memo[key]

    # Specials that share a vertex or a chain interact: union-find them into components.
    parent = list(range(len(specials)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[object, int] = {}
    for i, m in enumerate(specials):
        for key in [("v", v) for v in m] + [("c", where[v][0]) for v in m if v in where]:
            if key in owner:
                parent[find(i)] = find(owner[key])
            else:
                owner[key] = i
    components: dict[int, list[tuple[int, ...]]] = {}
    for i, m in enumerate(specials):
        components.setdefault(find(i), []).append(m)

    chosen: list[tuple[int, ...]] = []
    touched_chains: set[int] = set()
    for comp in components.values():
        if len(comp) > MAX_SPECIALS:
            raise ValueError(f"fusion: {len(comp)} interacting groups around "
                             f"{graph.vertices[comp[0][0]].name!r}; the exact search is "
                             f"limited to {MAX_SPECIALS}")
        cs = sorted({where[v][0] for m in comp for v in m if v in where})
        bs = sorted({v for m in comp for v in m if v not in where})
        touched_chains.update(cs)
        options: list[tuple[int, list]] = []
        for subset in _disjoint_subsets(comp):
            taken = {v for m in subset for v in m}
            total = sum(costs(m) for m in subset) + costs.alone(b for b in bs if b not in taken)
            picks = list(subset)
            for c in cs:
                cyc, sub = solve_chain(c, frozenset(v for v in chains[c] if v in taken))
                total += cyc
                picks += sub
            options.append((total, picks))
        options.sort(key=lambda o: o[0])
        best = options[0][1]
        near = [o for o in options[:RERANK] if o[0] <= options[0][0] * (1 + RERANK_NEAR)]
        if stream is not None and len(near) > 1:
            span = bs + [v for c in cs for v in chains[c]]
            timed = []
            for _, picks in near:
                covered = {v for m in picks for v in m}
                t = stream(picks + [(v,) for v in span if v not in covered])
                if t is not None:
                    timed.append((t, picks))
            if timed:
                best = min(timed, key=lambda o: o[0])[1]
        chosen += best
    for c in range(len(chains)):
        if c not in touched_chains:
            chosen += solve_chain(c, frozenset())[1]
    return chosen


def _disjoint_subsets(groups: list[tuple[int, ...]]):
    """Every subset of `groups` whose members are pairwise disjoint (including the empty one)."""
    def rec(i: int, taken: set, picked: list):
        if i == len(groups):
            yield list(picked)
            return
        yield from rec(i + 1, taken, picked)
        if not taken.intersection(groups[i]):
            picked.append(groups[i])
            yield from rec(i + 1, taken | set(groups[i]), picked)
            picked.pop()
    yield from rec(0, set(), [])


def brute_force(graph: FusionGraph, embeddings: list[Embedding], cost: Cost) -> int:
    """The optimum by trying every disjoint set of fitting groups (for tests; exponential)."""
    costs = _Costs(graph, cost)
    cands = [m for m in distinct_groups(embeddings) if len(m) > 1 and costs(m) is not None]
    best = None
    for subset in _disjoint_subsets(cands):
        taken = {v for m in subset for v in m}
        total = sum(costs(m) for m in subset) + costs.alone(
            v for v in range(len(graph)) if v not in taken)
        best = total if best is None else min(best, total)
    return best


__all__ = ["FusionPlan", "Group", "STRATEGIES", "brute_force", "choose"]

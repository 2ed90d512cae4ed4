"""The fusion search on random DAGs: Algorithm 1 finds exactly the embeddings networkx's
subgraph matcher finds, and the optimized strategy's plan costs no more than greedy's or
none's and equals the brute-force optimum."""
import random

import networkx as nx
import pytest
from networkx.algorithms import isomorphism

from retarget.passes.fusion import FusionGraph, Template, Vertex, choose, find_embeddings
from retarget.passes.fusion.match import find_template
from retarget.passes.fusion.strategy import brute_force

TYPES = ("conv", "pool", "add", "concat")
TEMPLATES = (
    Template("conv_pool", ("conv", "pool"), ((0, 1),), (0, 1)),
    Template("conv_add", ("conv", "add"), ((0, 1),), (0, 1)),
    Template("conv_conv", ("conv", "conv"), ((0, 1),), (0, 1)),
    Template("horizontal2", ("*", "conv", "conv"), ((0, 1), (0, 2)), (1, 2)),
    Template("horizontal3", ("*", "conv", "conv", "conv"), ((0, 1), (0, 2), (0, 3)), (1, 2, 3)),
    Template("conv_pool_add", ("conv", "pool", "add"), ((0, 1), (1, 2)), (0, 1, 2)),
)


def random_dag(seed: int, n: int) -> FusionGraph:
    rng = random.Random(seed)
    verts = [Vertex(f"v{i}", rng.choice(TYPES)) for i in range(n)]
    edges = set()
    for j in range(1, n):
        for i in rng.sample(range(j), min(j, rng.choice((1, 1, 2)))):
            edges.add((i, j))
    for _ in range(rng.randrange(n)):
        i, j = sorted(rng.sample(range(n), 2))
        edges.add((i, j))
    return FusionGraph(verts, sorted(edges))


def with_networkx(g: FusionGraph, t: Template) -> set[tuple[int, ...]]:
    G, T = nx.DiGraph(), nx.DiGraph()
    G.add_nodes_from((i, {"type": v.type}) for i, v in enumerate(g.vertices))
    G.add_edges_from(g.edges)
    T.add_nodes_from((i, {"type": ty}) for i, ty in enumerate(t.types))
    T.add_edges_from(t.edges)
    m = isomorphism.DiGraphMatcher(G, T, node_match=lambda a, b: b["type"] in ("*", a["type"]))
    out = set()
    for found in m.subgraph_monomorphisms_iter():
        inv = {tv: gv for gv, tv in found.items()}
        out.add(tuple(inv[k] for k in range(len(t.types))))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_algorithm_1_finds_what_networkx_finds(seed):
    g = random_dag(seed, 6 + seed % 14)
    for t in TEMPLATES:
        ours = [e.mapping for e in find_template(g, t)]
        assert len(ours) == len(set(ours))
        assert set(ours) == with_networkx(g, t), t.name


def random_cost(seed: int):
    rng = random.Random(seed)
    memo = {}

    def cost(members):
        if members not in memo:
            if len(members) == 1:
                memo[members] = rng.randrange(10, 100)
            elif rng.random() < 0.15:
                memo[members] = None                     # does not fit
            else:
                alone = sum(cost((v,)) for v in members)
                memo[members] = int(alone * rng.uniform(0.5, 1.2))
        return memo[members]
    return cost


@pytest.mark.parametrize("seed", range(60))
def test_optimized_is_exact_and_beats_greedy_and_none(seed):
    g = random_dag(1000 + seed, 5 + seed % 9)
    found = find_embeddings(g, TEMPLATES)
    cost = random_cost(seed)
    plans = {s: choose(g, found, cost, s) for s in ("none", "greedy", "optimized")}
    opt = plans["optimized"].cycles
    assert opt <= plans["greedy"].cycles and opt <= plans["none"].cycles
    assert opt == brute_force(g, found, cost)
    taken = [v for grp in plans["optimized"].groups for v in grp.members]
    assert len(taken) == len(set(taken))                  # groups are disjoint
    for grp in plans["optimized"].groups:
        assert grp.cycles == cost(grp.members) and grp.alone_cycles == sum(
            cost((v,)) for v in grp.members)


def test_a_chain_is_solved_by_shortest_path_not_first_fit():
    # conv -> pool -> conv -> pool: greedy takes (0,1),(2,3) or the middle conv_conv; the
    # costs make the middle pair the best, which greedy (topological, largest-first) misses.
    g = FusionGraph([Vertex("a", "conv"), Vertex("b", "conv"), Vertex("c", "conv")],
                    [(0, 1), (1, 2)])
    costs = {(0,): 10, (1,): 10, (2,): 10, (0, 1): 19, (1, 2): 5}
    found = find_embeddings(g, TEMPLATES)
    greedy = choose(g, found, costs.get, "greedy")
    best = choose(g, found, costs.get, "optimized")
    assert [grp.members for grp in greedy.groups] == [(0, 1)] and greedy.cycles == 29
    assert [grp.members for grp in best.groups] == [(1, 2)] and best.cycles == 15


def test_a_stream_model_re_ranks_the_near_choices_at_a_barrier():
    """A branch point: conv_add into either branch. Additively fusing into branch b is best
    (by 2 %); a stream model that sees branch a's loads overlap branch b's compute prefers
    fusing into a, and the search follows it; a choice far behind is never re-ranked."""
    g = FusionGraph([Vertex("x", "conv"), Vertex("a", "conv"), Vertex("b", "conv"),
                     Vertex("add", "add")], [(0, 1), (0, 2), (1, 3), (2, 3)])
    costs = {(0,): 100, (1,): 100, (2,): 100, (3,): 100, (1, 3): 150, (2, 3): 147}
    found = [e for e in find_embeddings(g, TEMPLATES) if e.template.name == "conv_add"]
    seen = []

    def stream(units):
        seen.append(sorted(units))
        return 300 if (1, 3) in units else 400

    assert [grp.members for grp in choose(g, found, costs.get).groups] == [(2, 3)]
    plan = choose(g, found, costs.get, stream=stream)
    assert [grp.members for grp in plan.groups] == [(1, 3)]
    assert plan.cycles == 100 + 150 + 100                   # still the additive total
    assert [(1, 3), (2,)] in seen                           # the component's units, whole
    seen.clear()
    far = {**costs, (1, 3): 190}                            # > 5 % behind: not re-ranked
    assert [grp.members for grp in choose(g, found, far.get, stream=stream).groups] == [(2, 3)]
    assert all((1, 3) not in units for units in seen)

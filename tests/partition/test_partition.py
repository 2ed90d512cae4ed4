"""Partitioning on branching graphs and random DAGs: every node placed once, regions convex
with no cycles between them, overrides and the size rule, outputs equal to the reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retarget
from retarget.errors import GraphError
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.infer_shapes import infer_shapes
from retarget.passes.partition import partition
from retarget.targets.cpu.reference import run_graph
from retarget.targets.registry import get_target, load_plugin

ROOT = Path(__file__).resolve().parents[2]
C, HW = 3, 4  # channels and spatial size of every tensor in these graphs


def toy():
    """The example target (examples/toy_accelerator.py), registered once per process."""
    return load_plugin(ROOT / "examples" / "toy_accelerator.py")


class Net:
    """A tiny graph builder: 1x1 convs, relus and adds over C x HW x HW tensors."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.x = Value("x", TensorType((1, C, HW, HW), "float32"))
        self.nodes: list[Node] = []

    def _node(self, op, name, inputs, attrs=None):
        n = Node(op, name, inputs, [Value(f"{name}_out")], attrs or {})
        self.nodes.append(n)
        return n.outputs[0]

    def conv(self, name, v):
        w = constant(f"{name}.w", self.rng.standard_normal((C, C, 1, 1)).astype(np.float32))
        b = constant(f"{name}.b", self.rng.standard_normal(C).astype(np.float32))
        return self._node("Conv", name, [v, w, b], {"kernel_shape": [1, 1]})

    def relu(self, name, v):
        return self._node("Relu", name, [v])

    def add(self, name, a, b):
        return self._node("Add", name, [a, b])

    def graph(self, *outputs):
        return infer_shapes(Graph(self.nodes, [self.x], list(outputs)))


def check_invariants(graph, parts):
    """Independent of the partitioner's own check: placed once, convex, region DAG."""
    where = {}
    for k, r in enumerate(parts.regions):
        for n in r.nodes:
            assert n.name not in where, f"{n.name} placed twice"
            where[n.name] = k
    assert set(where) == {n.name for n in graph.nodes}
    assert [p.name for p in parts.report.nodes] == [n.name for n in graph.nodes]
    succ = {n.name: set() for n in graph.nodes}
    producer = graph.producers()
    for n in graph.nodes:
        for v in n.inputs:
            if v is not None and v in producer:
                succ[producer[v].name].add(n.name)
    # Convex: no path leaves a region and re-enters it.
    for k, r in enumerate(parts.regions):
        inside = set(r.node_names)
        frontier = [s for n in inside for s in succ[n] if s not in inside]
        seen = set(frontier)
        while frontier:
            u = frontier.pop()
            assert u not in inside, f"path leaves region {r.name} and re-enters at {u}"
            for s in succ[u]:
                if s not in seen:
                    seen.add(s)
                    frontier.append(s)
    # No cycle between regions: the region graph has a topological order.
    edges = {(where[a], where[b]) for a in succ for b in succ[a] if where[a] != where[b]}
    indeg = {k: 0 for k in range(len(parts.regions))}
    for _, b in edges:
        indeg[b] += 1
    ready = [k for k, d in indeg.items() if d == 0]
    done = 0
    while ready:
        k = ready.pop()
        done += 1
        for a, b in edges:
            if a == k:
                indeg[b] -= 1
                if indeg[b] == 0:
                    ready.append(b)
    assert done == len(parts.regions), "cycle between regions"


def run_both(graph, module):
    x = np.random.default_rng(1).standard_normal((1, C, HW, HW)).astype(np.float32)
    ref = run_graph(graph, {"x": x})
    out = module.run({"x": x})
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-6)


def test_cpu_path_that_would_re_enter_keeps_regions_apart():
    # a(dev) -> b(cpu) -> c(dev) and a -> c: {a, c} would not be convex.
    toy()
    n = Net()
    a = n.conv("a", n.x)
    b = n.add("b", a, a)
    c = n.add("c_sum", n.conv("c", b), a)
    g = n.graph(c)
    parts = partition(g, get_target("toy"), min_region_macs=0)
    check_invariants(g, parts)
    rep = {p.name: p for p in parts.report.nodes}
    assert rep["a"].placement == rep["c"].placement == "toy"
    assert rep["a"].region != rep["c"].region
    assert rep["b"].placement == "cpu" and "no kernel for Add" in rep["b"].reason


def test_inception_block_branches_and_concat():
    toy()
    n = Net()
    stem = n.relu("stem_relu", n.conv("stem", n.x))
    b1 = n.conv("b1", stem)
    b2 = n.relu("b2_relu", n.conv("b2b", n.conv("b2a", stem)))
    b3 = n.conv("b3b", n.add("b3_pool", stem, stem))   # an unsupported op inside a branch
    cat = n._node("Concat", "concat", [b1, b2, b3], {"axis": 1})
    g = n.graph(cat)
    module = retarget.compile(g, "toy", min_region_macs=0)
    check_invariants(module.graph, module)
    placed = {p.name: p.placement for p in module.report.nodes}
    assert all(placed[k] == "toy" for k in ("stem", "stem_relu", "b1", "b2a", "b2b", "b2_relu", "b3b"))
    assert placed["concat"] == placed["b3_pool"] == "cpu"
    run_both(g, module)


def test_residual_blocks():
    toy()
    n = Net()
    h = n.relu("r0", n.conv("c0", n.x))
    for i in range(3):
        y = n.conv(f"blk{i}.c2", n.relu(f"blk{i}.r1", n.conv(f"blk{i}.c1", h)))
        h = n.relu(f"blk{i}.out", n.add(f"blk{i}.add", y, h))
    g = n.graph(h)
    module = retarget.compile(g, "toy", min_region_macs=0)
    check_invariants(module.graph, module)
    s = module.report.summary
    assert s["nodes_on_target"] == 1 + 1 + 3 * 3 and s["macs_on_cpu"] == 0
    run_both(g, module)


def test_overrides_force_nodes_onto_the_cpu_with_globs():
    toy()
    n = Net()
    out = n.conv("head.b", n.conv("head.a", n.conv("body", n.x)))
    g = n.graph(out)
    parts = partition(g, get_target("toy"), cpu_nodes=["head.*"], min_region_macs=0)
    rep = {p.name: p for p in parts.report.nodes}
    assert rep["body"].placement == "toy"
    assert rep["head.a"].placement == rep["head.b"].placement == "cpu"
    assert "forced onto cpu by 'head.*'" in rep["head.a"].reason
    with pytest.raises(GraphError, match="'hed.*' matches no node"):
        partition(g, get_target("toy"), cpu_nodes=["hed.*"])


def test_small_regions_go_back_to_the_cpu_with_the_reason():
    toy()
    n = Net()
    g = n.graph(n.conv("c", n.x))
    macs = C * C * HW * HW
    parts = partition(g, get_target("toy"), min_region_macs=macs + 1)
    (p,) = parts.report.nodes
    assert p.placement == "cpu" and f"region too small: {macs} MACs < min_region_macs={macs + 1}" in p.reason
    assert partition(g, get_target("toy"), min_region_macs=macs).report.nodes[0].placement == "toy"
    # the target's own rule applies when the user gives none (toy default: 10000 MACs)
    assert partition(g, get_target("toy")).report.nodes[0].placement == "cpu"


def test_report_summary_and_table():
    toy()
    n = Net()
    g = n.graph(n.add("sum", n.conv("c", n.x), n.x))
    parts = partition(g, get_target("toy"), min_region_macs=0)
    s = parts.report.summary
    nbytes = C * HW * HW * 4
    assert s == {"nodes_on_target": 1, "nodes_on_cpu": 1, "macs_on_target": C * C * HW * HW,
                 "macs_on_cpu": 0, "regions": 1, "bytes_crossing": 2 * nbytes}
    table = parts.report.table()
    assert "toy_0" in table and "no kernel for Add" in table and "1 region(s)" in table


def test_cpu_target_places_everything_on_the_cpu():
    n = Net()
    g = n.graph(n.relu("r", n.conv("c", n.x)))
    module = retarget.compile(g, "cpu")
    assert {p.placement for p in module.report.nodes} == {"cpu"} and not module.offloaded
    assert len(module.regions) == 1
    run_both(g, module)


# ---- random DAGs ------------------------------------------------------------------------------
@st.composite
def random_dags(draw):
    """Up to 12 nodes; each Conv (the toy runs it), Relu (fused if after a Conv) or Add (cpu)
    reading random earlier values; some convs forced onto the cpu."""
    count = draw(st.integers(1, 12))
    ops = draw(st.lists(st.sampled_from(["Conv", "Conv", "Relu", "Add"]), min_size=count,
                        max_size=count))
    picks = draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
                          min_size=count, max_size=count))
    forced = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    n = Net(seed=count)
    vals = [n.x]
    cpu_nodes = []
    for i, (op, (p, q), f) in enumerate(zip(ops, picks, forced)):
        a, b = vals[p % len(vals)], vals[q % len(vals)]
        if op == "Conv":
            vals.append(n.conv(f"n{i}", a))
            if f:
                cpu_nodes.append(f"n{i}")
        elif op == "Relu":
            vals.append(n.relu(f"n{i}", a))
        else:
            vals.append(n.add(f"n{i}", a, b))
    consumed = {id(v) for node in n.nodes for v in node.inputs}
    outs = [v for v in vals[1:] if id(v) not in consumed] or [vals[-1]]
    return n.graph(*outs), cpu_nodes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_random_dags_convex_placed_once_and_equal_to_reference(case):
    toy()
    g, cpu_nodes = case
    module = retarget.compile(g, "toy", cpu_nodes=cpu_nodes, min_region_macs=0)
    check_invariants(module.graph, module)
    for p in module.report.nodes:
        if p.name in cpu_nodes:
            assert p.placement == "cpu"
    run_both(g, module)

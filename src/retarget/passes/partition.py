"""Partitioning: decide where every node runs and group offloaded nodes into convex regions.

Steps (the BYOC flow of papers/tvm-nvdla-byoc.txt: annotate, merge, hand regions over):
1. annotate: ask the target about every node (`Target.supports`); user overrides force
   nodes onto the CPU (names or glob patterns, e.g. "stem/*");
2. merge: walk nodes in topological order and join each supported node to the region of one of
   its supported producers when that keeps the graph of regions acyclic (a region is convex:
   no path leaves it and comes back), then merge further producer regions the same way;
3. size rule: regions with fewer MACs than the target's minimum go back to the CPU
   ("region too small"): the copies in and out would cost more than they save;
4. schedule: order regions (device regions and runs of CPU nodes) by their dependencies.

The result is a `Partition`: the regions in execution order and a `PlacementReport`.
"""
from __future__ import annotations

import fnmatch
import heapq
from dataclasses import dataclass, field
from typing import Iterable

from ..errors import GraphError, RetargetError
from ..ir.graph import Graph, Node, Value
from ..ops.registry import get_op, resolve_attrs
from ..targets.base import Region, Target

CPU = "cpu"


@dataclass(frozen=True, slots=True)
class NodePlacement:
    name: str
    op: str
    placement: str      # "cpu" or the target's name
    reason: str         # why it is there (the target's refusal, an override, region too small)
    macs: int
    region: str         # the region it runs in


@dataclass(frozen=True, slots=True)
class FusedGroup:
    """A group of layers the fusion search lowered as one unit, with the modelled cycles of
    the choice and of its alternative (its layers one by one)."""
    region: str
    template: str
    members: tuple[str, ...]
    cycles: int
    alone_cycles: int

    def to_dict(self) -> dict:
        return {"region": self.region, "template": self.template,
                "members": list(self.members), "cycles": self.cycles,
                "alone_cycles": self.alone_cycles}


@dataclass(slots=True)
class PlacementReport:
    """Where every node runs and why, with a summary of what was offloaded."""
    target: str
    nodes: list[NodePlacement]
    num_regions: int            # offloaded regions
    bytes_crossing: int         # bytes copied host<->device per inference
    fusion: str = "none"        # the fusion strategy compile() used
    fused: list[FusedGroup] = field(default_factory=list)
    host: str = "reference"     # what runs the CPU regions: the NumPy reference or "c"

    def on(self, placement: str) -> list[NodePlacement]:
        return [n for n in self.nodes if n.placement == placement]

    @property
    def summary(self) -> dict[str, int]:
        off = [n for n in self.nodes if n.placement != CPU]
        cpu = [n for n in self.nodes if n.placement == CPU]
        return {"nodes_on_target": len(off), "nodes_on_cpu": len(cpu),
                "macs_on_target": sum(n.macs for n in off), "macs_on_cpu": sum(n.macs for n in cpu),
                "regions": self.num_regions, "bytes_crossing": self.bytes_crossing}

    def to_dict(self) -> dict:
        return {"target": self.target, "summary": self.summary,
                "nodes": [{"name": n.name, "op": n.op, "placement": n.placement,
                           "reason": n.reason, "macs": n.macs, "region": n.region}
                          for n in self.nodes],
                "fusion": self.fusion, "fused": [g.to_dict() for g in self.fused],
                "host": self.host}

    def table(self) -> str:
        """The report as a plain-text table followed by the summary."""
        rows = [("node", "op", "placement", "region", "MACs", "reason")]
        rows += [(n.name, n.op, n.placement, n.region, str(n.macs), n.reason) for n in self.nodes]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]
        s = self.summary
        total = max(s["macs_on_target"] + s["macs_on_cpu"], 1)
        lines.append("")
        lines.append(f"{self.target}: {s['nodes_on_target']} nodes, {s['macs_on_target']} MACs "
                     f"({100 * s['macs_on_target'] / total:.1f}%) in {s['regions']} region(s); "
                     f"cpu: {s['nodes_on_cpu']} nodes, {s['macs_on_cpu']} MACs; "
                     f"{s['bytes_crossing']} bytes cross host<->device per run")
        lines.append(self.host_line())
        if self.fused:
            lines += ["", f"fused groups (fusion={self.fusion}; cycles: the cycle model, fused "
                          f"vs the same layers one by one):"]
            for g in self.fused:
                lines.append(f"  {g.region}  {g.template:<12} {' + '.join(g.members)}: "
                             f"{g.cycles:,} cycles (alone {g.alone_cycles:,}, "
                             f"{g.alone_cycles / max(g.cycles, 1):.2f}x)")
        elif self.fusion != "none":
            lines.append(f"fusion={self.fusion}: no group was worth fusing")
        return "\n".join(lines)

    def host_line(self) -> str:
        """What runs the CPU nodes: the NumPy reference, or generated C (and how many)."""
        cpu = self.on(CPU)
        if self.host == "reference":
            return f"host: the NumPy reference runs the {len(cpu)} cpu node(s)"
        as_c = sum(1 for n in cpu if n.reason.endswith(f"host {self.host}: generated C"))
        return (f"host: {self.host} runs {as_c} of the {len(cpu)} cpu node(s) as generated C, "
                f"the NumPy reference the other {len(cpu) - as_c}")

    def __str__(self) -> str:
        return self.table()


@dataclass(slots=True)
class Partition:
    graph: Graph
    target: Target
    regions: list[Region]       # in execution order; CPU regions are runs of CPU nodes
    report: PlacementReport

    @property
    def offloaded(self) -> list[Region]:
        return [r for r in self.regions if r.target != CPU]


def node_macs(node: Node) -> int:
    """Multiply-accumulates of one execution of `node` (0 when its types are not known)."""
    types_in = [None if v is None else v.type for v in node.inputs]
    types_out = [v.type for v in node.outputs]
    if any(t is None for t in types_out) or any(v is not None and v.type is None for v in node.inputs):
        return 0
    try:
        return int(get_op(node.op, node).macs(resolve_attrs(node), types_in, types_out))
    except RetargetError:
        return 0


def partition(graph: Graph, target: Target, *, cpu_nodes: Iterable[str] = (),
              min_region_macs: int | None = None) -> Partition:
    """Place every node of `graph` (typed, in topological order) on `target` or the CPU.

    cpu_nodes: node names or glob patterns forced onto the CPU (a pattern matching no node is
    an error, so a typo is not silently ignored). min_region_macs: overrides the target's rule.
    """
    nodes = graph.nodes
    index = {id(n): i for i, n in enumerate(nodes)}
    producer = graph.producers()
    preds = [sorted({index[id(producer[v])] for v in n.inputs if v is not None and v in producer})
             for n in nodes]
    macs = [node_macs(n) for n in nodes]

    # 1. annotate
    forced = _match_overrides(nodes, list(cpu_nodes))
    placement: list[str] = []
    reason: list[str] = []
    for i, n in enumerate(nodes):
        if target.name == CPU:
            placement.append(CPU), reason.append("target is cpu")
        elif i in forced:
            placement.append(CPU), reason.append(f"forced onto cpu by {forced[i]!r}")
        else:
            s = target.supports(n, graph)
            placement.append(target.name if s.ok else CPU)
            reason.append(s.reason or ("supported" if s.ok else "refused"))

    # 2. merge supported nodes into convex regions; the target may then refuse nodes that
    #    depend on their region's other members (fusion), which sends them to the CPU and
    #    regroups. Terminates: each round moves at least one node to the CPU.
    while True:
        clusters = _merge(len(nodes), preds, placement)
        refused = 0
        for members in clusters.groups():
            if placement[members[0]] == CPU:
                continue
            by_name = {nodes[i].name: i for i in members}
            for name, why in target.check_region([nodes[i] for i in members], graph).items():
                if name in by_name and placement[by_name[name]] != CPU:
                    placement[by_name[name]], reason[by_name[name]] = CPU, why
                    refused += 1
        if not refused:
            break

    # 3. drop regions too small to be worth their copies
    limit = target.min_region_macs if min_region_macs is None else int(min_region_macs)
    for members in clusters.groups():
        if placement[members[0]] == CPU:
            continue
        total = sum(macs[i] for i in members)
        if total < limit:
            for i in members:
                placement[i] = CPU
                reason[i] = f"region too small: {total} MACs < min_region_macs={limit}"
    assign = [clusters.of(i) if placement[i] != CPU else -1 - i for i in range(len(nodes))]

    # 4. schedule regions by dependencies; consecutive CPU nodes form one CPU region
    order = _schedule(assign, preds)
    regions = _build_regions(graph, order, assign, placement, macs, target.name)
    region_of = {id(n): r.name for r in regions for n in r.nodes}
    report = PlacementReport(
        target.spec,
        [NodePlacement(n.name, n.op, placement[i], reason[i], macs[i], region_of[id(n)])
         for i, n in enumerate(nodes)],
        sum(1 for r in regions if r.target != CPU),
        _bytes_crossing(graph, regions))
    result = Partition(graph, target, regions, report)
    verify_partition(result)
    return result


def _merge(count: int, preds: list[list[int]], placement: list[str]) -> "_Clusters":
    """Greedy convex merging in topological order (see the module docstring, step 2)."""
    clusters = _Clusters(count, preds)
    for i in range(count):
        if placement[i] == CPU:
            continue
        for c in sorted({clusters.of(p) for p in preds[i] if placement[p] != CPU}):
            c = clusters.of(c)
            if clusters.of(i) != c and clusters.can_merge(clusters.of(i), c):
                clusters.merge(clusters.of(i), c)
    return clusters


def _match_overrides(nodes: list[Node], patterns: list[str]) -> dict[int, str]:
    forced: dict[int, str] = {}
    for pat in patterns:
        hits = [i for i, n in enumerate(nodes) if fnmatch.fnmatchcase(n.name, pat)]
        if not hits:
            sample = ", ".join(n.name for n in nodes[:8])
            raise GraphError(f"cpu node override {pat!r} matches no node (nodes: {sample}"
                             f"{', ...' if len(nodes) > 8 else ''})")
        for i in hits:
            forced.setdefault(i, pat)
    return forced


class _Clusters:
    """Union of nodes into clusters, with the cluster-level dependency graph kept current so
    that merges which would create a cycle between clusters can be refused."""

    def __init__(self, n: int, preds: list[list[int]]):
        self.parent = list(range(n))
        self.succ: dict[int, set[int]] = {i: set() for i in range(n)}
        self.pred: dict[int, set[int]] = {i: set(preds[i]) for i in range(n)}
        for i, ps in enumerate(preds):
            for p in ps:
                self.succ[p].add(i)

    def of(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def _reaches_other_way(self, a: int, b: int) -> bool:
        """Is there a path a -> x -> ... -> b through at least one other cluster x?"""
        stack = [s for s in self.succ[a] if s != b]
        seen = set(stack)
        while stack:
            c = stack.pop()
            for s in self.succ[c]:
                if s == b:
                    return True
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return False

    def can_merge(self, a: int, b: int) -> bool:
        return not (self._reaches_other_way(a, b) or self._reaches_other_way(b, a))

    def merge(self, a: int, b: int) -> int:
        """Merge cluster b into a; the edges of both now belong to a."""
        self.parent[b] = a
        for s in self.succ.pop(b):
            self.pred[s].discard(b)
            if s != a:
                self.pred[s].add(a)
                self.succ[a].add(s)
        for p in self.pred.pop(b):
            self.succ[p].discard(b)
            if p != a:
                self.succ[p].add(a)
                self.pred[a].add(p)
        self.succ[a].discard(a), self.pred[a].discard(a)
        self.succ[a].discard(b), self.pred[a].discard(b)
        return a

    def groups(self) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for i in range(len(self.parent)):
            out.setdefault(self.of(i), []).append(i)
        return list(out.values())


def _schedule(assign: list[int], preds: list[list[int]]) -> list[int]:
    """Cluster ids in a dependency order, earliest-first among the ready ones (Kahn's
    algorithm keyed by each cluster's first node, so the order stays close to the graph's)."""
    first: dict[int, int] = {}
    deps: dict[int, set[int]] = {}
    for i, c in enumerate(assign):
        first.setdefault(c, i)
        deps.setdefault(c, set()).update(assign[p] for p in preds[i] if assign[p] != c)
    users: dict[int, list[int]] = {c: [] for c in deps}
    for c, ds in deps.items():
        for d in ds:
            users[d].append(c)
    waiting = {c: len(ds) for c, ds in deps.items()}
    ready = [(first[c], c) for c, k in waiting.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, c = heapq.heappop(ready)
        order.append(c)
        for u in users[c]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (first[u], u))
    if len(order) != len(deps):
        raise GraphError("partition produced a cycle between regions (a bug in the partitioner)")
    return order


def _build_regions(graph: Graph, order: list[int], assign: list[int], placement: list[str],
                   macs: list[int], target_name: str) -> list[Region]:
    members: dict[int, list[int]] = {}
    for i, c in enumerate(assign):
        members.setdefault(c, []).append(i)
    # Consecutive CPU clusters in the schedule become one CPU region: nothing runs between them.
    groups: list[tuple[str, list[int]]] = []
    for c in order:
        where = placement[members[c][0]]
        if where == CPU and groups and groups[-1][0] == CPU:
            groups[-1][1].extend(members[c])
        else:
            groups.append((where, list(members[c])))
    consumers = graph.consumers()
    graph_outputs = {id(v) for v in graph.outputs}
    counts = {CPU: 0, target_name: 0}
    regions = []
    for where, idx in groups:
        idx.sort()  # graph order is a topological order of the region's own nodes
        rnodes = [graph.nodes[i] for i in idx]
        inputs, outputs = region_boundary(rnodes, consumers, graph_outputs)
        name = f"{where}_{counts[where]}"
        counts[where] += 1
        regions.append(Region(name, where, rnodes, inputs, outputs, sum(macs[i] for i in idx)))
    return regions


def region_boundary(nodes: list[Node], consumers: dict[Value, list[Node]],
                    graph_outputs: set[int]) -> tuple[list[Value], list[Value]]:
    """The inputs (non-constant values read from outside, first use first) and outputs
    (values read outside or graph outputs, by id in `graph_outputs`) of a set of nodes."""
    inside = {id(n) for n in nodes}
    produced = {id(v) for n in nodes for v in n.outputs}
    inputs: list[Value] = []
    for n in nodes:
        for v in n.inputs:
            if v is not None and not v.is_const and id(v) not in produced \
                    and all(v is not x for x in inputs):
                inputs.append(v)
    outputs = [v for n in nodes for v in n.outputs
               if id(v) in graph_outputs or any(id(u) not in inside for u in consumers.get(v, []))]
    return inputs, outputs


def _bytes_crossing(graph: Graph, regions: list[Region]) -> int:
    """Bytes copied between host and device per inference: device-region inputs that live on
    the host, and device-region outputs that the host reads (the CPU or a graph output)."""
    on_device: set[int] = set()
    for r in regions:
        if r.target != CPU:
            on_device.update(id(v) for v in r.outputs)
    host_reads: set[int] = {id(v) for v in graph.outputs}
    for r in regions:
        if r.target == CPU:
            host_reads.update(id(v) for v in r.inputs)
    total = 0
    counted_in: set[int] = set()
    for r in regions:
        if r.target == CPU:
            continue
        for v in r.inputs:
            if id(v) not in on_device and id(v) not in counted_in and v.type is not None:
                counted_in.add(id(v))
                total += v.type.nbytes
        total += sum(v.type.nbytes for v in r.outputs if id(v) in host_reads and v.type is not None)
    return total


def verify_partition(p: Partition) -> None:
    """Check the invariants: every node in exactly one region; each region's nodes come after
    everything they read from other regions in the schedule (so regions form a DAG and are
    convex). Raises GraphError naming the offending node."""
    where: dict[int, int] = {}
    for k, r in enumerate(p.regions):
        for n in r.nodes:
            if id(n) in where:
                raise GraphError(f"{n.op} '{n.name}' is in two regions")
            where[id(n)] = k
    for n in p.graph.nodes:
        if id(n) not in where:
            raise GraphError(f"{n.op} '{n.name}' is in no region")
    producer = p.graph.producers()
    for n in p.graph.nodes:
        for v in n.inputs:
            if v is not None and v in producer and where[id(producer[v])] > where[id(n)]:
                raise GraphError(f"{n.op} '{n.name}' reads {v.name!r} from a later region")


__all__ = ["NodePlacement", "PlacementReport", "Partition", "partition", "node_macs",
           "region_boundary", "verify_partition"]

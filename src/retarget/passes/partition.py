"""Partitioning: decide where every node runs and group offloaded nodes into convex regions.

Steps (the BYOC flow of papers/tvm-nvdla-byoc.txt: annotate, merge, hand regions over):
1. annotate: ask every device of the compile about every node (`Target.supports`); a node goes
   to the first device that accepts it (or, with `choice="cheapest"`, the one whose cost model
   prices it lowest), else to the CPU. User overrides force nodes onto the CPU (names or glob
   patterns, e.g. "stem/*") or pin them to a device (as TensorFlow's `tf.device` does);
2. merge: walk nodes in topological order and join each node to the region of one of its
   producers placed on the same device when that keeps the graph of regions acyclic (a region
   is convex: no path leaves it and comes back), then merge further producer regions the same
   way;
3. region check: a device may refuse nodes given the region they ended up in
   (`Target.check_region`); they move to the next device that accepts them (or the CPU) and
   step 2 repeats;
4. size rule: regions with fewer MACs than their device's minimum move on the same way
   ("region too small"): the copies in and out would cost more than they save;
5. schedule: order regions (device regions and runs of CPU nodes) by their dependencies.

With several devices (the placement across devices of "Retargeting TensorFlow to FPGA",
Sec. 2.3-2.4) every refusal is remembered per device, so each round of steps 2-4 takes at
least one device away from one node and the loop ends. The result is a `Partition`: the
regions in execution order and a `PlacementReport` that says, per node, where it runs and why
the devices before it refused it.
"""
from __future__ import annotations

import fnmatch
import heapq
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ..errors import GraphError, PlacementError, RetargetError, TargetError, node_context
from ..ir.graph import Graph, Node
from ..ops.registry import get_op, resolve_attrs
from ..targets.base import Region, Support, Target, external_inputs

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
    target: str                 # the compile's device list as given ("vta" or "vta,dnnvm")
    nodes: list[NodePlacement]
    num_regions: int            # offloaded regions
    bytes_crossing: int         # bytes copied host<->device per inference
    fusion: str = "none"        # the fusion strategy compile() used
    fused: list[FusedGroup] = field(default_factory=list)
    # bytes per inference that one device produces and another reads: the runtime moves
    # them device -> host -> device (part of bytes_crossing)
    bytes_between_devices: int = 0
    choice: str = "first"       # how a node's device was chosen: "first" or "cheapest"

    def on(self, placement: str) -> list[NodePlacement]:
        return [n for n in self.nodes if n.placement == placement]

    @property
    def devices(self) -> list[str]:
        """The devices nodes were placed on, in order of first use (the CPU excluded)."""
        return list(dict.fromkeys(n.placement for n in self.nodes if n.placement != CPU))

    @property
    def summary(self) -> dict[str, int]:
        off = [n for n in self.nodes if n.placement != CPU]
        cpu = [n for n in self.nodes if n.placement == CPU]
        return {"nodes_on_target": len(off), "nodes_on_cpu": len(cpu),
                "macs_on_target": sum(n.macs for n in off), "macs_on_cpu": sum(n.macs for n in cpu),
                "regions": self.num_regions, "bytes_crossing": self.bytes_crossing}

    @property
    def several_devices(self) -> bool:
        return "," in self.target

    def to_dict(self) -> dict:
        d = {"target": self.target, "summary": self.summary,
             "nodes": [{"name": n.name, "op": n.op, "placement": n.placement,
                        "reason": n.reason, "macs": n.macs, "region": n.region}
                       for n in self.nodes],
             "fusion": self.fusion, "fused": [g.to_dict() for g in self.fused]}
        if self.several_devices:   # only then: a one-device report (and artifact) is unchanged
            d.update(bytes_between_devices=self.bytes_between_devices, choice=self.choice)
        return d

    def table(self) -> str:
        """The report as a plain-text table followed by the summary."""
        rows = [("node", "op", "placement", "region", "MACs", "reason")]
        rows += [(n.name, n.op, n.placement, n.region, str(n.macs), n.reason) for n in self.nodes]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]
        s = self.summary
        total = max(s["macs_on_target"] + s["macs_on_cpu"], 1)
        lines.append("")
        devices = self.devices
        if len(devices) > 1 or self.several_devices:
            for d in devices:
                on = self.on(d)
                macs = sum(n.macs for n in on)
                lines.append(f"{d}: {len(on)} nodes, {macs} MACs ({100 * macs / total:.1f}%) in "
                             f"{len({n.region for n in on})} region(s)")
            lines.append(f"cpu: {s['nodes_on_cpu']} nodes, {s['macs_on_cpu']} MACs; "
                         f"{s['bytes_crossing']} bytes cross host<->device per run, of which "
                         f"{self.bytes_between_devices} move between devices "
                         f"(placement: {self.choice})")
        else:
            lines.append(f"{self.target}: {s['nodes_on_target']} nodes, {s['macs_on_target']} "
                         f"MACs ({100 * s['macs_on_target'] / total:.1f}%) in {s['regions']} "
                         f"region(s); cpu: {s['nodes_on_cpu']} nodes, {s['macs_on_cpu']} MACs; "
                         f"{s['bytes_crossing']} bytes cross host<->device per run")
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

    def __str__(self) -> str:
        return self.table()


@dataclass(slots=True)
class Partition:
    graph: Graph
    target: Target              # the first device of the compile
    regions: list[Region]       # in execution order; CPU regions are runs of CPU nodes
    report: PlacementReport
    targets: list[Target] = field(default_factory=list)   # every device, in the compile's order

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


CHOICES = ("first", "cheapest")


def partition(graph: Graph, target: "Target | Sequence[Target]", *, cpu_nodes: Iterable[str] = (),
              min_region_macs: int | None = None, pins: Mapping[str, str] | None = None,
              choice: str = "first",
              costs: Sequence[Mapping[str, float | None]] | None = None,
              copy_seconds_per_byte: float = 0.0) -> Partition:
    """Place every node of `graph` (typed, in topological order) on one of the devices
    `target` (a Target or a list of them, in order of preference) or the CPU.

    cpu_nodes: node names or glob patterns forced onto the CPU (a pattern matching no node is
    an error, so a typo is not silently ignored). pins: pattern -> device name ("cpu" or one
    of the devices): the nodes it matches run there, or the compile is refused (PlacementError)
    naming the node and why that device cannot run it. min_region_macs: overrides every
    device's size rule. choice: "first" (the first device that accepts a node) or "cheapest"
    (the device whose cost in `costs[i]` (seconds, by device name) is lowest for node i, plus
    `copy_seconds_per_byte` for every byte of its inputs that another device made).
    """
    targets = [target] if isinstance(target, Target) else list(target)
    names = [t.name for t in targets if t.name != CPU]
    by_name = {t.name: t for t in targets}
    if not targets or len(by_name) != len(targets):
        raise TargetError(f"devices {[t.spec for t in targets]}: name each target once (one "
                          f"device per target in a compile)")
    if choice not in CHOICES:
        raise TargetError(f"placement {choice!r}; choose one of {', '.join(CHOICES)}")
    if choice == "cheapest" and costs is None:
        raise TargetError("placement 'cheapest' needs the devices' costs per node")
    nodes = graph.nodes
    index = {id(n): i for i, n in enumerate(nodes)}
    producer = graph.producers()
    preds = [sorted({index[id(producer[v])] for v in n.inputs if v is not None and v in producer})
             for n in nodes]
    macs = [node_macs(n) for n in nodes]

    # 1. annotate: every device's answer, and what the user forces
    forced = _match_overrides(nodes, list(cpu_nodes))
    pinned = _match_pins(nodes, dict(pins or {}), names, forced)
    said = [{} if i in forced else {d: by_name[d].supports(n, graph) for d in names}
            for i, n in enumerate(nodes)]
    refused = [{d: s.reason or "refused" for d, s in said[i].items() if not s.ok}
               for i in range(len(nodes))]
    reads = [[(index[id(producer[v])], v.type.nbytes) for v in n.inputs
              if v is not None and v in producer and v.type is not None] for n in nodes]
    chooser = _Chooser(nodes, names, said, refused, forced, pinned, choice, costs, reads,
                       copy_seconds_per_byte)

    # 2-4. merge each device's nodes into convex regions; a device's region check or size rule
    #      refuses nodes, which move to their next device (or the CPU), and everything
    #      regroups. Terminates: each round takes a device away from at least one node.
    while True:
        placed = [chooser.place(i) for i in range(len(nodes))]
        placement = [where for where, _ in placed]
        clusters = _merge(len(nodes), preds, placement)
        groups = [g for g in clusters.groups() if placement[g[0]] != CPU]
        if not (_region_refusals(groups, nodes, graph, placement, by_name, chooser) or
                _size_refusals(groups, macs, placement, by_name, min_region_macs, chooser)):
            break
    assign = [clusters.of(i) if placement[i] != CPU else -1 - i for i in range(len(nodes))]

    # 5. schedule regions by dependencies; consecutive CPU nodes form one CPU region
    order = _schedule(assign, preds)
    regions = _build_regions(graph, order, assign, placement, macs)
    region_of = {id(n): r.name for r in regions for n in r.nodes}
    crossing, between = _bytes_moved(graph, regions)
    report = PlacementReport(
        ",".join(t.spec for t in targets),
        [NodePlacement(n.name, n.op, placed[i][0], placed[i][1], macs[i], region_of[id(n)])
         for i, n in enumerate(nodes)],
        sum(1 for r in regions if r.target != CPU), crossing,
        bytes_between_devices=between, choice=choice)
    result = Partition(graph, targets[0], regions, report, targets)
    verify_partition(result)
    return result


@dataclass(slots=True)
class _Chooser:
    """Where one node goes given what the devices have refused so far, with the reason."""
    nodes: list[Node]
    names: list[str]                        # the devices, in order of preference
    said: list[dict[str, Support]]          # per node: each device's answer
    refused: list[dict[str, str]]           # per node: device -> why it cannot run it
    forced: dict[int, str]                  # node -> the cpu_nodes pattern forcing it
    pinned: dict[int, tuple[str, str]]      # node -> (pattern, device)
    choice: str
    costs: Sequence[Mapping[str, float | None]] | None
    reads: list[list[tuple[int, int]]]      # per node: (producer, bytes) of its inputs
    copy_seconds_per_byte: float            # a byte moved device -> host -> device
    current: dict[int, str] = field(default_factory=dict)   # this round's choices so far

    def place(self, i: int) -> tuple[str, str]:
        """Where node i goes and why (nodes are placed in graph order each round, so its
        producers' choices are known: the cheapest choice prices the copies from them)."""
        where, why = self._place(i)
        self.current[i] = where
        return where, why

    def refuse(self, i: int, device: str, why: str) -> None:
        """Take `device` away from node i (a pinned node cannot lose its device: an error)."""
        if i in self.pinned:
            pattern, _ = self.pinned[i]
            raise PlacementError(f"pin {pattern!r}={device}: {node_context(self.nodes[i])} "
                                 f"cannot run on {device}: {why}")
        self.refused[i][device] = why

    def _place(self, i: int) -> tuple[str, str]:
        if not self.names:
            return CPU, "target is cpu"
        if i in self.forced:
            return CPU, f"forced onto cpu by {self.forced[i]!r}"
        refused = self.refused[i]
        if i in self.pinned:
            pattern, device = self.pinned[i]
            if device == CPU:
                return CPU, f"pinned to cpu by {pattern!r}"
            if device in refused:
                self.refuse(i, device, refused[device])
            own = self.said[i][device].reason
            return device, f"pinned to {device} by {pattern!r}" + (f"; {own}" if own else "")
        open_ = [d for d in self.names if d not in refused]
        where, why = (open_[0], "") if open_ else (CPU, "")
        if self.choice == "cheapest" and len(open_) > 1:
            where, why = self._cheapest(i, open_)
        if len(self.names) == 1:    # one device: its own words, as a single-target compile
            d = self.names[0]
            return where, (refused[d] if where == CPU else self.said[i][d].reason or "supported")
        parts = [f"{d}: {refused[d]}" for d in self.names if d in refused]
        if where != CPU:
            parts.append(why or f"{where}: {self.said[i][where].reason or 'supported'}")
        return where, "; ".join(parts)

    def _cheapest(self, i: int, open_: list[str]) -> tuple[str, str]:
        priced = {d: self.costs[i].get(d) for d in open_}
        unpriced = [d for d, c in priced.items() if c is None]
        if unpriced:
            return open_[0], (f"first that accepts (no cost model for {', '.join(unpriced)} "
                              f"on this node)")
        copies = {d: self.copy_seconds_per_byte * sum(
            nbytes for p, nbytes in self.reads[i] if self.current.get(p, CPU) not in (CPU, d))
            for d in open_}
        total = {d: priced[d] + copies[d] for d in open_}
        ranked = sorted(open_, key=lambda d: (total[d], self.names.index(d)))
        return ranked[0], "cheapest: " + " <= ".join(
            f"{d} {priced[d] * 1e6:.3g} us" + (f" + {copies[d] * 1e6:.3g} us copying in"
                                               if copies[d] else "") for d in ranked)


def _region_refusals(groups, nodes, graph, placement, by_name, chooser: _Chooser) -> int:
    """Step 3: the nodes each device refuses in the region they ended up in."""
    moved = 0
    for members in groups:
        device = placement[members[0]]
        by_node = {nodes[i].name: i for i in members}
        for name, why in by_name[device].check_region([nodes[i] for i in members], graph).items():
            if name in by_node and placement[by_node[name]] == device:
                chooser.refuse(by_node[name], device, why)
                moved += 1
    return moved


def _size_refusals(groups, macs, placement, by_name, min_region_macs, chooser: _Chooser) -> int:
    """Step 4: regions below their device's minimum size (regions holding a pinned node stay)."""
    moved = 0
    for members in groups:
        device = placement[members[0]]
        limit = by_name[device].min_region_macs if min_region_macs is None else int(min_region_macs)
        total = sum(macs[i] for i in members)
        if total < limit and not any(i in chooser.pinned for i in members):
            for i in members:
                chooser.refuse(i, device, f"region too small: {total} MACs < "
                                          f"min_region_macs={limit}")
                moved += 1
    return moved


def _merge(count: int, preds: list[list[int]], placement: list[str]) -> "_Clusters":
    """Greedy convex merging in topological order (see the module docstring, step 2)."""
    clusters = _Clusters(count, preds)
    for i in range(count):
        if placement[i] == CPU:
            continue
        for c in sorted({clusters.of(p) for p in preds[i] if placement[p] == placement[i]}):
            c = clusters.of(c)
            if clusters.of(i) != c and clusters.can_merge(clusters.of(i), c):
                clusters.merge(clusters.of(i), c)
    return clusters


def _match_overrides(nodes: list[Node], patterns: list[str]) -> dict[int, str]:
    forced: dict[int, str] = {}
    for pat in patterns:
        for i in _matching(nodes, pat, "cpu node override"):
            forced.setdefault(i, pat)
    return forced


def _matching(nodes: list[Node], pattern: str, what: str) -> list[int]:
    hits = [i for i, n in enumerate(nodes) if fnmatch.fnmatchcase(n.name, pattern)]
    if not hits:
        sample = ", ".join(n.name for n in nodes[:8])
        raise GraphError(f"{what} {pattern!r} matches no node (nodes: {sample}"
                         f"{', ...' if len(nodes) > 8 else ''})")
    return hits


def _match_pins(nodes: list[Node], pins: dict[str, str], devices: list[str],
                forced: dict[int, str]) -> dict[int, tuple[str, str]]:
    """Node index -> (pattern, device) for every node a pin matches; a device the compile does
    not target, a pin contradicting another or a cpu override is an error."""
    pinned: dict[int, tuple[str, str]] = {}
    for pattern, device in pins.items():
        if device != CPU and device not in devices:
            raise PlacementError(f"pin {pattern!r}={device}: {device!r} is not a device of this "
                                 f"compile (devices: {', '.join(devices + [CPU])})")
        for i in _matching(nodes, pattern, f"pin to {device}"):
            other = pinned.get(i)
            if other is not None and other[1] != device:
                raise PlacementError(f"{node_context(nodes[i])} is pinned to {other[1]} by "
                                     f"{other[0]!r} and to {device} by {pattern!r}")
            if i in forced and device != CPU:
                raise PlacementError(f"{node_context(nodes[i])} is pinned to {device} by "
                                     f"{pattern!r} and forced onto cpu by {forced[i]!r}")
            pinned.setdefault(i, (pattern, device))
    return pinned


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
                   macs: list[int]) -> list[Region]:
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
    counts: dict[str, int] = {}
    regions = []
    for where, idx in groups:
        idx.sort()  # graph order is a topological order of the region's own nodes
        rnodes = [graph.nodes[i] for i in idx]
        inside = {id(n) for n in rnodes}
        inputs = external_inputs(rnodes)
        outputs = [v for n in rnodes for v in n.outputs
                   if id(v) in graph_outputs or any(id(u) not in inside for u in consumers.get(v, []))]
        counts[where] = counts.get(where, -1) + 1
        name = f"{where}_{counts[where]}"
        regions.append(Region(name, where, rnodes, inputs, outputs, sum(macs[i] for i in idx)))
    return regions


def _bytes_moved(graph: Graph, regions: list[Region]) -> tuple[int, int]:
    """Bytes copied between host and device per inference, and the part of them that moves
    between two devices, as the executor copies them: a device region's input that its own
    device did not produce is copied in (once per device); a device region's output that the
    host or another device reads is copied out (once). A value one device produces and another
    reads goes device -> host -> device, counted both ways, and once in the second total."""
    made_on: dict[int, str] = {}
    for r in regions:
        made_on.update((id(v), r.target) for v in r.outputs)
    host_reads: set[int] = {id(v) for v in graph.outputs}
    copied_in: set[tuple[int, str]] = set()
    crossing = between = 0
    for r in regions:
        for v in r.inputs:
            source = made_on.get(id(v), CPU)
            if r.target == CPU or source != r.target:
                host_reads.add(id(v))
            if r.target != CPU and source != r.target and (id(v), r.target) not in copied_in \
                    and v.type is not None:
                copied_in.add((id(v), r.target))
                crossing += v.type.nbytes
                between += v.type.nbytes if source != CPU else 0
    for r in regions:
        if r.target != CPU:
            crossing += sum(v.type.nbytes for v in r.outputs
                            if id(v) in host_reads and v.type is not None)
    return crossing, between


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


__all__ = ["CHOICES", "NodePlacement", "PlacementReport", "Partition", "partition", "node_macs",
           "verify_partition"]

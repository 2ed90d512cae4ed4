"""Host placement: the CPU regions of a partitioned graph as generated C instead of the NumPy
reference (`compile(..., host="c")`, `retarget compile --host c`).

An accelerator graph leaves work on the host: the quantise / dequantise edges, requantise
steps, int8 pooling and concatenation the accelerator refuses, the float head. With a `c`
host, each CPU region is cut into maximal runs of nodes the `c` target can run (consecutive
nodes of a region in its topological order, so each run is convex), and each run becomes
one C library (`targets.c.generate_c`: the integer ops on the int8 routines, bit-exact with
the integer reference). Nodes the `c` target refuses stay on the reference, as regions of
their own, with the reason in the placement report.

Every region keeps target "cpu" (the executor and the artifact treat them as the host's);
`HostCode.kernels` says which of them run as C.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import RetargetError, TargetError
from ..ir.graph import Graph, Node
from ..targets.base import Kernel, Region, Target, external_inputs
from .infer_shapes import infer_shapes
from .partition import CPU, PlacementReport

REFERENCE = "reference"


@dataclass(slots=True)
class HostCode:
    """The host's generated code: the `c` target that built it (its config says how the
    libraries are compiled) and the kernel of each CPU region that runs as C."""
    target: Target
    kernels: dict[str, Kernel] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.target.spec


def place_on_host(graph: Graph, regions: list[Region], report: PlacementReport,
                  host: Target) -> tuple[list[Region], HostCode]:
    """Cut the CPU regions of `regions` into runs `host` (a `c` target) can hold, lower each
    run to a C library, and record in `report` which nodes run as C. Returns the new region
    list (renamed cpu_0, cpu_1, ... in execution order) and the HostCode."""
    if host.name != "c":
        raise TargetError(f"host {host.spec!r}: the CPU regions can run on the NumPy reference "
                          f"or on the c target only")
    code = HostCode(host)
    out: list[Region] = []
    why: dict[str, str] = {}       # node name -> where it runs on the host, and why
    consumers, graph_outputs = graph.consumers(), {id(v) for v in graph.outputs}
    macs = {p.name: p.macs for p in report.nodes}
    count = 0
    for region in regions:
        if region.target != CPU:
            out.append(region)
            continue
        refusals = _refusals(region, host)
        for as_c, nodes in _runs(region.nodes, refusals):
            name = f"{CPU}_{count}"
            count += 1
            inside = {id(n) for n in nodes}
            inputs = external_inputs(nodes)
            outputs = [v for n in nodes for v in n.outputs if id(v) in graph_outputs
                       or any(id(u) not in inside for u in consumers.get(v, []))]
            run = Region(name, CPU, nodes, inputs, outputs, sum(macs[n.name] for n in nodes))
            failed = ""
            if as_c:
                try:
                    code.kernels[name] = lower_host_region(run, host)
                except RetargetError as e:
                    failed = f"its region could not be generated: {e}"
            for n in nodes:
                refusal = failed or refusals.get(n.name)
                why[n.name] = (f"host {host.spec}: NumPy reference ({refusal})" if refusal
                               else f"host {host.spec}: generated C")
            out.append(run)
    region_of = {n.name: r.name for r in out for n in r.nodes}
    report.nodes = [replace(p, region=region_of[p.name],
                            reason=f"{p.reason}; {why[p.name]}" if p.name in why else p.reason)
                    for p in report.nodes]
    report.host = host.spec
    return out, code


def _refusals(region: Region, host: Target) -> dict[str, str]:
    """Node name -> why `host` cannot run it, asked of the region as the host rewrites it
    (the c target pads convolutions explicitly before it lowers them)."""
    sub = region.subgraph()
    prepared = host.prepare(sub)
    if prepared is not sub:
        prepared = infer_shapes(prepared)
    return {n.name: s.reason or "refused" for n in prepared.nodes
            if not (s := host.supports(n, prepared)).ok}


def _runs(nodes: list[Node], refusals: dict[str, str]) -> list[tuple[bool, list[Node]]]:
    """(runs as C?, nodes): maximal runs of consecutive nodes the host does (no refusal) or
    does not support."""
    runs: list[tuple[bool, list[Node]]] = []
    for n in nodes:
        ok = n.name not in refusals
        if runs and runs[-1][0] == ok:
            runs[-1][1].append(n)
        else:
            runs.append((ok, [n]))
    return runs


def lower_host_region(region: Region, host: Target) -> Kernel:
    """One CPU region as a built C library of the `c` target (its rewrite and int8 routines:
    targets.c.generate_c)."""
    from ..targets.aot.kernel import new_build_dir
    from ..targets.c import generate_c
    project = generate_c(region.subgraph(), host.config, name=region.name)
    directory, temporary = new_build_dir(region.name, host.config.build_dir)
    kernel = host.kernel_class(project.program, project.weights, host.config, directory,
                               temporary)
    kernel.ensure_built()
    return kernel


__all__ = ["HostCode", "REFERENCE", "lower_host_region", "place_on_host"]

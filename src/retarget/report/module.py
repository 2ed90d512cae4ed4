"""Where the time goes in a compiled Module: every offloaded region's stream timed by its
target's cycle model, layer by layer, beside the CPU regions' measured host time.

    rep = module_report(module)              # no inputs needed: the cycle model reads no data
    print(rep.table())                       # per-region layer tables + a network summary
    rep.write_csv("layers.csv"); rep.write_json("layers.json")
    rep.write_roofline("roofline.svg"); rep.write_trace("trace.json")

A kernel takes part when it has a cycle model: a `timing()` method returning a
targets.accel.timing.TimingResult (with per-layer aggregates from its layer spans) and, for
useful MAC counts and layer kinds, `layer_info(name)` (every targets.accel.StreamKernel has
both). Regions run one
after another (the executor's order), so the network's modelled cycles are the sum of the
regions' cycles. CPU regions are not modelled: their time is the host wall time of the last
`Module.run` on this machine, labelled as such, and never added to modelled cycles.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field

from ..errors import TargetError
from .layers import LayerRow, make_row, total_row
from .table import format_table, si

CPU = "cpu"


@dataclass(slots=True)
class RegionReport:
    """One region of the module, in execution order."""
    name: str
    target: str
    nodes: int
    layers: list[LayerRow] = field(default_factory=list)   # modelled: one per lowered layer
    total: LayerRow | None = None      # modelled: the whole stream (its own total cycles)
    start_cycle: int = 0               # where it starts on the network's modelled timeline
    host_seconds: float | None = None  # wall time of the last run on this machine, if any
    timing: object | None = None       # the TimingResult (modelled regions)
    insns: list | None = None          # the stream timed (for traces)

    @property
    def modelled(self) -> bool:
        return self.total is not None

    @property
    def cycles(self) -> int:
        return self.total.cycles if self.total is not None else 0


@dataclass(slots=True)
class ModuleReport:
    """The report of one Module: regions in execution order and the modelled network total."""
    target: str
    config: object                     # the target's config (clock, bus, peak)
    frames: int                        # images per inference (the first input's batch)
    regions: list[RegionReport]
    network: LayerRow                  # totals over the modelled regions

    @property
    def modelled(self) -> list[RegionReport]:
        return [r for r in self.regions if r.modelled]

    @property
    def cycles(self) -> int:
        return self.network.cycles

    @property
    def seconds(self) -> float:
        """Modelled accelerator time of one inference at the config's clock."""
        return self.network.seconds

    @property
    def fps(self) -> float:
        """Frames per second counting modelled accelerator time only (CPU regions excluded)."""
        return self.frames / self.seconds if self.cycles else 0.0

    @property
    def host_cpu_seconds(self) -> float | None:
        """Measured host time of the CPU regions (None when the module has not run)."""
        times = [r.host_seconds for r in self.regions if r.target == CPU]
        if not times or any(t is None for t in times):
            return None
        return float(sum(times))

    def layer_rows(self) -> dict[str, list[LayerRow]]:
        """{region name: its layer rows} for the modelled regions (what the roofline plots)."""
        return {r.name: r.layers for r in self.modelled}

    # ---- text -------------------------------------------------------------------------------
    def header(self) -> str:
        c = self.config
        text = (f"where the time goes: {self.target} ({c.name}: {c.target_name} at "
                f"{c.clock_mhz:g} MHz, "
                f"peak {self.network.peak_gops:.1f} GOPS, DRAM {self.network.bandwidth_gbps:.2f}"
                f" GB/s), {self.frames} frame(s) per inference; cycles are the cycle model's")
        engines = int(getattr(c, "engines", 1))
        if engines > 1:     # e.g. dnnvm:zu9: frames are spread across engines
            text += (f"\nthe chip has {engines} engines: the figures are one engine's "
                     f"(batch-1 latency); {engines} frames in flight give {engines}x the "
                     f"throughput")
        return text

    def table(self) -> str:
        """Per-region layer tables, then the region summary and the network line."""
        from .layers import format_layers
        out = [self.header(), ""]
        for r in self.modelled:
            out.append(format_layers(r.layers, total=r.total,
                                     title=f"region {r.name} ({r.target}, {r.nodes} nodes)"))
            out.append("")
        out.append(self.summary_table())
        out.append("")
        out.append(self.network_line())
        return "\n".join(out)

    def summary_table(self) -> str:
        rows = []
        for r in self.regions:
            host = "-" if r.host_seconds is None else f"{r.host_seconds * 1e3:.3f}"
            if r.modelled:
                share = 100 * r.cycles / self.cycles if self.cycles else 0.0
                rows.append([r.name, r.target, r.nodes, f"{r.cycles:,}",
                             f"{r.total.seconds * 1e3:.4f}", f"{share:.1f}%",
                             f"{r.total.gops:.2f}", f"{100 * r.total.utilisation:.1f}%", host])
            else:
                rows.append([r.name, r.target, r.nodes, "-", "-", "-", "-", "-", host])
        n = self.network
        foot = [["network", self.target, sum(r.nodes for r in self.regions), f"{n.cycles:,}",
                 f"{n.seconds * 1e3:.4f}", "100.0%" if n.cycles else "-", f"{n.gops:.2f}",
                 f"{100 * n.utilisation:.1f}%", "-"]]
        return format_table(["region", "target", "nodes", "cycles", "model ms", "share", "GOPS",
                             "util", "host ms*"], rows, footer=foot, align="<<" + ">" * 7,
                            title="regions in execution order (model ms: cycle model at the "
                                  "clock; host ms*: measured on this machine, not modelled)")

    def network_line(self) -> str:
        line = (f"network: {self.cycles:,} modelled cycles = {self.seconds * 1e3:.4f} ms at "
                f"{self.config.clock_mhz:g} MHz -> {self.fps:,.1f} frames/s (accelerator only), "
                f"{self.network.gops:.2f} GOPS, {100 * self.network.roof_fraction:.1f}% of the "
                f"roofline bound")
        cpu = [r for r in self.regions if r.target == CPU]
        if cpu:
            host = self.host_cpu_seconds
            line += (f"\n{len(cpu)} CPU region(s): " +
                     ("no host time (measured only when the module runs: retarget run "
                      "DIR --report)" if host is None else
                      f"{host * 1e3:.3f} ms host time on this machine (measured, not modelled; "
                      f"not included above)"))
        return line

    def short_summary(self) -> str:
        """One line per modelled layer: the compact form `retarget demo` prints."""
        rows = []
        for r in self.modelled:
            for x in r.layers:
                rows.append([r.name, x.name, x.kind or "-", si(x.macs), f"{x.cycles:,}",
                             f"{100 * x.utilisation:.1f}%",
                             f"{100 * x.roof_fraction:.1f}%" if x.macs else "-"])
        return format_table(["region", "layer", "kind", "MACs", "cycles", "util", "of roof"],
                            rows, title="cycle model, per layer") + "\n" + self.network_line()

    # ---- files ------------------------------------------------------------------------------
    def to_json(self) -> dict:
        c = self.config
        regions = []
        for r in self.regions:
            d = {"name": r.name, "target": r.target, "nodes": r.nodes, "modelled": r.modelled,
                 "host_seconds": r.host_seconds}
            if r.modelled:
                d.update(start_cycle=r.start_cycle, cycles=r.cycles, seconds=r.total.seconds,
                         busy_cycles=dict(r.timing.busy), total=r.total.as_dict(),
                         layers=[x.as_dict() for x in r.layers])
            regions.append(d)
        return {"target": self.target, "config": c.name, "clock_mhz": c.clock_mhz,
                "frames": self.frames,
                "network": {**self.network.as_dict(), "seconds": self.seconds, "fps": self.fps,
                            "host_cpu_seconds": self.host_cpu_seconds},
                "regions": regions,
                "notes": "cycles, seconds and fps come from the cycle model at the config's "
                         "clock; host_seconds is measured wall time on this machine (CPU "
                         "regions: the NumPy reference; offloaded regions: the simulator)"}

    def to_csv(self) -> str:
        """One line per modelled layer, per modelled region total ('region' lines), per CPU
        region (host time only) and the network total, all with the same columns."""
        lines = []
        for r in self.regions:
            if r.modelled:
                lines += [("layer", r.name, x.as_dict(), None) for x in r.layers]
                lines.append(("region", r.name, r.total.as_dict(), r.host_seconds))
            else:
                lines.append(("cpu_region" if r.target == CPU else "unmodelled_region", r.name,
                              {"name": r.name}, r.host_seconds))
        lines.append(("network", "", self.network.as_dict(), None))
        columns = ["row", "region"] + list(self.network.as_dict()) + ["host_ms"]
        out = io.StringIO()
        w = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for kind, region, d, host in lines:
            w.writerow({**d, "row": kind, "region": region,
                        "host_ms": "" if host is None else host * 1e3})
        return out.getvalue()

    def trace(self) -> dict:
        """A Chrome/Perfetto trace: one process per modelled region, placed one after the
        other on one timeline in execution order, each with load/compute/store tracks and a
        layer track; a first process holds one slice per region."""
        from .trace import trace_events
        us = 1.0 / self.config.clock_mhz
        events: list[dict] = [
            {"ph": "M", "pid": 1, "name": "process_name",
             "args": {"name": f"{self.target}: regions (modelled)"}},
            {"ph": "M", "pid": 1, "name": "process_sort_index", "args": {"sort_index": 0}},
            {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "regions"}}]
        for k, r in enumerate(self.modelled):
            events.append({"ph": "X", "pid": 1, "tid": 1, "name": r.name, "cat": "region",
                           "ts": r.start_cycle * us, "dur": r.cycles * us,
                           "args": {"cycles": r.cycles, "start_cycle": r.start_cycle,
                                    "layers": len(r.layers)}})
            events += trace_events(r.timing, r.insns, pid=k + 2, offset_cycles=r.start_cycle,
                                   process=f"{r.name} ({self.config.target_name})",
                                   sort_index=k + 1)
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"target": self.target, "clock_mhz": self.config.clock_mhz,
                              "total_cycles": self.cycles,
                              "regions": {r.name: {"cycles": r.cycles,
                                                   "busy_cycles": dict(r.timing.busy)}
                                          for r in self.modelled},
                              "cpu_regions_not_modelled": [r.name for r in self.regions
                                                           if r.target == CPU]}}

    def write_csv(self, path: str) -> None:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(self.to_csv())

    def write_json(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_json(), fh, indent=1)

    def write_trace(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.trace(), fh)

    def write_roofline(self, path: str) -> None:
        """Each modelled layer with MACs on the roofline (.svg by hand, .png via matplotlib)."""
        from .roofline import write_roofline
        series = {name: [x for x in rows if x.macs > 0]
                  for name, rows in self.layer_rows().items()}
        series = {k: v for k, v in series.items() if v}
        if not series:
            raise TargetError("roofline: no modelled layer does any GEMM work to plot")
        write_roofline(path, series, title=f"Roofline: {self.target} ({self.config.target_name})")


def _frames(graph) -> int:
    """Images per inference: the first input's leading dimension (1 for scalars)."""
    for v in graph.inputs:
        if v.type is not None and v.type.rank >= 1 and int(v.type.shape[0]) > 0:
            return int(v.type.shape[0])
    return 1


def _region_rows(kernel, region_name: str) -> tuple[list[LayerRow], LayerRow, object]:
    """Layer rows and the whole-stream row of one kernel's modelled stream."""
    t = kernel.timing()
    cfg = t.config
    info_of = getattr(kernel, "layer_info", lambda name: None)
    rows = []
    for lt in t.layers:
        info = info_of(lt.name)
        # Without the lowering's record (an old artifact), the GEMM core's performed MACs are
        # the best count the stream itself gives.
        macs = lt.macs if info is None else info.macs
        rows.append(make_row(lt.name, cfg, macs, lt.cycles, lt.gemm_cycles, lt.bytes,
                             kind="" if info is None else info.kind, alu_cycles=lt.alu_cycles,
                             reset_cycles=lt.reset_cycles, performed_macs=lt.macs))
    # The stream's own totals: they include what lies between layers (barrier token
    # carriers, FINISH) and count overlapping layer boundaries once.
    covered = {lt.name for lt in t.layers}
    extra = sum(info.macs for info in getattr(kernel, "layers", []) if info.name not in covered)
    macs = sum(r.macs for r in rows) + extra if rows else t.macs
    total = make_row(region_name, cfg, macs, t.total_cycles, t.gemm_cycles, t.bytes,
                     kind="region", alu_cycles=t.alu_cycles, reset_cycles=t.reset_cycles,
                     performed_macs=t.macs)
    return rows or [total], total, t


def module_report(module, profile=None) -> ModuleReport:
    """The report of `module`. `profile`: RegionProfiles of a run (default: the module's last
    run, if any) supplying measured host times. Raises TargetError when no region of the module
    has a cycle model."""
    profile = module.profile if profile is None else profile
    host = {p.region: p.seconds for p in profile}
    regions: list[RegionReport] = []
    clock = 0
    for r in module.regions:
        rep = RegionReport(r.name, r.target, len(r.nodes), host_seconds=host.get(r.name))
        kernel = module.kernels.get(r.name) if r.target != CPU else None
        if kernel is not None and callable(getattr(kernel, "timing", None)):
            rep.layers, rep.total, rep.timing = _region_rows(kernel, r.name)
            rep.insns = list(kernel.program.insns)
            rep.start_cycle = clock
            clock += rep.cycles
        regions.append(rep)
    modelled = [r for r in regions if r.modelled]
    if not modelled:
        what = (f"its {len(module.offloaded)} offloaded region(s) have none"
                if module.offloaded else "it offloads nothing (everything runs on the cpu)")
        raise TargetError(f"no cycle model for this module's target {module.target.name!r}: "
                          f"{what}; the report covers regions offloaded to an accelerator "
                          f"with a cycle model")
    devices = sorted({r.target for r in modelled})
    if len(devices) > 1:
        raise TargetError(f"the cycle-model report of a module on several devices "
                          f"({', '.join(devices)}) is not implemented: their cycles run at "
                          f"different clocks and share no roofline; compile for one device to "
                          f"see its layers (the placement report and --profile cover several)")
    network = total_row([r.total for r in modelled], name="network", cycles=clock)
    return ModuleReport(module.target.spec, module.target.config, _frames(module.graph),
                        regions, network)


__all__ = ["ModuleReport", "RegionReport", "module_report"]

"""The `vta` target: int8 networks on the VTA-style tensor accelerator, simulated bit-exactly.

    m = retarget.compile(graph, "vta")            # pynq (1x16); also vta:1x32, vta:2x16 ...
    m = retarget.compile(graph, "vta:1x32", calibration={"input": x})
    print(m.report); m.run({"input": x})           # equals the integer reference bit for bit

What compile() does with it (docs/vta-target.md):
- the number format it declares (int8, power-of-two scales per tensor: the ALU shifts by one
  immediate) is what compile() quantises into, calibrated on the user's samples or on random
  data with a warning (passes/quantize.py), BatchNorm folded first;
- `prepare`: pack the kernel window of convolutions with few input channels into channels on
  the host when the cycle model says it pays (window_packing.py: ResNet's 3-channel stem);
- the rules (rules.py) say which integer ops run on the accelerator, and why the others stay on the
  CPU (float ops, layout changes, convolutions the GEMM core cannot map...);
- `lower(region)` (region.py) builds one instruction stream for the whole region with the lowering
  functions of targets/vta/lower/: region inputs and outputs in packed NCHWnc DRAM buffers,
  intermediates packed in DRAM between the layers, weights packed OIHWoi;
- `VTAKernel.run` (kernel.py) packs the region's NCHW int8 inputs into the program's DRAM buffers on the
  host side of the shared DRAM (as the Pynq's ARM core does), runs the stream on the simulator
  and unpacks the outputs; the simulator's counters land in the module's profile.
"""
from __future__ import annotations

import fnmatch
from typing import ClassVar

import numpy as np

from ...ir.graph import Graph, Node
from ..accel.graph_layers import conv_layer, fused_requantize, split_accumulators
from ..accel.cost import StreamCost
from ..base import INT8_POW2, Region, Support, Target
from .config import PRESETS, VTAConfig
from .kernel import VTAKernel
from .region import lower_region
from .rules import MAX_KERNEL, RULES, conv_rule
from .window_packing import Packing, is_packed, pack_narrow_convs
from .device import VTADevice

DEVICE_MEMORY = 1 << 28  # simulated shared DRAM (pages are only touched when used)


class VTATarget(StreamCost, Target):
    name: ClassVar[str] = "vta"
    description: ClassVar[str] = ("VTA-style int8 tensor accelerator (GEMM core + tensor ALU), "
                                  "simulated bit-exactly; quantises the model first")
    config_class: ClassVar[type] = VTAConfig
    presets: ClassVar[dict] = PRESETS
    rules: ClassVar[dict] = RULES
    kernel_kinds: ClassVar[dict] = {VTAKernel.kind: VTAKernel}
    bit_exact: ClassVar[bool] = True
    number_format = INT8_POW2     # per tensor: the ALU shifts by one immediate; half-up
    in_demo, demo_preset = True, "pynq"

    def __init__(self, config=None, preset: str | None = None):
        super().__init__(config, preset)
        self.packings: list[Packing] = []       # prepare's window-packing decisions
        self._packed: dict[str, Packing] = {}    # packed Conv -> its decision
        self._host_reasons: dict[str, str] = {}  # packing's host nodes -> why they are there

    def supports(self, node: Node, graph: Graph) -> Support:
        if node.name in self._host_reasons:
            return Support.no(self._host_reasons[node.name])
        s = self._supports(node, graph)
        d = self._packed.get(node.name)
        return Support(s.ok, f"{d.summary}; {s.reason}") if d is not None and s.ok else s

    def _supports(self, node: Node, graph: Graph) -> Support:
        if node.op not in self.rules:
            floats = [v.name for v in node.inputs + node.outputs if v is not None
                      and not v.is_const and v.type is not None
                      and np.dtype(v.type.dtype).kind == "f"]
            if node.op in ("QuantizeP2", "DequantizeP2"):
                return Support.no(f"{node.op} '{node.name}' converts float <-> int8 at the "
                                  f"edge of the integer graph; the host does it")
            if floats:
                return Support.no(f"{node.op} '{node.name}' is a float op; vta runs int8 only")
            return Support.no(f"vta has no kernel for {node.op} (layout changes and other ops "
                              f"run on the host)")
        return self.rules[node.op](self, node, graph)

    def check_region(self, nodes: list[Node], graph: Graph) -> dict[str, str]:
        # A conv/dense and its Requantize are one fused operation: the int32 accumulator never
        # leaves the accelerator (STORE writes int8), so both halves must share a region.
        return split_accumulators(self.name, nodes, graph)

    def prepare(self, graph: Graph) -> Graph:
        """Window packing (after compile() has quantised the graph to int8)."""
        return self._pack_windows(graph)

    def _pack_windows(self, graph: Graph) -> Graph:
        """Window packing (window_packing.py) for the offloadable convolutions whose input
        comes from the host and that the compile does not force onto the CPU (`cpu_nodes`);
        the host nodes it adds say why they are there."""
        # this compile's decisions only (a Target instance may compile several graphs)
        self.packings, self._packed, self._host_reasons = [], {}, {}
        producers = graph.producers()
        candidates, too_wide = [], {}
        for n in graph.nodes:
            if n.op != "Conv" or is_packed(n, producers):
                continue
            if not self.supports(n, graph).ok:
                if not conv_rule(self, n, graph, kernel_limit=False).ok:
                    continue
                too_wide[n.name] = MAX_KERNEL   # only its window is too large: pack it
            if any(fnmatch.fnmatchcase(n.name, pat) for pat in self.cpu_nodes):
                continue                      # the user keeps it on the CPU: nothing to gain
            src = producers.get(n.inputs[0])
            if src is not None and self.supports(src, graph).ok:
                continue                      # fed by the accelerator: packing would split it
            candidates.append(conv_layer(n, fused_requantize(graph, n)))
        graph, decisions = pack_narrow_convs(graph, self.config, candidates, too_wide)
        self.packings = decisions
        for d in decisions:
            if d.form is not None:
                self._packed[d.conv] = d
                for n in graph.nodes:
                    if n.name.startswith(f"{d.conv}/pack_"):
                        self._host_reasons[n.name] = (f"gathers Conv '{d.conv}''s input windows "
                                                      f"on the host (window packing)")
        return graph

    def lower(self, region: Region) -> VTAKernel:
        return lower_region(self.config, region)

    def make_device(self):
        return VTADevice(self.config, memory_bytes=min(DEVICE_MEMORY, self.config.dram_bytes))


__all__ = ["VTATarget", "DEVICE_MEMORY"]

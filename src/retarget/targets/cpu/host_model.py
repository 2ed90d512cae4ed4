"""A simple roofline model of a host CPU, for the time the host's part of a network takes on a
board we do not have (the VTA paper's Figure 16: ResNet-18 on the Pynq's Cortex-A9 alone and
with VTA).

A node takes max(flops / sustained GFLOP/s, bytes / DRAM bandwidth), where sustained = peak x
`efficiency`, flops = 2 per MAC (or one per output element and input for ops without MACs), and
bytes are every input (weights included) and output at the host's element size (float32: the
CPU-only schedules run in float). Ops that a compiler fuses into their producer (batch norm
folded into the conv's weights, ReLU applied as the producer writes) and reshapes cost nothing.
Nothing here is measured: every figure is a named field, and PYNQ_A9's values are cited where
they are defined.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import TargetError
from ...ir.graph import Graph, Node
from ...ops.registry import get_op, resolve_attrs

# Folded into the producing node (batch norm into conv weights, ReLU as the output is written)
# or pure addressing: no time of their own.
FUSED_OPS = frozenset({"BatchNormalization", "Relu", "Flatten", "Reshape", "Identity"})


@dataclass(frozen=True, slots=True)
class HostCPU:
    name: str
    clock_mhz: float
    cores: int
    flops_per_cycle: float      # per core, fp32, at peak (a multiply-add counts 2)
    efficiency: float           # sustained fraction of peak on conv / matmul (an assumption)
    dram_gbs: float             # DRAM bandwidth the host streams at, GB/s
    element_bytes: int = 4      # float32

    def __post_init__(self):
        for f in ("clock_mhz", "cores", "flops_per_cycle", "dram_gbs", "element_bytes"):
            if not getattr(self, f) > 0:
                raise TargetError(f"host CPU {self.name!r}: {f} must be positive, got "
                                  f"{getattr(self, f)!r}")
        if not 0 < self.efficiency <= 1:
            raise TargetError(f"host CPU {self.name!r}: efficiency {self.efficiency!r} must be "
                              "in (0, 1]")

    @property
    def peak_gflops(self) -> float:
        return self.cores * self.flops_per_cycle * self.clock_mhz / 1e3

    @property
    def sustained_gflops(self) -> float:
        return self.peak_gflops * self.efficiency

    def seconds(self, flops: float, nbytes: float) -> float:
        """Roofline time of `flops` operations touching `nbytes` of DRAM."""
        return max(flops / (self.sustained_gflops * 1e9), nbytes / (self.dram_gbs * 1e9))


# The VTA paper's host (Sec. 5 "Platform"): the Pynq's dual-core Cortex-A9 at 667 MHz.
# - NEON: VMLA.F32 on a quad register (4 multiply-adds) issues in 2 cycles (Xilinx XAPP1206,
#   "Boost Software Performance on Zynq-7000 AP SoC with NEON", section "NEON Performance
#   Limit"), so 2 MACs = 4 flops per cycle per core: 5.34 GFLOP/s peak for both cores.
# - efficiency 0.25 (1.33 GFLOP/s sustained): OUR ASSUMPTION for compiler-generated conv code
#   on an in-order core with a 512 KB L2; bench_vta_table1.py prints the sensitivity to it.
# - DRAM: 512 MB DDR3, 16-bit bus at 1050 MT/s = 2.1 GB/s peak (Digilent, "PYNQ-Z1 Reference
#   Manual", Features: Memory); the model assumes the host streams at that peak.
PYNQ_A9 = HostCPU("pynq-cortex-a9", clock_mhz=667.0, cores=2, flops_per_cycle=4.0,
                  efficiency=0.25, dram_gbs=2.1)


@dataclass(frozen=True, slots=True)
class NodeWork:
    node: str
    op: str
    flops: int
    nbytes: int


def _elements(value) -> int:
    return int(np.prod(value.type.shape)) if value is not None and value.type else 0


def node_work(node: Node, element_bytes: int = 4) -> NodeWork:
    """Flops and DRAM bytes of one shape-inferred node on the host (FUSED_OPS: none)."""
    if node.op in FUSED_OPS:
        return NodeWork(node.name, node.op, 0, 0)
    if any(v.type is None for v in node.outputs) or \
            any(v is not None and v.type is None for v in node.inputs):
        raise TargetError(f"host CPU model: node {node.name!r} ({node.op}) has no inferred "
                          "shapes; run infer_shapes first")
    in_types = [None if v is None else v.type for v in node.inputs]
    macs = int(get_op(node.op, node).macs(resolve_attrs(node), in_types,
                                          [v.type for v in node.outputs]))
    out_elems = sum(_elements(v) for v in node.outputs)
    live_inputs = [v for v in node.inputs if v is not None and v.type.dtype != "int64"]
    flops = 2 * macs if macs else out_elems * max(1, len(live_inputs))
    nbytes = element_bytes * (sum(_elements(v) for v in live_inputs) + out_elems)
    return NodeWork(node.name, node.op, flops, nbytes)


def graph_work(graph: Graph, element_bytes: int = 4) -> list[NodeWork]:
    """node_work of every node, in graph order."""
    return [node_work(n, element_bytes) for n in graph.nodes]


__all__ = ["FUSED_OPS", "HostCPU", "NodeWork", "PYNQ_A9", "graph_work", "node_work"]

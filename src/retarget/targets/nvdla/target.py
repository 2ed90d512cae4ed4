"""The `nvdla` target: int8 networks on an NVDLA-style engine, through the BYOC route of
Wu and Aggarwal, "Integrating TVM and NVDLA" (docs/nvdla.md).

    m = retarget.compile(graph, "nvdla")            # nv_full; also nvdla:nv_small
    m.run({"input": x})                               # equals the integer reference exactly

- number format: int8 at any scale, requantised by a multiplier and a right shift
  (INT8_MUL_SHIFT; NVDLA's SDP output converter), weights per channel;
- rules (rules.py): convolutions and dense layers with their converter, element-wise adds,
  ReLU, max pooling, channel concatenation and reshapes;
- `lower(region)`: the region goes to the nvdla compiler as the export document, run as a
  separate process (config `compiler`; by default this package's compile.py), which writes
  a loadable; the kernel loads it and runs it on the engine-level simulator (sim.py);
- the throughput model (throughput.py) feeds `retarget report`.
"""
from __future__ import annotations

from ...errors import TargetError
from ...ir.graph import Graph, Node
from ..accel.graph_layers import refuse_unknown
from ..accel.kernel import Binding, LayerInfo
from ..base import INT8_MUL_SHIFT, Region, Support
from ..external.compiler import CompilerRun, ExternalCompilerTarget
from .config import PRESETS, NvdlaConfig
from .kernel import NvdlaKernel
from .loadable import CONV, Loadable, LoadableError
from .program import NvdlaProgram
from ..accel.graph_layers import split_accumulators
from .rules import REQUANT_OPS, RULES, WIDE, converter_of, views_only
from .device import NvdlaDevice
from .throughput import throughput

DEVICE_MEMORY = 1 << 30


class NvdlaTarget(ExternalCompilerTarget):
    name = "nvdla"
    description = ("NVDLA-style engine (conv core + SDP + PDP), int8 multiplier + shift, "
                   "compiled by a separate compiler process into a loadable, simulated "
                   "bit-exactly; quantises the model")
    config_class, presets, rules = NvdlaConfig, PRESETS, RULES
    kernel_kinds = {NvdlaKernel.kind: NvdlaKernel}
    bit_exact, number_format = True, INT8_MUL_SHIFT
    default_preset = "nv_full"
    in_demo, demo_preset = True, "nv_small"

    def no_rule(self, node: Node) -> Support:
        return refuse_unknown(self.name, node, "engine")

    def check_region(self, nodes: list[Node], graph: Graph) -> dict[str, str]:
        return self.accumulator_splits(nodes, graph) or views_only(nodes)

    def accumulator_splits(self, nodes: list[Node], graph: Graph) -> dict[str, str]:
        """A conv/dense/sum-pool and the converter of its int32 result share a region (the
        accelerators' split_accumulators rule with nvdla's wide ops and converters)."""
        return split_accumulators(self.name, nodes, graph, wide=WIDE, requant_ops=REQUANT_OPS,
                                  requant_of=converter_of, stage="converter")

    def compiler_config(self) -> dict:
        return {"name": self.config.name, **self.config.hardware()}

    def load_binary(self, region: Region, binary: bytes, run: CompilerRun) -> NvdlaKernel:
        try:
            ld = Loadable.from_bytes(binary)
        except LoadableError as e:
            raise TargetError(f"nvdla region {region.name!r}: the compiler's loadable is "
                              f"unreadable: {e}") from None
        if ld.hardware != self.config.hardware():
            raise TargetError(f"nvdla region {region.name!r}: the loadable was built for "
                              f"{ld.config_name} {ld.hardware}, the target is "
                              f"{self.config.name} {self.config.hardware()}")
        program = NvdlaProgram(ld)
        names = {a.id: a.name for a in ld.addresses}
        want_in = [v.name for v in region.inputs]
        want_out = [v.name for v in region.outputs]
        if [v for v, _ in ld.inputs] != want_in or [v for v, _ in ld.outputs] != want_out:
            raise TargetError(f"nvdla region {region.name!r}: the loadable binds inputs "
                              f"{[v for v, _ in ld.inputs]} / outputs {[v for v, _ in ld.outputs]}"
                              f", the region has {want_in} / {want_out}")
        shapes = {v.name: tuple(v.type.shape) for v in region.inputs + region.outputs}
        binds = [[Binding(v, names[a], shapes[v]) for v, a in pairs]
                 for pairs in (ld.inputs, ld.outputs)]
        layers = [LayerInfo(ld.string(int(r["name"])), "conv" if r["op"] == CONV else "sdp/pdp",
                            c.macs, c.mac_cycles * self.config.macs_per_cycle)
                  for r, c in zip(ld.layers, _costs(self.config, ld))]
        return NvdlaKernel(region.name, program, binds[0], binds[1], {}, layers)

    def make_device(self):
        return NvdlaDevice(self.config, memory_bytes=DEVICE_MEMORY)


def _costs(cfg, ld):
    return throughput(cfg, ld).layers


__all__ = ["NvdlaTarget"]

"""The `dnnvm` target: int8 CNNs on a DNNVM-style instruction-driven FPGA overlay, simulated
bit-exactly, timed by a cycle model of its five engines (docs/dnnvm.md).

    m = retarget.compile(graph, "dnnvm")          # zu2; also dnnvm:zu9, dnnvm:test
    print(m.report); m.run({"input": x})           # equals the integer reference bit for bit

- number format: int8 dynamic fixed point, a power-of-two scale per tensor (the paper's), so
  compile() quantises with passes/quantize exactly as for vta;
- rules (rules.py): convolutions incl. depthwise, max pooling, element-wise add, Requantize /
  Relu, and concat / flatten as views; dense layers stay on the CPU unless `offload_fc`;
- `lower(region)` (region.py, lower.py): one instruction stream per region, feature maps NHWC
  in DDR, tiles by the paper's eq. 5-6 unless the cycle model finds a faster one;
- `DNNVMKernel.run` lays inputs out NHWC in the shared DRAM, runs the stream on the simulator
  (sim.py) and reads outputs back.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node
from ..accel.graph_layers import refuse_unknown, split_accumulators
from ..accel.cost import StreamCost
from ..base import INT8_POW2, Region, Support, Target
from .config import PRESETS, DNNVMConfig
from .fusion import TEMPLATES, GroupCosts, fusion_graph
from .kernel import DNNVMKernel
from .region import lower_region
from .rules import RULES
from .device import DNNVMDevice

DEVICE_MEMORY = 1 << 28


class DNNVMTarget(StreamCost, Target):
    # the Target fields (base.py declares their types)
    name = "dnnvm"
    description = ("DNNVM-style FPGA CNN overlay (LOAD/SAVE/CONV/POOL/ELEW engines), int8, "
                   "simulated bit-exactly; quantises the model")
    config_class, presets, rules = DNNVMConfig, PRESETS, RULES
    kernel_kinds = {DNNVMKernel.kind: DNNVMKernel}
    bit_exact, number_format = True, INT8_POW2
    fusion_templates = TEMPLATES
    default_preset = "zu2"
    in_demo, demo_preset = True, "zu2"

    def __init__(self, config=None, preset: str | None = None):
        super().__init__(config, preset)
        self._group_costs = GroupCosts(self.config)

    def no_rule(self, node: Node) -> Support:
        return refuse_unknown(self.name, node, "instruction")

    def check_region(self, nodes: list[Node], graph: Graph) -> dict[str, str]:
        refused = split_accumulators(self.name, nodes, graph)
        here = {id(n) for n in nodes}
        producers, consumers = graph.producers(), graph.consumers()
        for n in nodes:
            if n.op == "Concat":
                outside = [v.name for v in n.inputs
                           if producers.get(v) is None or id(producers[v]) not in here]
                if outside:
                    refused[n.name] = (f"Concat '{n.name}': inputs {outside} are not produced "
                                       f"on dnnvm in this region, so no SAVE can put them in "
                                       f"place (a concat is never a run-time copy)")
            elif n.op == "Flatten":
                uses = consumers.get(n.outputs[0], [])
                if not uses or id(uses[0]) not in here:
                    refused[n.name] = f"Flatten '{n.name}': its dense layer runs on cpu"
        return refused

    def lower(self, region: Region, groups=()) -> DNNVMKernel:
        """One stream for `region`; `groups`: the fusion search's (template, node names)."""
        return lower_region(self.config, region, groups)

    def fusion_graph(self, region: Region):
        return fusion_graph(region)

    def fusion_cost(self, graph, members: tuple[int, ...]) -> int | None:
        return self._group_costs(graph, members)

    has_stream_cost = True

    def fusion_stream_cost(self, graph, units: list[tuple[int, ...]]) -> int | None:
        return self._group_costs.stream(graph, units)

    def make_device(self):
        return DNNVMDevice(self.config, memory_bytes=min(DEVICE_MEMORY, self.config.dram_bytes))


__all__ = ["DNNVMTarget"]

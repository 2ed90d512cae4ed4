"""The `vta` target: int8 networks on the VTA-style tensor accelerator, simulated bit-exactly.

    m = retarget.compile(graph, "vta")            # pynq (1x16); also vta:1x32, vta:2x16 ...
    m = retarget.compile(graph, "vta:1x32", calibration={"input": x})
    print(m.report); m.run({"input": x})           # equals the integer reference bit for bit

What compile() does with it (docs/vta-target.md):
- `prepare`: fold BatchNorm, quantise to int8 with power-of-two scales (passes/quantize.py),
  calibrated on the user's samples or on random data with a warning;
- the rules below say which integer ops run on the accelerator, and why the others stay on the
  CPU (float ops, layout changes, convolutions the GEMM core cannot map...);
- `lower(region)` builds one instruction stream for the whole region with the lowering
  functions of targets/vta/lower/: region inputs and outputs in packed NCHWnc DRAM buffers,
  intermediates packed in DRAM between the layers, weights packed OIHWoi;
- `VTAKernel.run` packs the region's NCHW int8 inputs into the program's DRAM buffers on the
  host side of the shared DRAM (as the Pynq's ARM core does), runs the stream on the simulator
  and unpacks the outputs; the simulator's counters land in the module's profile.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from ...errors import ModelLoadError, TargetError, UnsupportedOpError
from ...ir.graph import Graph, Node, Value
from ...ops.registry import resolve_attrs
from ..base import Kernel, Region, Support, Target, WeightStore
from .builder import Program
from .config import PRESETS, VTAConfig
from ...frontend.onnx_quantized import QDQ_OPS
from .layout import pack_matrix, pack_nchw, unpack_matrix, unpack_nchw

MAX_KERNEL = 7          # largest convolution / pooling window the lowering handles
DEVICE_MEMORY = 1 << 28  # simulated shared DRAM (pages are only touched when used)


# ---- the rules -------------------------------------------------------------------------------
def _int8(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.type.dtype == "int8"


def _sole_consumer(graph: Graph, v: Value) -> Node | None:
    uses = graph.consumers().get(v, [])
    if len(uses) != 1 or v in graph.outputs:
        return None
    return uses[0]


def fused_requantize(graph: Graph, node: Node) -> Node | None:
    """The Requantize that takes `node`'s int32 accumulator to int8 on the ALU, if it can
    (one consumer, one per-tensor shift, half-up rounding, int8 output)."""
    rq = _sole_consumer(graph, node.outputs[0])
    if rq is None or rq.op != "Requantize" or rq.input(1) is not None:
        return None
    a = resolve_attrs(rq)
    if a["rounding"] != "half_up" or a["dtype"] != "int8" or a["shift"] is None:
        return None
    return rq


def _requant_reason(graph: Graph, node: Node) -> str | None:
    """Why `node`'s accumulator cannot be requantised on the accelerator (None: it can)."""
    rq = _sole_consumer(graph, node.outputs[0])
    if rq is None or rq.op != "Requantize":
        return (f"the int32 result of {node.op} '{node.name}' is used by something other than "
                f"one Requantize; vta stores int8 only")
    if rq.input(1) is not None:
        return (f"Requantize '{rq.name}' has per-channel shifts; vta's ALU shifts by one "
                f"immediate (quantise with per_channel=False)")
    a = resolve_attrs(rq)
    if a["rounding"] != "half_up" or a["dtype"] != "int8":
        return f"Requantize '{rq.name}' rounds {a['rounding']} to {a['dtype']}; vta: half_up to int8"
    return None


def _operand_problem(node: Node, rank: int, what: str) -> str | None:
    """Why the GEMM core cannot take `node`'s operands (None: it can): an int8 input of `rank`,
    constant int8 weights, an optional constant int32 bias."""
    x, w, b = node.inputs[0], node.input(1), node.input(2)
    where = f"{node.op} '{node.name}'"
    if not _int8(x) or x.type.rank != rank:
        return f"{where}: vta runs int8 {what}; input is {x.type}"
    if not (_int8(w) and w.is_const):
        return f"{where}: weights must be a constant int8 tensor"
    if b is not None and not (b.is_const and b.type.dtype == "int32"):
        return f"{where}: bias must be a constant int32 tensor"
    return None


def _conv_rule(t: "VTATarget", node: Node, graph: Graph) -> Support:
    x, w = node.inputs[0], node.input(1)
    where = f"Conv '{node.name}'"
    why = _operand_problem(node, 4, "2-D convolutions")
    if why:
        return Support.no(why)
    a = resolve_attrs(node)
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") and not a.get("pads"):
        return Support.no(f"{where}: auto_pad={a['auto_pad']} without explicit pads")
    if any(d != 1 for d in (a.get("dilations") or [1, 1])):
        return Support.no(f"{where}: dilation {a['dilations']} does not map to the load padding")
    kh, kw = w.type.shape[2:]
    if not (1 <= kh <= MAX_KERNEL and 1 <= kw <= MAX_KERNEL):
        return Support.no(f"{where}: kernel {kh}x{kw} outside 1..{MAX_KERNEL}")
    group, cin = int(a.get("group", 1)), x.type.shape[1]
    if group != 1:
        cout = w.type.shape[0]
        if not (group == cin == cout) or not t.lowering_has("depthwise"):
            return Support.no(f"{where}: grouped convolution (group={group}, {cin}->{cout} "
                              f"channels) does not map to the GEMM core; kept on cpu")
    why = _requant_reason(graph, node)
    if why:
        return Support.no(why)
    from .lower import reason
    why = reason(conv_layer(node, fused_requantize(graph, node)), t.config)
    if why:
        return Support.no(why)
    c = t.config
    if cin % c.block_in:
        padded = -(-cin // c.block_in) * c.block_in
        waste = 100 * (padded - cin) / padded
        return Support.yes(f"{where}: {cin} input channels, not a multiple of BLOCK_IN="
                           f"{c.block_in}; padded ({waste:.0f}% of the input buffer wasted)")
    return Support.yes("conv2d on the GEMM core, requantised on the ALU")


def _gemm_rule(t: "VTATarget", node: Node, graph: Graph) -> Support:
    where = f"{node.op} '{node.name}'"
    why = _operand_problem(node, 2, "2-D dense layers")
    if why:
        return Support.no(why)
    if node.op == "Gemm":
        at = resolve_attrs(node)
        if at["transA"] or at["alpha"] != 1.0 or at["beta"] != 1.0:
            return Support.no(f"{where}: transA/alpha/beta must be 0/1/1 (the quantiser folds them)")
    why = _requant_reason(graph, node)
    return Support.no(why) if why else Support.yes("dense on the GEMM core, requantised on the ALU")


def _requantize_rule(t: "VTATarget", node: Node, graph: Graph) -> Support:
    src = graph.producers().get(node.inputs[0])
    if src is not None and src.op in ("Conv", "Gemm", "MatMul"):
        if fused_requantize(graph, src) is node and t.supports(src, graph).ok:
            return Support.yes(f"fused into {src.op} '{src.name}' (ALU: add, shift, clip)")
        return Support.no(f"requantises {src.op} '{src.name}', which runs on cpu")
    a = resolve_attrs(node)
    if _int8(node.inputs[0]) and node.input(1) is None and a["dtype"] == "int8" \
            and a["rounding"] == "half_up" and has_lowering("Relu"):
        return Support.yes("int8 shift/clip on the ALU")
    return Support.no(f"Requantize '{node.name}': only int8 -> int8 or fused after a conv/dense")


def _qadd_rule(t: "VTATarget", node: Node, graph: Graph) -> Support:
    a, b = node.inputs
    at = resolve_attrs(node)
    if not (_int8(a) and _int8(b)) or a.type.shape != b.type.shape or a.type.rank != 4:
        return Support.no(f"QAdd '{node.name}': vta adds two int8 NCHW tensors of one shape; "
                          f"got {a.type} + {b.type}")
    if at["rounding"] != "half_up" or at["dtype"] != "int8":
        return Support.no(f"QAdd '{node.name}': rounds {at['rounding']} to {at['dtype']}")
    return Support.yes("residual add on the ALU")


def _relu_rule(t: "VTATarget", node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    if not _int8(x) or x.type.rank != 4:
        return Support.no(f"Relu '{node.name}': vta runs int8 NCHW Relu; input is {x.type}")
    return Support.yes("max(x, 0) on the ALU")


def _pool_rule(t: "VTATarget", node: Node, graph: Graph) -> Support:
    x = node.inputs[0]
    where = f"{node.op} '{node.name}'"
    if not _int8(x) or x.type.rank != 4:
        return Support.no(f"{where}: vta pools int8 NCHW tensors; input is {x.type} "
                          f"(float ops stay on cpu)")
    a = resolve_attrs(node)
    if any(v is not None and v is not node.outputs[0] and graph.consumers().get(v)
           for v in node.outputs[1:]):
        return Support.no(f"{where}: its Indices output is used")
    if a.get("ceil_mode") or any(d != 1 for d in (a.get("dilations") or [1, 1])):
        return Support.no(f"{where}: ceil_mode / dilation not supported on the ALU")
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return Support.no(f"{where}: auto_pad={a['auto_pad']}")
    kh, kw = a["kernel_shape"]
    if not (1 <= kh <= MAX_KERNEL and 1 <= kw <= MAX_KERNEL):
        return Support.no(f"{where}: window {kh}x{kw} outside 1..{MAX_KERNEL}")
    if node.op == "AveragePool":
        if (kh * kw) & (kh * kw - 1) or (any(a.get("pads") or []) and not a["count_include_pad"]):
            return Support.no(f"{where}: divisor {kh * kw} is not a power of two (the ALU "
                              f"divides by shifting)")
        if not t.lowering_has("avgpool"):
            return Support.no(f"{where}: no average-pool lowering for vta yet")
    if a.get("storage_order"):
        return Support.no(f"{where}: storage_order=1")
    return Support.yes(f"{'max' if node.op == 'MaxPool' else 'average'} pooling on the ALU")


RULES = {"Conv": _conv_rule, "Gemm": _gemm_rule, "MatMul": _gemm_rule,
         "Requantize": _requantize_rule, "QAdd": _qadd_rule, "Relu": _relu_rule,
         "MaxPool": _pool_rule, "AveragePool": _pool_rule}


# ---- the kernel: one instruction stream per region -------------------------------------------
@dataclass(frozen=True, slots=True)
class Binding:
    """A region input or output: graph value `value` (int8, logical NCHW or (rows, cols)
    shape) lives packed in the program's DRAM buffer `buffer`."""
    value: str
    buffer: str
    shape: tuple[int, ...]

    def to_json(self) -> dict:
        return {"value": self.value, "buffer": self.buffer, "shape": list(self.shape)}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "Binding":
        shape = tuple(int(s) for s in d["shape"])
        if len(shape) not in (2, 4) or min(shape) <= 0:
            raise ValueError(f"binding {d.get('value')!r}: shape {list(shape)} is not 2-D/4-D")
        return Binding(str(d["value"]), str(d["buffer"]), shape)


def pack_for(cfg: VTAConfig, x: np.ndarray, block: int) -> np.ndarray:
    """A logical int8 tensor in the packed layout the accelerator reads (NCHWnc or blocked
    matrix), zero-padding batch and channels up to the block sizes."""
    if x.ndim == 4:
        return pack_nchw(x, cfg.batch, block)
    return pack_matrix(x, cfg.batch, block)


def unpack_from(p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The logical tensor of `shape` from its packed form (padding cropped)."""
    if len(shape) == 4:
        return unpack_nchw(p, shape[0], shape[1])
    return unpack_matrix(p, shape[0], shape[1])


@dataclass(frozen=True, slots=True)
class LayerInfo:
    """What the lowering knew about one layer of a kernel's stream, kept for reports (the
    cycle model alone cannot tell useful MACs from the padding the GEMM core multiplies)."""
    name: str               # the graph node's name; program.layers spans use the same name
    kind: str               # conv2d, dense, maxpool, avgpool, residual_add, requantize
    macs: int               # useful multiply-accumulates (the layer's definition)
    performed_macs: int     # what the GEMM core multiplies, padding and diagonal blocks included

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "macs": self.macs,
                "performed_macs": self.performed_macs}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "LayerInfo":
        info = LayerInfo(str(d["name"]), str(d["kind"]), int(d["macs"]),
                         int(d["performed_macs"]))
        if info.macs < 0 or info.performed_macs < 0:
            raise ValueError(f"layer {info.name!r}: negative MAC count")
        return info


class VTAKernel(Kernel):
    """A lowered region: the Program (instructions, micro-ops, DRAM layout, per-layer
    instruction spans), its packed constants (weights, biases) by DRAM buffer name, where its
    inputs and outputs live, and per-layer MAC counts (`layers`) for reports."""

    kind: ClassVar[str] = "vta.program"

    def __init__(self, name: str, program: Program, inputs: list[Binding],
                 outputs: list[Binding], constants: dict[str, np.ndarray],
                 layers: Sequence[LayerInfo] = ()):
        self.name, self.program = name, program
        self.inputs, self.outputs, self.constants = inputs, outputs, constants
        self.layers: list[LayerInfo] = list(layers)
        for b in inputs + outputs:
            if b.buffer not in program.buffers:
                raise TargetError(f"vta kernel {name!r}: value {b.value!r} bound to unknown "
                                  f"DRAM buffer {b.buffer!r}")
        self._loaded: dict[int, Any] = {}   # id(device) -> LoadedProgram
        self._timing = None

    # ---- the cycle model --------------------------------------------------------------------
    def timing(self):
        """The cycle model's TimingResult for this kernel's stream (timing.simulate_timing),
        with per-layer aggregates from the program's layer spans. Needs no data, so it works
        on a loaded artifact without inputs; computed once (the stream never changes)."""
        if self._timing is None:
            from .timing import simulate_timing
            self._timing = simulate_timing(self.program, layers=self.layer_spans())
        return self._timing

    def layer_spans(self) -> list[tuple[str, int, int]]:
        """(layer name, first insn, stop insn) per layer: the program's own spans."""
        return list(getattr(self.program, "layers", None) or [])

    def layer_info(self, name: str) -> LayerInfo | None:
        for info in self.layers:
            if info.name == name:
                return info
        return None

    # ---- device lifecycle -------------------------------------------------------------------
    def upload(self, device) -> None:
        """Place the program (micro-ops, packed weights, instruction stream) in device DRAM."""
        self._loaded[id(device)] = device.load_program(self.program, self.constants)

    def release(self, device) -> None:
        loaded = self._loaded.pop(id(device), None)
        if loaded is not None:
            device.free(loaded.insns)
            device.free(loaded.base)

    def _buffer_view(self, device, loaded, name: str) -> np.ndarray:
        buf = self.program.buffers[name]
        return device.view(loaded.base + buf.offset, buf.shape, buf.dtype)

    def run(self, device, inputs: Sequence[int], outputs: Sequence[int]) -> list:
        loaded = self._loaded.get(id(device))
        if loaded is None:
            raise TargetError(f"vta kernel {self.name!r} was not uploaded to this device")
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise TargetError(f"vta kernel {self.name!r}: {len(inputs)} inputs / {len(outputs)} "
                              f"outputs given, expects {len(self.inputs)} / {len(self.outputs)}")
        cfg = self.program.config
        # The host packs in place in the shared DRAM: the executor's copy of the NCHW tensor
        # is read through a view and written packed where the program's LOADs read it.
        for b, ptr in zip(self.inputs, inputs):
            packed = pack_for(cfg, device.view(ptr, b.shape, np.int8), cfg.block_in)
            dst = self._buffer_view(device, loaded, b.buffer)
            if packed.shape != dst.shape:
                raise TargetError(f"vta kernel {self.name!r}: input {b.value!r} packs to "
                                  f"{packed.shape}, its DRAM buffer {b.buffer!r} is {dst.shape}")
            dst[...] = packed
        device.submit(loaded.task(self.name))
        records = device.synchronize()
        for b, ptr in zip(self.outputs, outputs):
            out = unpack_from(self._buffer_view(device, loaded, b.buffer), b.shape)
            device.view(ptr, b.shape, np.int8)[...] = out
        return records

    # ---- artifact ---------------------------------------------------------------------------
    def save(self, directory: Path, weights: WeightStore) -> dict:
        """program.insn.bin + program.uop.bin + program.json (builder.Program's on-disk form),
        kernel.json (bindings); packed constants go to the artifact's weights.npz."""
        self.program.save(str(directory / "program"))
        keys = {}
        for buf, array in self.constants.items():
            keys[buf] = f"{self.name}/{buf}"
            weights[keys[buf]] = array
        doc = {"name": self.name, "inputs": [b.to_json() for b in self.inputs],
               "outputs": [b.to_json() for b in self.outputs], "constants": keys,
               "layers": [info.to_json() for info in self.layers]}
        (directory / "kernel.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
        return {"kind": self.kind, "program": "program", "file": "kernel.json"}

    @classmethod
    def load(cls, directory: Path, spec: Mapping[str, Any], weights: Mapping[str, np.ndarray],
             target: Target) -> "VTAKernel":
        try:
            doc = json.loads((directory / "kernel.json").read_text(encoding="utf-8"))
            program = Program.load(str(directory / "program"))
            inputs = [Binding.from_json(d) for d in doc["inputs"]]
            outputs = [Binding.from_json(d) for d in doc["outputs"]]
            keys = dict(doc["constants"])
            # artifacts written before per-layer MACs were kept have no "layers"
            layers = [LayerInfo.from_json(d) for d in doc.get("layers", [])]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ModelLoadError(f"vta kernel in {directory}: unreadable "
                                 f"({type(e).__name__}: {e})") from None
        if program.config != target.config:
            raise ModelLoadError(f"vta kernel in {directory} was built for config "
                                 f"{program.config.target_name}; the module's target is "
                                 f"{target.config.target_name}")
        missing = [k for k in keys.values() if k not in weights]
        if missing:
            raise ModelLoadError(f"vta kernel in {directory}: weights {missing} are missing")
        consts = {buf: weights[k] for buf, k in keys.items()}
        for buf, array in consts.items():
            want = program.buffers.get(buf)
            if want is None or tuple(array.shape) != want.shape or str(array.dtype) != want.dtype:
                raise ModelLoadError(f"vta kernel in {directory}: constant {buf!r} "
                                     f"{array.dtype}{list(array.shape)} does not match its "
                                     f"DRAM buffer {want}")
        try:
            return cls(str(doc["name"]), program, inputs, outputs, consts, layers)
        except TargetError as e:
            raise ModelLoadError(str(e)) from None


# ---- the target ------------------------------------------------------------------------------
class VTATarget(Target):
    name: ClassVar[str] = "vta"
    description: ClassVar[str] = ("VTA-style int8 tensor accelerator (GEMM core + tensor ALU), "
                                  "simulated bit-exactly; quantises the model first")
    config_class: ClassVar[type] = VTAConfig
    presets: ClassVar[dict] = PRESETS
    rules: ClassVar[dict] = RULES
    kernel_kinds: ClassVar[dict] = {VTAKernel.kind: VTAKernel}
    bit_exact: ClassVar[bool] = True

    def supports(self, node: Node, graph: Graph) -> Support:
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
        if not has_lowering(node.op) and node.op != "Requantize":
            return Support.no(f"{node.op} '{node.name}': no vta lowering for {node.op} yet "
                              f"(targets/vta/lower/); runs on cpu")
        return self.rules[node.op](self, node, graph)

    def check_region(self, nodes: list[Node], graph: Graph) -> dict[str, str]:
        # A conv/dense and its Requantize are one fused operation: the int32 accumulator never
        # leaves the accelerator (STORE writes int8), so both halves must share a region.
        here = {id(n) for n in nodes}
        producers = graph.producers()
        refused = {}
        for n in nodes:
            if n.op in ("Conv", "Gemm", "MatMul"):
                rq = fused_requantize(graph, n)
                if rq is None or id(rq) not in here:
                    refused[n.name] = (f"{n.op} '{n.name}': its Requantize runs on cpu, and vta "
                                       f"cannot hand an int32 accumulator to the host")
            elif n.op == "Requantize":
                src = producers.get(n.inputs[0])
                if src is not None and src.op in ("Conv", "Gemm", "MatMul") and id(src) not in here:
                    refused[n.name] = f"requantises {src.op} '{src.name}', which runs on cpu"
        return refused

    def prepare(self, graph: Graph, calibration: Any = None) -> Graph:
        """Fold BatchNorm into convolutions and quantise to int8 with power-of-two scales,
        per-tensor (the ALU shifts by one immediate). `calibration`: see passes.quantize;
        None calibrates on random data with a warning. An already-integer graph (no float
        Conv/Gemm/MatMul left to quantise) is returned as it is."""
        from ...passes.quantize import quantize
        if any(n.op in QDQ_OPS for n in graph.nodes):
            return _convert_prequantized(graph)
        if not any(n.op in ("Conv", "Gemm", "MatMul") and n.inputs[0].type is not None
                   and np.dtype(n.inputs[0].type.dtype).kind == "f" for n in graph.nodes):
            return graph
        return quantize(graph, calibration, per_channel=False)

    def lowering_has(self, feature: str) -> bool:
        """Whether targets/vta/lower/ provides `feature` ("depthwise", "avgpool", ...)."""
        try:
            from . import lower as lowering
        except ImportError:
            return False
        return feature in getattr(lowering, "FEATURES", ())

    def lower(self, region: Region) -> VTAKernel:
        return lower_region(self.config, region)

    def make_device(self):
        from .device import VTADevice
        return VTADevice(self.config, memory_bytes=min(DEVICE_MEMORY, self.config.dram_bytes))


# Graph op -> the function of targets/vta/lower/ that lowers it. Ops whose function is not
# there (yet) are refused by the rules with that reason, so they run on the host.
LOWERING_FUNCTIONS = {"Conv": "lower_conv2d", "Gemm": "lower_dense", "MatMul": "lower_dense",
                      "QAdd": "lower_residual_add", "Relu": "lower_requantize",
                      "MaxPool": "lower_pool2d", "AveragePool": "lower_pool2d"}


def _convert_prequantized(graph: Graph) -> Graph:
    """An already-quantised ONNX model (QDQ / QLinearConv with power-of-two scales) as
    retarget's integer ops, requantising half-up as VTA's ALU does (add, then shift). ONNX rounds
    half to even, so results differ from the file's by one LSB exactly where a value lies half
    way: a documented approximation (docs/quantization.md), said as a warning."""
    import warnings
    from ...frontend.onnx_quantized import convert_quantized
    warnings.warn("vta: requantising the imported QDQ model half-up (VTA's ALU adds then shifts); "
                  "ONNX rounds half to even, so outputs can differ from the file's by one LSB on "
                  "exact ties", stacklevel=3)
    return convert_quantized(graph, rounding="half_up")


def has_lowering(op: str) -> bool:
    try:
        from . import lower as lowering
    except ImportError:
        return False
    return hasattr(lowering, LOWERING_FUNCTIONS.get(op, "-"))


def _requant_of(rq: Node):
    from .lower import Requant
    a = resolve_attrs(rq)
    return Requant(int(a["shift"]), int(a["lo"]), int(a["hi"]))


def conv_layer(node: Node, rq: Node):
    """The lowering's Conv2d description of Conv `node` requantised by `rq`."""
    from .lower import Conv2d
    a = resolve_attrs(node)
    x, w = node.inputs[0].type.shape, node.inputs[1].type.shape
    pads = list(a.get("pads") or [0, 0, 0, 0])
    return Conv2d(node.name, tuple(x), int(w[0]), (int(w[2]), int(w[3])),
                  tuple(int(s) for s in (a.get("strides") or [1, 1])),
                  (int(pads[0]), int(pads[1]), int(pads[2]), int(pads[3])),
                  int(a.get("group", 1)), _requant_of(rq))


def dense_weight(node: Node) -> np.ndarray:
    """Gemm/MatMul weights as (out_features, in_features), what lower_dense takes."""
    b = node.inputs[1].const
    if node.op == "Gemm" and resolve_attrs(node)["transB"]:
        return b
    return np.ascontiguousarray(b.T)


def _lower_alu_node(L, ctx, n: Node, x: list):
    """QAdd / Relu / int8 Requantize / pooling on the ALU."""
    a = resolve_attrs(n)
    shape = tuple(n.inputs[0].type.shape)
    if n.op == "QAdd":
        layer = L.ResidualAdd(n.name, shape, int(a["shift_a"]), int(a["shift_b"]),
                              int(a["out_shift"]), int(a["lo"]), int(a["hi"]))
        return L.lower_residual_add(ctx, layer, x[0], x[1])
    if n.op == "Relu":
        return L.lower_requantize(ctx, L.RequantizeLayer(n.name, shape, L.Requant(0, 0, 127)), x[0])
    if n.op == "Requantize":
        return L.lower_requantize(ctx, L.RequantizeLayer(n.name, shape, _requant_of(n)), x[0])
    pads = list(a.get("pads") or [0, 0, 0, 0])
    layer = L.Pool2d(n.name, "max" if n.op == "MaxPool" else "avg", shape,
                     tuple(int(k) for k in a["kernel_shape"]),
                     tuple(int(k) for k in (a.get("strides") or [1, 1])),
                     tuple(int(p) for p in pads))
    return L.lower_pool2d(ctx, layer, x[0])


def lower_region(cfg: VTAConfig, region: Region) -> VTAKernel:
    """One instruction stream for `region`: inputs in packed DRAM buffers, each layer lowered
    by targets/vta/lower/ reading the packed result of the previous one."""
    from . import lower as L
    ctx = L.LoweringContext(cfg)
    packed: dict[int, Any] = {}
    inputs = []
    for i, v in enumerate(region.inputs):
        packed[id(v)] = ctx.input(f"in{i}", tuple(v.type.shape))
        inputs.append(Binding(v.name, f"in{i}", tuple(v.type.shape)))
    consumers: dict[int, list[Node]] = {}
    for n in region.nodes:
        for v in n.inputs:
            if v is not None:
                consumers.setdefault(id(v), []).append(n)
    fused: set[int] = set()
    for n in region.nodes:
        if id(n) in fused:
            continue
        if n.op in ("Conv", "Gemm", "MatMul"):
            uses = consumers.get(id(n.outputs[0]), [])
            if len(uses) != 1 or uses[0].op != "Requantize":
                raise TargetError(f"{n.op} '{n.name}': its Requantize is not in region "
                                  f"{region.name!r}")
            rq = uses[0]
            fused.add(id(rq))
            x = packed.get(id(n.inputs[0]))
            if x is None:
                raise TargetError(f"{n.op} '{n.name}': input {n.inputs[0].name!r} is not "
                                  f"available in region {region.name!r}")
            b = n.input(2)
            bias = None if b is None else b.const
            if n.op == "Conv":
                y = L.lower_conv2d(ctx, conv_layer(n, rq), x, n.inputs[1].const, bias)
            else:
                w = dense_weight(n)
                xm = x.as_matrix() if len(x.shape) == 4 else x
                layer = L.Dense(n.name, int(xm.shape[0]), int(w.shape[1]), int(w.shape[0]),
                                _requant_of(rq))
                y = L.lower_dense(ctx, layer, xm, w, bias)
            packed[id(rq.outputs[0])] = y
        elif n.op in ("QAdd", "Relu", "Requantize", "MaxPool", "AveragePool"):
            x = [packed.get(id(v)) for v in n.inputs if v is not None and not v.is_const]
            if any(t is None for t in x):
                raise TargetError(f"{n.op} '{n.name}': an input is not available in region "
                                  f"{region.name!r}")
            packed[id(n.outputs[0])] = _lower_alu_node(L, ctx, n, x)
        else:
            raise UnsupportedOpError(f"vta: no lowering for {n.op} '{n.name}' (the rules "
                                     f"should have kept it on the cpu)")
    outputs = []
    for v in region.outputs:
        t = packed.get(id(v))
        if t is None:
            raise TargetError(f"region {region.name!r}: output {v.name!r} is not produced")
        outputs.append(Binding(v.name, t.buffer, tuple(v.type.shape)))
    seg = ctx.finish([packed[id(v)] for v in region.outputs])
    layers = [LayerInfo(r.name, r.kind, int(r.useful_macs), int(r.performed_macs))
              for r in seg.reports]
    return VTAKernel(region.name, seg.program, inputs, outputs, dict(seg.constants), layers)


__all__ = ["VTATarget", "VTAKernel", "LayerInfo", "Binding", "RULES", "fused_requantize",
           "lower_region"]

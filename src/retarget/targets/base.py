"""The Target interface every backend fills in.

A target is data plus a table of rules:

- `config`: a frozen dataclass instance (sizes, clock, memory, the minimum region size...);
  `presets` names ready-made configs.
- `rules`: op name -> function(target, node, graph) -> Support. An op missing from the table is
  refused with a reason; the partitioner keeps refused nodes on the CPU and reports why.
  `check_region(nodes, graph)` may refuse nodes once regions are formed (rules that depend on
  what else runs in the region, such as fusion).
- `lower(region) -> Kernel`: compile one offloaded region. A Kernel serialises itself to files
  in a Module artifact and is rebuilt from them by `load_kernel`, which looks the kernel kind up
  in the target's own `kernel_kinds` table: nothing in an artifact is ever imported or executed.
- `make_device()`: the Device (device/base.py) that runs the kernels.
- `estimate_cost(region)`, `estimate_node_cost(node, graph)`: optional, seconds on the device
  (None when the target has no model; targets/accel/cost.py fills both in from a cycle model).
- `design_space(preset)`: optional, the hardware design space `retarget explore` sweeps
  (targets/<name>/space.py; docs/explore.md); None by default.
- `number_format`: the integer format the target computes in (a NumberFormat), or None for a
  float target. compile() quantises the graph into it (passes/quantize) or converts a
  pre-quantised model to it (frontend/onnx_quantized) before anything target-specific runs:
  a target never imports frontend/ or passes/.
- `prepare(graph) -> graph`: optional target-specific rewrite of the (quantised) graph run by
  compile() before partitioning (e.g. vta's window packing); the identity by default. `bit_exact = True` says the compiled module must equal the reference
  run of the prepared graph bit for bit (`retarget run --check` then compares exactly).

Subclass only to fill in these fields; the partitioner, compiler, executor and artifact code
are shared by every target.
"""
from __future__ import annotations

import importlib
import math
import os
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from ..errors import TargetError
from ..ir.graph import Graph, Node, Value


@dataclass(frozen=True, slots=True)
class Support:
    """A target's answer to "can you run this node?": yes, or no with the reason."""
    ok: bool
    reason: str = ""

    @staticmethod
    def yes(reason: str = "") -> "Support":
        return Support(True, reason)

    @staticmethod
    def no(reason: str) -> "Support":
        return Support(False, reason)

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True, slots=True)
class NumberFormat:
    """The integer format a target computes in, as compile() must quantise for it.

    name: "int8-pow2" is int8 tensors with power-of-two scales, int32 accumulators and
        requantisation by shifts (ops/quantized.py; docs/quantization.md); "int8-mul-shift"
        is int8 at any scale, requantised by an integer multiplier and a right shift
        (RequantizeMul, QAddMul: NVDLA's output converter); "int8-tflite" is TFLite's
        arithmetic (RequantizeQ31, QAddQ31, ...: ops/quantized_tflite.py); "int8-ort" is
        onnxruntime's (RequantizeOrt, QLinearAddOrt, ...: ops/quantized_ort.py);
    per_channel: whether weight scales may differ per output channel (False when the hardware
        shifts a whole tensor by one immediate);
    rounding: how a pre-quantised (QDQ) model's requantisation is rounded on this hardware
        ("half_up": add half then shift, as VTA's ALU and DNNVM's datapath do)."""
    name: str = "int8-pow2"
    per_channel: bool = False
    rounding: str = "half_up"

    @property
    def scales(self) -> str:
        """How a QDQ model's scales are applied (convert_quantized's `scales`): "pow2" (shifts
        only), "multiplier" (multiply, shift) or "onnxruntime" (float32, as onnxruntime)."""
        return {"int8-mul-shift": "multiplier", "int8-ort": "onnxruntime"}.get(self.name,
                                                                                "pow2")


INT8_POW2 = NumberFormat()
INT8_MUL_SHIFT = NumberFormat("int8-mul-shift", per_channel=True)
# TFLite's own integer arithmetic (ops/quantized_tflite.py): asymmetric int8 activations, a
# 32-bit multiplier applied by rounding doubling high multiply and rounding right shift. An
# int8 .tflite model imports into it as it is; quantising a float graph into it (TFLite's
# converter) is not implemented.
INT8_TFLITE = NumberFormat("int8-tflite", per_channel=True)
# onnxruntime's CPU arithmetic on a QDQ model (ops/quantized_ort.py): u8 / s8 activations with
# zero points, float32 requantisation rounded half to even. A QDQ model converts into it
# (load_quantized(..., scales="onnxruntime")); quantising a float graph into it is not
# implemented (onnxruntime's quantize_static makes such models).
INT8_ORT = NumberFormat("int8-ort", per_channel=True, rounding="half_even")
NUMBER_FORMATS = (INT8_POW2.name, INT8_MUL_SHIFT.name, INT8_TFLITE.name, INT8_ORT.name)


@dataclass(slots=True, eq=False)
class Region:
    """A convex set of nodes that runs as one unit on one target.

    `inputs` are the non-constant values the region reads from outside (graph inputs or
    values produced by other regions); `outputs` are the values it produces that something
    outside reads (another region or the graph's outputs). Constants stay inside."""
    name: str
    target: str                 # "cpu" or the accelerator target's name
    nodes: list[Node]           # in topological order
    inputs: list[Value]
    outputs: list[Value]
    macs: int = 0

    def subgraph(self) -> Graph:
        """The region as a Graph of its own (shares Node and Value objects with the parent)."""
        return Graph(self.nodes, self.inputs, self.outputs, name=self.name)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]


def external_inputs(nodes: Sequence[Node]) -> list[Value]:
    """The non-constant values `nodes` read that none of them produces, in first-use order:
    the inputs of a region made of them."""
    produced = {id(v) for n in nodes for v in n.outputs}
    inputs: list[Value] = []
    for n in nodes:
        for v in n.inputs:
            if v is not None and not v.is_const and id(v) not in produced \
                    and all(v is not x for x in inputs):
                inputs.append(v)
    return inputs


# The store every kernel writes its arrays into when a Module is saved (one weights.npz per
# artifact, keyed by name); values in it are plain NumPy arrays, never objects.
WeightStore = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class Disassembler:
    """How `retarget disasm` reads one kernel kind's saved programs: `recognizes(path)` says
    whether a file or kernel directory holds one; `disassemble(path, config=, uops=)` lists it."""
    recognizes: Callable[[Path], bool]
    disassemble: Callable[..., str]


class Kernel:
    """Compiled code for one region on one target.

    Lifecycle on a device: `upload(device)` once (places constant weights in device memory),
    then `run(device, inputs, outputs)` per inference with device pointers for the region's
    inputs and outputs (in Region.inputs / Region.outputs order), then `release(device)`.
    `run` submits the kernel's tasks, synchronises and returns the device's TaskRecords."""

    kind: ClassVar[str] = ""   # key in the target's kernel_kinds table

    def upload(self, device) -> None:
        raise NotImplementedError(f"{type(self).__name__}.upload")

    def run(self, device, inputs: Sequence[int], outputs: Sequence[int]) -> list:
        raise NotImplementedError(f"{type(self).__name__}.run")

    def release(self, device) -> None:
        raise NotImplementedError(f"{type(self).__name__}.release")

    def summary(self) -> str:
        """One line `retarget compile` prints under the placement report ("": nothing)."""
        return ""

    def report_table(self) -> str:
        """A kernel with its own cost model but no instruction-level cycle model (sunway)
        returns its per-layer table here; `retarget report` prints it ("": none)."""
        return ""

    def layer_outputs(self, device, inputs: Sequence[np.ndarray]) -> list:
        """Per-layer debugging (runtime/per_layer.py): run on `inputs` (logical arrays in
        Region.inputs order, the kernel uploaded to `device`) and return, per hardware layer
        in execution order, (layer name, graph value it computes, first channel, the (N, C,
        H, W) array it wrote: channels [first, first + C) of that value)."""
        raise NotImplementedError(f"{type(self).__name__} does not report per-layer outputs "
                                  f"(--per-layer); its target would implement layer_outputs()")

    def save(self, directory: Path, weights: WeightStore) -> dict:
        """Write this kernel's own files into `directory` (created by the caller), put its
        arrays into `weights`, and return a JSON-able spec that `load` rebuilds it from."""
        raise NotImplementedError(f"{type(self).__name__}.save")

    @classmethod
    def load(cls, directory: Path, spec: Mapping[str, Any], weights: Mapping[str, np.ndarray],
             target: "Target") -> "Kernel":
        raise NotImplementedError(f"{cls.__name__}.load")

    # ---- `retarget disasm` --------------------------------------------------------------------
    # A kernel kind that can list its saved programs sets this (its target's disasm.py).
    disassembler: ClassVar["Disassembler | None"] = None

    @classmethod
    def recognizes(cls, path: Path) -> bool:
        """Whether `path` (a saved kernel directory or one of its program files) holds a
        program of this kind, for `retarget disasm` without --target."""
        return cls.disassembler is not None and cls.disassembler.recognizes(path)

    @classmethod
    def disassemble(cls, path: Path, *, config: str | None = None,
                    uops: Path | None = None) -> str:
        """The program at `path` (a saved kernel directory or its program file) readably, for
        `retarget disasm`. config: a preset or config file overriding the one saved beside
        the program; uops: a micro-op file for a stream that keeps them apart."""
        if cls.disassembler is None:
            raise TargetError(f"kernels of kind {cls.kind!r} have no disassembler "
                              f"({cls.__name__}.disassembler is not set)")
        return cls.disassembler.disassemble(path, config=config, uops=uops)


Rule = Callable[["Target", Node, Graph], Support]


class Target:
    """Base class of every target. See the module docstring for what a subclass fills in."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    config_class: ClassVar[type] = type(None)
    presets: ClassVar[Mapping[str, Any]] = {}
    # The preset a target without an explicit config or preset starts from (None: the config
    # class's defaults).
    default_preset: ClassVar[str | None] = None
    rules: ClassVar[Mapping[str, Rule]] = {}
    kernel_kinds: ClassVar[Mapping[str, type[Kernel]]] = {}
    # True when the target's results must equal the reference run of prepare()'s graph exactly
    # (integer targets); False allows float rounding differences.
    bit_exact: ClassVar[bool] = False
    # For a target that is not bit-exact: the relative tolerance `retarget run --check` holds
    # its outputs to (of the largest reference magnitude, or 1, whichever is larger).
    check_rtol: ClassVar[float] = 1e-5
    # The integer format compile() quantises into before prepare(); None: the float graph.
    number_format: ClassVar[NumberFormat | None] = None
    # Fusion templates (targets/fusion.py) this target lowers as one unit; empty: no fusion.
    # A target that declares them implements fusion_graph, fusion_cost and lower(region,
    # groups).
    fusion_templates: ClassVar[tuple] = ()
    # Config fields that describe the machine the module is built and run on, not the compiled
    # program: a command or flags that reach a process, a path, how much host memory a device
    # may take. Field -> the environment variable that sets it (None: none). An artifact never
    # sets them (runtime/artifact.py drops them, with a note): they come from the target's
    # defaults, the environment, or the caller's explicit options (docs/guarantees.md).
    host_fields: ClassVar[Mapping[str, str | None]] = {}
    # `retarget demo` (the shipped digits CNN, end to end): whether it offers this target, and
    # the preset it compiles it at (None: the config's default).
    in_demo: ClassVar[bool] = False
    demo_preset: ClassVar[str | None] = None

    def __init__(self, config: Any = None, preset: str | None = None):
        if config is None:
            config = self.preset(preset) if preset else self.default_config()
            config = self._from_environment(config)
        if not (is_dataclass(config) and isinstance(config, self.config_class)):
            raise TargetError(f"target {self.name!r} needs a {self.config_class.__name__} config, "
                              f"got {type(config).__name__}")
        self.config = config
        self.preset_name = preset
        # Node-name glob patterns the current compile() forces onto the CPU; set before
        # prepare() so a target-specific rewrite can leave those nodes alone.
        self.cpu_nodes: tuple[str, ...] = ()

    # ---- configuration ----------------------------------------------------------------------
    @classmethod
    def default_config(cls):
        return cls.preset(cls.default_preset) if cls.default_preset else cls.config_class()

    @classmethod
    def preset(cls, name: str):
        if name not in cls.presets:
            known = ", ".join(cls.presets) or "none"
            raise TargetError(f"target {cls.name!r} has no preset {name!r}; presets: {known}")
        return cls.presets[name]

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Target":
        """A new target whose config has `overrides` applied (unknown fields -> TargetError)."""
        if not overrides:
            return self
        known = {f.name: f for f in fields(self.config)}
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise TargetError(f"unknown config field(s) {unknown} for target {self.name!r}; "
                              f"known: {sorted(known)}")
        changes = {k: _finite(self.name, k, _coerce(self.name, k, getattr(self.config, k), v))
                   for k, v in overrides.items()}
        try:
            cfg = replace(self.config, **changes)
        except (TypeError, ValueError, OverflowError) as e:
            raise TargetError(f"invalid config for target {self.name!r}: {e}") from None
        return type(self)(cfg, preset=self.preset_name)

    def config_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self.config, f.name) for f in fields(self.config)}

    def program_config(self) -> dict[str, Any]:
        """The config fields an artifact records: all but `host_fields`."""
        return {k: v for k, v in self.config_dict().items() if k not in self.host_fields}

    @classmethod
    def _from_environment(cls, config):
        """`config` with the host fields whose environment variable is set taken from it."""
        changes = {}
        for name, var in cls.host_fields.items():
            value = os.environ.get(var) if var else None
            if value is not None:
                try:
                    changes[name] = _coerce(cls.name, name, getattr(config, name), value)
                except TargetError as e:
                    raise TargetError(f"environment variable {var}: {e}") from None
        if not changes:
            return config
        try:
            return replace(config, **changes)
        except (TypeError, ValueError, OverflowError) as e:
            raise TargetError(f"target {cls.name!r}: environment "
                              f"{', '.join(cls.host_fields[k] for k in changes)}: {e}") from None

    @property
    def spec(self) -> str:
        return f"{self.name}:{self.preset_name}" if self.preset_name else self.name

    # ---- the rule table ---------------------------------------------------------------------
    def supports(self, node: Node, graph: Graph) -> Support:
        """Can this target run `node`? Looks the op up in `rules`."""
        rule = self.rules.get(node.op)
        if rule is None:
            return self.no_rule(node)
        return rule(self, node, graph)

    def no_rule(self, node: Node) -> Support:
        """The refusal of a node whose op has no rule (integer accelerators say why more
        precisely: targets/accel/graph_layers.refuse_unknown)."""
        return Support.no(f"{self.name} has no kernel for {node.op}")

    def check_region(self, nodes: list[Node], graph: Graph) -> dict[str, str]:
        """Nodes (by name) this target cannot run in a region made of exactly `nodes`, each
        with the reason. For rules that depend on neighbours: e.g. a Relu a target runs only
        fused into a Conv of the same region, whose Conv was forced onto the CPU. The
        partitioner moves them to the CPU and regroups. Default: none."""
        return {}

    @property
    def min_region_macs(self) -> int:
        """Regions with fewer MACs than this stay on the CPU (not worth the copies). A config
        field of the same name sets it; compile(min_region_macs=...) overrides it."""
        return int(getattr(self.config, "min_region_macs", 0))

    # ---- compilation and execution ----------------------------------------------------------
    def graph_passes(self) -> tuple[str, ...]:
        """The shared graph passes this target needs before partitioning, by name and in order
        (names of `retarget.passes.GRAPH_PASSES`, e.g. "fold_batchnorm", "explicit_padding").
        compiler.prepare runs them after quantising and before `prepare`; a target states them
        as data and never calls a pass itself. Default: none."""
        return ()

    def prepare(self, graph: Graph) -> Graph:
        """The target's own rewrite of the typed graph (already in `number_format`, after its
        `graph_passes`) into the form its rules expect, before partitioning (e.g. vta's window
        packing, which lives with the target). compile() infers the shapes of any values it
        adds. Default: the graph unchanged."""
        return graph

    def lower(self, region: Region) -> Kernel:
        raise NotImplementedError(f"target {self.name!r} does not implement lower()")

    def fusion_graph(self, region: Region):
        """The region's layers as a targets.fusion.FusionGraph (targets with templates)."""
        raise NotImplementedError(f"target {self.name!r} declares no fusion")

    def fusion_cost(self, graph, members: tuple[int, ...]) -> int | None:
        """Modelled cycles of `members` (vertex indices of `graph`) lowered as one unit (one
        vertex: alone); None when the group does not fit the hardware."""
        raise NotImplementedError(f"target {self.name!r} declares no fusion")

    # True when fusion_stream_cost is implemented (the search then re-ranks with it)
    has_stream_cost: ClassVar[bool] = False

    def fusion_stream_cost(self, graph, units: list[tuple[int, ...]]) -> int | None:
        """Modelled cycles of `units` (groups or single vertices of `graph`) lowered as one
        stream, in the order the target's lowering emits them; None when one of them has no
        lowering."""
        raise NotImplementedError(f"target {self.name!r} has no stream model for fusion")

    def make_device(self):
        raise NotImplementedError(f"target {self.name!r} does not implement make_device()")

    @classmethod
    def design_space(cls, preset: str | None = None):
        """The hardware design space `retarget explore` sweeps (an targets.space.DesignSpace
        around `preset`, or the default config), or None when the target declares none.
        Default: `design_space(preset)` of the module targets/<name>/space.py, if it exists."""
        # found by name (a plugin target's own space module too), so imported dynamically
        path = f"{__package__}.{cls.name}.space"
        try:
            mod = importlib.import_module(path)
        except ModuleNotFoundError as e:
            if e.name and path.startswith(e.name):   # no such module (not a broken import)
                return None
            raise
        fn = getattr(mod, "design_space", None)
        if fn is None:
            return None
        return fn(preset) if preset else fn()

    def estimate_cost(self, region: Region) -> float | None:
        """Estimated seconds for `region` on this target, or None without a cost model."""
        return None

    # True when estimate_node_cost prices nodes (what `placement="cheapest"` needs)
    has_cost_model: ClassVar[bool] = False

    def estimate_node_cost(self, node: Node, graph: Graph, cache: dict | None = None) -> float | None:
        """Estimated seconds of `node` on this target, for placement across devices (`cache`:
        one compile's prices, shared by its calls); None without a cost model."""
        return None

    def load_kernel(self, directory: Path, spec: Mapping[str, Any],
                    weights: Mapping[str, np.ndarray]) -> Kernel:
        """Rebuild a kernel saved by Kernel.save, by looking its kind up in `kernel_kinds`."""
        kind = spec.get("kind")
        cls = self.kernel_kinds.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise TargetError(f"target {self.name!r} has no kernel kind {kind!r}; "
                              f"known: {sorted(self.kernel_kinds)}")
        return cls.load(directory, spec, weights, self)

    def __repr__(self) -> str:
        return f"<Target {self.spec}>"


def _finite(target: str, field_name: str, value: Any) -> Any:
    """Config numbers must be finite: a NaN clock would flow into every report silently."""
    if isinstance(value, float) and not math.isfinite(value):
        raise TargetError(f"target {target!r}: config field {field_name!r} must be a finite "
                          f"number, got {value!r}")
    return value


def _coerce(target: str, field_name: str, current: Any, value: Any) -> Any:
    """Convert a config-file or command-line value to the type of the field's current value."""
    want = type(current)
    if isinstance(value, want) and not (want is int and isinstance(value, bool)):
        return value
    try:
        if want is bool and isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if want is int and isinstance(value, (str, float)):
            as_float = float(value)
            if as_float != int(as_float):
                raise ValueError(value)
            return int(as_float)
        if want in (float, str):
            return want(value)
    except (TypeError, ValueError):
        pass
    raise TargetError(f"target {target!r}: config field {field_name!r} expects "
                      f"{want.__name__}, got {value!r}")


__all__ = ["Disassembler", "INT8_MUL_SHIFT", "INT8_ORT", "INT8_POW2", "INT8_TFLITE", "Kernel", "external_inputs",
           "NUMBER_FORMATS", "NumberFormat", "Region", "Rule", "Support", "Target",
           "WeightStore"]

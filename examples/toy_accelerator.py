"""A toy accelerator added to retarget from outside, using only the public target API.

It runs 2-D Conv (optionally followed by Relu, fused into the same task) and Gemm (a dense
layer) on float32 data, with constant weights. Everything else stays on the CPU. The "hardware"
is a SimulatedDevice whose memory is a NumPy byte array; its two task kinds read their operands
from device memory and compute them with the op table's own definitions, so the toy is correct
by construction and the example stays about the plumbing. docs/adding-a-target.md walks
through this file.

Use it:
    import toy_accelerator                      # this file, e.g. via runpy or sys.path
    toy_accelerator.register()                  # makes target "toy" known to retarget
    m = retarget.compile(graph, "toy")          # or "toy:tiny", or a .toml/.json config
    print(m.report); m.run({"x": x})

From the command line: `retarget compile model.onnx --target toy --plugin examples/toy_accelerator.py`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from retarget.errors import DeviceError, TargetError
from retarget.ir.graph import Graph, Node
from retarget.ops import get_op, resolve_attrs
from retarget.device.base import SimulatedDevice, Task
from retarget.targets.base import Kernel, Region, Support, Target, WeightStore
from retarget.targets.registry import register_target


# ---- 1. the configuration: a frozen dataclass, plus named presets ------------------------------
@dataclass(frozen=True, slots=True)
class ToyConfig:
    memory_bytes: int = 1 << 26       # device DRAM
    max_channels: int = 1024          # widest Conv input / Gemm K the toy's buffers take
    min_region_macs: int = 10_000     # smaller regions are not worth the copies


PRESETS = {"tiny": ToyConfig(memory_bytes=1 << 22, max_channels=64, min_region_macs=1000)}


# ---- 2. the device: a SimulatedDevice with two task kinds --------------------------------------
class ToyDevice(SimulatedDevice):
    """Task kinds and their pointer arguments (the base class checks these on submit)."""
    name = "toy"
    kernels = {"conv2d": ("x", "w", "b", "y"), "dense": ("a", "b", "c", "y")}

    def execute(self, task: Task) -> dict[str, int]:
        a = task.args
        dt = a["dtype"]
        if task.kernel == "conv2d":
            x = self.view(a["x"], a["x_shape"], dt)
            w = self.view(a["w"], a["w_shape"], dt)
            b = self.view(a["b"], (a["w_shape"][0],), dt)
            y = self.view(a["y"], a["y_shape"], dt)
            attrs = {k: a[k] for k in ("auto_pad", "dilations", "group", "kernel_shape", "pads",
                                       "strides")}
            # OpDef.run takes the op's fast path (checked against its definition in the op's
            # tests), the same code the CPU reference runs, so results match it bit for bit.
            out = get_op("Conv").run([x, w, b], {k: _as_list(v) for k, v in attrs.items()})[0]
            if a["relu"]:
                out = get_op("Relu").run([out], {})[0]
            macs = int(np.prod(a["y_shape"])) * int(np.prod(a["w_shape"][1:]))
            reads = x.nbytes + w.nbytes + b.nbytes
        elif task.kernel == "dense":
            A = self.view(a["a"], a["a_shape"], dt)
            B = self.view(a["b"], a["b_shape"], dt)
            C = self.view(a["c"], a["c_shape"], dt)
            y = self.view(a["y"], a["y_shape"], dt)
            attrs = {k: a[k] for k in ("alpha", "beta", "transA", "transB")}
            out = get_op("Gemm").run([A, B, C], attrs)[0]
            macs = int(np.prod(a["y_shape"])) * (a["a_shape"][0] if a["transA"] else a["a_shape"][1])
            reads = A.nbytes + B.nbytes + C.nbytes
        else:  # submit() already refuses unknown kernels; this guards subclasses
            raise DeviceError(f"toy: no kernel {task.kernel!r}")
        if out.shape != y.shape:
            raise DeviceError(f"toy: task '{task.name}' computed shape {out.shape}, "
                              f"output buffer is {y.shape}")
        y[...] = out
        return {"macs": macs, "bytes_read": reads, "bytes_written": y.nbytes}


def _as_list(v):
    return list(v) if isinstance(v, tuple) else v


# ---- 3. the kernel: a list of device tasks for one region --------------------------------------
@dataclass(frozen=True, slots=True)
class Step:
    """One device task. `operands` names values (region inputs, intermediates or graph
    constants); `output` names the value it writes."""
    kernel: str                  # "conv2d" or "dense"
    node: str                    # the graph node it came from (fused Relu: the Conv's name)
    operands: tuple[str, ...]    # conv2d: x, w, b    dense: a, b, c
    output: str
    args: tuple[tuple[str, Any], ...]   # shapes, dtype and attributes (plain data)


class ToyProgram(Kernel):
    kind: ClassVar[str] = "toy.program"

    def __init__(self, steps: list[Step], inputs: list[str], outputs: list[str],
                 shapes: dict[str, tuple[int, ...]], consts: dict[str, np.ndarray]):
        self.steps, self.inputs, self.outputs = steps, inputs, outputs
        self.shapes = shapes            # every operand's shape (float32)
        self.consts = consts            # constant name -> array (the weights)
        self._on_device: dict[str, int] = {}

    def upload(self, device) -> None:
        for name, array in self.consts.items():
            self._on_device[name] = device.malloc(max(array.nbytes, 1))
            device.copy_to_device(self._on_device[name], np.ascontiguousarray(array))

    def release(self, device) -> None:
        for ptr in self._on_device.values():
            device.free(ptr)
        self._on_device.clear()

    def run(self, device, inputs: Sequence[int], outputs: Sequence[int]) -> list:
        ptr = dict(self._on_device)
        ptr.update(zip(self.inputs, inputs))
        ptr.update(zip(self.outputs, outputs))
        scratch = []
        for step in self.steps:     # intermediates of the region live only on the device
            if step.output not in ptr:
                ptr[step.output] = device.malloc(4 * max(int(np.prod(self.shapes[step.output])), 1))
                scratch.append(ptr[step.output])
        try:
            for step in self.steps:
                names = ("x", "w", "b") if step.kernel == "conv2d" else ("a", "b", "c")
                args = dict(step.args)
                args.update({k: ptr[v] for k, v in zip(names, step.operands)})
                args["y"] = ptr[step.output]
                device.submit(Task(step.kernel, args, name=step.node))
            return device.synchronize()
        finally:
            for p in scratch:
                device.free(p)

    # Serialisation: one JSON file of steps; weights stay graph constants referred to by name.
    def save(self, directory: Path, weights: WeightStore) -> dict:
        for name, array in self.consts.items():
            if name not in weights:      # a constant the lowering made (a zero bias)
                weights[name] = array
        doc = {"inputs": self.inputs, "outputs": self.outputs,
               "shapes": {k: list(v) for k, v in self.shapes.items()},
               "consts": sorted(self.consts),
               "steps": [{"kernel": s.kernel, "node": s.node, "operands": list(s.operands),
                          "output": s.output, "args": dict(s.args)} for s in self.steps]}
        (directory / "program.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
        return {"kind": self.kind, "file": "program.json"}

    @classmethod
    def load(cls, directory: Path, spec: Mapping[str, Any], weights: Mapping[str, np.ndarray],
             target: Target) -> "ToyProgram":
        doc = json.loads((directory / "program.json").read_text(encoding="utf-8"))
        missing = [c for c in doc["consts"] if c not in weights]
        if missing:
            raise TargetError(f"toy program in {directory}: weights {missing} are missing")
        steps = [Step(s["kernel"], s["node"], tuple(s["operands"]), s["output"],
                      tuple((k, _freeze(v)) for k, v in s["args"].items())) for s in doc["steps"]]
        return cls(steps, doc["inputs"], doc["outputs"],
                   {k: tuple(v) for k, v in doc["shapes"].items()},
                   {c: weights[c] for c in doc["consts"]})


def _freeze(v):
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


# ---- 4. the rules: which nodes the toy takes, and why it refuses the others --------------------
def _float32_const_weights(node: Node, what: str) -> Support:
    for i, v in enumerate(node.inputs):
        if v is None:
            continue
        if v.type is None or v.type.dtype != "float32":
            return Support.no(f"toy runs float32 only; input {i} is {v.type}")
        if i > 0 and not v.is_const:
            return Support.no(f"{what} must be a constant (input {i} is computed at run time)")
    return Support.yes()


def _conv_rule(target: "ToyTarget", node: Node, graph: Graph) -> Support:
    x = node.inputs[0].type
    if x is None or x.rank != 4:
        return Support.no(f"toy runs 2-D convolutions only; input is {x}")
    if x.shape[1] > target.config.max_channels:
        return Support.no(f"{x.shape[1]} input channels > max_channels={target.config.max_channels}")
    return _float32_const_weights(node, "Conv weights and bias")


def _relu_rule(target: "ToyTarget", node: Node, graph: Graph) -> Support:
    # Relu is only fused into the Conv that produces it; alone it is not worth a task.
    src = graph.producers().get(node.inputs[0])
    if src is None or src.op != "Conv" or not target.supports(src, graph).ok:
        return Support.no("toy runs Relu only fused after a Conv it runs")
    if len(graph.consumers().get(node.inputs[0], [])) != 1 or node.inputs[0] in graph.outputs:
        return Support.no("the Conv's output is also used elsewhere, so Relu cannot be fused")
    return Support.yes("fused into the preceding Conv")


def _gemm_rule(target: "ToyTarget", node: Node, graph: Graph) -> Support:
    a = node.inputs[0].type
    if a is None or a.rank != 2:
        return Support.no(f"Gemm input must be 2-D, got {a}")
    k = a.shape[0] if resolve_attrs(node)["transA"] else a.shape[1]
    if k > target.config.max_channels * 64:
        return Support.no(f"Gemm K={k} exceeds the toy's buffer")
    return _float32_const_weights(node, "Gemm B and C")


# ---- 5. the target: config + rules + lowering + device ----------------------------------------
class ToyTarget(Target):
    name: ClassVar[str] = "toy"
    description: ClassVar[str] = "example accelerator: Conv(+Relu) and Gemm on a NumPy device"
    config_class: ClassVar[type] = ToyConfig
    presets: ClassVar[dict] = PRESETS
    rules: ClassVar[dict] = {"Conv": _conv_rule, "Relu": _relu_rule, "Gemm": _gemm_rule}
    kernel_kinds: ClassVar[dict] = {ToyProgram.kind: ToyProgram}

    def check_region(self, nodes: list[Node], graph: Graph) -> dict[str, str]:
        # A Relu is only ever fused: its Conv must be in the same region (it may have been
        # forced onto the cpu, or left there by the size rule, after the rules said yes).
        here = {id(n) for n in nodes}
        producers = graph.producers()
        return {n.name: "toy runs Relu only fused after a Conv in the same region"
                for n in nodes if n.op == "Relu" and id(producers.get(n.inputs[0])) not in here}

    def make_device(self) -> ToyDevice:
        return ToyDevice(memory_bytes=self.config.memory_bytes)

    def lower(self, region: Region) -> ToyProgram:
        steps, consts, shapes = [], {}, {}
        fused = {}   # Conv output value name -> the Relu node that consumes it
        convs = {n.outputs[0].name for n in region.nodes if n.op == "Conv"}
        for n in region.nodes:
            if n.op == "Relu":
                if n.inputs[0].name not in convs:
                    raise TargetError(f"toy cannot lower Relu '{n.name}' without its Conv "
                                      f"in region {region.name!r}")
                fused[n.inputs[0].name] = n
        for n in region.nodes:
            for v in n.inputs + n.outputs:
                if v is not None:
                    shapes[v.name] = v.type.shape
                    if v.is_const:
                        consts[v.name] = v.const
            attrs = resolve_attrs(n)
            if n.op == "Conv":
                x, w = n.inputs[0], n.inputs[1]
                b = n.input(2)
                if b is None:   # the device kernel always adds a bias: give it zeros
                    bname = f"{region.name}/{n.name}/zero_bias"
                    consts[bname] = np.zeros(w.type.shape[0], np.float32)
                    shapes[bname] = (w.type.shape[0],)
                    b_name = bname
                else:
                    b_name = b.name
                relu = fused.get(n.outputs[0].name)
                out = relu.outputs[0] if relu is not None else n.outputs[0]
                args = {"x_shape": x.type.shape, "w_shape": w.type.shape, "y_shape": out.type.shape,
                        "dtype": "float32", "relu": relu is not None,
                        **{k: _freeze(v) for k, v in attrs.items()}}
                steps.append(Step("conv2d", n.name, (x.name, w.name, b_name), out.name,
                                  tuple(args.items())))
            elif n.op == "Gemm":
                a, bm, c = n.inputs[0], n.inputs[1], n.input(2)
                y = n.outputs[0]
                if c is None:
                    cname = f"{region.name}/{n.name}/zero_bias"
                    consts[cname] = np.zeros(y.type.shape[1], np.float32)
                    shapes[cname] = (y.type.shape[1],)
                else:
                    cname = c.name
                args = {"a_shape": a.type.shape, "b_shape": bm.type.shape,
                        "c_shape": shapes[cname], "y_shape": y.type.shape, "dtype": "float32",
                        **{k: attrs[k] for k in ("alpha", "beta", "transA", "transB")}}
                steps.append(Step("dense", n.name, (a.name, bm.name, cname), y.name,
                                  tuple(args.items())))
            elif n.op != "Relu":
                raise TargetError(f"toy cannot lower {n.op} '{n.name}' (the partitioner "
                                  f"should have kept it on the cpu)")
        return ToyProgram(steps, [v.name for v in region.inputs],
                          [v.name for v in region.outputs], shapes, consts)

    def estimate_cost(self, region: Region) -> float:
        return region.macs / 1e9   # a made-up 1 GMAC/s device


def register() -> type[ToyTarget]:
    """Make target "toy" known to retarget (safe to call more than once)."""
    return register_target(ToyTarget, replace=True)


register()

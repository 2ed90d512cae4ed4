"""Bring your own compiler: a toy accelerator whose regions are compiled by a separate
program (this file, run as a script), the BYOC route in one file. docs/byoc.md explains it.

    python examples/toy_byoc.py compile region.json -o region.bin     # the outside compiler

    import toy_byoc; toy_byoc.register()                              # the target "toybyoc"
    m = retarget.compile(graph, "toybyoc"); m.run({"input": x})
    retarget compile model.onnx --target toybyoc --plugin examples/toy_byoc.py -o out/

retarget writes each offloaded region as the export document (region.json + region.npz, the
contract of docs/byoc.md) and runs `compiler` (the config field) as a process; the compiler
writes a binary, retarget reads it back into a kernel. Here the binary is a small, versioned
container: an .npz holding a JSON program (the region's steps, checked against the ops this
"hardware" has) and the weights, plus the compiler's process id so a test can see that a
separate process made it. The device runs each step with the op table's own definitions, so
results equal the CPU reference; a real accelerator would put its own code generator in
`compile_region` and its own device in ToyBinaryDevice.
"""
from __future__ import annotations

import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from retarget.errors import DeviceError, ModelLoadError
from retarget.ir.graph import Graph, Node
from retarget.ops import get_op
from retarget.device.base import MEMORY_ARG, SimulatedDevice, Task
from retarget.targets.base import Kernel, Region, Support, WeightStore
from retarget.targets.external.compiler import CompilerRun, ExternalCompilerTarget
from retarget.targets.registry import register_target

OPS = ("Conv", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm")
MAGIC = "toybyoc.binary/1"


# ---- 1. the outside compiler: region.json (+ .npz) -> a binary --------------------------------
def compile_region(doc: dict, arrays: Mapping[str, np.ndarray]) -> bytes:
    """The toy's code generator: one step per node, weights carried along."""
    if doc.get("format") != "retarget.regions" or doc.get("version") != 1:
        raise SystemExit(f"toybyoc: expected retarget.regions version 1, got "
                         f"{doc.get('format')} {doc.get('version')}")
    (region,) = doc["regions"]
    steps, weights = [], {}
    for n in region["nodes"]:
        if n["op"] not in OPS:
            raise SystemExit(f"toybyoc: node {n['name']!r}: op {n['op']} is not supported")
        ins = []
        for i in n["inputs"]:
            if i is not None and i["kind"] == "weight":
                weights[i["name"]] = arrays[i["weight"]]
            ins.append(None if i is None else i["name"])
        steps.append({"op": n["op"], "attrs": n["attrs"], "inputs": ins,
                      "outputs": [o["name"] for o in n["outputs"]]})
    program = {"magic": MAGIC, "compiler_pid": os.getpid(), "steps": steps,
               "inputs": [v["name"] for v in region["inputs"]],
               "outputs": [v["name"] for v in region["outputs"]]}
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, program=np.frombuffer(json.dumps(program).encode(),
                                                            np.uint8),
             **{f"w:{k}": v for k, v in weights.items()})
    return buf.getvalue()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 4 or argv[0] != "compile" or argv[2] != "-o":
        print("usage: toy_byoc.py compile REGION.json -o OUT.bin", file=sys.stderr)
        return 2
    path = Path(argv[1])
    doc = json.loads(path.read_text(encoding="utf-8"))
    with np.load(path.parent / doc["weights"], allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    Path(argv[3]).write_bytes(compile_region(doc, arrays))
    return 0


# ---- 2. the binary, as retarget reads it back -------------------------------------------------
@dataclass(frozen=True)
class ToyBinary:
    steps: list[dict]
    inputs: list[str]
    outputs: list[str]
    weights: dict[str, np.ndarray]
    compiler_pid: int

    @staticmethod
    def parse(binary: bytes, where: str) -> "ToyBinary":
        try:
            with np.load(io.BytesIO(binary), allow_pickle=False) as z:
                program = json.loads(z["program"].tobytes().decode("utf-8"))
                weights = {k[2:]: z[k] for k in z.files if k.startswith("w:")}
        except (ValueError, KeyError, OSError, UnicodeDecodeError) as e:
            raise ModelLoadError(f"{where}: not a toybyoc binary ({e})") from None
        if program.get("magic") != MAGIC:
            raise ModelLoadError(f"{where}: not a {MAGIC} binary")
        return ToyBinary(program["steps"], program["inputs"], program["outputs"], weights,
                         int(program["compiler_pid"]))


# ---- 3. the device and the kernel -------------------------------------------------------------
class ToyBinaryDevice(SimulatedDevice):
    """Runs loaded binaries: `load` is the driver reading a binary into the device (a handle
    for tasks), a "run" task executes one on buffers in device memory."""
    name = "toybyoc"
    kernels = {"run": ()}

    def __init__(self, **options):
        self.programs: dict[int, ToyBinary] = {}
        super().__init__(**options)

    def load(self, binary: bytes) -> int:
        with self.lock:
            handle = len(self.programs) + 1
            self.programs[handle] = ToyBinary.parse(binary, "toybyoc device")
            return handle

    def execute(self, task: Task) -> dict[str, int]:
        a = task.args
        prog = self.programs.get(a["program"])
        if prog is None:
            raise DeviceError(f"toybyoc: no program {a['program']!r} is loaded")
        env = dict(prog.weights)
        for name, ptr, shape in zip(prog.inputs, a["inputs"], a["in_shapes"]):
            env[name] = self.view(ptr, shape, np.float32).copy()
        for s in prog.steps:
            args = [None if i is None else env[i] for i in s["inputs"]]
            for name, value in zip(s["outputs"], get_op(s["op"]).run(args, s["attrs"])):
                env[name] = value
        for name, ptr, shape in zip(prog.outputs, a["outputs"], a["out_shapes"]):
            if env[name].shape != tuple(shape):
                raise DeviceError(f"toybyoc: {name} is {env[name].shape}, expected {shape}")
            self.view(ptr, shape, np.float32)[...] = env[name]
        return {"steps": len(prog.steps)}


class ToyBinaryKernel(Kernel):
    kind: ClassVar[str] = "toybyoc.binary"

    def __init__(self, binary: bytes, in_shapes, out_shapes, run: CompilerRun | None = None):
        self.binary = binary
        self.program = ToyBinary.parse(binary, "toybyoc compiler output")
        self.in_shapes, self.out_shapes = list(in_shapes), list(out_shapes)
        self.compiler_run = run
        self._handles: dict[int, int] = {}

    def upload(self, device) -> None:
        self._handles[id(device)] = device.load(self.binary)

    def release(self, device) -> None:
        self._handles.pop(id(device), None)

    def run(self, device, inputs, outputs) -> list:
        device.submit(Task("run", {"program": self._handles[id(device)], "inputs": list(inputs),
                                   "outputs": list(outputs), "in_shapes": self.in_shapes,
                                   "out_shapes": self.out_shapes,
                                   MEMORY_ARG: tuple(inputs) + tuple(outputs)}))
        return device.synchronize()

    def save(self, directory: Path, weights: WeightStore) -> dict:
        (directory / "region.bin").write_bytes(self.binary)
        return {"kind": self.kind, "binary": "region.bin", "in_shapes": self.in_shapes,
                "out_shapes": self.out_shapes}

    @classmethod
    def load(cls, directory: Path, spec: Mapping[str, Any], weights, target) -> "ToyBinaryKernel":
        return cls((directory / "region.bin").read_bytes(), spec["in_shapes"],
                   spec["out_shapes"])


# ---- 4. the target: which nodes it takes, and the compiler command ----------------------------
@dataclass(frozen=True, slots=True)
class ToyBYOCConfig:
    compiler: str = f"{sys.executable} {Path(__file__).resolve()} compile {{json}} -o {{out}}"
    compiler_timeout_s: float = 60.0
    memory_bytes: int = 1 << 26
    min_region_macs: int = 0


class ToyBYOCTarget(ExternalCompilerTarget):
    name: ClassVar[str] = "toybyoc"
    description: ClassVar[str] = "a toy accelerator whose regions an outside compiler builds"
    config_class: ClassVar[type] = ToyBYOCConfig
    kernel_kinds: ClassVar[dict] = {ToyBinaryKernel.kind: ToyBinaryKernel}

    def supports(self, node: Node, graph: Graph) -> Support:
        if node.op not in OPS:
            return Support.no(f"toybyoc's compiler has no {node.op}")
        if any(v is not None and (v.type is None or v.type.dtype != "float32")
               for v in node.inputs):
            return Support.no("toybyoc runs float32 only")
        return Support.yes()

    def load_binary(self, region: Region, binary: bytes, run: CompilerRun) -> Kernel:
        return ToyBinaryKernel(binary, [list(v.type.shape) for v in region.inputs],
                               [list(v.type.shape) for v in region.outputs], run)

    def make_device(self) -> ToyBinaryDevice:
        return ToyBinaryDevice(memory_bytes=self.config.memory_bytes)


def register() -> None:
    register_target(ToyBYOCTarget, replace=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
else:
    register()

"""A lowered region as an instruction stream: the kernel plumbing every accelerator shares.

A `StreamKernel` holds a Program (instructions, DRAM layout, per-layer spans), its constants by
DRAM buffer name, where the region's inputs and outputs live in DRAM (`Binding`s) and what the
lowering knew about each layer (`LayerInfo`). `run` lays the region's logical int8 inputs out
in the program's DRAM buffers on the host side of the shared DRAM (as a board's ARM core
does), runs the stream and reads the outputs back. Saved as <program files> + kernel.json plus
the constants in the artifact's npz; nothing in it is executable.

A target subclasses it with its `kind` (whose first part names it in messages),
`program_class` (with save(prefix) / load(prefix) / insns / buffers / layers / config), its
layout (`pack_input`, `unpack_output`) and its cycle model (`simulate_timing`).
"""
from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from ...errors import ModelLoadError, TargetError
from ..base import Kernel, Target, WeightStore


@dataclass(frozen=True, slots=True)
class Binding:
    """A region input or output: graph value `value` (int8, its logical shape: NCHW, (rows,
    cols), tokens x features, any rank a target binds) lives in the program's DRAM buffer
    `buffer`, in the target's layout. `slices` > 1 marks an input read as that many stacked
    weight matrices, (slices * K) x M, rather than as an activation (the second operand of a
    batched activation x activation product).

    The checks live here, in construction, so that what a lowering binds is exactly what an
    artifact's kernel.json may hold: save and load accept the same bindings."""
    value: str
    buffer: str
    shape: tuple[int, ...]
    slices: int = 0

    def __post_init__(self):
        try:
            shape = tuple(operator.index(d) for d in self.shape)
        except TypeError:
            shape = ()
        if shape != tuple(self.shape) or min(shape, default=1) <= 0:
            raise TargetError(f"binding {self.value!r}: shape {list(self.shape)} has a "
                              f"dimension that is not a positive integer")
        object.__setattr__(self, "shape", shape)   # plain ints, as kernel.json holds them
        if self.slices < 0 or (self.slices and (len(self.shape) != 2
                                                or self.shape[0] % self.slices)):
            raise TargetError(f"binding {self.value!r}: {self.slices} weight slices do not "
                              f"divide its shape {list(self.shape)}")

    def to_json(self) -> dict:
        d = {"value": self.value, "buffer": self.buffer, "shape": list(self.shape)}
        if self.slices:
            d["slices"] = self.slices
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "Binding":
        return Binding(str(d["value"]), str(d["buffer"]), tuple(d["shape"]),
                       operator.index(d.get("slices", 0)))


@dataclass(frozen=True, slots=True)
class LayerInfo:
    """What the lowering knew about one layer of a kernel's stream, kept for reports (the
    cycle model alone cannot tell useful MACs from the padding the MAC array multiplies)."""
    name: str               # the graph node's name; program.layers spans use the same name
    kind: str               # conv2d, dense, maxpool, avgpool, residual_add, requantize, ...
    macs: int               # useful multiply-accumulates (the layer's definition)
    performed_macs: int     # what the MAC array multiplies, padding included

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


class StreamKernel(Kernel):
    """A lowered region: the Program, its constants (weights, biases) by DRAM buffer name,
    where its inputs and outputs live, and per-layer MAC counts (`layers`) for reports."""

    kind: ClassVar[str] = ""
    label: ClassVar[str] = ""              # the target's name, for messages: kind's first part
    program_class: ClassVar[type] = type(None)
    # The ranks of the logical tensors its layout (pack_input / unpack_output) handles; None:
    # any. Checked when a kernel is made, so a compile and a load refuse the same bindings.
    binding_ranks: ClassVar[tuple[int, ...] | None] = None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.kind and "label" not in cls.__dict__:
            cls.label = cls.kind.split(".")[0]

    def __init__(self, name: str, program, inputs: list[Binding], outputs: list[Binding],
                 constants: dict[str, np.ndarray], layers: Sequence[LayerInfo] = (),
                 maps: Sequence[Binding] | None = None):
        self.name, self.program = name, program
        self.inputs, self.outputs, self.constants = inputs, outputs, constants
        self.layers: list[LayerInfo] = list(layers)
        # Intermediate values with a DRAM buffer of their own, in the order the stream
        # writes them: what `layer_outputs` reads back for --per-layer (None: not recorded).
        self.maps: list[Binding] | None = None if maps is None else list(maps)
        for b in inputs + outputs + (self.maps or []):
            if b.buffer not in program.buffers:
                raise TargetError(f"{self.label} kernel {name!r}: value {b.value!r} bound to "
                                  f"unknown DRAM buffer {b.buffer!r}")
            if self.binding_ranks is not None and len(b.shape) not in self.binding_ranks:
                raise TargetError(f"{self.label} kernel {name!r}: value {b.value!r} of shape "
                                  f"{list(b.shape)}; {self.label} lays out tensors of rank "
                                  f"{' or '.join(map(str, self.binding_ranks))} only")
        self._loaded: dict[int, Any] = {}   # id(device) -> LoadedProgram
        self._timing = None

    # ---- what a target fills in -------------------------------------------------------------
    def pack_input(self, x: np.ndarray, binding: Binding) -> np.ndarray:
        """A logical int8 tensor in the layout of its DRAM buffer (`binding` says which)."""
        raise NotImplementedError(f"{type(self).__name__}.pack_input")

    def unpack_output(self, p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """The logical tensor of `shape` from its DRAM buffer's contents."""
        raise NotImplementedError(f"{type(self).__name__}.unpack_output")

    def simulate_timing(self):
        """The target's cycle model on this kernel's program, with its layer spans."""
        raise NotImplementedError(f"{type(self).__name__}.simulate_timing")

    # ---- the cycle model --------------------------------------------------------------------
    def timing(self):
        """The cycle model's TimingResult for this kernel's stream, with per-layer aggregates
        from the program's layer spans. Needs no data, so it works on a loaded artifact
        without inputs; computed once (the stream never changes)."""
        if self._timing is None:
            self._timing = self.simulate_timing()
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
        """Place the program (constants, instruction stream) in device DRAM."""
        self._loaded[id(device)] = device.load_program(self.program, self.constants)

    def release(self, device) -> None:
        loaded = self._loaded.pop(id(device), None)
        if loaded is not None:
            device.unload_program(loaded)

    def _buffer_view(self, device, loaded, name: str) -> np.ndarray:
        buf = self.program.buffers[name]
        return device.view(loaded.base + buf.offset, buf.shape, buf.dtype)

    def run(self, device, inputs: Sequence[int], outputs: Sequence[int]) -> list:
        loaded = self._loaded.get(id(device))
        if loaded is None:
            raise TargetError(f"{self.label} kernel {self.name!r} was not uploaded to this "
                              f"device")
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise TargetError(f"{self.label} kernel {self.name!r}: {len(inputs)} inputs / "
                              f"{len(outputs)} outputs given, expects {len(self.inputs)} / "
                              f"{len(self.outputs)}")
        # before the host writes inputs into the image: it may have been freed and reused
        device.check_loaded(loaded, f"{self.label} kernel {self.name!r}")
        # The host lays inputs out in place in the shared DRAM: the executor's copy of the
        # logical tensor is read through a view and written where the program's LOADs read it.
        for b, ptr in zip(self.inputs, inputs):
            packed = self.pack_input(device.view(ptr, b.shape, np.int8), b)
            dst = self._buffer_view(device, loaded, b.buffer)
            if packed.shape != dst.shape:
                raise TargetError(f"{self.label} kernel {self.name!r}: input {b.value!r} packs "
                                  f"to {packed.shape}, its DRAM buffer {b.buffer!r} is "
                                  f"{dst.shape}")
            dst[...] = packed
        records = []
        if loaded.count:   # no instructions (outputs name the inputs' bytes): nothing to run
            device.submit(loaded.task(self.name))
            records = device.synchronize()
        for b, ptr in zip(self.outputs, outputs):
            out = self.unpack_output(self._buffer_view(device, loaded, b.buffer), b.shape)
            device.view(ptr, b.shape, np.int8)[...] = out
        return records

    def run_arrays(self, device, inputs: Sequence[np.ndarray]) -> list:
        """`run` on logical arrays (Region.inputs order) in fresh device allocations, freed
        after; the outputs stay in the program's DRAM buffers for reading back."""
        ptrs_in = []
        for x in inputs:
            p = device.malloc(max(1, x.nbytes))
            device.copy_to_device(p, np.ascontiguousarray(x, np.int8))
            ptrs_in.append(p)
        ptrs_out = [device.malloc(max(1, int(np.prod(b.shape)))) for b in self.outputs]
        try:
            return self.run(device, ptrs_in, ptrs_out)
        finally:
            for p in ptrs_in + ptrs_out:
                device.free(p)

    def layer_outputs(self, device, inputs: Sequence[np.ndarray]) -> list:
        """Per-layer debugging: run once, then read every intermediate value the stream left
        in its own DRAM buffer (`maps`) and every output; values kept on chip (inside a
        fused group) have no buffer and are not seen."""
        if self.maps is None:
            raise NotImplementedError(f"{self.label} kernel {self.name!r} records no "
                                      f"intermediate buffers (an artifact from before "
                                      f"--per-layer, or a target that does not)")
        loaded = self._loaded.get(id(device))
        self.run_arrays(device, inputs)
        out = []
        for b in self.maps + self.outputs:
            y = self.unpack_output(self._buffer_view(device, loaded, b.buffer), b.shape)
            out.append((b.value, b.value, 0, np.array(y).reshape(_as_nchw(b.shape))))
        return out

    # ---- artifact ---------------------------------------------------------------------------
    def save(self, directory: Path, weights: WeightStore) -> dict:
        """The program's own files (prefix "program"), kernel.json (bindings, layer info);
        constants go to the artifact's weights.npz."""
        self.program.save(str(directory / "program"))
        keys = {}
        for buf, array in self.constants.items():
            keys[buf] = f"{self.name}/{buf}"
            weights[keys[buf]] = array
        doc = {"name": self.name, "inputs": [b.to_json() for b in self.inputs],
               "outputs": [b.to_json() for b in self.outputs], "constants": keys,
               "layers": [info.to_json() for info in self.layers],
               "maps": None if self.maps is None else [b.to_json() for b in self.maps]}
        (directory / "kernel.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
        return {"kind": self.kind, "program": "program", "file": "kernel.json"}

    @classmethod
    def load(cls, directory: Path, spec: Mapping[str, Any], weights: Mapping[str, np.ndarray],
             target: Target) -> "StreamKernel":
        try:
            doc = json.loads((directory / "kernel.json").read_text(encoding="utf-8"))
            program = cls.program_class.load(str(directory / "program"))
            inputs = [Binding.from_json(d) for d in doc["inputs"]]
            outputs = [Binding.from_json(d) for d in doc["outputs"]]
            keys = dict(doc["constants"])
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items()):
                raise ValueError("constants must map buffer names to weight names")
            # artifacts written before per-layer MACs were kept have no "layers"
            layers = [LayerInfo.from_json(d) for d in doc.get("layers", [])]
            maps = (None if doc.get("maps") is None
                    else [Binding.from_json(d) for d in doc["maps"]])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError,
                TargetError) as e:
            raise ModelLoadError(f"{cls.label} kernel in {directory}: unreadable "
                                 f"({type(e).__name__}: {e})") from None
        if program.config != target.config:
            raise ModelLoadError(f"{cls.label} kernel in {directory} was built for config "
                                 f"{program.config.target_name}; the module's target is "
                                 f"{target.config.target_name}")
        missing = [k for k in keys.values() if k not in weights]
        if missing:
            raise ModelLoadError(f"{cls.label} kernel in {directory}: weights {missing} are "
                                 f"missing")
        consts = {buf: weights[k] for buf, k in keys.items()}
        for buf, array in consts.items():
            want = program.buffers.get(buf)
            if want is None or tuple(array.shape) != want.shape or str(array.dtype) != want.dtype:
                raise ModelLoadError(f"{cls.label} kernel in {directory}: constant {buf!r} "
                                     f"{array.dtype}{list(array.shape)} does not match its "
                                     f"DRAM buffer {want}")
        try:
            return cls(str(doc["name"]), program, inputs, outputs, consts, layers, maps)
        except TargetError as e:
            raise ModelLoadError(str(e)) from None


def _as_nchw(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """A logical map's shape as N, C, H, W ((rows, features) as rows x features x 1 x 1; any
    other rank likewise, its first dimension as N)."""
    if len(shape) == 4:
        return tuple(shape)
    return (shape[0] if shape else 1, int(np.prod(shape[1:])), 1, 1)


__all__ = ["Binding", "LayerInfo", "StreamKernel"]

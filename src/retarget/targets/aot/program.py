"""A lowered region as plain data: the kernels it calls in order, where every tensor they touch
lives, the constants in the weights blob and the arena size. The C sources are printed from
it (each target's emit.py), and an artifact stores it as JSON (program.json) from which loading rebuilds
and re-checks everything (kernel.py).

Where a tensor lives during a run is a `Place`:

- ("input", i) / ("output", j): the i-th region input / j-th region output, a pointer the
  caller passes to `model_run`;
- ("weights", byte offset): inside the weights blob (weights.bin), read only;
- ("arena", byte offset): inside the arena, the one scratch buffer of every intermediate.

`Program.validate` is what makes running the generated code safe: every kernel verifies (its
indices stay inside its tensors), every binding lies inside its buffer with the tensor's
exact size and dtype, nothing writes the inputs or the weights, and within one call what a
kernel writes overlaps nothing else it is given (its pointers are `restrict`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import GraphError
from ...loopnest.c_printer import C_TYPES, MAX_LOCAL_BYTES, kernel_work
from ...loopnest.ir import Kernel
from ...loopnest.verify import verify_kernel
from .ir_json import kernel_from_json, kernel_to_json

SPACES = ("input", "output", "weights", "arena")
ALIGNMENT = 64
FORMAT = "retarget.c.program"
VERSION = 1
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Place:
    space: str
    index: int     # slot (input / output) or byte offset (weights / arena)

    def __post_init__(self):
        if self.space not in SPACES:
            raise ValueError(f"place {self.space!r} is not one of {SPACES}")
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"place {self.space}: index {self.index!r} must be a non-negative int")

    def __str__(self) -> str:
        return f"{self.space}[{self.index}]"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A region input or output, or a constant: a named row-major array."""
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        n = np.dtype(self.dtype).itemsize
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True, slots=True)
class Constant:
    """A constant in the weights blob at byte `offset`."""
    spec: TensorSpec
    offset: int


@dataclass(frozen=True, slots=True)
class Routine:
    """A call of a hand-written routine of the target's kernel library (the `c` target's
    targets/c/kernels) in place of the printed loop nest: `name`, its pointer arguments as
    indices into the kernel's parameters (-1: NULL), then its integer and float arguments.
    The kernel stays what the call computes; the target checks the arguments against it."""
    name: str
    operands: tuple[int, ...]
    ints: tuple[int, ...]
    floats: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Call:
    """One kernel call: `function` (its C name) runs `kernel` with each parameter at `args`
    (or, with `routine`, that library routine does, on the same tensors)."""
    function: str
    node: str            # what it computes, for comments: "Conv 'conv1'"
    kernel: Kernel
    args: tuple[Place, ...]
    routine: Routine | None = None


@dataclass(frozen=True, slots=True)
class OutputCopy:
    """A region output whose bytes are another tensor's (a view of a region input, of a
    constant, or of something already bound to another output): copied at the end."""
    output: int
    source: Place
    nbytes: int


@dataclass(frozen=True, slots=True)
class Program:
    name: str                      # the region's name
    mode: str                      # the schedule the kernels got (the target's config mode)
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    calls: tuple[Call, ...]
    copies: tuple[OutputCopy, ...]
    constants: tuple[Constant, ...]
    weights_bytes: int
    arena_bytes: int
    sum_of_tensor_bytes: int       # what the intermediates would take without sharing

    @property
    def work(self) -> int:
        """Statement executions of one run (loopnest.c_printer.kernel_work)."""
        return sum(kernel_work(c.kernel) for c in self.calls)

    # ---- checks -----------------------------------------------------------------------------
    def validate(self) -> None:
        """GraphError naming the first problem; see the module docstring."""
        def fail(msg: str) -> GraphError:
            return GraphError(f"program {self.name!r}: {msg}")

        if not re.fullmatch(r"[a-z][a-z_]*", self.mode):
            raise fail(f"mode {self.mode!r} is not a schedule name")
        for what, n in (("weights_bytes", self.weights_bytes), ("arena_bytes", self.arena_bytes),
                        ("sum_of_tensor_bytes", self.sum_of_tensor_bytes)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise fail(f"{what} must be a non-negative int, got {n!r}")
        for spec in self.inputs + self.outputs + tuple(c.spec for c in self.constants):
            if spec.dtype not in C_TYPES or any(
                    isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in spec.shape):
                raise fail(f"tensor {spec.name!r} {spec.dtype}{list(spec.shape)} is not a "
                           f"non-empty array of {', '.join(C_TYPES)}")
        spans = sorted((c.offset, c.offset + c.spec.nbytes, c.spec.name) for c in self.constants)
        for (lo, hi, name), nxt in zip(spans, spans[1:] + [(self.weights_bytes, 0, "")]):
            if lo % ALIGNMENT or hi > nxt[0]:
                raise fail(f"constant {name!r} at [{lo}, {hi}) is misaligned, overlaps the next "
                           f"or lies outside the {self.weights_bytes}-byte weights")
        functions = [c.function for c in self.calls]
        bad = [f for f in functions if not _IDENT.fullmatch(f) or f.startswith("model_")
               or f in ("main",)]
        if bad or len(set(functions)) != len(functions):
            raise fail(f"kernel function names {bad or functions} are not distinct C "
                       f"identifiers outside model_*")
        written = set()
        for call in self.calls:
            self._check_call(call, fail)
            written.update(p.index for p, t in zip(call.args, call.kernel.params)
                           if p.space == "output" and t in call.kernel.outputs)
        for cp in self.copies:
            if not 0 <= cp.output < len(self.outputs) or cp.nbytes != self.outputs[cp.output].nbytes:
                raise fail(f"output copy to slot {cp.output} of {cp.nbytes} bytes does not match "
                           f"a region output")
            self._extent(cp.source, cp.nbytes, None, fail, f"the copy into output {cp.output}")
            written.add(cp.output)
        missing = [o.name for j, o in enumerate(self.outputs) if j not in written]
        if missing:
            raise fail(f"outputs {missing} are never written")

    def _extent(self, place: Place, nbytes: int, dtype: str | None, fail, what: str
                ) -> tuple[int, int]:
        """The byte range `place` covers in its space; checks it lies inside."""
        if place.space in ("input", "output"):
            specs = self.inputs if place.space == "input" else self.outputs
            if place.index >= len(specs):
                raise fail(f"{what}: {place} is not one of the {len(specs)} {place.space}s")
            spec = specs[place.index]
            if spec.nbytes != nbytes or (dtype is not None and spec.dtype != dtype):
                raise fail(f"{what}: {place} is {spec.name!r} {spec.dtype}{list(spec.shape)}, "
                           f"{spec.nbytes} bytes, not {nbytes} bytes of {dtype}")
            return 0, nbytes
        size = self.weights_bytes if place.space == "weights" else self.arena_bytes
        if place.index + nbytes > size:
            raise fail(f"{what}: {place} + {nbytes} bytes is outside the {size}-byte "
                       f"{place.space}")
        return place.index, place.index + nbytes

    def _check_call(self, call: Call, fail) -> None:
        k = call.kernel
        try:
            verify_kernel(k, capacity_bytes=MAX_LOCAL_BYTES)
        except GraphError as e:
            raise fail(f"call {call.function}: {e}") from None
        if len(call.args) != len(k.params):
            raise fail(f"call {call.function}: {len(call.args)} arguments for "
                       f"{len(k.params)} parameters")
        ranges = []
        for t, place in zip(k.params, call.args):
            if t.dtype not in C_TYPES:
                raise fail(f"call {call.function}: tensor {t.name!r} is {t.dtype}")
            what = f"call {call.function} parameter {t.name!r}"
            lo, hi = self._extent(place, t.nbytes, t.dtype, fail, what)
            writes = t in k.outputs
            if writes and place.space in ("input", "weights"):
                raise fail(f"{what}: an output cannot be written into the read-only {place}")
            ranges.append((place.space, place.index if place.space in ("input", "output") else 0,
                           lo, hi, writes, t.name))
        for i, (sp, slot, lo, hi, writes, name) in enumerate(ranges):
            for sp2, slot2, lo2, hi2, writes2, name2 in ranges[i + 1:]:
                if (writes or writes2) and sp == sp2 and slot == slot2 and lo < hi2 and lo2 < hi:
                    raise fail(f"call {call.function}: {name!r} and {name2!r} overlap and one "
                               f"of them is written")

    # ---- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict:
        def spec(s: TensorSpec) -> dict:
            return {"name": s.name, "shape": list(s.shape), "dtype": s.dtype}

        def place(p: Place) -> list:
            return [p.space, p.index]

        return {"format": FORMAT, "version": VERSION, "name": self.name, "mode": self.mode,
                "inputs": [spec(s) for s in self.inputs],
                "outputs": [spec(s) for s in self.outputs],
                "constants": [{**spec(c.spec), "offset": c.offset} for c in self.constants],
                "weights_bytes": self.weights_bytes, "arena_bytes": self.arena_bytes,
                "sum_of_tensor_bytes": self.sum_of_tensor_bytes,
                "calls": [{"function": c.function, "node": c.node,
                           "args": [place(p) for p in c.args],
                           "kernel": kernel_to_json(c.kernel),
                           **({} if c.routine is None else {"routine": _routine_json(c.routine)})}
                          for c in self.calls],
                "copies": [{"output": c.output, "source": place(c.source), "nbytes": c.nbytes}
                           for c in self.copies]}

    @staticmethod
    def from_json(d: Any) -> "Program":
        """The Program of `to_json`, validated; ValueError / TypeError / KeyError / GraphError
        for a malformed document."""
        if not isinstance(d, dict) or d.get("format") != FORMAT or d.get("version") != VERSION:
            raise ValueError(f"not a {FORMAT} document of version {VERSION}")

        def spec(x: Any) -> TensorSpec:
            return TensorSpec(_s(x["name"]), tuple(_i(n) for n in _l(x["shape"])), _s(x["dtype"]))

        def place(x: Any) -> Place:
            if not (isinstance(x, list) and len(x) == 2):
                raise ValueError(f"a place is [space, index], got {x!r}")
            return Place(_s(x[0]), _i(x[1]))

        p = Program(
            name=_s(d["name"]), mode=_s(d["mode"]),
            inputs=tuple(spec(x) for x in _l(d["inputs"])),
            outputs=tuple(spec(x) for x in _l(d["outputs"])),
            calls=tuple(Call(_s(c["function"]), _s(c["node"]), kernel_from_json(c["kernel"]),
                             tuple(place(a) for a in _l(c["args"])),
                             _routine_from_json(c["routine"]) if "routine" in c else None)
                        for c in _l(d["calls"])),
            copies=tuple(OutputCopy(_i(c["output"]), place(c["source"]), _i(c["nbytes"]))
                         for c in _l(d["copies"])),
            constants=tuple(Constant(spec(c), _i(c["offset"])) for c in _l(d["constants"])),
            weights_bytes=_i(d["weights_bytes"]), arena_bytes=_i(d["arena_bytes"]),
            sum_of_tensor_bytes=_i(d["sum_of_tensor_bytes"]))
        p.validate()
        return p


def _routine_json(r: Routine) -> dict:
    return {"name": r.name, "operands": list(r.operands), "ints": list(r.ints),
            "floats": [x if np.isfinite(x) else str(x) for x in r.floats]}


def _routine_from_json(x: Any) -> Routine:
    if not isinstance(x, dict):
        raise ValueError(f"a routine is an object, got {x!r}")
    operands = tuple(o if o == -1 else _i(o) for o in _l(x["operands"]))
    floats = []
    for f in _l(x["floats"]):
        if isinstance(f, str) and f in ("inf", "-inf"):
            f = float(f)
        if isinstance(f, bool) or not isinstance(f, (int, float)):
            raise ValueError(f"a routine's float argument, got {f!r}")
        floats.append(float(f))
    ints = []
    for i in _l(x["ints"]):
        if isinstance(i, bool) or not isinstance(i, int):
            raise ValueError(f"a routine's integer argument, got {i!r}")
        ints.append(i)
    return Routine(_s(x["name"]), operands, tuple(ints), tuple(floats))


def _s(x: Any) -> str:
    if not isinstance(x, str):
        raise ValueError(f"expected a string, got {x!r}")
    return x


def _i(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ValueError(f"expected a non-negative integer, got {x!r}")
    return x


def _l(x: Any) -> list:
    if not isinstance(x, list):
        raise ValueError(f"expected a list, got {type(x).__name__}")
    return x


__all__ = ["ALIGNMENT", "Call", "Constant", "OutputCopy", "Place", "Program", "Routine",
           "SPACES", "TensorSpec"]

"""The Kernel of the ahead-of-time C targets (`c`, `sunway`): one region as a generated C
library. A target subclasses `LibraryKernel` with its `kind`, its sources (`emit`) and the
files its library is built from (`build_options`).

Lifecycle: the target's `lower` makes the Program, writes the project (sources +
weights.bin) into its build directory and builds libmodel.so at once, timing it
(`build_seconds`). `upload(device)` loads the library on the LibraryDevice, copies the weights
blob into device memory and allocates the arena there; `run` submits one `model_run` task;
`release` frees both.

Saving and loading (the artifact decision). A saved kernel directory holds:

    program.json   the Program: every kernel's loop nest (as data), bindings, sizes
    model.h model.c main.c Makefile ...   the C project printed from it
    weights.bin    the constants, 64-byte aligned

The built library is not kept: it is native code for the machine that built it
(-march=native), and nothing could check that it is what the sources say. Loading reads
program.json as data only (kernel_from_json checks every field), validates the Program
(every kernel verified: all indices inside their tensors; every binding inside its buffer;
no writes to inputs or weights), prints the C again and requires it to equal the shipped
sources byte for byte (a mismatch is refused: edited sources, or a different retarget
version; recompile). load_module has already checked every file's SHA-256 against the
manifest before any of this (unless verify=False). Nothing is compiled or executed at load:
the first `upload` builds the regenerated sources in a fresh temporary directory with the
target's `cc` / `cflags` and loads that library.

So the project guarantee "nothing in an artifact is ever imported or executed" holds in this
form: such a module necessarily runs native code, but only code that retarget's own C printer
generated from loop nests it verified, built on this machine at run time; the artifact's C
text is never compiled, and no binary from an artifact is ever loaded.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from ...errors import ModelLoadError, RetargetError, TargetError
from ...runtime.device import Task
from ..base import Kernel, Target, WeightStore
from .build import WEIGHTS, Build, BuildOptions, build_library, write_project
from .device import RUN, LibraryDevice, LibrarySpec, task_args
from .program import Program

PROGRAM = "program.json"


def new_build_dir(region: str, build_dir: str = "") -> tuple[Path, bool]:
    """Where a region's project goes: "<build_dir>/<region>" when a build_dir is configured,
    else a new temporary directory. The flag says whether it is temporary (removed with the
    kernel)."""
    from ...loopnest.c_printer import c_identifier
    name = c_identifier(region)[:64]     # a region's name comes from the artifact: bounded
    if build_dir:
        return Path(build_dir) / name, False
    return Path(tempfile.mkdtemp(prefix=f"retarget-{name}-")), True


class LibraryKernel(Kernel):
    """Subclass as `class K(LibraryKernel, target="name")`: its kind is "<name>.library"."""
    kind: ClassVar[str] = ""
    target_name: ClassVar[str] = ""          # for messages and the device's name

    def __init_subclass__(cls, *, target: str | None = None, **kw):
        super().__init_subclass__(**kw)
        if target is not None:
            cls.target_name, cls.kind = target, f"{target}.library"

    # ---- what a target supplies ---------------------------------------------------------------
    @staticmethod
    def emit(program: Program, config) -> dict[str, str]:
        """File name -> text of every source file of the project."""
        raise NotImplementedError

    @staticmethod
    def build_options(program: Program, config) -> BuildOptions:
        """How the project of `program` is built into its library."""
        raise NotImplementedError

    def __init__(self, program: Program, weights: np.ndarray, config,
                 directory: Path | None = None, temporary: bool = False,
                 build: Build | None = None):
        if weights.dtype != np.uint8 or weights.ndim != 1 or weights.size != program.weights_bytes:
            raise TargetError(f"{self.target_name} program {program.name!r}: weights blob of "
                              f"{weights.size} bytes, expected {program.weights_bytes}")
        self.program = program
        self.weights = weights
        self.config = config
        self.options = self.build_options(program, config)
        self.directory = directory
        self.build = build
        # where a lazy build goes ("" a temporary directory)
        self.build_dir = str(getattr(config, "build_dir", ""))
        self.lower_seconds: float | None = None   # lowering + planning time at compile
        self._lock = threading.Lock()
        self._on_device: dict[int, tuple[int, int, int]] = {}   # id(device) -> handle, w, arena
        self._cleanup = None
        if directory is not None and temporary:
            self._cleanup = weakref.finalize(self, shutil.rmtree, str(directory), True)

    # ---- what reports and benchmarks read ---------------------------------------------------
    @property
    def arena_bytes(self) -> int:
        return self.program.arena_bytes

    @property
    def sum_of_tensor_bytes(self) -> int:
        return self.program.sum_of_tensor_bytes

    @property
    def build_seconds(self) -> float | None:
        return None if self.build is None else self.build.seconds

    def sources(self) -> dict[str, str]:
        return self.emit(self.program, self.config)

    def summary(self) -> str:
        p, mib = self.program, 1 / 2**20
        built = "" if self.build is None else f", built in {self.build.seconds:.1f} s"
        return (f"{p.name}: {len(p.calls)} kernels ({p.mode}), arena {p.arena_bytes * mib:.2f} "
                f"MiB for tensors that sum to {p.sum_of_tensor_bytes * mib:.2f} MiB, weights "
                f"{p.weights_bytes * mib:.2f} MiB{built}")

    # ---- building -----------------------------------------------------------------------------
    def ensure_built(self) -> Build:
        """Write the project and build the library, once (the first call does the work)."""
        with self._lock:
            if self.build is None:
                if self.directory is None:
                    self.directory, temporary = new_build_dir(self.program.name, self.build_dir)
                    if temporary:
                        self._cleanup = weakref.finalize(self, shutil.rmtree,
                                                         str(self.directory), True)
                write_project(self.directory, self.sources(), self.weights)
                try:
                    self.build = build_library(self.directory, self.options)
                except TargetError:
                    if self._cleanup is not None:     # keep the sources the error points to
                        self._cleanup.detach()
                        self._cleanup = None
                    raise
            return self.build

    def library_spec(self) -> LibrarySpec:
        p = self.program
        return LibrarySpec(p.name, p.weights_bytes, p.arena_bytes,
                           tuple(s.nbytes for s in p.inputs), tuple(s.nbytes for s in p.outputs),
                           len(p.calls), p.work)

    # ---- on a device ------------------------------------------------------------------------
    def upload(self, device) -> None:
        if not isinstance(device, LibraryDevice):
            raise TargetError(f"the {self.target_name} target's kernels run on a "
                              f"LibraryDevice, not {type(device).__name__}")
        build = self.ensure_built()
        w = device.malloc(max(1, self.program.weights_bytes))
        arena = device.malloc(max(1, self.program.arena_bytes))
        if self.weights.size:
            device.copy_to_device(w, self.weights)
        handle = device.load_library(build.library, self.library_spec(), w, arena)
        self._on_device[id(device)] = (handle, w, arena)

    def run(self, device, inputs: Sequence[int], outputs: Sequence[int]) -> list:
        placed = self._on_device.get(id(device))
        if placed is None:
            raise TargetError(f"{self.target_name} program {self.program.name!r} is not "
                              f"uploaded to this device")
        handle, w, arena = placed
        device.submit(Task(RUN, task_args(handle, w, arena, inputs, outputs),
                           name=self.program.name))
        return device.synchronize()

    def release(self, device) -> None:
        placed = self._on_device.pop(id(device), None)
        if placed is not None:
            handle, w, arena = placed
            device.unload_library(handle)
            device.free(w)
            device.free(arena)

    # ---- artifact -----------------------------------------------------------------------------
    def save(self, directory: Path, weights: WeightStore) -> dict:
        files = self.sources()
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
        self.weights.tofile(directory / WEIGHTS)
        (directory / PROGRAM).write_text(json.dumps(self.program.to_json(), indent=1),
                                         encoding="utf-8")
        return {"kind": self.kind, "program": PROGRAM, "weights": WEIGHTS,
                "sources": sorted(files)}

    @classmethod
    def load(cls, directory: Path, spec: Mapping[str, Any], weights: Mapping[str, np.ndarray],
             target: Target) -> "LibraryKernel":
        try:
            program = Program.from_json(json.loads((directory / PROGRAM).read_text(encoding="utf-8")))
        except (RetargetError, KeyError, TypeError, ValueError, RecursionError) as e:
            raise ModelLoadError(f"{directory / PROGRAM}: not a valid {cls.target_name} program "
                                 f"({type(e).__name__}: {e})") from None
        blob = np.fromfile(directory / WEIGHTS, dtype=np.uint8)
        if blob.size != program.weights_bytes:
            raise ModelLoadError(f"{directory / WEIGHTS}: {blob.size} bytes, the program "
                                 f"needs {program.weights_bytes}")
        for name, text in cls.emit(program, target.config).items():
            path = directory / name
            shipped = path.read_text(encoding="utf-8") if path.is_file() else None
            if shipped != text:
                raise ModelLoadError(
                    f"{path}: {'missing' if shipped is None else 'differs from'} the C that "
                    f"retarget generates from {PROGRAM}; a {cls.target_name} module only ever builds code "
                    f"generated from its verified loop nests, so edited sources (or ones "
                    f"written by another retarget version) are refused: recompile the model")
        return cls(program, blob, target.config)


__all__ = ["LibraryKernel", "PROGRAM", "new_build_dir"]

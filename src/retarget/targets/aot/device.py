"""The device of the ahead-of-time C targets (`c`, `sunway`): the host CPU running a generated
library through ctypes, behind the Device API.

It is a SimulatedDevice whose "device memory" (a page-aligned NumPy byte array) is ordinary
host memory, so a device pointer plus the array's address is a real address the native code
can use. A kernel loads its library once (`load_library`, like a driver loading a program),
uploads its weights and allocates its arena in device memory, and per run submits one task:

    model_run    args: library = the handle load_library returned,
                       weights, arena = device pointers (pointer arguments),
                       inputs, outputs = tuples of device pointers (region order),
                       memory = inputs + outputs (the other allocations it may touch)

`execute` checks every buffer against the sizes the library was built for (a bounds-checked
`view` of each, which also enforces the task's memory confinement), checks the work limit,
and calls `model_run` with the buffers' addresses; ctypes releases the GIL meanwhile, so
OpenMP threads run freely. The generated code itself cannot be watched access by access: it
stays inside those buffers because every kernel was verified (all indices in bounds) and
every binding checked against the buffer sizes before the C was printed (program.py).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import DeviceError
from ...limits import check_device_work
from ...device.base import MEMORY_ARG, SimulatedDevice, Task

RUN = "model_run"
_PAGE = 4096          # device memory is page-aligned (see _new_memory)


@dataclass(frozen=True, slots=True)
class LibrarySpec:
    """What a library's `model_run` expects: buffer sizes, and its work per run."""
    name: str
    weights_bytes: int
    arena_bytes: int
    input_bytes: tuple[int, ...]
    output_bytes: tuple[int, ...]
    kernels: int
    work: int


@dataclass(frozen=True, slots=True)
class _Loaded:
    spec: LibrarySpec
    path: Path
    library: ctypes.CDLL
    run: object      # the ctypes function model_run


class LibraryDevice(SimulatedDevice):
    """`name`: the target's, for what errors say."""
    name = "aot"
    kernels = {RUN: ("weights", "arena")}
    handle_arg = "library"
    # blas_threads None: a task runs generated C, which calls no BLAS, so the per-task switch
    # of BLAS's thread count (threadpoolctl, ~0.1 ms) is left out
    # poison_freed False: the libraries were verified to stay inside their buffers (above), and
    # poisoning a run's freed input (600 KB for a 224 x 224 image) is a memset per run
    default_options = {**SimulatedDevice.default_options, "memory_bytes": 1 << 31,
                       "blas_threads": None, "poison_freed": False}

    def __init__(self, name: str = "aot", **options):
        self.name = name
        self._libraries: dict[int, _Loaded] = {}
        super().__init__(**options)

    def _new_memory(self, nbytes: int) -> np.ndarray:
        """Page-aligned, so a 64-byte aligned device pointer is a 64-byte aligned host address."""
        raw = np.zeros(nbytes + _PAGE, dtype=np.uint8)     # pages mapped lazily
        start = (-raw.ctypes.data) % _PAGE
        return raw[start:start + nbytes]

    def load_library(self, path: Path, spec: LibrarySpec, weights: int, arena: int) -> int:
        """Load a library retarget built (never one from an artifact: see kernel.py) and
        return its handle for tasks, bound to its `weights` and `arena` allocations: a task
        is refused once either was freed (a stale handle)."""
        with self.lock:
            try:
                lib = ctypes.CDLL(str(path))
                fn = lib.model_run
            except (OSError, AttributeError) as e:
                raise DeviceError(f"{self.name}: cannot load {path}: {e}") from None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                           ctypes.POINTER(ctypes.c_void_p)]
            fn.restype = ctypes.c_int
            handle = self.hold(f"{self.name} library {spec.name!r}",
                               {"weights": weights, "arena": arena})
            self._libraries[handle] = _Loaded(spec, Path(path), lib, fn)
            return handle

    def unload_library(self, handle: int) -> None:
        """Forget a library (the process keeps it mapped: ctypes never unloads); its weights
        and arena are the caller's to free."""
        with self.lock:
            if self._libraries.pop(handle, None) is None:
                raise DeviceError(f"{self.name}: no library with handle {handle!r}")
            self.drop(handle)

    def execute(self, task: Task) -> dict[str, int]:
        if task.kernel != RUN:
            raise DeviceError(f"{self.name}: no kernel {task.kernel!r}")
        a = task.args
        loaded = self._libraries.get(a.get("library"))
        if loaded is None:
            raise DeviceError(f"{self.name}: task '{task.name}': library {a.get('library')!r} "
                              f"is not loaded")
        spec = loaded.spec
        # (synchronize checked the handle just before, under the same lock)
        held = dict((part, alloc.start) for part, alloc in self._holdings[a["library"]].parts)
        if (a.get("weights"), a.get("arena")) != (held["weights"], held["arena"]):
            raise DeviceError(f"{self.name}: task '{task.name}': weights / arena pointers "
                              f"{a.get('weights')!r} / {a.get('arena')!r} are not the ones "
                              f"library {spec.name!r} was loaded with")
        inputs, outputs = a.get("inputs", ()), a.get("outputs", ())
        if len(inputs) != len(spec.input_bytes) or len(outputs) != len(spec.output_bytes):
            raise DeviceError(f"{self.name}: task '{task.name}': {spec.name} takes "
                              f"{len(spec.input_bytes)} inputs and {len(spec.output_bytes)} "
                              f"outputs, got {len(inputs)} and {len(outputs)}")
        check_device_work(f"{self.name}: task '{task.name}' ({spec.name})", spec.work)

        w, arena, *buffers = self.host_addresses(
            [(a["weights"], spec.weights_bytes, "weights"), (a["arena"], spec.arena_bytes, "arena")]
            + [(p, n, f"input {i}") for i, (p, n) in enumerate(zip(inputs, spec.input_bytes))]
            + [(p, n, f"output {j}") for j, (p, n) in enumerate(zip(outputs, spec.output_bytes))],
            spec.name)
        ins, outs = buffers[:len(inputs)], buffers[len(inputs):]
        in_array = (ctypes.c_void_p * max(1, len(ins)))(*ins)
        out_array = (ctypes.c_void_p * max(1, len(outs)))(*outs)
        status = loaded.run(w, arena, in_array, out_array)
        if status != 0:
            why = self.library_error(loaded.library)
            raise DeviceError(f"{self.name}: task '{task.name}': model_run of {loaded.path} "
                              f"returned {status}{': ' + why if why else ''}")
        return {"kernels": spec.kernels, "statements": spec.work}

    @staticmethod
    def library_error(library: ctypes.CDLL) -> str:
        """What the library's optional `model_error()` says about its last failed run."""
        fn = getattr(library, "model_error", None)
        if fn is None:
            return ""
        fn.argtypes, fn.restype = [], ctypes.c_char_p
        return (fn() or b"").decode("utf-8", "replace")

    def library(self, handle: int) -> ctypes.CDLL:
        """The loaded library behind `handle` (for a target's own queries, e.g. counters)."""
        with self.lock:
            loaded = self._libraries.get(handle)
            if loaded is None:
                raise DeviceError(f"{self.name}: no library with handle {handle!r}")
            return loaded.library


def task_args(handle: int, weights: int, arena: int, inputs, outputs) -> dict:
    """The arguments of one model_run task."""
    inputs, outputs = tuple(int(p) for p in inputs), tuple(int(p) for p in outputs)
    return {"library": handle, "weights": weights, "arena": arena, "inputs": inputs,
            "outputs": outputs, MEMORY_ARG: inputs + outputs}


__all__ = ["LibraryDevice", "LibrarySpec", "RUN", "task_args"]

"""The Device API every accelerator (real driver or simulator) sits behind.

Modelled on the device abstraction of the TensorFlow retargeting paper: configure, malloc and
free device memory, copy host->device and device->host (DMA), commit task descriptors to a FIFO
non-preemptive queue, synchronise. Swapping a simulator for a real driver changes this one object
and nothing above it.

Two classes:

- `Device` is the interface: the methods a runtime calls, documented, with no implementation.
  A real driver would implement it directly.
- `SimulatedDevice(Device)` implements everything except the accelerator itself: device memory
  is a NumPy uint8 array managed by a best-fit allocator (device/allocator.py), copies and views
  are bounds-checked against live allocations, and tasks go through a FIFO queue that
  `synchronize()` drains in order, timing each.

Writing a simulated accelerator (the VTA simulator device, a toy example device) takes two things:

    class VectorAddDevice(SimulatedDevice):
        name = "vadd"
        # kernel name -> the names of its arguments that are device pointers. submit() refuses a
        # task whose kernel is not listed, and checks that each pointer argument points into a
        # live allocation.
        kernels = {"vadd": ("a", "b", "out")}

        def execute(self, task):
            n = task.args["n"]
            a = self.view(task.args["a"], (n,), np.int32)      # bounds-checked views of
            b = self.view(task.args["b"], (n,), np.int32)      # device memory, no copies
            out = self.view(task.args["out"], (n,), np.int32)
            out[:] = a + b
            return {"elements": n}                             # counters for the profile

Extra configuration options are declared by extending `default_options`; a subclass that needs to
react to them overrides `configure`, calls `super().configure(**options)` and reads `self.options`.
A Task carries only data (kernel name, ints, floats, strings, device pointers), never callables,
so a queue of tasks can be logged, replayed or sent to real hardware unchanged.

Guarantees every simulated device inherits (docs/guarantees.md):

- Thread safety: every method takes the device's reentrant `lock`; a runtime that needs several
  calls to happen together (upload inputs, submit, synchronise, read outputs) holds `lock` around
  them, so tasks from many threads and many modules sharing a device are serialised, never mixed.
- Memory confinement: while a task runs, `task_memory` holds the allocations its pointer
  arguments (and the pointers of its optional `memory` argument) point into; `view` refuses
  anything else, and a simulator asks `task_memory.violation(start, end)` before every access
  and reports the instruction, the address and the allocation (or free memory) it hit. An
  allocation is poisoned (filled with 0xDB) when freed, so stale reads are recognisable too.
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from ..errors import DeviceError, RetargetError
from ..limits import check_tensor_bytes
from .allocator import Allocation, AllocatorStats, BestFitAllocator, round_up
from .threads import blas_threads, default_blas_threads

DevicePtr = int  # a byte address in the device's memory


@dataclass(frozen=True, slots=True)
class Task:
    """A task descriptor: which kernel the device runs, and its arguments (device pointers,
    sizes, small constants). Nothing in a Task is executable code."""
    kernel: str
    args: dict[str, Any] = field(default_factory=dict)
    name: str = ""   # for profiles and error messages (e.g. the region or layer)


@dataclass(slots=True)
class TaskRecord:
    """What the device reports about one finished task."""
    task_id: int
    name: str
    kernel: str
    seconds: float                 # host wall time spent simulating/executing it
    counters: dict[str, int] = field(default_factory=dict)  # device-specific (cycles, bytes...)


@dataclass(frozen=True, slots=True)
class DeviceStats:
    """Counters of a device since it was created (memory figures are a current snapshot)."""
    name: str
    memory: AllocatorStats
    bytes_to_device: int
    bytes_from_device: int
    copies_to_device: int
    copies_from_device: int
    tasks_submitted: int
    tasks_completed: int
    tasks_queued: int
    execute_seconds: float
    backing_bytes: int = 0         # host memory backing the device memory now (it grows)


@dataclass(frozen=True, slots=True)
class TaskMemory:
    """The allocations one running task was given (those its pointer arguments and its
    `memory` argument point into): the only device memory the task may touch."""
    allocations: tuple[Allocation, ...]
    describe: Callable[[int], str]   # where an address lies (allocator.describe)

    def violation(self, start: int, end: int) -> str | None:
        """None when bytes [start, end) lie inside one of the task's allocations; otherwise a
        message naming the address and what it hit."""
        for a in self.allocations:
            if a.start <= start and end <= a.end:
                return None
        given = ", ".join(f"[0x{a.start:x}, 0x{a.end:x})" for a in self.allocations) or "none"
        return (f"bytes [0x{start:x}, 0x{end:x}) are outside the memory this task was given "
                f"(its allocations: {given}); 0x{start:x} is {self.describe(start)}")


@dataclass(frozen=True, slots=True)
class Holding:
    """What a loaded handle (a program, a library) was given: named allocations that must
    still be the same live allocations whenever a task uses the handle."""
    what: str                                    # "vta program at 0x40", for messages
    parts: tuple[tuple[str, Allocation], ...]    # ("DRAM image", the allocation), ...


POISON = 0xDB   # what freed device memory is filled with
# Host memory a device starts with; it grows (doubling) as allocations need more (_grow).
INITIAL_BACKING = 1 << 20
# A task argument any kernel may carry: a tuple of pointers to further allocations the task may
# touch besides its kernel's pointer arguments (e.g. the DRAM image a VTA stream reads and writes).
MEMORY_ARG = "memory"
# TaskRecords a device keeps (`history`): its most recent ones.
HISTORY = 4096


class Device:
    """The interface a runtime programs against. Subclasses declare `kernels` (the task kinds
    they accept) and implement every method; simulators should subclass `SimulatedDevice`, which
    provides memory, copies, the FIFO queue and bounds checks and leaves only `execute`."""

    name: str = "device"
    # Kernel names, or (SimulatedDevice) a mapping kernel name -> names of its pointer arguments.
    kernels: Mapping[str, tuple[str, ...]] | tuple[str, ...] = ()

    def configure(self, **options) -> None:
        """Initialise/configure the device (memory size, hardware options). Invalidates nothing
        that is live: implementations refuse while allocations or tasks are outstanding."""
        raise NotImplementedError(f"{type(self).__name__}.configure is not implemented")

    def malloc(self, nbytes: int, align: int = 64) -> DevicePtr:
        """Reserve `nbytes` of device memory; returns its address (a multiple of `align`)."""
        raise NotImplementedError(f"{type(self).__name__}.malloc is not implemented")

    def free(self, ptr: DevicePtr) -> None:
        """Release an allocation made by malloc."""
        raise NotImplementedError(f"{type(self).__name__}.free is not implemented")

    def copy_to_device(self, ptr: DevicePtr, array: np.ndarray) -> None:
        """DMA the bytes of `array` (C order) to device memory at `ptr`."""
        raise NotImplementedError(f"{type(self).__name__}.copy_to_device is not implemented")

    def copy_from_device(self, ptr: DevicePtr, shape: tuple[int, ...], dtype) -> np.ndarray:
        """DMA an array of `shape` and `dtype` from device memory at `ptr` into a new host array."""
        raise NotImplementedError(f"{type(self).__name__}.copy_from_device is not implemented")

    def submit(self, task: Task) -> int:
        """Append a task to the FIFO queue; returns its id. Raises DeviceError for a kernel this
        device does not have or arguments that are not valid device pointers."""
        raise NotImplementedError(f"{type(self).__name__}.submit is not implemented")

    def synchronize(self) -> list[TaskRecord]:
        """Run every queued task in order (non-preemptive); return their records."""
        raise NotImplementedError(f"{type(self).__name__}.synchronize is not implemented")

    def execute(self, task: Task) -> dict[str, int]:
        """Run one task (subclass hook). Returns device counters for the profile."""
        raise NotImplementedError(f"{type(self).__name__}.execute is not implemented")

    def stats(self) -> DeviceStats:
        """Memory, copy and task counters."""
        raise NotImplementedError(f"{type(self).__name__}.stats is not implemented")


# Argument values a Task may hold: plain data only (see module docstring).
_SCALAR_ARG_TYPES = (bool, int, float, str, type(None))


def _normalise_arg(value: Any) -> Any:
    """Return `value` as plain Python data, or raise TypeError if it is not data."""
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return value.item()
    if isinstance(value, _SCALAR_ARG_TYPES):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(_normalise_arg(v) for v in value)
    raise TypeError(type(value).__name__)


def _task_failure(error: Exception, prefix: str, dropped: int) -> RetargetError:
    """The error synchronize() raises when execute() fails: same class for retarget's own errors
    (an UnsupportedOpError stays one), DeviceError for anything else, with the task named."""
    if isinstance(error, RetargetError):
        detail = str(error)
        try:
            return type(error)(f"{prefix}: {detail}; {dropped} queued task(s) after it were discarded")
        except TypeError:  # a subclass with a different constructor
            pass
    else:
        detail = f"{type(error).__name__}: {error}"
    return DeviceError(f"{prefix}: {detail}; {dropped} queued task(s) after it were discarded")


def _locked(method):
    """Run a SimulatedDevice method under the device's lock (see the module docstring)."""
    def wrapper(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    wrapper.__name__, wrapper.__doc__ = method.__name__, method.__doc__
    wrapper.__qualname__ = method.__qualname__
    return wrapper


def _is_address(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


class SimulatedDevice(Device):
    """A Device whose memory is a NumPy array; subclasses supply `kernels` and `execute`."""

    name = "simulated"
    kernels: Mapping[str, tuple[str, ...]] = {}
    # blas_threads: BLAS threads while a task executes (device/threads.py); None = unchanged.
    # poison_freed: fill freed memory with POISON, so a kernel reading a freed buffer reads
    # garbage that shows, not the old values.
    default_options: ClassVar[dict[str, Any]] = {"memory_bytes": 1 << 24, "alignment": 64,
                                                 "blas_threads": "default", "poison_freed": True}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Catch a malformed kernel table when the class is defined, not at the first submit.
        kernels = cls.kernels
        if isinstance(kernels, Mapping):
            for kernel, ptr_args in kernels.items():
                if not isinstance(kernel, str) or isinstance(ptr_args, str) or not all(
                        isinstance(a, str) for a in ptr_args):
                    raise TypeError(f"{cls.__name__}.kernels must map kernel names to tuples of "
                                    f"pointer-argument names; bad entry {kernel!r}: {ptr_args!r}")
        elif isinstance(kernels, str) or not all(isinstance(k, str) for k in kernels):
            raise TypeError(f"{cls.__name__}.kernels must be a mapping or a tuple of kernel names")

    # The task argument that names a handle from `hold` (a loaded program or library); a task
    # carrying it is refused at submit and at execution if the handle is stale.
    handle_arg: ClassVar[str | None] = None

    def __init__(self, **options):
        # Reentrant: a runtime holds it around a whole kernel run, whose calls take it again.
        self.lock = threading.RLock()
        self._holdings: dict[int, Holding] = {}
        self._next_handle = 1
        self.task_memory: TaskMemory | None = None   # set only while a task executes
        self.options: dict[str, Any] = dict(self.default_options)
        self._memory = np.zeros(0, dtype=np.uint8)
        self._allocator: BestFitAllocator | None = None
        self._queue: deque[tuple[int, Task]] = deque()
        self._next_task_id = 0
        # the last HISTORY completed tasks, in order (bounded: a deployed device runs forever)
        self.history: deque[TaskRecord] = deque(maxlen=HISTORY)
        self._completed = 0
        self._bytes_in = self._bytes_out = 0
        self._copies_in = self._copies_out = 0
        self._execute_seconds = 0.0
        self.configure(**options)

    # ---- configuration -------------------------------------------------------------------------

    @_locked
    def configure(self, **options) -> None:
        """Set options (see `default_options`) and (re)create device memory. Refused while
        allocations are live or tasks are queued, since it would invalidate them."""
        unknown = sorted(set(options) - set(self.default_options))
        if unknown:
            raise DeviceError(f"{self.name}: unknown option(s) {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(self.default_options))}")
        if self._allocator is not None and self._allocator.stats().live_allocations:
            raise DeviceError(f"{self.name}: configure() with "
                              f"{self._allocator.stats().live_allocations} live allocation(s); "
                              f"free them first")
        if self._queue:
            raise DeviceError(f"{self.name}: configure() with {len(self._queue)} queued task(s); "
                              f"synchronize() first")
        merged = {**self.options, **options}
        if merged["blas_threads"] == "default":
            merged["blas_threads"] = default_blas_threads()
        threads = merged["blas_threads"]
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise DeviceError(f"{self.name}: blas_threads must be a positive int or None, "
                              f"got {threads!r}")
        if not isinstance(merged["poison_freed"], bool):
            raise DeviceError(f"{self.name}: poison_freed must be True or False, "
                              f"got {merged['poison_freed']!r}")
        size = merged["memory_bytes"]
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise DeviceError(f"{self.name}: memory_bytes must be a positive int, got {size!r}")
        check_tensor_bytes(f"{self.name}: device memory", (size,), np.uint8)
        allocator = BestFitAllocator(size, merged["alignment"])  # validates alignment
        self.options = merged
        self._allocator = allocator
        # `memory_bytes` is the device's address space; host memory backs only what has been
        # allocated (see _grow), so a 2 GiB device running a 40 KiB model takes a megabyte.
        self._memory = self._new_memory(min(size, INITIAL_BACKING))
        self.memory_moved()

    def _new_memory(self, nbytes: int) -> np.ndarray:
        """Zeroed host memory backing device addresses [0, nbytes) (a subclass may align it)."""
        return np.zeros(nbytes, dtype=np.uint8)

    def memory_moved(self) -> None:
        """Hook: `self._memory` is a new array (configured, or grown to hold a new allocation);
        a simulator holding the old one re-points to it here. Called outside any task."""

    def _grow(self, end: int) -> None:
        """Back device addresses [0, end) with host memory: at least double the backing, at
        most the device's size, the contents kept."""
        if end <= self._memory.size:
            return
        size = min(self.allocator.capacity, round_up(max(end, 2 * self._memory.size), 4096))
        try:
            grown = self._new_memory(size)
        except MemoryError:
            raise DeviceError(f"{self.name}: the host cannot back {size} bytes of device memory "
                              f"(an allocation ends at 0x{end:x}); the device's address space "
                              f"is {self.allocator.capacity} bytes") from None
        grown[:self._memory.size] = self._memory
        self._memory = grown
        self.memory_moved()

    @property
    def allocator(self) -> BestFitAllocator:
        assert self._allocator is not None  # set by __init__ via configure
        return self._allocator

    # ---- memory --------------------------------------------------------------------------------

    @_locked
    def malloc(self, nbytes: int, align: int = 64) -> DevicePtr:
        try:
            ptr = self.allocator.malloc(nbytes, align)
        except DeviceError as e:
            raise DeviceError(f"{self.name}: {e}") from None
        try:
            self._grow(ptr + round_up(nbytes, self.allocator.alignment))
        except DeviceError:
            self.allocator.free(ptr)
            raise
        return ptr

    @_locked
    def free(self, ptr: DevicePtr) -> None:
        if _is_address(ptr):
            allocation = self.allocator.allocation_at(int(ptr))
            if allocation is not None and allocation.start == ptr:
                user = self._queued_user_of(allocation)
                if user:
                    raise DeviceError(f"{self.name}: free(0x{int(ptr):x}): still used by {user}; "
                                      f"synchronize() first")
            ptr = int(ptr)
            if allocation is not None and allocation.start == ptr and self.options["poison_freed"]:
                self._memory[allocation.start:allocation.end] = POISON
        try:
            self.allocator.free(ptr)
        except DeviceError as e:
            raise DeviceError(f"{self.name}: {e}") from None

    @_locked
    def copy_to_device(self, ptr: DevicePtr, array: np.ndarray) -> None:
        host = np.asarray(array)
        if host.dtype.hasobject:
            raise DeviceError(f"{self.name}: copy_to_device({ptr!r}): object arrays cannot be "
                              f"copied to a device")
        data = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        start = self._check_range(ptr, data.size, "copy_to_device", host.shape, host.dtype)
        self._memory[start:start + data.size] = data
        self._bytes_in += data.size
        self._copies_in += 1

    @_locked
    def copy_from_device(self, ptr: DevicePtr, shape: tuple[int, ...], dtype) -> np.ndarray:
        out = self.view(ptr, shape, dtype, what="copy_from_device").copy()
        self._bytes_out += out.nbytes
        self._copies_out += 1
        return out

    @_locked
    def view(self, ptr: DevicePtr, shape: tuple[int, ...], dtype, what: str = "view") -> np.ndarray:
        """A writable NumPy view of device memory at `ptr` (for subclasses' execute). The whole
        range must lie within one live allocation."""
        dt, shape = self._check_layout(ptr, shape, dtype, what)
        nbytes = math.prod(shape) * dt.itemsize
        start = self._check_access(ptr, nbytes, what, shape, dt)
        return self._memory[start:start + nbytes].view(dt).reshape(shape)

    def _check_access(self, ptr, nbytes: int, what: str, shape=None, dtype=None) -> int:
        """`_check_range`, and inside execute() also that the range is the task's own memory."""
        start = self._check_range(ptr, nbytes, what, shape, dtype)
        if self.task_memory is not None:
            problem = self.task_memory.violation(start, start + nbytes)
            if problem:
                raise DeviceError(f"{self.name}: {what}(0x{start:x}, {nbytes} bytes): {problem}")
        return start

    @_locked
    def host_addresses(self, ranges, what: str) -> list[int]:
        """The host addresses of device ranges [(ptr, nbytes, label), ...], each checked as
        `view` checks it (for a device whose memory native code reads, e.g. LibraryDevice).
        Valid until the memory is next grown (`memory_moved`)."""
        base = self._memory.ctypes.data
        return [base + self._check_access(ptr, nbytes, f"{what} {label}")
                for ptr, nbytes, label in ranges]

    def _check_layout(self, ptr, shape, dtype, what: str) -> tuple[np.dtype, tuple[int, ...]]:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise DeviceError(f"{self.name}: {what}({ptr!r}): {dtype!r} is not a dtype") from None
        if dt.hasobject or dt.itemsize == 0:
            raise DeviceError(f"{self.name}: {what}({ptr!r}): dtype {dt} cannot live in device memory")
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        if not all(_is_address(d) and d >= 0 for d in shape):
            raise DeviceError(f"{self.name}: {what}({ptr!r}): shape {shape!r} must be "
                              f"non-negative ints")
        return dt, tuple(int(d) for d in shape)

    def _check_range(self, ptr, nbytes: int, what: str, shape=None, dtype=None) -> int:
        """Check that [ptr, ptr+nbytes) lies within one live allocation; return ptr as an int."""
        if not _is_address(ptr):
            raise DeviceError(f"{self.name}: {what}: pointer {ptr!r} is not a device address")
        ptr = int(ptr)
        allocation = self.allocator.allocation_at(ptr)
        if allocation is not None and ptr + nbytes <= allocation.end:
            return ptr
        desc = f"{nbytes} bytes" + (f" (shape {tuple(shape)}, {dtype})" if shape is not None else "")
        if allocation is None:
            where = self.allocator.describe(ptr)
            hint = " (use after free?)" if where == "in free memory" else ""
            raise DeviceError(f"{self.name}: {what}(0x{ptr:x}, {desc}): pointer is {where}, "
                              f"not inside a live allocation{hint}")
        raise DeviceError(f"{self.name}: {what}(0x{ptr:x}, {desc}) overruns the allocation at "
                          f"0x{allocation.start:x} ({allocation.size} bytes) by "
                          f"{ptr + nbytes - allocation.end} bytes")

    # ---- handles -------------------------------------------------------------------------------

    @_locked
    def hold(self, what: str, parts: Mapping[str, DevicePtr]) -> int:
        """A handle bound to the live allocations starting at `parts`' pointers (name ->
        pointer), for a loaded program or library: `check_held` refuses it once any of them
        was freed, even if the memory was allocated again to someone else."""
        held = []
        for part, ptr in parts.items():
            allocation = self.allocator.allocation_at(ptr) if _is_address(ptr) else None
            if allocation is None or allocation.start != ptr:
                raise DeviceError(f"{self.name}: {what}: its {part} at {ptr!r} is not a live "
                                  f"allocation")
            held.append((part, allocation))
        handle = self._next_handle
        self._next_handle += 1
        self._holdings[handle] = Holding(what, tuple(held))
        return handle

    @_locked
    def drop(self, handle: int) -> Holding:
        """Forget a handle (its allocations are the caller's to free)."""
        holding = self._holdings.pop(handle, None) if _is_address(handle) else None
        if holding is None:
            raise DeviceError(f"{self.name}: no loaded handle {handle!r}")
        return holding

    @_locked
    def check_held(self, handle: Any, label: str = "") -> Holding:
        """The holding of `handle`, refused (DeviceError naming the freed allocation) when it
        is unknown or any of its allocations is no longer the one it was given."""
        where = f"{self.name}: {label + ': ' if label else ''}"
        holding = self._holdings.get(handle) if _is_address(handle) else None
        if holding is None:
            raise DeviceError(f"{where}handle {handle!r} is not loaded on this device "
                              f"(unloaded, or never loaded here)")
        for part, a in holding.parts:
            now = self.allocator.allocation_at(a.start)
            if now is None or now.serial != a.serial:
                reused = (f"; that memory now belongs to allocation #{now.serial} ({now.size} "
                          f"bytes)" if now is not None else
                          f"; that memory is {self.allocator.describe(a.start)}")
                raise DeviceError(f"{where}{holding.what} (handle {handle}) is stale: its "
                                  f"{part}, allocation #{a.serial} at 0x{a.start:x} ({a.size} "
                                  f"bytes), was freed{reused}; load it again")
        return holding

    # ---- tasks ---------------------------------------------------------------------------------

    def pointer_args(self, kernel: str) -> tuple[str, ...]:
        """Names of `kernel`'s arguments that are device pointers (empty for a kernel declared
        by name only)."""
        if isinstance(self.kernels, Mapping):
            return tuple(self.kernels[kernel])
        return ()

    @_locked
    def submit(self, task: Task) -> int:
        if not isinstance(task, Task):
            raise DeviceError(f"{self.name}: submit() takes a Task, got {type(task).__name__}")
        label = f"task '{task.name}' (kernel '{task.kernel}')"
        if task.kernel not in self.kernels:
            known = ", ".join(sorted(self.kernels)) or "none"
            raise DeviceError(f"{self.name}: {label}: unknown kernel; this device has: {known}")
        args: dict[str, Any] = {}
        for key, value in task.args.items():
            try:
                args[key] = _normalise_arg(value)
            except TypeError as e:
                raise DeviceError(f"{self.name}: {label}: argument '{key}' is a {e}; a Task holds "
                                  f"only data (ints, floats, strings, device pointers)") from None
        extra = args.get(MEMORY_ARG, ())
        if not isinstance(extra, tuple) or not all(_is_address(a) for a in extra):
            raise DeviceError(f"{self.name}: {label}: argument '{MEMORY_ARG}' must be a tuple of "
                              f"device pointers, got {extra!r}")
        for ptr in extra:
            if self.allocator.allocation_at(ptr) is None:
                raise DeviceError(f"{self.name}: {label}: '{MEMORY_ARG}' pointer 0x{ptr:x} is "
                                  f"{self.allocator.describe(ptr)}, not inside a live allocation")
        if self.handle_arg is not None and self.handle_arg in args:
            self.check_held(args[self.handle_arg], label)
        for arg in self.pointer_args(task.kernel):
            if arg not in args:
                raise DeviceError(f"{self.name}: {label}: missing pointer argument '{arg}'")
            ptr = args[arg]
            if not _is_address(ptr):
                raise DeviceError(f"{self.name}: {label}: pointer argument '{arg}' = {ptr!r} "
                                  f"is not a device address")
            if self.allocator.allocation_at(ptr) is None:
                raise DeviceError(f"{self.name}: {label}: pointer argument '{arg}' = 0x{ptr:x} "
                                  f"is {self.allocator.describe(ptr)}, not inside a live "
                                  f"allocation (dangling pointer?)")
        task_id = self._next_task_id
        self._next_task_id += 1
        # Queue a copy of the arguments so mutating the caller's dict cannot change a queued task.
        self._queue.append((task_id, Task(task.kernel, args, task.name)))
        return task_id

    @_locked
    def synchronize(self) -> list[TaskRecord]:
        records: list[TaskRecord] = []
        while self._queue:
            task_id, task = self._queue.popleft()
            start = time.perf_counter()
            self.task_memory = self._task_memory(task)
            try:
                if self.handle_arg is not None and self.handle_arg in task.args:
                    self.check_held(task.args[self.handle_arg], f"task '{task.name}'")
                with blas_threads(self.options["blas_threads"]):
                    counters = self.execute(task)
            except KeyboardInterrupt:
                # Ctrl-C: the device stays usable; tasks queued after this one are dropped
                # because they may depend on its output.
                self._queue.clear()
                raise
            except Exception as e:
                # A fault stops the device like a reset: later tasks may depend on this one's
                # output, so running them would produce wrong answers silently.
                dropped = len(self._queue)
                self._queue.clear()
                raise _task_failure(e, f"{self.name}: task #{task_id} '{task.name}' (kernel "
                                       f"'{task.kernel}') failed", dropped) from e
            finally:
                self.task_memory = None
            seconds = time.perf_counter() - start
            self._execute_seconds += seconds
            record = TaskRecord(task_id, task.name, task.kernel, seconds,
                                self._check_counters(task_id, task, counters))
            records.append(record)
            self.history.append(record)
            self._completed += 1
        return records

    def _check_counters(self, task_id: int, task: Task, counters) -> dict[str, int]:
        if counters is None:
            return {}
        if not isinstance(counters, Mapping) or not all(
                isinstance(k, str) and _is_address(v) for k, v in counters.items()):
            raise DeviceError(f"{self.name}: task #{task_id} '{task.name}': execute() must return "
                              f"a dict of str -> int counters, got {counters!r}")
        return {k: int(v) for k, v in counters.items()}

    def _task_memory(self, task: Task) -> TaskMemory:
        """The allocations `task`'s pointer arguments point into (checked live at submit)."""
        allocations = []
        for ptr in self._task_pointers(task):
            allocation = self.allocator.allocation_at(ptr)
            if allocation is not None and allocation not in allocations:
                allocations.append(allocation)
        return TaskMemory(tuple(allocations), self.allocator.describe)

    def _task_pointers(self, task: Task) -> list[int]:
        """Every device pointer `task` holds: its kernel's pointer arguments and `memory`."""
        return [task.args[a] for a in self.pointer_args(task.kernel)] + list(
            task.args.get(MEMORY_ARG, ()))

    def _queued_user_of(self, allocation: Allocation) -> str:
        """Describe the first queued task holding a pointer into `allocation`, or ''."""
        for task_id, task in self._queue:
            for ptr in self._task_pointers(task):
                if allocation.contains(ptr):
                    return f"queued task #{task_id} '{task.name}'"
        return ""

    def execute(self, task: Task) -> dict[str, int]:
        raise NotImplementedError(f"{type(self).__name__} does not implement execute(); "
                                  f"simulated devices must override it")

    @_locked
    def stats(self) -> DeviceStats:
        return DeviceStats(
            name=self.name,
            memory=self.allocator.stats(),
            bytes_to_device=self._bytes_in,
            bytes_from_device=self._bytes_out,
            copies_to_device=self._copies_in,
            copies_from_device=self._copies_out,
            tasks_submitted=self._next_task_id,
            tasks_completed=self._completed,
            tasks_queued=len(self._queue),
            execute_seconds=self._execute_seconds,
            backing_bytes=int(self._memory.size),
        )


__all__ = ["Device", "DeviceError", "DevicePtr", "DeviceStats", "Holding", "MEMORY_ARG", "POISON",
           "SimulatedDevice", "Task", "TaskMemory", "TaskRecord"]

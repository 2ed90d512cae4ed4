"""The Device API every accelerator (real driver or simulator) sits behind.

Modelled on the device abstraction of the TensorFlow retargeting paper: configure, malloc and
free device memory, copy host->device and device->host (DMA), commit task descriptors to a FIFO
non-preemptive queue, synchronise. A simulator implements `execute`; swapping it for a real
driver changes this one object and nothing above it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DeviceError

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


class Device:
    """Base class. Subclasses set `kernels` (the task kinds they accept) and implement
    `execute(task)`; memory, copies, the FIFO queue and bounds checks live here."""

    name: str = "device"
    kernels: tuple[str, ...] = ()

    def configure(self, **options) -> None:
        raise NotImplementedError

    def malloc(self, nbytes: int, align: int = 64) -> DevicePtr:
        raise NotImplementedError

    def free(self, ptr: DevicePtr) -> None:
        raise NotImplementedError

    def copy_to_device(self, ptr: DevicePtr, array: np.ndarray) -> None:
        raise NotImplementedError

    def copy_from_device(self, ptr: DevicePtr, shape: tuple[int, ...], dtype) -> np.ndarray:
        raise NotImplementedError

    def submit(self, task: Task) -> int:
        """Append a task to the FIFO queue; returns its id. Raises DeviceError for a kernel this
        device does not have or arguments that are not valid device pointers."""
        raise NotImplementedError

    def synchronize(self) -> list[TaskRecord]:
        """Run every queued task in order (non-preemptive); return their records."""
        raise NotImplementedError

    def execute(self, task: Task) -> dict[str, int]:
        """Run one task (subclass hook). Returns device counters for the profile."""
        raise NotImplementedError


__all__ = ["Device", "DeviceError", "DevicePtr", "Task", "TaskRecord"]

"""The executor: runs a partitioned Module region by region.

CPU regions run node by node on the reference executor (`run_node`), or, for a module compiled
with a C host (passes/host.py), as their generated C library on a host LibraryDevice of their
own; offloaded regions run their kernel on their device (one per target of the module).
Tensors are copied host->device only when a device region reads a value that is not in its
device's memory, and device->host
only when the host reads a device value (a CPU region or a graph output) or another device
does; values passed from one region to the next on the same device stay in device memory.
A value moves between two devices as TensorFlow's copy wrappers move it ("Retargeting
TensorFlow to FPGA", Sec. 2.4: CopyDeviceTensorToCPU, then CopyCPUTensorToDevice), through
the Device API's copy_from_device and copy_to_device. Buffers are freed after their last
reader. Each run leaves a per-region profile.

Thread safety: everything one run needs (host tensors, device buffers, its profile) is local
to that call, and a device region runs under the device's lock (allocate, upload, run the
kernel, read back), so many threads may call `run` on one Executor, and several executors may
share one device: device work is serialised, CPU regions run concurrently.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..errors import RetargetError, TargetError
from ..ir.graph import Value
from ..ops.reference import check_inputs, run_node

CPU = "cpu"


@dataclass(slots=True)
class RegionProfile:
    region: str
    target: str
    nodes: int
    seconds: float          # host wall time (for device regions: simulation included)
    bytes_in: int = 0       # host -> device
    bytes_out: int = 0      # device -> host
    bytes_between: int = 0  # of bytes_in: what another device produced (moved via the host)
    tasks: int = 0
    task_seconds: float = 0.0   # device time of its tasks (TaskRecord.seconds), packing excluded
    counters: dict[str, int] = field(default_factory=dict)  # summed device counters


class Executor:
    """Runs one Module on one device instance (created once; kernels uploaded once)."""

    def __init__(self, module, device=None):
        """`device`: run the module's (first) target's regions on this device (shared with
        other executors) instead of a new one from the target's make_device(); the executor
        then does not own it. Every other device of the module is made here."""
        self.module = module
        self.devices: dict[str, object] = {}     # target name -> its device
        self.profile: list[RegionProfile] = []   # the last finished run's
        cfg = module.target.config
        self.fast = bool(getattr(cfg, "fast", True)) if module.target.name == CPU else True
        self.host_device = None     # runs the CPU regions compiled as C (module.host)
        if module.host is not None and module.host.kernels:
            self.host_device = module.host.target.make_device()
            for kernel in module.host.kernels.values():
                kernel.upload(self.host_device)
        for r in module.offloaded:
            if r.target not in self.devices:
                given = device if r.target == module.target.name else None
                made = given if given is not None else module.target_of(r).make_device()
                if made is None:
                    raise TargetError(f"target {r.target!r} offloads regions but has no device")
                self.devices[r.target] = made
            with self._device_lock(self.devices[r.target]):
                self._kernel(r).upload(self.devices[r.target])
        self.device = self.devices.get(module.target.name)
        self._plan()

    def _device_lock(self, device):
        """The device's lock (every SimulatedDevice has one); a plain lock for a device class
        without one, so its kernel runs are still serialised."""
        lock = getattr(device, "lock", None)
        if lock is None:
            locks = self.__dict__.setdefault("_fallback_locks", {})
            lock = locks.setdefault(id(device), threading.RLock())
        return lock

    def _kernel(self, region):
        try:
            return self.module.kernels[region.name]
        except KeyError:
            raise TargetError(f"module has no kernel for offloaded region {region.name!r}") from None

    def _plan(self) -> None:
        """Precompute, per value, the last region that reads it on the host and on each
        device, which device makes it, and which values the host must hold (read by the CPU,
        returned, or read by a device other than the one that made them)."""
        self.last_host: dict[int, int] = {}
        self.last_dev: dict[tuple[str, int], int] = {}
        self.made_on: dict[int, str] = {}
        self.host_readers: set[int] = {id(v) for v in self.module.graph.outputs}
        # the constants a run puts on the host: those the CPU regions' nodes read and
        # constant graph outputs (an offloaded region's kernel holds its own)
        cpu_reads = {id(v) for r in self.module.regions if r.target == CPU
                     for n in r.nodes for v in n.inputs if v is not None}
        self.host_constants = [v for v in self.module.graph.constants()
                               if id(v) in cpu_reads or id(v) in self.host_readers]
        for k, r in enumerate(self.module.regions):
            for v in r.inputs:
                if r.target == CPU:
                    self.last_host[id(v)] = k
                else:
                    self.last_dev[(r.target, id(v))] = k
                if r.target == CPU or self.made_on.get(id(v), CPU) != r.target:
                    self.host_readers.add(id(v))
                    self.last_host[id(v)] = max(self.last_host.get(id(v), -1), k)
            if r.target != CPU:
                self.made_on.update((id(v), r.target) for v in r.outputs)

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        graph = self.module.graph
        host: dict[Value, np.ndarray] = check_inputs(graph, inputs)
        for v in self.host_constants:
            host[v] = v.const
        dev: dict[str, dict[Value, int]] = {name: {} for name in self.devices}
        keep = {id(v) for v in graph.outputs}
        profile: list[RegionProfile] = []
        progress = _Progress(len(self.module.regions))
        try:
            for k, region in enumerate(self.module.regions):
                t0 = time.perf_counter()
                if region.target == CPU:
                    prof = self._run_cpu(region, host)
                else:
                    with self._device_lock(self.devices[region.target]):
                        prof = self._run_device(region, host, dev[region.target])
                prof.seconds = time.perf_counter() - t0
                profile.append(prof)
                self._free_after(k, host, dev, keep)
                progress.update(k + 1, region.name)
            self.profile = profile
            return {v.name: host[v] for v in graph.outputs}
        finally:
            progress.close()
            for name, ptrs in dev.items():
                for ptr in ptrs.values():
                    self.devices[name].free(ptr)

    def _run_cpu(self, region, host) -> RegionProfile:
        kernel = None if self.host_device is None else self.module.host.kernels.get(region.name)
        if kernel is not None:
            return self._run_host_c(region, kernel, host)
        for node in region.nodes:
            args = [None if v is None else host[v] for v in node.inputs]
            for v, a in zip(node.outputs, run_node(node, args, fast=self.fast)):
                host[v] = a
        return RegionProfile(region.name, CPU, len(region.nodes), 0.0)

    def _run_host_c(self, region, kernel, host) -> RegionProfile:
        """A CPU region as its C library: its inputs copied into the host device's memory,
        one model_run, its outputs copied back (the device memory is host memory; the copies
        are what keeps the library inside buffers of the sizes it was built for)."""
        device = self.host_device
        prof = RegionProfile(region.name, CPU, len(region.nodes), 0.0)
        with device.lock:
            ptrs: list[int] = []
            try:
                for v in region.inputs:
                    a = np.ascontiguousarray(host[v])
                    if v.type is None or a.dtype != np.dtype(v.type.dtype) or a.nbytes != v.type.nbytes:
                        raise TargetError(f"region {region.name!r} (host C): input {v.name!r} "
                                          f"is {a.dtype}{list(a.shape)}, its code was built for "
                                          f"{v.type}")
                    ptrs.append(device.malloc(max(a.nbytes, 1)))
                    device.copy_to_device(ptrs[-1], a)
                outs = [device.malloc(max(v.type.nbytes, 1)) for v in region.outputs]
                ptrs += outs
                records = kernel.run(device, ptrs[:len(region.inputs)], outs)
                for v, p in zip(region.outputs, outs):
                    host[v] = device.copy_from_device(p, v.type.shape, v.type.dtype)
            except RetargetError as e:
                raise type(e)(f"region {region.name!r} on the host (C): {e}") from None
            finally:
                for p in ptrs:
                    device.free(p)
        prof.tasks = len(records)
        return prof

    def _run_device(self, region, host, dev) -> RegionProfile:
        device = self.devices[region.target]
        prof = RegionProfile(region.name, region.target, len(region.nodes), 0.0)
        in_ptrs = []
        for v in region.inputs:
            if v not in dev:  # not in this device's memory: DMA it in from the host (once,
                #              kept while this device's readers remain)
                a = np.ascontiguousarray(host[v])
                dev[v] = device.malloc(max(a.nbytes, 1))
                device.copy_to_device(dev[v], a)
                prof.bytes_in += a.nbytes
                if self.made_on.get(id(v), CPU) != CPU:
                    prof.bytes_between += a.nbytes
            in_ptrs.append(dev[v])
        out_ptrs = []
        for v in region.outputs:
            if v.type is None:
                raise TargetError(f"region {region.name!r}: output {v.name!r} has no type")
            dev[v] = device.malloc(max(v.type.nbytes, 1))
            out_ptrs.append(dev[v])
        try:
            records = self._kernel(region).run(device, in_ptrs, out_ptrs)
        except RetargetError as e:
            raise type(e)(f"region {region.name!r} on {region.target}: {e}") from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:
            # A kernel (a plugin's too) tripping over its own data is reported as the region's
            # failure, never as a traceback from inside it.
            raise TargetError(f"region {region.name!r} on {region.target}: the kernel failed "
                              f"({type(e).__name__}: {e})") from None
        prof.tasks = len(records)
        for rec in records:
            prof.task_seconds += rec.seconds
            for key, n in rec.counters.items():
                prof.counters[key] = prof.counters.get(key, 0) + int(n)
        for v in region.outputs:
            if id(v) in self.host_readers:
                host[v] = device.copy_from_device(dev[v], v.type.shape, v.type.dtype)
                prof.bytes_out += v.type.nbytes
        return prof

    def _free_after(self, k: int, host, dev, keep: set[int]) -> None:
        for name, held in dev.items():
            for v in [v for v in held if self.last_dev.get((name, id(v)), -1) <= k]:
                self.devices[name].free(held.pop(v))
        for v in [v for v in host if not v.is_const and id(v) not in keep
                  and self.last_host.get(id(v), -1) <= k
                  and all(self.last_dev.get((name, id(v)), -1) <= k for name in dev)]:
            del host[v]

    def close(self) -> None:
        if self.host_device is not None:
            for kernel in self.module.host.kernels.values():
                kernel.release(self.host_device)
            self.host_device = None
        for r in self.module.offloaded:
            device = self.devices.get(r.target)
            if device is not None:
                with self._device_lock(device):
                    self._kernel(r).release(device)
        self.devices, self.device = {}, None


class _Progress:
    """A one-line progress display on stderr for runs longer than 2 s (a terminal only)."""

    DELAY = 2.0

    def __init__(self, total: int):
        self.total, self.start, self.shown = total, time.perf_counter(), False
        self.enabled: bool | None = None    # a terminal? asked once the run is long (a syscall)

    def update(self, done: int, name: str) -> None:
        if self.enabled is False or time.perf_counter() - self.start <= self.DELAY:
            return
        if self.enabled is None:
            self.enabled = sys.stderr.isatty()
        if self.enabled:
            self.shown = True
            sys.stderr.write(f"\rretarget: region {done}/{self.total} ({name}) "
                             f"{time.perf_counter() - self.start:.1f} s\x1b[K")
            sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def execute(module, inputs: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[RegionProfile]]:
    """Run `module` once on a fresh executor; returns (outputs, per-region profile)."""
    ex = Executor(module)
    try:
        return ex.run(inputs), ex.profile
    finally:
        ex.close()


def format_profile(profile: list[RegionProfile]) -> str:
    """The profile as a plain-text table."""
    rows = [("region", "target", "nodes", "ms", "bytes in", "bytes out", "tasks", "counters")]
    for p in profile:
        counters = ", ".join(f"{k}={v}" for k, v in sorted(p.counters.items()))
        rows.append((p.region, p.target, str(p.nodes), f"{p.seconds * 1e3:.3f}", str(p.bytes_in),
                     str(p.bytes_out), str(p.tasks), counters))
    widths = [max(len(r[i]) for r in rows) for i in range(7)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:7], widths)) + "  " + r[7] for r in rows]
    between = sum(p.bytes_between for p in profile)
    if len({p.target for p in profile if p.target != CPU}) > 1 or between:
        lines.append(f"bytes moved between devices (device -> host -> device): {between}")
    return "\n".join(lines)


__all__ = ["Executor", "RegionProfile", "execute", "format_profile"]

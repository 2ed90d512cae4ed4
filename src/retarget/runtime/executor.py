"""The executor: runs a partitioned Module region by region.

CPU regions run node by node on the reference executor (`run_node`), or, for a module compiled
with a C host (passes/host.py), as their generated C library on a host LibraryDevice of their
own; offloaded regions run their kernel on the target's device. Tensors are copied host->device only when a device region
reads a value that lives on the host, and device->host only when the host reads a device value
(a CPU region or a graph output); values passed from one device region to the next stay in
device memory. Buffers are freed after their last reader. Each run leaves a per-region profile.

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
from ..targets.cpu.reference import check_inputs, run_node

CPU = "cpu"


@dataclass(slots=True)
class RegionProfile:
    region: str
    target: str
    nodes: int
    seconds: float          # host wall time (for device regions: simulation included)
    bytes_in: int = 0       # host -> device
    bytes_out: int = 0      # device -> host
    tasks: int = 0
    task_seconds: float = 0.0   # device time of its tasks (TaskRecord.seconds), packing excluded
    counters: dict[str, int] = field(default_factory=dict)  # summed device counters


class Executor:
    """Runs one Module on one device instance (created once; kernels uploaded once)."""

    def __init__(self, module, device=None):
        """`device`: run on this device (shared with other executors) instead of a new one
        from the target's make_device(); the executor then does not own it."""
        self.module = module
        self.device = None
        self.profile: list[RegionProfile] = []   # the last finished run's
        cfg = module.target.config
        self.fast = bool(getattr(cfg, "fast", True)) if module.target.name == CPU else True
        self.host_device = None     # runs the CPU regions compiled as C (module.host)
        if module.host is not None and module.host.kernels:
            self.host_device = module.host.target.make_device()
            for kernel in module.host.kernels.values():
                kernel.upload(self.host_device)
        if module.offloaded:
            self.device = device if device is not None else module.target.make_device()
            if self.device is None:
                raise TargetError(f"target {module.target.name!r} offloads regions but has no device")
            with self._device_lock():
                for r in module.offloaded:
                    self._kernel(r).upload(self.device)
        self._plan()

    def _device_lock(self):
        """The device's lock (every SimulatedDevice has one); a plain lock for a device class
        without one, so its kernel runs are still serialised."""
        lock = getattr(self.device, "lock", None)
        if lock is None:
            lock = self.__dict__.setdefault("_fallback_lock", threading.RLock())
        return lock

    def _kernel(self, region):
        try:
            return self.module.kernels[region.name]
        except KeyError:
            raise TargetError(f"module has no kernel for offloaded region {region.name!r}") from None

    def _plan(self) -> None:
        """Precompute, per value, the last region that reads it on the host and on the device."""
        self.last_host: dict[int, int] = {}
        self.last_dev: dict[int, int] = {}
        self.host_readers: set[int] = {id(v) for v in self.module.graph.outputs}
        for k, r in enumerate(self.module.regions):
            table = self.last_host if r.target == CPU else self.last_dev
            for v in r.inputs:
                table[id(v)] = k
                if r.target == CPU:
                    self.host_readers.add(id(v))

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        graph = self.module.graph
        host: dict[Value, np.ndarray] = check_inputs(graph, inputs)
        for v in graph.constants():
            host[v] = v.const
        dev: dict[Value, int] = {}
        keep = {id(v) for v in graph.outputs}
        profile: list[RegionProfile] = []
        progress = _Progress(len(self.module.regions))
        try:
            for k, region in enumerate(self.module.regions):
                t0 = time.perf_counter()
                if region.target == CPU:
                    prof = self._run_cpu(region, host)
                else:
                    with self._device_lock():
                        prof = self._run_device(region, host, dev)
                prof.seconds = time.perf_counter() - t0
                profile.append(prof)
                self._free_after(k, host, dev, keep)
                progress.update(k + 1, region.name)
            self.profile = profile
            return {v.name: host[v] for v in graph.outputs}
        finally:
            progress.close()
            for ptr in dev.values():
                self.device.free(ptr)

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
        device = self.device
        prof = RegionProfile(region.name, region.target, len(region.nodes), 0.0)
        in_ptrs = []
        for v in region.inputs:
            if v not in dev:  # lives on the host: DMA it in (once, kept while device readers remain)
                a = np.ascontiguousarray(host[v])
                dev[v] = device.malloc(max(a.nbytes, 1))
                device.copy_to_device(dev[v], a)
                prof.bytes_in += a.nbytes
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
        for v in [v for v in dev if self.last_dev.get(id(v), -1) <= k]:
            self.device.free(dev.pop(v))
        for v in [v for v in host if not v.is_const and id(v) not in keep
                  and self.last_host.get(id(v), -1) <= k and self.last_dev.get(id(v), -1) <= k]:
            del host[v]

    def close(self) -> None:
        if self.host_device is not None:
            for kernel in self.module.host.kernels.values():
                kernel.release(self.host_device)
            self.host_device = None
        if self.device is not None:
            with self._device_lock():
                for r in self.module.offloaded:
                    self._kernel(r).release(self.device)
            self.device = None


class _Progress:
    """A one-line progress display on stderr for runs longer than 2 s (a terminal only)."""

    DELAY = 2.0

    def __init__(self, total: int):
        self.total, self.start, self.shown = total, time.perf_counter(), False
        self.enabled = sys.stderr.isatty()

    def update(self, done: int, name: str) -> None:
        if self.enabled and time.perf_counter() - self.start > self.DELAY:
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
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:7], widths)) + "  " + r[7] for r in rows)


__all__ = ["Executor", "RegionProfile", "execute", "format_profile"]

"""A compiled Module: the partitioned graph, one kernel per offloaded region, the weights.

    module = retarget.compile(graph, target="toy")
    outputs = module.run({"x": x})          # host arrays in, host arrays out
    module.profile                           # per-region time and bytes of the last run
    module.save("out/resnet18.rtm")          # an artifact directory: JSON + .npz + kernel files
    same = Module.load("out/resnet18.rtm")   # runs without the original model

The graph is kept whole (CPU regions run its nodes; `--check` runs it on the reference); each
offloaded region's nodes are also compiled into its kernel.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from ..ir.graph import Graph
from ..passes.partition import PlacementReport
from ..targets.base import Kernel, Region, Target


@dataclass(slots=True, eq=False)
class Module:
    graph: Graph
    target: Target
    regions: list[Region]            # execution order; CPU and offloaded regions
    kernels: dict[str, Kernel]       # offloaded region name -> its kernel
    report: PlacementReport
    # every device of the compile by target name (the first is `target`); empty: `target` only
    targets: dict[str, Target] = field(default_factory=dict)
    # What loading it decided that a user should know (e.g. artifact fields it ignored)
    notes: list[str] = field(default_factory=list)
    _executor: object | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not self.targets:
            self.targets = {self.target.name: self.target}

    @property
    def offloaded(self) -> list[Region]:
        return [r for r in self.regions if r.target != "cpu"]

    def target_of(self, region: Region) -> Target:
        """The Target whose device runs `region` (an offloaded one)."""
        return self.targets.get(region.target, self.target)

    @property
    def bit_exact(self) -> bool:
        """Whether every device's results must equal the reference bit for bit."""
        return all(t.bit_exact for t in self.targets.values())

    @property
    def check_rtol(self) -> float:
        """The tolerance `retarget run --check` holds a float module to (the loosest device's)."""
        return max(t.check_rtol for t in self.targets.values())

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one inference; returns output name -> array (like retarget.run). Safe to call
        from many threads at once (runtime/executor.py says how)."""
        with self._lock:   # one executor (one device, kernels uploaded once) per module
            if self._executor is None:
                from .executor import Executor
                self._executor = Executor(self)
            executor = self._executor
        return executor.run(inputs)

    def bind(self, device) -> None:
        """Run on `device` from now on, e.g. one device shared by several modules. The module
        does not own it: close() releases the kernels' memory on it but leaves it running."""
        from .executor import Executor
        with self._lock:
            if self._executor is not None:
                self._executor.close()
            self._executor = Executor(self, device)

    @property
    def profile(self) -> list:
        """RegionProfiles of the last run (empty before the first)."""
        return [] if self._executor is None else list(self._executor.profile)

    def save(self, directory: str | Path) -> Path:
        """Write the artifact directory (see runtime/artifact.py); returns its path."""
        from .artifact import save_module
        return save_module(self, directory)

    @staticmethod
    def load(directory: str | Path, verify: bool = True,
             config: Mapping[str, object] | None = None) -> "Module":
        """Read an artifact directory written by `save`. Loads JSON and .npz only, after
        checking every file against the sizes and SHA-256 sums in its manifest (`verify=False`
        skips the sums, not the other checks). `config` sets the target's host fields (e.g.
        {"cc": "clang"} for the c target): an artifact never does (docs/guarantees.md)."""
        from .artifact import load_module
        return load_module(directory, verify=verify, config=config)

    def export_regions(self, path: str | Path) -> Path:
        """Write the offloaded regions as JSON for an outside compiler (docs/partitioning.md)."""
        from ..targets.external.export import export_regions
        return export_regions(self, path)

    def close(self) -> None:
        """Release the device and the kernels' device memory."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None


__all__ = ["Module"]

"""The `sunway` target: a network as swTVM organises it for an SW26010 core group
(MPE main program, one CPE slave function per layer, LDM buffers and DMA chosen by swTVM's
algorithms), run on the host under an emulation of athread, with a cost model of the real
chip.

    m = retarget.compile(graph, "sunway")               # sw26010: 1 core group, 64 CPEs
    m = retarget.compile(graph, "sunway:openacc")       # the faithful OpenACC baseline
    m = retarget.compile(graph, "sunway:elementwise")   # the naive one: all global loads
    m.run({"input": x})                                 # emulated: 64 host threads

float32, no quantisation; `run --check` holds it to 1e-4 relative of the reference (float sums
in another order, BatchNorm folded). What it shares with the host `c` target (lowering to
loop nests, the memory plan, building, the device) is in targets/aot/.
"""
from __future__ import annotations

import ctypes
import json
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from ...errors import DeviceError, ModelLoadError, RetargetError, TargetError
from ...loopnest.ir import Kernel as LoopKernel
from ...loopnest.register_tile import Scheduled
from ...table import format_table
from ..aot.build import BuildOptions
from ..aot.kernel import LibraryKernel
from ..aot.lower import lower_region
from ..aot.program import Program
from ..aot.target import LibraryTarget
from ..base import Region, WeightStore
from .config import BASELINES, PRESETS, SunwayConfig
from .cost import LayerCost, program_costs
from .emit import COUNTER_FIELDS, check_ldm, sources, units
from .schedule import schedule


def _baseline_file(mode: str) -> str:
    return f"baseline_{mode}.json"


class SunwayKernel(LibraryKernel, target="sunway"):
    @staticmethod
    def emit(program, config) -> dict[str, str]:
        check_ldm(program, config)
        return sources(program, config)

    @staticmethod
    def build_options(program, config) -> BuildOptions:
        # an undeclared function is an error: swTVM-mode slaves are built without the global
        # load / store functions (RT_NO_GLOBAL_ACCESS), so a call to one cannot slip through
        return BuildOptions(config.cc, config.cflags + " -DRT_EMULATE "
                            "-Werror=implicit-function-declaration", False,
                            units(program), ("-lm", "-pthread"))

    def __init__(self, program, weights, config, directory=None, temporary=False, build=None):
        super().__init__(program, weights, config, directory, temporary, build)
        # the same region scheduled as each baseline (BASELINES: "openacc", the faithful
        # one, and "elementwise"), for the cost model; not built
        self.baselines: dict[str, Program] = {}

    # ---- what reports and tests read -----------------------------------------------------
    def costs(self, config: SunwayConfig | None = None) -> list[LayerCost]:
        """The cost model's prediction for each layer (with `config`'s machine numbers)."""
        return program_costs(self.program, config or self.config)

    def counters(self, device) -> list[dict[str, dict[str, int]]]:
        """The emulator's counters of each layer after the last run on `device`:
        {"max": {field: max over CPEs}, "sum": {field: sum}}."""
        placed = self._on_device.get(id(device))
        if placed is None:
            raise DeviceError(f"sunway program {self.program.name!r} is not uploaded to this "
                              f"device")
        fn = device.library(placed[0]).model_layer_counters
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)]
        n = len(COUNTER_FIELDS)
        out = []
        for layer in range(len(self.program.calls)):
            values = (ctypes.c_longlong * (2 * n))()
            fn(layer, values)
            out.append({"max": dict(zip(COUNTER_FIELDS, values[:n])),
                        "sum": dict(zip(COUNTER_FIELDS, values[n:]))})
        return out

    def report_table(self) -> str:
        """Per layer: where it runs, flops, DMA bytes and transfers, LDM bytes, and the cost
        model's SW26010 time for this code and for each baseline, with the speedups."""
        ours = self.costs()
        bases = {m: self.costs_of_baseline(m) for m in BASELINES if m in self.baselines}
        rows = []

        def ratio(b: float, o: float) -> str:
            return f"{b / o:.2f}" if o else "-"

        for i, o in enumerate(ours):
            row = [o.name[:40], o.kind, o.where, f"{o.flops / 1e6:.2f}",
                   f"{o.dma_bytes / 2**20:.2f}", str(o.dma_transfers), str(o.ldm_bytes),
                   f"{o.seconds * 1e3:.3f}"]
            for costs in bases.values():
                row += [f"{costs[i].seconds * 1e3:.3f}", ratio(costs[i].seconds, o.seconds)]
            rows.append(row)
        t_ours = sum(c.seconds for c in ours)
        total = ["total", "", "", f"{sum(c.flops for c in ours) / 1e6:.2f}",
                 f"{sum(c.dma_bytes for c in ours) / 2**20:.2f}",
                 str(sum(c.dma_transfers for c in ours)), "", f"{t_ours * 1e3:.3f}"]
        for costs in bases.values():
            t = sum(c.seconds for c in costs)
            total += [f"{t * 1e3:.3f}", ratio(t, t_ours)]
        rows.append(total)
        head = (f"{self.program.name}: predicted on {self.config.core_groups} SW26010 core "
                f"group(s) ({self.config.cpes} CPEs, {self.config.ldm_bytes // 1024} KB LDM), "
                f"mode {self.program.mode}"
                f"{', double-buffered' if self.config.double_buffer else ''}; "
                f"baselines: openacc = the careful OpenACC code "
                f"(slices copied into LDM where they fit), elementwise = every element a "
                f"global load / store")
        columns = ["layer", "kind", "on", "MFLOP", "DMA MiB", "DMA transfers", "LDM B", "ours ms"]
        for m in bases:
            columns += [f"{m} ms", f"x {m}"]
        return head + "\n" + format_table(columns, rows)

    def costs_of_baseline(self, mode: str = "openacc") -> list[LayerCost]:
        """A baseline's predicted costs: the same layers scheduled as `mode` schedules them."""
        if mode not in self.baselines:
            raise TargetError(f"sunway program {self.program.name!r} has no {mode!r} baseline "
                              f"program (it has {sorted(self.baselines) or 'none'})")
        return program_costs(self.baselines[mode], self.config)

    # ---- artifact: the baseline programs ride along (as data, verified on load) ------------
    def save(self, directory: Path, weights: WeightStore) -> dict:
        spec = super().save(directory, weights)
        files = {}
        for mode, program in self.baselines.items():
            files[mode] = _baseline_file(mode)
            (directory / files[mode]).write_text(json.dumps(program.to_json(), indent=1),
                                                 encoding="utf-8")
        if files:
            spec["baselines"] = files
        return spec

    @classmethod
    def load(cls, directory: Path, spec, weights, target) -> "SunwayKernel":
        kernel = super().load(directory, spec, weights, target)
        files = spec.get("baselines") or {}
        if not isinstance(files, dict):
            raise ModelLoadError(f"{directory}: 'baselines' must map a mode to a file")
        for mode, name in files.items():
            if mode not in BASELINES or name != _baseline_file(mode):
                raise ModelLoadError(f"{directory}: baseline {mode!r} -> {name!r} is not one "
                                     f"of {', '.join(map(_baseline_file, BASELINES))}")
            try:
                kernel.baselines[mode] = Program.from_json(
                    json.loads((directory / name).read_text(encoding="utf-8")))
            except (OSError, RetargetError, KeyError, TypeError, ValueError, RecursionError) as e:
                raise ModelLoadError(f"{directory / name}: not a valid sunway program "
                                     f"({type(e).__name__}: {e})") from None
        return kernel


class SunwayTarget(LibraryTarget, kernel=SunwayKernel, config=SunwayConfig, presets=PRESETS):
    name: ClassVar[str] = "sunway"
    description: ClassVar[str] = ("an SW26010 core group (1 MPE + 64 CPEs with 64 KB LDM "
                                  "each) through swTVM-style generated C, emulated on the host")
    in_demo, demo_preset = True, "sw26010"

    def schedule(self, kernel: LoopKernel, constants: frozenset[str]) -> Scheduled:
        return schedule(kernel, self.config)

    def lower(self, region: Region) -> SunwayKernel:
        """The region's program, and the same region scheduled as each baseline (the cost
        model's comparison; not built)."""
        kernel = super().lower(region)
        for mode in BASELINES:
            if mode == self.config.mode:
                kernel.baselines[mode] = kernel.program
                continue
            base = replace(self.config, mode=mode, double_buffer=False)
            kernel.baselines[mode] = lower_region(
                region, self.op_lowering(), lambda k, c, base=base: schedule(k, base), mode)[0]
        return kernel

    def graph_passes(self) -> tuple[str, ...]:
        """BatchNorm folded into the convs before it; padded convolutions read an explicitly
        padded input (a box a DMA can fetch: padded reads cannot be buffered)."""
        return ("fold_batchnorm", "explicit_padding")


__all__ = ["SunwayKernel", "SunwayTarget"]

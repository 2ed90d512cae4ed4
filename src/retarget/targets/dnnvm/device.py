"""The dnnvm behavioural simulator (sim.py) behind the runtime's Device API.

One task kind, "dnnvm.run" (targets/accel/device.py): the stream and the program's DRAM image
it may touch. Programs address DDR from 0; `relocate` adds where the image was placed to every
LOAD / SAVE address, as a loader would. Counters: DDR bytes per buffer, MACs, pool / element-wise
elements and instructions per engine.
"""
from __future__ import annotations

from dataclasses import replace

from ...errors import DeviceError
from ...runtime.device import SimulatedDevice
from ..accel.device import LoadedProgram, StreamDevice
from .config import PRESETS, DNNVMConfig
from .isa import INSN_BYTES, Load, Save, encode_stream
from .sim import Simulator


class DNNVMDevice(StreamDevice):
    name = "dnnvm"
    kernels = {"dnnvm.run": ("insns",)}
    insn_bytes = INSN_BYTES
    default_options = {**SimulatedDevice.default_options, "memory_bytes": 1 << 26}

    def __init__(self, cfg: DNNVMConfig | str | None = None, **options):
        if cfg is None or isinstance(cfg, str):
            cfg = PRESETS[cfg or "zu2"]
        self.cfg = cfg
        self.sim: Simulator | None = None
        super().__init__(**options)

    def configure(self, **options) -> None:
        super().configure(**options)
        self.sim = Simulator(self.cfg, self._memory)    # buffers cleared, like a board reset

    def simulate(self, raw: bytes) -> dict[str, int]:
        self.sim.confine = self.task_memory
        try:
            counters = self.sim.run(raw)
        finally:
            self.sim.confine = None
        d = counters.as_dict()
        d["instructions"] = sum(counters.instructions.values()) + 1
        return d

    def relocate(self, program, base: int) -> bytes:
        if base + program.dram_bytes > 1 << 32:
            raise DeviceError(f"dnnvm: a program placed at {base:#x} would exceed the 32-bit "
                              f"DDR address space")
        return encode_stream([replace(i, ddr_addr=i.ddr_addr + base)
                              if isinstance(i, (Load, Save)) else i for i in program.insns])


__all__ = ["DNNVMDevice", "LoadedProgram"]

"""The dnnvm behavioural simulator (sim.py) behind the runtime's Device API.

One task kind, "dnnvm.run" (targets/accel/device.py): the stream and the program's DRAM image
it may touch. Programs address DDR from 0; `relocate` adds where the image was placed to every
LOAD / SAVE address, as a loader would. Counters: DDR bytes per buffer, MACs, pool / element-wise
elements and instructions per engine.
"""
from __future__ import annotations

from dataclasses import replace

from ...errors import DeviceError
from ..accel.device import LoadedProgram, StreamDevice
from .config import load_config
from .isa import INSN_BYTES, Load, Save, encode_stream
from .sim import Simulator


class DNNVMDevice(StreamDevice):
    """The overlay as a Device: its DDR is the device memory; sim.py runs the streams."""
    name, insn_bytes, load_config = "dnnvm", INSN_BYTES, staticmethod(load_config)
    simulator_class = Simulator

    def instruction_count(self, raw: bytes, counters) -> int:
        return sum(counters.instructions.values()) + 1

    def relocate(self, program, base: int) -> bytes:
        if base + program.dram_bytes > 1 << 32:
            raise DeviceError(f"dnnvm: a program placed at {base:#x} would exceed the 32-bit "
                              f"DDR address space")
        return encode_stream([replace(i, ddr_addr=i.ddr_addr + base)
                              if isinstance(i, (Load, Save)) else i for i in program.insns])


__all__ = ["DNNVMDevice", "LoadedProgram"]

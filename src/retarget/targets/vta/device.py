"""The VTA behavioural simulator behind the runtime's Device API.

`VTADevice` is a SimulatedDevice whose memory *is* the accelerator's DRAM: host copies land
where LOAD instructions read, STORE results are read back with copy_from_device. One kernel:

    "vta.run"  args: insns = device pointer to a binary instruction stream (16 B each),
                     count = number of instructions,
                     memory = (pointers to the allocations its LOAD/STOREs may touch,)
               counters: the simulator's (inp/wgt/acc/uop load bytes, out store bytes,
                         gemm/alu counters, instructions per module) plus "instructions".

Which simulator runs the streams is the option `simulator`: "c" (retarget's C simulator,
targets/vta/csim; an error if it cannot be built), "python" (the reference, targets/vta/sim) or
"auto" (C when a C compiler is available, else Python); the default is $RETARGET_VTA_SIM, else
"auto". Both are bit-identical (docs/vta-csim.md).

The SRAMs persist between tasks, as on the board. Programs from the StreamBuilder use DRAM
addresses from 0; `load_program` places one anywhere in device memory by relocating the
dram_base of its LOAD/STORE instructions (like a loader relocating a binary).
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from ...errors import DeviceError
from ..accel.device import LoadedProgram, StreamDevice
from .config import VTAConfig, load_config
from .isa import INSN_BYTES, Insn, MemInsn, encode_stream, layout_for
from .sim import Simulator
from .csim.build import CSimUnavailable
from .sim.memory import dram_elem_bytes


def relocate(insns: list[Insn], cfg: VTAConfig, byte_offset: int) -> list[Insn]:
    """Shift every LOAD/STORE's dram_base by `byte_offset` bytes (a multiple of every DRAM
    element size, so the shift is a whole number of elements for each memory type)."""
    out = []
    for i, insn in enumerate(insns):
        if isinstance(insn, MemInsn) and insn.x_size:
            eb = dram_elem_bytes(cfg, insn.memory_type)
            if byte_offset % eb:
                raise DeviceError(f"cannot relocate instruction #{i} by {byte_offset} bytes: not "
                                  f"a multiple of its {eb}-byte {insn.memory_type.name} elements")
            insn = replace(insn, dram_base=insn.dram_base + byte_offset // eb)
        out.append(insn)
    return out


SIMULATOR_ENV = "RETARGET_VTA_SIM"
SIMULATORS = ("auto", "c", "python")


def simulator_choice(option: str | None) -> str:
    """The device option `simulator`, or $RETARGET_VTA_SIM when it is None, else "auto"."""
    value = option if option is not None else (os.environ.get(SIMULATOR_ENV) or "auto")
    if value not in SIMULATORS:
        source = "option simulator" if option is not None else f"${SIMULATOR_ENV}"
        raise DeviceError(f"vta: {source}={value!r}; choose one of {', '.join(SIMULATORS)}")
    return value


class VTADevice(StreamDevice):
    """A VTA accelerator simulated bit-exactly (targets/vta/csim or targets/vta/sim) as a
    Device."""

    name = "vta"
    insn_bytes = INSN_BYTES
    load_config = staticmethod(load_config)
    default_options = {**StreamDevice.default_options, "simulator": None}
    cfg: VTAConfig
    sim: Simulator

    def make_simulator(self) -> Simulator:
        choice = simulator_choice(self.options["simulator"])
        if choice != "python":
            from .csim.binding import CSimulator
            try:
                return CSimulator(self.cfg, dram=self._memory)
            except (CSimUnavailable, OSError) as e:
                if choice == "c":
                    raise DeviceError(f"{self.name}: simulator='c' but {e}") from None
        return Simulator(self.cfg, dram=self._memory)

    def sim_memory_moved(self) -> None:
        self.sim.rebind_dram(self._memory)

    def simulate(self, raw: bytes) -> dict[str, int]:
        self.sim.mem.confine = self.task_memory
        try:
            result = self.sim.run(raw)
        finally:
            self.sim.mem.confine = None
        counters = result.counters.as_dict()
        counters["instructions"] = result.instructions
        return counters

    def image_alignment(self) -> int:
        c = self.cfg
        return int(np.lcm.reduce([64, c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes,
                                  c.out_elem_bytes, c.batch * c.block_out]))

    def relocate(self, program, base: int) -> bytes:
        return encode_stream(relocate(program.insns, self.cfg, base), layout_for(self.cfg))


__all__ = ["LoadedProgram", "VTADevice", "relocate"]

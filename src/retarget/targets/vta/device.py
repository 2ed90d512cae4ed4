"""The VTA behavioural simulator behind the runtime's Device API.

`VTADevice` is a SimulatedDevice whose memory *is* the accelerator's DRAM: host copies land
where LOAD instructions read, STORE results are read back with copy_from_device. One kernel:

    "vta.run"  args: insns = device pointer to a binary instruction stream (16 B each),
                     count = number of instructions,
                     memory = (pointers to the allocations its LOAD/STOREs may touch,)
               counters: the simulator's (inp/wgt/acc/uop load bytes, out store bytes,
                         gemm/alu counters, instructions per module) plus "instructions".

The SRAMs persist between tasks, as on the board. Programs from the StreamBuilder use DRAM
addresses from 0; `load_program` places one anywhere in device memory by relocating the
dram_base of its LOAD/STORE instructions (like a loader relocating a binary).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...errors import DeviceError
from ...runtime.device import MEMORY_ARG, DevicePtr, SimulatedDevice, Task, TaskRecord
from .config import VTAConfig, preset
from .isa import INSN_BYTES, Insn, MemInsn, encode_stream, layout_for
from .sim import Simulator
from .sim.memory import dram_elem_bytes


@dataclass(frozen=True, slots=True)
class LoadedProgram:
    """A builder Program placed in device memory."""
    program: object          # builder.Program (not imported: the builder is optional here)
    base: DevicePtr          # where the program's DRAM address 0 lives
    insns: DevicePtr         # the relocated binary stream
    count: int

    def task(self, name: str = "") -> Task:
        # The stream may touch its own DRAM image and nothing else (memory confinement).
        return Task("vta.run", {"insns": self.insns, "count": self.count,
                                MEMORY_ARG: (self.base,)}, name)


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


class VTADevice(SimulatedDevice):
    """A VTA accelerator simulated bit-exactly (targets/vta/sim) as a Device."""

    name = "vta"
    kernels = {"vta.run": ("insns",)}
    default_options = {**SimulatedDevice.default_options, "memory_bytes": 1 << 26}

    def __init__(self, cfg: VTAConfig | str | None = None, **options):
        if cfg is None:
            cfg = preset("pynq")
        elif isinstance(cfg, str):
            cfg = preset(cfg)
        self.cfg: VTAConfig = cfg
        self.sim: Simulator | None = None
        super().__init__(**options)

    def configure(self, **options) -> None:
        """As SimulatedDevice.configure; the simulator is rebuilt on the new memory (SRAMs are
        cleared, like a reset of the board)."""
        super().configure(**options)
        self.sim = Simulator(self.cfg, dram=self._memory)

    def execute(self, task: Task) -> dict[str, int]:
        count = task.args.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise DeviceError(f"{self.name}: 'vta.run' needs count = a positive number of "
                              f"instructions, got {count!r}")
        raw = self.view(task.args["insns"], (count * INSN_BYTES,), np.uint8,
                        what="vta.run instruction stream")
        self.sim.mem.confine = self.task_memory
        try:
            result = self.sim.run(raw.tobytes())
        finally:
            self.sim.mem.confine = None
        counters = result.counters.as_dict()
        counters["instructions"] = result.instructions
        return counters

    # ---- conveniences for builder Programs -------------------------------------------------

    def load_program(self, program, data: dict[str, np.ndarray] | None = None) -> LoadedProgram:
        """Copy a builder Program's DRAM image (uops + `data` buffers) and its relocated
        instruction stream into fresh allocations."""
        if program.config != self.cfg:
            raise DeviceError(f"{self.name}: program built for config {program.config.name!r} "
                              f"({program.config.target_name}), device is {self.cfg.name!r} "
                              f"({self.cfg.target_name})")
        c = self.cfg
        align = int(np.lcm.reduce([64, c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes,
                                   c.out_elem_bytes, c.batch * c.block_out]))
        image = program.dram_image(data)
        base = self.malloc(max(1, image.size), align)
        self.copy_to_device(base, image)
        stream = encode_stream(relocate(program.insns, c, base), layout_for(c))
        insns = self.malloc(len(stream), 64)
        self.copy_to_device(insns, np.frombuffer(stream, dtype=np.uint8))
        return LoadedProgram(program, base, insns, len(stream) // INSN_BYTES)

    def read_buffer(self, loaded: LoadedProgram, name: str) -> np.ndarray:
        """A program buffer read back from device memory (after synchronize)."""
        image = self.copy_from_device(loaded.base, (loaded.program.dram_bytes,), np.uint8)
        return loaded.program.read(image, name)

    def run(self, loaded: LoadedProgram, name: str = "") -> TaskRecord:
        """Submit one program and synchronise; returns its task record."""
        self.submit(loaded.task(name))
        return self.synchronize()[-1]


__all__ = ["LoadedProgram", "VTADevice", "relocate"]

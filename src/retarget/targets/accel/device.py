"""A simulated accelerator whose memory is its DRAM, running programs' instruction streams.

`StreamDevice` is a SimulatedDevice with one task kind, `<target>.run`:

    args: insns  = device pointer to the binary instruction stream (insn_bytes each),
          count  = number of instructions,
          memory = (the program's DRAM image,)   the only memory the stream may touch
    counters: the simulator's, plus "instructions".

`load_program` copies a Program's DRAM image and its stream, relocated to where the image
landed (the target says how: `relocate`), into fresh allocations, as a driver's loader would.
A target fills in `insn_bytes`, `simulate(raw)` and `relocate(program, base)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...errors import DeviceError
from ...device.base import MEMORY_ARG, DevicePtr, SimulatedDevice, Task, TaskRecord

PROGRAM_ARG = "program"   # the task argument holding a loaded program's handle


@dataclass(frozen=True, slots=True)
class LoadedProgram:
    """A Program placed in device memory."""
    program: object          # the target's Program
    base: DevicePtr          # where the program's DRAM address 0 lives
    insns: DevicePtr         # the relocated binary stream
    count: int
    kind: str = "vta.run"    # the device's task kind
    handle: int = 0          # the device's handle of the image and stream (0: none)

    def task(self, name: str = "") -> Task:
        # The stream may touch its own DRAM image and nothing else (memory confinement); the
        # handle makes the device refuse it once either allocation was freed.
        args = {"insns": self.insns, "count": self.count, MEMORY_ARG: (self.base,)}
        if self.handle:
            args[PROGRAM_ARG] = self.handle
        return Task(self.kind, args, name)


class StreamDevice(SimulatedDevice):
    """Base of the simulated instruction-stream accelerators. A subclass sets `name` (its
    task kind is "<name>.run"), `insn_bytes` and `load_config` (a preset name, a .json path or
    None -> its config), and `simulator_class` (built as `simulator_class(cfg, memory)`, with
    a `rebind(memory)` that moves it onto grown memory), or overrides make_simulator /
    sim_memory_moved."""

    insn_bytes: ClassVar[int] = 16
    simulator_class: ClassVar[type | None] = None
    handle_arg = PROGRAM_ARG
    default_options = {**SimulatedDevice.default_options, "memory_bytes": 1 << 26}

    def __init_subclass__(cls, **kwargs):
        # the one task kind, "<name>.run", whose pointer argument is the stream
        if "kernels" not in cls.__dict__ and cls.__dict__.get("name"):
            cls.kernels = {f"{cls.name}.run": ("insns",)}
        super().__init_subclass__(**kwargs)

    def __init__(self, cfg=None, **options):
        # a config, a preset name or None (the target's default preset)
        self.cfg = cfg if cfg is not None and not isinstance(cfg, str) else self.load_config(cfg)
        self.sim = None
        super().__init__(**options)

    @staticmethod
    def load_config(spec: str | None):
        raise NotImplementedError("StreamDevice.load_config")

    def configure(self, **options) -> None:
        """As SimulatedDevice.configure; the simulator is rebuilt on the new memory (its
        on-chip buffers are cleared, like a reset of the board)."""
        super().configure(**options)
        self.sim = self.make_simulator()

    def make_simulator(self):
        """The target's simulator over this device's memory (`self._memory`)."""
        if self.simulator_class is None:
            raise NotImplementedError(f"{type(self).__name__}.make_simulator")
        return self.simulator_class(self.cfg, self._memory)

    def memory_moved(self) -> None:
        if self.sim is not None:
            self.sim_memory_moved()

    def sim_memory_moved(self) -> None:
        """Point the simulator at the grown `self._memory`, keeping its on-chip state."""
        self.sim.rebind(self._memory)

    @property
    def run_kind(self) -> str:
        return f"{self.name}.run"

    def simulate(self, raw: bytes) -> dict[str, int]:
        """Run one binary stream on the simulator (`self.sim.run(raw)`, confined to
        `self.task_memory` through the simulator's `confine`); returns its counters (the
        result's `as_dict()`) with "instructions" (`instruction_count`)."""
        self.sim.confine = self.task_memory
        try:
            counters = self.sim.run(raw)
        finally:
            self.sim.confine = None
        d = counters.as_dict()
        d["instructions"] = self.instruction_count(raw, counters)
        return d

    def instruction_count(self, raw: bytes, counters) -> int:
        return len(raw) // self.insn_bytes

    def relocate(self, program, base: int) -> bytes:
        """The program's binary stream with its DRAM addresses shifted by `base` bytes."""
        raise NotImplementedError(f"{type(self).__name__}.relocate")

    def image_alignment(self) -> int:
        """Byte alignment of a program's DRAM image (every element size divides it)."""
        return 64

    def execute(self, task: Task) -> dict[str, int]:
        count = task.args.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise DeviceError(f"{self.name}: {task.kernel!r} needs count = a positive number of "
                              f"instructions, got {count!r}")
        raw = self.view(task.args["insns"], (count * self.insn_bytes,), np.uint8,
                        what=f"{task.kernel} instruction stream")
        return self.simulate(raw.tobytes())

    def load_program(self, program, data: dict[str, np.ndarray] | None = None) -> LoadedProgram:
        """Copy a Program's DRAM image (with `data` in its buffers) and its relocated
        instruction stream into fresh allocations."""
        if program.config != self.cfg:
            raise DeviceError(f"{self.name}: program built for config {program.config.name!r} "
                              f"({program.config.target_name}), device is {self.cfg.name!r} "
                              f"({self.cfg.target_name})")
        image = program.dram_image(data)
        base = self.malloc(max(1, image.size), self.image_alignment())
        self.copy_to_device(base, image)
        stream = self.relocate(program, base)
        # An empty stream (a region that only renames bytes) still gets an address; its
        # kernel submits nothing.
        insns = self.malloc(max(1, len(stream)), 64)
        if stream:
            self.copy_to_device(insns, np.frombuffer(stream, dtype=np.uint8))
        handle = self.hold(f"{self.name} program loaded at 0x{base:x}",
                           {"DRAM image": base, "instruction stream": insns})
        return LoadedProgram(program, base, insns, len(stream) // self.insn_bytes, self.run_kind,
                             handle)

    def check_loaded(self, loaded: LoadedProgram, label: str = "") -> None:
        """Refuse a program whose image or stream was freed (before the host writes into it)."""
        self.check_held(loaded.handle, label)

    def unload_program(self, loaded: LoadedProgram) -> None:
        """Forget the program's handle and free its image and stream."""
        with self.lock:
            self.drop(loaded.handle)
            self.free(loaded.insns)
            self.free(loaded.base)

    def read_buffer(self, loaded: LoadedProgram, name: str) -> np.ndarray:
        """A program buffer read back from device memory (after synchronize)."""
        self.check_loaded(loaded)
        image = self.copy_from_device(loaded.base, (loaded.program.dram_bytes,), np.uint8)
        return loaded.program.read(image, name)

    def run(self, loaded: LoadedProgram, name: str = "") -> TaskRecord:
        """Submit one program and synchronise; returns its task record."""
        self.submit(loaded.task(name))
        return self.synchronize()[-1]


__all__ = ["LoadedProgram", "PROGRAM_ARG", "StreamDevice"]

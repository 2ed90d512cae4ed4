"""The nvdla engine-level simulator (sim.py) behind the runtime's Device API.

One task kind, "nvdla.run" (targets/accel/device.py): the relocated layer descriptors and the
loadable's image they may touch. Counters: layers per engine, MACs, bytes read and written.
Per-layer debug: `capture()` collects what every layer of the next runs writes.
"""
from __future__ import annotations

from contextlib import contextmanager

from ..accel.device import LoadedProgram, StreamDevice
from .config import load_config
from .loadable import LAYER_BYTES
from .sim import Simulator


class NvdlaDevice(StreamDevice):
    name, insn_bytes, load_config = "nvdla", LAYER_BYTES, staticmethod(load_config)
    simulator_class = Simulator

    def relocate(self, program, base: int) -> bytes:
        return program.relocated(base)

    @contextmanager
    def capture(self):
        """Within the block, every layer's output is appended to the yielded list."""
        dumps: list = []
        self.sim.dump = dumps
        try:
            yield dumps
        finally:
            self.sim.dump = None


__all__ = ["LoadedProgram", "NvdlaDevice"]

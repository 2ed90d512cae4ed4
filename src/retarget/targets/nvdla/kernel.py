"""NvdlaKernel: a region compiled into a loadable, run through the shared stream plumbing
(targets/accel/kernel.py). nvdla's part: maps are NCHW in memory exactly as the graph holds
them (so packing is a reshape), the artifact keeps the loadable itself (program.loadable:
weights included, nothing in weights.npz), the cycle model is the throughput model, and
`layer_outputs` runs the region once more capturing every hardware layer's output."""
from __future__ import annotations

from typing import ClassVar, Sequence

import numpy as np

from ..accel.kernel import StreamKernel
from ..base import Disassembler
from .program import NvdlaProgram
from .disasm import disassemble_file, format_layer, recognizes
from .throughput import timing


class NvdlaKernel(StreamKernel):
    kind: ClassVar[str] = "nvdla.loadable"
    disassembler = Disassembler(recognizes, disassemble_file)
    program_class: ClassVar[type] = NvdlaProgram

    def pack_input(self, x: np.ndarray, binding=None) -> np.ndarray:
        return np.ascontiguousarray(x).reshape(self.program.buffers[binding.buffer].shape)

    def unpack_output(self, p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return p.reshape(shape)

    def simulate_timing(self):
        ld = self.program.loadable
        return timing(self.program.config, ld, lambda rec: format_layer(ld, rec))

    def summary(self) -> str:
        t = self.timing()
        ld = self.program.loadable
        return (f"nvdla {self.name}: {len(ld.layers)} hardware layers, loadable "
                f"{ld.nbytes / 1024:.0f} KiB, modelled {t.total_cycles:,} cycles "
                f"= {t.seconds * 1e3:.3f} ms at {self.program.config.clock_mhz:g} MHz")

    def layer_outputs(self, device, inputs: Sequence[np.ndarray]) -> list[tuple[str, str, int,
                                                                               np.ndarray]]:
        """Run the region on `inputs` (logical arrays, Region.inputs order) and return, per
        hardware layer in order, (layer name, graph value it computes, first channel, what
        it wrote): the value's channels [first, first + C) for a slice of a concatenation."""
        with device.capture() as dumps:
            self.run_arrays(device, inputs)
        ld = self.program.loadable
        return [(ld.string(int(ld.layers[d.index]["name"])),
                 ld.string(int(ld.layers[d.index]["value"])), d.ch0, d.data) for d in dumps]

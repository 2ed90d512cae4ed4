"""Run a lowered segment on the behavioural simulator: pack NumPy inputs into their DRAM
buffers (with the packed constants), run the binary stream, unpack the outputs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ....errors import InputError
from ..sim import Simulator
from ..sim.sim import SimResult
from .context import LoweredSegment


@dataclass(slots=True)
class SegmentRun:
    outputs: dict[str, np.ndarray]     # logical tensors by output buffer name
    result: SimResult                  # counters, instructions executed, tokens left


def dram_image(seg: LoweredSegment, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The DRAM contents before the run: micro-ops, packed constants and packed inputs."""
    missing = set(seg.inputs) - set(inputs)
    unknown = set(inputs) - set(seg.inputs)
    if missing or unknown:
        raise InputError(f"segment inputs are {sorted(seg.inputs)}; missing {sorted(missing)}, "
                         f"unknown {sorted(unknown)}")
    data = dict(seg.constants)
    for name, t in seg.inputs.items():
        data[name] = t.pack(inputs[name]).reshape(seg.program.buffers[name].shape)
    return seg.program.dram_image(data)


def run_segment(seg: LoweredSegment, inputs: Mapping[str, np.ndarray],
                sim: Simulator | None = None) -> SegmentRun:
    """Execute `seg` with `inputs` (buffer name -> logical NCHW / matrix array)."""
    dram = dram_image(seg, inputs)
    if sim is None:
        sim = Simulator(seg.config, dram=dram)
    else:
        sim.dram[:dram.size] = dram
    result = sim.run(seg.program.stream())
    outs = {name: t.unpack(seg.program.read(sim.dram, name)) for name, t in seg.outputs.items()}
    return SegmentRun(outs, result)

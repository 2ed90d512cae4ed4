"""A VTA region of a deployed program: its DRAM image (micro-op kernels, weights, biases, zero
buffers), its instruction stream with DRAM addresses from 0 and the relocation table that
moves them to wherever the driver places the image, and the gather tables that pack the
region's inputs into their DRAM buffers and unpack its outputs (computed from the kernel's
own pack_input / unpack_output, so the C does exactly what the Python runtime does).

At run time rt_deploy.c allocates the image and the stream with VTAMemAlloc, adds
phys / element bytes to the dram_base of every LOAD / STORE that moves data (as the device's
loader, targets/vta/device.relocate, does), and runs the stream with VTADeviceRun: the
addresses, alignment and instruction / uop layout are those the Python device uses.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TargetError, UnsupportedOpError
from ..targets.vta.config import VTAConfig
from ..targets.vta.device import image_alignment
from ..targets.vta.isa import MemInsn, layout_for
from ..targets.vta.sim.memory import dram_elem_bytes
from .blob import Blob, index_map, numbered


@dataclass(frozen=True, slots=True)
class VTABinding:
    value: str            # the graph value (logical int8 tensor in the arena)
    buffer_offset: int    # its DRAM buffer in the image
    count: int            # elements of the gather table
    map_offset: int       # the table in the blob


@dataclass(frozen=True, slots=True)
class VTARegionCode:
    name: str
    image_offset: int
    image_bytes: int
    insn_offset: int
    insn_count: int
    reloc_offset: int
    reloc_count: int
    dram_base_lo: int
    dram_base_bits: int
    image_align: int
    inputs: tuple[VTABinding, ...]
    outputs: tuple[VTABinding, ...]


def driver_defines(cfg: VTAConfig) -> list[str]:
    """The compile-time configuration of retarget's simulator driver (vta_driver_sim.c)."""
    if (cfg.log_inp_width, cfg.log_wgt_width, cfg.log_acc_width) != (3, 3, 5):
        raise UnsupportedOpError(f"deploy: VTA config {cfg.name!r} has {cfg.inp_width}-bit "
                                  f"inputs; the C simulator driver is built for int8 / int32")
    return [f"-DVTA_LOG_BATCH={cfg.log_batch}", f"-DVTA_LOG_BLOCK_IN={cfg.log_block_in}",
            f"-DVTA_LOG_BLOCK_OUT={cfg.log_block_out}",
            f"-DVTA_LOG_UOP_BUFF_SIZE={cfg.log_uop_buff_size}",
            f"-DVTA_LOG_INP_BUFF_SIZE={cfg.log_inp_buff_size}",
            f"-DVTA_LOG_WGT_BUFF_SIZE={cfg.log_wgt_buff_size}",
            f"-DVTA_LOG_ACC_BUFF_SIZE={cfg.log_acc_buff_size}",
            f"-DVTA_ALU_STAGE={int(bool(cfg.alu_stage))}"]


def vta_region(name: str, kernel, blob: Blob) -> VTARegionCode:
    """Add the region's image, stream, relocations and gather tables to `blob`."""
    program = kernel.program
    cfg = program.config
    image = program.dram_image(kernel.constants)
    insns = program.insns
    relocs = [(i, dram_elem_bytes(cfg, insn.memory_type)) for i, insn in enumerate(insns)
              if isinstance(insn, MemInsn) and insn.x_size]
    field = next(f for f in layout_for(cfg).mem if f.name == "dram_base")
    if field.lo + field.width > 64:
        raise TargetError(f"deploy: region {name!r}: dram_base crosses the instruction's low "
                          f"word")

    def bindings(items, pack: bool) -> tuple[VTABinding, ...]:
        out = []
        for b in items:
            buf = program.buffers[b.buffer]
            if np.dtype(buf.dtype) != np.int8:
                raise UnsupportedOpError(f"deploy: region {name!r}: {b.value!r} lives in a "
                                          f"{buf.dtype} DRAM buffer; only int8 ones are packed")
            if pack:
                coded = kernel.pack_input(numbered(b.shape), b)
                if coded.shape != tuple(buf.shape):
                    raise TargetError(f"deploy: region {name!r}: {b.value!r} packs to "
                                      f"{coded.shape}, its buffer is {buf.shape}")
            else:
                coded = kernel.unpack_output(numbered(tuple(buf.shape)), b.shape)
            table = index_map(coded)
            out.append(VTABinding(b.value, buf.offset, table.size, blob.add(table)))
        return tuple(out)

    return VTARegionCode(
        name, blob.add(image), image.size, blob.add(program.stream()), len(insns),
        blob.add(np.array(relocs, np.uint32).reshape(-1, 2)), len(relocs),
        field.lo, field.width, image_alignment(cfg), bindings(kernel.inputs, True),
        bindings(kernel.outputs, False))


__all__ = ["VTABinding", "VTARegionCode", "driver_defines", "vta_region"]

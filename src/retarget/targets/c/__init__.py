"""Target `c`: networks as ahead-of-time generated C for the host (issue 14).

- target.py: CTarget (rules: every op `retarget.loopnest.ops` lowers; compile; device).
- config.py: CConfig (mode, cc, cflags, openmp, build_dir, memory_bytes) and presets.
- lower.py: a region -> Program: nodes to loop nests (`schedule_kernel` is the hook for the
  buffering schedule), places for every tensor, the arena planned by passes/memory_plan.py.
- program.py: the Program as checked data (and JSON); ir_json.py: loop nests as JSON.
- emit.py: model.h / model.c / main.c / Makefile; build.py: the compiler run.
- kernel.py: CLibraryKernel (upload / run / release / save / load; the artifact decision).
- device.py: CDevice, the host running the library through ctypes behind the Device API.
"""
from .config import CConfig, MODES, PRESETS
from .device import CDevice, LibrarySpec
from .kernel import CLibraryKernel
from .lower import OpLowering, default_op_lowering, lower_region, schedule_kernel
from .program import Program
from .target import CTarget

__all__ = ["CConfig", "CDevice", "CLibraryKernel", "CTarget", "LibrarySpec", "MODES",
           "OpLowering", "PRESETS", "Program", "default_op_lowering", "lower_region",
           "schedule_kernel"]

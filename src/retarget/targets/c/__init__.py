"""Target `c`: networks as ahead-of-time generated C for the host. What it shares
with the other ahead-of-time C target (sunway) lives in targets/aot/; here is only what is the
host's:

- target.py: CTarget (graph_passes: fold BatchNorm, explicit padding), its kernel and device kinds.
- config.py: CConfig (mode, cc, cflags, openmp, tiles, local_bytes, ...) and presets.
- schedule.py: the naive, buffered and optimised schedules of each kernel.
- emit.py: model.c (kernels + model_run) and the Makefile.
- routines.py, routines_int8.py, routines_tflite.py, kernels/*.c: the hand-written routines
  (float convs and dense layers with their epilogues; the int8 mode's integer ops; TFLite's
  integer arithmetic), called instead of printed loop nests.
- zero_points.py: the target's own rewrite (prepare): int8 layers' input zero points folded
  into their biases, so that an imported int8 TFLite model's convolutions run on the int8
  routines.
- project.py: generate_c, the C project of a whole (float or int8) graph without a Module.
"""
from .config import CConfig, MODES, PRESETS
from .project import CProject, generate_c
from .schedule import schedule_kernel
from .target import CLibraryKernel, CTarget

__all__ = ["CConfig", "CLibraryKernel", "CProject", "CTarget", "MODES", "PRESETS",
           "generate_c", "schedule_kernel"]

"""Target `c`: networks as ahead-of-time generated C for the host. What it shares
with the other ahead-of-time C target (sunway) lives in targets/aot/; here is only what is the
host's:

- target.py: CTarget (prepare: fold BatchNorm, explicit padding), its kernel and device kinds.
- config.py: CConfig (mode, cc, cflags, openmp, tiles, local_bytes, ...) and presets.
- schedule.py: the naive, buffered and optimised schedules of each kernel.
- emit.py: model.c (kernels + model_run) and the Makefile.
"""
from .config import CConfig, MODES, PRESETS
from .schedule import schedule_kernel
from .target import CLibraryKernel, CTarget

__all__ = ["CConfig", "CLibraryKernel", "CTarget", "MODES", "PRESETS",
           "schedule_kernel"]

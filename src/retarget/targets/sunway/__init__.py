"""Target `sunway`: an SW26010 core group through swTVM-style generated C.

- target.py: SunwayTarget (prepare, schedule, lower: the swTVM program and its OpenACC-style
  baseline), SunwayKernel (counters, cost report, artifact).
- config.py: SunwayConfig (machine numbers, mode) and presets (sw26010, ...).
- schedule.py: swTVM's buffering per kernel, the CPE loop of each nest, MPE or CPE.
- emit.py: MPE model.c, one cpe_<layer>.c per layer, layers.h, Makefile.
- runtime/: athread_emu.h / .c, the host emulation of athread.
- cost.py: per-CPE counts from the loop nests and the SW26010 cost model.
"""
from .config import MODES, PRESETS, SunwayConfig
from .target import SunwayKernel, SunwayTarget

__all__ = ["MODES", "PRESETS", "SunwayConfig", "SunwayKernel", "SunwayTarget"]

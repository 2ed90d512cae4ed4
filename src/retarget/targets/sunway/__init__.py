"""Target `sunway`: an SW26010 core group through swTVM-style generated C.

- target.py: SunwayTarget (prepare, schedule, lower: the swTVM program and its two
  baselines), SunwayKernel (counters, cost report, artifact).
- config.py: SunwayConfig (machine numbers, mode) and presets (sw26010, ...).
- schedule.py: swTVM's buffering per kernel (or a baseline's schedule).
- cpe_loops.py: the CPE loop of each nest, chosen with the cost model.
- cores.py: whether a kernel runs on the MPE or the CPEs.
- openacc.py: the faithful baseline, the careful OpenACC programmer's copies.
- double_buffer.py: which loops prefetch which tiles, and the LDM they take.
- emit.py: MPE model.c, one cpe_<layer>.c per layer, layers.h, Makefile.
- runtime/: athread_emu.h / .c, the host emulation of athread.
- cost.py: per-CPE counts from the loop nests and the SW26010 cost model.
"""
from .config import BASELINES, MODES, PRESETS, SunwayConfig
from .target import SunwayKernel, SunwayTarget

__all__ = ["BASELINES", "MODES", "PRESETS", "SunwayConfig", "SunwayKernel", "SunwayTarget"]

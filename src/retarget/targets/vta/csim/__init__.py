"""retarget's C functional simulator of VTA and the VTA driver API on it.

C sources (package data, no Python dependence): vta_driver.h (the driver interface the
published VTA runtime programs against), vta_csim.h / vta_csim.c (the simulator, bit-identical
to targets/vta/sim), vta_driver_sim.c (the driver API on the simulator). build.py compiles them
into a cached shared library; binding.py puts the simulator behind the Python simulator's
interface. See docs/vta-csim.md.
"""
from .binding import CSimulator, available
from .build import CSimUnavailable

__all__ = ["CSimUnavailable", "CSimulator", "available"]

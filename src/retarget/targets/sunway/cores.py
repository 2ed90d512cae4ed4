"""Which processor runs a layer's kernel: the MPE or the 64 CPEs of a core group."""
from __future__ import annotations

from ...loopnest.ir import Kernel, Store, accesses, walk


def runs_on(kernel: Kernel, mode: str) -> str:
    """"cpe" or "mpe": in swtvm mode a kernel whose statements read or write main memory
    other than by DMA copies runs on the MPE; in the baselines everything runs on the CPEs
    (they may use global loads)."""
    if mode != "swtvm":
        return "cpe"
    direct = any(acc.tensor.scope == "global" for s, _ in walk(kernel.body)
                 if isinstance(s, Store) for acc, _ in accesses(s))
    return "mpe" if direct else "cpe"


__all__ = ["runs_on"]

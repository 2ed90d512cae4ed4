"""Behavioural simulator of the VTA-style accelerator (see specs/vta.md).

    sim = Simulator(cfg, dram_bytes=1 << 24)
    sim.dram[...] = ...                      # place data, uops and instructions
    result = sim.run(insn_list_or_bytes)     # until FINISH; SimulationError names a bad insn
    result.counters.gemm_counter

Files: memory.py (DRAM, SRAMs, LOAD/STORE), compute.py (vectorised GEMM/ALU), sim.py (modules,
token queues, dispatch, counters), errors.py.
"""
from .compute import alu_apply
from .errors import DeadlockError, SimulationError
from .memory import SimMemory
from .sim import QUEUES, SimCounters, SimResult, Simulator, decode, run_stream

__all__ = ["DeadlockError", "SimCounters", "SimMemory", "SimResult", "SimulationError",
           "Simulator", "QUEUES", "alu_apply", "decode", "run_stream"]

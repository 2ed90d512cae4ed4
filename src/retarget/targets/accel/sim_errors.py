"""Errors an accelerator simulator (and its cycle model) raises.

`SimFault` is internal: the memory and compute code raise it without knowing which instruction
they run, and the machine (sim.py) turns it into a `SimulationError` that names the instruction
index and its disassembly, so every message says *which* instruction was bad and why.
"""
from __future__ import annotations

from ...errors import DeviceError


class SimulationError(DeviceError):
    """A malformed instruction stream: bad opcode, out-of-range index or address, missing FINISH.

    `index` is the instruction's position in the stream (None when the fault is not tied to one).
    """

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


class DeadlockError(SimulationError):
    """No module can run its next instruction (each waits on an empty token queue) and
    instructions remain. `blocked` lists (module, index, text, queues waited on)."""

    def __init__(self, message: str,
                 blocked: list[tuple[str, int, str, tuple[str, ...]]] | None = None,
                 queues: dict[str, int] | None = None):
        # Defaults let wrappers (e.g. a device naming the failed task) re-raise the same class.
        blocked = blocked or []
        super().__init__(message, blocked[0][1] if blocked else None)
        self.blocked = blocked
        self.queues = queues or {}


class SimFault(Exception):
    """Raised by memory/compute code; re-raised by the machine with the instruction named."""

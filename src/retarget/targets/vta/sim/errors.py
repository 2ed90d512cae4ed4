"""The simulator errors (shared by every accelerator: targets/accel/sim_errors.py)."""
from ...accel.sim_errors import DeadlockError, SimFault, SimulationError

__all__ = ["DeadlockError", "SimFault", "SimulationError"]

"""The layers' integer reference (shared by every accelerator: targets/accel/reference.py)."""
from ...accel.reference import (conv2d, dense, pool2d, reference, requantize, residual_add,
                                run_op)

__all__ = ["conv2d", "dense", "pool2d", "reference", "requantize", "residual_add", "run_op"]

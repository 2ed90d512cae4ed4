"""Shape helpers shared by op definitions."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.types import TensorType


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy/ONNX multidirectional broadcasting; ShapeError when shapes do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"shapes {' and '.join(map(str, shapes))} do not broadcast") from None


def same_as_input(attrs, types, consts) -> list[TensorType]:
    """Shape rule of ops whose single output has its first input's type."""
    return [types[0]]


def need_const(consts, i: int, what: str) -> np.ndarray:
    """The constant value of input i, or a ShapeError saying the shape depends on it."""
    if consts[i] is None:
        raise ShapeError(f"{what} must be a constant for static shapes (it is computed at run time)")
    return consts[i]

"""Tensor types: a static shape and a dtype name."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import ShapeError

# dtype names are NumPy's; these are the ones the IR accepts.
DTYPES = ("float32", "float64", "float16", "int8", "uint8", "int16", "uint16",
          "int32", "uint32", "int64", "uint64", "bool")


def dtype_name(dtype) -> str:
    """Canonical dtype name of anything NumPy understands as a dtype."""
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise TypeError(f"unsupported dtype {name!r}; supported: {', '.join(DTYPES)}")
    return name


@lru_cache(maxsize=None)
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize     # (np.dtype() costs microseconds; a run asks often)


@dataclass(frozen=True, slots=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        if any(d < 0 for d in self.shape):
            raise ShapeError(f"negative dimension in shape {self.shape}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * _itemsize(self.dtype)

    @staticmethod
    def of(array: np.ndarray) -> "TensorType":
        return TensorType(tuple(array.shape), array.dtype.name)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

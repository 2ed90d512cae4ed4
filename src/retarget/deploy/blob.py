"""The one binary blob of a deployed program (model.bin, linked into the executable): every
constant the program reads, each part 64-byte aligned at an offset main.c names."""
from __future__ import annotations

import numpy as np

ALIGN = 64


class Blob:
    def __init__(self):
        self._parts: list[bytes] = []
        self.size = 0

    def add(self, data: "bytes | np.ndarray") -> int:
        """Append `data` (an array's C-order bytes) at the next aligned offset; returns it."""
        raw = np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else bytes(data)
        pad = -self.size % ALIGN
        if pad:
            self._parts.append(b"\0" * pad)
        offset = self.size + pad
        self._parts.append(raw)
        self.size = offset + len(raw)
        return offset

    def tobytes(self) -> bytes:
        return b"".join(self._parts) + b"\0" * (-self.size % ALIGN)


def index_map(coded: np.ndarray) -> np.ndarray:
    """A gather table from an operation applied to 1-based element numbers (0 where the
    operation fills a zero): rt_gather's int32 map."""
    flat = np.ascontiguousarray(coded).ravel()
    if flat.size and (flat.min() < 0 or flat.max() >= 2**31):
        raise ValueError("element numbers out of the int32 range of a gather table")
    return flat.astype(np.int32)


def numbered(shape: tuple[int, ...]) -> np.ndarray:
    """1, 2, ... n in `shape` (int64): what index_map reads back after a data movement."""
    n = int(np.prod(shape, dtype=np.int64))
    return np.arange(1, n + 1, dtype=np.int64).reshape(shape)


__all__ = ["ALIGN", "Blob", "index_map", "numbered"]

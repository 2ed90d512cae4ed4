"""A loadable as the Program the shared stream plumbing runs (targets/accel): its addresses
as named DRAM buffers in one image (weights, io, scratch memories back to back), its layers
as the stream, relocated to where the device placed the image."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import DeviceError
from ..accel.program import DramBuffer, read_buffer, write_buffers
from .config import NvdlaConfig
from .loadable import ADDRESS_FIELDS, NONE, Loadable

# Device byte addresses in a relocated descriptor are int32 fields.
MAX_ADDRESS = (1 << 31) - 1


class NvdlaProgram:
    def __init__(self, loadable: Loadable):
        self.loadable = loadable
        self.config = NvdlaConfig(name=loadable.config_name, **loadable.hardware)
        self.buffers = {a.name: DramBuffer(a.name, loadable.image_offset(a.id), a.shape,
                                           a.dtype) for a in loadable.addresses}
        self.dram_bytes = loadable.image_bytes
        self.layers = [(loadable.string(int(r["name"])), i, i + 1)
                       for i, r in enumerate(loadable.layers)]

    @property
    def insns(self) -> np.ndarray:
        return self.loadable.layers

    def dram_image(self, data: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """The image with the weight blob in its memory and `data` in its buffers."""
        img = np.zeros(max(1, self.dram_bytes), np.uint8)
        w = self.loadable.weights_memory()
        img[w.offset:w.offset + w.size] = np.frombuffer(self.loadable.blob, np.uint8)
        return write_buffers(img, self.buffers, data)

    def read(self, image: np.ndarray, name: str) -> np.ndarray:
        return read_buffer(image, self.buffers, name)

    def relocated(self, base: int) -> bytes:
        """The descriptors with every address-list id replaced by its device byte address."""
        recs = self.loadable.layers.copy()
        offsets = np.array([self.loadable.image_offset(a.id) for a in self.loadable.addresses]
                           + [0], np.int64)
        for f in ADDRESS_FIELDS:
            ids = recs[f].astype(np.int64)
            absolute = base + offsets[np.where(ids == NONE, len(offsets) - 1, ids)]
            if absolute.size and absolute.max() > MAX_ADDRESS:
                raise DeviceError(f"nvdla: a loadable placed at {base:#x} would exceed the "
                                  f"31-bit descriptor address")
            recs[f] = np.where(ids == NONE, NONE, absolute)
        return recs.tobytes()

    # ---- artifact ---------------------------------------------------------------------------
    def save(self, prefix: str) -> None:
        Path(prefix + ".loadable").write_bytes(self.loadable.to_bytes())

    @classmethod
    def load(cls, prefix: str) -> "NvdlaProgram":
        return cls(Loadable.from_bytes(Path(prefix + ".loadable").read_bytes()))


__all__ = ["NvdlaProgram"]

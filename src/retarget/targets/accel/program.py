"""Named buffers in an accelerator's DRAM image, the image itself, and their on-disk form.

A lowered program addresses DRAM from 0: its constants, inputs, outputs and intermediates are
`DramBuffer`s at byte offsets in one image of `dram_bytes`. The device places the image anywhere
in its memory (targets/accel/device.py). Every target's Program keeps `buffers`, `dram_bytes`
and per-layer instruction spans `layers`, and uses these functions to fill, read, save and
load them, so checks on a damaged file are written once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ...errors import InputError
from ...limits import check_tensor_bytes

DTYPES = ("int8", "int32", "uint32", "uint8")


@dataclass(frozen=True, slots=True)
class DramBuffer:
    """A named region of the simulated DRAM: `offset` bytes from address 0, C-ordered."""
    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        # Python ints: a shape read from a damaged file must not overflow int64 silently.
        size = _ITEMSIZE.get(self.dtype)
        if size is None:
            size = np.dtype(self.dtype).itemsize
        return math.prod(map(int, self.shape)) * size


_ITEMSIZE = {d: np.dtype(d).itemsize for d in DTYPES}


def find_buffer(buffers: Mapping[str, DramBuffer], name: str) -> DramBuffer:
    try:
        return buffers[name]
    except KeyError:
        raise InputError(f"no DRAM buffer {name!r}; have: {', '.join(buffers)}") from None


def write_buffers(img: np.ndarray, buffers: Mapping[str, DramBuffer],
                  data: Mapping[str, np.ndarray] | None) -> np.ndarray:
    """Write `data` (buffer name -> array of its shape) into the uint8 image `img`, little-endian,
    refusing a wrong shape or values that do not fit the buffer's dtype."""
    for name, arr in (data or {}).items():
        buf = find_buffer(buffers, name)
        arr = np.asarray(arr)
        if arr.shape != buf.shape:
            raise InputError(f"DRAM buffer {name!r}: expected shape {buf.shape}, got {arr.shape}")
        if arr.dtype != np.dtype(buf.dtype):
            if not np.can_cast(arr, buf.dtype, casting="same_kind") or \
                    arr.size and (arr.min() < np.iinfo(buf.dtype).min
                                  or arr.max() > np.iinfo(buf.dtype).max):
                raise InputError(f"DRAM buffer {name!r}: values of dtype {arr.dtype} do not "
                                 f"fit {buf.dtype}")
            arr = arr.astype(buf.dtype)
        raw = np.ascontiguousarray(arr).astype(np.dtype(buf.dtype).newbyteorder("<"))
        img[buf.offset:buf.offset + buf.nbytes] = raw.view(np.uint8).reshape(-1)
    return img


def read_buffer(dram: np.ndarray, buffers: Mapping[str, DramBuffer], name: str) -> np.ndarray:
    """Buffer `name` read back from a DRAM image (a copy, in its shape and dtype)."""
    buf = find_buffer(buffers, name)
    raw = np.asarray(dram, dtype=np.uint8)[buf.offset:buf.offset + buf.nbytes]
    if raw.size != buf.nbytes:
        raise InputError(f"DRAM image of {np.asarray(dram).size} bytes is too small for "
                         f"buffer {name!r} at {buf.offset}+{buf.nbytes}")
    le = np.dtype(buf.dtype).newbyteorder("<")
    return raw.view(le).astype(buf.dtype).reshape(buf.shape)


def count(value: Any, what: str) -> int:
    """A non-negative int from a program's JSON (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def layout_to_json(buffers: Mapping[str, DramBuffer], layers, dram_bytes: int) -> dict:
    """The JSON form of a program's DRAM layout and layer spans."""
    return {"dram_bytes": dram_bytes,
            "layers": [[n, int(a), int(b)] for n, a, b in layers],
            "buffers": [{"name": b.name, "offset": b.offset, "shape": list(b.shape),
                         "dtype": b.dtype} for b in buffers.values()]}


def layout_from_json(meta: Mapping[str, Any], where: str, n_insns: int
                     ) -> tuple[dict[str, DramBuffer], list[tuple[str, int, int]], int]:
    """(buffers, layer spans, dram_bytes) from layout_to_json's form, checking that every buffer
    lies within the image (and the image within the tensor limit) and every span within the
    stream of `n_insns` instructions (ValueError naming the field)."""
    dram_bytes = count(meta["dram_bytes"], "dram_bytes")
    check_tensor_bytes(f"{where}: the program's DRAM image", (dram_bytes,), np.uint8)
    bufs = {}
    for b in meta["buffers"]:
        buf = DramBuffer(str(b["name"]), count(b["offset"], "buffer offset"),
                         tuple(count(d, "buffer dim") for d in b["shape"]), str(b["dtype"]))
        if buf.dtype not in DTYPES or buf.offset + buf.nbytes > dram_bytes:
            raise ValueError(f"buffer {buf.name!r} ({buf.dtype} {list(buf.shape)} at "
                             f"{buf.offset}) does not lie within the {dram_bytes}-byte image")
        bufs[buf.name] = buf
    layers = [(str(n), count(a, "layer start"), count(b, "layer stop"))
              for n, a, b in meta.get("layers", [])]
    for n, a, b in layers:
        if not a <= b <= n_insns:
            raise ValueError(f"layer {n!r} spans instructions [{a}, {b}) of a stream of "
                             f"{n_insns}")
    return bufs, layers, dram_bytes


__all__ = ["DTYPES", "DramBuffer", "count", "find_buffer", "layout_from_json", "layout_to_json",
           "read_buffer", "write_buffers"]

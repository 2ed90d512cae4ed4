"""Named buffers in an accelerator's DRAM image, the image itself, and their on-disk form.

A lowered program addresses DRAM from 0: its constants, inputs, outputs and intermediates are
`DramBuffer`s at byte offsets in one image of `dram_bytes`. The device places the image anywhere
in its memory (targets/accel/device.py). Every target's Program keeps `buffers`, `dram_bytes`
and per-layer instruction spans `layers`, and uses these functions to fill, read, save and
load them, so checks on a damaged file are written once.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ...errors import InputError, TargetError
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


@dataclass(frozen=True, slots=True)
class SavedStream:
    """Where a saved instruction stream's files are: Program.save(prefix) writes
    prefix.insn.bin beside prefix.json (config, DRAM layout; dnnvm's names its target) and, for
    vta, prefix.uop.bin. `meta` and `uops` are None when the file is not there."""
    stream: Path
    meta: Path | None
    uops: Path | None

    @classmethod
    def find(cls, path: Path) -> "SavedStream":
        """The files of the stream at `path`: a kernel directory (its program.insn.bin) or
        the .insn.bin file itself."""
        if path.is_dir():
            path = path / "program.insn.bin"
        prefix = str(path)[:-len(".insn.bin")] if path.name.endswith(".insn.bin") else None
        meta = Path(prefix + ".json") if prefix and Path(prefix + ".json").exists() else None
        uops = Path(prefix + ".uop.bin") if prefix and Path(prefix + ".uop.bin").exists() else None
        return cls(path, meta, uops)

    def saved_target(self) -> str | None:
        """The target the stream's JSON names (dnnvm programs say so; vta's predate it)."""
        if self.meta is None:
            return None
        try:
            with open(self.meta, encoding="utf-8") as fh:
                return json.load(fh).get("target")
        except (json.JSONDecodeError, AttributeError, OSError):
            return None

    def config(self, given: str | None, from_dict: Callable[[dict], Any],
               load_config: Callable[[str | None], Any]) -> tuple[Any, str]:
        """The stream's config and where it came from: `given` (a preset or file, read by the
        target's `load_config`) wins; else the one saved beside the stream (`from_dict`);
        else the target's default."""
        if given is None and self.meta is not None:
            return from_dict(self.saved_config()), f"from {self.meta.name}"
        return load_config(given), "given" if given else "default"

    def read(self) -> bytes:
        with open(self.stream, "rb") as fh:
            return fh.read()

    def saved_config(self) -> dict:
        """The config fields recorded in the stream's JSON (TargetError when unreadable)."""
        try:
            with open(self.meta, encoding="utf-8") as fh:
                fields = json.load(fh)["config"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise TargetError(f"{self.meta}: no readable 'config' ({e}); give --config") from None
        if not isinstance(fields, dict):
            raise TargetError(f"{self.meta}: 'config' is not an object; give --config")
        return fields


def save_stream(prefix: str, stream: bytes, meta: Mapping[str, Any]) -> None:
    """Write <prefix>.insn.bin (the binary stream) and <prefix>.json (`meta`: the config, the
    DRAM layout, and the target's name where the target records it)."""
    with open(prefix + ".insn.bin", "wb") as fh:
        fh.write(stream)
    with open(prefix + ".json", "w", encoding="utf-8") as fh:
        json.dump(dict(meta), fh, indent=1)


def read_stream(prefix: str, target: str, insn_bytes: int, *,
                unmarked_ok: bool = False) -> tuple[dict, bytes]:
    """The JSON and the raw stream saved by save_stream, checked to be `target`'s (its
    "target" field; `unmarked_ok` also accepts a file without one, for a target whose
    programs were saved before the field existed) and a whole, non-empty number of
    `insn_bytes`-byte instructions (ValueError naming the file)."""
    with open(prefix + ".json", encoding="utf-8") as fh:
        meta = json.load(fh)
    if not isinstance(meta, dict):
        raise ValueError(f"{prefix}.json is not a JSON object")
    named = meta.get("target")
    if named != target and not (named is None and unmarked_ok):
        raise ValueError(f"{prefix}.json is not a {target} program "
                         f"({'it names ' + repr(named) if named is not None else 'no target'})")
    with open(prefix + ".insn.bin", "rb") as fh:
        raw = fh.read()
    if not raw or len(raw) % insn_bytes:
        raise ValueError(f"{prefix}.insn.bin: {len(raw)} bytes is not a whole, non-empty "
                         f"number of {insn_bytes}-byte instructions")
    return meta, raw


__all__ = ["SavedStream", "read_stream", "save_stream", "DTYPES", "DramBuffer", "count", "find_buffer", "layout_from_json", "layout_to_json",
           "read_buffer", "write_buffers"]

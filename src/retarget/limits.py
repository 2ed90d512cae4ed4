"""Resource limits every reader and allocator checks before committing memory or time.

One place decides how large a tensor retarget will allocate and which files it will read, so
a model, an artifact or an input file that declares something huge is refused with a message
naming it, before any memory is touched (never a MemoryError or a hang from deep in NumPy).

    RETARGET_MAX_TENSOR_BYTES=8G retarget run big.onnx --random     # raise the limit
    with tensor_limit(1 << 20): ...                                  # lower it for a block

The same holds for work: a simulated device estimates a program's operations before running it
and refuses one beyond `max_device_work()` ($RETARGET_MAX_DEVICE_WORK, `work_limit`), so a
stream whose loops would run for hours fails at once instead of spinning.

The default (4 GiB per tensor) is well under the 24 GiB these machines have, so one tensor
at the limit plus its copies still fits.
"""
from __future__ import annotations

import contextlib
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .errors import ResourceLimitError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str, what: str) -> int:
    """'4096', '64M', '8G' (binary units), '1e11' -> a positive count; a clear error else."""
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    unit = s[-1:] if s[-1:] in _UNITS and s[-1:] else ""
    number = s[:-1] if unit else s
    try:
        value = int(float(number) * _UNITS[unit]) if "E" in number or "." in number \
            else int(number) * _UNITS[unit]
    except (ValueError, OverflowError):
        raise ResourceLimitError(f"{what}: {text!r} is not a count (e.g. 4096, 64M, 8G, 1e11)") from None
    if value <= 0:
        raise ResourceLimitError(f"{what}: {text!r} must be positive")
    return value


@dataclass(frozen=True)
class _Limit:
    """One configurable limit: a `scoped` override (this thread), else an environment
    variable, else the default."""
    env: str
    default: int
    _override: threading.local = field(default_factory=threading.local, compare=False)

    def value(self) -> int:
        scoped = getattr(self._override, "value", None)
        if scoped is not None:
            return scoped
        env = os.environ.get(self.env)
        return parse_bytes(env, self.env) if env else self.default

    @contextlib.contextmanager
    def scoped(self, value: int) -> Iterator[None]:
        previous = getattr(self._override, "value", None)
        self._override.value = int(value)
        try:
            yield
        finally:
            self._override.value = previous


DEFAULT_MAX_TENSOR_BYTES = 4 << 30
TENSOR_ENV = "RETARGET_MAX_TENSOR_BYTES"
_TENSOR = _Limit(TENSOR_ENV, DEFAULT_MAX_TENSOR_BYTES)
# About a minute of simulation; ResNet-50 at 224 is about 10^10 operations on vta.
DEFAULT_MAX_DEVICE_WORK = 10 ** 11
WORK_ENV = "RETARGET_MAX_DEVICE_WORK"
_WORK = _Limit(WORK_ENV, DEFAULT_MAX_DEVICE_WORK)


def max_tensor_bytes() -> int:
    """The largest tensor (in bytes) retarget will allocate: the innermost `tensor_limit`
    block of this thread, else $RETARGET_MAX_TENSOR_BYTES, else 4 GiB."""
    return _TENSOR.value()


def tensor_limit(nbytes: int):
    """Use `nbytes` as the tensor limit inside the block (this thread only)."""
    return _TENSOR.scoped(nbytes)


def max_device_work() -> int:
    """The most work (simulated multiply-accumulates plus ALU lane operations) one task may
    ask of a simulated device: the innermost `work_limit` block, else
    $RETARGET_MAX_DEVICE_WORK, else 10^11."""
    return _WORK.value()


def work_limit(operations: int):
    """Use `operations` as the device work limit inside the block (this thread only)."""
    return _WORK.scoped(operations)


def check_device_work(what: str, operations: int) -> None:
    """Refuse a program whose estimated work exceeds the limit, before it runs."""
    limit = max_device_work()
    if operations > limit:
        raise ResourceLimitError(f"{what}: the program would perform about {operations:.3g} "
                                 f"operations, over the {limit:.3g} work limit (set {WORK_ENV} "
                                 f"to raise it)")


def tensor_nbytes(shape: Sequence[int], dtype) -> int:
    """Bytes a tensor of `shape` and `dtype` needs, in Python ints (no overflow)."""
    n = np.dtype(dtype).itemsize
    for d in shape:
        n *= int(d)
    return n


def check_tensor_bytes(what: str, shape: Sequence[int], dtype) -> int:
    """Refuse a tensor larger than the limit before it is allocated; returns its bytes.
    `what` names it for the message (e.g. "ConstantOfShape 'fill' output", "input 'x'")."""
    nbytes = tensor_nbytes(shape, dtype)
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise ResourceLimitError(
            f"{what}: shape {tuple(int(d) for d in shape)} {np.dtype(dtype)} needs "
            f"{_human(nbytes)}, over the {_human(limit)} tensor limit (set {TENSOR_ENV} to "
            f"raise it)")
    return nbytes


def check_regular_file(path: str | Path, what: str, max_bytes: int | None = None) -> int:
    """Refuse anything but a regular file of at most `max_bytes` (symlinks are followed: a
    link to /dev/zero, a FIFO or a device node is refused at once, never opened); returns
    the file's size."""
    p = Path(path)
    # name the file once: `what` often mentions it already (e.g. "--input x=a.npy (a.npy)")
    label = what if str(path) in what else f"{what} {p}"
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise ResourceLimitError(f"{label}: no such file") from None
    except OSError as e:
        raise ResourceLimitError(f"{label}: cannot stat ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device node" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise ResourceLimitError(f"{label}: is {kind}; only regular files are read")
    if max_bytes is not None and st.st_size > max_bytes:
        raise ResourceLimitError(f"{label}: {st.st_size} bytes, more than the "
                                 f"{max_bytes} allowed here")
    return st.st_size


def read_regular_file(path: str | Path, what: str, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (see check_regular_file); reads
    at most one byte past the limit, so a file growing under us cannot exhaust memory."""
    check_regular_file(path, what, max_bytes)
    with open(path, "rb") as fh:
        data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise ResourceLimitError(f"{what} {path}: more than the {max_bytes} bytes allowed here")
    return data


def _human(nbytes: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit} ({nbytes} bytes)"
    return f"{nbytes} bytes"


__all__ = ["DEFAULT_MAX_DEVICE_WORK", "DEFAULT_MAX_TENSOR_BYTES", "TENSOR_ENV", "WORK_ENV",
           "check_device_work", "check_regular_file", "check_tensor_bytes", "max_device_work",
           "max_tensor_bytes", "parse_bytes", "read_regular_file", "tensor_limit", "tensor_nbytes",
           "work_limit"]

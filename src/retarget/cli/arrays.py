"""Reading the .npy / .npz files a user gives the CLI (--input, --calibration).

Every file is checked before NumPy sees it: a regular file (a FIFO or /dev/zero would block or
never end), a NumPy magic number (a text file is "not a .npy/.npz", not "pickled data"), and the
shape each array header declares against the tensor limit (retarget.limits), so a 20-byte file
declaring a terabyte array is refused before anything is allocated.
"""
from __future__ import annotations

import zipfile

import numpy as np

from ..errors import InputError, ResourceLimitError
from ..ir.serialize import ARRAY_FILE_ERRORS
from ..limits import check_regular_file, check_tensor_bytes

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def load_array_file(path: str, what: str) -> "np.ndarray | dict[str, np.ndarray]":
    """One array (.npy) or name -> array (.npz) from `path`; `what` names the option for
    messages (e.g. "--input x.npy"). Never unpickles."""
    try:
        check_regular_file(path, what)
    except ResourceLimitError as e:
        raise InputError(str(e)) from None
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(_NPY_MAGIC):
        _check_npy_header(path, what)
    elif magic.startswith(_ZIP_MAGIC):
        _check_npz_members(path, what)
    else:
        raise InputError(f"{what}: not a NumPy .npy or .npz file")
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            return data
        with data:
            return {k: data[k] for k in data.files}
    except ValueError as e:
        if "allow_pickle" in str(e):
            raise InputError(f"{what}: holds Python objects (pickled data), which retarget "
                             f"does not load; save a numeric array") from None
        raise InputError(f"{what}: unreadable .npy/.npz file ({e})") from None
    except ARRAY_FILE_ERRORS as e:
        raise InputError(f"{what}: unreadable (truncated or damaged) .npy/.npz file "
                         f"({str(e) or type(e).__name__})") from None


def _check_npy_header(path: str, what: str, fh=None) -> None:
    """The array a .npy header declares fits the tensor limit."""
    try:
        if fh is None:
            with open(path, "rb") as f:
                return _check_npy_header(path, what, f)
        version = np.lib.format.read_magic(fh)
        shape, _, dtype = (np.lib.format.read_array_header_1_0(fh) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(fh))
    except (ValueError, OSError, EOFError) as e:
        raise InputError(f"{what}: damaged .npy header ({e})") from None
    if dtype.hasobject:
        raise InputError(f"{what}: holds Python objects (pickled data), which retarget does "
                         f"not load; save a numeric array")
    check_tensor_bytes(what, shape, dtype)


def _check_npz_members(path: str, what: str) -> None:
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.filename.endswith(".npy"):
                    with z.open(info) as member:
                        _check_npy_header(path, f"{what} [{info.filename[:-4]}]", member)
    except ARRAY_FILE_ERRORS as e:
        raise InputError(f"{what}: unreadable (truncated or damaged) .npz file ({e})") from None


__all__ = ["load_array_file"]

"""How many BLAS threads a simulated device uses while it executes a task.

A simulator issues many small matrix products; with OpenBLAS's default of one thread per core
they spin up and hand off threads on every call, and when another process keeps a core busy the
handoffs wait on it: on a 2-core machine the VTA simulator ran a ResNet-18@64 task 8-25x slower
that way (docs/benchmarks.md, `benchmarks/bench_threads.py`). So devices choose deliberately:
one BLAS thread by default while a task runs ($RETARGET_SIM_THREADS or the device option
`blas_threads` change it; None leaves the process's setting alone).

threadpoolctl does the switching when it is installed (it ships with scikit-learn; it is a small
pure-Python package); without it the setting is a no-op and said so by `blas_control_available`.
The limit is process-wide while it is held, so CPU work in other threads shares it.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

from ..errors import DeviceError

THREADS_ENV = "RETARGET_SIM_THREADS"
_controller = None
_controller_lock = threading.Lock()


def default_blas_threads() -> int | None:
    """$RETARGET_SIM_THREADS ('0' or 'none': leave BLAS alone), else 1."""
    env = os.environ.get(THREADS_ENV, "").strip().lower()
    if not env:
        return 1
    if env in ("0", "none"):
        return None
    try:
        n = int(env)
    except ValueError:
        raise DeviceError(f"{THREADS_ENV}={env!r} is not a thread count") from None
    if n < 0:
        raise DeviceError(f"{THREADS_ENV}={env!r} must be >= 0")
    return n


def _get_controller():
    global _controller
    with _controller_lock:
        if _controller is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                _controller = False
            else:
                _controller = ThreadpoolController()
        return _controller


def blas_control_available() -> bool:
    return bool(_get_controller())


def blas_threads(n: int | None) -> contextlib.AbstractContextManager:
    """Limit BLAS to `n` threads inside the block (None, or no threadpoolctl: unchanged).
    None costs nothing: a device that leaves BLAS alone enters this once per task."""
    return contextlib.nullcontext() if n is None else _limited(n)


@contextlib.contextmanager
def _limited(n: int) -> Iterator[None]:
    controller = _get_controller()
    if not controller:
        yield
        return
    with controller.limit(limits=n, user_api="blas"):
        yield


__all__ = ["THREADS_ENV", "blas_control_available", "blas_threads", "default_blas_threads"]

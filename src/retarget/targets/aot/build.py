"""Writing a Program's project directory and building its shared library with the system C
compiler. A compiler that is missing or fails is a TargetError that says where the sources
are: they were written first, so a user can build them by hand with their own toolchain."""
from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from ...errors import TargetError

LIBRARY = "libmodel.so"
WEIGHTS = "weights.bin"
BUILD_TIMEOUT_S = 900


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """How a project becomes its library: `units` (the C files, in the project directory)
    compiled and linked in one command with `libs`."""
    cc: str
    cflags: str
    openmp: bool
    units: tuple[str, ...] = ("model.c",)
    libs: tuple[str, ...] = ("-lm",)

    def command(self, output: str = LIBRARY) -> list[str]:
        return [*shlex.split(self.cc), *shlex.split(self.cflags),
                *(["-fopenmp"] if self.openmp else []), "-fPIC", "-shared", "-o", output,
                *self.units, *self.libs]


@dataclass(frozen=True, slots=True)
class Build:
    """A built library: where it is, the command that built it and how long that took."""
    library: Path
    command: tuple[str, ...]
    seconds: float


def write_project(directory: Path, files: Mapping[str, str], weights: np.ndarray) -> None:
    """Write the sources and weights.bin into `directory` (created if needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    np.ascontiguousarray(weights, dtype=np.uint8).tofile(directory / WEIGHTS)


def build_library(directory: Path, options: BuildOptions) -> Build:
    """Compile the project in `directory` into `directory`/libmodel.so."""
    cmd = options.command()
    hint = (f"the sources are written in {directory}; build them there with `make` (see its "
            f"Makefile) or set the target's `cc` / `cflags` config")
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=directory, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except FileNotFoundError:
        raise TargetError(f"C compiler {options.cc!r} not found (target config `cc`); "
                          f"{hint}") from None
    except PermissionError:
        raise TargetError(f"C compiler {options.cc!r} cannot be run (permission denied); "
                          f"{hint}") from None
    except subprocess.TimeoutExpired:
        raise TargetError(f"{options.cc!r} did not finish building {directory} in "
                          f"{BUILD_TIMEOUT_S} s; {hint}") from None
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        log = (done.stderr or done.stdout).strip()
        if len(log) > 4000:
            log = "...\n" + log[-4000:]
        raise TargetError(f"`{shlex.join(cmd)}` failed (exit status {done.returncode}); "
                          f"{hint}\n{log}")
    library = directory / LIBRARY
    if not library.is_file():
        raise TargetError(f"`{shlex.join(cmd)}` produced no {LIBRARY}; {hint}")
    return Build(library, tuple(cmd), seconds)


__all__ = ["BUILD_TIMEOUT_S", "Build", "BuildOptions", "LIBRARY", "WEIGHTS", "build_library",
           "write_project"]

"""Building and running a deployed program from Python (the demo, tests and benchmarks):
`make` in the project directory, then the binary on .npy files in a temporary directory.
The compiler is make's (CC / CFLAGS from the environment or `make_args`), never anything
read from an artifact."""
from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..errors import TargetError

BUILD_TIMEOUT_S = 900
_MS_PER_RUN = re.compile(r"([0-9.]+) ms per inference, ([0-9.]+) ms CPU")


@dataclass(frozen=True, slots=True)
class ProgramTiming:
    """What `model --repeat N` measured itself: wall and CPU milliseconds per inference."""
    wall_ms: float
    cpu_ms: float


def build_program(project: str | Path, make_args: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> Path:
    """`make -C project`; returns the built program's path."""
    project = Path(project)
    try:
        done = subprocess.run(["make", "-C", str(project), *make_args], capture_output=True,
                              text=True, env=None if env is None else dict(env),
                              timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TargetError(f"cannot run make in {project}: {e}") from None
    if done.returncode != 0:
        raise TargetError(f"make -C {project} failed: {(done.stderr or done.stdout)[-1500:]}")
    return project / "model"


def run_program(program: str | Path, inputs: Sequence[np.ndarray], num_outputs: int,
                repeat: int = 1, env: Mapping[str, str] | None = None
                ) -> tuple[list[np.ndarray], ProgramTiming | None]:
    """Run a deployed program on `inputs` (graph order); returns its outputs and, with
    repeat > 1, the time per inference it measured."""
    with tempfile.TemporaryDirectory(prefix="retarget-deployed-") as tmp:
        work = Path(tmp)
        args = [str(program)]
        for i, x in enumerate(inputs):
            np.save(work / f"in{i}.npy", np.ascontiguousarray(x))
            args += ["--input", f"in{i}.npy"]
        for j in range(num_outputs):
            args += ["--output", f"out{j}.npy"]
        if repeat > 1:
            args += ["--repeat", str(repeat)]
        done = subprocess.run(args, cwd=work, capture_output=True, text=True,
                              env={} if env is None else dict(env))
        if done.returncode != 0:
            raise TargetError(f"{program} exited with {done.returncode}: {done.stderr.strip()}")
        outputs = [np.load(work / f"out{j}.npy") for j in range(num_outputs)]
    m = _MS_PER_RUN.search(done.stderr)
    return outputs, None if m is None else ProgramTiming(float(m.group(1)), float(m.group(2)))


__all__ = ["ProgramTiming", "build_program", "run_program"]

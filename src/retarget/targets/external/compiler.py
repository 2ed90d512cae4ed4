"""The external-compiler target kind (the BYOC route of papers/tvm-nvdla-byoc.txt): a target
whose `lower` hands each region to a compiler that runs as a separate process, and loads
the binary it writes.

    class MyTarget(ExternalCompilerTarget):
        name = "mine"
        config_class = MyConfig           # a dataclass with `compiler` and `compiler_timeout_s`
        def load_binary(self, region, binary: bytes) -> Kernel: ...

Per region, `lower` writes the region as the export document (export.py; the contract is
docs/byoc.md) into a fresh directory, runs the configured command with its placeholders
filled in, and reads the file the compiler wrote:

    compiler = "mycc {json} -o {out}"       # {json}: region.json, {npz}: its arrays,
                                             # {out}: where the binary must be written,
                                             # {dir}: the working directory, {python}:
                                             # the interpreter retarget runs on

The command is split as a shell would split it, but no shell runs it. A compiler that cannot
be started, exits non-zero, runs past `compiler_timeout_s` or writes nothing is a TargetError
that names the region and the command and carries the compiler's stderr.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...errors import TargetError
from ..base import Kernel, Region, Target
from .export import document, write_document

PLACEHOLDERS = ("{json}", "{npz}", "{out}", "{dir}", "{python}")
STDERR_CHARS = 4000           # of a failing compiler's stderr kept in the error


@dataclass(frozen=True, slots=True)
class CompilerRun:
    """What one compiler process did: its command line, how long it took, what it said."""
    command: tuple[str, ...]
    seconds: float
    stdout: str
    stderr: str
    binary_bytes: int


def run_compiler(command: str, region: Region, target: str, timeout_s: float,
                 workdir: Path, config: dict | None = None) -> tuple[bytes, CompilerRun]:
    """Write `region` as the export document into `workdir` (with `config`, the hardware
    parameters, under "config"), run `command` there, and return the binary it wrote to {out}
    with the record of the run."""
    words = shlex.split(command)
    if not words:
        raise TargetError(f"target {target!r}: no compiler command is configured (config "
                          f"`compiler`, e.g. \"mycc {{json}} -o {{out}}\")")
    if not any(p in command for p in ("{json}", "{dir}")):
        raise TargetError(f"target {target!r}: the compiler command {command!r} never names "
                          f"the region it should compile: use {{json}} (or {{dir}})")
    doc, arrays = document(target, [region], config)
    json_path = write_document(doc, arrays, workdir / "region.json")
    out = workdir / "region.bin"
    fill = {"{json}": str(json_path), "{npz}": str(json_path.with_suffix(".npz")),
            "{out}": str(out), "{dir}": str(workdir), "{python}": sys.executable}
    argv = []
    for w in words:
        for key, value in fill.items():
            w = w.replace(key, value)
        argv.append(w)
    where = f"target {target!r}, region {region.name!r}: compiler `{shlex.join(argv)}`"
    t0 = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True,
                              timeout=timeout_s)
    except FileNotFoundError:
        raise TargetError(f"{where} cannot be started: {argv[0]!r} not found") from None
    except PermissionError:
        raise TargetError(f"{where} cannot be started: permission denied") from None
    except subprocess.TimeoutExpired as e:
        raise TargetError(f"{where} did not finish in {timeout_s:g} s (config "
                          f"`compiler_timeout_s`){_stderr(e.stderr)}") from None
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise TargetError(f"{where} failed with exit status {done.returncode}"
                          f"{_stderr(done.stderr)}")
    if not out.is_file() or out.stat().st_size == 0:
        raise TargetError(f"{where} exited 0 but wrote nothing to {out}{_stderr(done.stderr)}")
    binary = out.read_bytes()
    return binary, CompilerRun(tuple(argv), seconds, done.stdout, done.stderr, len(binary))


def _stderr(text: Any) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = (text or "").strip()
    if not text:
        return " (no stderr)"
    if len(text) > STDERR_CHARS:
        text = "...\n" + text[-STDERR_CHARS:]
    return f"; its stderr:\n{text}"


class ExternalCompilerTarget(Target):
    """A target whose regions an outside compiler turns into binaries (see the module
    docstring). Its config needs `compiler` (the command) and `compiler_timeout_s`."""
    bit_exact: ClassVar[bool] = False
    # The command is the compiling machine's choice; an artifact never carries it.
    host_fields: ClassVar[dict[str, str | None]] = {"compiler": None,
                                                    "compiler_timeout_s": None}

    def compiler_config(self) -> dict | None:
        """The hardware parameters written into the document for the compiler (None: none)."""
        return None

    def load_binary(self, region: Region, binary: bytes, run: CompilerRun) -> Kernel:
        """The kernel that runs the compiler's `binary` for `region`."""
        raise NotImplementedError(f"target {self.name!r} does not implement load_binary()")

    def lower(self, region: Region) -> Kernel:
        with tempfile.TemporaryDirectory(prefix=f"retarget-{self.name}-") as tmp:
            binary, run = run_compiler(self.config.compiler, region, self.name,
                                       float(self.config.compiler_timeout_s), Path(tmp),
                                       self.compiler_config())
        kernel = self.load_binary(region, binary, run)
        kernel.compiler_run = run
        return kernel


__all__ = ["CompilerRun", "ExternalCompilerTarget", "PLACEHOLDERS", "run_compiler"]

"""Every network `zoo.exported()` ships, on every target, as a user runs it: `retarget
compile MODEL --target T -o DIR`, then `retarget run DIR --input x.npy --check` in a fresh
process. Each case either runs the saved artifact and passes its check, or is refused at
compile time with one line (exit status 2, no traceback). Never a traceback, never a
warning that a summary failed, never an artifact that the compile wrote and the loader
refuses.

The exports are static at 224 x 224 (their reshapes and position embeddings are fixed by the
exporter), so this is the smallest size they run at; the test is slow and marked so
(`pytest -m "not slow"` leaves it out; CI runs it). Each network's six cases run two at a
time, one per core. The generated C is built at -O1 rather than the c / sunway defaults:
what is tested is the artifact's path through save, load and check, not the C compiler's
optimiser, and -O1 builds in half the time.

With RETARGET_EXPORTS_TABLE=FILE the networks x targets table is appended to FILE."""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

from retarget import zoo

TARGETS = ("vta", "dnnvm", "nvdla:nv_small", "nvdla:nv_full", "c", "sunway")
C_BUILD = ["--config", "cflags=-O1 -std=c99"]
EXTRA = {"c": C_BUILD, "sunway": C_BUILD}
SHAPE = (1, 3, 224, 224)
TIMEOUT_S = 1200
# One thread per process: the cases already run two at a time on two cores.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True, slots=True)
class Outcome:
    target: str
    verdict: str           # "pass", "refused" (the one-line reason) or "FAIL"
    detail: str

    @property
    def ok(self) -> bool:
        return self.verdict in ("pass", "refused")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retarget", *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=ENV)


def errors(stderr: str) -> list[str]:
    """The CLI's error lines (Python warnings, which look different, are left out)."""
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def one_case(model: Path, calib: Path, x: Path, target: str, work: Path) -> Outcome:
    out = work / target.replace(":", "_")
    done = cli("compile", str(model), "--target", target, "-o", str(out), "--calibration",
               str(calib), *EXTRA.get(target.partition(":")[0], []))
    if done.returncode == 2 and "Traceback" not in done.stderr and len(errors(done.stderr)) == 1:
        return Outcome(target, "refused", errors(done.stderr)[0])
    # a summary or report that failed is a warning to a user, and a bug here
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    if done.returncode != 0 or "Traceback" in done.stderr or warned:
        return Outcome(target, "FAIL", f"compile exit {done.returncode}: "
                       f"{done.stderr.strip()[-2000:]}")
    run = cli("run", str(out), "--input", str(x), "--check")
    shutil.rmtree(out)   # up to a few hundred MB (c keeps float weights twice)
    checks = [line for line in run.stdout.splitlines() if line.startswith("check ")]
    if run.returncode == 0 and checks and "Traceback" not in run.stderr:
        return Outcome(target, "pass", "; ".join(checks))
    return Outcome(target, "FAIL", f"run exit {run.returncode}: {run.stdout.strip()[-500:]} "
                   f"{run.stderr.strip()[-2000:]}")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("exports")
    rng = np.random.default_rng(0)
    calib, x = d / "calib.npz", d / "x.npy"
    np.savez(calib, input=rng.standard_normal(SHAPE).astype(np.float32))
    np.save(x, rng.standard_normal(SHAPE).astype(np.float32))
    return calib, x


def row(name: str, outcomes: list[Outcome], wall: float, cpu: float) -> str:
    """A markdown row: each target's verdict, then the wall time and the CPU time of every
    process the cases ran (on an idle two-core machine the wall time is about half that)."""
    cells = [o.verdict if o.verdict != "refused" else f"refused: {o.detail}"
             for o in outcomes]
    return f"| {name} | " + " | ".join(cells) + f" | {wall:.0f} s | {cpu:.0f} s |"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.EXPORTS)
def test_every_target_compiles_saves_loads_and_checks(name, inputs, tmp_path):
    calib, x = inputs
    model = tmp_path / f"{name}.onnx"
    onnx.save(zoo.exported(name), str(model))
    t0, cpu0 = time.perf_counter(), children_cpu()
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda t: one_case(model, calib, x, t, tmp_path), TARGETS))
    table = os.environ.get("RETARGET_EXPORTS_TABLE")
    if table:
        with open(table, "a", encoding="utf-8") as f:
            f.write(row(name, outcomes, time.perf_counter() - t0, children_cpu() - cpu0)
                    + "\n")
    bad = [f"{o.target}: {o.detail}" for o in outcomes if not o.ok]
    assert not bad, f"{name}:\n" + "\n".join(bad)

"""`retarget deploy`: the standalone C program of a vta module compiled with --host c, built
with make and run from a temporary directory with no Python on PATH, gives outputs identical
to `retarget run` on the same artifact; bad inputs are refused by the program; targets and
hosts it does not deploy are refused clearly."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from retarget import cli
from retarget.errors import InputError, UnsupportedOpError
from retarget.deploy import build_program, deploy, deployable, run_program
from retarget.runtime.module import Module

from .test_host_c import _compile, _data

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="needs gcc and make")
TOOLS = ("make", "gcc", "cc", "as", "ld")


def toolchain_only_path(tmp_path: Path) -> str:
    """A PATH of one directory holding the build tools and nothing else (no python)."""
    bin_dir = tmp_path / "toolbin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    assert shutil.which("python3", path=str(bin_dir)) is None
    assert shutil.which("python", path=str(bin_dir)) is None
    return str(bin_dir)


def build_and_run(project: Path, tmp_path: Path, x: dict, cflags: str = "-O1") -> dict:
    """make and run with only the build tools on PATH (and no environment at all to run)."""
    program = build_program(project, [f"CFLAGS={cflags}"],
                            env={"PATH": toolchain_only_path(tmp_path), "HOME": str(tmp_path)})
    names = [v.name for v in Module.load(project.parent / "art").graph.outputs]
    outs, _ = run_program(program, list(x.values()), len(names), env={})
    again, timing = run_program(program, list(x.values()), len(names), repeat=3, env={})
    assert timing is not None and timing.wall_ms > 0 and all(np.array_equal(a, b) for a, b in zip(outs, again)), \
        "the third inference of one process differs from the first"
    return dict(zip(names, outs))


# the host routines' plain C99 fallback (what a cross-compile without vector extensions
# builds) and the generic vector build; the demo's test builds with the default -march=native
@pytest.mark.parametrize("name,cflags", [("resnet18", "-O1 -DRT_PORTABLE"),
                                         ("googlenet", "-O1")])
def test_deployed_program_equals_retarget_run(name, cflags, tmp_path):
    m = _compile(name, "vta")
    x = _data(m.graph, 5)
    m.save(tmp_path / "art")
    m.close()
    # `retarget run` on the artifact, and the deployed program, on the same input
    np.save(tmp_path / "x.npy", next(iter(x.values())))
    assert cli.main(["run", str(tmp_path / "art"), "--input", str(tmp_path / "x.npy"),
                     "--output", str(tmp_path / "want.npy")]) == 0
    want = np.load(tmp_path / "want.npy")
    assert cli.main(["deploy", str(tmp_path / "art"), "-o", str(tmp_path / "project")]) == 0
    got = build_and_run(tmp_path / "project", tmp_path, x, cflags)
    (y,) = got.values()
    assert y.dtype == want.dtype and y.shape == want.shape and np.array_equal(y, want)


def test_the_program_checks_its_inputs(tmp_path):
    m = _compile("resnet18", "vta")
    m.save(tmp_path / "art")
    project = deploy(m, tmp_path / "project")
    m.close()
    build_program(project, ["CFLAGS=-O1"], env={"PATH": toolchain_only_path(tmp_path)})
    np.save(tmp_path / "bad.npy", np.zeros((1, 3, 8, 8), np.float32))
    r = subprocess.run([str(project / "model"), "--input", str(tmp_path / "bad.npy"), "--output",
                        str(tmp_path / "y.npy")], capture_output=True, text=True, env={})
    assert r.returncode == 1 and "must be '<f4'(1, 3, 32, 32)" in r.stderr
    r = subprocess.run([str(project / "model")], capture_output=True, text=True, env={})
    assert r.returncode == 2 and "1 input(s) and 1 output(s) needed" in r.stderr


def test_deploy_refuses_what_it_does_not_do():
    with pytest.raises(UnsupportedOpError, match="target 'dnnvm' is not supported yet"):
        deploy(_compile("resnet18", "dnnvm"), "/nonexistent/never-written")
    with pytest.raises(InputError, match="compile it with --host c"):
        deploy(_compile("resnet18", "vta", host=None), "/nonexistent/never-written")


def test_demo_deploy(capsys):
    assert cli.main(["demo", "--deploy", "--limit", "80"]) == 0
    out = capsys.readouterr().out
    assert "outputs equal retarget run's: 80/80 images" in out and "demo: OK" in out
    assert "top-1 int8 (deployed program)" in out


SHIM = r"""
/* Another implementation of the driver API for the test: retarget's simulator driver with
 * VTADeviceRun wrapped to count the runs, which it writes to runs.txt at exit. */
#include <stdio.h>
#include <stdlib.h>
#define VTADeviceRun sim_VTADeviceRun
#include "vta/vta_driver_sim.c"
#undef VTADeviceRun
static unsigned runs;
static void report(void) { FILE *f = fopen("runs.txt", "w"); fprintf(f, "%u\n", runs); fclose(f); }
int VTADeviceRun(VTADeviceHandle d, vta_phy_addr_t insn, uint32_t count, uint32_t wait) {
  if (runs++ == 0) atexit(report);
  return sim_VTADeviceRun(d, insn, count, wait);
}
"""


def test_make_links_another_driver(tmp_path):
    m = _compile("resnet18", "vta")
    x = _data(m.graph, 6)
    want = m.run(x)
    vta_regions = len(m.offloaded)
    project = deploy(m, tmp_path / "project")
    m.close()
    (project / "shim.c").write_text(SHIM)
    program = build_program(project, ["CFLAGS=-O1", "VTA_DRIVER=shim.c vta/vta_csim.c"])
    work = tmp_path / "work"
    work.mkdir()
    np.save(work / "x.npy", next(iter(x.values())))
    subprocess.run([str(program), "--input", "x.npy", "--output", "y.npy"], cwd=work,
                   check=True, env={}, capture_output=True)
    assert np.array_equal(np.load(work / "y.npy"), next(iter(want.values())))
    # one stream per VTA region and inference
    assert vta_regions >= 1 and int((work / "runs.txt").read_text()) == vta_regions


def test_demo_deploys_only_what_deploy_supports(capsys):
    assert deployable("vta") and not deployable("dnnvm") and not deployable("vta,dnnvm")
    for target in ("dnnvm", "vta,dnnvm"):
        assert cli.main(["demo", "--deploy", "--target", target, "--limit", "1"]) == 2
        assert f"target {target!r} is not deployed yet" in capsys.readouterr().err

"""An artifact never runs what it carries (docs/guarantees.md, "What an artifact may set"):
a manifest's compiler, flags, build directory or device memory are ignored (with a note);
the loading machine's defaults, environment (RETARGET_CC, RETARGET_CFLAGS) or the caller's
explicit options decide them."""
from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from retarget.cli import main
from retarget.errors import TargetError
from retarget.runtime.artifact import reseal
from retarget.runtime.module import Module


def _hostile(d, marker, **fields):
    m = json.loads((d / "manifest.json").read_text())
    m["target"]["config"].update(fields)
    (d / "manifest.json").write_text(json.dumps(m))
    reseal(d)   # anyone can: checksums catch accidents, not attackers


def _shell(marker) -> dict:
    """cc and cflags that, run, would create `marker` (and build nothing)."""
    return {"cc": "sh", "cflags": f"-c {shlex.quote(f'touch {marker}')} --"}


@pytest.mark.parametrize("name", ["c", "sunway"])
def test_a_manifests_compiler_and_flags_are_never_run(name, request, fresh, tmp_path, quick_cc,
                                                      spawned):
    d, x, expected = request.getfixturevalue(f"{name}_artifact")
    work = fresh((d, x, expected))
    marker = tmp_path / "pwned"
    evil_dir = tmp_path / "evil_build_dir"
    _hostile(work, marker, **_shell(marker), build_dir=str(evil_dir), memory_bytes=1 << 40,
             **({"openmp": False} if name == "c" else {}))
    m = Module.load(work)
    got = m.run(x)
    m.close()
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-4, atol=1e-4)
    assert not marker.exists() and not evil_dir.exists()
    # the only process started is the loading machine's compiler with its own flags
    assert spawned and all(argv[0] == "gcc" and "-O0" in argv for argv in spawned), spawned
    assert not any("touch" in w or w == "sh" for argv in spawned for w in argv)
    notes = " ".join(m.notes)
    for f in ("cc", "cflags", "build_dir", "memory_bytes"):
        assert f"ignored target config {f}=" in notes, notes
    assert "RETARGET_CC" in notes


def test_the_cli_reports_the_ignored_fields_and_runs(c_artifact, fresh, tmp_path, quick_cc,
                                                     capsys):
    work = fresh(c_artifact)
    marker = tmp_path / "pwned"
    _hostile(work, marker, **_shell(marker))
    assert main(["run", str(work)]) == 0
    err = capsys.readouterr().err
    assert "note:" in err and "ignored target config cc='sh'" in err
    assert not marker.exists()


def test_new_artifacts_record_no_host_fields(c_artifact, sunway_artifact, nvdla_artifact):
    for d, _, _ in (c_artifact, sunway_artifact, nvdla_artifact):
        config = json.loads((d / "manifest.json").read_text())["target"]["config"]
        assert not {"cc", "cflags", "build_dir", "memory_bytes", "openmp", "compiler",
                    "compiler_timeout_s"} & set(config), config


def test_host_fields_come_from_the_environment_or_an_explicit_option(c_artifact, monkeypatch):
    d, _, _ = c_artifact
    monkeypatch.setenv("RETARGET_CC", "cc")
    monkeypatch.setenv("RETARGET_CFLAGS", "-O1 -std=c99")
    m = Module.load(d)
    kernel = next(iter(m.kernels.values()))
    assert (kernel.options.cc, kernel.options.cflags) == ("cc", "-O1 -std=c99")
    m = Module.load(d, config={"cflags": "-O2 -std=c99", "openmp": "false"})
    kernel = next(iter(m.kernels.values()))
    assert (kernel.options.cflags, kernel.options.openmp) == ("-O2 -std=c99", False)
    with pytest.raises(TargetError, match="fixed by its program"):
        Module.load(d, config={"mode": "naive"})
    monkeypatch.setenv("RETARGET_CC", "  ")
    with pytest.raises(TargetError, match="RETARGET_CC"):
        Module.load(d)


def test_an_nvdla_manifests_compiler_command_is_ignored(nvdla_artifact, fresh, tmp_path):
    from retarget.targets.nvdla.config import BUNDLED_COMPILER
    d, x, expected = nvdla_artifact
    work = fresh(nvdla_artifact)
    marker = tmp_path / "pwned"
    _hostile(work, marker, compiler=f"sh -c 'touch {marker}' {{json}}", compiler_timeout_s=1e9)
    m = Module.load(work)
    assert m.target.config.compiler == BUNDLED_COMPILER
    assert m.target.config.compiler_timeout_s == 300.0
    got = m.run(x)
    m.close()
    assert all(np.array_equal(got[k], expected[k]) for k in expected)
    assert not marker.exists() and any("compiler" in n for n in m.notes)

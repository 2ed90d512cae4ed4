"""Artifact integrity (docs/guarantees.md): a damaged, swapped, truncated, replaced or
malformed artifact is refused by Module.load, naming the file, before anything runs."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from retarget import cli
from retarget.errors import ModelLoadError, RetargetError
from retarget.runtime.artifact import reseal
from retarget.runtime.module import Module


def _insn_files(d):
    return sorted(d.glob("kernels/*/program.insn.bin"))


def _flip(path, byte, bit=0):
    data = bytearray(path.read_bytes())
    data[byte] ^= 1 << bit
    path.write_bytes(bytes(data))


def _manifest(d):
    return json.loads((d / "manifest.json").read_text())


def _write_manifest(d, m):
    (d / "manifest.json").write_text(json.dumps(m))


def test_intact_artifact_loads_and_runs_identically(vta_artifact):
    d, x, expected = vta_artifact
    m = Module.load(d)
    got = m.run(x)
    assert all(np.array_equal(got[k], expected[k]) for k in expected)


@pytest.mark.parametrize("damage", ["empty", "truncate", "flip_insn", "flip_weights", "swap",
                                    "delete"])
def test_damaged_files_are_refused_naming_the_file(vta_artifact, fresh, damage):
    d = fresh(vta_artifact)
    streams = _insn_files(d)
    target = streams[0]
    if damage == "empty":
        target.write_bytes(b"")
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-16])
    elif damage == "flip_insn":
        _flip(target, 5, 3)
    elif damage == "flip_weights":
        target = d / "weights.npz"
        _flip(target, os.path.getsize(target) // 2)
    elif damage == "swap":
        assert len(streams) >= 2, "the fixture network must have two vta regions"
        a, b = streams[0].read_bytes(), streams[1].read_bytes()
        streams[0].write_bytes(b)
        streams[1].write_bytes(a)
    elif damage == "delete":
        target.unlink()
    with pytest.raises(ModelLoadError, match=str(target.relative_to(d.parent)).replace("/", ".")):
        Module.load(d)


def test_no_verify_skips_only_the_checksums(vta_artifact, fresh):
    d = fresh(vta_artifact)
    _flip(d / "weights.npz", os.path.getsize(d / "weights.npz") - 30)   # inside the zip index
    with pytest.raises(ModelLoadError, match="SHA-256"):
        Module.load(d)
    with pytest.raises(RetargetError):   # the .npz reader itself now finds it damaged
        Module.load(d, verify=False)
    (d / "graph.json").write_text((d / "graph.json").read_text() + " ")   # size changes
    with pytest.raises(ModelLoadError, match="bytes, the manifest records"):
        Module.load(d, verify=False)


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "outside"])
def test_only_regular_files_inside_the_artifact_are_read(vta_artifact, fresh, tmp_path, kind):
    d = fresh(vta_artifact)
    victim = _insn_files(d)[0]
    victim.unlink()
    if kind == "dev_zero":
        victim.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(victim)
    else:
        outside = tmp_path / "elsewhere.bin"
        outside.write_bytes(b"\0" * 64)
        victim.symlink_to(outside)
    with pytest.raises(ModelLoadError, match="symbolic link|not a regular file"):
        Module.load(d)


@pytest.mark.parametrize("path", ["../outside.bin", "/etc/passwd", "kernels/../../x", "a//b"])
def test_manifest_paths_escaping_the_artifact_are_reported_as_such(vta_artifact, fresh, path):
    d = fresh(vta_artifact)
    m = _manifest(d)
    m["files"][path] = {"size": 1, "sha256": "0" * 64}
    _write_manifest(d, m)
    with pytest.raises(ModelLoadError, match="escapes the artifact directory"):
        Module.load(d)


def test_manifest_target_must_be_a_registered_name_never_a_path(vta_artifact, fresh, tmp_path):
    d = fresh(vta_artifact)
    cfg = tmp_path / "mine.toml"
    cfg.write_text('target = "vta"\n')
    m = _manifest(d)
    m["target"]["name"] = str(cfg)
    _write_manifest(d, m)
    with pytest.raises(ModelLoadError, match="not a registered target"):
        Module.load(d)


@pytest.mark.parametrize("edit", ["config_list", "regions_reordered", "deep_nesting",
                                  "preset_number", "region_missing_key", "files_not_dict",
                                  "report_list"])
def test_malformed_manifests_are_one_clear_error(vta_artifact, fresh, edit):
    d = fresh(vta_artifact)
    m = _manifest(d)
    if edit == "config_list":
        m["target"]["config"] = list(m["target"]["config"].items())
    elif edit == "regions_reordered":
        m["regions"] = m["regions"][::-1]
    elif edit == "preset_number":
        m["target"]["preset"] = 3
    elif edit == "region_missing_key":
        del m["regions"][0]["inputs"]
    elif edit == "files_not_dict":
        m["files"] = []
    elif edit == "report_list":
        m["report"] = []
    if edit == "deep_nesting":
        text = json.dumps(m)[:-1] + ', "x": ' + "[" * 100000 + "]" * 100000 + "}"
        (d / "manifest.json").write_text(text)
    else:
        _write_manifest(d, m)
    with pytest.raises(ModelLoadError, match="manifest"):
        Module.load(d)


def test_a_graph_with_a_cycle_is_refused_on_load(vta_artifact, fresh):
    d = fresh(vta_artifact)
    g = json.loads((d / "graph.json").read_text())
    # feed the last node's output back into the first node
    g["nodes"][0]["inputs"][0] = g["nodes"][-1]["outputs"][0]
    (d / "graph.json").write_text(json.dumps(g))
    reseal(d)
    with pytest.raises(ModelLoadError, match="graph.json"):
        Module.load(d)


@pytest.mark.parametrize("field,value", [("dram_bytes", 1 << 50), ("uop_base", 1 << 40),
                                         ("dram_bytes", -1), ("buffer_offset", 1 << 40),
                                         ("layer_stop", 1 << 20)])
def test_out_of_range_program_json_is_refused(vta_artifact, fresh, field, value):
    d = fresh(vta_artifact)
    path = sorted(d.glob("kernels/*/program.json"))[0]
    meta = json.loads(path.read_text())
    if field == "buffer_offset":
        meta["buffers"][0]["offset"] = value
    elif field == "layer_stop":
        meta["layers"][0][2] = value
    else:
        meta[field] = value
    path.write_text(json.dumps(meta))
    reseal(d)
    with pytest.raises(RetargetError, match="vta kernel|tensor limit|DRAM image"):
        Module.load(d)


def test_cli_run_of_a_damaged_artifact_exits_2_with_one_line(vta_artifact, fresh, capsys):
    d = fresh(vta_artifact)
    _flip(_insn_files(d)[0], 0)
    assert cli.main(["run", str(d), "--random"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "SHA-256" in err[0] and "Traceback" not in err[0]
    assert cli.main(["run", str(d), "--random", "--no-verify"]) in (0, 2)


def test_cli_run_of_an_artifact_writes_output_and_refuses_input_shape(vta_artifact, tmp_path,
                                                                       capsys):
    d, x, expected = vta_artifact
    (name, arr), = x.items()
    np.save(tmp_path / "x.npy", arr)
    out = tmp_path / "y.npy"
    assert cli.main(["run", str(d), "--input", str(tmp_path / "x.npy"), "--output", str(out)]) == 0
    np.testing.assert_array_equal(np.load(out), next(iter(expected.values())))
    assert cli.main(["run", str(d), "--random", "--input-shape", "1,3,8,8"]) == 2
    assert "input shapes were fixed" in capsys.readouterr().err

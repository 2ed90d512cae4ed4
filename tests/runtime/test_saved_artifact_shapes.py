"""The saved artifact runs what the in-memory module runs, on every target, for the shapes a
zoo CNN never makes: token-shaped (rank 3) region inputs and outputs, a rank-1 output, a
scalar (rank 0) output, and views between host-only ops (a region of views alone). Compiled
with `retarget compile -o`, then `retarget run DIR --check` in a fresh process."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest

from retarget.cli import main
from retarget.zoo.builder import OnnxBuilder

TARGETS = ("vta", "dnnvm", "nvdla:nv_small", "nvdla:nv_full", "c", "sunway")


def awkward_model():
    """x[1,3,8,8] -> patch conv -> Reshape [1,4,16] -> Transpose -> dense + ReLU [1,16,8]
    -> Transpose, Reshape, Transpose (a reshape between two host-only transposes) -> Reshape
    [1,8,4,4] -> conv + ReLU -> y = ReLU(Reshape [64]) (rank 1), s = ReduceSum (rank 0)."""
    b = OnnxBuilder("awkward", seed=6)
    x = b.input("x", (1, 3, 8, 8))
    h = b.conv(x, 4, 2, "embed", stride=2, pad=0, bias=True)
    t = b.transpose(b.reshape(h, (1, 4, 16), "flat"), (0, 2, 1), "tokens")
    t = b.relu(b.linear(t, 8, "fc"), "fc_relu")
    v = b.transpose(t, (0, 2, 1), "t1")
    v = b.transpose(b.reshape(v, (1, 2, 64), "r"), (0, 2, 1), "t2")
    m = b.relu(b.conv(b.reshape(v, (1, 8, 4, 4), "r2"), 4, 1, "mix", bias=True), "mix_relu")
    b.output(b.relu(b.reshape(m, (64,), "flat1"), "r1"), "y")
    b.output(b.reduce_sum(m, [0, 1, 2, 3], "total", keepdims=0), "s")
    return b.model()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("awkward")
    model, x = d / "awkward.onnx", d / "x.npy"
    model.write_bytes(awkward_model().SerializeToString())
    np.save(x, np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32))
    return model, x


def bindings(out) -> list[list[int]]:
    """Every region input and output shape in the artifact's kernel.json files."""
    shapes = []
    for f in sorted(out.glob("kernels/*/kernel.json")):
        doc = json.loads(f.read_text())
        shapes += [b["shape"] for b in doc["inputs"] + doc["outputs"]]
    return shapes


@pytest.mark.parametrize("target", TARGETS)
def test_the_saved_artifact_checks_in_a_fresh_process(target, files, tmp_path, capsys):
    model, x = files
    out = tmp_path / "mod"
    assert main(["compile", str(model), "--target", target, "-o", str(out)]) == 0
    placed = capsys.readouterr().out
    run = subprocess.run([sys.executable, "-m", "retarget", "run", str(out), "--input",
                          str(x), "--check"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    checks = [line for line in run.stdout.splitlines() if line.startswith("check ")]
    assert len(checks) == 2 and "MISMATCH" not in run.stdout, run.stdout
    if target.startswith("nvdla"):
        # the shapes this is about really cross the host <-> device boundary here
        assert {3, 1} <= {len(s) for s in bindings(out)}, bindings(out)
        row = next(line for line in placed.splitlines() if line.startswith("/r/Reshape"))
        assert " cpu " in row and "views only" in row


@pytest.mark.parametrize("target", ["vta", "dnnvm"])
def test_a_binding_its_layout_cannot_hold_is_refused_on_load(target, files, tmp_path):
    """vta and dnnvm lay out NCHW maps and (rows, cols) matrices only: a kernel.json that
    binds a rank-3 tensor is refused when the kernel is made, on load as at compile time."""
    import retarget
    from retarget.errors import ModelLoadError
    from retarget.runtime.module import Module
    model, _ = files
    m = retarget.compile(str(model), target)
    m.save(tmp_path / "art")
    m.close()
    doc_path = next((tmp_path / "art").glob("kernels/*/kernel.json"))
    doc = json.loads(doc_path.read_text())
    shape = doc["outputs"][0]["shape"]
    doc["outputs"][0]["shape"] = [1, shape[0], int(np.prod(shape[1:]))]
    data = json.dumps(doc).encode()
    doc_path.write_bytes(data)
    # the manifest vouches for the edited file, as it would for a compile that bound it
    manifest = tmp_path / "art" / "manifest.json"
    meta = json.loads(manifest.read_text())
    meta["files"][doc_path.relative_to(tmp_path / "art").as_posix()] = {
        "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest.write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match="lays out tensors of rank 2 or 4 only"):
        Module.load(tmp_path / "art")

"""What the in-memory module runs, the saved artifact runs too: nvdla regions whose inputs or
outputs are token-shaped (rank 3, as a ViT's patch embedding leaves them), and regions that
compile to a loadable of no layers (views only). Each goes through `retarget compile -o`,
then `retarget run DIR --check` in a fresh process, as a user would."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import retarget
from retarget.cli import main
from retarget.frontend.onnx import import_model
from retarget.runtime.module import Module
from retarget.ops.reference import run_graph
from retarget.targets.nvdla.target import NvdlaTarget
from retarget.zoo.builder import OnnxBuilder

from .conftest import samples


def patch_embedding():
    """x[1,3,8,8] -> conv 4 (2x2, stride 2) -> Reshape [1,4,16] -> Transpose -> y[1,16,4]: the
    nvdla region ends in the reshape, so its output is bound as a rank-3 tensor."""
    b = OnnxBuilder("tokens", seed=1)
    x = b.input("x", (1, 3, 8, 8))
    h = b.conv(x, 4, 2, "embed", stride=2, pad=0, bias=True)
    b.output(b.transpose(b.reshape(h, (1, 4, 16), "flat"), (0, 2, 1), "tokens"), "y")
    return b.model()


def views_between_host_ops():
    """conv -> Transpose -> Reshape -> Transpose -> Reshape -> conv: the middle Reshape sits
    between two host-only Transposes, a region of views alone; the second conv's region
    reads a rank-3 input."""
    b = OnnxBuilder("views", seed=2)
    x = b.input("x", (1, 3, 8, 8))
    h = b.transpose(b.conv(x, 4, 1, "c1", bias=True), (0, 2, 3, 1), "t1")
    h = b.transpose(b.reshape(h, (1, 8, 32), "r"), (0, 2, 1), "t2")
    b.output(b.conv(b.reshape(h, (1, 32, 8, 1), "r2"), 4, 1, "c2", bias=True), "y")
    return b.model()


def compile_and_run_fresh(model, tmp_path, capsys) -> tuple[str, dict]:
    """`retarget compile` here, `retarget run --check` in a new interpreter; returns the
    compile's stdout and each kernel's kernel.json."""
    path, out = tmp_path / "m.onnx", tmp_path / "mod"
    onnx.save(model, str(path))
    assert main(["compile", str(path), "--target", "nvdla:nv_small", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    x = tmp_path / "x.npy"
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    np.save(x, np.random.default_rng(5).standard_normal(shape).astype(np.float32))
    run = subprocess.run([sys.executable, "-m", "retarget", "run", str(out), "--input", str(x),
                          "--check"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "bit-exact" in run.stdout and not run.stderr.strip(), run.stdout + run.stderr
    docs = {d.name: json.loads((d / "kernel.json").read_text())
            for d in sorted((out / "kernels").iterdir())}
    return text, docs


def test_a_token_shaped_output_binding_loads_in_a_fresh_process(tmp_path, capsys):
    _, docs = compile_and_run_fresh(patch_embedding(), tmp_path, capsys)
    shapes = [b["shape"] for d in docs.values() for b in d["outputs"]]
    assert [1, 4, 16] in shapes            # the case the loader used to refuse


def test_a_region_of_views_alone_stays_on_the_host(tmp_path, capsys):
    text, docs = compile_and_run_fresh(views_between_host_ops(), tmp_path, capsys)
    row = next(line for line in text.splitlines() if line.startswith("/r/Reshape"))
    assert " cpu " in row and "views only" in row
    assert len(docs) == 2                  # the two convolutions' regions, nothing between
    assert [1, 32, 8] in [b["shape"] for d in docs.values() for b in d["inputs"]]


class KeepsViewRegions(NvdlaTarget):
    """nvdla without the rule that sends regions of views alone to the host: what a
    loadable of no layers does in the runtime, the reports and the artifact."""

    def check_region(self, nodes, graph):
        return self.accumulator_splits(nodes, graph)


def test_a_loadable_of_no_layers_runs_times_and_saves(tmp_path):
    g = import_model(views_between_host_ops())
    m = retarget.compile(g, KeepsViewRegions(preset="nv_small"), calibration=samples(g, 2))
    empty = [k for k in m.kernels.values() if len(k.program.loadable.layers) == 0]
    assert len(empty) == 1
    k = empty[0]
    assert k.timing().total_cycles == 0 and k.timing().layers == []
    assert "0 hardware layers" in k.summary() and "0 cycles" in k.summary()
    x = samples(g, seed=3)[0]
    want = run_graph(m.graph, x)
    np.testing.assert_array_equal(m.run(x)["y"], want["y"])
    m.save(tmp_path / "art")
    loaded = Module.load(tmp_path / "art")
    np.testing.assert_array_equal(loaded.run(x)["y"], want["y"])
    loaded.close()
    m.close()


@pytest.mark.parametrize("shape", [[1, 192, 196], [7], [2, 3, 4, 5, 6], []])
def test_a_binding_of_any_rank_round_trips(shape):
    from retarget.targets.accel.kernel import Binding
    b = Binding("v", "buf", tuple(shape))
    assert Binding.from_json(json.loads(json.dumps(b.to_json()))) == b


@pytest.mark.parametrize("shape", [[1, 0, 4], [1, -2], [1.5, 2], ["3"]])
def test_a_binding_with_a_bad_dimension_is_refused_when_made_and_when_read(shape):
    from retarget.errors import TargetError
    from retarget.targets.accel.kernel import Binding
    with pytest.raises(TargetError, match="not a positive integer"):
        Binding.from_json({"value": "v", "buffer": "buf", "shape": shape})
    with pytest.raises(TargetError, match="not a positive integer"):
        Binding("v", "buf", tuple(shape))


def tokens_on_a_grid(concat: bool):
    """conv -> Transpose to NHWC [1,6,6,16] -> dense layer(s) over the last axis (Swin's patch
    merging: a rank-4 value with its features last), optionally two of them joined along
    axis 1: the dense layer writes rows x features, not the NCHW map the rank suggests."""
    b = OnnxBuilder("grid", seed=3)
    x = b.input("x", (1, 4, 6, 6))
    h = b.transpose(b.conv(x, 16, 1, "c", bias=True), (0, 2, 3, 1), "nhwc")
    y = b.linear(h, 8, "fa")
    if concat:
        y = b.concat([y, b.linear(h, 8, "fb")], "cat", axis=1)
    b.output(y, "y")
    return b.model()


@pytest.mark.parametrize("concat", [False, True])
def test_a_dense_layer_over_a_rank4_value_runs_bit_exact(concat, tmp_path):
    g = import_model(tokens_on_a_grid(concat))
    m = retarget.compile(g, "nvdla:nv_small", calibration=samples(g, 2))
    assert {n.op for n in m.report.nodes if n.placement == "nvdla"} >= \
        ({"MatMul", "Concat"} if concat else {"MatMul"})
    x = samples(g, seed=4)[0]
    want = run_graph(m.graph, x)["y"]
    np.testing.assert_array_equal(m.run(x)["y"], want)
    m.save(tmp_path / "art")
    loaded = Module.load(tmp_path / "art")
    np.testing.assert_array_equal(loaded.run(x)["y"], want)
    loaded.close()
    m.close()

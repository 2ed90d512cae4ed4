"""The zoo networks the c target was built for, compiled to C at test sizes: every node runs as generated C (no CPU
fallback) and the outputs are within 1e-4 relative of the NumPy reference, in the optimised
schedule (the hand-written routines for convs and dense layers, built with vector extensions
and as portable C99; register tiles, explicit padding, folded BatchNorm) and in the
buffered one (swTVM's buffering, loop order and copies in 32 KB)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.ops.reference import run_graph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

# -O1: these tests check the generated code's meaning, not its speed, and build 4x faster
CONFIG = {"cflags": "-O1 -std=c99", "openmp": False}
NETS = {
    "resnet18": dict(size=32, width=0.25, num_classes=10),
    "resnet50": dict(size=32, width=0.125, num_classes=10),
    "vgg11": dict(size=32, width=0.125, num_classes=10),
    "googlenet": dict(size=32, width=0.125, num_classes=10),
    "mobilenet_v1": dict(size=32, width=0.25, num_classes=10),
    "mobilenet_v2": dict(size=32, width=0.25, num_classes=10),
    "alexnet": dict(size=63, width=0.125, num_classes=10),
    "unet": dict(size=16, width=0.25),
}


def check_all_c_within_1e4(graph, config) -> set[str]:
    """Compile `graph` for c, require every node on C and the outputs within 1e-4 of the
    reference; returns the ops it ran."""
    module = retarget.compile(graph, "c", config=config)
    try:
        on_cpu = [p for p in module.report.nodes if p.placement != "c"]
        assert not on_cpu, [(p.name, p.reason) for p in on_cpu]
        v = graph.inputs[0]
        x = {v.name: np.random.default_rng(3).standard_normal(v.type.shape).astype(np.float32)}
        out, ref = module.run(x), run_graph(graph, x)
        for k in ref:
            scale = float(np.max(np.abs(ref[k]))) or 1.0
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-4 * scale, err_msg=k)
        return {p.op for p in module.report.nodes}
    finally:
        module.close()


# "portable": the optimised schedule with the routines built without vector extensions
BUILDS = {"optimized": {"mode": "optimized"}, "buffered": {"mode": "buffered"},
          "portable": {"mode": "optimized", "cflags": CONFIG["cflags"] + " -DRT_PORTABLE"}}


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("name", sorted(NETS))
def test_network_runs_as_c_within_1e4(name, build):
    check_all_c_within_1e4(import_model(zoo.build(name, **NETS[name])), {**CONFIG, **BUILDS[build]})


def test_cli_compile_to_c_then_run_check_the_artifact(tmp_path, capsys):
    from retarget import cli
    model = tmp_path / "r18.onnx"
    model.write_bytes(zoo.build_bytes("resnet18", **NETS["resnet18"]))
    out = tmp_path / "out"
    assert cli.main(["compile", str(model), "--target", "c", "-o", str(out),
                     "--config", "cflags=-O1 -std=c99", "--config", "openmp=false"]) == 0
    text = capsys.readouterr().out
    assert "c_0: " in text and "kernels (optimized), arena " in text
    # the routine calls and their packed weights survive the artifact round trip
    assert "rt_conv_f32(" in (out / "kernels" / "c_0" / "model.c").read_text()
    assert "__b32" in (out / "kernels" / "c_0" / "program.json").read_text()
    assert cli.main(["run", str(out), "--random", "--check"]) == 0
    text = capsys.readouterr().out
    assert "ok within rtol 0.0001" in text and "MISMATCH" not in text


def test_buffered_mode_buffers_every_conv_within_its_local_memory():
    from retarget.loopnest import walk
    from retarget.loopnest.ir import Copy
    graph = import_model(zoo.build("resnet18", **NETS["resnet18"]))
    module = retarget.compile(graph, "c", config={**CONFIG, "mode": "buffered",
                                                  "local_bytes": 16 * 1024})
    try:
        (kernel,) = module.kernels.values()
        convs = [c.kernel for c in kernel.program.calls if c.kernel.name.startswith("Conv_")]
        assert len(convs) == 20
        for k in convs:
            assert any(isinstance(s, Copy) for s, _ in walk(k.body)), k.name
            assert 0 < k.local_bytes <= 16 * 1024
    finally:
        module.close()


@pytest.mark.parametrize("name,kw", [("vit", dict(size=16)), ("convnext", dict(size=32))])
def test_transformer_builders_run_as_c_within_1e4(name, kw):
    ops = check_all_c_within_1e4(import_model(zoo.build(name, **kw)), CONFIG)
    assert "LayerNormalization" in ops

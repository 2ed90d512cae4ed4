"""The example target from examples/toy_accelerator.py: a ResNet-18 runs with its convolutions
on the toy device and everything else on the CPU, equal to the reference; its artifact round-
trips; the CLI compiles and runs it with --check."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import retarget
from retarget.runtime.module import Module
from retarget.ops.reference import run_graph
from retarget.targets.registry import load_plugin

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "toy_accelerator.py"


def toy():
    """The example target (examples/toy_accelerator.py), registered once per process."""
    return load_plugin(ROOT / "examples" / "toy_accelerator.py")


@pytest.fixture(scope="module")
def resnet_path(tmp_path_factory):
    from retarget import zoo
    path = tmp_path_factory.mktemp("zoo") / "resnet18.onnx"
    onnx.save(zoo.build("resnet18", size=32, num_classes=10, width=0.25), str(path))
    return path


@pytest.fixture(scope="module")
def resnet(resnet_path):
    toy()
    graph = retarget.load(resnet_path)
    return graph, retarget.compile(graph, "toy", min_region_macs=0)


def image(graph):
    v = graph.inputs[0]
    return {v.name: np.random.default_rng(3).standard_normal(v.type.shape).astype(np.float32)}


def test_resnet18_convs_on_the_toy_rest_on_cpu_equal_to_reference(resnet):
    graph, module = resnet
    placed = {p.name: p for p in module.report.nodes}
    convs = [n for n in graph.nodes if n.op == "Conv"]
    assert len(convs) == 20
    assert all(placed[n.name].placement == "toy" for n in convs)
    assert all(p.placement == "cpu" for p in placed.values() if p.op not in ("Conv", "Gemm", "Relu"))
    assert placed[graph.nodes[-1].name].op == "Gemm" and placed[graph.nodes[-1].name].placement == "toy"
    x = image(graph)
    out = module.run(x)
    ref = run_graph(graph, x)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-5)
    toy_regions = [p for p in module.profile if p.target == "toy"]
    assert sum(p.counters["macs"] for p in toy_regions) == module.report.summary["macs_on_target"]


def test_resnet18_save_load_run_identical(resnet, tmp_path):
    graph, module = resnet
    x = image(graph)
    before = module.run(x)
    module.save(tmp_path / "r18")
    after = Module.load(tmp_path / "r18").run(x)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def test_preset_and_refusal_reasons(resnet_path):
    toy()
    graph = retarget.load(resnet_path)
    module = retarget.compile(graph, "toy:tiny", min_region_macs=0)
    refused = [p for p in module.report.nodes if p.op == "Conv" and p.placement == "cpu"]
    # width 0.25: channels 16..128; tiny takes at most 64 input channels
    assert refused and all("> max_channels=64" in p.reason for p in refused)
    x = image(graph)
    np.testing.assert_allclose(module.run(x)["output"], run_graph(graph, x)["output"],
                               rtol=1e-5, atol=1e-5)


def _parser():
    from retarget.cli import build_parser
    return build_parser()


def test_cli_compile_then_run_with_check(resnet_path, tmp_path, capsys):
    parser = _parser()
    out_dir = tmp_path / "art"
    args = parser.parse_args(["compile", str(resnet_path), "--target", "toy", "--plugin",
                              str(EXAMPLE), "-o", str(out_dir), "--cpu-node", "/fc/*",
                              "--export-regions", str(tmp_path / "regions.json")])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "/conv1/Conv" in text and "forced onto cpu by '/fc/*'" in text and "region(s)" in text
    assert (out_dir / "manifest.json").is_file() and (tmp_path / "regions.json").is_file()
    args = parser.parse_args(["run", str(out_dir), "--plugin", str(EXAMPLE), "--check", "--profile"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "check output: ok" in text and "toy_0" in text
    # a model file compiled on the fly for a target
    args = parser.parse_args(["run", str(resnet_path), "--target", "toy", "--check",
                              "--config", "min_region_macs=0"])
    assert args.func(args) == 0
    assert "check output: ok" in capsys.readouterr().out

"""Small compiled modules the hardening tests damage: a vta one (instruction streams, packed
weights) and a toy-target one, compiled once per session and saved afresh per test."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.targets.registry import load_plugin

ROOT = Path(__file__).resolve().parents[2]


def _inputs(graph, seed=5):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in graph.inputs}


def _saved(module, graph, tmp_path_factory, name):
    """(artifact directory, inputs, expected outputs) of a compiled module, saved once."""
    x = _inputs(graph)
    out = tmp_path_factory.mktemp(name) / "art"
    module.save(out)
    expected = module.run(x)
    module.close()
    return out, x, expected


@pytest.fixture(scope="session")
def vta_artifact(tmp_path_factory):
    """A tiny ResNet-18 on vta (instruction streams, packed weights; two vta regions)."""
    g = import_model(zoo.build("resnet18", size=16, width=0.125, num_classes=10, seed=0))
    return _saved(retarget.compile(g, "vta", calibration=[_inputs(g, 1)]), g, tmp_path_factory,
                  "vta")


@pytest.fixture(scope="session")
def nvdla_artifact(tmp_path_factory):
    """A tiny ResNet-18 on nvdla (a loadable from the compiler process; multiplier format)."""
    g = import_model(zoo.build("resnet18", size=16, width=0.125, num_classes=10, seed=0))
    return _saved(retarget.compile(g, "nvdla:nv_small", calibration=[_inputs(g, 1)]), g,
                  tmp_path_factory, "nvdla")


@pytest.fixture(scope="session")
def toy_artifact(tmp_path_factory):
    """A small VGG-11 on the example plugin target (examples/toy_accelerator.py)."""
    load_plugin(ROOT / "examples" / "toy_accelerator.py")
    g = import_model(zoo.build("vgg11", size=32, width=0.125, num_classes=10, seed=0))
    return _saved(retarget.compile(g, "toy", min_region_macs=0), g, tmp_path_factory, "toy")


@pytest.fixture
def fresh(tmp_path):
    """copy(artifact) -> a private copy of a saved artifact to damage."""
    def copy(artifact) -> Path:
        dst = tmp_path / "copy"
        shutil.copytree(artifact[0], dst)
        return dst
    return copy


@pytest.fixture(scope="session")
def digits():
    """The bundled digits CNN and one input."""
    g = retarget.load(ROOT / "src/retarget/data/digits_cnn.onnx")
    return g, _inputs(g, 0)


def compile_digits(g, x, target: str):
    """The digits CNN compiled for `target` (C targets built quickly, at -O0; sunway on 8
    CPEs, so an emulated run starts 8 threads per layer, not 64)."""
    if target == "c":
        return retarget.compile(g, target, config={"cflags": "-O0 -std=c99"})
    if target == "sunway":
        return retarget.compile(g, target, config={"cflags": "-O0 -std=c99", "cpes_per_cg": 8})
    return retarget.compile(g, target, calibration=[x])


@pytest.fixture(scope="session")
def c_artifact(tmp_path_factory, digits):
    """The digits CNN on the c target (a generated C library built at load)."""
    g, x = digits
    return _saved(compile_digits(g, x, "c"), g, tmp_path_factory, "c")


@pytest.fixture(scope="session")
def sunway_artifact(tmp_path_factory, digits):
    """The digits CNN on the sunway target (C for the emulated CPEs, built at load)."""
    g, x = digits
    return _saved(compile_digits(g, x, "sunway"), g, tmp_path_factory, "sunway")


@pytest.fixture(scope="session")
def dnnvm_artifact(tmp_path_factory, digits):
    """The digits CNN on dnnvm (an instruction stream and its DRAM layout)."""
    g, x = digits
    return _saved(compile_digits(g, x, "dnnvm"), g, tmp_path_factory, "dnnvm")


@pytest.fixture
def quick_cc(monkeypatch):
    """The loading machine's C flags for these tests: quick builds (-O0)."""
    monkeypatch.setenv("RETARGET_CFLAGS", "-O0 -std=c99")
    monkeypatch.delenv("RETARGET_CC", raising=False)


@pytest.fixture
def spawned(monkeypatch):
    """Every command line a subprocess is started with during the test, recorded."""
    import subprocess
    seen: list[list[str]] = []
    real = subprocess.Popen

    class Recording(real):
        def __init__(self, args, *a, **kw):
            seen.append([str(w) for w in (args if isinstance(args, (list, tuple)) else [args])])
            super().__init__(args, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    return seen

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


@pytest.fixture(scope="session")
def vta_artifact(tmp_path_factory):
    """(artifact directory, inputs, expected outputs) of a tiny ResNet-18 on vta."""
    g = import_model(zoo.build("resnet18", size=16, width=0.125, num_classes=10, seed=0))
    m = retarget.compile(g, "vta", calibration=[_inputs(g, 1)])
    x = _inputs(g)
    out = tmp_path_factory.mktemp("vta") / "art"
    m.save(out)
    expected = m.run(x)
    m.close()
    return out, x, expected


@pytest.fixture(scope="session")
def toy_artifact(tmp_path_factory):
    load_plugin(ROOT / "examples" / "toy_accelerator.py")
    g = import_model(zoo.build("vgg11", size=32, width=0.125, num_classes=10, seed=0))
    m = retarget.compile(g, "toy", min_region_macs=0)
    x = _inputs(g)
    out = tmp_path_factory.mktemp("toy") / "art"
    m.save(out)
    expected = m.run(x)
    m.close()
    return out, x, expected


@pytest.fixture
def fresh(tmp_path):
    """copy(artifact) -> a private copy of a saved artifact to damage."""
    def copy(artifact) -> Path:
        dst = tmp_path / "copy"
        shutil.copytree(artifact[0], dst)
        return dst
    return copy

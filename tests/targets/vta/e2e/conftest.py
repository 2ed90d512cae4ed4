"""Shared helpers for the vta end-to-end tests: small zoo networks compiled for vta."""
import numpy as np
import pytest

from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.passes.calibrate import random_samples

# Test sizes: small inputs and reduced widths keep the directory well under 90 s; channel
# counts still cross block boundaries (8, 16, 24, 32 ... against BLOCK_IN 16/32).
NETS = {
    "resnet18": dict(size=32, width=0.25),
    "resnet50": dict(size=32, width=0.125),
    "mobilenet_v1": dict(size=32, width=0.25),
    "vgg11": dict(size=32, width=0.125),
    "googlenet": dict(size=32, width=0.125),
}


def build_graph(name: str, **extra):
    kw = dict(NETS[name], num_classes=10, seed=0)
    kw.update(extra)
    return import_model(zoo.build(name, **kw))


def calibration_for(graph, count: int = 2, seed: int = 1):
    """Seeded random calibration batches (explicit, so no warning)."""
    return random_samples(graph, count, seed)


def input_for(graph, seed: int = 2):
    return random_samples(graph, 1, seed)[0]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def r18_file(tmp_path):
    """A small ResNet-18 ONNX file and a calibration .npz for the CLI tests."""
    path = tmp_path / "r18.onnx"
    path.write_bytes(zoo.build_bytes("resnet18", num_classes=10, **NETS["resnet18"]))
    calib = tmp_path / "calib.npz"
    rng = np.random.default_rng(0)
    np.savez(calib, input=rng.standard_normal((4, 3, 32, 32)).astype(np.float32))
    return path, calib

"""Shared helpers for the vta end-to-end tests: small zoo networks compiled for vta."""
import numpy as np
import pytest

from retarget import zoo
from retarget.frontend.onnx import import_model

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
    rng = np.random.default_rng(seed)
    return [{v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in graph.inputs}
            for _ in range(count)]


def input_for(graph, seed: int = 2):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in graph.inputs}


@pytest.fixture
def rng():
    return np.random.default_rng(0)

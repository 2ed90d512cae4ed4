"""Helpers for the nvdla tests: small zoo networks and a tiny conv net compiled for the two
presets (cached for the whole session: every compile runs a compiler process per region)."""
from __future__ import annotations

import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.passes.calibrate import random_samples
from retarget.zoo.builder import OnnxBuilder

NETS = ("resnet18", "googlenet", "mobilenet_v1", "vgg11", "unet")
PRESETS = ("nv_small", "nv_full")


def build_graph(name: str):
    return import_model(zoo.build(name, size=32, num_classes=10, seed=0))


def tiny_model():
    """x[1,5,9,9] -> conv_a (8, 3x3, pad 1) -> relu -> conv_b (12, 3x3, stride 2, pad 1,
    groups 4) -> y[1,12,5,5]: two convolutions whose MACs and MAC-array cycles are easy to
    count by hand."""
    b = OnnxBuilder("tiny", seed=3)
    x = b.input("x", (1, 5, 9, 9))
    h = b.relu(b.conv(x, 8, 3, "conv_a", bias=True), "relu_a")
    y = b.conv(h, 12, 3, "conv_b", stride=2, pad=1, groups=4, bias=True)
    b.output(y, "y")
    return b.model()


def tiny_graph():
    return import_model(tiny_model())


def samples(graph, count: int = 1, seed: int = 1):
    return random_samples(graph, count, seed)


def compile_nvdla(graph, preset: str = "nv_full", **options):
    return retarget.compile(graph, f"nvdla:{preset}", calibration=samples(graph, 2), **options)


@pytest.fixture(scope="session")
def compiled():
    """compiled(name, preset) -> (graph, module), compiled once per session; name is a zoo
    network or "tiny"."""
    cache = {}

    def get(name: str, preset: str = "nv_full"):
        if (name, preset) not in cache:
            g = tiny_graph() if name == "tiny" else build_graph(name)
            cache[name, preset] = (g, compile_nvdla(g, preset))
        return cache[name, preset]

    yield get
    for _, m in cache.values():
        m.close()

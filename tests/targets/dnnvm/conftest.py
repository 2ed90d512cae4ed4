"""Helpers for the dnnvm tests: layers lowered alone and run on the simulator, and small zoo
networks compiled for each preset."""
from __future__ import annotations

import numpy as np
import pytest

from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.passes.calibrate import random_samples
from retarget.targets.dnnvm.config import PRESETS
from retarget.targets.dnnvm.lower import Lowering
from retarget.targets.dnnvm.sim import Simulator

# Test sizes (small inputs, reduced widths); channel counts still cross ic_p / oc_p.
NETS = {
    "resnet18": dict(size=32, width=0.25),
    "resnet50": dict(size=32, width=0.125),
    "vgg11": dict(size=32, width=0.125),
    "googlenet": dict(size=32, width=0.125),
    "mobilenet_v1": dict(size=32, width=0.25),
    "unet": dict(size=16, width=0.25),
}


def build_graph(name: str, **extra):
    kw = dict(NETS[name], num_classes=10, seed=0)
    kw.update(extra)
    return import_model(zoo.build(name, **kw))


def samples(graph, count: int = 1, seed: int = 1):
    return random_samples(graph, count, seed)


def nhwc(x):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def run_lowered(cfg, build, arrays: dict[str, np.ndarray], out_shape):
    """Lower with `build(ctx, maps, y)` into a fresh Lowering whose inputs are `arrays` (NCHW
    int8) and output y; run on the simulator; (NCHW output, program, counters)."""
    ctx = Lowering(cfg)
    maps = {k: ctx.input(k, a.shape) for k, a in arrays.items()}
    y = ctx.feature_map("y", out_shape)
    build(ctx, maps, y)
    program = ctx.finish()
    img = program.dram_image({**ctx.constants, **{k: nhwc(a) for k, a in arrays.items()}})
    counters = Simulator(cfg, img).run(program.insns)
    return program.read(img, "y").transpose(0, 3, 1, 2), program, counters


@pytest.fixture(params=sorted(PRESETS))
def preset(request):
    return PRESETS[request.param]

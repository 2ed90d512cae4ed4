"""--per-layer on dnnvm: every value the stream leaves in a DRAM buffer of its own is read back
and compared with the reference; a corrupted weight is named by the first value it spoils."""
from __future__ import annotations

import numpy as np
import pytest

import retarget
from retarget.runtime.per_layer import check_layers, format_checks

from .conftest import build_graph, samples


@pytest.mark.parametrize("name", ["resnet18", "googlenet"])
@pytest.mark.parametrize("fusion", ["none", "optimized"])
def test_every_stored_value_equals_the_reference(name, fusion):
    g = build_graph(name)
    m = retarget.compile(g, "dnnvm", calibration=samples(g, 2), fusion=fusion)
    checks = check_layers(m, samples(g)[0])
    assert len(checks) > 5 and all(c.ok for c in checks), format_checks(checks)
    stored = {c.value for c in checks}
    assert {v.name for r in m.offloaded for v in r.outputs} <= stored


def test_a_corrupted_weight_is_named(tmp_path):
    g = build_graph("resnet18")
    m = retarget.compile(g, "dnnvm", calibration=samples(g, 2), fusion="none")
    (kernel,) = [m.kernels[r.name] for r in m.offloaded]
    # the weights of layer2.0.conv1, the 6th convolution: output channel 0 all at 127
    key = next(k for k in kernel.constants if k.startswith("/layer2.0.conv1/") and
               kernel.constants[k].dtype == np.int8)
    w = kernel.constants[key].copy()
    w.reshape(w.shape[0], -1)[0] = 127
    kernel.constants[key] = w
    checks = check_layers(m, samples(g)[0])
    bad = next(c for c in checks if not c.ok)
    assert "layer2.0" in bad.value and "conv1" in m.graph.producers()[
        next(v for v in m.graph.values() if v.name == bad.value)].name
    assert all(c.ok for c in checks[:checks.index(bad)])
    assert "first layer that differs" in format_checks(checks)


def test_a_kernel_without_recorded_buffers_says_so():
    g = build_graph("resnet18")
    m = retarget.compile(g, "dnnvm", calibration=samples(g, 2))
    for r in m.offloaded:
        m.kernels[r.name].maps = None        # as in an artifact saved before --per-layer
    with pytest.raises(NotImplementedError, match="records no intermediate buffers"):
        check_layers(m, samples(g)[0])

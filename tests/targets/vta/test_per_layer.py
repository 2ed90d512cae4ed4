"""--per-layer on vta: the values a stream stores to DRAM buffers of their own are read back
and compared; a corrupted weight is named by the first value it spoils."""
from __future__ import annotations

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.runtime.per_layer import check_layers


def test_vta_corrupted_weight_is_named():
    g = import_model(zoo.build("resnet18", size=32, num_classes=10, width=0.25))
    rng = np.random.default_rng(0)
    x = {"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    m = retarget.compile(g, "vta", calibration=rng.standard_normal((2, 3, 32, 32)).astype(
        np.float32))
    checks = check_layers(m, x)
    assert len(checks) > 10 and all(c.ok for c in checks)
    kernel = next(m.kernels[r.name] for r in m.offloaded
                  if any(n.name == "/layer3.0.conv1/Conv" for n in r.nodes))
    key = next(k for k in kernel.constants if k.startswith("/layer3.0.conv1/Conv/w"))
    w = kernel.constants[key].copy()
    w.reshape(-1)[:w.size // max(1, w.shape[0])] = 127      # a block of packed weights
    kernel.constants[key] = w
    checks = check_layers(m, x)
    bad = next(c for c in checks if not c.ok)
    assert bad.value.startswith("/layer3.0.relu/") or "layer3.0" in bad.value
    assert all(c.ok for c in checks[:checks.index(bad)])

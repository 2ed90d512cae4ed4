"""AlexNet with its LRN layers runs wholly on nvdla: QLrn on the CDP, bit-exact, per layer."""
from __future__ import annotations

import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.runtime.per_layer import check_layers
from retarget.ops.reference import run_graph
from retarget.targets.nvdla.disasm import disassemble


@pytest.mark.parametrize("config", ["nv_small", "nv_full"])
def test_alexnet_lrn_on_the_cdp(config):
    g = import_model(zoo.build("alexnet", size=64, num_classes=10, width=0.25))
    rng = np.random.default_rng(0)
    m = retarget.compile(g, f"nvdla:{config}",
                         calibration=rng.standard_normal((2, 3, 64, 64)).astype(np.float32))
    assert [n.op for n in m.graph.nodes].count("QLrn") == 2
    assert all(r.target == "nvdla" for r in m.regions if any(n.op == "QLrn" for n in r.nodes))
    x = {"input": rng.standard_normal((1, 3, 64, 64)).astype(np.float32)}
    np.testing.assert_array_equal(m.run(x)["output"], run_graph(m.graph, x)["output"])
    checks = check_layers(m, x)
    assert all(c.ok for c in checks) and sum("lrn" in c.layer for c in checks) == 2
    (kernel,) = [m.kernels[r.name] for r in m.offloaded]
    listing = disassemble(kernel.program.loadable)
    assert listing.count("CDP ") == 2 and "lrn size 5" in listing
    t = kernel.timing()
    assert t.busy["CDP"] > 0

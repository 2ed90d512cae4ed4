"""The int8 convolution micro-kernels of the `c` target (kernels/int8.c, int8_dot.c) against
the integer reference's naive loops (ops/nn.py Conv, ops/quantized.py Requantize /
RequantizeMul), on layers drawn to hit their edges: input channels not a multiple of 4 (the
padded quad), output channels not a multiple of the 8- or 32-channel tiles, maps whose flat
positions end inside a 16-lane vector or between two of a tile's three, rows narrower than a
vector and wider than several, windows 1 x 1 to 3 x 2, strides 1 and 2, inputs padded by the
layer's own input rewrite (a Pad before it), and output stages by
right and left shifts, half-up and half-even, by multipliers (negative ones too), clipped and
not, or none (int32 results). In the vector build with this machine's instructions (AVX-512
VNNI / BW where it has them: the masked loads and stores, vpdpbusd), on x86 the same without
VNNI (vpdpbusd's sums from vpmaddwd), in the generic vector build and in the portable one."""
from __future__ import annotations

import platform
import shutil

import numpy as np
import pytest

import retarget
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.ops.reference import run_graph
from retarget.passes.infer_shapes import infer_shapes

from .test_int8 import BUILDS

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

KERNEL_BUILDS = dict(BUILDS)
if platform.machine() in ("x86_64", "AMD64"):
    KERNEL_BUILDS["native-no-vnni"] = "-O1 -march=native -mno-avx512vnni -mno-avxvnni -std=c99"

# (C, K, H, W, R, S, stride, group): layers of one image (two for the layers in BATCH2)
LAYERS = [
    (5, 13, 9, 7, 3, 3, 1, 1),      # 3x3 on 63 positions: rt_conv_s8_dot (tiny map)
    (7, 11, 10, 11, 3, 3, 1, 1),    # 3x3 on 72 flat positions: rt_conv_s8_flat, a 2-vector tail
    (6, 9, 1, 17, 1, 1, 1, 1),      # 1x1 on 17 positions: one full vector and one lane
    (3, 16, 12, 13, 1, 1, 1, 1),    # 1x1 on 156 positions: three full tiles and a 1-vector tail
    (9, 20, 12, 21, 3, 2, 1, 1),    # 3x2 window, rows wider than a vector
    (4, 40, 11, 9, 2, 2, 2, 1),     # stride 2: rt_conv_s8_dot, 40 channels = 32 + a partial block
    (6, 6, 9, 33, 3, 3, 1, 6),      # depthwise: two full 16-column vectors and a 1-column tail
    (5, 5, 11, 40, 3, 3, 2, 5),     # depthwise stride 2: masked even-byte loads
    (3, 3, 7, 20, 2, 3, 3, 3),      # depthwise stride 3 (gathered lanes)
]
# output stages: ("shift", rounding, lo, hi) per-channel shifts (some left, some zero),
# ("mul", rounding, lo, hi) per-channel multipliers (some negative) and shifts, or None
BATCH2 = (1, 5)                     # a flat and a dot layer over two images
STAGES = [("shift", "half_up", -128, 127), ("shift", "half_even", -100, 90),
          ("mul", "half_up", -128, 127), ("mul", "half_even", 0, 127), None]


def _layers_graph(rng: np.random.Generator) -> tuple[Graph, dict]:
    nodes, inputs, outputs, feed = [], [], [], {}
    for i, (c, k, h, w, r, s, stride, g) in enumerate(LAYERS):
        for j, stage in enumerate(STAGES):
            hp, wp = h + r - 1, w + s - 1
            # with the second stage, a group-1 layer's input is padded by a Pad node (1 row
            # above, 2 columns left, 1 right) that the layer's input rewrite does itself
            pad = j == 1 and g == 1 and hp > 1 and wp > 3
            n = 2 if i in BATCH2 else 1
            x = Value(f"x{i}_{j}", TensorType((n, c, hp - pad, wp - 3 * pad), "int8"))
            inputs.append(x)
            feed[x.name] = rng.integers(-128, 128, x.type.shape).astype(np.int8)
            if pad:
                padded = Value(f"xp{i}_{j}")
                nodes.append(Node("Pad", f"pad{i}_{j}", [x, constant(
                    f"pads{i}_{j}", np.array([0, 0, 1, 2, 0, 0, 0, 1], np.int64))], [padded], {}))
                x = padded
            wt = constant(f"w{i}_{j}", rng.integers(-128, 128, (k, c // g, r, s)).astype(np.int8))
            b = constant(f"b{i}_{j}", rng.integers(-5000, 5000, k).astype(np.int32))
            acc = Value(f"acc{i}_{j}")
            nodes.append(Node("Conv", f"conv{i}_{j}", [x, wt, b], [acc],
                              {"group": g, "strides": [stride, stride]}))
            if stage is None:
                outputs.append(acc)
                continue
            kind, rounding, lo, hi = stage
            # accumulators are ~74 * 74 * sqrt(taps) large: shifts around 6 below that keep
            # most results inside the int8 range; the first channels shift left / not at all
            taps = c // g * r * s
            base = int(np.log2(74 * 74 * np.sqrt(taps))) - 6
            shifts = rng.integers(base - 1, base + 2, k)
            y = Value(f"y{i}_{j}")
            if kind == "shift":
                shifts[:2] = [-1, 0]
                nodes.append(Node("Requantize", f"rq{i}_{j}",
                                  [acc, constant(f"s{i}_{j}", shifts.astype(np.int32))], [y],
                                  {"axis": 1, "rounding": rounding, "lo": lo, "hi": hi}))
            else:
                muls = rng.integers(1, 1 << 15, k)
                muls[0] = -muls[0]
                nodes.append(Node("RequantizeMul", f"rq{i}_{j}",
                                  [acc, constant(f"m{i}_{j}", muls.astype(np.int32)),
                                   constant(f"s{i}_{j}", (shifts + 15).astype(np.int32))],
                                  [y], {"axis": 1, "rounding": rounding, "lo": lo, "hi": hi}))
            outputs.append(y)
    return infer_shapes(Graph(nodes, inputs, outputs, name="int8_kernels")), feed


@pytest.mark.parametrize("build", sorted(KERNEL_BUILDS))
def test_int8_conv_kernels_match_the_reference_loops(build):
    graph, feed = _layers_graph(np.random.default_rng(11))
    module = retarget.compile(graph, "c", config={"cflags": KERNEL_BUILDS[build],
                                                  "openmp": False})
    try:
        assert all(p.placement == "c" for p in module.report.nodes), \
            [(p.name, p.reason) for p in module.report.nodes if p.placement != "c"]
        routines = [c.routine.name for k in module.kernels.values()
                    for c in k.program.calls if c.routine is not None]
        # every kernel runs: the flat one, the dot one, the depthwise one, each fused or not
        assert routines.count("rt_conv_s8_flat") == 4 * len(STAGES), routines
        assert routines.count("rt_conv_s8_dot") == 2 * len(STAGES), routines
        assert routines.count("rt_dwconv_s8") == 3 * len(STAGES), routines
        assert "rt_pad_s8" not in routines            # 5 pads done by the layers' rewrites
        assert sum(n.op == "Pad" for n in graph.nodes) == 5
        out, ref = module.run(feed), run_graph(graph, feed)
        for name in ref:
            assert out[name].dtype == ref[name].dtype
            np.testing.assert_array_equal(out[name], ref[name], err_msg=name)
        # the stages saturate some values and not all (the test sees the rounding)
        y = np.concatenate([ref[v.name].reshape(-1) for v in graph.outputs
                            if ref[v.name].dtype == np.int8])
        assert 0.001 < np.mean((y == 127) | (y == -128) | (y == 0) | (y == 90)) < 0.5
    finally:
        module.close()

"""The `c` target's int8 mode (targets/c/routines_int8.py, kernels/int8.c): every zoo network
of the float tests, quantised with power-of-two scales (shifts) and with multiplier + shift
scales, runs its integer ops as generated C bit-exactly with the integer reference, in the
vector build and in the portable one; and the integer primitives against the reference on
the values where rounding matters (ties, negative numbers, left shifts, saturation)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph

from .test_networks import NETS

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

# "native": this machine's vector width and instructions (AVX-512 VNNI's vpdpbusd where it
# has them); "vector": the generic vector extensions; "portable": plain C99
BUILDS = {"vector": "-O1 -std=c99", "portable": "-O1 -std=c99 -DRT_PORTABLE",
          "native": "-O1 -march=native -std=c99"}
# ONNX's own QuantizeLinear / DequantizeLinear with per-axis scales and QLrn have no routine:
# (AlexNet's LRN stays on the CPU reference; the multiplier flow's one-scale entry and exit run
# on rt_quantize_linear / rt_dequantize_linear)
ON_CPU_OK = {"QuantizeLinear", "DequantizeLinear", "QLrn"}


def _quantized(name: str, scales: str) -> Graph:
    g = import_model(zoo.build(name, **NETS[name]))
    v = g.inputs[0]
    cal = [{v.name: np.random.default_rng(i).standard_normal(v.type.shape).astype(np.float32)}
           for i in range(2)]
    return retarget.quantize(g, cal, per_channel=True, scales=scales)


def _check_bit_exact(graph: Graph, cflags: str) -> set[str]:
    module = retarget.compile(graph, "c", config={"cflags": cflags, "openmp": False})
    try:
        on_cpu = {p.op for p in module.report.nodes if p.placement != "c"}
        assert on_cpu <= ON_CPU_OK, [(p.name, p.reason) for p in module.report.nodes
                                     if p.placement != "c"]
        v = graph.inputs[0]
        x = {v.name: 2 * np.random.default_rng(5).standard_normal(v.type.shape).astype(np.float32)}
        out, ref = module.run(x), run_graph(graph, x)
        for k in ref:
            np.testing.assert_array_equal(out[k], ref[k], err_msg=k)
        return {p.op for p in module.report.nodes if p.placement == "c"}
    finally:
        module.close()


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("name", sorted(NETS))
def test_int8_network_is_bit_exact_pow2(name, build):
    ops = _check_bit_exact(_quantized(name, "pow2"), BUILDS[build])
    assert {"Conv", "Requantize"} <= ops


@pytest.mark.parametrize("name", sorted(NETS))
def test_int8_network_is_bit_exact_multiplier(name):
    ops = _check_bit_exact(_quantized(name, "multiplier"), BUILDS["vector"])
    assert {"Conv", "RequantizeMul"} <= ops


def _elementwise_graph() -> Graph:
    """Requantize by shifts (right with ties, and left), RequantizeMul per tensor with
    half-even rounding, QAdd and QAddMul (half even), on inputs that hit every rounding case."""
    acc = Value("acc", TensorType((1, 4, 3, 5), "int32"))
    a = Value("a", TensorType((1, 4, 3, 5), "int8"))
    b = Value("b", TensorType((1, 4, 3, 5), "int8"))
    shifts = constant("shifts", np.array([3, 1, 0, -2], np.int32))
    x8 = Value("x8", TensorType((1, 5, 6, 7), "int8"))
    rng = np.random.default_rng(2)
    # small values, so that left-shifted channels do not all saturate
    w1 = constant("w1", rng.integers(-4, 5, (40, 5, 3, 3)).astype(np.int8))
    w2 = constant("w2", rng.integers(-127, 128, (33, 5, 1, 2)).astype(np.int8))
    b1 = constant("b1", rng.integers(-30, 30, 40).astype(np.int32))
    conv_shifts = constant("conv_shifts", np.tile(np.arange(-2, 6), 5).astype(np.int32))
    w3 = constant("w3", rng.integers(-127, 128, (10, 1, 3, 3)).astype(np.int8))
    w4 = constant("w4", rng.integers(-127, 128, (5, 1, 3, 2)).astype(np.int8))
    acc1, acc2 = Value("acc1"), Value("acc2")
    outs = [Value(n) for n in ("r1", "r2", "q1", "q2", "c1", "c2", "g3", "dw4")]
    nodes = [
        # grouped (2 outputs per group: the general routine) and depthwise, int32 results
        Node("Conv", "conv3", [x8, w3], [outs[6]], {"group": 5}),
        Node("Conv", "conv4", [x8, w4], [outs[7]], {"group": 5, "strides": [1, 2]}),
        # convs with their output stage fused: per-channel shifts (some left, half even) over a
        # full and a partial block of channels; a per-tensor multiplier at stride 2
        Node("Conv", "conv1", [x8, w1, b1], [acc1], {}),
        Node("Requantize", "conv1_rq", [acc1, conv_shifts], [outs[4]],
             {"axis": 1, "rounding": "half_even", "lo": -100, "hi": 100}),
        Node("Conv", "conv2", [x8, w2], [acc2], {"strides": [2, 2]}),
        Node("RequantizeMul", "conv2_rq", [acc2], [outs[5]],
             {"multiplier": 7, "shift": 5, "rounding": "half_even"}),
        Node("Requantize", "req", [acc, shifts], [outs[0]], {"axis": 1}),
        Node("RequantizeMul", "reqm", [acc], [outs[1]],
             {"multiplier": 3, "shift": 2, "rounding": "half_even", "lo": -100, "hi": 90}),
        Node("QAdd", "qadd", [a, b], [outs[2]], {"shift_a": 2, "shift_b": 0, "out_shift": 2}),
        Node("QAddMul", "qaddm", [a, b], [outs[3]],
             {"mul_a": 128, "mul_b": -64, "shift": 8, "rounding": "half_even"}),
    ]
    return infer_shapes(Graph(nodes, [acc, a, b, x8], outs, name="int8_ops"))


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_int8_primitives_round_like_the_reference(build):
    g = _elementwise_graph()
    rng = np.random.default_rng(1)
    # ties of a shift by 3 (4 mod 8) and by 1 (odd), of 3 * acc >> 2 (2 mod 4), saturation
    ties = np.array([-12, -4, -3, -1, 1, 3, 4, 12, -20, 2, 6, -2, -6, 10, 1000], np.int32)
    acc = np.concatenate([np.tile(ties, 3), rng.integers(-2**20, 2**20, 15)]).astype(np.int32)
    x = {"acc": acc.reshape(1, 4, 3, 5),
         "a": rng.integers(-128, 128, (1, 4, 3, 5)).astype(np.int8),
         "b": rng.integers(-128, 128, (1, 4, 3, 5)).astype(np.int8)}
    x["a"].flat[:4] = [-128, 127, -1, 1]
    x["x8"] = rng.integers(-4, 5, (1, 5, 6, 7)).astype(np.int8)
    module = retarget.compile(g, "c", config={"cflags": BUILDS[build], "openmp": False})
    try:
        assert all(p.placement == "c" for p in module.report.nodes)
        out, ref = module.run(x), run_graph(g, x)
        for k in ref:
            np.testing.assert_array_equal(out[k], ref[k], err_msg=k)
    finally:
        module.close()


def test_generate_c_gives_the_int8_project_outside_a_module(tmp_path):
    """generate_c: the C project of a quantised graph, built with its own Makefile and run
    by its own `model` runner on raw files, bit-exact with the reference."""
    import subprocess
    from retarget.passes import rewrite_for
    from retarget.targets.c import CConfig, CTarget, generate_c
    graph = _quantized("resnet18", "pow2")
    cfg = CConfig(cflags="-O1 -std=c99", openmp=False)
    project = generate_c(rewrite_for(graph, CTarget(cfg)), cfg)
    routines = {c.routine.name for c in project.program.calls if c.routine is not None}
    assert {"rt_conv_s8_dot", "rt_quantize_p2", "rt_qadd_s8", "rt_pool_s8"} <= routines
    d = project.write(tmp_path / "r18")
    subprocess.run(["make", "model", "CFLAGS=-O1 -std=c99"], cwd=d, check=True,
                   capture_output=True)
    v = graph.inputs[0]
    x = np.random.default_rng(4).standard_normal(v.type.shape).astype(np.float32)
    x.tofile(d / "x.bin")
    subprocess.run(["./model", "weights.bin", "x.bin", "y.bin"], cwd=d, check=True,
                   capture_output=True)
    (name, ref), = run_graph(graph, {v.name: x}).items()
    out = np.fromfile(d / "y.bin", dtype=ref.dtype).reshape(ref.shape)
    np.testing.assert_array_equal(out, ref)


def test_generate_c_names_the_nodes_it_cannot_run():
    from retarget.errors import TargetError
    from retarget.passes import rewrite_for
    from retarget.targets.c import CTarget, generate_c
    g = _quantized("alexnet", "multiplier")      # QLrn has no routine
    with pytest.raises(TargetError, match="cannot run as C.*QLrn"):
        generate_c(rewrite_for(g, CTarget()))


def _movement_graph() -> Graph:
    """int8 data movement as vta's window packing adds it (Gather of windows by constant
    index tables, a rank-6 and a rank-5 Transpose), plus negative indices, a scalar index, the
    default (reversed) permutation, and a float Gather by int64 indices beside them."""
    x = Value("x", TensorType((1, 3, 9, 8), "int8"))
    f = Value("f", TensorType((4, 6), "float32"))
    cols = constant("cols", (np.arange(3)[:, None] + 2 * np.arange(3)[None, :]).astype(np.int64))
    rows = constant("rows", (np.arange(3)[:, None] + 2 * np.arange(4)[None, :]).astype(np.int64))
    neg = constant("neg", np.array([-1, 0, -3, 2], np.int64))
    one = constant("one", np.array(-2, np.int64))
    prog = constant("prog", np.array([0, 2, 4], np.int64))
    v = [Value(n) for n in ("c", "r", "t6", "t5", "n", "s", "rev", "fg")]
    nodes = [
        Node("Gather", "g_cols", [x, cols], [v[0]], {"axis": 3}),          # [1,3,9,3,3]
        Node("Gather", "g_rows", [v[0], rows], [v[1]], {"axis": 2}),       # [1,3,3,4,3,3]
        Node("Transpose", "t6", [v[1]], [v[2]], {"perm": [0, 2, 4, 1, 3, 5]}),
        Node("Transpose", "t5", [v[0]], [v[3]], {"perm": [0, 3, 1, 2, 4]}),
        Node("Gather", "g_neg", [x, neg], [v[4]], {"axis": 1}),
        Node("Gather", "g_one", [x, one], [v[5]], {"axis": -1}),
        Node("Transpose", "t_rev", [x], [v[6]], {}),
        Node("Gather", "g_float", [f, prog], [v[7]], {"axis": 1}),
    ]
    return infer_shapes(Graph(nodes, [x, f], v[2:], name="int8_movement"))


@pytest.mark.parametrize("build", ["vector", "portable"])
def test_int8_gather_and_transpose_run_as_c(build):
    from retarget.targets.c.routines_int8 import int8_support
    g = _movement_graph()
    rng = np.random.default_rng(3)
    x = {"x": rng.integers(-128, 128, (1, 3, 9, 8)).astype(np.int8),
         "f": rng.standard_normal((4, 6)).astype(np.float32)}
    module = retarget.compile(g, "c", config={"cflags": BUILDS[build], "openmp": False})
    try:
        assert all(p.placement == "c" for p in module.report.nodes), \
            [(p.name, p.reason) for p in module.report.nodes]
        routines = {c.routine.name for k in module.kernels.values()
                    for c in k.program.calls if c.routine is not None}
        assert {"rt_gather_s8", "rt_transpose_s8"} <= routines
        out, ref = module.run(x), run_graph(g, x)
        for k in ref:
            assert out[k].dtype == ref[k].dtype
            np.testing.assert_array_equal(out[k], ref[k], err_msg=k)
    finally:
        module.close()
    # an index outside the axis is refused with its reason, not copied out of bounds
    bad = _movement_graph()
    node = next(n for n in bad.nodes if n.name == "g_neg")
    node.inputs[1].const = np.array([0, 3], np.int64)
    assert int8_support(node) == "indices outside [-3, 3)"

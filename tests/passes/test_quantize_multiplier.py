"""quantize(scales="multiplier"): the int8 format with float32 scales, requantised by an
integer multiplier and a right shift (RequantizeMul / QAddMul). Structure of the integer graph,
agreement with float on zoo networks (against the pow2 quantiser on the same data),
per-channel constants, folded activations, Concat alignment, and multiplier_shift itself."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from retarget import data, run, zoo
from retarget.errors import InputError
from retarget.frontend.onnx import import_model, load_onnx
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.verify import verify
from retarget.ops.quantized import MAX_MULTIPLIER, multiplier_shift
from retarget.passes.infer_shapes import infer_shapes
from retarget.passes.quantize import quantize, quantize_with_info
from retarget.ops.reference import run_graph

POW2_OPS = {"QuantizeP2", "DequantizeP2", "QAdd"}


def rel_error(want, got):
    want, got = want.astype(np.float64), got.astype(np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def zoo_case(name):
    """A zoo network at width 0.25 with 8 calibration and 4 test samples (seeded)."""
    g = import_model(zoo.build(name, size=32, num_classes=10, width=0.25))
    rng = np.random.default_rng(0)
    shape = tuple(g.inputs[0].type.shape[1:])
    return (g, rng.standard_normal((8,) + shape).astype(np.float32),
            rng.standard_normal((4,) + shape).astype(np.float32))


def worst_error(g, q, test):
    """The largest relative L2 error of q's output against g's over the test samples."""
    errs = []
    for i in range(len(test)):
        x = {g.inputs[0].name: test[i:i + 1]}
        errs.append(rel_error(run_graph(g, x)[g.outputs[0].name],
                              run_graph(q, x)[g.outputs[0].name]))
    return max(errs)


@pytest.fixture(scope="module")
def resnet():
    g, calib, test = zoo_case("resnet18")
    return g, calib, test, quantize_with_info(g, calib, scales="multiplier")


def test_multiplier_graph_uses_only_multiplier_ops(resnet):
    g, _, _, q = resnet
    verify(q.graph)
    ops = [n.op for n in q.graph.nodes]
    assert not POW2_OPS & set(ops)
    assert all(n.attrs.get("shift") == 0 for n in q.graph.nodes if n.op == "Requantize")
    # 20 convs + fc + the global average pool (SumPool, then the converter divides)
    assert ops.count("QAddMul") == 8 and ops.count("RequantizeMul") == 22
    assert ops.count("SumPool") == 1 and "GlobalAveragePool" not in ops
    assert "BatchNormalization" not in ops and "Relu" not in ops
    # names stay traceable, as in the pow2 format
    names = {n.name for n in q.graph.nodes}
    for n in g.nodes:
        if n.op == "Conv":
            assert n.name in names and f"{n.name}/requant" in names
    # float boundaries are ONNX ops with a float32 scale and an int8 zero point 0, whose scale
    # is the one reported for the value
    assert not q.frac_bits and q.scales
    for n in q.graph.nodes:
        if n.op in ("QuantizeLinear", "DequantizeLinear"):
            scale, zp = n.inputs[1], n.inputs[2]
            assert scale.const.dtype == np.float32 and scale.const.shape == ()
            assert zp.const.dtype == np.int8 and zp.const == 0
    x = g.inputs[0]
    quant = q.graph.node(f"{x.name}/quant")
    assert quant.op == "QuantizeLinear" and quant.outputs[0].name == f"{x.name}_q"
    assert float(quant.inputs[1].const) == q.scales[x.name]
    assert [v.name for v in q.graph.outputs] == [v.name for v in g.outputs]
    assert q.graph.outputs[0].type.dtype == "float32"


def test_scales_are_float32_max_over_127(resnet):
    g, calib, _, q = resnet
    x = g.inputs[0].name
    assert q.scales[x] == float(np.float32(np.abs(calib).max() / 127))
    assert all(s == float(np.float32(s)) and s > 0 for s in q.scales.values())


def test_relu_folds_into_lo_zero(resnet):
    _, _, _, q = resnet
    requants = [n for n in q.graph.nodes if n.op == "RequantizeMul"]
    adds = [n for n in q.graph.nodes if n.op == "QAddMul"]
    # the stem conv and the first conv of each of the 8 blocks are followed by a ReLU
    assert sum(n.attrs["lo"] == 0 for n in requants) == 9
    assert all(n.attrs["lo"] == 0 and n.attrs["hi"] == 127 for n in adds)  # add + ReLU
    for n in adds:
        assert 0 < n.attrs["mul_a"] <= MAX_MULTIPLIER and 0 < n.attrs["mul_b"] <= MAX_MULTIPLIER


# Worst relative L2 error of the output on the 4 test samples, measured: pow2 / multiplier
# resnet18 .117 / .083, mobilenet_v1 .032 / .028 (per channel .032 / .022), vgg11 .073 / .059
# (per channel .060 / .035), googlenet .110 / .081, unet .093 / .062. Bounds: about 1.5x.
@pytest.mark.parametrize("name, per_channel, bound", [
    ("resnet18", False, 0.13), ("mobilenet_v1", False, 0.045), ("mobilenet_v1", True, 0.035),
    ("vgg11", True, 0.055), ("googlenet", False, 0.12), ("unet", False, 0.095)])
def test_agrees_with_float_and_is_no_worse_than_pow2(name, per_channel, bound):
    g, calib, test = zoo_case(name)
    mul = quantize(g, calib, per_channel=per_channel, scales="multiplier")
    pow2 = quantize(g, calib, per_channel=per_channel, scales="pow2")
    assert not POW2_OPS & {n.op for n in mul.nodes}
    e_mul, e_pow2 = worst_error(g, mul, test), worst_error(g, pow2, test)
    assert e_mul < bound
    assert e_mul <= 1.1 * e_pow2  # finer scales: measured 0.58x - 0.88x of pow2's error


def test_per_channel_multipliers_and_shifts_are_int32_vectors():
    g, calib, _ = zoo_case("mobilenet_v1")
    q = quantize(g, calib, per_channel=True, scales="multiplier")
    requants = {n.name: n for n in q.nodes if n.op == "RequantizeMul"}
    accs = [n for n in q.nodes if n.op in ("Conv", "Gemm")]
    assert accs
    for acc in accs:
        n = requants[f"{acc.name}/requant"]
        channels = acc.outputs[0].type.shape[1]
        mults, shifts = n.inputs[1], n.inputs[2]
        assert (mults.name, shifts.name) == (f"{acc.name}.multipliers", f"{acc.name}.shifts")
        for c in (mults.const, shifts.const):
            assert c.dtype == np.int32 and c.shape == (channels,)
        assert mults.const.min() >= 0 and mults.const.max() <= MAX_MULTIPLIER
        assert shifts.const.min() >= 0 and shifts.const.max() <= 62
        assert n.attrs.get("multiplier") is None and n.attrs.get("shift") is None
        assert n.attrs["axis"] == (1 if acc.op == "Conv" else -1)
    # per tensor: attributes, no constant inputs
    pt = quantize(g, calib, scales="multiplier")
    for n in pt.nodes:
        if n.op == "RequantizeMul":
            assert len(n.inputs) == 1
            assert isinstance(n.attrs["multiplier"], int) and isinstance(n.attrs["shift"], int)


def test_gemm_alpha_beta_and_clip_fold_into_the_multiplier():
    rng = np.random.default_rng(6)
    x = Value("x", TensorType((2, 8), "float32"))
    h, y = Value("h"), Value("y")
    w = rng.standard_normal((5, 8)).astype(np.float32)
    g = infer_shapes(Graph([
        Node("Gemm", "fc", [x, constant("w", w),
                            constant("b", rng.standard_normal(5).astype(np.float32))], [h],
             {"alpha": 0.5, "beta": 2.0, "transB": 1}),
        Node("Clip", "relu6", [h, constant("lo", np.float32(0)), constant("hi", np.float32(1.5))],
             [y])], [x], [y]))
    calib = rng.standard_normal((16, 8)).astype(np.float32)
    q = quantize_with_info(g, calib, scales="multiplier")
    req = q.graph.node("fc/requant")
    s_x, s_y = q.scales["x"], q.scales["y"]
    s_w = float(np.float32(np.abs(0.5 * w.astype(np.float64)).max() / 127))
    m, s = multiplier_shift(s_x * s_w / s_y)
    assert (req.attrs["multiplier"], req.attrs["shift"]) == (int(m), int(s))
    assert req.attrs["lo"] == 0 and req.attrs["hi"] == min(127, int(np.floor(1.5 / s_y)))
    assert "alpha" not in q.graph.node("fc").attrs and "relu6" not in {n.name for n in q.graph.nodes}
    xin = {"x": calib[:2]}
    want, got = run_graph(g, xin)["y"], run_graph(q.graph, xin)["y"]
    assert got.max() <= 1.5 and got.min() >= 0
    np.testing.assert_allclose(got, want, atol=4 * s_y + 0.02)


def two_concats() -> Graph:
    """x -> three 1x1 convs a (ReLU), b (weights x10), c; Concat(a, c) and Concat(a, b) -> a
    standalone Clip. `a` takes the coarse scale of the second Concat, so the first Concat
    must realign `c`."""
    rng = np.random.default_rng(4)
    x = Value("x", TensorType((1, 2, 4, 4), "float32"))
    a0, a, b, c, cat1, cat2, y2 = (Value(n) for n in ("a0", "a", "b", "c", "cat1", "cat2", "y2"))

    def conv(name, out, k):
        return Node("Conv", name, [x, constant(f"{name}.w", (k * rng.standard_normal((3, 2, 1, 1))
                                                            ).astype(np.float32))], [out])
    nodes = [conv("conv_a", a0, 1.0), Node("Relu", "relu_a", [a0], [a]),
             conv("conv_b", b, 10.0), conv("conv_c", c, 1.0),
             Node("Concat", "cat1", [a, c], [cat1], {"axis": 1}),
             Node("Concat", "cat2", [a, b], [cat2], {"axis": 1}),
             Node("Clip", "clip", [cat2, constant("lo", np.float32(-2.0)),
                                   constant("hi", np.float32(3.0))], [y2])]
    return infer_shapes(Graph(nodes, [x], [cat1, y2]))


def test_concat_realigns_and_standalone_clip_is_an_integer_clip():
    g = two_concats()
    rng = np.random.default_rng(5)
    calib = [{"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)} for _ in range(3)]
    q = quantize_with_info(g, calib, scales="multiplier")
    sc = q.scales
    assert sc["a"] == sc["b"] == sc["cat2"] > sc["c"]
    align = q.graph.node("cat1/align1")
    assert align.op == "RequantizeMul" and sc["cat1"] == sc["cat2"]
    m, s = multiplier_shift(sc["c"] / sc["cat2"])
    assert (align.attrs["multiplier"], align.attrs["shift"]) == (int(m), int(s))
    clip = q.graph.node("clip")
    assert clip.op == "Requantize" and clip.attrs["shift"] == 0
    assert (clip.attrs["lo"], clip.attrs["hi"]) == (int(np.ceil(-2.0 / sc["cat2"])),
                                                   int(np.floor(3.0 / sc["cat2"])))
    x = {"x": calib[0]["x"]}
    want, got = run_graph(g, x), run_graph(q.graph, x)
    for name in ("cat1", "y2"):
        # an LSB or two of the coarse shared scale (the input is quantised finer)
        np.testing.assert_allclose(got[name], want[name], atol=2 * sc["cat2"])


def test_an_output_that_cancels_to_almost_zero_gets_a_reachable_scale():
    """max|y| = 1e-9 from inputs of ~0.02 per LSB would need a ratio beyond the largest
    multiplier: the output scale is coarsened until the ratio fits, not an error."""
    x = Value("x", TensorType((1, 1, 4, 4), "float32"))
    xx, y = Value("xx"), Value("y")
    g = infer_shapes(Graph([
        Node("Concat", "cat", [x, x], [xx], {"axis": 1}),
        Node("Conv", "conv", [xx, constant("w", np.array([1, -1], np.float32).reshape(1, 2, 1, 1)),
                              constant("b", np.array([1e-9], np.float32))], [y])], [x], [y]))
    calib = np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32)
    q = quantize_with_info(g, calib, scales="multiplier")
    req = q.graph.node("conv/requant")
    assert (req.attrs["multiplier"], req.attrs["shift"]) == (MAX_MULTIPLIER, 0)
    assert q.scales["y"] >= q.scales["xx"] / 127 / MAX_MULTIPLIER
    assert np.abs(run_graph(q.graph, {"x": calib[:1]})["y"]).max() <= 2e-9

def test_digits_models_keep_their_accuracy():
    """The shipped digits CNN and ViT (activation MatMuls, MatMul + bias Add, residual adds)
    on their held-out set: measured float / multiplier top-1 99.44 / 99.44 % and
    95.83 / 95.56 %."""
    x, y = data.digits_test()
    cnn = data.load_digits_model(batch=len(x))
    q = quantize(cnn, data.digits_calibration(), scales="multiplier")
    feed = {data.DIGITS_INPUT: x}
    top1 = [float((run(m, feed)[data.DIGITS_OUTPUT].argmax(1) == y).mean()) for m in (cnn, q)]
    assert top1[1] >= top1[0] - 0.01
    b = 8
    vit = load_onnx(data.DIGITS_VIT, input_shapes={"image": (b, 1, 8, 8)})
    calib = data.digits_calibration()
    q = quantize(vit, [{"image": calib[i:i + b]} for i in range(0, len(calib), b)],
                 scales="multiplier")
    ops = [n.op for n in q.nodes]
    assert ops.count("QAddMul") == 4 and not POW2_OPS & set(ops)
    top1 = [float((np.concatenate([run(m, {"image": x[i:i + b]})["logits"]
                                   for i in range(0, len(x), b)]).argmax(1) == y).mean())
            for m in (vit, q)]
    assert top1[1] >= top1[0] - 0.01


def test_pow2_is_the_default_and_unchanged(resnet):
    g, calib, test, _ = resnet
    default, pow2 = quantize_with_info(g, calib[:2]), quantize_with_info(g, calib[:2], scales="pow2")
    assert default.frac_bits == pow2.frac_bits and not pow2.scales
    assert [(n.op, n.name, [v.name for v in n.inputs], n.attrs) for n in default.graph.nodes] == \
        [(n.op, n.name, [v.name for v in n.inputs], n.attrs) for n in pow2.graph.nodes]
    assert {"QuantizeP2", "Requantize", "QAdd", "DequantizeP2"} <= {n.op for n in pow2.graph.nodes}
    x = {g.inputs[0].name: test[:1]}
    assert np.array_equal(run_graph(default.graph, x)[g.outputs[0].name],
                          run_graph(pow2.graph, x)[g.outputs[0].name])


def test_unknown_scales_is_a_clear_error(resnet):
    g, calib, _, _ = resnet
    with pytest.raises(InputError, match=r"scales='pow3'.*'pow2', 'multiplier'"):
        quantize(g, calib, scales="pow3")


@given(st.floats(min_value=1e-6, max_value=1e4))
def test_multiplier_shift_is_within_2_to_the_minus_14(ratio):
    m, s = multiplier_shift(ratio)
    assert 0 < m <= MAX_MULTIPLIER and 0 <= s <= 62
    assert abs(float(m) * 2.0 ** -int(s) - ratio) <= ratio * 2.0 ** -14


@given(st.lists(st.floats(min_value=1e-6, max_value=1e4), min_size=1, max_size=4))
@example([1.0, 8191.875])   # the largest rounds up into bit 15: the shared shift drops for both
def test_multiplier_shift_common_gives_one_shift(ratios):
    m, s = multiplier_shift(ratios, common=True)
    assert m.shape == s.shape == (len(ratios),) and len(set(s.tolist())) == 1
    assert m.max() <= MAX_MULTIPLIER and m.min() >= 0
    # the largest ratio keeps full precision; the others share its shift
    top = int(np.argmax(ratios))
    assert abs(float(m[top]) * 2.0 ** -int(s[top]) - ratios[top]) <= ratios[top] * 2.0 ** -14
    err = np.abs(m * 2.0 ** -s.astype(np.float64) - np.asarray(ratios))
    assert np.all(err <= 2.0 ** -s.astype(np.float64))


def _pool_graph(attrs: dict) -> Graph:
    """input -> Conv 3x3 -> AveragePool(attrs) -> output, float32, 8 channels of 9x9."""
    rng = np.random.default_rng(3)
    x = Value("x", TensorType((1, 4, 9, 9), "float32"))
    w = constant("w", rng.standard_normal((8, 4, 3, 3)).astype(np.float32))
    c, y = Value("c"), Value("y")
    nodes = [Node("Conv", "conv", [x, w], [c], {"pads": [1, 1, 1, 1]}),
             Node("AveragePool", "pool", [c], [y], attrs)]
    return infer_shapes(Graph(nodes, [x], [y]))


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [2, 2], "strides": [1, 1]}])
def test_average_pool_is_integer_sum_then_multiplier(attrs):
    g = _pool_graph(attrs)
    rng = np.random.default_rng(5)
    calib, test = (rng.standard_normal((n, 1, 4, 9, 9)).astype(np.float32) for n in (8, 4))
    q = quantize(g, list({"x": c} for c in calib), scales="multiplier")
    ops = [n.op for n in q.nodes]
    assert "AveragePool" not in ops and ops.count("SumPool") == 1
    pool = next(n for n in q.nodes if n.op == "SumPool")
    assert pool.name == "pool" and pool.outputs[0].type.dtype == "int32"
    (rq,) = [n for n in q.nodes if n.name == "pool/requant"]
    assert rq.op == "RequantizeMul"
    for t in test:
        assert rel_error(run_graph(g, {"x": t})["y"], run_graph(q, {"x": t})["y"]) < 0.08


def test_average_pool_with_uncounted_padding_stays_float():
    # the divisor differs at the border: not one multiplier
    g = _pool_graph({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 0})
    q = quantize(g, {"x": np.ones((1, 4, 9, 9), np.float32)}, scales="multiplier")
    assert "AveragePool" in [n.op for n in q.nodes] and "SumPool" not in [n.op for n in q.nodes]
    p2 = quantize(_pool_graph({"kernel_shape": [2, 2]}), {"x": np.ones((1, 4, 9, 9), np.float32)})
    assert "SumPool" not in [n.op for n in p2.nodes]          # pow2 unchanged


def _lrn_graph() -> Graph:
    rng = np.random.default_rng(6)
    x = Value("x", TensorType((1, 8, 10, 10), "float32"))
    w = constant("w", (0.3 * rng.standard_normal((16, 8, 3, 3))).astype(np.float32))
    c, r, y = Value("c"), Value("r"), Value("y")
    return infer_shapes(Graph([Node("Conv", "conv", [x, w], [c], {"pads": [1, 1, 1, 1]}),
                               Node("Relu", "relu", [c], [r]),
                               Node("LRN", "lrn", [r], [y], {"size": 5, "alpha": 1e-2,
                                                             "beta": 0.75, "bias": 1.0})],
                              [x], [y]))


def test_lrn_is_a_lookup_table_in_the_multiplier_format():
    g = _lrn_graph()
    rng = np.random.default_rng(7)
    calib = [{"x": rng.standard_normal((1, 8, 10, 10)).astype(np.float32)} for _ in range(4)]
    q = quantize(g, calib, scales="multiplier")
    (lrn,) = [n for n in q.nodes if n.name == "lrn"]
    assert lrn.op == "QLrn" and lrn.inputs[1].const.shape == (257,)
    assert lrn.inputs[1].const.max() == MAX_MULTIPLIER      # the table is scaled to 2**15 - 1
    for _ in range(3):
        t = {"x": rng.standard_normal((1, 8, 10, 10)).astype(np.float32)}
        assert rel_error(run_graph(g, t)["y"], run_graph(q, t)["y"]) < 0.05
    assert "LRN" in [n.op for n in quantize(g, calib).nodes]     # pow2 keeps it float

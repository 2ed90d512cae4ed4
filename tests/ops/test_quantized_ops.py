"""The integer ops' exact semantics against hand-computed cases (rounding at .5, negative
shifts, saturation, per-channel shifts) and their error messages."""
import numpy as np
import pytest

from retarget.errors import ShapeError
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph
from retarget.ops.quantized import round_shift


def run_op(op, inputs, **attrs):
    """Run one node through the reference executor (the path every target is checked on)."""
    vals = []
    feeds = {}
    for i, a in enumerate(inputs):
        if isinstance(a, tuple) and a[0] == "const":
            vals.append(constant(f"c{i}", a[1]))
        else:
            a = np.asarray(a)
            v = Value(f"x{i}", TensorType.of(a))
            feeds[v.name] = a
            vals.append(v)
    y = Value("y")
    g = Graph([Node(op, "n", vals, [y], attrs)], [v for v in vals if not v.is_const], [y])
    g = infer_shapes(g)
    return run_graph(g, feeds)["y"], g.outputs[0].type


def test_round_shift_half_up_and_half_even():
    x = np.array([5, -5, 6, -6, 7, -7, 3, -3, 1, -1])
    # x / 2 = 2.5 -2.5 3 -3 3.5 -3.5 1.5 -1.5 0.5 -0.5
    assert round_shift(x, 1).tolist() == [3, -2, 3, -3, 4, -3, 2, -1, 1, 0]
    assert round_shift(x, 1, "half_even").tolist() == [2, -2, 3, -3, 4, -4, 2, -2, 0, 0]
    assert round_shift(np.array([5, -5]), -3).tolist() == [40, -40]
    assert round_shift(np.array([5, -5]), 0).tolist() == [5, -5]


def test_requantize_rounding_saturation_and_relu():
    acc = np.array([[383, 384, -384, -385, 100000, -100000, 0, 255]], np.int32)
    y, t = run_op("Requantize", [acc], shift=8)
    # 383/256 = 1.496 -> 1; 384/256 = 1.5 -> 2 (half up); -1.5 -> -1; -1.504 -> -2; saturate.
    assert y.tolist() == [[1, 2, -1, -2, 127, -128, 0, 1]]
    assert y.dtype == np.int8 and t.dtype == "int8"
    y, _ = run_op("Requantize", [acc], shift=8, lo=0, hi=127)
    assert y.tolist() == [[1, 2, 0, 0, 127, 0, 0, 1]]
    y, _ = run_op("Requantize", [np.array([3, -3, 40], np.int32)], shift=-2, axis=0)
    assert y.tolist() == [12, -12, 127]  # left shift, then saturation


def test_requantize_per_channel_shifts():
    acc = np.array([[[8]], [[8]], [[-8]]], np.int32)[None]  # N=1, C=3, H=W=1
    y, _ = run_op("Requantize", [acc, ("const", np.array([1, 3, 4], np.int32))], axis=1)
    assert y.ravel().tolist() == [4, 1, 0]  # 8/2, 8/8, -8/16 = -0.5 -> 0 (half up)


def test_requantize_rejects_bad_arguments():
    acc = np.zeros((1, 3), np.int32)
    with pytest.raises(ShapeError, match="shift"):
        run_op("Requantize", [acc])  # neither attr nor input
    with pytest.raises(ShapeError, match="per-channel shifts"):
        run_op("Requantize", [acc, ("const", np.array([1, 2], np.int32))], axis=1)
    with pytest.raises(ShapeError, match="clip range"):
        run_op("Requantize", [acc], shift=1, lo=0, hi=300)
    with pytest.raises(ShapeError, match="shift"):
        run_op("Requantize", [acc], shift=80)
    with pytest.raises(ShapeError, match="integer input"):
        run_op("Requantize", [acc.astype(np.float32)], shift=1)


def test_requantize_accumulator_overflow_is_an_error():
    acc = np.array([2**31 - 1], np.int32)
    with pytest.raises(ShapeError, match="int32"):
        run_op("Requantize", [acc], shift=4, axis=0)


def test_quantize_and_dequantize_p2():
    x = np.array([0.25, 0.375, -0.375, 0.3125, 100.0, -100.0, 0.0], np.float32)
    q, t = run_op("QuantizeP2", [x], frac_bits=3)  # * 8: 2, 3, -3, 2.5, 800, -800, 0
    assert q.tolist() == [2, 3, -3, 3, 127, -128, 0] and t.dtype == "int8"
    q, _ = run_op("QuantizeP2", [x], frac_bits=3, rounding="half_even")
    assert q.tolist()[3] == 2
    q, _ = run_op("QuantizeP2", [np.array([40.0, -41.0], np.float32)], frac_bits=-2)
    assert q.tolist() == [10, -10]  # -41/4 = -10.25
    d, t = run_op("DequantizeP2", [np.array([3, -128, 127], np.int8)], frac_bits=3)
    assert d.tolist() == [0.375, -16.0, 15.875] and t.dtype == "float32"
    with pytest.raises(Exception, match="NaN"):
        run_op("QuantizeP2", [np.array([np.nan], np.float32)], frac_bits=0)


def test_qadd_alignment_and_relu():
    a = np.array([10, -10, 100, 3], np.int8)   # frac 4: 0.625, -0.625, 6.25, 0.1875
    b = np.array([3, 3, 100, -7], np.int8)     # frac 2: 0.75, 0.75, 25, -1.75
    # common frac 4: a + (b << 2) = 22, 2, 500, -25 ; out frac 3: shift 1 -> 11, 1, 250->127, -12
    y, _ = run_op("QAdd", [a, b], shift_a=0, shift_b=2, out_shift=1)
    assert y.tolist() == [11, 1, 127, -12]
    y, _ = run_op("QAdd", [a, b], shift_a=0, shift_b=2, out_shift=1, lo=0)
    assert y.tolist() == [11, 1, 127, 0]
    with pytest.raises(ShapeError, match=">= 0"):
        run_op("QAdd", [a, b], shift_a=-1, shift_b=0, out_shift=0)


def test_integer_conv_then_requantize_matches_hand_computation():
    x = np.arange(9, dtype=np.int8).reshape(1, 1, 3, 3)
    w = np.ones((1, 1, 2, 2), np.int8)
    acc = Value("acc")
    xv = Value("x", TensorType.of(x))
    y = Value("y")
    g = Graph([Node("Conv", "conv", [xv, constant("w", w), constant("b", np.array([2], np.int32))],
                    [acc]),
               Node("Requantize", "conv/requant", [acc], [y], {"shift": 2})], [xv], [y])
    out = run_graph(infer_shapes(g), {"x": x})["y"]
    # window sums 8, 12, 20, 24 (+2) = 10, 14, 22, 26 ; / 4 = 2.5, 3.5, 5.5, 6.5 -> 3, 4, 6, 7
    assert out.ravel().tolist() == [3, 4, 6, 7]


def test_qlrn_matches_a_per_element_definition():
    """QLrn against a direct loop: the channel window's square sum, the table interpolated
    between entries (floor), the last entry beyond, then multiply and round-shift."""
    from retarget.ops.quantized import LRN_LUT_ENTRIES, qlrn
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (1, 6, 3, 2)).astype(np.int8)
    lut = np.sort(rng.integers(0, 32768, LRN_LUT_ENTRIES))[::-1].astype(np.int32)
    size, k, m, s = 3, 5, 1234, 20
    y = qlrn(x, lut, size=size, lut_shift=k, multiplier=m, shift=s, lo=-128, hi=127,
             rounding="half_up", dtype="int8")
    want = np.empty_like(y)
    for c in range(6):
        for i in range(3):
            for j in range(2):
                win = range(max(0, c - 1), min(6, c + 2))
                sq = sum(int(x[0, cc, i, j]) ** 2 for cc in win)
                e = sq >> k
                f = int(lut[-1]) if e >= LRN_LUT_ENTRIES - 1 else \
                    int(lut[e]) + ((int(lut[e + 1]) - int(lut[e])) * (sq - (e << k)) >> k)
                v = int(x[0, c, i, j]) * f * m
                want[0, c, i, j] = max(-128, min(127, (v + (1 << (s - 1))) >> s))
    np.testing.assert_array_equal(y, want)

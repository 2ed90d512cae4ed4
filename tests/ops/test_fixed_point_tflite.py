"""TFLite's fixed-point primitives against exact rational arithmetic."""
from fractions import Fraction

import numpy as np
from hypothesis import given, strategies as st

from retarget.ops.quantized_tflite import (multiply_by_quantized_multiplier,
                                           multiply_by_quantized_multiplier_single,
                                           quantize_multiplier, rounding_divide_by_pot, srdhm)

I32 = st.integers(-(1 << 31), (1 << 31) - 1)


def _round_half_away(q: Fraction) -> int:
    n = abs(q)
    r = int(n + Fraction(1, 2)) if (n - int(n)) != Fraction(1, 2) else int(n) + 1
    return r if q >= 0 else -r


def _round_half_up(q: Fraction) -> int:
    return int((q + Fraction(1, 2)).__floor__())


@given(I32, I32)
def test_srdhm_is_the_rounded_high_half_of_the_doubled_product(a, b):
    expect = (1 << 31) - 1 if a == b == -(1 << 31) else _round_half_up(Fraction(a * b, 1 << 31))
    assert int(srdhm(a, b)) == expect


@given(I32, st.integers(0, 30))
def test_srdhm_ties(a, k):
    # a * 2**k / 2**31 with a odd at k = 30 is an exact tie; ties go up
    assert int(srdhm(a, 1 << k)) == _round_half_up(Fraction(a << k, 1 << 31))


@given(I32, st.integers(0, 31))
def test_rounding_divide_by_pot_rounds_half_away_from_zero(x, e):
    assert int(rounding_divide_by_pot(x, e)) == _round_half_away(Fraction(x, 1 << e))


@given(st.floats(1e-6, 1e3))
def test_quantize_multiplier_is_a_q31_mantissa_and_exponent(real):
    m, shift = quantize_multiplier(real)
    assert (1 << 30) <= m < (1 << 31)
    assert abs(m * 2.0 ** (shift - 31) - real) <= real * 2.0 ** -30


@given(st.integers(-(1 << 20), 1 << 20), st.floats(1e-4, 0.99))
def test_both_roundings_are_within_one_of_the_exact_product(x, real):
    m, shift = quantize_multiplier(real)
    exact = Fraction(x * m, 1 << (31 - shift))
    for f in (multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_single):
        assert abs(int(f(x, m, shift)) - exact) <= 1


def test_double_rounding_differs_from_single_rounding():
    # x = 3, m = 2**30 + 1, shift -1: exact 0.75000000035; SRDHM rounds 1.5000000007 to 2,
    # then RoundingDivideByPOT(2, 1) = 1: both give 1. x = 1, m = 3 * 2**28, shift -1:
    # exact 0.1875: SRDHM gives 0 (0.375 rounded), single gives 0.
    assert int(multiply_by_quantized_multiplier_single(-1, 1 << 30, 0)) == 0
    assert int(multiply_by_quantized_multiplier(-1, 1 << 30, 0)) == 0
    # 5 * 0.75 * 2**-2 = 0.9375 -> 1 at once; SRDHM(5, 0.75) = 3.75 -> 4, then 4 / 4 = 1
    # 3 * 0.75 / 2 = 1.125 exactly -> 1; SRDHM(3, .75) = 2.25 -> 2, 2 / 2 = 1
    # 7 * (2**30 + 2**29) / 2**31 = 5.25 -> 5; / 4 -> 1.3125: single 1; double 5 / 4 -> 1
    xs = np.arange(-5000, 5000)
    m, shift = quantize_multiplier(0.3)
    single = multiply_by_quantized_multiplier_single(xs, m, shift - 3)
    double = multiply_by_quantized_multiplier(xs, m, shift - 3)
    assert np.abs(single - double).max() == 1 and (single != double).any()
    assert int(srdhm(np.int64(-(1 << 31)), -(1 << 31))) == (1 << 31) - 1

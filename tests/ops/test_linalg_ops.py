"""Gemm and MatMul: ONNX semantics, integer forms, shape rules and errors."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import ShapeError, UnsupportedOpError
from retarget.ir.types import TensorType
from retarget.ops import OPS


def run(op, *inputs, fast=False, **attrs):
    d = OPS[op]
    return d.run(list(inputs), dict(d.attrs, **attrs), fast=fast)[0]


def infer(op, *types, **attrs):
    d = OPS[op]
    types = [None if t is None else TensorType(*t) for t in types]
    return d.infer(dict(d.attrs, **attrs), types, [None] * len(types))[0]


@pytest.mark.parametrize("a,b,out", [
    ((3,), (3,), ()), ((3,), (2, 3, 4), (2, 4)), ((2, 5, 3), (3,), (2, 5)),
    ((2, 1, 4, 3), (5, 3, 2), (2, 5, 4, 2)), ((4, 3), (3, 6), (4, 6))])
@pytest.mark.parametrize("fast", [False, True])
def test_matmul_shapes_follow_numpy(a, b, out, fast):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(a).astype(np.float32), rng.standard_normal(b).astype(np.float32)
    got = run("MatMul", x, y, fast=fast)
    assert got.shape == out == infer("MatMul", (a, "float32"), (b, "float32")).shape
    np.testing.assert_allclose(got, np.matmul(x.astype(np.float64), y), rtol=1e-5, atol=1e-6)


def test_matmul_errors():
    with pytest.raises(ShapeError, match="inner dimensions 3 and 4 differ"):
        infer("MatMul", ((2, 3), "float32"), ((4, 5), "float32"))
    with pytest.raises(ShapeError, match="do not broadcast"):
        infer("MatMul", ((2, 2, 3), "float32"), ((3, 3, 1), "float32"))
    with pytest.raises(ShapeError, match="mixes integer and float"):
        infer("MatMul", ((2, 3), "int8"), ((3, 1), "float32"))


def test_integer_matmul_exact_int32():
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (3, 64)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 5)).astype(np.int8)
    for fast in (False, True):
        y = run("MatMul", a, b, fast=fast)
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y, a.astype(np.int64) @ b.astype(np.int64))
    assert infer("MatMul", ((3, 64), "int8"), ((64, 5), "int8")).dtype == "int32"


def test_gemm_all_attributes():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 3)).astype(np.float32)  # transposed: M=3, K=4
    b = rng.standard_normal((5, 4)).astype(np.float32)  # transposed: K=4, N=5
    c = rng.standard_normal((1, 5)).astype(np.float32)
    ref = 0.25 * a.T.astype(np.float64) @ b.T + 0.35 * c
    for fast in (False, True):
        y = run("Gemm", a, b, c, fast=fast, alpha=0.25, beta=0.35, transA=1, transB=1)
        assert y.shape == (3, 5) and y.dtype == np.float32
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_gemm_optional_c_and_scalar_c():
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(run("Gemm", a, b, None), np.full((2, 4), 3.0))
    np.testing.assert_array_equal(run("Gemm", a, b, np.array(2.0, np.float32), beta=0.5),
                                  np.full((2, 4), 4.0))


def test_gemm_errors():
    with pytest.raises(ShapeError, match="inner dimensions 3 and 4 differ"):
        infer("Gemm", ((2, 3), "float32"), ((4, 5), "float32"))
    with pytest.raises(ShapeError, match=r"C of shape \[3\] does not broadcast to \[2, 5\]"):
        infer("Gemm", ((2, 3), "float32"), ((3, 5), "float32"), ((3,), "float32"))
    with pytest.raises(ShapeError, match="2-D"):
        infer("Gemm", ((2, 3, 1), "float32"), ((3, 5), "float32"))
    with pytest.raises(UnsupportedOpError, match="alpha=0.5"):
        infer("Gemm", ((2, 3), "int8"), ((3, 5), "int8"), alpha=0.5)


def test_integer_gemm_with_int32_bias():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (4, 16)).astype(np.int8)
    b = rng.integers(-128, 128, (8, 16)).astype(np.int8)
    c = rng.integers(-5000, 5000, 8).astype(np.int32)
    for fast in (False, True):
        y = run("Gemm", a, b, c, fast=fast, transB=1)
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y, a.astype(np.int64) @ b.T.astype(np.int64) + c)


def test_macs():
    d = OPS["Gemm"]
    ins = [TensorType((4, 3), "float32"), TensorType((3, 5), "float32")]
    assert d.macs(dict(d.attrs), ins, d.infer(dict(d.attrs), ins, [None, None])) == 60
    d = OPS["MatMul"]
    ins = [TensorType((2, 4, 3), "float32"), TensorType((3, 5), "float32")]
    assert d.macs({}, ins, d.infer({}, ins, [None, None])) == 120

"""Matrix products: Gemm and MatMul.

Float inputs keep their dtype; the definitions accumulate in float64 while the fast paths
call BLAS in float32. Integer inputs (the int8 quantisation flow) accumulate exactly in int64
and return int32 (ShapeError if a result does not fit int32, rather than wrapping silently).
"""
from __future__ import annotations


import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.types import TensorType
from .common import broadcast_shapes
from .nn import exact_result, is_int_dtype, result_dtype
from .registry import OpDef, register


# ---- MatMul -------------------------------------------------------------------------------------
def matmul_shape(a_shape, b_shape) -> tuple[int, ...]:
    """numpy.matmul's shape rule (1-D operands get a dimension added, then removed)."""
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise ShapeError(f"MatMul operands must have rank >= 1, got {list(a_shape)} and "
                         f"{list(b_shape)}")
    a = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    if a[-1] != b[-2]:
        raise ShapeError(f"MatMul of {list(a_shape)} by {list(b_shape)}: inner dimensions "
                         f"{a[-1]} and {b[-2]} differ")
    batch = broadcast_shapes(a[:-2], b[:-2])
    out = batch + (a[-2], b[-1])
    if len(a_shape) == 1:
        out = out[:-2] + out[-1:]
    if len(b_shape) == 1:
        out = out[:-1]
    return out


def _matmul_infer(attrs, types, consts):
    a, b = types
    return [TensorType(matmul_shape(a.shape, b.shape), result_dtype("MatMul", a, b))]


def _matmul_macs(attrs, in_types, out_types) -> int:
    return out_types[0].numel * in_types[0].shape[-1]


def matmul(a, b):
    """ONNX MatMul = numpy.matmul semantics: batched, broadcasting, 1-D operands allowed."""
    matmul_shape(a.shape, b.shape)
    acc = np.int64 if is_int_dtype(a.dtype) else np.float64
    return exact_result(np.matmul(a.astype(acc), b.astype(acc)), a.dtype, "MatMul")


def matmul_fast(a, b):
    """float32 BLAS directly (the definition goes through float64)."""
    if a.dtype == np.float32 and b.dtype == np.float32:
        matmul_shape(a.shape, b.shape)
        return np.matmul(a, b)
    return matmul(a, b)


register(OpDef("MatMul", matmul, _matmul_infer, macs=_matmul_macs, fast=matmul_fast,
               num_inputs=(2, 2), doc="numpy.matmul semantics"))


# ---- Gemm ---------------------------------------------------------------------------------------
GEMM_ATTRS = dict(alpha=1.0, beta=1.0, transA=0, transB=0)


def gemm_shape(a_shape, b_shape, c_shape, transA, transB) -> tuple[int, int]:
    """(M, N) of Y = A' B' + C, checking ranks, the inner dimension and C's broadcast."""
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ShapeError(f"Gemm takes 2-D A and B, got {list(a_shape)} and {list(b_shape)}")
    m, k = a_shape[::-1] if transA else a_shape
    kb, n = b_shape[::-1] if transB else b_shape
    if k != kb:
        raise ShapeError(f"Gemm A{list(a_shape)} (transA={transA}) by B{list(b_shape)} "
                         f"(transB={transB}): inner dimensions {k} and {kb} differ")
    if c_shape is not None:
        # unidirectional: C stretches to (M, N), never the other way round
        fits = all(cd in (1, full) for cd, full in zip(tuple(c_shape)[::-1], (n, m)))
        if len(c_shape) > 2 or not fits:
            raise ShapeError(f"Gemm C of shape {list(c_shape)} does not broadcast to "
                             f"[{m}, {n}]")
    return m, n


def _gemm_check_int(a, alpha, beta):
    if is_int_dtype(a) and (alpha != 1.0 or beta != 1.0):
        raise UnsupportedOpError(f"integer Gemm with alpha={alpha}, beta={beta}: only "
                                 f"alpha=beta=1 is exact in integers")


def _gemm_infer(attrs, types, consts):
    a, b = types[0], types[1]
    c = types[2] if len(types) > 2 else None
    m, n = gemm_shape(a.shape, b.shape, None if c is None else c.shape,
                      attrs["transA"], attrs["transB"])
    _gemm_check_int(a.dtype, attrs["alpha"], attrs["beta"])
    return [TensorType((m, n), result_dtype("Gemm", a, b, c))]


def _gemm_macs(attrs, in_types, out_types) -> int:
    a = in_types[0].shape
    return out_types[0].numel * (a[0] if attrs["transA"] else a[1])


def gemm(a, b, c=None, *, alpha, beta, transA, transB):
    """Y = alpha * A' @ B' + beta * C, A' = A.T if transA, B' = B.T if transB, C broadcast."""
    gemm_shape(a.shape, b.shape, None if c is None else c.shape, transA, transB)
    _gemm_check_int(a.dtype, alpha, beta)
    acc = np.int64 if is_int_dtype(a.dtype) else np.float64
    a2 = a.astype(acc).T if transA else a.astype(acc)
    b2 = b.astype(acc).T if transB else b.astype(acc)
    if is_int_dtype(a.dtype):  # alpha = beta = 1 here, kept exact
        y = a2 @ b2 + (0 if c is None else c.astype(acc))
    else:
        y = alpha * (a2 @ b2) + (0 if c is None else beta * c.astype(acc))
    return exact_result(np.asarray(y), a.dtype, "Gemm")


def gemm_fast(a, b, c=None, *, alpha, beta, transA, transB):
    """float32 BLAS (transposes are views, so BLAS reads them in place)."""
    if not (a.dtype == b.dtype == np.float32 and (c is None or c.dtype == np.float32)):
        return gemm(a, b, c, alpha=alpha, beta=beta, transA=transA, transB=transB)
    gemm_shape(a.shape, b.shape, None if c is None else c.shape, transA, transB)
    y = (a.T if transA else a) @ (b.T if transB else b)
    if alpha != 1.0:
        y *= np.float32(alpha)
    if c is not None:
        y += c if beta == 1.0 else np.float32(beta) * c
    return y


register(OpDef("Gemm", gemm, _gemm_infer, attrs=GEMM_ATTRS, macs=_gemm_macs, fast=gemm_fast,
               num_inputs=(2, 3), doc="ONNX Gemm"))

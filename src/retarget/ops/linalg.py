"""Matrix products: Gemm, MatMul and Einsum.

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
from .registry import REQUIRED, OpDef, register


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
    a, b = types[:2]
    out = TensorType(matmul_shape(a.shape, b.shape), result_dtype("MatMul", a, b))
    if len(types) > 2 and types[2] is not None:
        _check_bias(a.dtype, types[2].dtype, tuple(types[2].shape), out.shape)
    return [out]


def _check_bias(a_dtype, bias_dtype, bias_shape, out_shape) -> None:
    """MatMul's third input is retarget's integer form only: a quantised dense layer over
    tokens keeps its bias in the int32 accumulator, one value per output feature."""
    if not is_int_dtype(a_dtype) or str(bias_dtype) != "int32":
        raise ShapeError("MatMul takes two inputs; a third (an int32 bias) exists only in "
                         "retarget's integer form, after quantisation")
    if bias_shape != (out_shape[-1],):
        raise ShapeError(f"MatMul bias of shape {list(bias_shape)}, expected "
                         f"[{out_shape[-1]}] (one per output feature)")


def _matmul_macs(attrs, in_types, out_types) -> int:
    return out_types[0].numel * in_types[0].shape[-1]


def matmul(a, b, bias=None):
    """ONNX MatMul = numpy.matmul semantics: batched, broadcasting, 1-D operands allowed.
    `bias`: retarget's integer form only, int32 per output feature added to the accumulator."""
    shape = matmul_shape(a.shape, b.shape)
    acc = np.int64 if is_int_dtype(a.dtype) else np.float64
    y = np.matmul(a.astype(acc), b.astype(acc))
    if bias is not None:
        _check_bias(a.dtype, bias.dtype, tuple(bias.shape), shape)
        y = y + bias.astype(np.int64)
    return exact_result(y, a.dtype, "MatMul")


def matmul_fast(a, b, bias=None):
    """float32 BLAS directly (the definition goes through float64)."""
    if a.dtype == np.float32 and b.dtype == np.float32 and bias is None:
        matmul_shape(a.shape, b.shape)
        return np.matmul(a, b)
    return matmul(a, b, bias)


register(OpDef("MatMul", matmul, _matmul_infer, macs=_matmul_macs, fast=matmul_fast,
               num_inputs=(2, 3), doc="numpy.matmul semantics; an int32 bias in the integer "
                                      "form"))


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


# ---- Einsum -------------------------------------------------------------------------------------
def einsum_shape(equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The output shape of ONNX Einsum (numpy.einsum's rules): each term names its operand's
    axes with letters, at most one '...' standing for the leading/middle axes it does not name
    (broadcast across operands); without '->' the output is '...' then the letters that occur
    once, in alphabetical order. ShapeError naming the term for any mismatch."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"Einsum {equation!r}: {len(terms)} term(s) for {len(shapes)} input(s)")
    sizes: dict[str, int] = {}
    ellipses = []
    counts: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        letters = term.replace("...", "")
        if not letters.isalpha() and letters or term.count("...") > 1:
            raise ShapeError(f"Einsum {equation!r}: term {term!r} must be letters with at most "
                             "one '...'")
        n_ell = len(shape) - len(letters)
        if n_ell < 0 or (n_ell and "..." not in term):
            raise ShapeError(f"Einsum {equation!r}: term {term!r} names {len(letters)} axes of "
                             f"an input of shape {list(shape)}")
        head = term.split("...")[0]
        ellipses.append(tuple(shape[len(head):len(head) + n_ell]))
        dims = list(shape[:len(head)]) + list(shape[len(head) + n_ell:])
        for ch, d in zip(letters, dims):
            if sizes.setdefault(ch, d) != d:
                raise ShapeError(f"Einsum {equation!r}: axis {ch!r} is {sizes[ch]} in one "
                                 f"input and {d} in another")
            counts[ch] = counts.get(ch, 0) + 1
    ell = broadcast_shapes(*ellipses) if ellipses else ()
    if not arrow:
        rhs = ("..." if any("..." in t for t in terms) else "") + \
            "".join(sorted(ch for ch, n in counts.items() if n == 1))
    out_letters = rhs.replace("...", "")
    unknown = [ch for ch in out_letters if ch not in sizes]
    if unknown or len(set(out_letters)) != len(out_letters) or rhs.count("...") > 1:
        raise ShapeError(f"Einsum {equation!r}: output {rhs!r} names an axis no input has "
                         "or names one twice")
    head = rhs.split("...")[0]
    return (tuple(sizes[ch] for ch in head) + (ell if "..." in rhs else ())
            + tuple(sizes[ch] for ch in out_letters[len(head):]))


def _einsum_infer(attrs, types, consts):
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ShapeError(f"Einsum inputs must share one dtype, got {sorted(dtypes)}")
    return [TensorType(einsum_shape(attrs["equation"], [t.shape for t in types]), types[0].dtype)]


def _einsum_macs(attrs, in_types, out_types) -> int:
    """Products summed: every distinct axis size once (the loop nest einsum runs)."""
    eq = attrs["equation"].replace(" ", "").split("->")[0]
    sizes: dict[str, int] = {}
    for term, t in zip(eq.split(","), in_types):
        if "..." not in term:
            sizes.update(zip(term, t.shape))
    total = out_types[0].numel
    for ch, d in sizes.items():
        if ch not in attrs["equation"].partition("->")[2]:
            total *= d
    return total


def einsum(*inputs, equation):
    """ONNX Einsum = numpy.einsum on the inputs (float accumulates in float64, integers in
    int64), in the inputs' dtype."""
    einsum_shape(equation, [x.shape for x in inputs])
    dtype = inputs[0].dtype
    acc = np.int64 if is_int_dtype(dtype) else np.float64
    y = np.einsum(equation, *(x.astype(acc) for x in inputs))
    if is_int_dtype(dtype) and y.size:
        info = np.iinfo(dtype)
        if y.min() < info.min or y.max() > info.max:
            raise ShapeError(f"Einsum {equation!r}: a result ({int(y.min())}..{int(y.max())}) "
                             f"does not fit the inputs' {dtype}")
    return y.astype(dtype)


register(OpDef("Einsum", einsum, _einsum_infer, attrs=dict(equation=REQUIRED),
               num_inputs=(1, 1 << 16), macs=_einsum_macs, doc="numpy.einsum semantics"))

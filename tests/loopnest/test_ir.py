"""The loop-nest IR itself: affine arithmetic, the interpreter, the verifier and the printer."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import GraphError, InputError
from retarget.loopnest import (Affine, Binary, Const, Copy, Kernel, Load, Loop, Store, Tensor,
                               aff, format_kernel, run_kernel, verify_kernel)


def gemm(m=4, k=8, n=5, parallel=True) -> Kernel:
    A, B, C = Tensor("A", (m, k)), Tensor("B", (k, n)), Tensor("C", (m, n))
    body = (Store(C["i", "j"], Const(0.0)),
            Loop("k", k, (Store(C["i", "j"], Binary("*", Load(A["i", "k"]), Load(B["k", "j"])), "+"),)))
    return Kernel("gemm", (A, B), (C,),
                  (Loop("i", m, (Loop("j", n, body),), "parallel" if parallel else "serial"),))


def test_affine_arithmetic_is_canonical():
    e = aff("i") * 2 + 3 - aff("j")
    assert e == Affine((("i", 2), ("j", -1)), 3)
    assert e - e == Affine()
    assert str(e) == "2*i - j + 3"
    assert e.evaluate({"i": 2, "j": 5}) == 2
    assert e.bounds({"i": 4, "j": 3}) == (1, 9)
    assert e.substitute({"i": aff("io") * 4 + "ii"}) == aff("io") * 8 + aff("ii") * 2 - "j" + 3
    with pytest.raises(TypeError):
        aff("i") * 1.5


def test_interpreter_runs_a_gemm_and_flat_offsets_are_row_major():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    k = gemm()
    verify_kernel(k)
    got = run_kernel(k, {"A": a, "B": b})["C"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert Tensor("T", (2, 3, 4))[1, "y", 2].flat() == aff("y") * 4 + 14


def test_padding_reads_the_fill_value_out_of_bounds():
    x, y = Tensor("x", (5,)), Tensor("y", (5,))
    # y[i] = x[i-1] + x[i+1], zero outside: a 1-D conv with padding 1
    body = (Loop("i", 5, (Store(y["i"], Binary("+", Load(x[aff("i") - 1], 0.0),
                                                Load(x[aff("i") + 1], 0.0))),)),)
    k = Kernel("pad", (x,), (y,), body)
    verify_kernel(k)
    got = run_kernel(k, {"x": np.arange(1, 6, dtype=np.float32)})["y"]
    assert got.tolist() == [2, 4, 6, 8, 4]
    # the same loads without fill are out of bounds: the verifier and the interpreter say so
    bad = Kernel("pad", (x,), (y,), (Loop("i", 5, (Store(y["i"], Load(x[aff("i") + 1])),)),))
    with pytest.raises(GraphError, match="ranges over 1..5"):
        verify_kernel(bad)
    with pytest.raises(InputError, match=r"index \[5\]"):
        run_kernel(bad, {"x": np.zeros(5, np.float32)})


def test_copy_into_a_local_buffer_and_back():
    x, y = Tensor("x", (4, 6)), Tensor("y", (4, 6))
    buf = Tensor("buf", (2, 6), scope="local")
    body = (Loop("io", 2, (
        Copy(buf[0, 0], x[aff("io") * 2, 0], (2, 6)),
        Loop("ii", 2, (Loop("j", 6, (Store(buf["ii", "j"], Binary("*", Load(buf["ii", "j"]), Const(2.0))),)),)),
        Copy(y[aff("io") * 2, 0], buf[0, 0], (2, 6)),
    )),)
    k = Kernel("scale", (x,), (y,), body, locals=(buf,))
    verify_kernel(k, capacity_bytes=48)
    with pytest.raises(GraphError, match="more than the 40 bytes"):
        verify_kernel(k, capacity_bytes=40)
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(run_kernel(k, {"x": a})["y"], 2 * a)


@pytest.mark.parametrize("mutate, match", [
    (lambda A, B, C: Store(A["i", 0], Const(1.0)), "writes its input"),
    (lambda A, B, C: Store(C[0, 0], Const(1.0)), "would write the same elements"),
    (lambda A, B, C: Store(C["i", "q"], Const(1.0)), "outside any loop"),
    (lambda A, B, C: Store(Tensor("Z", (4, 5))["i", 0], Const(1.0)), "not one of its parameters"),
])
def test_verifier_names_what_is_wrong(mutate, match):
    A, B, C = Tensor("A", (4, 8)), Tensor("B", (8, 5)), Tensor("C", (4, 5))
    k = Kernel("bad", (A, B), (C,), (Loop("i", 4, (mutate(A, B, C),), "parallel"),))
    with pytest.raises(GraphError, match=match):
        verify_kernel(k)


def test_rebinding_a_loop_variable_is_refused():
    C = Tensor("C", (4,))
    k = Kernel("bad", (), (C,), (Loop("i", 4, (Loop("i", 4, (Store(C["i"], Const(0.0)),)),)),))
    with pytest.raises(GraphError, match="bound twice"):
        verify_kernel(k)


def test_printer_is_readable():
    text = format_kernel(gemm())
    assert text.splitlines() == [
        "kernel gemm(A: float32[4, 8], B: float32[8, 5]) -> (C: float32[4, 5])",
        "  parallel for i in 0..4:",
        "    for j in 0..5:",
        "      C[i, j] = 0",
        "      for k in 0..8:",
        "        C[i, j] += (A[i, k] * B[k, j])",
    ]
